// The chunked path's prep: everything of a chunk that does not depend on the
// state, for every chunk of a window at once (DESIGN.md §1):
//     A[t][i] = β_t e^{γ_t−γ_i} k̂_t·k̂_i   (i < t)      T = (I + A)^{-1}
//     P[t][i] = e^{γ_t−γ_i} q̂_t·k̂_i       (i <= t)
// One block per (32-token tile of chunk starts, key head): k̂·k̂ and q̂·k̂ once
// per key head, then for each of its value heads T, γ and β on one warp and P
// on another. Chunks start at their sequence's first token and every 32
// tokens after it; a tile usually holds one chunk start, more where sequences
// begin inside it. The rows are written at the chunk's position in the
// window, so chunks of different sequences never share a row.
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

    // Warp `warp` owns rows warp + kWarps m; lane holds their elements
    // lane + 32 j, the order of the sums of squares below. Every load in
    // flight at once.
    constexpr int RW = 32 / kWarps, J = K / 32;
    static_assert(RW * kWarps == 32 && J * 32 == K, "whole rows per warp");
    uint32_t qb[RW][J], kb[RW][J];
#pragma unroll
    for (int m = 0; m < RW; ++m) {
        const int t = warp + kWarps * m;
        const bool ok = t < L;
        const int64_t q0 = (cs + t) * p.q_tok + kh * p.q_head + lane;
        const int64_t k0 = (cs + t) * p.k_tok + kh * p.k_head + lane;
#pragma unroll
        for (int j = 0; j < J; ++j) {
            qb[m][j] = ok ? load_bits(p.q, p.in_dt, q0 + 32 * j) : 0u;
            kb[m][j] = ok ? load_bits(p.k, p.in_dt, k0 + 32 * j) : 0u;
        }
    }
    __syncthreads();  // a previous chunk of this tile is done with the buffers

    // From the registers: the raw rows as 16-bit operands for the
    // register-state scan (tokens of this chunk only: the rows past L are the
    // next sequence's), the factors q̂ = qf·q, k̂ = kf·k (the scan applies the
    // same factors to its raw rows), and the scaled rows into shared memory.
    auto to16 = [&](float x) -> uint16_t {
        return w.kq16_fp16 ? __half_as_ushort(__float2half_rn(x))
                           : __bfloat16_as_ushort(__float2bfloat16_rn(x));
    };
#pragma unroll
    for (int m = 0; m < RW; ++m) {
        const int t = warp + kWarps * m;
        float qx[J], kx[J];
#pragma unroll
        for (int j = 0; j < J; ++j) {
            qx[j] = bits_to_float(qb[m][j], p.in_dt);
            kx[j] = bits_to_float(kb[m][j], p.in_dt);
        }
        if (w.kq16 && t < L) {
            uint16_t* dst = w.kq16 + ((int64_t(kh) * w.rows + row0 + t) * 2) * K + lane;
#pragma unroll
            for (int j = 0; j < J; ++j) {
                dst[32 * j] = to16(kx[j]);
                dst[K + 32 * j] = to16(qx[j]);
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
#pragma unroll
        for (int j = 0; j < J; ++j) {
            q_s[t * LD + lane + 32 * j] = qx[j] * qf;
            k_s[t * LD + lane + 32 * j] = kx[j] * kf;
        }
        if (lane == 0 && t < L) {
            float* f = w.qkf + (int64_t(kh) * w.rows + row0 + t) * 2;
            f[0] = qf;
            f[1] = kf;
        }
    }
    __syncthreads();

    // k̂_t·k̂_i and q̂_t·k̂_i: a 2x2 tile of each per thread, for the 136 tiles on
    // or below the diagonal only, packed onto the first threads so that no
    // warp carries idle lanes through the loop (the upper triangle is never
    // read).
    constexpr int kTiles = 16 * 17 / 2;
    static_assert(kTiles <= kThreads, "one tile per thread");
    if (tid < kTiles) {
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
    __syncthreads();

    float* a_s = a_all + warp * 32 * 32;
    for (int task = warp; task < 2 * p.G; task += kWarps) {
        const int32_t h = value_head_of(p, kh, task >> 1);
        if (task != warp) load_gates(task);
        float g = 0.0f, beta = 0.0f;  // past the chunk's end: no decay, no update
        if (lane < L) {
            g = gate_of(p, g_raw, h);
            if (t_task) beta = beta_of(p, b_raw);
        }
        // γ_t = g_0 + ... + g_t
        float gamma = g;
#pragma unroll
        for (int o = 1; o < 32; o *= 2) {
            const float y = __shfl_up_sync(0xffffffffu, gamma, o);
            if (lane >= o) gamma += y;
        }
        float* tp = w.TP + (int64_t(h) * w.rows + row0) * 64;
        if (!t_task) {
            // P, column `lane`.
#pragma unroll 4
            for (int t = 0; t < L; ++t) {
                const float gt = __shfl_sync(0xffffffffu, gamma, t);
                tp[t * 64 + 32 + lane] = lane <= t ? expf(gt - gamma) * qk_s[t * 33 + lane] : 0.0f;
            }
            continue;
        }
        // A, column `lane` (conflict-free stores).
#pragma unroll 4
        for (int t = 0; t < 32; ++t) {
            const float gt = __shfl_sync(0xffffffffu, gamma, t);
            const float bt = __shfl_sync(0xffffffffu, beta, t);
            a_s[t * 32 + lane] = lane < t ? bt * expf(gt - gamma) * kk_s[t * 33 + lane] : 0.0f;
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
        prep_chunk<K>(p, w, kh, cs, cs - win0, L, smem);
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

template <int K>
cudaError_t launch(const Params& p, const ChunkScratch& w, int64_t win0, int64_t win1,
                   cudaStream_t stream, bool overlap) {
    const dim3 grid(unsigned((win1 - win0 + kChunk - 1) / kChunk), unsigned(p.Hk));
    return launch_kernel(chunk_prep_kernel<K>, grid, dim3(kThreads), policy::cuda_prep_smem_bytes(K),
                         stream, overlap, p, w, win0, win1);
}

}  // namespace

cudaError_t launch_chunk_prep(const Params& p, const ChunkScratch& w, int64_t window_start,
                              int64_t window_end, cudaStream_t stream, bool overlap) {
    if (p.K == 64) return launch<64>(p, w, window_start, window_end, stream, overlap);
    if (p.K == 128) return launch<128>(p, w, window_start, window_end, stream, overlap);
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
