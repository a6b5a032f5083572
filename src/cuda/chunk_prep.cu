// The chunked path's prep: everything of a chunk that does not depend on the
// state, for every chunk of a window at once (DESIGN.md §1):
//     A[t][i] = β_t e^{γ_t−γ_i} k̂_t·k̂_i   (i < t)      T = (I + A)^{-1}
//     P[t][i] = e^{γ_t−γ_i} q̂_t·k̂_i       (i <= t)
// One block per (32-token tile of chunk starts, key head): k̂·k̂ and q̂·k̂ once
// per key head, then for each of its value heads T, γ and β on one warp and P
// on another; in the BF16/FP16/BF16X3/FP16X3 modes those warps write the
// register-state scan's operands instead (−W, Tβ and P as 16-bit values, the
// per-token factors; BF16X3 and FP16X3 −W's remainders, BF16X3 Tβ's and P's
// second remainders too; chunk_scan_mma.cuh). Chunks
// start at their sequence's first token and every 32 tokens after it; a tile
// usually holds one chunk start, more where sequences begin inside it. The rows are written at the chunk's position in the
// window, so chunks of different sequences never share a row.
#include <type_traits>

#include "common/dispatch.hpp"
#include "cuda/device_common.cuh"
#include "cuda/mma.cuh"

