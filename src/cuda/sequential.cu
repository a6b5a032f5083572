// The sequential (token by token) FP32 kernel: prompts on any device, and
// the decode step (one token for each of N sequences whose states live in a
// pool). DESIGN.md §1, per token:
//     d_t = β_t (v_t − e^{g_t} S_{t−1}ᵀ k̂_t)
//     S_t = e^{g_t} S_{t−1} + k̂_t d_tᵀ
//     o_t = S_tᵀ q̂_t = e^{g_t} S_{t−1}ᵀ q̂_t + (k̂_t·q̂_t) d_t
// The last form lets S_{t−1}ᵀk̂ and S_{t−1}ᵀq̂ be summed together, which halves
// the dependent chain of a token.
//
// A block owns `BV` value columns of one (sequence, value head); each column
// is held by kSplit = 4 adjacent lanes, each with KT/4 rows of the state in
// registers, so a column's sums need two shuffles. The tokens come in tiles
// of TT: a tile's q, k, v, g, β are loaded into registers while the previous
// tile computes, then staged in shared memory (with q/k norms, q·k and e^g
// worked out once per token).
#include <atomic>
#include <cstdint>

#include "cuda/device_common.cuh"

namespace gdn::cuda {

namespace {

constexpr int kSplit = 4;

// One token's q/k rows (n floats in shared memory, zero past K): q̂ = qf·q and
// k̂ = kf·k in place, and returns k̂·q̂. Called by one warp; the decode kernel
// shares it so that both kernels give the same bits.
__device__ __forceinline__ float normalise_row(const Params& p, float* q, float* k, int n,
                                               int lane) {
    float qq = 0.0f, kk = 0.0f;
    if (p.flags & GDN_FLAG_QK_L2NORM) {
        for (int r = lane; r < n; r += 32) {
            qq = fmaf(q[r], q[r], qq);
            kk = fmaf(k[r], k[r], kk);
        }
        qq = warp_sum(qq);
        kk = warp_sum(kk);
    }
    const float qf = q_factor(p, qq), kf = k_factor(p, kk);
    float kq = 0.0f;
    for (int r = lane; r < n; r += 32) {
        const float qv = q[r] * qf, kv = k[r] * kf;
        q[r] = qv;
        k[r] = kv;
        kq = fmaf(kv, qv, kq);
    }
    return warp_sum(kq);
}

// TS: GDN_FLAG_TOKEN_STATES (the state after each named token to its slot,
// the own slot only read), an instance of its own so that the others keep
// their registers (the store in the token loop cost up to 172 bytes of spills
// at K = 128 when every instance had it).
template <int KT, int BV, int TT, bool TS = false>
__global__ void __launch_bounds__(BV * kSplit) recurrent_kernel(const Params p) {
    constexpr int NT = BV * kSplit;
    constexpr int NW = NT / 32;
    constexpr int J = KT / (4 * kSplit);  // float4 groups of state rows per thread
    constexpr int LD = KT + 4;            // q/k row stride in shared memory (float4-aligned)
    constexpr int QK_PER = (TT * KT + NT - 1) / NT;
    constexpr int V_PER = (TT * BV + NT - 1) / NT;
    static_assert(KT % (4 * kSplit) == 0, "state rows come in float4 groups per lane");

    __shared__ __align__(16) float q_s[TT][LD];
    __shared__ __align__(16) float k_s[TT][LD];
    __shared__ float v_s[TT][BV];
    __shared__ float o_s[TT][BV];
    __shared__ float decay_s[TT], beta_s[TT], kq_s[TT];

    // GDN_FLAG_PDL: launched as a programmatic dependent of the caller's
    // kernel ahead (sm_90): every argument is read after that work is
    // complete. A no-op otherwise. The next kernel may launch once every
    // block has started (it waits there in turn).
    grid_dependency_wait();
    allow_dependent_launch();
    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int part = tid % kSplit;  // which rows of the state this lane holds
    const int col = tid / kSplit;   // value column within the block
    const int32_t col_blocks = (p.V + BV - 1) / BV;
    const int32_t n = int32_t(blockIdx.x / unsigned(col_blocks));
    const int32_t v0 = int32_t(blockIdx.x % unsigned(col_blocks)) * BV;
    const int32_t h = blockIdx.y;
    const int32_t vc = v0 + col;
    const bool col_ok = vc < p.V;

    const int32_t slot = seq_slot(p, n);
    if (slot < 0) return;  // padding: read nothing, write nothing
    const int64_t bos = seq_begin(p, n);
    const int64_t len = seq_end(p, n) - bos;
    const int32_t kh = key_head_of(p, h);
    float* st = head_state(p, slot, h);

    // Rows of this lane: k = 4 (j kSplit + part) + e, so the 4 lanes of a
    // column read 64 contiguous bytes of a [V][K] state, and a float4 of q/k.
    float S[J][4];
    const bool from_zero = seq_from_zero(p, n);
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int kr = 4 * (j * kSplit + part) + e;
            S[j][e] = (!from_zero && col_ok && kr < p.K) ? st[state_offset(p, kr, vc)] : 0.0f;
        }

    uint32_t q_r[QK_PER], k_r[QK_PER], v_r[V_PER];
    uint32_t g_r = 0, b_r = 0;
    // Loads tile [t0, t0 + tl) into registers (zeros past the tile, K or V).
    auto prefetch = [&](int64_t t0, int tl) {
#pragma unroll
        for (int i = 0; i < QK_PER; ++i) {
            const int e = tid + i * NT;
            const int t = e / KT, r = e % KT;
            const bool ok = e < TT * KT && t < tl && r < p.K;
            const int64_t tok = bos + t0 + t;
            q_r[i] = ok ? load_bits(p.q, p.in_dt, tok * p.q_tok + kh * p.q_head + r) : 0u;
            k_r[i] = ok ? load_bits(p.k, p.in_dt, tok * p.k_tok + kh * p.k_head + r) : 0u;
        }
#pragma unroll
        for (int i = 0; i < V_PER; ++i) {
            const int e = tid + i * NT;
            const int t = e / BV, c = e % BV;
            const bool ok = e < TT * BV && t < tl && v0 + c < p.V;
            const int64_t tok = bos + t0 + t;
            v_r[i] = ok ? load_bits(p.v, p.in_dt, tok * p.v_tok + h * p.v_head + v0 + c) : 0u;
        }
        if (tid < tl) {
            const int64_t tok = bos + t0 + tid;
            g_r = load_bits(p.g, p.gate_dt, tok * p.g_tok + h * p.g_head);
            b_r = load_bits(p.beta, p.gate_dt, tok * p.b_tok + h * p.b_head);
        }
    };
    // Registers -> shared memory, as FP32.
    auto stage = [&](int tl) {
#pragma unroll
        for (int i = 0; i < QK_PER; ++i) {
            const int e = tid + i * NT;
            if (e < TT * KT) {
                const int t = e / KT, r = e % KT;
                q_s[t][r] = bits_to_float(q_r[i], p.in_dt);
                k_s[t][r] = bits_to_float(k_r[i], p.in_dt);
            }
        }
#pragma unroll
        for (int i = 0; i < V_PER; ++i) {
            const int e = tid + i * NT;
            if (e < TT * BV) v_s[e / BV][e % BV] = bits_to_float(v_r[i], p.in_dt);
        }
        if (tid < tl) {
            decay_s[tid] = expf(gate_of(p, bits_to_float(g_r, p.gate_dt), h));
            beta_s[tid] = beta_of(p, bits_to_float(b_r, p.gate_dt));
        }
    };

    if (len > 0) prefetch(0, int(len < TT ? len : TT));
    for (int64_t t0 = 0; t0 < len; t0 += TT) {
        const int tl = int(len - t0 < TT ? len - t0 : TT);
        __syncthreads();  // the previous tile's readers are done
        stage(tl);
        __syncthreads();
        if (t0 + TT < len) {
            const int64_t rest = len - t0 - TT;
            prefetch(t0 + TT, int(rest < TT ? rest : TT));
        }
        // q̂ = qf·q, k̂ = kf·k, and k̂·q̂, one warp per token.
        for (int t = warp; t < tl; t += NW) {
            const float kq = normalise_row(p, q_s[t], k_s[t], KT, lane);
            if (lane == 0) kq_s[t] = kq;
        }
        __syncthreads();

        // Below sm_90 (unchanged there), at K = 128 with one-token tiles,
        // ptxas spilled 20-96 bytes at its 128-register choice unless this
        // loop is unrolled by 2 (the tokens stay in order: the same sums).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#pragma unroll (KT == 128 && TT == 1 ? 2 : 1)
#endif
        for (int t = 0; t < tl; ++t) {
            const float4* k4 = reinterpret_cast<const float4*>(k_s[t]);
            const float4* q4 = reinterpret_cast<const float4*>(q_s[t]);
            float4 kr[J];
            float kv0 = 0.0f, kv1 = 0.0f, sq0 = 0.0f, sq1 = 0.0f;
#pragma unroll
            for (int j = 0; j < J; ++j) {
                kr[j] = k4[j * kSplit + part];
                const float4 qr = q4[j * kSplit + part];
                kv0 = fmaf(S[j][0], kr[j].x, kv0);
                kv1 = fmaf(S[j][1], kr[j].y, kv1);
                kv0 = fmaf(S[j][2], kr[j].z, kv0);
                kv1 = fmaf(S[j][3], kr[j].w, kv1);
                sq0 = fmaf(S[j][0], qr.x, sq0);
                sq1 = fmaf(S[j][1], qr.y, sq1);
                sq0 = fmaf(S[j][2], qr.z, sq0);
                sq1 = fmaf(S[j][3], qr.w, sq1);
            }
            float kv = kv0 + kv1, sq = sq0 + sq1;
            kv += __shfl_xor_sync(0xffffffffu, kv, 1);
            sq += __shfl_xor_sync(0xffffffffu, sq, 1);
            kv += __shfl_xor_sync(0xffffffffu, kv, 2);
            sq += __shfl_xor_sync(0xffffffffu, sq, 2);
            const float decay = decay_s[t];
            const float d = beta_s[t] * fmaf(-decay, kv, v_s[t][col]);
            const float o = fmaf(decay, sq, kq_s[t] * d);
#pragma unroll
            for (int j = 0; j < J; ++j) {
                S[j][0] = fmaf(kr[j].x, d, decay * S[j][0]);
                S[j][1] = fmaf(kr[j].y, d, decay * S[j][1]);
                S[j][2] = fmaf(kr[j].z, d, decay * S[j][2]);
                S[j][3] = fmaf(kr[j].w, d, decay * S[j][3]);
            }
            if (part == 0) o_s[t][col] = o;
            // GDN_FLAG_TOKEN_STATES: the state after this token, to the slot it names
            // (with GDN_FLAG_BLOCK_STATES only a block's last token and the sequence's).
            if constexpr (TS) {
                const int64_t pos = t0 + t;
                const bool read = !(p.flags & GDN_FLAG_BLOCK_STATES) || (pos + 1) % GDN_STATE_BLOCK == 0 ||
                                  pos == len - 1;
                const int32_t ts = read ? p.token_state_indices[bos + pos] : -1;
                if (ts >= 0) {
                    float* dst = head_state(p, ts, h);
                    // The lane's row and column through a shuffle (the same
                    // values): their 4 J offsets are then computed here, not
                    // hoisted out of the token loop into live registers.
                    const int my_part = __shfl_sync(0xffffffffu, part, lane);
                    const int32_t my_vc = __shfl_sync(0xffffffffu, vc, lane);
#pragma unroll
                    for (int j = 0; j < J; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int kr = 4 * (j * kSplit + my_part) + e;
                            if (col_ok && kr < p.K) dst[state_offset(p, kr, my_vc)] = S[j][e];
                        }
                }
            }
        }
        __syncthreads();

        if (!(p.flags & GDN_FLAG_OUTPUT_NORM)) {
            for (int e = tid; e < tl * BV; e += NT) {
                const int t = e / BV, c = e % BV;
                if (v0 + c < p.V)
                    store_float(p.out, p.out_dt, (bos + t0 + t) * p.o_tok + h * p.o_head + v0 + c,
                                o_s[t][c]);
            }
        } else {
            // The block holds the whole row (BV >= V): gated RMSNorm here.
            for (int t = warp; t < tl; t += NW) norm_out_row(p, o_s[t], bos + t0 + t, h, lane);
        }
    }

