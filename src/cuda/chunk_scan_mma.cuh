// The register-state scan of the BF16/FP16 modes (GDN_PATH_CHUNKED_TC): the
// same chunk step as chunk_scan.cuh (T, P, γ, β from the prep),
//     U   = β ⊙ (v − e^{γ} ⊙ S0ᵀk̂)
//     D   = T · U
//     o_t = e^{γ_t} S0ᵀq̂_t + Σ_{i<=t} P[t][i] D_i
//     S_C = e^{γ_{L−1}} S0 + Σ_i e^{γ_{L−1}−γ_i} k̂_i D_iᵀ
// written transposed, so that every product is an mma.sync whose A operand is
// the previous product's accumulator:
//     Yᵀ  = Sᵀ · [k; q]ᵀ      (16 columns x 64 tokens, over K)
//     Uᵀ  = β (vᵀ − e^{γ} kf Ykᵀ)
//     Dᵀ  = Uᵀ · Tᵀ,   Oᵀ = e^{γ} qf Yqᵀ + Dᵀ · Pᵀ
//     Sᵀ  = e^{γ_last} Sᵀ + D2ᵀ · k
// A warp owns 16 value columns of one value head and holds their state
// transposed (16 x K, FP32) in the accumulator registers of the update; the
// accumulator layout of two adjacent 8-wide tiles is the A-operand layout of
// one 16-deep step (mma.cuh), so Sᵀ, Uᵀ, Dᵀ and D2ᵀ become A operands by
// rounding pairs to 16 bits, with no shared-memory round trip. The B operands
// come from shared memory: the chunk's raw k and q rows as 16-bit values
// (written by the prep, w.kq16) through ldmatrix (transposed for the update),
// and T, P as FP32 rows rounded when loaded. The state never leaves the
// registers between a sequence's chunks.
//
// Warp specialisation: a block has NCOL / 16 compute warps and one loading
// warp. The loading warp copies the next chunk's k/q and prep rows
// (cp.async) and its v (through registers: any stride and type, converted
// to FP32) into the second buffer while the compute warps work on the
// current one; they meet at one barrier per chunk. The compute warps issue
// no copies and no v loads (half of their instructions before, Nsight on the
// H200: docs/perf-notes.md v6), only the products, the small elementwise
// steps and the output stores.
//
// Rounded to 16 bits: k, q (exact for 16-bit inputs of the mode's type), Sᵀ
// in Yᵀ, D2ᵀ in the update; Uᵀ, T, Dᵀ and P are split into a 16-bit value and
// its 16-bit remainder (kSplitSmall). Accumulation and the state are FP32.
#pragma once

#include "cuda/chunk_scan.cuh"