namespace gdn::cuda {

namespace {

constexpr int kThreads = policy::kCudaPrepThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = policy::kCudaChunk;
static_assert(kChunk == 32, "one lane per token of a chunk");

// k̂·k̂ and q̂·k̂ (GRAM): FP32 FMAs of the scaled rows in the FP32 and TF32X3
// modes (ScanMode::kFp32); in the BF16 and FP16 modes, whose scan takes k and
// q as 16-bit operands anyway, mma.sync of the raw rows as 16-bit operands of
// that type (ScanMode::kBf16 / kFp16), scaled by the q/k factors after the
// sum. Their products are exact in FP32; rows of another input type are each
// a 16-bit value and its 16-bit remainder (three products: ~2^-16 relative).
// BF16X3 (ScanMode::kBf16x3) as BF16, and its scan's operands split further:
// the k/q rows' remainders (w.kq16lo) and −W's product and rounding; FP16X3
// (ScanMode::kFp16x3) the same on FP16 terms.
template <ScanMode GRAM>
constexpr bool kMmaGram = kRegStateScan<GRAM>;

// The shared-memory layout of prep_chunk, as the policy sizes it.
constexpr size_t prep_smem_bytes(int K) {
    return sizeof(float) * (64 * size_t(K + 8) + 2 * 32 * 33 + kWarps * 32 * 32 + 64);
}
static_assert(prep_smem_bytes(64) == policy::cuda_prep_smem_bytes(64) &&
                  prep_smem_bytes(128) == policy::cuda_prep_smem_bytes(128),
              "prep shared-memory layout");

// Loads at constant offsets from one row address (IN_BYTES: the input's
// element width; bf16 and f16 are told apart at conversion).
template <int K, int IN_BYTES, ScanMode GRAM>
__device__ void prep_chunk(const Params& p, const ChunkScratch& w, int32_t kh, int64_t cs,
                           int64_t row0, int L, float* smem) {
    using In = typename Raw<IN_BYTES>::type;
    constexpr bool MMA = kMmaGram<GRAM>;
    // The rows (policy::cuda_prep_smem_bytes): FP32 q̂, k̂ rows of K + 4, or
    // (MMA) the raw 16-bit k and q rows and their remainders in rows of K + 8
    // (the 8 rows of an ldmatrix 8x8 matrix in distinct banks).
    constexpr int LD = K + 4, LD16 = K + 8;
    float* q_s = smem;                           // [32][LD] q̂ rows
    float* k_s = q_s + 32 * LD;                  // [32][LD] k̂ rows
    uint16_t* r16 = reinterpret_cast<uint16_t*>(smem);  // [4][32][LD16]: k, q, k rem., q rem.
    float* kk_s = smem + 64 * LD16;              // [32][33] k̂_t·k̂_i
    float* qk_s = kk_s + 32 * 33;                // [32][33] q̂_t·k̂_i (FP16X3: q_t·k̂_i)
    float* a_all = qk_s + 32 * 33;               // [kWarps][32][32] A of the warp's value head
    float* f_s = a_all + kWarps * 32 * 32;       // [32][2] qf, kf (MMA)
    // BF16X3, inputs other than BF16: the k and q rows' second remainders
    // [2][32][LD16] for q·k, in the warps' A buffers (unused until the tasks).
    uint16_t* r16x2 = reinterpret_cast<uint16_t*>(a_all);
    static_assert(64 * LD16 >= 2 * 32 * LD, "the rows' region holds either form");
    static_assert(2 * 32 * LD16 * 2 <= kWarps * 32 * 32 * 4, "the second remainders fit the A buffers");
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const bool bf16_in = p.in_dt == GDN_DTYPE_BF16;

    // A value head's work is two tasks: task 2gi (A, T, γ, β) and task 2gi+1
    // (P), so G = 3 keeps 6 warps busy instead of 3. kWarps is even: a warp
    // keeps its kind of task, and only the T warps use their A buffer.
    static_assert(kWarps % 2 == 0, "a warp keeps one kind of task");
    const bool t_task = (warp & 1) == 0;
    float g_raw = 0.0f, b_raw = 0.0f;  // the stored g, β of the warp's task's head
    auto load_gates = [&](int task) {
        if (lane >= L) return;  // past the chunk's end: no decay, no update
        const int32_t h = value_head_of(p, kh, task >> 1);
        const int64_t tok = cs + lane;
        g_raw = load_float(p.g, p.gate_dt, tok * p.g_tok + h * p.g_head);
        if (t_task) b_raw = load_float(p.beta, p.gate_dt, tok * p.b_tok + h * p.b_head);
    };
    // The first task's gates are loaded with the rows, so their latency
    // overlaps the rows' and the products.
    if (warp < 2 * p.G) load_gates(warp);

    // Warp `warp` owns rows warp + kWarps m. Where every q and k row is
    // aligned to J elements (VEC), lane holds their elements J lane .. J lane
    // + J − 1, loaded and stored J at a time; otherwise lane + 32 j. The
    // sums of squares below add a lane's elements in that order. Every load
    // in flight at once.
    constexpr int RW = 32 / kWarps, J = K / 32;
    static_assert(RW * kWarps == 32 && (J == 2 || J == 4), "whole rows per warp");
    const bool vec = ((reinterpret_cast<uintptr_t>(p.q) | reinterpret_cast<uintptr_t>(p.k) |
                       uint64_t(p.q_tok * IN_BYTES) | uint64_t(p.q_head * IN_BYTES) |
                       uint64_t(p.k_tok * IN_BYTES) | uint64_t(p.k_head * IN_BYTES)) &
                      (J * IN_BYTES - 1)) == 0;
    In qb[RW][J], kb[RW][J];
    auto load_rows = [&](auto vec_t) {
        constexpr bool VEC = decltype(vec_t)::value;
        // J elements of In from a row, as one load.
        auto load = [&](const In* row, In (&x)[J]) {
            if constexpr (VEC) {
                const In* at = row + J * lane;
                if constexpr (J * IN_BYTES == 16) {
                    const uint4 v = __ldg(reinterpret_cast<const uint4*>(at));
                    x[0] = In(v.x), x[1] = In(v.y), x[2] = In(v.z), x[3] = In(v.w);
                } else if constexpr (J * IN_BYTES == 8) {
                    const uint2 v = __ldg(reinterpret_cast<const uint2*>(at));
                    if constexpr (J == 4)
                        x[0] = In(v.x & 0xffffu), x[1] = In(v.x >> 16), x[2] = In(v.y & 0xffffu), x[3] = In(v.y >> 16);
                    else
                        x[0] = In(v.x), x[1] = In(v.y);
                } else {
                    const uint32_t v = __ldg(reinterpret_cast<const unsigned int*>(at));
                    x[0] = In(v & 0xffffu), x[1] = In(v >> 16);
                }
            } else {
#pragma unroll
                for (int j = 0; j < J; ++j) x[j] = __ldg(row + lane + 32 * j);
            }
        };
#pragma unroll
        for (int m = 0; m < RW; ++m) {
            const int t = warp + kWarps * m;
            if (t < L) {
                load(static_cast<const In*>(p.q) + ((cs + t) * p.q_tok + kh * p.q_head), qb[m]);
                load(static_cast<const In*>(p.k) + ((cs + t) * p.k_tok + kh * p.k_head), kb[m]);
            } else {
#pragma unroll
                for (int j = 0; j < J; ++j) qb[m][j] = kb[m][j] = In(0);
            }
        }
    };
    if (vec)
        load_rows(std::true_type{});
    else
        load_rows(std::false_type{});
    __syncthreads();  // a previous chunk of this tile is done with the buffers

    // From the registers: the raw rows as 16-bit operands for the
    // register-state scan (tokens of this chunk only: the rows past L are the
    // next sequence's), the factors q̂ = qf·q, k̂ = kf·k (the scan applies the
    // same factors to its raw rows), and the rows into shared memory: scaled
    // (FP32 FMAs) or raw 16-bit values and remainders (MMA).
    auto to16 = [&](float x) -> uint16_t {
        if constexpr (!kBf16Operands<GRAM>) return __half_as_ushort(__float2half_rn(x));
        else return __bfloat16_as_ushort(__float2bfloat16_rn(x));
    };
    auto from16 = [&](uint16_t x) -> float {
        if constexpr (!kBf16Operands<GRAM>) return __half2float(__ushort_as_half(x));
        else return __uint_as_float(uint32_t(x) << 16);
    };
    // Inputs of the mode's 16-bit type, and bf16 in the FP16 modes, are exact
    // operands: no remainders (exact_16bit_input).
    const bool exact = exact_16bit_input(GRAM, p.in_dt);
    constexpr bool X3 = kSplitOperands<GRAM>;
    // FP16X3: P and the outputs' e^γ factor without q's factor qf, which
    // the scan applies to each output last (kFp16x3QfLate).
    constexpr bool kQfLate = kFp16x3QfLate<GRAM>;
    constexpr int TPW = kTp16Row<GRAM>;  // a TP16 row (16-bit elements)
    // FP16X3: P, Tβ and −W at their scales (kernels.hpp; 1 in the other
    // modes), qf's factor divided by the scales the scan's outputs carry.
    constexpr float p_scale = kPScale<GRAM>, tb_scale = kTbScale<GRAM>;
    constexpr float qf_unscale = 1.0f / (kValueScale<GRAM> * kPScale<GRAM>);
    auto process_rows = [&](auto vec_t) {
        constexpr bool VEC = decltype(vec_t)::value;
        // A lane's J elements into a row (its first element at row), as one
        // store where VEC.
        auto put16 = [&](uint16_t* row, const uint16_t (&x)[J]) {
            if constexpr (VEC) {
                uint16_t* at = row + J * lane;
                if constexpr (J == 4)
                    *reinterpret_cast<uint2*>(at) = make_uint2(uint32_t(x[0]) | (uint32_t(x[1]) << 16),
                                                               uint32_t(x[2]) | (uint32_t(x[3]) << 16));
                else
                    *reinterpret_cast<uint32_t*>(at) = uint32_t(x[0]) | (uint32_t(x[1]) << 16);
            } else {
#pragma unroll
                for (int j = 0; j < J; ++j) row[lane + 32 * j] = x[j];
            }
        };
        auto put32 = [&](float* row, const float (&x)[J]) {
            if constexpr (VEC) {
                float* at = row + J * lane;
                if constexpr (J == 4)
                    *reinterpret_cast<float4*>(at) = make_float4(x[0], x[1], x[2], x[3]);
                else
                    *reinterpret_cast<float2*>(at) = make_float2(x[0], x[1]);
            } else {
#pragma unroll
                for (int j = 0; j < J; ++j) row[lane + 32 * j] = x[j];
            }
        };
#pragma unroll
        for (int m = 0; m < RW; ++m) {
            const int t = warp + kWarps * m;
            float qx[J], kx[J];
#pragma unroll
            for (int j = 0; j < J; ++j) {
                qx[j] = Raw<IN_BYTES>::to_float(qb[m][j], bf16_in);
                kx[j] = Raw<IN_BYTES>::to_float(kb[m][j], bf16_in);
            }
            if constexpr (MMA) {
                uint16_t* dst = w.kq16 + ((int64_t(kh) * w.rows + row0 + t) * 2) * K;  // k row, q row
                uint16_t kh16[J], qh16[J];
#pragma unroll
                for (int j = 0; j < J; ++j) kh16[j] = to16(kx[j]), qh16[j] = to16(qx[j]);
                if (t < L) {
                    put16(dst, kh16);
                    put16(dst + K, qh16);
                }
                put16(r16 + t * LD16, kh16);
                put16(r16 + (32 + t) * LD16, qh16);
                if (!exact) {
                    uint16_t kl16[J], ql16[J];
#pragma unroll
                    for (int j = 0; j < J; ++j) {
                        kl16[j] = to16(kx[j] - from16(kh16[j]));
                        ql16[j] = to16(qx[j] - from16(qh16[j]));
                    }
                    put16(r16 + (64 + t) * LD16, kl16);
                    put16(r16 + (96 + t) * LD16, ql16);
                    // BF16X3: q·k takes the rows as three terms (exact for FP32).
                    if constexpr (X3) {
                        uint16_t k2[J], q2[J];
#pragma unroll
                        for (int j = 0; j < J; ++j) {
                            k2[j] = to16(kx[j] - from16(kh16[j]) - from16(kl16[j]));
                            q2[j] = to16(qx[j] - from16(qh16[j]) - from16(ql16[j]));
                        }
                        put16(r16x2 + t * LD16, k2);
                        put16(r16x2 + (32 + t) * LD16, q2);
                    }
                    // BF16X3/FP16X3: the scan's k/q remainders (w.kq16lo: not
                    // null for inputs that are not exact, as here).
                    if (X3 && t < L) {
                        uint16_t* lo = w.kq16lo + (dst - w.kq16);
                        put16(lo, kl16);
                        put16(lo + K, ql16);
                    }
                }
            }
            float qq = 0.0f, kk = 0.0f;
            if (p.flags & GDN_FLAG_QK_L2NORM) {
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    qq = fmaf(qx[j], qx[j], qq);
                    kk = fmaf(kx[j], kx[j], kk);
                }
                qq = warp_sum(qq);
                kk = warp_sum(kk);
            }
            const float qf = q_factor(p, qq), kf = k_factor(p, kk);
            if constexpr (MMA) {
                if (lane == 0) f_s[2 * t] = qf, f_s[2 * t + 1] = kf;
            } else {
                float qs[J], ks[J];
#pragma unroll
                for (int j = 0; j < J; ++j) qs[j] = qx[j] * qf, ks[j] = kx[j] * kf;
                put32(q_s + t * LD, qs);
                put32(k_s + t * LD, ks);
            }
            if (!MMA && lane == 0 && t < L) {
                float* f = w.qkf + (int64_t(kh) * w.rows + row0 + t) * 2;
                f[0] = qf;
                f[1] = kf;
            }
        }
    };
    if (vec)
        process_rows(std::true_type{});
    else
        process_rows(std::false_type{});
    __syncthreads();