    if constexpr (!TS) {  // (per-token states: the own slot is only read)
#pragma unroll
        for (int j = 0; j < J; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int kr = 4 * (j * kSplit + part) + e;
                if (col_ok && kr < p.K) st[state_offset(p, kr, vc)] = S[j][e];
            }
    }
}

// The decode step (max_seqlen == 1: 0 or 1 token per sequence; more would be
// handled too, token by token) on a [K][V] state. A block owns BC value
// columns of one (sequence, value head). Thread (part, c) holds the KT/4 rows
// of `part` of column c (rows 16 j + 4 part + e, the sequential kernel's
// split), 32 values at K = 128: the update of column c needs only column c's
// sums (d_c = β (v_c − e^g (Sᵀk̂)_c)), so the columns split over blocks and
// threads with no reduction between them. A warp is 32 adjacent columns of
// one part, so each of its state loads and stores is one 128-byte line; all
// of a thread's state loads are issued first and stay in flight across the
// q/k/v loads and the barriers. The 4 parts' sums meet in shared memory and
// are added as the sequential kernel's shuffles add them, (P0 + P1) + (P2 +
// P3), after per-part chains in its order; q̂, k̂ and k̂·q̂ come from the same
// normalise_row, d, o and the update from the same expressions: the bits are
// the sequential kernel's (tests/cuda/test_cuda_batch.cpp checks it).
// Blocks per SM the launch bounds ask for: 7 of 128 threads (72 registers,
// 28 warps per SM); 12 of 64 (80 registers: 72 would spill); 2 of 256 and 1
// of 512 (the output norm: fewer would spill). Below sm_90, 6 of 128 (80
// registers) at K = 128 where V is not a compile-time 128 (vt = 0): at 72,
// ptxas spilled 8-16 bytes there. (The host assumes no figure: one block per
// item.)
constexpr int decode_min_blocks(int bc, int kt, int vt) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    const int b32 = kt == 128 && vt == 0 ? 6 : 7;
#else
    const int b32 = 7;
    (void)kt;
    (void)vt;
#endif
    return bc == 32 ? b32 : bc == 16 ? 12 : bc == 64 ? 2 : 1;
}
// The per-token steps the two decode kernels share (decode_kernel and
// decode_stream_kernel give the same bits: the same expressions, inlined).
//
// Token tok's q/k rows into q_s/k_s and (thread 0) e^g and β into decay_s,
// beta_s; returns v of column c. The caller's barrier publishes them.
template <int KT, int NT>
__device__ __forceinline__ float decode_stage(const Params& p, int64_t tok, int32_t kh, int32_t h,
                                              int32_t c, bool col_ok, int tid, float* q_s,
                                              float* k_s, float& decay_s, float& beta_s) {
#pragma unroll
    for (int i = 0; i < (KT + NT - 1) / NT; ++i) {
        const int r = tid + i * NT;
        if (KT % NT == 0 || r < KT) {
            q_s[r] = load_float(p.q, p.in_dt, tok * p.q_tok + kh * p.q_head + r);
            k_s[r] = load_float(p.k, p.in_dt, tok * p.k_tok + kh * p.k_head + r);
        }
    }
    if (tid == 0) {
        decay_s = expf(gate_of(p, load_float(p.g, p.gate_dt, tok * p.g_tok + h * p.g_head), h));
        beta_s = beta_of(p, load_float(p.beta, p.gate_dt, tok * p.b_tok + h * p.b_head));
    }
    return col_ok ? load_float(p.v, p.in_dt, tok * p.v_tok + h * p.v_head + c) : 0.0f;
}

// S·k̂ and S·q̂ of column cl: this thread's rows (S[4 j + e] = row
// 16 j + 4 part + e), then the four parts' partials through red (a barrier
// between), added the same way by every part of the column.
template <int J, int BC>
__device__ __forceinline__ float2 decode_sums(const float (&S)[4 * J], const float* k_s,
                                              const float* q_s, float (&red)[2][kSplit][BC],
                                              int part, int cl) {
    const float4* k4 = reinterpret_cast<const float4*>(k_s);
    const float4* q4 = reinterpret_cast<const float4*>(q_s);
    float kv0 = 0.0f, kv1 = 0.0f, sq0 = 0.0f, sq1 = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j) {
        const float4 kr = k4[j * kSplit + part];
        const float4 qr = q4[j * kSplit + part];
        kv0 = fmaf(S[4 * j + 0], kr.x, kv0);
        kv1 = fmaf(S[4 * j + 1], kr.y, kv1);
        kv0 = fmaf(S[4 * j + 2], kr.z, kv0);
        kv1 = fmaf(S[4 * j + 3], kr.w, kv1);
        sq0 = fmaf(S[4 * j + 0], qr.x, sq0);
        sq1 = fmaf(S[4 * j + 1], qr.y, sq1);
        sq0 = fmaf(S[4 * j + 2], qr.z, sq0);
        sq1 = fmaf(S[4 * j + 3], qr.w, sq1);
    }
    red[0][part][cl] = kv0 + kv1;
    red[1][part][cl] = sq0 + sq1;
    __syncthreads();
    return make_float2((red[0][0][cl] + red[0][1][cl]) + (red[0][2][cl] + red[0][3][cl]),
                       (red[1][0][cl] + red[1][1][cl]) + (red[1][2][cl] + red[1][3][cl]));
}

// S = decay S + k̂ d over this thread's rows.
template <int J>
__device__ __forceinline__ void decode_update(float (&S)[4 * J], const float* k_s, float decay,
                                              float d, int part) {
    const float4* k4 = reinterpret_cast<const float4*>(k_s);
#pragma unroll
    for (int j = 0; j < J; ++j) {
        const float4 kr = k4[j * kSplit + part];
        S[4 * j + 0] = fmaf(kr.x, d, decay * S[4 * j + 0]);
        S[4 * j + 1] = fmaf(kr.y, d, decay * S[4 * j + 1]);
        S[4 * j + 2] = fmaf(kr.z, d, decay * S[4 * j + 2]);
        S[4 * j + 3] = fmaf(kr.w, d, decay * S[4 * j + 3]);
    }
}

template <int KT, int BC, int VT>
__global__ void __launch_bounds__(BC * kSplit, decode_min_blocks(BC, KT, VT)) decode_kernel(const Params p) {
    constexpr int NT = BC * kSplit;
    constexpr int J = KT / (4 * kSplit);  // float4 groups of rows per part
    constexpr int R = 4 * J;              // state rows per thread
    __shared__ __align__(16) float q_s[KT];
    __shared__ __align__(16) float k_s[KT];
    __shared__ float red_s[2][kSplit][BC];  // S·k̂ and S·q̂ partials per part and column
    __shared__ float o_s[BC];               // the output row, for the output norm (BC >= V)
    __shared__ float decay_s, beta_s, kq_s, ir_s;

    grid_dependency_wait();  // GDN_FLAG_PDL (recurrent_kernel's comment)
    const int tid = threadIdx.x, lane = tid & 31;
    const int part = tid / BC, cl = tid % BC;
    const int32_t col_blocks = VT > 0 ? (VT + BC - 1) / BC : (p.V + BC - 1) / BC;
    const int32_t n = int32_t(blockIdx.x / unsigned(col_blocks));
    const int32_t v0 = int32_t(blockIdx.x % unsigned(col_blocks)) * BC;
    const int32_t h = blockIdx.y;
    const int32_t c = v0 + cl;
    const bool col_ok = c < (VT > 0 ? VT : p.V);

    const int32_t slot = seq_slot(p, n);
    if (slot < 0) return;  // padding: read nothing, write nothing
    const int64_t bos = seq_begin(p, n);
    const int32_t len32 = int32_t(seq_end(p, n) - bos);  // num_tokens < 2^31
    const bool from_zero = seq_from_zero(p, n);
    if (len32 == 0 && !from_zero) return;  // the state stays as it is: nothing to read or write
    const int32_t kh = key_head_of(p, h);
    // Row 4 part of column c; the thread's rows lie r V floats further, r =
    // 16 j + e, 32-bit offsets (K V < 2^31: admission). With VT = V (128) they
    // are immediates of the accesses.
    float* sc = head_state(p, slot, h) + (int64_t(4 * part) * p.V + c);
    const uint32_t ldv = VT > 0 ? uint32_t(VT) : uint32_t(p.V);

    // S[4 j + e] = row 16 j + 4 part + e of column c.
    float S[R];
    const bool load = !from_zero && col_ok;
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int r = 16 * (i / 4) + (i % 4);
        S[i] = load ? sc[uint32_t(r) * ldv] : 0.0f;
    }
    // The state loads are out: the next kernel may launch (and wait).
    allow_dependent_launch();
    // The output norm (the block holds the whole row: BC >= V, v0 = 0): each
    // column's weight, once, and its z with the token's inputs, so that the
    // norm's global loads are off the path after the sums.
    const bool norm = (p.flags & GDN_FLAG_OUTPUT_NORM) != 0;
    const float wc = norm && part == 0 && col_ok ? p.norm_weight[c] : 0.0f;

    for (int32_t t = 0; t < len32; ++t) {
        const int64_t tok = bos + t;
        if (t > 0) __syncthreads();  // the previous token's readers are done
        const float vc = decode_stage<KT, NT>(p, tok, kh, h, c, col_ok, tid, q_s, k_s, decay_s, beta_s);
        const float zc = norm && part == 0 && col_ok ? load_float(p.z, p.in_dt, tok * p.z_tok + h * p.z_head + c) : 0.0f;
        __syncthreads();
        if (tid < 32) {
            const float kq = normalise_row(p, q_s, k_s, KT, lane);
            if (lane == 0) kq_s = kq;
        }
        __syncthreads();

        const float2 ks = decode_sums<J, BC>(S, k_s, q_s, red_s, part, cl);
        const float kv = ks.x, sq = ks.y;
        const float decay = decay_s;
        const float d = beta_s * fmaf(-decay, kv, vc);
        const float o = fmaf(decay, sq, kq_s * d);
        if (!norm) {
            if (part == 0 && col_ok)
                store_float(p.out, p.out_dt, tok * p.o_tok + h * p.o_head + c, o);
        } else {
            // norm_out_row's expressions: warp 0 the row's 1 / rms, each column's thread its
            // output. o_s and ir_s are free: their last readers have passed the barriers above.
            if (part == 0) o_s[cl] = o;
            __syncthreads();
            if (tid < 32) {
                const float ir = row_inv_rms(p, o_s, lane);
                if (lane == 0) ir_s = ir;
            }
            __syncthreads();
            if (part == 0 && col_ok)
                store_float(p.out, p.out_dt, tok * p.o_tok + h * p.o_head + c, gated_norm(o, ir_s, wc, zc));
        }
        decode_update<J>(S, k_s, decay, d, part);
    }

    // The store offsets are worked out again (the asm hides that they equal
    // the loads'): kept from the loads, they would take R registers more.
    uint32_t ldv_st = ldv;
    asm volatile("" : "+r"(ldv_st));
    if (col_ok)
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const int r = 16 * (i / 4) + (i % 4);
            sc[uint32_t(r) * (VT > 0 ? uint32_t(VT) : ldv_st)] = S[i];
        }
}

