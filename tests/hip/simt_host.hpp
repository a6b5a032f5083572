// Host lanes for the HIP kernels' source (src/hip/arch.hpp, GDN_HIP_HOST_SIMT):
// every thread of a block is a fiber on the calling thread, switched
// cooperatively at barriers, so the kernels run unmodified on the CPU (slowly)
// with a wave of 32 (or 64) lanes, LDS as static arrays (blocks run one at a time),
// block and warp barriers, and lane exchanges through a per-warp scratch.
// Test-only: CI runs the kernels' logic here without a GPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/numeric.hpp"

namespace gdn::hip::simt {

struct Dim3 {
    unsigned x = 0, y = 0, z = 0;
};

// Per-warp exchange space of the emulated lane operations.
struct WarpScratch {
    uint32_t a[64][8];
    uint32_t b[64][8];
    uint32_t x[64];
};

const Dim3& thread_idx();
const Dim3& block_idx();
const Dim3& block_dim();
const Dim3& grid_dim();
WarpScratch& warp_scratch();

void block_barrier();  // every live thread of the block
void warp_barrier();   // every live lane of this thread's warp

// Lanes per warp: 32 (default; the WMMA kernels need it) or 64, to run the
// sequential kernel as a wave64 part would.
unsigned warp_size();
void set_warp_size(unsigned lanes);

uint32_t shfl_xor_u32(uint32_t v, int mask);
inline float shfl_xor(float v, int mask) {
    return ::gdn::bits_to_float(shfl_xor_u32(::gdn::float_to_bits(v), mask));
}

// Runs body(arg) on every thread of a 1-D grid of `grid` blocks of `block`
// threads (a multiple of 32, at most 1024), block after block. Aborts with a
// message on a deadlock (threads waiting at different barriers).
void launch(unsigned grid, unsigned block, void (*body)(const void*), const void* arg);

}  // namespace gdn::hip::simt

#define threadIdx (::gdn::hip::simt::thread_idx())
#define blockIdx (::gdn::hip::simt::block_idx())
#define blockDim (::gdn::hip::simt::block_dim())
#define gridDim (::gdn::hip::simt::grid_dim())