    if constexpr (MMA) {
        // k·k and q·k of the raw rows: warp 3 m + b (m = 0: k·k, 1: q·k) the
        // 16x16 block b of the lower triangle ((0, 0), (1, 0), (1, 1)), K / 16
        // steps of two m16n8k16 (remainder products first, then the values),
        // scaled by the factors after the sum. The upper triangle is never read.
        // BF16X3, inputs other than BF16: q·k of three-term rows, the term
        // pairs i + j <= 2 (q̂·k̂ sets P, whose error the output norm
        // amplifies on rows of small RMS: 2-term rows, 16 bits, left 3.6e-5 on
        // the "every flag" test shape in a CPU model of this scan; k·k as two
        // terms is enough there).
        if (warp < 6) {
            const int mat = warp / 3, blk = warp % 3;
            const int bm = blk == 0 ? 0 : 1, bn = blk == 2 ? 1 : 0;
            const int g = lane >> 2, tq = lane & 3;
            // ldmatrix row addresses: A from rows t (k or q), B from rows i (k).
            const uint16_t* a_row = r16 + (32 * mat + 16 * bm + (lane & 15)) * LD16 + (lane >> 4) * 8;
            const uint16_t* b_row =
                r16 + (16 * bn + (lane >> 4) * 8 + (lane & 7)) * LD16 + ((lane >> 3) & 1) * 8;
            const int x2_off = int(r16x2 - r16);  // X3: the second remainders' rows
            float acc[2][4] = {};
#pragma unroll
            for (int s = 0; s < K / 16; ++s) {
                uint32_t a[4], b[4];
                mma::ldmatrix_x4<false>(a, a_row + 16 * s);
                mma::ldmatrix_x4<false>(b, b_row + 16 * s);
                if (!exact) {
                    uint32_t al[4], bl[4];
                    mma::ldmatrix_x4<false>(al, a_row + 64 * LD16 + 16 * s);
                    mma::ldmatrix_x4<false>(bl, b_row + 64 * LD16 + 16 * s);
                    if (X3 && mat == 1) {
                        uint32_t a2[4], b2[4];
                        mma::ldmatrix_x4<false>(a2, a_row + x2_off + 16 * s);
                        mma::ldmatrix_x4<false>(b2, b_row + x2_off + 16 * s);
                        mma::mma16<GRAM>(acc[0], a2, {b[0], b[1]});
                        mma::mma16<GRAM>(acc[1], a2, {b[2], b[3]});
                        mma::mma16<GRAM>(acc[0], al, {bl[0], bl[1]});
                        mma::mma16<GRAM>(acc[1], al, {bl[2], bl[3]});
                        mma::mma16<GRAM>(acc[0], a, {b2[0], b2[1]});
                        mma::mma16<GRAM>(acc[1], a, {b2[2], b2[3]});
                    }
                    mma::mma16<GRAM>(acc[0], al, {b[0], b[1]});
                    mma::mma16<GRAM>(acc[1], al, {b[2], b[3]});
                    mma::mma16<GRAM>(acc[0], a, {bl[0], bl[1]});
                    mma::mma16<GRAM>(acc[1], a, {bl[2], bl[3]});
                }
                mma::mma16<GRAM>(acc[0], a, {b[0], b[1]});
                mma::mma16<GRAM>(acc[1], a, {b[2], b[3]});
            }
            float* dst = mat == 0 ? kk_s : qk_s;
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int t = 16 * bm + g + 8 * (e >> 1), i = 16 * bn + 8 * nt + 2 * tq + (e & 1);
                    // FP16X3: q·k̂ without q's factor (kQfLate).
                    const float ft = kQfLate && mat == 1 ? 1.0f : f_s[2 * t + 1 - mat];
                    dst[t * 33 + i] = acc[nt][e] * ft * f_s[2 * i + 1];
                }
        }
        __syncthreads();
    }

