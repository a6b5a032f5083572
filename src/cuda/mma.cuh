// Warp-level tensor-core products (mma.sync, sm_80+) for the chunked scan, and
// the operand conversions of each ScanMode. Fragment layouts are the PTX
// ISA's (g = lane / 4, t = lane % 4):
//   m16n8k16 (bf16/f16) A: reg0 (g, 2t..2t+1), reg1 (g+8, 2t..), reg2 (g, 2t+8..), reg3 (g+8, 2t+8..)
//                       B: reg0 (k = 2t..2t+1, n = g), reg1 (k = 2t+8.., n = g)
//   m16n8k8 (tf32)      A: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)
//                       B: b0 (k = t, n = g), b1 (k = t+4, n = g)
//   C/D (both)          c0, c1 (g, 2t..2t+1), c2, c3 (g+8, 2t..2t+1)
// A pair of 16-bit operands is packed with the lower index in the low half.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/kernels.hpp"

namespace gdn::cuda::mma {

// Two floats as one register of 16-bit operands (x in the low half).
template <ScanMode M>
__device__ __forceinline__ uint32_t pack2(float x, float y) {
    if constexpr (kBf16Operands<M>) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
        return *reinterpret_cast<const uint32_t*>(&v);
    } else {
        const __half2 v = __floats2half2_rn(x, y);
        return *reinterpret_cast<const uint32_t*>(&v);
    }
}

// The two floats of a register of 16-bit operands (the low half first).
template <ScanMode MODE>
__device__ __forceinline__ void unpack2(uint32_t r, float& x, float& y) {
    if constexpr (kBf16Operands<MODE>) {
        x = __uint_as_float(r << 16);
        y = __uint_as_float(r & 0xffff0000u);
    } else {
        const __half2 h2 = *reinterpret_cast<const __half2*>(&r);
        x = __low2float(h2);
        y = __high2float(h2);
    }
}

// x, y as 16-bit operands (x in the low half) and, with lo, the remainders.
template <ScanMode MODE>
__device__ __forceinline__ uint32_t pack_split(float x, float y, uint32_t* lo) {
    const uint32_t hi = pack2<MODE>(x, y);
    if (lo) {
        float hx, hy;
        unpack2<MODE>(hi, hx, hy);
        *lo = pack2<MODE>(x - hx, y - hy);
    }
    return hi;
}

// x, y as three 16-bit terms: the value, its remainder lo and the
// remainder's remainder lo2 (BF16: x = hi + lo + lo2 exactly for FP32 x).
template <ScanMode MODE>
__device__ __forceinline__ uint32_t pack_split3(float x, float y, uint32_t& lo, uint32_t& lo2) {
    const uint32_t hi = pack2<MODE>(x, y);
    float hx, hy, lx, ly;
    unpack2<MODE>(hi, hx, hy);
    const float rx = x - hx, ry = y - hy;
    lo = pack2<MODE>(rx, ry);
    unpack2<MODE>(lo, lx, ly);
    lo2 = pack2<MODE>(rx - lx, ry - ly);
    return hi;
}

// d += a · b, m16n8k16, 16-bit operands.
template <ScanMode M>
__device__ __forceinline__ void mma16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (kBf16Operands<M>) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
#else
    (void)d, (void)a, (void)b;
    __trap();  // the chunked path is dispatched on sm_80+ only
#endif
}

// Four 8x8 matrices of 16-bit elements from shared memory: lanes 8i..8i+7
// give the row addresses of matrix i (16 bytes each); register i gets
// matrix i's (row lane / 4, columns 2 (lane % 4) and + 1), or with TRANS the
// transposed matrix's (rows 2 (lane % 4) and + 1, column lane / 4).
template <bool TRANS>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
#else
    (void)row;
    r[0] = r[1] = r[2] = r[3] = 0u;
    __trap();
#endif
}

// Four 8x8 matrices of 16-bit elements to shared memory, transposed (sm_90):
// lanes 8i..8i+7 give the addresses of the stored rows of matrix i (16
// bytes each); register i holds matrix i's (row lane / 4, columns 2 (lane %
// 4) and + 1), which land in stored rows 2 (lane % 4) and + 1, column lane / 4.
__device__ __forceinline__ void stmatrix_x4_trans(void* row, uint32_t r0, uint32_t r1, uint32_t r2,
                                                  uint32_t r3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(a),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
#else
    (void)row, (void)r0, (void)r1, (void)r2, (void)r3;
    __trap();  // callers check for sm_90 first
#endif
}

// A float as TF32 (round to nearest, ties away), kept in a float's bits.
__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
#else
    r = __float_as_uint(x);
#endif
    return r;
}

// x = hi + lo exactly up to lo's own rounding (|x − hi − lo| <= 2^-22 |x|).
struct Split {
    uint32_t hi, lo;
};
__device__ __forceinline__ Split split_tf32(float x) {
    const uint32_t hi = to_tf32(x);
    return {hi, to_tf32(x - __uint_as_float(hi))};
}

// d += a · b, m16n8k8, TF32 operands.
__device__ __forceinline__ void mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    (void)d, (void)a0, (void)a1, (void)a2, (void)a3, (void)b0, (void)b1;
    __trap();
#endif
}

// d += a · b with 3xTF32: the small cross terms first, then hi · hi. When
// A_EXACT, a's low parts are zero (16-bit inputs are exact in TF32) and the
// lo · hi product is skipped.
template <bool A_EXACT>
__device__ __forceinline__ void mma_3xtf32(float (&d)[4], const Split (&a)[4], const Split (&b)[2]) {
    if constexpr (!A_EXACT) mma_tf32(d, a[0].lo, a[1].lo, a[2].lo, a[3].lo, b[0].hi, b[1].hi);
    mma_tf32(d, a[0].hi, a[1].hi, a[2].hi, a[3].hi, b[0].lo, b[1].lo);
    mma_tf32(d, a[0].hi, a[1].hi, a[2].hi, a[3].hi, b[0].hi, b[1].hi);
}

}  // namespace gdn::cuda::mma