namespace gdn::cuda {
namespace scan_mma {

using scan::Chunk;
using scan::kChunk;
using scan::kLdTP;
using scan::kPrep;
using scan::kPrepGB;
using scan::kPrepP;
using scan::kPrepQKF;
using scan::kPrepT;

// Row stride of the staged k/q rows in 16-bit elements: K + 8 puts the 8 rows
// of an ldmatrix 8x8 matrix in distinct banks.
template <int K>
constexpr int kLd16 = K + 8;

#ifndef GDN_SCAN_MMA_SPLIT_SMALL
#define GDN_SCAN_MMA_SPLIT_SMALL 1
#endif
// The two in-chunk products (Dᵀ = Uᵀ Tᵀ, Dᵀ Pᵀ) with each operand split into
// a 16-bit value and its 16-bit remainder, three products (hi·hi, hi·lo,
// lo·hi): their operands lose ~2^-16 instead of ~2^-8 (BF16). H200, T = 32K,
// bf16 inputs: 2.0e-3 / 2.7e-3 from FP64 (out / state) with the split,
// 4.8e-3 / 3.8e-3 without it, for 6% more time (docs/perf-notes.md v5).
// Building with -DGDN_SCAN_MMA_SPLIT_SMALL=0 drops it, for measurements.
constexpr bool kSplitSmall = GDN_SCAN_MMA_SPLIT_SMALL != 0;

// x, y as 16-bit operands (x in the low half) and, with lo, the remainders.
template <ScanMode MODE>
__device__ __forceinline__ uint32_t pack_split(float x, float y, uint32_t* lo) {
    const uint32_t hi = mma::pack2<MODE>(x, y);
    if (lo) {
        float hx, hy;
        if constexpr (MODE == ScanMode::kBf16) {
            hx = __uint_as_float(hi << 16);
            hy = __uint_as_float(hi & 0xffff0000u);
        } else {
            const __half2 h2 = *reinterpret_cast<const __half2*>(&hi);
            hx = __low2float(h2);
            hy = __high2float(h2);
        }
        *lo = mma::pack2<MODE>(x - hx, y - hy);
    }
    return hi;
}

// The A operand of 16-deep step s from the accumulators of the 8-wide tiles
// 2s and 2s + 1 (mma.cuh: the layouts match), and with lo the remainders.
template <ScanMode MODE>
__device__ __forceinline__ void acc_to_a(const float (&x)[4][4], int s, uint32_t (&a)[4],
                                         uint32_t (*lo)[4] = nullptr) {
    a[0] = pack_split<MODE>(x[2 * s][0], x[2 * s][1], lo ? &(*lo)[0] : nullptr);
    a[1] = pack_split<MODE>(x[2 * s][2], x[2 * s][3], lo ? &(*lo)[1] : nullptr);
    a[2] = pack_split<MODE>(x[2 * s + 1][0], x[2 * s + 1][1], lo ? &(*lo)[2] : nullptr);
    a[3] = pack_split<MODE>(x[2 * s + 1][2], x[2 * s + 1][3], lo ? &(*lo)[3] : nullptr);
}

// Element type of the output.
template <typename T>
__device__ __forceinline__ T out_cast(float x);
template <>
__device__ __forceinline__ float out_cast<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 out_cast<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half out_cast<__half>(float x) { return __float2half_rn(x); }

// Oᵀ tiles of a thread (tile j, [e]: token 8j + 2tq + (e & 1), column + 8 (e >> 1))
// to row-major rows of stride ld starting at base = (token 2tq, first column);
// only tokens < L.
template <typename T>
__device__ __forceinline__ void store_tile(T* base, int64_t ld, const float (&o)[4][4], int tq, int L) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        T* r = base + 8 * j * ld;
        const int t = 8 * j + 2 * tq;
        if (L == kChunk || t < L) {
            r[0] = out_cast<T>(o[j][0]);
            r[8] = out_cast<T>(o[j][2]);
        }
        if (L == kChunk || t + 1 < L) {
            r[ld] = out_cast<T>(o[j][1]);
            r[ld + 8] = out_cast<T>(o[j][3]);
        }
    }
}

// Row stride (floats) of the staged v rows: the Uᵀ reads (tokens 2tq + e,
// columns g) hit 32 distinct banks with NCOL + 4.
template <int NCOL>
constexpr int kLdV = NCOL + 4;