    // k̂_t·k̂_i and q̂_t·k̂_i (FP32 FMAs): a 2x2 tile of each per thread, for
    // the 136 tiles on or below the diagonal only, packed onto the first
    // threads so that no warp carries idle lanes through the loop (the upper
    // triangle is never read).
    constexpr int kTiles = 16 * 17 / 2;
    static_assert(kTiles <= kThreads, "one tile per thread");
    if (!MMA && tid < kTiles) {
        int ti = 0;  // tile tid in row-major order: row ti, column tj <= ti
        while ((ti + 1) * (ti + 2) / 2 <= tid) ++ti;
        const int tj = tid - ti * (ti + 1) / 2;
        float akk[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
        float aqk[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
        const float* ka0 = k_s + (2 * ti) * LD;
        const float* ka1 = ka0 + LD;
        const float* qa0 = q_s + (2 * ti) * LD;
        const float* qa1 = qa0 + LD;
        const float* kb0 = k_s + (2 * tj) * LD;
        const float* kb1 = kb0 + LD;
#pragma unroll 4
        for (int r = 0; r < K; r += 4) {
            const float4 x0 = *reinterpret_cast<const float4*>(ka0 + r);
            const float4 x1 = *reinterpret_cast<const float4*>(ka1 + r);
            const float4 y0 = *reinterpret_cast<const float4*>(qa0 + r);
            const float4 y1 = *reinterpret_cast<const float4*>(qa1 + r);
            const float4 b0 = *reinterpret_cast<const float4*>(kb0 + r);
            const float4 b1 = *reinterpret_cast<const float4*>(kb1 + r);
            auto dot = [](float acc, float4 a, float4 b) {
                acc = fmaf(a.x, b.x, acc);
                acc = fmaf(a.y, b.y, acc);
                acc = fmaf(a.z, b.z, acc);
                return fmaf(a.w, b.w, acc);
            };
            akk[0][0] = dot(akk[0][0], x0, b0);
            akk[0][1] = dot(akk[0][1], x0, b1);
            akk[1][0] = dot(akk[1][0], x1, b0);
            akk[1][1] = dot(akk[1][1], x1, b1);
            aqk[0][0] = dot(aqk[0][0], y0, b0);
            aqk[0][1] = dot(aqk[0][1], y0, b1);
            aqk[1][0] = dot(aqk[1][0], y1, b0);
            aqk[1][1] = dot(aqk[1][1], y1, b1);
        }
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int b = 0; b < 2; ++b) {
                kk_s[(2 * ti + a) * 33 + 2 * tj + b] = akk[a][b];
                qk_s[(2 * ti + a) * 33 + 2 * tj + b] = aqk[a][b];
            }
    }
    if constexpr (!MMA) __syncthreads();

    // A value head's tasks: task 2gi (A, T, γ, β) and task 2gi+1 (P). FP32
    // variant: T, P, γ and β to the scratch. MMA variant: the register-state
    // scan's operands (chunk_scan_mma.cuh) built from them: P's task writes
    // P as 16-bit values and remainders and the per-token factors; T's task
    // Tβ = T diag(β) likewise and −W = −T diag(β e^γ kf) k (mma: A rounded
    // to 16 bits, B the raw 16-bit k rows, W rounded to 16 bits).
    float* a_s = a_all + warp * 32 * 32;
    auto run_task = [&](int task) {
        const int32_t h = value_head_of(p, kh, task >> 1);
        if (task != warp) load_gates(task);
        float g = 0.0f, beta = 0.0f;  // past the chunk's end: no decay, no update
        if (lane < L) {
            g = gate_of(p, g_raw, h);
            if (t_task) beta = beta_of(p, b_raw);
        }
        // γ_t = g_0 + ... + g_t. BF16X3: e^{γ_t−γ_i} takes γ_t − γ_i as lane
        // i's running sum of g_{i+1..t} in the A and P loops, rounded relative
        // to the difference, not to |γ| (raw gates reach |γ| ~ 10^2 in a chunk:
        // ~1e-5 relative from FP32 γ in the CPU model, the FP32 floor of the
        // "every flag" shape). e^γ itself (qf's and s's factors, the decay)
        // keeps the scan: an error of ~|γ| 2^-24 in γ <= 0 moves e^γ by at
        // most ~2^-24 / e (the model: no change from a compensated scan).
        float gamma = g;
        // e^{γ_t−γ_i} of the A and P loops. BF16/FP16: ex2.approx (~2^-22
        // relative, and |x|·2^-24 from the scaling by log2 e), far below the
        // ~2^-17 of the 16-bit value and remainder that P and Tβ become; two
        // instructions instead of expf's ten. The FP32, TF32X3 and BF16X3
        // modes keep expf; the per-token factors and the decay (FP32 operands
        // of the scan, compounded over chunks) keep it in every mode.
        auto exp_ap = [](float x) {
            if constexpr (GRAM == ScanMode::kBf16 || GRAM == ScanMode::kFp16) {
                float y;  // results below 2^-126 flush to zero
                asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
                return y;
            } else {
                return expf(x);
            }
        };
#pragma unroll
        for (int o = 1; o < 32; o *= 2) {
            const float y = __shfl_up_sync(0xffffffffu, gamma, o);
            if (lane >= o) gamma += y;
        }
        float* tp = MMA ? nullptr : w.TP + (int64_t(h) * w.rows + row0) * 64;
        // MMA: this head's rows of the scan's operands (TP16: Tβ, its
        // remainders, P, its remainders; W16; F4), rows t < L.
        auto head_row = [&] { return int64_t(h) * w.rows + row0; };
        if (!t_task) {
            const int64_t hrow = head_row();
            uint16_t* const p_lane = MMA ? w.TP16 + hrow * TPW + 64 + lane : nullptr;  // P's column `lane`
            // P, column `lane` (MMA: as a 16-bit value and its remainder).
            // BF16X3: run = γ_t − γ_lane for lane <= t; after the loop
            // γ_{L−1} − γ_lane, the exponent of the factor below.
            float run = 0.0f;
#pragma unroll 4
            for (int t = 0; t < L; ++t) {
                const float gt = __shfl_sync(0xffffffffu, X3 ? g : gamma, t);
                if (X3 && lane < t) run += gt;
                // Branch-free: both operands for every lane, then a select
                // (lanes past t may see an infinite exponential).
                const float e = exp_ap(X3 ? run : gt - gamma);
                const float qk = lane <= t ? qk_s[t * 33 + lane] : 0.0f;
                const float x = lane <= t ? e * qk * p_scale : 0.0f;
                if constexpr (MMA) {
                    uint16_t* row = p_lane + t * TPW;
                    const uint16_t hi = to16(x);
                    const float r = x - from16(hi);
                    const uint16_t lo = to16(r);
                    row[0] = hi;
                    row[32] = lo;
                    if constexpr (kSecondRemainders<GRAM>) row[96] = to16(r - from16(lo));  // the second remainder
                } else {
                    tp[t * 64 + 32 + lane] = x;
                }
            }
            if constexpr (MMA) {
                // The per-token factors e^{γ_L−γ_t} kf_t, e^{γ_t} qf_t and the decay e^{γ_L}.
                const float gl = __shfl_sync(0xffffffffu, gamma, L - 1);
                if (lane < L)
                    *reinterpret_cast<float4*>(w.F4 + (hrow + lane) * 4) =
                        make_float4(expf(X3 ? run : gl - gamma) * f_s[2 * lane + 1],
                                    kQfLate ? expf(gamma) * p_scale : expf(gamma) * f_s[2 * lane], expf(gl),
                                    kQfLate ? f_s[2 * lane] * qf_unscale : 0.0f);
            }
            return;
        }
        // A, column `lane` (conflict-free stores; BF16X3: run as in P's loop,
        // to t = 31: g = 0 past the chunk's end).
        float run = 0.0f;
#pragma unroll 4
        for (int t = 0; t < 32; ++t) {
            const float gt = __shfl_sync(0xffffffffu, X3 ? g : gamma, t);
            if (X3 && lane < t) run += gt;
            const float bt = __shfl_sync(0xffffffffu, beta, t);
            const float e = exp_ap(X3 ? run : gt - gamma);  // as in P's loop: no branch
            const float kk = lane < t ? kk_s[t * 33 + lane] : 0.0f;
            a_s[t * 32 + lane] = lane < t ? bt * e * kk : 0.0f;
        }
        __syncwarp();
        // T = (I + A)^{-1} by 16x16 blocks, which shortens the dependent chain
        // of one column from 496 FMAs to 120 + two 16-term dot products:
        //     T11 = (I + A11)^{-1}, T22 = (I + A22)^{-1}, T21 = −T22 (A21 T11).
        // Lane j = lane % 16 of half hf = lane / 16 first substitutes column j
        // of the diagonal block hf (the same sums as a full forward
        // substitution: the terms it leaves out are exact zeros),
        //     Td[t] = δ_tj − Σ_{i<t} A[o+t][o+i] Td[i],   o = 16 hf,
        // then rows 8 hf .. 8 hf + 7 of column j of A21 T11 and of T21.
        const int j = lane & 15, hf = lane >> 4, o = 16 * hf;
        float Td[16];
#pragma unroll
        for (int t = 0; t < 16; ++t) {
            float acc = t == j ? 1.0f : 0.0f;
            const float4* arow = reinterpret_cast<const float4*>(a_s + (o + t) * 32 + o);
#pragma unroll
            for (int i = 0; i < t; i += 4) {
                const float4 a = arow[i / 4];
                acc = fmaf(-a.x, Td[i], acc);
                if (i + 1 < t) acc = fmaf(-a.y, Td[i + 1], acc);
                if (i + 2 < t) acc = fmaf(-a.z, Td[i + 2], acc);
                if (i + 3 < t) acc = fmaf(-a.w, Td[i + 3], acc);
            }
            Td[t] = acc;
        }
        // Y = A21 T11 (T11 is lower triangular: the full sums are exact).
        float u[16];  // column j of T11, from lane j
#pragma unroll
        for (int m = 0; m < 16; ++m) u[m] = __shfl_sync(0xffffffffu, Td[m], j);
        float y[8];
#pragma unroll
        for (int r = 0; r < 8; ++r) {
            const float4* arow = reinterpret_cast<const float4*>(a_s + (16 + 8 * hf + r) * 32);
            float acc = 0.0f;
#pragma unroll
            for (int m = 0; m < 16; m += 4) {
                const float4 a = arow[m / 4];
                acc = fmaf(a.x, u[m], acc);
                acc = fmaf(a.y, u[m + 1], acc);
                acc = fmaf(a.z, u[m + 2], acc);
                acc = fmaf(a.w, u[m + 3], acc);
            }
            y[r] = acc;
        }
        // T22 as rows, into A's upper right block (zeros nobody reads).
        if (hf) {
#pragma unroll
            for (int m = 0; m < 16; ++m) a_s[m * 32 + 16 + j] = Td[m];
        }
        __syncwarp();
        // T21 = −T22 Y: rows 0..7 of Y's column j from lane j, rows 8..15 are
        // half 1's own (half 0's rows of T22 are zero past column 7).
        float ylo[8];
#pragma unroll
        for (int m = 0; m < 8; ++m) ylo[m] = __shfl_sync(0xffffffffu, y[m], j);
        float t21[8];
#pragma unroll
        for (int r = 0; r < 8; ++r) {
            const float4* trow = reinterpret_cast<const float4*>(a_s + (8 * hf + r) * 32 + 16);
            float acc = 0.0f;
#pragma unroll
            for (int m = 0; m < 16; m += 4) {
                const float4 a = trow[m / 4];
                const float* ym = m < 8 ? ylo + m : y + (m - 8);
                acc = fmaf(a.x, ym[0], acc);
                acc = fmaf(a.y, ym[1], acc);
                acc = fmaf(a.z, ym[2], acc);
                acc = fmaf(a.w, ym[3], acc);
            }
            t21[r] = -acc;
        }
        if constexpr (MMA) {
            // Tβ = T diag(β) as 16-bit values and remainders (rows t < L):
            // lane (j, hf) holds column o + j of the diagonal block hf and
            // column j of rows 16 + 8 hf.. of T21; rows 8 hf.. of the upper
            // right block are zero.
            //
            // And −T diag(s), s = β e^γ kf, rounded to 16 bits as W's A
            // operand, over A in the warp's buffer (every read of A and T22
            // done): rows of 40 halves (an ldmatrix's 8 rows in distinct
            // banks); its upper right block is never read.
            const float b_d = __shfl_sync(0xffffffffu, beta, o + j) * tb_scale,
                        b_l = __shfl_sync(0xffffffffu, beta, j) * tb_scale;
            const float sv = -(beta * expf(gamma) * f_s[2 * lane + 1]) * tb_scale;
            const float s_d = __shfl_sync(0xffffffffu, sv, o + j), s_l = __shfl_sync(0xffffffffu, sv, j);
            constexpr int LDT = 40;
            uint16_t* ts = reinterpret_cast<uint16_t*>(a_s);
            const int64_t hrow = head_row();
            // This lane's elements of Tβ's rows: column o + j of rows o.., and
            // column j (16 + j for the zeros) of rows 8 hf.. and 16 + 8 hf..,
            // at compile-time offsets from two pointers.
            uint16_t* const tb_d = w.TP16 + (hrow + o) * TPW + o + j;
            uint16_t* const tb_l = w.TP16 + (hrow + 8 * hf) * TPW + j;
            auto put = [&](uint16_t* at, float x) {
                const uint16_t hi = to16(x);
                const float r = x - from16(hi);
                const uint16_t lo = to16(r);
                at[0] = hi;
                at[32] = lo;
                if constexpr (kSecondRemainders<GRAM>) at[128] = to16(r - from16(lo));  // the second remainder
            };
            // BF16X3: its remainders too, block (0, 0)'s in the upper right
            // block, rows 16..31's in rows 32..47 (48 rows of 40 halves fit
            // the warp's 32 x 32 floats).
            auto put_ts = [&](int t, int col, float x) {
                const uint16_t hi = to16(x);
                ts[t * LDT + col] = hi;
                if constexpr (X3)
                    ts[t < 16 ? t * LDT + 16 + col : (t + 16) * LDT + col] = to16(x - from16(hi));
            };
            static_assert(!X3 || 48 * LDT * 2 <= 32 * 32 * 4, "the remainders fit the warp's buffer");
            // Rows t < L only; a full chunk (every chunk but a sequence's
            // last) without the checks: straight-line stores.
            auto put_rows = [&](auto full) {
                constexpr bool FULL = decltype(full)::value;
#pragma unroll
                for (int t = 0; t < 16; ++t)
                    if (FULL || o + t < L) put(tb_d + t * TPW, Td[t] * b_d);
#pragma unroll
                for (int r = 0; r < 8; ++r) {
                    const int t = 8 * hf + r;
                    if (FULL || t < L) put(tb_l + r * TPW + 16, 0.0f);
                    if (FULL || 16 + t < L) put(tb_l + (16 + r) * TPW, t21[r] * b_l);
                }
            };
            if (L == kChunk)
                put_rows(std::true_type{});
            else
                put_rows(std::false_type{});
            __syncwarp();
#pragma unroll
            for (int t = 0; t < 16; ++t) put_ts(o + t, o + j, Td[t] * s_d);
#pragma unroll
            for (int r = 0; r < 8; ++r) put_ts(16 + 8 * hf + r, j, t21[r] * s_l);
            __syncwarp();
            // −W = (−T diag(s)) k, 16 of K columns at a time (mma: A from ts,
            // lower block triangle only; B the raw 16-bit k rows), rounded to
            // 16 bits (BF16X3: A and k as values and remainders, the cross
            // products first; W as a value and its remainder).
            const int g = lane >> 2, tq = lane & 3;
            uint32_t ah[2][2][4], al[2][2][4];  // al: X3
#pragma unroll
            for (int ks = 0; ks < 2; ++ks)
#pragma unroll
                for (int mt = ks; mt < 2; ++mt) {
                    const uint16_t* at = ts + (16 * mt + (lane & 15)) * LDT + 16 * ks + (lane >> 4) * 8;
                    mma::ldmatrix_x4<false>(ah[mt][ks], at);
                    if constexpr (X3) mma::ldmatrix_x4<false>(al[mt][ks], at + (mt ? 16 * LDT : 16));
                }
            const int ldk = (((lane >> 3) & 1) * 8 + (lane & 7)) * LD16 + (lane >> 4) * 8;
            // This lane's elements of −W's rows g.. (columns 2 tq, + 1 of a 16-column block).
            uint16_t* const w_lane = w.W16 + (hrow + g) * K + 2 * tq;
#pragma unroll 1
            for (int col0 = 0; col0 < K; col0 += 16) {
                float acc[2][2][4] = {};
#pragma unroll
                for (int ks = 0; ks < 2; ++ks) {
                    uint32_t r[4];
                    mma::ldmatrix_x4<true>(r, r16 + ldk + 16 * ks * LD16 + col0);
#pragma unroll
                    for (int mt = ks; mt < 2; ++mt) {
                        if constexpr (X3) {
                            mma::mma16<GRAM>(acc[mt][0], al[mt][ks], {r[0], r[1]});
                            mma::mma16<GRAM>(acc[mt][1], al[mt][ks], {r[2], r[3]});
                        }
                        mma::mma16<GRAM>(acc[mt][0], ah[mt][ks], {r[0], r[1]});
                        mma::mma16<GRAM>(acc[mt][1], ah[mt][ks], {r[2], r[3]});
                    }
                    if (X3 && !exact) {
                        mma::ldmatrix_x4<true>(r, r16 + ldk + (64 + 16 * ks) * LD16 + col0);
#pragma unroll
                        for (int mt = ks; mt < 2; ++mt) {
                            mma::mma16<GRAM>(acc[mt][0], ah[mt][ks], {r[0], r[1]});
                            mma::mma16<GRAM>(acc[mt][1], ah[mt][ks], {r[2], r[3]});
                        }
                    }
                }
                uint16_t* const wr = w_lane + col0;
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const int t = 16 * mt + g + 8 * hh;
                        if (t >= L) continue;
#pragma unroll
                        for (int nt = 0; nt < 2; ++nt) {
                            const int at = (16 * mt + 8 * hh) * K + 8 * nt;  // from row g
                            uint32_t lo;
                            *reinterpret_cast<uint32_t*>(wr + at) = mma::pack_split<GRAM>(
                                acc[mt][nt][2 * hh], acc[mt][nt][2 * hh + 1], X3 ? &lo : nullptr);
                            if constexpr (X3)
                                *reinterpret_cast<uint32_t*>(w.W16lo + (wr - w.W16) + at) = lo;
                        }
                    }
            }
        } else {
            // Rows of T (t < L): the diagonal blocks, then rows 8 hf + r of the
            // upper right zeros and of T21.
#pragma unroll
            for (int t = 0; t < 16; ++t)
                if (o + t < L) tp[(o + t) * 64 + o + j] = Td[t];
#pragma unroll
            for (int r = 0; r < 8; ++r) {
                const int t = 8 * hf + r;
                if (t < L) tp[t * 64 + 16 + j] = 0.0f;
                if (16 + t < L) tp[(16 + t) * 64 + j] = t21[r];
            }
            if (lane < L) {
                float* gb = w.gb + (int64_t(h) * w.rows + row0 + lane) * 2;
                gb[0] = gamma;
                gb[1] = beta;
            }
        }
        __syncwarp();  // a_s is reused by the warp's next head
    };
    for (int task = warp; task < 2 * p.G; task += kWarps) run_task(task);
}

