// Every gfx11-specific operation the HIP kernels use, behind one small
// interface, with a second implementation that builds the SAME kernel source
// for an NVIDIA GPU (nvcc): a lane-exact emulation of the wave32 WMMA, where a
// 32-lane warp plays the wave. A third, GDN_HIP_HOST_SIMT, runs the kernels on
// the CPU with one fiber per lane (tests/hip/simt_host.hpp provides the lanes).
//
// gfx11 wave32 WMMA layout (16x16x16, f16 A/B, f32 C/D), METHOD.md:
//   lane l holds row l%16 of A and column l%16 of B (16 halfs each, element e
//   = the K index), lanes 16-31 duplicating lanes 0-15; C/D element r (0..7)
//   of lane l is row 2r + l/16, column l%16.
// A fragment's 16 halfs are packed two per 32-bit word: half e is the low
// half of word e/2 when e is even, the high half when e is odd.
#pragma once

#include <cstdint>

#if defined(__HIP_DEVICE_COMPILE__)
#define GDN_HIP_ARCH_AMDGPU 1
#include <hip/hip_runtime.h>
#elif defined(__CUDACC__)
#define GDN_HIP_ARCH_CUDA_EMULATION 1
#include <cuda_fp16.h>
#elif defined(GDN_HIP_HOST_SIMT)
#define GDN_HIP_ARCH_HOST_EMULATION 1
#include <cmath>
#include "simt_host.hpp"
#else
#error "src/hip/arch.hpp: compile as HIP device code, with nvcc, or with GDN_HIP_HOST_SIMT"
#endif

// GDN_HIP_WMMA: 1 where the WMMA kernels have a body. On AMD only the gfx11
// parts with the wave32 f16 WMMA (the builtin fails to compile on gfx1030
// and crashes the backend on gfx1201, whose WMMA is another instruction);
// elsewhere the chunked kernels are a trap that the dispatch never launches.
#if defined(GDN_HIP_ARCH_AMDGPU)
#if (defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || \
     defined(__gfx1103__) || defined(__gfx1150__) || defined(__gfx1151__)) &&   \
    __AMDGCN_WAVEFRONT_SIZE == 32
#define GDN_HIP_WMMA 1
#else
#define GDN_HIP_WMMA 0
#endif
#else
#define GDN_HIP_WMMA 1  // emulated
#endif

#if defined(GDN_HIP_ARCH_HOST_EMULATION)
#define GDN_DEVICE inline
#define GDN_KERNEL(name, max_threads) extern "C" void name
#define GDN_SHARED static
#else
#define GDN_DEVICE __device__ __forceinline__
#define GDN_KERNEL(name, max_threads) \
    extern "C" __global__ void __launch_bounds__(max_threads) name
#define GDN_SHARED __shared__
#endif

#define GDN_ALIGN16 __attribute__((aligned(16)))

namespace gdn::hip::arch {

// ------------------------------------------------------------ fragments

struct Frag16 {  // A or B operand: 16 halfs in 8 words
    uint32_t w[8];
};
struct Acc8 {  // C/D accumulator: 8 floats
    float x[8];
};

#if defined(GDN_HIP_ARCH_AMDGPU)
typedef unsigned int U32x4 __attribute__((ext_vector_type(4)));
#else
struct U32x4 {
    uint32_t x, y, z, w;
};
#endif

GDN_DEVICE uint32_t word(const U32x4& v, int i) {
#if defined(GDN_HIP_ARCH_AMDGPU)
    return v[i];
#else
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
#endif
}
GDN_DEVICE float as_float(uint32_t u) {
#if defined(GDN_HIP_ARCH_AMDGPU)
    return __builtin_bit_cast(float, u);
#elif defined(GDN_HIP_ARCH_CUDA_EMULATION)
    return __uint_as_float(u);
#else
    return ::gdn::bits_to_float(u);
#endif
}
GDN_DEVICE uint32_t as_bits(float f) {
#if defined(GDN_HIP_ARCH_AMDGPU)
    return __builtin_bit_cast(uint32_t, f);
#elif defined(GDN_HIP_ARCH_CUDA_EMULATION)
    return __float_as_uint(f);
#else
    return ::gdn::float_to_bits(f);
#endif
}
GDN_DEVICE U32x4 make_u32x4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
#if defined(GDN_HIP_ARCH_AMDGPU)
    return U32x4{a, b, c, d};
#else
    U32x4 v;
    v.x = a; v.y = b; v.z = c; v.w = d;
    return v;
#endif
}