// Decode kernel v4: persistent and software-pipelined (with the output norm
// from kDecodeNormStreamRows rows: NORM below).
// v3 (one block per 32-column item: load, barriers, reduce, store, exit)
// reached 77% of the copy bandwidth at N = 64: a block's loads and stores
// never overlap, and consecutive blocks are the same head of consecutive
// sequences (3 MB apart in the pool). Here a grid of about one round of
// resident blocks walks the items (sequence, value head, 32-column block)
// in address order (item i, i + G, i + 2G, ...: the items in flight at one
// time are a contiguous stretch of the pool), and each block issues the
// next item's q/k/v/g/β and state loads (right after the current item's
// normalisation, before its sums and stores), so every warp has a state
// load in flight nearly all the time. The state is double-buffered in
// registers (S_cur, S_next: the loop is unrolled twice so the two swap
// roles without moves). State loads and stores take the default cache
// policy: evict-first (.cs) cost 2-5% here and in a plain in-place kernel
// (docs/cuda.md, run 54). The math of a token
// is decode_kernel's, expression for expression: the same bits.
struct DecodeMeta {
    int32_t slot;      // < 0: padding, or no such item
    int32_t zero;      // start from a zero state
    int32_t bos, end;  // the sequence's tokens (num_tokens < 2^31)
};

// Blocks per SM the launch bounds ask for (<= 128 registers either way).
constexpr int stream_min_blocks(int bc) { return bc == 16 ? 6 : bc == 32 ? 4 : bc == 64 ? 2 : 1; }

// GDN_FLAG_PDL, before the grid dependency wait: asks L2 for the state of
// item (sequence n, value head h, columns c0 ..), so that a state that
// comes from DRAM (an engine's many layers) is on its way while the kernel
// ahead finishes. Only a hint, and never a bit of difference: the slot is
// read through L2 (ld.global.cg, which leaves no line in L1 for the loads
// after the wait to hit) and may be stale if the kernel ahead writes
// state_indices, in which case a line of the pool is fetched for nothing;
// the state itself is read after the wait, from L2, where every SM's
// stores land. Slots outside the pool are not touched.
template <int KT, int BC, bool VK>
__device__ __forceinline__ void prefetch_state_hint(const Params& p, int32_t n, int32_t h, int32_t c0, int tid,
                                                    int nt) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const int32_t slot = p.state_indices ? __ldcg(p.state_indices + n) : n;
    if (slot < 0 || slot >= p.num_slots || c0 >= p.V) return;
    const int32_t cols = p.V - c0 < BC ? p.V - c0 : BC;
    const float* base = head_state(p, slot, h);
    auto ask = [](const float* a, uint32_t bytes) {  // 16-byte aligned, a multiple of 16
        if ((reinterpret_cast<uintptr_t>(a) & 15u) == 0 && bytes >= 16)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(a), "r"(bytes & ~15u) : "memory");
    };
    if constexpr (VK) {
        if (tid == 0) ask(base + int64_t(c0) * KT, uint32_t(cols) * KT * 4u);  // the columns' rows, contiguous
    } else {
        // Rows of 16 columns are half a 128-byte line: the even item of a
        // pair asks for both (half the requests, the same lines).
        constexpr int kLineCols = 32;
        if constexpr (BC < kLineCols)
            if ((c0 / BC) % (kLineCols / BC) != 0) return;
        const int32_t span = BC < kLineCols ? (p.V - c0 < kLineCols ? p.V - c0 : kLineCols) : cols;
        for (int r = tid; r < KT; r += nt) ask(base + int64_t(r) * p.V + c0, uint32_t(span) * 4u);
    }
#else
    (void)p, (void)n, (void)h, (void)c0, (void)tid, (void)nt;
#endif
}

