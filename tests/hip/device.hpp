// Where the HIP kernel tests run (tests/hip/test_hip.cpp is written once):
//   gdn_tests_hip_emu   the kernels built by nvcc against the WMMA emulation,
//                       on an NVIDIA GPU (emu_cuda.cu, emulated_device.cpp)
//   gdn_tests_hip_simt  the kernels on host fibers, on the CPU (simt_kernels.cpp)
//   gdn_tests_hip       the library itself on an AMD GPU (native_device.cpp)
// The emulations launch the kernels through src/hip/launch.hpp, the same
// sequence of launches the backend makes; the native one calls the C ABI.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/internal.hpp"

namespace gdn::hiptest {

class Device {
public:
    virtual ~Device() = default;
    virtual const char* name() const = 0;
    // False for the host fibers: tests then skip their longest cases.
    virtual bool fast() const = 0;
    // The caps the dispatch sees. Emulations: a gfx1151 stand-in (wmma) or a
    // gfx1030 one (no WMMA); natively the device's own (wmma == false asks
    // for caps with the WMMA feature bit cleared).
    virtual gdn_caps_t caps(bool wmma) const = 0;

    virtual void* alloc(size_t bytes) = 0;
    virtual void release(void* p) = 0;
    virtual void upload(void* dst, const void* src, size_t bytes) = 0;
    virtual void download(void* dst, const void* src, size_t bytes) = 0;

    // One call as gdn_chunked_recurrence makes it (validation, path choice,
    // workspace filled with NaN first), waited for. *path: what ran.
    virtual gdn_status_t run(const gdn_caps_t& caps, const gdn_problem_t& problem,
                             const gdn_tensors_t& tensors, PathChoice* path) = 0;

    // D = A·B + C through the WMMA fragment layout, one tile (host arrays,
    // row-major 16x16; A, B FP16 bits). Not supported: GDN_ERROR_NOT_SUPPORTED.
    virtual gdn_status_t wmma_tile(const uint16_t* A, const uint16_t* B, const float* C,
                                   float* D) = 0;

    // WMMA operands whose lanes 16-31 did not repeat lanes 0-15 (emulations).
    virtual unsigned wmma_operand_faults() = 0;

    // Host fibers only (GDN_HIP_TEST_WAVE64): run the kernels with 64-lane waves.
    virtual void set_wave64(bool on) { (void)on; }
};

Device& device();

}  // namespace gdn::hiptest