// 16-byte loads and stores (global or LDS; p 16-byte aligned). The loaded
// value is a vector register value, not a stack copy, so a prefetch stays in
// flight until its first use (HIP's float4 copies go through a stack object,
// which waits for the load).
GDN_DEVICE U32x4 load16(const void* p) {
#if defined(GDN_HIP_ARCH_HOST_EMULATION)
    U32x4 v;
    std::memcpy(&v, p, 16);
    return v;
#else
    return *reinterpret_cast<const U32x4*>(p);
#endif
}
GDN_DEVICE void store16(void* p, const U32x4& v) {
#if defined(GDN_HIP_ARCH_HOST_EMULATION)
    std::memcpy(p, &v, 16);
#else
    *reinterpret_cast<U32x4*>(p) = v;
#endif
}

// ------------------------------------------------------------ halfs

// FP32 -> FP16 bits, round to nearest even.
GDN_DEVICE uint32_t half_bits(float f) {
#if defined(GDN_HIP_ARCH_AMDGPU)
    return __builtin_bit_cast(uint16_t, static_cast<_Float16>(f));
#elif defined(GDN_HIP_ARCH_CUDA_EMULATION)
    return __half_as_ushort(__float2half_rn(f));
#else
    return ::gdn::float_to_half(f);
#endif
}
GDN_DEVICE float half_value(uint32_t bits16) {
#if defined(GDN_HIP_ARCH_AMDGPU)
    return static_cast<float>(__builtin_bit_cast(_Float16, static_cast<uint16_t>(bits16)));
#elif defined(GDN_HIP_ARCH_CUDA_EMULATION)
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16)));
#else
    return ::gdn::half_to_float(static_cast<uint16_t>(bits16));
#endif
}
GDN_DEVICE uint32_t pack_half2(float lo, float hi) { return half_bits(lo) | (half_bits(hi) << 16); }
GDN_DEVICE float lo_half(uint32_t w) { return half_value(w & 0xffffu); }
GDN_DEVICE float hi_half(uint32_t w) { return half_value(w >> 16); }

GDN_DEVICE float bf16_value(uint32_t bits16) { return as_float(bits16 << 16); }
GDN_DEVICE uint32_t bf16_bits(float f) {  // round to nearest even, NaN kept quiet
    uint32_t u = as_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
}

// ------------------------------------------------------------ lanes

GDN_DEVICE int lane_id() {  // lane within the 32-lane wave (the WMMA kernels are wave32)
    return int(threadIdx.x) & 31;
}

// x from lane (this lane ^ mask). The sequential kernel uses it with masks
// below the wave size (wave32 or wave64), the WMMA kernels below 16.
GDN_DEVICE float shfl_xor(float x, int mask) {
#if defined(GDN_HIP_ARCH_AMDGPU)
    return __shfl_xor(x, mask);
#elif defined(GDN_HIP_ARCH_CUDA_EMULATION)
    return __shfl_xor_sync(0xffffffffu, x, mask);
#else
    return simt::shfl_xor(x, mask);
#endif
}

GDN_DEVICE int wave_size() {
#if defined(GDN_HIP_ARCH_AMDGPU)
    return __AMDGCN_WAVEFRONT_SIZE;
#elif defined(GDN_HIP_ARCH_CUDA_EMULATION)
    return 32;
#else
    return int(simt::warp_size());
#endif
}

// The word of lane (this lane ^ 16): moves an accumulator's other half of a
// column between the two 16-lane rows (v_permlanex16, no LDS traffic).
GDN_DEVICE uint32_t swap_rows16(uint32_t x) {
#if defined(GDN_HIP_ARCH_AMDGPU)
#if GDN_HIP_WMMA
    return __builtin_amdgcn_permlanex16(x, x, 0x76543210u, 0xfedcba98u, false, false);
#else
    return __shfl_xor(int(x), 16);
#endif
#elif defined(GDN_HIP_ARCH_CUDA_EMULATION)
    return __shfl_xor_sync(0xffffffffu, x, 16);
#else
    return simt::shfl_xor_u32(x, 16);
#endif
}