// NORM (GDN_FLAG_OUTPUT_NORM, [K][V]): an item is a whole row (BC >= V, one
// column block), and after each token's o one warp computes the row's
// 1 / rms and each column's thread stores its output with the z it loaded
// with the token's inputs, as decode_kernel's one-block row does: the same
// bits, with the next row's loads in flight.
template <int KT, int BC, int VT, bool VK, bool NORM = false>
__global__ void __launch_bounds__(BC * kSplit, stream_min_blocks(BC))
    decode_stream_kernel(const Params p, int32_t items) {
    constexpr int NT = BC * kSplit;
    constexpr int J = KT / (4 * kSplit);  // float4 groups of rows per part
    constexpr int R = 4 * J;              // state rows per thread
    constexpr int QK = (KT + NT - 1) / NT;  // q and k elements staged per thread
    constexpr int NX = 2 * QK + 3 + (NORM ? 1 : 0);  // q, k, v, g, β (NORM: z) bits of an item's first token
    __shared__ __align__(16) float q_s[KT];
    __shared__ __align__(16) float k_s[KT];
    __shared__ float red_s[2][kSplit][BC];
    __shared__ float o_s[NORM ? BC : 1];  // NORM: the row's o
    __shared__ float decay_s, beta_s, kq_s, ir_s;

    const int tid = threadIdx.x, lane = tid & 31;
    // [K][V] (VK = false): a warp is 32 adjacent columns of one part, each
    // state access one 128-byte row piece. [V][K] (VK): a warp is 8 columns
    // x the 4 parts, lane = 4 column + part, and a thread's rows 16 j + 4 part
    // .. + 3 are 16 contiguous bytes of its column: each access is 8 pieces
    // of 64 bytes (16-byte aligned: the host checks the pool).
    const int part = VK ? tid % kSplit : tid / BC, cl = VK ? tid / kSplit : tid % BC;
    const int32_t nv = VT > 0 ? VT : p.V;
    const int32_t col_blocks = (nv + BC - 1) / BC;
    const uint32_t ldv = VT > 0 ? uint32_t(VT) : uint32_t(p.V);
    const int32_t G = int32_t(gridDim.x);

    // Item i: sequence n, value head h, this thread's column c.
    auto where = [&](int32_t i, int32_t& n, int32_t& h, int32_t& c) {
        const int32_t nh = i / col_blocks;
        c = (i - nh * col_blocks) * BC + cl;
        n = nh / p.Hv;
        h = nh - n * p.Hv;
    };
    if (p.flags & GDN_FLAG_PDL) {  // this block's first item, before the wait
        int32_t n, h, c;
        where(int32_t(blockIdx.x), n, h, c);
        prefetch_state_hint<KT, BC, VK>(p, n, h, c - cl, tid, NT);
    }
    grid_dependency_wait();  // GDN_FLAG_PDL (recurrent_kernel's comment)
    // NORM: a thread's column is the same in every row (one column block).
    const float wc = NORM && part == 0 && cl < nv ? p.norm_weight[cl] : 0.0f;
    auto meta = [&](int32_t i) {
        DecodeMeta m{-1, 0, 0, 0};
        if (i < items) {
            int32_t n, h, c;
            where(i, n, h, c);
            m.slot = seq_slot(p, n);
            m.zero = seq_from_zero(p, n) ? 1 : 0;
            m.bos = int32_t(seq_begin(p, n));
            m.end = int32_t(seq_end(p, n));
        }
        return m;
    };
    // Issues item i's loads: the first token's q/k/v/g/β first (they head
    // the dependent chain), then the state (zeros from a zero start). Reads
    // nothing for padding, an empty sequence or i >= items.
    auto issue = [&](int32_t i, const DecodeMeta& m, float (&S)[R], uint32_t (&x)[NX]) {
        int32_t n, h, c;
        where(i, n, h, c);
        const bool col_ok = c < nv;
        const bool tok = i < items && m.slot >= 0 && m.end > m.bos;
        const int32_t kh = key_head_of(p, h);
        const int64_t t0 = int64_t(m.bos);
#pragma unroll
        for (int e = 0; e < QK; ++e) {
            const int r = tid + e * NT;
            const bool ok = tok && (KT % NT == 0 || r < KT);
            x[e] = ok ? load_bits(p.q, p.in_dt, t0 * p.q_tok + kh * p.q_head + r) : 0u;
            x[QK + e] = ok ? load_bits(p.k, p.in_dt, t0 * p.k_tok + kh * p.k_head + r) : 0u;
        }
        x[2 * QK] = tok && col_ok ? load_bits(p.v, p.in_dt, t0 * p.v_tok + h * p.v_head + c) : 0u;
        x[2 * QK + 1] = tok && tid == 0 ? load_bits(p.g, p.gate_dt, t0 * p.g_tok + h * p.g_head) : 0u;
        x[2 * QK + 2] = tok && tid == 0 ? load_bits(p.beta, p.gate_dt, t0 * p.b_tok + h * p.b_head) : 0u;
        if constexpr (NORM)  // z of the first token, for the column's output
            x[NX - 1] = tok && col_ok && part == 0 ? load_bits(p.z, p.in_dt, t0 * p.z_tok + h * p.z_head + c) : 0u;
        const bool ld = tok && !m.zero && col_ok;
        if constexpr (VK) {
            if (ld) {
                const float4* sc =
                    reinterpret_cast<const float4*>(head_state(p, m.slot, h) + (int64_t(c) * KT + 4 * part));
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    const float4 x4 = sc[kSplit * j];
                    S[4 * j] = x4.x, S[4 * j + 1] = x4.y, S[4 * j + 2] = x4.z, S[4 * j + 3] = x4.w;
                }
            } else {
#pragma unroll
                for (int e = 0; e < R; ++e) S[e] = 0.0f;
            }
        } else {
            const float* sc = ld ? head_state(p, m.slot, h) + (int64_t(4 * part) * p.V + c) : p.state;
#pragma unroll
            for (int e = 0; e < R; ++e) {
                const int r = 16 * (e / 4) + (e % 4);
                S[e] = ld ? sc[uint32_t(r) * ldv] : 0.0f;
            }
        }
    };
    // Processes item i (meta mc, state Sc, first-token bits xc) and issues
    // item i + G into (mn, Sn, xn) on the way.
    auto step = [&](int32_t i, const DecodeMeta& mc, float (&Sc)[R], const uint32_t (&xc)[NX],
                    DecodeMeta& mn, float (&Sn)[R], uint32_t (&xn)[NX]) {
        const int32_t inext = i + G;
        // This block's last item (its loads are out): the next kernel may
        // launch once every block is here, and wait.
        if (inext >= items) allow_dependent_launch();
        mn = meta(inext);  // in flight while this item stages and normalises
        int32_t n, h, c;
        where(i, n, h, c);
        const bool col_ok = c < nv;
        const int32_t len = mc.end - mc.bos;
        // Block-uniform: padding, or an empty sequence that keeps its state.
        const bool live = mc.slot >= 0 && (len > 0 || mc.zero);
        if (!live || len == 0) issue(inext, mn, Sn, xn);
        if (!live) return;
        // One token, after its q/k rows, v (vc), e^g and β are staged: the
        // first token (first = true) issues the next item's loads.
        auto token = [&](int64_t tok, float vc, float zc, bool first) {
            __syncthreads();
            if (tid < 32) {
                const float kq = normalise_row(p, q_s, k_s, KT, lane);
                if (lane == 0) kq_s = kq;
            }
            __syncthreads();
            // The next item's loads go out before this item's sums and stores.
            if (first) issue(inext, mn, Sn, xn);

            const float2 ks = decode_sums<J, BC>(Sc, k_s, q_s, red_s, part, cl);
            const float kv = ks.x, sq = ks.y;
            const float decay = decay_s;
            const float d = beta_s * fmaf(-decay, kv, vc);
            const float o = fmaf(decay, sq, kq_s * d);
            if constexpr (NORM) {
                // norm_out_row's arithmetic, its global loads off the block's path: warp 0
                // sums the row's squares from o_s in its order, and each column's thread
                // stores its output with z (loaded with the token's inputs) and its weight
                // (loaded once). o_s and ir_s are free: their last readers have passed the
                // two barriers above. (decode_kernel's lines: as one shared function they
                // made ptxas spill 16-216 bytes in these instances, perf-notes v74.)
                if (part == 0) o_s[cl] = o;
                __syncthreads();
                if (tid < 32) {
                    const float ir = row_inv_rms(p, o_s, lane);
                    if (lane == 0) ir_s = ir;
                }
                __syncthreads();
                if (part == 0 && col_ok)
                    store_float(p.out, p.out_dt, tok * p.o_tok + h * p.o_head + c, gated_norm(o, ir_s, wc, zc));
            } else if (part == 0 && col_ok) {
                store_float(p.out, p.out_dt, tok * p.o_tok + h * p.o_head + c, o);
            }
            decode_update<J>(Sc, k_s, decay, d, part);
        };
        if (len > 0) {
            // Token 0 from the prefetched bits (the first token peeled, so
            // that xc is dead during the sums).
            __syncthreads();  // the previous item's readers are done
#pragma unroll
            for (int e = 0; e < QK; ++e) {
                const int r = tid + e * NT;
                if (KT % NT == 0 || r < KT) {
                    q_s[r] = bits_to_float(xc[e], p.in_dt);
                    k_s[r] = bits_to_float(xc[QK + e], p.in_dt);
                }
            }
            const float vc = col_ok ? bits_to_float(xc[2 * QK], p.in_dt) : 0.0f;
            if (tid == 0) {
                decay_s = expf(gate_of(p, bits_to_float(xc[2 * QK + 1], p.gate_dt), h));
                beta_s = beta_of(p, bits_to_float(xc[2 * QK + 2], p.gate_dt));
            }
            const float zc = NORM && col_ok && part == 0 ? bits_to_float(xc[NX - 1], p.in_dt) : 0.0f;
            token(int64_t(mc.bos), vc, zc, true);
        }
        // More tokens (max_seqlen == 1 says there are none: right anyway).
        for (int32_t t = 1; t < len; ++t) {
            const int64_t tok = int64_t(mc.bos) + t;
            const int32_t kh = key_head_of(p, h);
            __syncthreads();
            const float vc = decode_stage<KT, NT>(p, tok, kh, h, c, col_ok, tid, q_s, k_s, decay_s, beta_s);
            const float zc = NORM && col_ok && part == 0 ? load_float(p.z, p.in_dt, tok * p.z_tok + h * p.z_head + c) : 0.0f;
            token(tok, vc, zc, false);
        }
        if (col_ok) {
            if constexpr (VK) {
                float4* sc = reinterpret_cast<float4*>(head_state(p, mc.slot, h) + (int64_t(c) * KT + 4 * part));
#pragma unroll
                for (int j = 0; j < J; ++j)
                    sc[kSplit * j] = make_float4(Sc[4 * j], Sc[4 * j + 1], Sc[4 * j + 2], Sc[4 * j + 3]);
            } else {
                float* sc = head_state(p, mc.slot, h) + (int64_t(4 * part) * p.V + c);
#pragma unroll
                for (int e = 0; e < R; ++e) {
                    const int r = 16 * (e / 4) + (e % 4);
                    sc[uint32_t(r) * ldv] = Sc[e];
                }
            }
        }
    };

    float SA[R], SB[R];
    uint32_t xA[NX], xB[NX];
    DecodeMeta mA, mB;
    int32_t i = int32_t(blockIdx.x);
    mA = meta(i);
    issue(i, mA, SA, xA);
    for (;;) {
        step(i, mA, SA, xA, mB, SB, xB);
        i += G;
        if (i >= items) break;
        step(i, mB, SB, xB, mA, SA, xA);
        i += G;
        if (i >= items) break;
    }
}

// A column's row parts joined across a warp (the decode kernels of a part a
// quarter warp: lanes l ^ 8 and l ^ 16): this lane's part's partials pk (S·k̂)
// and pq (S·q̂) in, the column's sums out, added as decode_sums adds its
// parts' partials, (P0 + P1) + (P2 + P3): the same bits.
__device__ __forceinline__ float2 join_parts(float pk, float pq, int part) {
    const float ok1 = __shfl_xor_sync(0xffffffffu, pk, 8), oq1 = __shfl_xor_sync(0xffffffffu, pq, 8);
    const float ak = (part & 1) ? ok1 + pk : pk + ok1, aq = (part & 1) ? oq1 + pq : pq + oq1;
    const float ok2 = __shfl_xor_sync(0xffffffffu, ak, 16), oq2 = __shfl_xor_sync(0xffffffffu, aq, 16);
    return make_float2((part & 2) ? ok2 + ak : ak + ok2, (part & 2) ? oq2 + aq : aq + oq2);
}

// The decode kernels' lane inputs (v5, v6): q and k elements lane + 32 e, the
// four v values of columns c .. c + 3, g and β of value head h. The first
// token's as raw bits, asked for before the item's state is waited on (zeros
// where !tok, v's where !v_ok too).
template <int QR>
__device__ __forceinline__ void decode_first_bits(const Params& p, bool tok, bool v_ok, int64_t t0, int32_t h,
                                                  int c, int lane, uint32_t (&x)[2 * QR + 6]) {
    const int32_t kh = key_head_of(p, h);
#pragma unroll
    for (int e = 0; e < QR; ++e) {
        const int r = lane + 32 * e;
        x[e] = tok ? load_bits(p.q, p.in_dt, t0 * p.q_tok + kh * p.q_head + r) : 0u;
        x[QR + e] = tok ? load_bits(p.k, p.in_dt, t0 * p.k_tok + kh * p.k_head + r) : 0u;
    }
    const int64_t v_at = t0 * p.v_tok + h * p.v_head + c;
#pragma unroll
    for (int e = 0; e < 4; ++e) x[2 * QR + e] = v_ok ? load_bits(p.v, p.in_dt, v_at + e) : 0u;
    x[2 * QR + 4] = tok ? load_bits(p.g, p.gate_dt, t0 * p.g_tok + h * p.g_head) : 0u;
    x[2 * QR + 5] = tok ? load_bits(p.beta, p.gate_dt, t0 * p.b_tok + h * p.b_head) : 0u;
}
// Token tok's inputs: q and k into q_s and k_s, v into vc (zeros where
// !v_ok), e^g and β; the first token's from the bits in x, later ones loaded
// (a sequence of more tokens than max_seqlen = 1 says: right anyway).
template <int QR>
__device__ __forceinline__ void decode_token_inputs(const Params& p, const uint32_t (&x)[2 * QR + 6], bool first,
                                                    int64_t tok, int32_t h, int c, bool v_ok, int lane, float* q_s,
                                                    float* k_s, float (&vc)[4], float& decay, float& beta) {
    if (first) {
#pragma unroll
        for (int e = 0; e < QR; ++e) {
            q_s[lane + 32 * e] = bits_to_float(x[e], p.in_dt);
            k_s[lane + 32 * e] = bits_to_float(x[QR + e], p.in_dt);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) vc[e] = v_ok ? bits_to_float(x[2 * QR + e], p.in_dt) : 0.0f;
        decay = expf(gate_of(p, bits_to_float(x[2 * QR + 4], p.gate_dt), h));
        beta = beta_of(p, bits_to_float(x[2 * QR + 5], p.gate_dt));
    } else {
        const int32_t kh = key_head_of(p, h);
#pragma unroll
        for (int e = 0; e < QR; ++e) {
            q_s[lane + 32 * e] = load_float(p.q, p.in_dt, tok * p.q_tok + kh * p.q_head + lane + 32 * e);
            k_s[lane + 32 * e] = load_float(p.k, p.in_dt, tok * p.k_tok + kh * p.k_head + lane + 32 * e);
        }
        const int64_t v_at = tok * p.v_tok + h * p.v_head + c;
#pragma unroll
        for (int e = 0; e < 4; ++e) vc[e] = v_ok ? load_float(p.v, p.in_dt, v_at + e) : 0.0f;
        decay = expf(gate_of(p, load_float(p.g, p.gate_dt, tok * p.g_tok + h * p.g_head), h));
        beta = beta_of(p, load_float(p.beta, p.gate_dt, tok * p.b_tok + h * p.b_head));
    }
}