// SLICED: a time-sliced window (slice > 0; Window in kernels.hpp); its own
// instance, so that the windows of the batch's tokens keep their code as it
// was. One kernel with both walks was 2-9% slower at H_v 48 (run 111,
// docs/perf-notes.md v39), and so is a Window passed as one struct
// parameter: ptxas spills more of this kernel (8-28 bytes instead of 4-12 at
// K = 128) than with the bounds as scalars.
template <int K, int IN_BYTES, ScanMode GRAM, bool SLICED>
__global__ void __launch_bounds__(kThreads, 2) chunk_prep_kernel(const Params p, const ChunkScratch w,
                                                              int64_t win0, int64_t win1,
                                                              int64_t slice) {
    // The kernel after this one (the window's scan, or the output norm) may
    // be launched once every block of this grid has started: its blocks take
    // the SMs this grid's last blocks leave and wait there (its
    // grid_dependency_wait) for this grid to complete, instead of being
    // launched only then. No block of this grid is left waiting for an SM.
    allow_dependent_launch();
    // GDN_FLAG_PDL reaches only the first window's prep (backend.cpp clears
    // it for the others, which start beside the scan before they wait): that
    // prep is a programmatic dependent of the caller's work ahead and waits
    // for it before its first access.
    if (p.flags & GDN_FLAG_PDL) grid_dependency_wait();
    extern __shared__ __align__(16) float smem[];
    const int32_t kh = blockIdx.y;
    if constexpr (SLICED) {
        // Block x: chunk x % (slice / kChunk) of sequence x / (slice / kChunk)'s part.
        const int64_t per_seq = slice / kChunk;
        const int32_t n = int32_t(int64_t(blockIdx.x) / per_seq);
        const int64_t j = int64_t(blockIdx.x) % per_seq;
        if (n < p.num_seqs && seq_slot(p, n) >= 0) {
            const int64_t cs = seq_begin(p, n) + win0 + j * kChunk, eos = seq_end(p, n);
            if (cs < eos)
                prep_chunk<K, IN_BYTES, GRAM>(p, w, kh, cs, int64_t(n) * slice + j * kChunk,
                                              int(eos - cs < kChunk ? eos - cs : kChunk), smem);
        }
    } else {
        const int64_t pos0 = win0 + int64_t(blockIdx.x) * kChunk;
        const int64_t pos1 = pos0 + kChunk < win1 ? pos0 + kChunk : win1;
        // The chunk starts in [pos0, pos1): at most one per sequence.
        for (int32_t n = pos0 < win1 ? first_seq_ending_after(p, pos0) : p.num_seqs; n < p.num_seqs;
             ++n) {
            const int64_t bos = seq_begin(p, n), eos = seq_end(p, n);
            if (bos >= pos1) break;
            if (eos <= bos || seq_slot(p, n) < 0) continue;
            const int64_t from = pos0 > bos ? pos0 : bos;
            const int64_t cs = bos + (from - bos + kChunk - 1) / kChunk * kChunk;
            if (cs >= pos1 || cs >= eos) continue;
            const int L = int(eos - cs < kChunk ? eos - cs : kChunk);
            prep_chunk<K, IN_BYTES, GRAM>(p, w, kh, cs, cs - win0, L, smem);
        }
    }
    // Launched to overlap the previous window's scan (backend.cpp), the prep
    // reads only the call's inputs and writes the scratch half that the scan
    // before that one read. Its completion must still imply the previous
    // scan's, which the next scan and epilogue count on (the state, the raw
    // outputs): one thread of the last block waits for it, so that the other
    // blocks free their SMs as soon as they are done.
    if (blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && threadIdx.x == 0)
        grid_dependency_wait();
}