// ------------------------------------------------------------ barriers

// All threads of the block, all memory (the portable kernel's barrier).
GDN_DEVICE void block_barrier() {
#if defined(GDN_HIP_ARCH_HOST_EMULATION)
    simt::block_barrier();
#else
    __syncthreads();
#endif
}

// All threads of the block; waits for this wave's LDS operations only.
// __syncthreads() also waits for every global load in flight, which would put
// the next chunk's prefetch in front of the barrier. The "memory" clobber
// keeps the compiler from moving LDS accesses across it. gfx11 encoding.
GDN_DEVICE void lds_barrier() {
#if defined(GDN_HIP_ARCH_AMDGPU)
#if GDN_HIP_WMMA
    __asm__ volatile("s_waitcnt lgkmcnt(0)\n\ts_barrier" ::: "memory");
#else
    __syncthreads();
#endif
#elif defined(GDN_HIP_ARCH_CUDA_EMULATION)
    __syncthreads();  // bar.sync does not wait for loads in flight either
#else
    simt::block_barrier();
#endif
}

// Orders LDS writes of this wave before its later LDS reads by other lanes.
// A wave executes its LDS operations in order, so on AMD it only has to stop
// the compiler; a CUDA warp's lanes may diverge in time (__syncwarp).
GDN_DEVICE void wave_sync() {
#if defined(GDN_HIP_ARCH_AMDGPU)
    __asm__ volatile("" ::: "memory");
#elif defined(GDN_HIP_ARCH_CUDA_EMULATION)
    __syncwarp();
#else
    simt::warp_barrier();
#endif
}

[[noreturn]] GDN_DEVICE void trap() {
#if defined(GDN_HIP_ARCH_AMDGPU)
    __builtin_trap();
#elif defined(GDN_HIP_ARCH_CUDA_EMULATION)
    __trap();
    __builtin_unreachable();
#else
    std::abort();
#endif
}

// ------------------------------------------------------------ WMMA

#if !defined(GDN_HIP_ARCH_AMDGPU)
// Set when a WMMA operand's lanes 16-31 do not repeat lanes 0-15: the
// hardware's result would then depend on which copy it reads. Tests read it.
#if defined(GDN_HIP_ARCH_CUDA_EMULATION)
__device__ unsigned int g_wmma_operand_mismatch;
#else
inline unsigned int g_wmma_operand_mismatch = 0;
#endif
#endif