// Decode kernel v5 ([K][V], no output norm; perf-notes v80): a warp an
// item. v4's block per item had its four warps meet at four barriers a token
// (warp 0's normalisation between three of them, the sums' partials at the
// fourth), and its rate followed the number of resident blocks that hide
// those stretches (v76-v78). Here one warp owns a 32-column item and no
// barrier of the block is left: the item's state comes to the warp's shared
// memory by 16-byte cp.async (two stages a warp: the next item's copies are
// out while the current item computes; K rows of 32 floats, row r at 32 r),
// the warp normalises q and k itself, and lane l takes columns 4 (l % 8) ..
// + 3 in decode_sums' part l / 8 (rows 16 j + 4 part + e): 16-byte shared
// loads (a quarter warp reads a 128-byte row piece), decode_sums' FMA chains
// in its order, the four parts' partials joined by two shuffles and added as
// decode_sums adds them (the same bits), and the new rows stored 16 bytes a
// lane (a warp store is four 128-byte row pieces). Needs the pool and its
// slot stride 16-byte aligned and V % 4 == 0 (decode_takes_warp).
constexpr int kWarpCols = 32;
// A warp's shared memory: two stages of K x 32 floats, q and k rows.
template <int KT>
__host__ __device__ constexpr int warp_floats() {
    return 2 * KT * kWarpCols + 2 * KT;
}
// The most warps a block (the launch bounds: up to 255 registers a thread).
constexpr int kWarpCap = 8;

// An item of the warp kernel: its sequence's bookkeeping, head and columns.
struct WarpItem {
    DecodeMeta m;
    int32_t h, c0;
};

template <int KT, int VT>
__global__ void __launch_bounds__(32 * kWarpCap, 1) decode_warp_kernel(const Params p, int32_t items) {
    constexpr int QR = KT / 32;                      // q and k elements a lane stages
    constexpr int NX = 2 * QR + 6;                   // q, k, v (four columns), g, β bits of an item's first token
    constexpr int PIECES = KT * kWarpCols / 4 / 32;  // 16-byte state pieces a lane copies
    constexpr int J = KT / (4 * kSplit);             // decode_sums' float4 groups of a part
    extern __shared__ __align__(16) float warp_smem[];
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int nw = int(blockDim.x) >> 5;
    const int part = lane >> 3;         // decode_sums' part
    const int cq = 4 * (lane & 7);      // columns cq .. cq + 3 of the item
    float* const stage0 = warp_smem + warp * warp_floats<KT>();
    float* const stage1 = stage0 + KT * kWarpCols;
    float* const q_s = stage1 + KT * kWarpCols;
    float* const k_s = q_s + KT;
    const int32_t nv = VT > 0 ? VT : p.V;
    const int32_t col_blocks = (nv + kWarpCols - 1) / kWarpCols;
    const uint32_t ldv = VT > 0 ? uint32_t(VT) : uint32_t(p.V);
    const int32_t GW = int32_t(gridDim.x) * nw;  // warps in the grid
    const int32_t first = int32_t(blockIdx.x) * nw + warp;

    // Item i: sequence n, value head h, columns c0 ..
    auto where = [&](int32_t i, int32_t& n, int32_t& h, int32_t& c0) {
        const int32_t nh = i / col_blocks;
        c0 = (i - nh * col_blocks) * kWarpCols;
        n = nh / p.Hv;
        h = nh - n * p.Hv;
    };
    if ((p.flags & GDN_FLAG_PDL) && first < items) {  // this warp's first item, before the wait
        int32_t n, h, c0;
        where(first, n, h, c0);
        prefetch_state_hint<KT, kWarpCols, false>(p, n, h, c0, lane, 32);
    }
    grid_dependency_wait();  // GDN_FLAG_PDL (recurrent_kernel's comment)
    if (first >= items) return;

    auto item = [&](int32_t i) {
        WarpItem w{{-1, 0, 0, 0}, 0, 0};
        if (i < items) {
            int32_t n;
            where(i, n, w.h, w.c0);
            w.m.slot = seq_slot(p, n);
            w.m.zero = seq_from_zero(p, n) ? 1 : 0;
            w.m.bos = int32_t(seq_begin(p, n));
            w.m.end = int32_t(seq_end(p, n));
        }
        return w;
    };
    // The item's first-token bits into x and its state into stage st (zeros
    // from a zero start or past V), one commit group (empty for padding, an
    // empty sequence or no item).
    auto issue = [&](const WarpItem& w, float* st, uint32_t (&x)[NX]) {
        const DecodeMeta& m = w.m;
        const bool tok = m.slot >= 0 && m.end > m.bos;  // (slot -1: no item)
        // (V % 4 == 0: the four columns or none)
        decode_first_bits<QR>(p, tok, tok && w.c0 + cq < nv, int64_t(m.bos), w.h, w.c0 + cq, lane, x);
        if (tok) {
            // Piece lane + 32 e: row 4 e + lane / 8, columns 4 (lane % 8) .. (the
            // offsets from one address; a piece past V or of a zero start reads
            // nothing and fills zeros, and its address is kept inside the head's
            // rows all the same: the block's first columns for one past V).
            const int pq = (lane & 7) * 4;
            const bool in_v = w.c0 + pq < nv;
            const int bytes = !m.zero && in_v ? 16 : 0;
            const float* src = head_state(p, m.slot, w.h) + (int64_t(lane >> 3) * ldv + w.c0 + (in_v ? pq : 0));
            float* dst = st + (lane >> 3) * kWarpCols + pq;
#pragma unroll
            for (int e = 0; e < PIECES; ++e) cp_async16(dst + 4 * e * kWarpCols, src + uint32_t(4 * e) * ldv, bytes);
        }
        cp_async_commit();
    };
    // The item (first-token bits x) from its stage st.
    auto work = [&](const WarpItem& w, float* st, const uint32_t (&x)[NX]) {
        const DecodeMeta& m = w.m;
        const int32_t h = w.h, c = w.c0 + cq;  // this lane's first column
        const bool col_ok = c < nv;           // (and the other three's)
        const int32_t len = m.end - m.bos;
        if (m.slot < 0 || (len == 0 && !m.zero)) return;  // nothing to read or write
        float* const sc = head_state(p, m.slot, h) + c;   // row 0 of columns c ..
        // Row r of the lane's four columns in the stage and in the pool.
        auto at = [&](int r) { return reinterpret_cast<float4*>(st + r * kWarpCols + cq); };
        auto pool = [&](int r) { return reinterpret_cast<float4*>(sc + uint32_t(r) * ldv); };
        for (int32_t t = 0; t < len; ++t) {
            const int64_t tok = int64_t(m.bos) + t;
            __syncwarp();  // the previous token's readers of q_s and k_s are done
            float vc[4], decay, beta;
            decode_token_inputs<QR>(p, x, t == 0, tok, h, c, col_ok, lane, q_s, k_s, vc, decay, beta);
            __syncwarp();
            const float kq = normalise_row(p, q_s, k_s, KT, lane);
            __syncwarp();
            // decode_sums' chains of this lane's part for its four columns.
            const float4* k4 = reinterpret_cast<const float4*>(k_s);
            const float4* q4 = reinterpret_cast<const float4*>(q_s);
            float kv0[4] = {}, kv1[4] = {}, sq0[4] = {}, sq1[4] = {};
#pragma unroll
            for (int j = 0; j < J; ++j) {
                const float4 kr = k4[j * kSplit + part];
                const float4 qr = q4[j * kSplit + part];
                const int r = 16 * j + 4 * part;
                const float4 s0 = *at(r), s1 = *at(r + 1), s2 = *at(r + 2), s3 = *at(r + 3);
                const float a0[4] = {s0.x, s0.y, s0.z, s0.w}, a1[4] = {s1.x, s1.y, s1.z, s1.w};
                const float a2[4] = {s2.x, s2.y, s2.z, s2.w}, a3[4] = {s3.x, s3.y, s3.z, s3.w};
#pragma unroll
                for (int cc = 0; cc < 4; ++cc) {
                    kv0[cc] = fmaf(a0[cc], kr.x, kv0[cc]);
                    kv1[cc] = fmaf(a1[cc], kr.y, kv1[cc]);
                    kv0[cc] = fmaf(a2[cc], kr.z, kv0[cc]);
                    kv1[cc] = fmaf(a3[cc], kr.w, kv1[cc]);
                    sq0[cc] = fmaf(a0[cc], qr.x, sq0[cc]);
                    sq1[cc] = fmaf(a1[cc], qr.y, sq1[cc]);
                    sq0[cc] = fmaf(a2[cc], qr.z, sq0[cc]);
                    sq1[cc] = fmaf(a3[cc], qr.w, sq1[cc]);
                }
            }
            // The parts' partials joined (join_parts).
            float kv[4], sq[4];
#pragma unroll
            for (int cc = 0; cc < 4; ++cc) {
                const float2 j = join_parts(kv0[cc] + kv1[cc], sq0[cc] + sq1[cc], part);
                kv[cc] = j.x, sq[cc] = j.y;
            }
            float d[4], o[4];
#pragma unroll
            for (int cc = 0; cc < 4; ++cc) {
                d[cc] = beta * fmaf(-decay, kv[cc], vc[cc]);
                o[cc] = fmaf(decay, sq[cc], kq * d[cc]);
            }
            // Lane l stores column cq + part's output (the 32 lanes, the 32 columns).
            if (col_ok) {
                const float op = part == 0 ? o[0] : part == 1 ? o[1] : part == 2 ? o[2] : o[3];
                store_float(p.out, p.out_dt, tok * p.o_tok + h * p.o_head + c + part, op);
            }
            // decode_update's expression over this lane's rows: the last token's to the
            // pool, an earlier token's back to the stage. The rows are read again from
            // the stage, not kept from the sums (kept, ptxas spilled).
            asm volatile("" ::: "memory");
            auto update = [&](int r, float kr) {
                const float4 sv = *at(r);
                return make_float4(fmaf(kr, d[0], decay * sv.x), fmaf(kr, d[1], decay * sv.y),
                                   fmaf(kr, d[2], decay * sv.z), fmaf(kr, d[3], decay * sv.w));
            };
            if (t + 1 == len) {
                if (col_ok)
#pragma unroll
                    for (int j = 0; j < J; ++j) {
                        const float4 kr = k4[j * kSplit + part];
                        const int r = 16 * j + 4 * part;
                        *pool(r) = update(r, kr.x);
                        *pool(r + 1) = update(r + 1, kr.y);
                        *pool(r + 2) = update(r + 2, kr.z);
                        *pool(r + 3) = update(r + 3, kr.w);
                    }
            } else {
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    const float4 kr = k4[j * kSplit + part];
                    const int r = 16 * j + 4 * part;
                    *at(r) = update(r, kr.x);
                    *at(r + 1) = update(r + 1, kr.y);
                    *at(r + 2) = update(r + 2, kr.z);
                    *at(r + 3) = update(r + 3, kr.w);
                }
            }
        }
        if (len == 0 && col_ok)  // a zero start without tokens: the slot zeroed
#pragma unroll
            for (int j = 0; j < J; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) *pool(16 * j + 4 * part + e) = make_float4(0.f, 0.f, 0.f, 0.f);
    };
    // Works item wc (item i) from stage sc with bits xc while item i + GW's
    // copies (wn, worked out a step ago) go to stage sn and bits xn; leaves
    // item i + 2 GW in wc (which the next step reads as its wn).
    auto step = [&](int32_t i, WarpItem& wc, float* sc, const uint32_t (&xc)[NX], const WarpItem& wn, float* sn,
                    uint32_t (&xn)[NX]) {
        __syncwarp();  // every lane is done with stage sn (item i - GW)
        issue(wn, sn, xn);
        // This warp's last item (its loads are out): the next kernel may
        // launch once every block is here, and wait.
        if (i + GW >= items) allow_dependent_launch();
        const WarpItem wnn = item(i + 2 * GW);
        cp_async_wait_group<1>();  // item i's copies (this lane's) are done
        __syncwarp();              // and every lane's
        work(wc, sc, xc);
        wc = wnn;
    };

    uint32_t xA[NX], xB[NX];
    int32_t i = first;
    WarpItem wA = item(i);
    issue(wA, stage0, xA);
    WarpItem wB = item(i + GW);
    for (;;) {
        step(i, wA, stage0, xA, wB, stage1, xB);
        i += GW;
        if (i >= items) break;
        step(i, wB, stage1, xB, wA, stage0, xA);
        i += GW;
        if (i >= items) break;
    }
    cp_async_wait_all();  // (only empty groups can be left: nothing in flight at exit)
}