// A window's grid: a block per chunk start of the window's tokens, or per
// chunk of every sequence's part of a time-sliced window (slice · num_seqs
// is at most the window's tokens: backend.cpp).
template <int K, int IN_BYTES, ScanMode GRAM>
cudaError_t launch(const Params& p, const ChunkScratch& w, const Window& win, cudaStream_t stream,
                   bool overlap) {
    const size_t smem = policy::cuda_prep_smem_bytes(K);
    if (win.slice) {
        const dim3 grid(unsigned(int64_t(p.num_seqs) * (win.slice / kChunk)), unsigned(p.Hk));
        return launch_kernel(chunk_prep_kernel<K, IN_BYTES, GRAM, true>, grid, dim3(kThreads), smem,
                             stream, overlap, p, w, win.begin, win.end, win.slice);
    }
    const dim3 grid(unsigned((win.end - win.begin + kChunk - 1) / kChunk), unsigned(p.Hk));
    return launch_kernel(chunk_prep_kernel<K, IN_BYTES, GRAM, false>, grid, dim3(kThreads), smem,
                         stream, overlap, p, w, win.begin, win.end, win.slice);
}

// The instance for the head dimension, the input width and the mode's
// k·k / q·k (the 16-bit rows w.kq16 are written in the BF16/FP16/BF16X3/FP16X3
// modes only; W16lo in BF16X3 and FP16X3 only, which kq16_fp16 tells apart).
template <int K, int IN_BYTES>
cudaError_t launch_in(const Params& p, const ChunkScratch& w, const Window& win, cudaStream_t stream,
                      bool overlap) {
    if (!w.kq16) return launch<K, IN_BYTES, ScanMode::kFp32>(p, w, win, stream, overlap);
    if (w.W16lo)
        return w.kq16_fp16 ? launch<K, IN_BYTES, ScanMode::kFp16x3>(p, w, win, stream, overlap)
                           : launch<K, IN_BYTES, ScanMode::kBf16x3>(p, w, win, stream, overlap);
    if (w.kq16_fp16) return launch<K, IN_BYTES, ScanMode::kFp16>(p, w, win, stream, overlap);
    return launch<K, IN_BYTES, ScanMode::kBf16>(p, w, win, stream, overlap);
}