template <int K, int NCOL, int IN_BYTES, ScanMode MODE>
__global__ void __launch_bounds__(2 * NCOL + 32, 1)
    chunk_scan_mma_kernel(const Params p, const ChunkScratch w, int64_t win0, int64_t win1,
                          int zero_empty_sequences) {
    static_assert(MODE == ScanMode::kBf16 || MODE == ScanMode::kFp16, "16-bit operand modes");
    static_assert(NCOL % 16 == 0 && NCOL <= 64 && K % 16 == 0, "tile shapes");
    // launch_in: V % NCOL == 0, so a block's columns are one value head's.
    using In = typename scan::Raw<IN_BYTES>::type;
    constexpr int NW = NCOL / 16;  // compute warps, 16 columns each; warp NW loads
    constexpr int LD = kLd16<K>;
    constexpr int LDV = kLdV<NCOL>;
    constexpr int NJ = K / 8;      // 8-wide tiles of Sᵀ's K columns

    extern __shared__ __align__(16) float smem[];
    uint16_t* kq_s = reinterpret_cast<uint16_t*>(smem);  // [2][64][LD]: k rows 0..31, q rows 32..63
    float* prep = smem + (2 * 64 * LD) / 2;              // [2][kPrep]
    float* v_s = prep + 2 * kPrep;                       // [2][32][LDV]

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tq = lane & 3;
    const int32_t kh = blockIdx.y;
    // Columns are numbered across the key head's value heads (G·V of them);
    // the block's NCOL are columns v0.. of value head h (V % NCOL == 0).
    const int32_t gc0 = int32_t(blockIdx.x) * NCOL;
    const int32_t h = value_head_of(p, kh, gc0 / p.V);
    const int32_t v0 = gc0 % p.V;

    Chunk cur = scan::first_chunk_from(p, first_seq_ending_after(p, win0), win0, win1);

    if (warp == NW) {
        // ------------------------------------------------------------------
        // The loading warp: chunk c's k/q rows, prep rows (cp.async) and v
        // (through registers: any stride and type) into buffer buf, then
        // wait for them; the compute warps meet it at one barrier per chunk.
        const bool bf16_in = p.in_dt == GDN_DTYPE_BF16;
        const In* v_in = static_cast<const In*>(p.v);
        // This lane's v columns: lane and lane + 32 of the block (< NCOL).
        int64_t v_off[2];
#pragma unroll
        for (int m = 0; m < 2; ++m)
            v_off[m] = int64_t(h) * p.v_head + v0 + (lane + 32 * m < NCOL ? lane + 32 * m : 0);
        const float* tp_head = w.TP + int64_t(h) * w.rows * 64;
        const float* gb_head = w.gb + int64_t(h) * w.rows * 2;
        auto load = [&](const Chunk& c, int buf) {
            const int64_t row0 = c.cs - win0;
            // k/q rows: 64 rows of K/8 16-byte pieces.
            {
                constexpr int PIECES = K / 8;
                const uint16_t* src0 = w.kq16 + (int64_t(kh) * w.rows + row0) * 2 * K;
                uint16_t* dst0 = kq_s + buf * 64 * LD;
                for (int e = lane; e < 64 * PIECES; e += 32) {
                    const int row = e / PIECES, pc = e % PIECES;  // k tokens 0..31, q tokens 32..63
                    const int t = row % 32;
                    cp_async16(dst0 + row * LD + pc * 8,
                               t < c.L ? src0 + (2 * t + row / 32) * K + pc * 8 : w.kq16,
                               t < c.L ? 16 : 0);
                }
            }
            // T and P rows (16 pieces of 4 floats per token: 8 of T, 8 of P), γ, β, qf, kf
            // (the prep buffer's first head slot).
            float* pb = prep + buf * kPrep;
            {
                const int piece = lane & 15;
                const float* src = tp_head + row0 * 64 + piece * 4;
                float* dst = pb + (piece < 8 ? kPrepT : kPrepP) + (piece & 7) * 4;
#pragma unroll 4
                for (int t = lane >> 4; t < 32; t += 2)
                    cp_async16(dst + t * kLdTP, t < c.L ? src + t * 64 : w.TP, t < c.L ? 16 : 0);
                cp_async8(pb + kPrepGB + lane * 2,
                          lane < c.L ? gb_head + (row0 + lane) * 2 : w.gb, lane < c.L ? 8 : 0);
            }
            cp_async8(pb + kPrepQKF + lane * 2,
                      lane < c.L ? w.qkf + (int64_t(kh) * w.rows + row0 + lane) * 2 : w.qkf,
                      lane < c.L ? 8 : 0);
            cp_async_commit();
            // v: 16 tokens at a time, both columns of the lane in flight.
            float* vb = v_s + buf * 32 * LDV;
#pragma unroll
            for (int h16 = 0; h16 < 2; ++h16) {
                uint32_t r[16][2];
                const In* vt = v_in + (c.cs + 16 * h16) * p.v_tok;
#pragma unroll
                for (int i = 0; i < 16; ++i) {
                    const bool ok = 16 * h16 + i < c.L;
#pragma unroll
                    for (int m = 0; m < 2; ++m)
                        r[i][m] = ok && lane + 32 * m < NCOL ? uint32_t(__ldg(vt + v_off[m])) : 0u;
                    vt += p.v_tok;
                }
#pragma unroll
                for (int i = 0; i < 16; ++i)
#pragma unroll
                    for (int m = 0; m < 2; ++m)
                        if (lane + 32 * m < NCOL)
                            vb[(16 * h16 + i) * LDV + lane + 32 * m] =
                                scan::Raw<IN_BYTES>::to_float(r[i][m], bf16_in);
            }
            cp_async_wait_all();
        };
        if (cur.n < 0) return;
        load(cur, 0);
        __syncthreads();
#pragma unroll 1
        for (int b = 0;; b ^= 1) {
            const Chunk nxt = scan::next_chunk(p, cur, win0, win1);
            if (nxt.n < 0) break;
            load(nxt, b ^ 1);  // buffer b^1 was last read before the previous barrier
            __syncthreads();
            cur = nxt;
        }
        return;
    }

    // ----------------------------------------------------------------------
    // The compute warps.
    const int32_t c0 = v0 + 16 * warp + g;  // this thread's columns: c0 and c0 + 8

    // Sᵀ tile j: [0], [1] = (column c0, K rows 8j + 2tq, + 1); [2], [3] = column c0 + 8.
    float S[NJ][4];
    // Element (K row 8j + 2tq + (e & 1), column c0 + 8 (e >> 1)) of a head's
    // state is at st_at + j·st_j + (e & 1)·st_1 + (e >> 1)·st_8 (32-bit: a
    // head's K·V is checked to fit).
    const int32_t st_at = p.state_kv ? 2 * tq * p.V + c0 : c0 * p.K + 2 * tq;
    const int32_t st_j = p.state_kv ? 8 * p.V : 8, st_1 = p.state_kv ? p.V : 1;
    const int32_t st_8 = p.state_kv ? 8 : 8 * p.K;
    auto state_at = [&](int j, int e) { return st_at + j * st_j + (e & 1) * st_1 + (e >> 1) * st_8; };
    auto load_state = [&](const Chunk& c) {
        // A sequence's first chunk may start from zero; later windows read
        // back what the previous one wrote.
        const bool zero = seq_from_zero(p, c.n) && c.cs == seq_begin(p, c.n);
        const float* st = head_state(p, seq_slot(p, c.n), h);
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                S[j][e] = zero ? 0.0f : st[state_at(j, e)];
    };
    auto store_state = [&](int32_t n, bool zero) {
        float* st = head_state(p, seq_slot(p, n), h);
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                st[state_at(j, e)] = zero ? 0.0f : S[j][e];
    };

    // Sequences without tokens that start from zero still get a zero state
    // (the sequential path writes one too); window 0 takes care of them.
    if (zero_empty_sequences && p.start_from_zero)
        for (int32_t n = 0; n < p.num_seqs; ++n)
            if (seq_end(p, n) == seq_begin(p, n) && seq_slot(p, n) >= 0 && seq_from_zero(p, n))
                store_state(n, true);
    if (cur.n < 0) return;
    load_state(cur);
    __syncthreads();

    // ldmatrix row addresses of this lane (elements from a buffer's start):
    // Yᵀ (B = the rows, not transposed): matrix i = lane / 8 is rows
    // 8 (i / 2) + lane % 8 of a 16-row pair of tiles, columns 8 (i % 2) of a
    // 16-deep step; the update (transposed): rows (tokens) 8 (i % 2) + lane % 8,
    // columns (K) 8 (i / 2).
    const int ld_y = ((lane >> 4) * 8 + (lane & 7)) * LD + ((lane >> 3) & 1) * 8;
    const int ld_u = (((lane >> 3) & 1) * 8 + (lane & 7)) * LD + (lane >> 4) * 8;
    // The outputs: row stride and the element of (token 2tq, column c0).
    const bool norm_pass = (p.flags & GDN_FLAG_OUTPUT_NORM) != 0;
    const int64_t o_ld = norm_pass ? int64_t(p.Hv) * p.V : p.o_tok;
    const int64_t o_col = norm_pass ? int64_t(h) * p.V + c0 : int64_t(h) * p.o_head + c0;
    const int v_at = (2 * tq) * LDV + 16 * warp + g;  // v of (token 2tq, column c0) in a buffer

#pragma unroll 1
    for (int b = 0;; b ^= 1) {
        const Chunk nxt = scan::next_chunk(p, cur, win0, win1);
        const uint16_t* kq = kq_s + b * 64 * LD;
        const float* pb = prep + b * kPrep;
        const float* T_ = pb + kPrepT;
        const float* P_ = pb + kPrepP;
        const float* gb = pb + kPrepGB;
        const float* qkf = pb + kPrepQKF;
        const float* vb = v_s + b * 32 * LDV + v_at;
        const int L = cur.L;

        // Yᵀ = Sᵀ [k; q]ᵀ: tiles 0..3 the k tokens, 4..7 the q tokens.
        float y[8][4] = {};
#pragma unroll
        for (int s = 0; s < K / 16; ++s) {
            const uint32_t a[4] = {mma::pack2<MODE>(S[2 * s][0], S[2 * s][1]),
                                   mma::pack2<MODE>(S[2 * s][2], S[2 * s][3]),
                                   mma::pack2<MODE>(S[2 * s + 1][0], S[2 * s + 1][1]),
                                   mma::pack2<MODE>(S[2 * s + 1][2], S[2 * s + 1][3])};
#pragma unroll
            for (int nn = 0; nn < 4; ++nn) {
                uint32_t r[4];
                mma::ldmatrix_x4<false>(r, kq + ld_y + 16 * nn * LD + 16 * s);
                mma::mma16<MODE>(y[2 * nn], a, {r[0], r[1]});
                mma::mma16<MODE>(y[2 * nn + 1], a, {r[2], r[3]});
            }
        }

        // Uᵀ = β (vᵀ − e^γ kf Ykᵀ), as A operands of two 16-token steps.
        uint32_t ua[2][4], ua_lo[2][4];
        {
            float u[4][4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int t = 8 * j + 2 * tq + e;
                    const float2 gbt = *reinterpret_cast<const float2*>(gb + 2 * t);
                    const float f = expf(gbt.x) * qkf[2 * t + 1];
                    const float* vr = vb + (8 * j + e) * LDV;
                    u[j][e] = gbt.y * (vr[0] - f * y[j][e]);
                    u[j][2 + e] = gbt.y * (vr[8] - f * y[j][2 + e]);
                }
#pragma unroll
            for (int s = 0; s < 2; ++s) acc_to_a<MODE>(u, s, ua[s], kSplitSmall ? &ua_lo[s] : nullptr);
        }

        // acc += A Mᵀ for 8-token tile n, 16-token step s (split when kSplitSmall).
        auto small_product = [&](float(&acc)[4], const uint32_t(&a)[4], const uint32_t(&a_lo)[4],
                                 const float* M, int n, int s) {
            const float* r = M + (8 * n + g) * kLdTP + 16 * s + 2 * tq;
            const float2 x0 = *reinterpret_cast<const float2*>(r);
            const float2 x1 = *reinterpret_cast<const float2*>(r + 8);
            uint32_t b_lo[2];
            const uint32_t bm[2] = {pack_split<MODE>(x0.x, x0.y, kSplitSmall ? &b_lo[0] : nullptr),
                                    pack_split<MODE>(x1.x, x1.y, kSplitSmall ? &b_lo[1] : nullptr)};
            if constexpr (kSplitSmall) {
                mma::mma16<MODE>(acc, a_lo, bm);
                mma::mma16<MODE>(acc, a, b_lo);
            }
            mma::mma16<MODE>(acc, a, bm);
        };

        // Dᵀ = Uᵀ Tᵀ. (T is lower triangular, as P below, but skipping its
        // zero blocks here as well made the K = 128 kernel spill, nvcc 13.)
        float d[4][4] = {};
#pragma unroll
        for (int s = 0; s < 2; ++s)
#pragma unroll
            for (int n = 0; n < 4; ++n) small_product(d[n], ua[s], ua_lo[s], T_, n, s);

        // Dᵀ and D2ᵀ = e^{γ_last−γ_t} kf_t Dᵀ (zero past the chunk's end) as A operands.
        const float gamma_last = gb[2 * (L - 1)];
        uint32_t da[2][4], da_lo[2][4], d2a[2][4];
        {
            float d2[4][4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int t = 8 * j + 2 * tq + e;
                    const float f = t < L ? expf(gamma_last - gb[2 * t]) * qkf[2 * t + 1] : 0.0f;
                    d2[j][e] = f * d[j][e];
                    d2[j][2 + e] = f * d[j][2 + e];
                }
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                acc_to_a<MODE>(d, s, da[s], kSplitSmall ? &da_lo[s] : nullptr);
                acc_to_a<MODE>(d2, s, d2a[s]);
            }
        }

        // Oᵀ = e^γ qf Yqᵀ + Dᵀ Pᵀ, then the outputs of the chunk's tokens.
        {
            float o[4][4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int t = 8 * j + 2 * tq + e;
                    const float f = expf(gb[2 * t]) * qkf[2 * t];
                    o[j][e] = f * y[4 + j][e];
                    o[j][2 + e] = f * y[4 + j][2 + e];
                }
            // P is lower triangular (the prep writes the zeros): tokens 0..15
            // (tiles 0, 1) take only the first 16-token step.
#pragma unroll
            for (int s = 0; s < 2; ++s)
#pragma unroll
                for (int n = 2 * s; n < 4; ++n) small_product(o[n], da[s], da_lo[s], P_, n, s);
            const int64_t tok = cur.cs + 2 * tq;
            if (norm_pass)
                store_tile(w.O + ((tok - win0) * o_ld + o_col), o_ld, o, tq, L);
            else if (p.out_dt == GDN_DTYPE_BF16)
                store_tile(static_cast<__nv_bfloat16*>(p.out) + (tok * o_ld + o_col), o_ld, o, tq, L);
            else if (p.out_dt == GDN_DTYPE_F16)
                store_tile(static_cast<__half*>(p.out) + (tok * o_ld + o_col), o_ld, o, tq, L);
            else
                store_tile(static_cast<float*>(p.out) + (tok * o_ld + o_col), o_ld, o, tq, L);
        }

        // Sᵀ = e^{γ_last} Sᵀ + D2ᵀ k (k raw: kf is in D2).
        {
            const float decay = expf(gamma_last);
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) S[j][e] *= decay;
#pragma unroll
            for (int s = 0; s < 2; ++s)
#pragma unroll
                for (int jj = 0; jj < NJ / 2; ++jj) {
                    uint32_t r[4];
                    mma::ldmatrix_x4<true>(r, kq + ld_u + 16 * s * LD + 16 * jj);
                    mma::mma16<MODE>(S[2 * jj], d2a[s], {r[0], r[1]});
                    mma::mma16<MODE>(S[2 * jj + 1], d2a[s], {r[2], r[3]});
                }
        }

        if (nxt.n != cur.n) {  // the sequence's last chunk in this window
            store_state(cur.n, false);
            if (nxt.n >= 0) load_state(nxt);
        }
        if (nxt.n < 0) break;
        __syncthreads();  // buffer b^1 is loaded; buffer b is free for the loading warp
        cur = nxt;
    }
}

