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

// ---- wgmma (sm_90a): a warpgroup's product D[64 x N] += A[64 x 16] · B[16 x N]
// with A in registers and B in shared memory, for the register-state scan's
// two state products (chunk_scan_mma.cuh). Warp w of the warpgroup holds
// rows 16w.. of A in the m16n8k16 A layout above, and of D in the C layout of
// N / 8 tiles (tile j: registers 4j..4j+3). B is read through a descriptor,
// here always with the 128-byte swizzle: B is stored in atoms of 8 rows of
// 128 bytes (64 16-bit values), 1024-byte aligned, where the 16-byte piece j
// of row r sits at piece j ^ r. K-major B (element (n, k), rows n, k
// contiguous): 8 rows n of an atom, SBO = the byte stride between atoms along
// N; a 16-deep step reads 32 bytes of each row (the start address moves by 32
// per step within an atom; LBO is not used). MN-major B (TRANS = 1, element
// (k, n), rows k, n contiguous): 8 rows k of an atom, SBO = the stride between
// atoms along K, LBO = between atoms along N (64 values each). This is
// CUTLASS's canonical GMMA layout (cute/atom/mma_traits_sm90_gmma.hpp); the
// layouts without swizzle, which bench/wgmma_probe.cu checked on the H200,
// follow the same rules.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GDN_HAVE_WGMMA 1

__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
    return uint64_t((smem_addr >> 4) & 0x3FFF) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
           (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Generic-proxy writes to shared memory (cp.async, st.shared) made visible to
// the async proxy that wgmma reads B through; before the barrier that
// publishes them.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Accumulator registers pinned at this point of the program: the compiler
// may not move their uses across it (after wgmma_wait_all: the results are
// in them only from there on).
__device__ __forceinline__ void fence_operand(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t& x) { asm volatile("" : "+r"(x)::"memory"); }
template <typename T, int N>
__device__ __forceinline__ void fence_operand(T (&x)[N][4]) {
#pragma unroll
    for (int j = 0; j < N; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) fence_operand(x[j][e]);
}

#define GDN_WG_R4(x) "+f"(x[0]), "+f"(x[1]), "+f"(x[2]), "+f"(x[3])
#define GDN_WG_R16(x) GDN_WG_R4(x[0]), GDN_WG_R4(x[1]), GDN_WG_R4(x[2]), GDN_WG_R4(x[3])
#define GDN_WG_D32                                                                                 \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25," \
    "%26,%27,%28,%29,%30,%31}"
#define GDN_WG_D64                                                                                 \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25," \
    "%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,"  \
    "%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"

#define GDN_WG_D16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"

// x (N = 32: tiles 0..3) += A · B.
template <ScanMode M, int TRANS>
__device__ __forceinline__ void wgmma_n32(float (&x)[4][4], const uint32_t (&a)[4], uint64_t b) {
    if constexpr (kBf16Operands<M>)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " GDN_WG_D16
                     ", {%16,%17,%18,%19}, %20, p, 1, 1, %21;\n}\n"
                     : GDN_WG_R16(x)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(TRANS));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 " GDN_WG_D16
                     ", {%16,%17,%18,%19}, %20, p, 1, 1, %21;\n}\n"
                     : GDN_WG_R16(x)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(TRANS));
}
// [lo | hi] (N = 64: tiles 0..3 in lo, 4..7 in hi) += A · B.
template <ScanMode M, int TRANS>
__device__ __forceinline__ void wgmma_n64(float (&lo)[4][4], float (&hi)[4][4], const uint32_t (&a)[4],
                                          uint64_t b) {
    if constexpr (kBf16Operands<M>)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " GDN_WG_D32
                     ", {%32,%33,%34,%35}, %36, p, 1, 1, %37;\n}\n"
                     : GDN_WG_R16(lo), GDN_WG_R16(hi)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(TRANS));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " GDN_WG_D32
                     ", {%32,%33,%34,%35}, %36, p, 1, 1, %37;\n}\n"
                     : GDN_WG_R16(lo), GDN_WG_R16(hi)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(TRANS));
}
// x (N = 128: 16 tiles) += A · B.
template <ScanMode M, int TRANS>
__device__ __forceinline__ void wgmma_n128(float (&x)[16][4], const uint32_t (&a)[4], uint64_t b) {
    if constexpr (kBf16Operands<M>)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " GDN_WG_D64
                     ", {%64,%65,%66,%67}, %68, p, 1, 1, %69;\n}\n"
                     : GDN_WG_R16((x + 0)), GDN_WG_R16((x + 4)), GDN_WG_R16((x + 8)), GDN_WG_R16((x + 12))
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(TRANS));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " GDN_WG_D64
                     ", {%64,%65,%66,%67}, %68, p, 1, 1, %69;\n}\n"
                     : GDN_WG_R16((x + 0)), GDN_WG_R16((x + 4)), GDN_WG_R16((x + 8)), GDN_WG_R16((x + 12))
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(TRANS));
}
#undef GDN_WG_R4
#undef GDN_WG_R16
#undef GDN_WG_D16
#undef GDN_WG_D32
#undef GDN_WG_D64
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

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
