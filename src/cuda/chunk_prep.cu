// The chunked path's prep: everything of a chunk that does not depend on the
// state, for every chunk of a window at once (DESIGN.md §1):
//     A[t][i] = β_t e^{γ_t−γ_i} k̂_t·k̂_i   (i < t)      T = (I + A)^{-1}
//     P[t][i] = e^{γ_t−γ_i} q̂_t·k̂_i       (i <= t)
// One block per (32-token tile of chunk starts, key head): k̂·k̂ and q̂·k̂ once
// per key head, then T, P and γ, β for each of its value heads (one warp
// each). Chunks start at their sequence's first token and every 32 tokens
// after it; a tile usually holds one chunk start, more where sequences begin
// inside it. The rows are written at the chunk's position in the window, so
// chunks of different sequences never share a row.
#include "common/dispatch.hpp"
#include "cuda/device_common.cuh"

namespace gdn::cuda {

namespace {

constexpr int kThreads = policy::kCudaPrepThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = policy::kCudaChunk;
static_assert(kChunk == 32, "one lane per token of a chunk");

template <int K>
__device__ void prep_chunk(const Params& p, const ChunkScratch& w, int32_t kh, int64_t cs,
                           int64_t row0, int L, float* smem) {
    constexpr int LD = K + 4;
    float* q_s = smem;               // [32][LD] q̂ rows
    float* k_s = q_s + 32 * LD;      // [32][LD] k̂ rows
    float* kk_s = k_s + 32 * LD;     // [32][33] k̂_t·k̂_i
    float* qk_s = kk_s + 32 * 33;    // [32][33] q̂_t·k̂_i
    float* a_all = qk_s + 32 * 33;   // [kWarps][32][32] A of the warp's value head
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    // Every load of the chunk's rows in flight at once, then converted.
    constexpr int PER = 32 * K / kThreads;
    static_assert(PER * kThreads == 32 * K, "whole rows per block");
    // Element i of this thread: row tid / K + i * (kThreads / K), column tid % K.
    constexpr int kRowStep = kThreads / K;
    uint32_t qb[PER], kb[PER];
    {
        const int t0 = tid / K, r = tid % K;
        const int64_t q0 = (cs + t0) * p.q_tok + kh * p.q_head + r;
        const int64_t k0 = (cs + t0) * p.k_tok + kh * p.k_head + r;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const bool ok = t0 + i * kRowStep < L;
            qb[i] = ok ? load_bits(p.q, p.in_dt, q0 + i * kRowStep * p.q_tok) : 0u;
            kb[i] = ok ? load_bits(p.k, p.in_dt, k0 + i * kRowStep * p.k_tok) : 0u;
        }
    }
    __syncthreads();  // a previous chunk of this tile is done with the buffers
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int e = tid + i * kThreads;
        const int t = e / K, r = e % K;
        q_s[t * LD + r] = bits_to_float(qb[i], p.in_dt);
        k_s[t * LD + r] = bits_to_float(kb[i], p.in_dt);
    }
    __syncthreads();

    // The raw rows as 16-bit operands for the register-state scan (tokens of
    // this chunk only: the rows past L are the next sequence's).
    if (w.kq16) {
        for (int e = tid; e < L * K; e += kThreads) {
            const int t = e / K, r = e % K;
            const float kx = k_s[t * LD + r], qx = q_s[t * LD + r];
            uint16_t* dst = w.kq16 + ((int64_t(kh) * w.rows + row0 + t) * 2) * K + r;
            dst[0] = w.kq16_fp16 ? __half_as_ushort(__float2half_rn(kx))
                                 : __bfloat16_as_ushort(__float2bfloat16_rn(kx));
            dst[K] = w.kq16_fp16 ? __half_as_ushort(__float2half_rn(qx))
                                 : __bfloat16_as_ushort(__float2bfloat16_rn(qx));
        }
        __syncthreads();  // before the rows are scaled in place
    }

    // q̂ = qf·q, k̂ = kf·k; the scan applies the same factors to its raw rows.
    for (int t = warp; t < 32; t += kWarps) {
        float qq = 0.0f, kk = 0.0f;
        if (p.flags & GDN_FLAG_QK_L2NORM) {
            for (int r = lane; r < K; r += 32) {
                qq = fmaf(q_s[t * LD + r], q_s[t * LD + r], qq);
                kk = fmaf(k_s[t * LD + r], k_s[t * LD + r], kk);
            }
            qq = warp_sum(qq);
            kk = warp_sum(kk);
        }
        const float qf = q_factor(p, qq), kf = k_factor(p, kk);
        for (int r = lane; r < K; r += 32) {
            q_s[t * LD + r] *= qf;
            k_s[t * LD + r] *= kf;
        }
        if (lane == 0 && t < L) {
            float* f = w.qkf + (int64_t(kh) * w.rows + row0 + t) * 2;
            f[0] = qf;
            f[1] = kf;
        }
    }
    __syncthreads();