template <int K, int NCOL, int IN_BYTES, ScanMode MODE>
cudaError_t launch(const Params& p, const ChunkScratch& w, int64_t win0, int64_t win1,
                   bool zero_empty, cudaStream_t stream) {
    const dim3 grid(unsigned(int64_t(p.G) * p.V / NCOL), unsigned(p.Hk));
    chunk_scan_mma_kernel<K, NCOL, IN_BYTES, MODE>
        <<<grid, 2 * NCOL + 32, policy::cuda_scan_mma_smem_bytes(K, NCOL), stream>>>(
            p, w, win0, win1, zero_empty ? 1 : 0);
    return cudaGetLastError();
}

// The register-state scan is built for policy::kCudaScanMmaColumns columns
// per block only (the width dispatch gives it), at K = 64 and 128.
template <int IN_BYTES, ScanMode MODE>
cudaError_t launch_in(const Params& p, const ChunkScratch& w, int64_t win0, int64_t win1,
                      int ncol, bool zero_empty, cudaStream_t stream) {
    constexpr int NCOL = policy::kCudaScanMmaColumns;
    if (ncol != NCOL || p.V % NCOL != 0) return cudaErrorInvalidValue;
    if (p.K == 64) return launch<64, NCOL, IN_BYTES, MODE>(p, w, win0, win1, zero_empty, stream);
    if (p.K == 128) return launch<128, NCOL, IN_BYTES, MODE>(p, w, win0, win1, zero_empty, stream);
    return cudaErrorInvalidValue;
}