// Decode kernel v6 (perf-notes v84): a head an item, by bulk copies. [K][V]
// at K = V = 128 without the output norm, sm_90: one block an SM; a producer
// thread (warp 8) brings each head's 64 KB state (one piece: the pool's rows
// are V floats) into one of three shared stages by one cp.async.bulk, while
// the eight compute warps work the head before it, and writes each head back
// by another once they arrive on its mbarrier (each after
// fence.proxy.async); warp w computes columns 16 w .. + 15: lane l columns
// 16 w + 4 (l % 4) .. + 3 of decode_sums' part l / 8, one of the part's two
// FMA chains (rows 16 j + 4 part + e, e = (l / 4) % 2 and + 2; the other
// chain on lane l ^ 4), joined by shuffles in decode_sums' order: the
// sequential kernel's bits. The state is updated in the stage. Zero starts
// are not read (the lanes zero their elements); padding and empty sequences
// without a zero start are neither read nor written. Needs the pool and its
// slot stride 16-byte aligned (decode_takes_warp). Each block lets the next
// kernel launch (GDN_FLAG_PDL) as it starts its last head: that kernel cannot
// take the SM before this block leaves, and waits for this grid before it
// reads (perf-notes v85). A block leaves once its last store has read its
// stage; the grid's end makes the writes visible.
constexpr int kTmaStages = 3;
constexpr int kTmaWarps = 8;
// Which heads update from the sums' registers (perf-notes v86, v88): all of
// them up to kTmaRegRounds heads a block, else a block's first kTmaRegFirst and
// last kTmaRegLast heads, whose compute the DRAM does not hide (the pipeline's
// fill and the call's tail); the heads between read the stage again.
constexpr int32_t kTmaRegRounds = 32;
constexpr int32_t kTmaRegFirst = 2;
constexpr int32_t kTmaRegLast = 4;
template <int KT>
__host__ __device__ constexpr size_t tma_smem_bytes() {
    return sizeof(float) * (size_t(kTmaStages) * KT * 128 + size_t(kTmaWarps) * 2 * KT) + 2 * kTmaStages * 8;
}

template <int KT>
__global__ void __launch_bounds__(32 * (kTmaWarps + 1), 1) decode_tma_kernel(const Params p, int32_t heads, int32_t reg_first,
                                                                         int32_t reg_last) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int VT = 128, NCG = 4;
    constexpr int QR = KT / 32;
    constexpr int NX = 2 * QR + 6;
    constexpr int J = KT / (4 * kSplit);
    constexpr uint32_t HB = uint32_t(KT) * VT * 4;
    extern __shared__ __align__(128) float tma_smem[];
    float* const stages = tma_smem;
    uint64_t* const full = reinterpret_cast<uint64_t*>(stages + kTmaStages * KT * VT + kTmaWarps * 2 * KT);
    uint64_t* const done = full + kTmaStages;
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kTmaStages; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&done[s], kTmaWarps * 32);
        }
        // The inits visible to the bulk copies' completions (the async proxy).
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if ((p.flags & GDN_FLAG_PDL) && warp == kTmaWarps) {  // the first head's state asked of L2, before the wait
        const int32_t n = int32_t(blockIdx.x) / p.Hv;
        prefetch_state_hint<KT, 128, false>(p, n, int32_t(blockIdx.x) - n * p.Hv, 0, lane, 32);
    }
    grid_dependency_wait();
    const int32_t G = int32_t(gridDim.x);
    const int32_t mine = (heads - int32_t(blockIdx.x) + G - 1) / G;  // this block's heads
    auto meta = [&](int32_t k, DecodeMeta& m, int32_t& h) {
        const int32_t hd = int32_t(blockIdx.x) + k * G;
        const int32_t n = hd / p.Hv;
        h = hd - n * p.Hv;
        m.slot = seq_slot(p, n);
        m.zero = seq_from_zero(p, n) ? 1 : 0;
        m.bos = int32_t(seq_begin(p, n));
        m.end = int32_t(seq_end(p, n));
    };
    if (warp == kTmaWarps) {  // the producer
        if (lane == 0) {
            auto load = [&](int32_t k) {
                DecodeMeta m;
                int32_t h;
                meta(k, m, h);
                uint64_t* const b = &full[k % kTmaStages];
                if (m.slot >= 0 && !m.zero && m.end > m.bos) {
                    mbar_arrive_tx(b, HB);
                    asm volatile(
                        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                            smem_addr(stages + (k % kTmaStages) * KT * VT)),
                        "l"(head_state(p, m.slot, h)), "r"(HB), "r"(smem_addr(b))
                        : "memory");
                } else {
                    mbar_arrive(b);
                }
            };
            for (int32_t k = 0; k < mine && k < kTmaStages; ++k) load(k);
            if (mine <= kTmaStages) allow_dependent_launch();
            for (int32_t k = 0; k < mine; ++k) {
                const int s = k % kTmaStages;
                mbar_wait(&done[s], (k / kTmaStages) & 1);
                DecodeMeta m;
                int32_t h;
                meta(k, m, h);
                if (m.slot >= 0 && (m.end > m.bos || m.zero)) {
                    asm volatile(
                        "cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
                        "cp.async.bulk.commit_group;\n" ::"l"(head_state(p, m.slot, h)),
                        "r"(smem_addr(stages + s * KT * VT)), "r"(HB)
                        : "memory");
                }
                if (k + kTmaStages < mine) {
                    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
                    load(k + kTmaStages);
                    if (k + kTmaStages == mine - 1) allow_dependent_launch();
                }
            }
            asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
        }
        return;
    }
    // The compute warps: warp w, columns 16 w + 4 (l % 4) .. + 3, decode_sums'
    // part l / 8, chain (l / 4) % 2 (v81's lanes).
    const int part = lane >> 3;
    const int cq = 4 * (lane % NCG);
    const int hf = (lane / NCG) % 2;
    const int c = 16 * warp + cq;  // this lane's first column
    float* const q_s = stages + kTmaStages * KT * VT + warp * 2 * KT;
    float* const k_s = q_s + KT;
    const float4* k4 = reinterpret_cast<const float4*>(k_s);
    const float4* q4 = reinterpret_cast<const float4*>(q_s);
    for (int32_t k = 0; k < mine; ++k) {
        const int s = k % kTmaStages;
        float* const st = stages + s * KT * VT;
        DecodeMeta m;
        int32_t h;
        meta(k, m, h);
        const int32_t len = m.end - m.bos;
        if (k == mine - 1) allow_dependent_launch();
        // The update from the sums' registers (the same values, the same bits), or the
        // stage read again (uniform over the block).
        const bool regs = k < reg_first || k >= mine - reg_last;
        uint32_t x[NX];
        const bool tok = m.slot >= 0 && len > 0;
        decode_first_bits<QR>(p, tok, tok, int64_t(m.bos), h, c, lane, x);
        mbar_wait(&full[s], (k / kTmaStages) & 1);
        auto at = [&](int r) { return reinterpret_cast<float4*>(st + r * VT + c); };
        // This lane's rows 16 j + 4 part + e, e = hf and hf + 2.
        auto rows = [&](auto&& put) {
#pragma unroll
            for (int j = 0; j < J; ++j) {
                const int r = 16 * j + 4 * part + hf;
                put(r, j, 0);
                put(r + 2, j, 1);
            }
        };
        if (m.slot >= 0 && m.zero)  // a zero start: the state read as zeros (and written so without tokens)
            rows([&](int r, int, int) { *at(r) = make_float4(0.f, 0.f, 0.f, 0.f); });
        for (int32_t t = 0; m.slot >= 0 && t < len; ++t) {
            const int64_t tok_i = int64_t(m.bos) + t;
            __syncwarp();
            float vc[4], decay, beta;
            decode_token_inputs<QR>(p, x, t == 0, tok_i, h, c, true, lane, q_s, k_s, vc, decay, beta);
            __syncwarp();
            const float kq = normalise_row(p, q_s, k_s, KT, lane);
            __syncwarp();
            float kvc[4] = {}, sqc[4] = {};
            // This lane's state elements and k̂ rows, read from the stage once a token (its
            // shared-memory traffic is what a head's compute waits on: perf-notes v86).
            float4 sv[2 * J];
            float kk[2 * J];
#pragma unroll
            for (int j = 0; j < J; ++j) {
                const float4 kr = k4[j * kSplit + part];
                const float4 qr = q4[j * kSplit + part];
                const float k0 = hf ? kr.y : kr.x, k2 = hf ? kr.w : kr.z;
                const float q0 = hf ? qr.y : qr.x, q2 = hf ? qr.w : qr.z;
                kk[2 * j] = k0, kk[2 * j + 1] = k2;
                const int r = 16 * j + 4 * part + hf;
                sv[2 * j] = *at(r), sv[2 * j + 1] = *at(r + 2);
                const float4 s0 = sv[2 * j], s2 = sv[2 * j + 1];
                const float a0[4] = {s0.x, s0.y, s0.z, s0.w}, a2[4] = {s2.x, s2.y, s2.z, s2.w};
#pragma unroll
                for (int cc = 0; cc < 4; ++cc) {
                    kvc[cc] = fmaf(a0[cc], k0, kvc[cc]);
                    kvc[cc] = fmaf(a2[cc], k2, kvc[cc]);
                    sqc[cc] = fmaf(a0[cc], q0, sqc[cc]);
                    sqc[cc] = fmaf(a2[cc], q2, sqc[cc]);
                }
            }
            // The part's two chains meet (lane ^ 4: kv0 + kv1 either way round, the same
            // sum), then the parts (join_parts).
            float kv[4], sq[4];
#pragma unroll
            for (int cc = 0; cc < 4; ++cc) {
                const float2 j = join_parts(kvc[cc] + __shfl_xor_sync(0xffffffffu, kvc[cc], NCG),
                                            sqc[cc] + __shfl_xor_sync(0xffffffffu, sqc[cc], NCG), part);
                kv[cc] = j.x, sq[cc] = j.y;
            }
            float d[4], o[4];
#pragma unroll
            for (int cc = 0; cc < 4; ++cc) {
                d[cc] = beta * fmaf(-decay, kv[cc], vc[cc]);
                o[cc] = fmaf(decay, sq[cc], kq * d[cc]);
            }
            if (hf == 0) {
                const float op = part == 0 ? o[0] : part == 1 ? o[1] : part == 2 ? o[2] : o[3];
                store_float(p.out, p.out_dt, tok_i * p.o_tok + h * p.o_head + c + part, op);
            }
            rows([&](int r, int j, int second) {
                // (Many heads a block: the stage read again, which measured faster there.)
                const float4 k2r = regs ? float4{} : k4[j * kSplit + part];
                const float kr = regs ? kk[2 * j + second] : second ? (hf ? k2r.w : k2r.z) : (hf ? k2r.y : k2r.x);
                const float4 s = regs ? sv[2 * j + second] : *at(r);
                *at(r) = make_float4(fmaf(kr, d[0], decay * s.x), fmaf(kr, d[1], decay * s.y),
                                     fmaf(kr, d[2], decay * s.z), fmaf(kr, d[3], decay * s.w));
            });
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        mbar_arrive(&done[s]);
    }
#else
    (void)p, (void)heads;
#endif
}