template <int K>
cudaError_t launch_k(const Params& p, const ChunkScratch& w, const Window& win, cudaStream_t stream,
                     bool overlap) {
    return p.in_dt == GDN_DTYPE_F32 ? launch_in<K, 4>(p, w, win, stream, overlap)
                                    : launch_in<K, 2>(p, w, win, stream, overlap);
}

template <int K>
cudaError_t set_attributes_k(size_t smem_limit) {
    const size_t bytes = policy::cuda_prep_smem_bytes(K);
    if (bytes > smem_limit) return cudaSuccess;  // dispatch keeps such shapes off this path
    for (const void* fn : {reinterpret_cast<const void*>(&chunk_prep_kernel<K, 2, ScanMode::kFp32, false>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 2, ScanMode::kBf16, false>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 2, ScanMode::kFp16, false>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 2, ScanMode::kBf16x3, false>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 2, ScanMode::kFp16x3, false>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 4, ScanMode::kFp32, false>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 4, ScanMode::kBf16, false>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 4, ScanMode::kFp16, false>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 4, ScanMode::kBf16x3, false>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 4, ScanMode::kFp16x3, false>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 2, ScanMode::kFp32, true>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 2, ScanMode::kBf16, true>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 2, ScanMode::kFp16, true>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 2, ScanMode::kBf16x3, true>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 2, ScanMode::kFp16x3, true>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 4, ScanMode::kFp32, true>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 4, ScanMode::kBf16, true>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 4, ScanMode::kFp16, true>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 4, ScanMode::kBf16x3, true>),
                           reinterpret_cast<const void*>(&chunk_prep_kernel<K, 4, ScanMode::kFp16x3, true>)})
        if (const cudaError_t e =
                cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)))
            return e;
    return cudaSuccess;
}

}  // namespace

cudaError_t launch_chunk_prep(const Params& p, const ChunkScratch& w, const Window& win,
                              cudaStream_t stream, bool overlap) {
    if (p.K == 64) return launch_k<64>(p, w, win, stream, overlap);
    if (p.K == 128) return launch_k<128>(p, w, win, stream, overlap);
    return cudaErrorInvalidValue;
}

cudaError_t set_chunk_prep_attributes(size_t smem_limit) {
    if (const cudaError_t e = set_attributes_k<64>(smem_limit)) return e;
    return set_attributes_k<128>(smem_limit);
}

}  // namespace gdn::cuda
