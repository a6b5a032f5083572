# Install rules: the header, libgdn (SONAME libgdn.so.<major>), a CMake
# package (find_package(gdn CONFIG) -> gdn::gdn, the built backends as
# components and as GDN_HAS_CUDA / GDN_HAS_HIP) and a pkg-config file.
# Included at the end of the top-level CMakeLists.txt.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(GDN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/gdn" CACHE STRING
    "Where gdnConfig.cmake is installed (relative to the prefix)")
set(GDN_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig" CACHE STRING
    "Where gdn.pc is installed (relative to the prefix)")

# On Windows a consumer of the DLL must see dllimport (gdn.h reads GDN_SHARED).
if(GDN_BUILD_SHARED)
  target_compile_definitions(gdn INTERFACE $<INSTALL_INTERFACE:GDN_SHARED>)
endif()

install(TARGETS gdn EXPORT gdnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT development
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/gdn/gdn.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gdn COMPONENT development)

# A static libgdn also carries the backends' object libraries' link
# requirements; those object files are already inside libgdn.a, so the export
# only needs them to exist as names (their link interface is re-found by
# gdnConfig.cmake: Threads, CUDA::cudart_static).
if(NOT GDN_BUILD_SHARED)
  foreach(objlib gdn_cuda_objects gdn_hip_objects)
    if(TARGET ${objlib})
      install(TARGETS ${objlib} EXPORT gdnTargets)
    endif()
  endforeach()
endif()

install(EXPORT gdnTargets NAMESPACE gdn:: FILE gdnTargets.cmake
  DESTINATION ${GDN_INSTALL_CMAKEDIR} COMPONENT development)

# The package's facts, written into gdnConfig.cmake.
foreach(fact HAVE_CUDA HAVE_HIP BUILD_SHARED)
  if(GDN_${fact})
    set(GDN_PACKAGE_${fact} TRUE)
    set(GDN_PC_${fact} 1)
  else()
    set(GDN_PACKAGE_${fact} FALSE)
    set(GDN_PC_${fact} 0)
  endif()
endforeach()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/gdnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/gdnConfig.cmake
  INSTALL_DESTINATION ${GDN_INSTALL_CMAKEDIR})
# SameMajorVersion: the major version is the SONAME, see docs/versioning.md.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/gdnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/gdnConfig.cmake ${PROJECT_BINARY_DIR}/gdnConfigVersion.cmake
  DESTINATION ${GDN_INSTALL_CMAKEDIR} COMPONENT development)

# gdn.pc finds its prefix from its own place (${pcfiledir}), so the tree stays
# valid under `cmake --install --prefix`, DESTDIR and when moved as a whole.
if(IS_ABSOLUTE "${GDN_INSTALL_PKGCONFIGDIR}")
  set(GDN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  set(GDN_PC_PREFIX "\${pcfiledir}")
  string(REPLACE "/" ";" _gdn_pc_parts "${GDN_INSTALL_PKGCONFIGDIR}")
  foreach(_part IN LISTS _gdn_pc_parts)
    if(NOT _part STREQUAL "" AND NOT _part STREQUAL ".")
      string(APPEND GDN_PC_PREFIX "/..")
    endif()
  endforeach()
endif()
foreach(dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(GDN_PC_${dir} "${CMAKE_INSTALL_${dir}}")
  else()
    set(GDN_PC_${dir} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
# What a static libgdn needs besides itself (a shared one records it itself).
set(GDN_PC_LIBS_PRIVATE "-lstdc++ -lm ${CMAKE_THREAD_LIBS_INIT}")
if(GDN_BUILD_SHARED)
  set(GDN_PC_LIBS_PRIVATE "")
elseif(GDN_HAVE_CUDA)
  if(NOT DEFINED CUDAToolkit_LIBRARY_DIR)
    find_package(CUDAToolkit REQUIRED)
  endif()
  string(APPEND GDN_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/gdn.pc.in ${PROJECT_BINARY_DIR}/gdn.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/gdn.pc
  DESTINATION ${GDN_INSTALL_PKGCONFIGDIR} COMPONENT development)