// GDN_FLAG_PDL: each of these kernels is a call's only one, launched as a
// programmatic dependent of the caller's work ahead (backend.cpp clears the
// flag below sm_90).
bool pdl(const Params& p) { return (p.flags & GDN_FLAG_PDL) != 0; }

template <int KT, int BV, int TT, bool TS = false>
cudaError_t launch(const Params& p, cudaStream_t stream) {
    const int64_t col_blocks = (p.V + BV - 1) / BV;
    const dim3 grid(unsigned(col_blocks * p.num_seqs), unsigned(p.Hv));
    return launch_kernel(recurrent_kernel<KT, BV, TT, TS>, grid, dim3(BV * kSplit), 0, stream, pdl(p), p);
}

// Per-token states take one-token tiles (a speculative step's few tokens).
template <int KT, int BV>
cudaError_t launch_tt(const Params& p, int tile_tokens, cudaStream_t stream) {
    if (p.token_state_indices) return launch<KT, BV, 1, true>(p, stream);
    return tile_tokens == 1 ? launch<KT, BV, 1>(p, stream) : launch<KT, BV, 16>(p, stream);
}

template <int KT>
cudaError_t launch_bv(const Params& p, int block_cols, int tile_tokens, cudaStream_t stream) {
    switch (block_cols) {
        case 32: return launch_tt<KT, 32>(p, tile_tokens, stream);
        case 64: return launch_tt<KT, 64>(p, tile_tokens, stream);
        case 128: return launch_tt<KT, 128>(p, tile_tokens, stream);
    }
    return cudaErrorInvalidValue;
}

template <int KT, int BC>
cudaError_t launch_decode_tile(const Params& p, cudaStream_t stream) {
    const int64_t col_blocks = (p.V + BC - 1) / BC;
    const dim3 grid(unsigned(col_blocks * p.num_seqs), unsigned(p.Hv));
    return launch_kernel(p.V == 128 ? decode_kernel<KT, BC, 128> : decode_kernel<KT, BC, 0>, grid,
                         dim3(BC * kSplit), 0, stream, pdl(p), p);
}

template <int KT>
cudaError_t launch_decode_bc(const Params& p, int block_cols, cudaStream_t stream) {
    switch (block_cols) {
        case 16: return launch_decode_tile<KT, 16>(p, stream);
        case 32: return launch_decode_tile<KT, 32>(p, stream);
        case 64: return launch_decode_tile<KT, 64>(p, stream);
        case 128: return launch_decode_tile<KT, 128>(p, stream);
    }
    return cudaErrorInvalidValue;
}

// Below this many 32-column items the decode kernel takes 16 columns per
// item (a speed choice only: the bits do not depend on the tile).
constexpr int64_t kDecodeSmallGrid = 512;

// [K][V] without the output norm: below this many 32-column items (from
// kDecodeSmallGrid on) the warp kernel (v5) takes the decode, from it v4's
// block an item or v6 (H200, perf-notes v80: at H_v 48 the warp kernel is
// 7-14% faster than v4 at N = 4-16, even at N = 64, 2.4% slower at N = 256).
// (Where v6 cannot run, the warp kernel stays up to here.)
constexpr int64_t kDecodeWarpItems = 8192;
// From kDecodeTmaItems on (kDecodeTmaItemsPdl under GDN_FLAG_PDL), at K = V =
// 128 on sm_90, decode_tma_kernel (v6) takes it (H200, perf-notes v84: N = 64
// at H_v 48 4% faster than v4, N = 256 11%, N = 1024 12%; v89, with v88's
// register form: 0-5% faster than the warp kernel from N = 30 (5760 items),
// 1-8% from N = 20 (3840) with the dependent launch; at N = 28 1.8% slower).
constexpr int64_t kDecodeTmaItems = 5760;
constexpr int64_t kDecodeTmaItemsPdl = 3840;

// GDN_FLAG_OUTPUT_NORM: from this many rows (sequences x value heads) the
// streaming kernel takes the decode, a row an item; below, v3's kernel, a
// block a row (H200, perf-notes v74: with states in DRAM the streaming form
// is 15% faster at N = 8, H_v 48, 384 rows, and 0.7-1 µs slower at N <= 2;
// at N = 4 it is 1 µs faster cold and 1.5 µs slower warm).
constexpr int64_t kDecodeNormStreamRows = 384;

// Resident blocks per SM of one decode_stream_kernel instance (the
// occupancy calculator, once per device; the launch bounds' figure if it
// fails). The grid is sized from it: a block that is not resident at the
// start would run its items after the others.
template <int KT, int BC, int VT, bool VK, bool NORM>
int stream_blocks_per_sm(int device) {
    static std::atomic<int> cached[64];
    if (device >= 0 && device < 64)
        if (const int b = cached[device].load(std::memory_order_relaxed)) return b;
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, decode_stream_kernel<KT, BC, VT, VK, NORM>,
                                                      BC * kSplit, 0) != cudaSuccess ||
        b < 1) {
        (void)cudaGetLastError();  // not sticky; the caller checked that none was pending
        b = stream_min_blocks(BC);
    }
    if (device >= 0 && device < 64) cached[device].store(b, std::memory_order_relaxed);
    return b;
}

template <int KT, int BC, int VT, bool VK, bool NORM = false>
cudaError_t launch_decode_stream(const Params& p, int64_t items, cudaStream_t stream) {
    int device = 0, sms = 0;
    if (cudaError_t e = cudaGetDevice(&device)) return e;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device))
        return e;
    const int64_t slots = int64_t(stream_blocks_per_sm<KT, BC, VT, VK, NORM>(device)) * (sms > 0 ? sms : 1);
    // As many rounds as one full grid needs, the items spread evenly over
    // them: every block walks the same number of items (± 1).
    const int64_t rounds = (items + slots - 1) / slots;
    const int64_t grid = (items + rounds - 1) / rounds;
    return launch_kernel(decode_stream_kernel<KT, BC, VT, VK, NORM>, dim3(unsigned(grid)), dim3(BC * kSplit), 0,
                         stream, pdl(p), p, int32_t(items));
}

template <int KT>
cudaError_t launch_decode_v4(const Params& p, int bc, int64_t items, cudaStream_t stream) {
    if (!p.state_kv)  // 16 columns (launch_decode)
        return p.V == 128 ? launch_decode_stream<KT, 16, 128, true>(p, items, stream)
                          : launch_decode_stream<KT, 16, 0, true>(p, items, stream);
    if (bc == 16)
        return p.V == 128 ? launch_decode_stream<KT, 16, 128, false>(p, items, stream)
                          : launch_decode_stream<KT, 16, 0, false>(p, items, stream);
    return p.V == 128 ? launch_decode_stream<KT, 32, 128, false>(p, items, stream)
                      : launch_decode_stream<KT, 32, 0, false>(p, items, stream);
}

// decode_warp_kernel's block: its warps (as many as the device's opt-in
// shared memory per block holds, up to kWarpCap) and resident blocks per SM,
// once per device. {0, 0} where fewer than kWarpMin warps fit: v4's kernel
// then. The warp kernel was measured with 6 warps a block on the H200 (its
// 227 KB hold 6 at K = 128): with 4 it was slower than v4 warm at N = 4-8
// and at N = 64 (perf-notes v80), so devices that hold fewer (A100: 4;
// sm_86/89: 2) keep v4.
constexpr int kWarpMin = 6;
// decode_warp_kernel<KT, *>'s warps a block under `smem_limit` bytes of opt-in
// shared memory: as many as fit, up to kWarpCap; 0 where fewer than kWarpMin.
template <int KT>
int warps_that_fit(size_t smem_limit) {
    const size_t fit = smem_limit / (sizeof(float) * warp_floats<KT>());
    const int w = fit < size_t(kWarpCap) ? int(fit) : kWarpCap;
    return w >= kWarpMin ? w : 0;
}
struct WarpShape {
    int warps, blocks;
};
template <int KT, int VT>
WarpShape warp_shape(int device) {
    static std::atomic<int> cached[64];  // warps << 8 | blocks, + 1 (0: not yet)
    if (device >= 0 && device < 64)
        if (const int c = cached[device].load(std::memory_order_relaxed)) return {(c - 1) >> 8, (c - 1) & 255};
    int optin = 0, b = 0;
    WarpShape s{0, 0};
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess) {
        const int w = warps_that_fit<KT>(size_t(optin));
        if (w > 0 &&
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, decode_warp_kernel<KT, VT>, 32 * w,
                                                          size_t(w) * sizeof(float) * warp_floats<KT>()) ==
                cudaSuccess &&
            b >= 1)
            s = {w, b < 255 ? b : 255};
    }
    (void)cudaGetLastError();  // not sticky; the caller checked that none was pending
    if (device >= 0 && device < 64) cached[device].store(((s.warps << 8) | s.blocks) + 1, std::memory_order_relaxed);
    return s;
}

