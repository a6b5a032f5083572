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

// The out row of token `tok`, value head h, from o (V floats in shared
// memory) through the gated RMSNorm; called by one warp.
__device__ __forceinline__ void norm_out_row(const Params& p, const float* o, int64_t tok,
                                             int32_t h, int lane) {
    float oo = 0.0f;
    for (int c = lane; c < p.V; c += 32) oo = fmaf(o[c], o[c], oo);
    const float ir = inv_rms(p, warp_sum(oo));
    for (int c = lane; c < p.V; c += 32) {
        const float z = load_float(p.z, p.in_dt, tok * p.z_tok + h * p.z_head + c);
        store_float(p.out, p.out_dt, tok * p.o_tok + h * p.o_head + c,
                    o[c] * ir * p.norm_weight[c] * silu(z));
    }
}

template <int KT, int BV, int TT>
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
            float qq = 0.0f, kk = 0.0f;
            const float kq = normalise_row(p, q_s[t], k_s[t], KT, lane);
            if (lane == 0) kq_s[t] = kq;
        }
        __syncthreads();

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

#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int kr = 4 * (j * kSplit + part) + e;
            if (col_ok && kr < p.K) st[state_offset(p, kr, vc)] = S[j][e];
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
// of 512 (the output norm: fewer would spill).
constexpr int decode_min_blocks(int bc) {
    return bc == 32 ? 7 : bc == 16 ? 12 : bc == 64 ? 2 : 1;
}
template <int KT, int BC, int VT>
__global__ void __launch_bounds__(BC * kSplit, decode_min_blocks(BC)) decode_kernel(const Params p) {
    constexpr int NT = BC * kSplit;
    constexpr int J = KT / (4 * kSplit);  // float4 groups of rows per part
    constexpr int R = 4 * J;              // state rows per thread
    __shared__ __align__(16) float q_s[KT];
    __shared__ __align__(16) float k_s[KT];
    __shared__ float red_s[2][kSplit][BC];  // S·k̂ and S·q̂ partials per part and column
    __shared__ float o_s[BC];               // the output row, for the output norm (BC >= V)
    __shared__ float decay_s, beta_s, kq_s;

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

    for (int32_t t = 0; t < len32; ++t) {
        const int64_t tok = bos + t;
        if (t > 0) __syncthreads();  // the previous token's readers are done
#pragma unroll
        for (int i = 0; i < (KT + NT - 1) / NT; ++i) {
            const int r = tid + i * NT;
            if (KT % NT == 0 || r < KT) {
                q_s[r] = load_float(p.q, p.in_dt, tok * p.q_tok + kh * p.q_head + r);
                k_s[r] = load_float(p.k, p.in_dt, tok * p.k_tok + kh * p.k_head + r);
            }
        }
        const float vc = col_ok ? load_float(p.v, p.in_dt, tok * p.v_tok + h * p.v_head + c) : 0.0f;
        if (tid == 0) {
            decay_s = expf(gate_of(p, load_float(p.g, p.gate_dt, tok * p.g_tok + h * p.g_head), h));
            beta_s = beta_of(p, load_float(p.beta, p.gate_dt, tok * p.b_tok + h * p.b_head));
        }
        __syncthreads();
        if (tid < 32) {
            const float kq = normalise_row(p, q_s, k_s, KT, lane);
            if (lane == 0) kq_s = kq;
        }
        __syncthreads();

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
        red_s[0][part][cl] = kv0 + kv1;
        red_s[1][part][cl] = sq0 + sq1;
        __syncthreads();
        // Every part of the column adds the four partials the same way.
        const float kv = (red_s[0][0][cl] + red_s[0][1][cl]) + (red_s[0][2][cl] + red_s[0][3][cl]);
        const float sq = (red_s[1][0][cl] + red_s[1][1][cl]) + (red_s[1][2][cl] + red_s[1][3][cl]);
        const float decay = decay_s;
        const float d = beta_s * fmaf(-decay, kv, vc);
        const float o = fmaf(decay, sq, kq_s * d);
        if (!(p.flags & GDN_FLAG_OUTPUT_NORM)) {
            if (part == 0 && col_ok)
                store_float(p.out, p.out_dt, tok * p.o_tok + h * p.o_head + c, o);
        } else {
            // The block holds the whole row (BC >= V, v0 = 0): gated RMSNorm here.
            if (part == 0) o_s[cl] = o;
            __syncthreads();
            if (tid < 32) norm_out_row(p, o_s, tok, h, lane);
        }
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const float4 kr = k4[j * kSplit + part];
            S[4 * j + 0] = fmaf(kr.x, d, decay * S[4 * j + 0]);
            S[4 * j + 1] = fmaf(kr.y, d, decay * S[4 * j + 1]);
            S[4 * j + 2] = fmaf(kr.z, d, decay * S[4 * j + 2]);
            S[4 * j + 3] = fmaf(kr.w, d, decay * S[4 * j + 3]);
        }
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

template <int KT, int BV, int TT>
cudaError_t launch(const Params& p, cudaStream_t stream) {
    const int64_t col_blocks = (p.V + BV - 1) / BV;
    const dim3 grid(unsigned(col_blocks * p.num_seqs), unsigned(p.Hv));
    recurrent_kernel<KT, BV, TT><<<grid, BV * kSplit, 0, stream>>>(p);
    return cudaGetLastError();
}

template <int KT, int BV>
cudaError_t launch_tt(const Params& p, int tile_tokens, cudaStream_t stream) {
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
    if (p.V == 128)
        decode_kernel<KT, BC, 128><<<grid, BC * kSplit, 0, stream>>>(p);
    else
        decode_kernel<KT, BC, 0><<<grid, BC * kSplit, 0, stream>>>(p);
    return cudaGetLastError();
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

// Below this many 32-column decode blocks the decode kernel takes 16 columns
// per block (a speed choice only: the bits do not depend on the tile).
constexpr int64_t kDecodeSmallGrid = 512;

}  // namespace

cudaError_t launch_decode(const Params& p, cudaStream_t stream) {
    if ((p.K != 64 && p.K != 128) || !p.state_kv || int64_t(p.K) * p.V >= (int64_t(1) << 31))
        return cudaErrorInvalidValue;
    int bc;
    if (p.flags & GDN_FLAG_OUTPUT_NORM) {
        // One block per row: the smallest column tile that holds V.
        if (p.V > 128) return cudaErrorInvalidValue;
        bc = p.V <= 32 ? 32 : p.V <= 64 ? 64 : 128;
    } else {
        // 32 columns per block; 16 where that grid is small (N = 1 at Hv 48:
        // 384 blocks of 64 threads spread over more SMs than 192 of 128).
        const int64_t blocks32 = int64_t(p.num_seqs) * p.Hv * ((p.V + 31) / 32);
        bc = blocks32 < kDecodeSmallGrid ? 16 : 32;
    }
    return p.K == 64 ? launch_decode_bc<64>(p, bc, stream) : launch_decode_bc<128>(p, bc, stream);
}

cudaError_t launch_sequential(const Params& p, int k_tile, int block_cols, int tile_tokens,
                              cudaStream_t stream) {
    if (k_tile == 64) return launch_bv<64>(p, block_cols, tile_tokens, stream);
    if (k_tile == 128) return launch_bv<128>(p, block_cols, tile_tokens, stream);
    return cudaErrorInvalidValue;
}

}  // namespace gdn::cuda
