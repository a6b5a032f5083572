# Finds what the HIP backend needs (included by the root CMakeLists.txt when
# GDN_ENABLE_HIP is not OFF). Debian 12 packages: clang-19 lld-19 llvm-19
# libamdhip64-dev rocm-device-libs. Sets GDN_HAVE_HIP ON only when all of it
# is there; with GDN_ENABLE_HIP=ON anything missing is a configure error.
#
#   GDN_HIP_CLANG          clang++-19 (device code; knows gfx1150/1151/1201)
#   GDN_HIP_LLD            ld.lld-19 (clang links the AMDGPU code objects with it)
#   GDN_HIP_LLVM_DIS/AS    llvm-dis-19, llvm-as-19 (the missing ISA bitcode files)
#   GDN_HIP_OBJDUMP        llvm-objdump-19, GDN_HIP_READELF llvm-readelf-19 (checks)
#   GDN_HIP_RUNTIME_LIBRARY  libamdhip64
#   GDN_HIP_INCLUDE_DIR    the folder holding hip/hip_runtime_api.h
#   GDN_HIP_DEVICE_LIB_DIR the ROCm device library bitcode (ocml.bc, ...)
# GDN_HIP_ROOT (cache) adds a ROCm installation to the search (e.g. /opt/rocm).

set(GDN_HIP_ROOT "" CACHE PATH "Extra prefix searched for the HIP runtime and device libraries (e.g. /opt/rocm)")
set(_gdn_hip_prefixes ${GDN_HIP_ROOT} /usr /opt/rocm)

find_program(GDN_HIP_CLANG NAMES clang++-19)
find_program(GDN_HIP_LLD NAMES ld.lld-19)
find_program(GDN_HIP_LLVM_DIS NAMES llvm-dis-19)
find_program(GDN_HIP_LLVM_AS NAMES llvm-as-19)
find_program(GDN_HIP_OBJDUMP NAMES llvm-objdump-19)
find_program(GDN_HIP_READELF NAMES llvm-readelf-19)
find_library(GDN_HIP_RUNTIME_LIBRARY NAMES amdhip64 HINTS ${_gdn_hip_prefixes} PATH_SUFFIXES lib lib64)
find_path(GDN_HIP_INCLUDE_DIR NAMES hip/hip_runtime_api.h HINTS ${_gdn_hip_prefixes} PATH_SUFFIXES include)
find_path(GDN_HIP_DEVICE_LIB_DIR NAMES ocml.bc oclc_isa_version_1030.bc
  HINTS ${_gdn_hip_prefixes}
  PATH_SUFFIXES lib/x86_64-linux-gnu/amdgcn/bitcode amdgcn/bitcode lib/amdgcn/bitcode
  NO_DEFAULT_PATH)

set(_gdn_hip_missing "")
foreach(_var GDN_HIP_CLANG GDN_HIP_LLD GDN_HIP_LLVM_DIS GDN_HIP_LLVM_AS GDN_HIP_OBJDUMP
             GDN_HIP_READELF GDN_HIP_RUNTIME_LIBRARY GDN_HIP_INCLUDE_DIR GDN_HIP_DEVICE_LIB_DIR)
  if(NOT ${_var})
    list(APPEND _gdn_hip_missing ${_var})
  endif()
endforeach()
if(GDN_HIP_DEVICE_LIB_DIR AND NOT EXISTS "${GDN_HIP_DEVICE_LIB_DIR}/oclc_isa_version_1030.bc")
  # the template the missing gfx11/gfx12 ISA files are made from
  list(APPEND _gdn_hip_missing "${GDN_HIP_DEVICE_LIB_DIR}/oclc_isa_version_1030.bc")
endif()

if(_gdn_hip_missing)
  set(GDN_HAVE_HIP OFF)
  string(REPLACE ";" ", " _gdn_hip_missing_text "${_gdn_hip_missing}")
  set(_gdn_hip_hint "Debian: apt-get install clang-19 lld-19 llvm-19 libamdhip64-dev rocm-device-libs")
  if(GDN_ENABLE_HIP STREQUAL "ON")
    message(FATAL_ERROR "GDN_ENABLE_HIP=ON but the HIP toolchain is incomplete: missing ${_gdn_hip_missing_text} (${_gdn_hip_hint})")
  else()
    message(STATUS "HIP backend off: missing ${_gdn_hip_missing_text} (${_gdn_hip_hint})")
  endif()
else()
  set(GDN_HAVE_HIP ON)
  message(STATUS "HIP backend: ${GDN_HIP_CLANG}, ${GDN_HIP_RUNTIME_LIBRARY}, device libs ${GDN_HIP_DEVICE_LIB_DIR}")
endif()