// The warp kernel for `items` 32-column items; cudaErrorNotSupported where
// the device holds too few of its warps a block (the caller takes v4's).
template <int KT, int VT>
cudaError_t launch_decode_warp(const Params& p, int64_t items, cudaStream_t stream) {
    int device = 0, sms = 0;
    if (cudaError_t e = cudaGetDevice(&device)) return e;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) return e;
    const WarpShape s = warp_shape<KT, VT>(device);
    if (s.warps == 0) return cudaErrorNotSupported;
    // As many rounds as the resident warps need, the items spread evenly.
    const int64_t slots = int64_t(s.warps) * s.blocks * (sms > 0 ? sms : 1);
    const int64_t rounds = (items + slots - 1) / slots;
    const int64_t warps = (items + rounds - 1) / rounds;
    const int64_t grid = (warps + s.warps - 1) / s.warps;
    return launch_kernel(decode_warp_kernel<KT, VT>, dim3(unsigned(grid)), dim3(unsigned(32 * s.warps)),
                         size_t(s.warps) * sizeof(float) * warp_floats<KT>(), stream, pdl(p), p, int32_t(items));
}

// Whether the device runs decode_tma_kernel: sm_90+ (bulk copies) with room
// for its shared memory, once per device.
bool tma_decode_fits(int device) {
    static std::atomic<int> cached[64];  // 1 + fits (0: not yet)
    if (device >= 0 && device < 64)
        if (const int c = cached[device].load(std::memory_order_relaxed)) return c == 2;
    int major = 0, optin = 0;
    const bool fits = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess &&
                      major >= 9 && size_t(optin) >= tma_smem_bytes<128>();
    (void)cudaGetLastError();  // not sticky; the caller checked that none was pending
    if (device >= 0 && device < 64) cached[device].store(fits ? 2 : 1, std::memory_order_relaxed);
    return fits;
}
// The bulk-copy kernel (v6), a block an SM; cudaErrorNotSupported where the
// device cannot run it (the caller takes v4's).
cudaError_t launch_decode_tma(const Params& p, cudaStream_t stream) {
    int device = 0, sms = 0;
    if (cudaError_t e = cudaGetDevice(&device)) return e;
    if (!tma_decode_fits(device)) return cudaErrorNotSupported;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) return e;
    const int64_t heads = int64_t(p.num_seqs) * p.Hv;
    const int64_t grid = heads < sms ? heads : sms;
    const int32_t first = heads / grid <= kTmaRegRounds ? INT32_MAX : kTmaRegFirst;  // INT32_MAX: every head
    return launch_kernel(decode_tma_kernel<128>, dim3(unsigned(grid)), dim3(32 * (kTmaWarps + 1)),
                         tma_smem_bytes<128>(), stream, pdl(p), p, int32_t(heads), first, kTmaRegLast);
}

// GDN_FLAG_OUTPUT_NORM ([K][V]): the streaming kernel with a row an item.
template <int KT>
cudaError_t launch_decode_norm(const Params& p, int bc, int64_t items, cudaStream_t stream) {
    switch (bc) {
        case 32: return launch_decode_stream<KT, 32, 0, false, true>(p, items, stream);
        case 64: return launch_decode_stream<KT, 64, 0, false, true>(p, items, stream);
        case 128:
            return p.V == 128 ? launch_decode_stream<KT, 128, 128, false, true>(p, items, stream)
                              : launch_decode_stream<KT, 128, 0, false, true>(p, items, stream);
    }
    return cudaErrorInvalidValue;
}

}  // namespace

bool decode_takes_vk(const Params& p) {
    // 16-byte state accesses: the pool and its slot stride 16-byte aligned
    // (the head and column offsets are, at K in {64, 128}); no output norm
    // (v3's kernel is [K][V] only); item numbers in 32 bits.
    return (p.K == 64 || p.K == 128) && !(p.flags & GDN_FLAG_OUTPUT_NORM) &&
           (reinterpret_cast<uintptr_t>(p.state) % 16) == 0 && p.slot_stride % 4 == 0 &&
           int64_t(p.num_seqs) * p.Hv * ((p.V + 15) / 16) <= (int64_t(1) << 30);
}

namespace {
// Whether decode_warp_kernel takes a decode: [K][V], 16-byte state copies
// (the pool, its slot stride and its rows 16-byte aligned: V % 4 == 0), no
// output norm.
bool decode_takes_warp(const Params& p) {
    return p.state_kv && p.V % 4 == 0 && !(p.flags & GDN_FLAG_OUTPUT_NORM) &&
           (reinterpret_cast<uintptr_t>(p.state) % 16) == 0 && p.slot_stride % 4 == 0;
}
}  // namespace

cudaError_t launch_decode(const Params& p, cudaStream_t stream) {
    if ((p.K != 64 && p.K != 128) || int64_t(p.K) * p.V >= (int64_t(1) << 31) ||
        (!p.state_kv && !decode_takes_vk(p)))
        return cudaErrorInvalidValue;
    if (p.flags & GDN_FLAG_OUTPUT_NORM) {
        // A row a block (v3) or a row an item of the streaming kernel (from
        // kDecodeNormStreamRows rows): the smallest column tile that holds V.
        if (p.V > 128) return cudaErrorInvalidValue;
        const int bc = p.V <= 32 ? 32 : p.V <= 64 ? 64 : 128;
        const int64_t rows = int64_t(p.num_seqs) * p.Hv;
        if (rows < kDecodeNormStreamRows || rows > (int64_t(1) << 30))  // (item numbers in 32 bits)
            return p.K == 64 ? launch_decode_bc<64>(p, bc, stream) : launch_decode_bc<128>(p, bc, stream);
        return p.K == 64 ? launch_decode_norm<64>(p, bc, rows, stream) : launch_decode_norm<128>(p, bc, rows, stream);
    }
    // 32 columns per item; 16 where there are few items (N = 1 at Hv 48:
    // 384 items of 64 threads spread over more SMs than 192 of 128).
    const int64_t items32 = int64_t(p.num_seqs) * p.Hv * ((p.V + 31) / 32);
    // [V][K]: 16 columns at every batch size (H200, run 57: 32 columns spill
    // 56-80 bytes at 128 registers and took 3% longer at N = 256, 3% at 1024).
    const int bc = items32 < kDecodeSmallGrid || !p.state_kv ? 16 : 32;
    const int64_t items = int64_t(p.num_seqs) * p.Hv * ((p.V + bc - 1) / bc);
    if (items > (int64_t(1) << 30)) {
        // Item numbers (and i + grid) must fit in 32 bits: v3's kernel (a
        // block per item) for such batches (> 2^30 items: terabytes of state).
        return p.K == 64 ? launch_decode_bc<64>(p, bc, stream) : launch_decode_bc<128>(p, bc, stream);
    }
    // [K][V] at K = V = 128 from kDecodeTmaItems 32-column items: a head an item by bulk copies.
    const int64_t tma_from = pdl(p) ? kDecodeTmaItemsPdl : kDecodeTmaItems;
    if (bc == 32 && items32 >= tma_from && p.K == 128 && p.V == 128 && decode_takes_warp(p)) {
        const cudaError_t e = launch_decode_tma(p, stream);
        if (e != cudaErrorNotSupported) return e;
    }
    // [K][V] from kDecodeSmallGrid to the above (kDecodeWarpItems where v6 cannot run): a warp an item.
    if (bc == 32 && items32 < kDecodeWarpItems && decode_takes_warp(p)) {
        const cudaError_t e = p.K == 64 ? (p.V == 128 ? launch_decode_warp<64, 128>(p, items32, stream)
                                                      : launch_decode_warp<64, 0>(p, items32, stream))
                                        : (p.V == 128 ? launch_decode_warp<128, 128>(p, items32, stream)
                                                      : launch_decode_warp<128, 0>(p, items32, stream));
        if (e != cudaErrorNotSupported) return e;
    }
    return p.K == 64 ? launch_decode_v4<64>(p, bc, items, stream)
                     : launch_decode_v4<128>(p, bc, items, stream);
}

cudaError_t set_decode_attributes(size_t smem_limit) {
    // Each warp kernel's limit raised to the warps that fit (warp_shape's count).
    const auto raise = [](const void* kernel, int warps, size_t warp_bytes) {
        if (warps == 0) return cudaSuccess;
        return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(warps * warp_bytes));
    };
    const int w64 = warps_that_fit<64>(smem_limit), w128 = warps_that_fit<128>(smem_limit);
    const size_t b64 = sizeof(float) * warp_floats<64>(), b128 = sizeof(float) * warp_floats<128>();
    const cudaError_t e[] = {raise(reinterpret_cast<const void*>(&decode_warp_kernel<64, 128>), w64, b64),
                             raise(reinterpret_cast<const void*>(&decode_warp_kernel<64, 0>), w64, b64),
                             raise(reinterpret_cast<const void*>(&decode_warp_kernel<128, 128>), w128, b128),
                             raise(reinterpret_cast<const void*>(&decode_warp_kernel<128, 0>), w128, b128)};
    for (cudaError_t x : e)
        if (x != cudaSuccess) return x;
    if (smem_limit >= tma_smem_bytes<128>())  // (tma_decode_fits also asks for sm_90)
        return cudaFuncSetAttribute(reinterpret_cast<const void*>(&decode_tma_kernel<128>),
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(tma_smem_bytes<128>()));
    return cudaSuccess;
}

cudaError_t launch_sequential(const Params& p, int k_tile, int block_cols, int tile_tokens,
                              cudaStream_t stream) {
    if (k_tile == 64) return launch_bv<64>(p, block_cols, tile_tokens, stream);
    if (k_tile == 128) return launch_bv<128>(p, block_cols, tile_tokens, stream);
    return cudaErrorInvalidValue;
}

}  // namespace gdn::cuda