// D = A·B + C, one 16x16x16 product of the wave (all 32 lanes call it).
GDN_DEVICE Acc8 wmma(const Frag16& a, const Frag16& b, const Acc8& c) {
#if defined(GDN_HIP_ARCH_AMDGPU)
#if GDN_HIP_WMMA
    typedef _Float16 half16 __attribute__((ext_vector_type(16)));
    typedef unsigned int u32x8 __attribute__((ext_vector_type(8)));
    typedef float float8 __attribute__((ext_vector_type(8)));
    const u32x8 av = {a.w[0], a.w[1], a.w[2], a.w[3], a.w[4], a.w[5], a.w[6], a.w[7]};
    const u32x8 bv = {b.w[0], b.w[1], b.w[2], b.w[3], b.w[4], b.w[5], b.w[6], b.w[7]};
    const float8 cv = {c.x[0], c.x[1], c.x[2], c.x[3], c.x[4], c.x[5], c.x[6], c.x[7]};
    const float8 dv = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(
        __builtin_bit_cast(half16, av), __builtin_bit_cast(half16, bv), cv);
    Acc8 d;
#pragma unroll
    for (int r = 0; r < 8; ++r) d.x[r] = dv[r];
    return d;
#else
    (void)a; (void)b; (void)c;
    trap();
#endif
#else
    // Lane-exact emulation. Lane l computes D[2r + l/16][l%16] for r = 0..7:
    // the row of A comes from lane 2r + l/16 (shuffled word by word), the
    // column of B is this lane's own. Products of halfs are exact in FP32;
    // they are accumulated in K order onto C with fused multiply-adds.
    const int lane = lane_id();
    const int hi = lane >> 4;
    uint32_t mismatch = 0;
#if defined(GDN_HIP_ARCH_CUDA_EMULATION)
#pragma unroll
    for (int w = 0; w < 8; ++w) {
        mismatch |= a.w[w] ^ __shfl_xor_sync(0xffffffffu, a.w[w], 16);
        mismatch |= b.w[w] ^ __shfl_xor_sync(0xffffffffu, b.w[w], 16);
    }
    if (mismatch) atomicOr(&g_wmma_operand_mismatch, 1u);
    float bcol[16];
#pragma unroll
    for (int w = 0; w < 8; ++w) {
        bcol[2 * w] = lo_half(b.w[w]);
        bcol[2 * w + 1] = hi_half(b.w[w]);
    }
    Acc8 d;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
        const int src = 2 * r + hi;
        float acc = c.x[r];
#pragma unroll
        for (int w = 0; w < 8; ++w) {
            const uint32_t aw = __shfl_sync(0xffffffffu, a.w[w], src);
            acc = fmaf(lo_half(aw), bcol[2 * w], acc);
            acc = fmaf(hi_half(aw), bcol[2 * w + 1], acc);
        }
        d.x[r] = acc;
    }
    return d;
#else
    // Host lanes: every lane deposits its operands, then reads the rows it
    // needs from the deposits (the same source lanes as above, so the same bits).
    simt::WarpScratch& ws = simt::warp_scratch();
    for (int w = 0; w < 8; ++w) {
        ws.a[lane][w] = a.w[w];
        ws.b[lane][w] = b.w[w];
    }
    simt::warp_barrier();
    for (int w = 0; w < 8; ++w) {
        mismatch |= ws.a[lane][w] ^ ws.a[lane ^ 16][w];
        mismatch |= ws.b[lane][w] ^ ws.b[lane ^ 16][w];
    }
    if (mismatch) g_wmma_operand_mismatch = 1;
    Acc8 d;
    for (int r = 0; r < 8; ++r) {
        const int src = 2 * r + hi;
        float acc = c.x[r];
        for (int w = 0; w < 8; ++w) {
            const uint32_t aw = ws.a[src][w];
            acc = std::fma(lo_half(aw), lo_half(b.w[w]), acc);
            acc = std::fma(hi_half(aw), hi_half(b.w[w]), acc);
        }
        d.x[r] = acc;
    }
    simt::warp_barrier();  // the deposits are reused by the next product
    return d;
#endif
#endif
}

// A or B operand from 32 contiguous bytes (16-byte aligned): a row of A, or
// a column of B stored contiguously.
GDN_DEVICE Frag16 load_frag(const void* p) {
    const U32x4 lo = load16(p);
    const U32x4 hi = load16(static_cast<const char*>(p) + 16);
    Frag16 f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f.w[i] = word(lo, i);
        f.w[4 + i] = word(hi, i);
    }
    return f;
}

// An accumulator (C/D layout: lane l holds rows 2r + l/16 of column l%16) as
// a B operand (lane l: all 16 rows of column l%16), rounded to FP16: the two
// 16-lane rows swap the halves of each column they lack.
GDN_DEVICE Frag16 acc_to_b(const Acc8& acc) {
    const bool hi = lane_id() >= 16;
    Frag16 f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t mine = pack_half2(acc.x[2 * j], acc.x[2 * j + 1]);  // rows 4j+hi, 4j+2+hi
        const uint32_t other = swap_rows16(mine);                           // rows 4j+1-hi, 4j+3-hi
        const uint32_t even = hi ? other : mine;                            // rows 4j, 4j+2
        const uint32_t odd = hi ? mine : other;                             // rows 4j+1, 4j+3
        f.w[2 * j] = (even & 0xffffu) | (odd << 16);
        f.w[2 * j + 1] = (even >> 16) | (odd & 0xffff0000u);
    }
    return f;
}

}  // namespace gdn::hip::arch