template <int IN_BYTES, ScanMode MODE>
cudaError_t set_attributes_in(size_t smem_limit) {
    constexpr int NCOL = policy::kCudaScanMmaColumns;
    for (auto [kernel, bytes] :
         {std::pair<const void*, size_t>{
              reinterpret_cast<const void*>(&chunk_scan_mma_kernel<64, NCOL, IN_BYTES, MODE>),
              policy::cuda_scan_mma_smem_bytes(64, NCOL)},
          std::pair<const void*, size_t>{
              reinterpret_cast<const void*>(&chunk_scan_mma_kernel<128, NCOL, IN_BYTES, MODE>),
              policy::cuda_scan_mma_smem_bytes(128, NCOL)}})
        if (const cudaError_t e = scan::raise_smem_limit(kernel, bytes, smem_limit)) return e;
    return cudaSuccess;
}

// Instantiated in chunk_scan_bf16.cu and chunk_scan_fp16.cu (chunk_scan.cuh's
// macro: it names launch_in / set_attributes_in of the namespace it is used in).
GDN_SCAN_INSTANCES(extern, 2, ScanMode::kBf16)
GDN_SCAN_INSTANCES(extern, 4, ScanMode::kBf16)
GDN_SCAN_INSTANCES(extern, 2, ScanMode::kFp16)
GDN_SCAN_INSTANCES(extern, 4, ScanMode::kFp16)

}  // namespace scan_mma
}  // namespace gdn::cuda