    // k̂_t·k̂_i and q̂_t·k̂_i: a 2x2 tile of each per thread, lower triangle only.
    {
        const int ti = tid / 16, tj = tid % 16;
        float akk[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
        float aqk[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
        if (tj <= ti) {
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
        }
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int b = 0; b < 2; ++b) {
                kk_s[(2 * ti + a) * 33 + 2 * tj + b] = akk[a][b];
                qk_s[(2 * ti + a) * 33 + 2 * tj + b] = aqk[a][b];
            }
    }
    __syncthreads();

    // One warp per value head of this key head.
    float* a_s = a_all + warp * 32 * 32;
    for (int gi = warp; gi < p.G; gi += kWarps) {
        const int32_t h = value_head_of(p, kh, gi);
        float g = 0.0f, beta = 0.0f;  // past the chunk's end: no decay, no update
        if (lane < L) {
            const int64_t tok = cs + lane;
            g = gate_of(p, load_float(p.g, p.gate_dt, tok * p.g_tok + h * p.g_head), h);
            beta = beta_of(p, load_float(p.beta, p.gate_dt, tok * p.b_tok + h * p.b_head));
        }
        // γ_t = g_0 + ... + g_t
        float gamma = g;
#pragma unroll
        for (int o = 1; o < 32; o *= 2) {
            const float y = __shfl_up_sync(0xffffffffu, gamma, o);
            if (lane >= o) gamma += y;
        }
        // A, column `lane` (conflict-free stores).
#pragma unroll 4
        for (int t = 0; t < 32; ++t) {
            const float gt = __shfl_sync(0xffffffffu, gamma, t);
            const float bt = __shfl_sync(0xffffffffu, beta, t);
            a_s[t * 32 + lane] = lane < t ? bt * expf(gt - gamma) * kk_s[t * 33 + lane] : 0.0f;
        }
        __syncwarp();
        // Forward substitution, column `lane` of T:
        //     T[t][j] = δ_tj − Σ_{i<t} A[t][i] T[i][j]
        float Tc[32];
#pragma unroll
        for (int t = 0; t < 32; ++t) {
            float acc = t == lane ? 1.0f : 0.0f;
            const float4* arow = reinterpret_cast<const float4*>(a_s + t * 32);
#pragma unroll
            for (int i = 0; i < t; i += 4) {
                const float4 a = arow[i / 4];
                acc = fmaf(-a.x, Tc[i], acc);
                if (i + 1 < t) acc = fmaf(-a.y, Tc[i + 1], acc);
                if (i + 2 < t) acc = fmaf(-a.z, Tc[i + 2], acc);
                if (i + 3 < t) acc = fmaf(-a.w, Tc[i + 3], acc);
            }
            Tc[t] = acc;
        }
        float* tp = w.TP + (int64_t(h) * w.rows + row0) * 64;
#pragma unroll
        for (int t = 0; t < 32; ++t)
            if (t < L) tp[t * 64 + lane] = Tc[t];
        // P, column `lane`.
#pragma unroll 4
        for (int t = 0; t < L; ++t) {
            const float gt = __shfl_sync(0xffffffffu, gamma, t);
            tp[t * 64 + 32 + lane] = lane <= t ? expf(gt - gamma) * qk_s[t * 33 + lane] : 0.0f;
        }
        if (lane < L) {
            float* gb = w.gb + (int64_t(h) * w.rows + row0 + lane) * 2;
            gb[0] = gamma;
            gb[1] = beta;
        }
        __syncwarp();  // a_s is reused by the warp's next head
    }
}

template <int K>
__global__ void __launch_bounds__(kThreads, 2) chunk_prep_kernel(const Params p, const ChunkScratch w,
                                                              int64_t win0, int64_t win1) {
    extern __shared__ __align__(16) float smem[];
    const int32_t kh = blockIdx.y;
    const int64_t pos0 = win0 + int64_t(blockIdx.x) * kChunk;
    const int64_t pos1 = pos0 + kChunk < win1 ? pos0 + kChunk : win1;
    if (pos0 >= win1) return;
    // The chunk starts in [pos0, pos1): at most one per sequence.
    for (int32_t n = first_seq_ending_after(p, pos0); n < p.num_seqs; ++n) {
        const int64_t bos = seq_begin(p, n), eos = seq_end(p, n);
        if (bos >= pos1) break;
        if (eos <= bos || seq_slot(p, n) < 0) continue;
        const int64_t from = pos0 > bos ? pos0 : bos;
        const int64_t cs = bos + (from - bos + kChunk - 1) / kChunk * kChunk;
        if (cs >= pos1 || cs >= eos) continue;
        const int L = int(eos - cs < kChunk ? eos - cs : kChunk);
        prep_chunk<K>(p, w, kh, cs, cs - win0, L, smem);
    }
}

template <int K>
cudaError_t launch(const Params& p, const ChunkScratch& w, int64_t win0, int64_t win1,
                   cudaStream_t stream) {
    const dim3 grid(unsigned((win1 - win0 + kChunk - 1) / kChunk), unsigned(p.Hk));
    chunk_prep_kernel<K><<<grid, kThreads, policy::cuda_prep_smem_bytes(K), stream>>>(p, w, win0,
                                                                                      win1);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_chunk_prep(const Params& p, const ChunkScratch& w, int64_t window_start,
                              int64_t window_end, cudaStream_t stream) {
    if (p.K == 64) return launch<64>(p, w, window_start, window_end, stream);
    if (p.K == 128) return launch<128>(p, w, window_start, window_end, stream);
    return cudaErrorInvalidValue;
}

cudaError_t set_chunk_prep_attributes(size_t smem_limit) {
    for (auto [fn, bytes] : {std::pair<const void*, size_t>{
                                 reinterpret_cast<const void*>(&chunk_prep_kernel<64>),
                                 policy::cuda_prep_smem_bytes(64)},
                             std::pair<const void*, size_t>{
                                 reinterpret_cast<const void*>(&chunk_prep_kernel<128>),
                                 policy::cuda_prep_smem_bytes(128)}}) {
        if (bytes > smem_limit) continue;  // dispatch keeps such shapes off this path
        const cudaError_t e =
            cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

}  // namespace gdn::cuda
