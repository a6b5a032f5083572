// The chunked path's scan: the walk over a window's chunks that carries the
// state (DESIGN.md §1), with T, P, γ, β from the prep:
//     U   = β ⊙ (v − e^{γ} ⊙ S0ᵀk̂)
//     D   = T · U
//     o_t = e^{γ_t} S0ᵀq̂_t + Σ_{i<=t} P[t][i] D_i
//     S_C = e^{γ_{L−1}} S0 + Σ_i e^{γ_{L−1}−γ_i} k̂_i D_iᵀ
// One block per (key head, NCOL value columns of that key head's value
// heads), 8·NCOL threads. S0ᵀk̂ and S0ᵀq̂ of all its columns are one product
// (the k̂, q̂ rows are the key head's), split over two halves of K so twice
// as many warps hide the shared-memory latency; each thread holds a 4x4 tile
// of it, each warp 8 row groups x 4 column groups (two 128-byte wavefronts
// per step). The state lives in shared memory between chunks and in
// registers (a (K/32) x 4 tile per thread) while it is updated. While a chunk
// computes, the next chunk's q, k, v are loaded into registers (any stride;
// the input's element size is a template parameter, so no load branches)
// and its T, P, γ, β, q/k factors are copied by cp.async; q̂ = qf·q and
// k̂ = kf·k are applied to the small products, not to the rows.
//
// The TF32X3 mode (ScanMode::kTf32x3, GDN_PATH_CHUNKED_TC) runs the two
// products that touch the state, [S0ᵀk; S0ᵀq] and the update, as mma.sync
// over the whole of K per warp (no K halves): a warp owns a 16 x 16 tile of
// the first and 4 (K = 128) or 2 (K = 64) 16 x 8 tiles of the state in the
// update. The state stays FP32 (the update's accumulator is the FP32 state
// itself); the operands are split into TF32 hi + lo. (The BF16/FP16 modes
// have their own scan, with the state in registers: chunk_scan_mma.cuh.)
//
// A window's chunks are walked in token order, across sequences: the state
// is written to a sequence's slot after its last chunk of the window (the
// next window reads it back) and the next sequence's is read.
#pragma once

#include "common/dispatch.hpp"
#include "cuda/device_common.cuh"
#include "cuda/mma.cuh"

namespace gdn::cuda {
namespace scan {

constexpr int kChunk = policy::kCudaChunk;
constexpr int kLdKQ = 68;  // kqT row: 32 k tokens, 32 q tokens, 4 floats of padding
constexpr int kPrep = int(policy::kCudaScanPrepFloats);
// Offsets inside one prep buffer. T and P rows are padded to 36 floats: the
// D and O steps read 8 different rows per warp as float4, which a stride of
// 32 floats put in the same 4 banks (8-way conflicts; Nsight Compute on the
// H200 counted 57% of the scan's shared wavefronts as excess).
constexpr int kLdTP = 36;
constexpr int kPrepT = 0;                    // [2 heads][32][kLdTP]
constexpr int kPrepP = 2 * 32 * kLdTP;       // [2 heads][32][kLdTP]
constexpr int kPrepGB = 4 * 32 * kLdTP;      // [2 heads][32][2] γ, β
constexpr int kPrepQKF = kPrepGB + 2 * 64;   // [32][2] qf, kf
static_assert(kPrepQKF + 64 == kPrep, "prep buffer layout");

// Raw input elements of IN_BYTES bytes (device_common.cuh).
using cuda::Raw;

struct Chunk {
    int32_t n;   // sequence; -1: none
    int64_t cs;  // first token
    // Its tokens L (1..32) in the low 6 bits, above them the row of its first
    // token in the window's scratch (Window; rows are far below 2^25): one
    // register, as L alone took before time-sliced windows needed the row
    // (the register-state scan runs at 255 registers, and the loading warp
    // keeps up to three chunks live).
    int32_t lr;
    __device__ __forceinline__ int L() const { return lr & 63; }
    __device__ __forceinline__ int32_t row() const { return lr >> 6; }
};
static_assert(policy::kCudaMaxWindowTokens + policy::kCudaChunk < (int64_t(1) << 25),
              "a window's rows fit Chunk::lr");
__device__ __forceinline__ Chunk make_chunk(int32_t n, int64_t cs, int64_t eos, int64_t row) {
    return {n, cs, int32_t(row << 6) | int(eos - cs < kChunk ? eos - cs : kChunk)};
}

// The walk over a window's chunks. SLICED (a time-sliced window, Window in
// kernels.hpp) is a compile-time parameter of the scans: the two walks
// inlined side by side cost the register-state scan 4-12 bytes more spill
// and its f32-input instances ~5% at H_v 48, 32K (BF16 1.76 -> 1.87 ms, runs
// 112-113); each instance keeps the one walk it runs (run 115: as before).
//
// The first sequence a window's chunks can be in: the first that reaches into
// a window of the batch's tokens; sequence 0 in a time-sliced one.
template <bool SLICED>
__device__ __forceinline__ int32_t first_seq_of(const Params& p, const Window& win) {
    if constexpr (SLICED) return 0;
    else return first_seq_ending_after(p, win.begin);
}

// The first chunk in window `win` of sequences n, n + step, n + 2 step, ...
// A scan whose grid has `step` sequence lanes (gridDim.z) walks lane z's
// sequences: first_seq_of(win) + z, then every step-th.
template <bool SLICED>
__device__ __forceinline__ Chunk first_chunk_from(const Params& p, int32_t n, const Window& win,
                                                  int32_t step = 1) {
    for (; n < p.num_seqs; n += step) {
        const int64_t bos = seq_begin(p, n), eos = seq_end(p, n);
        if constexpr (SLICED) {
            // Offset win.begin (a chunk start) of every sequence, its rows
            // from n · slice.
            if (eos <= bos || seq_slot(p, n) < 0) continue;
            const int64_t cs = bos + win.begin;
            if (cs >= eos) continue;
            return make_chunk(n, cs, eos, int64_t(n) * win.slice);
        } else {
            if (bos >= win.end) break;  // the rest start past the window
            if (eos <= bos || seq_slot(p, n) < 0) continue;
            const int64_t from = win.begin > bos ? win.begin : bos;
            const int64_t cs = bos + (from - bos + kChunk - 1) / kChunk * kChunk;
            if (cs >= eos || cs >= win.end) continue;
            return make_chunk(n, cs, eos, cs - win.begin);
        }
    }
    return {-1, 0, 0};
}

// Where sequence n's chunks in window `win` end: its end, or that of its
// part of a time-sliced window (a chunk boundary, so a chunk before it keeps
// its length).
template <bool SLICED>
__device__ __forceinline__ int64_t seq_end_in(const Params& p, int32_t n, const Window& win) {
    const int64_t eos = seq_end(p, n);
    if constexpr (SLICED) {
        const int64_t part_end = seq_begin(p, n) + win.begin + win.slice;
        return eos < part_end ? eos : part_end;
    } else {
        return eos;
    }
}

// The chunk after c, given end = seq_end_in(c's sequence) (the next sequence
// of c's lane where c's chunks in the window end).
template <bool SLICED>
__device__ __forceinline__ Chunk next_chunk(const Params& p, const Chunk& c, int64_t end,
                                            const Window& win, int32_t step = 1) {
    const int64_t cs = c.cs + kChunk;
    if (cs < end && (SLICED || cs < win.end))
        return make_chunk(c.n, cs, end, int64_t(c.row()) + kChunk);
    return first_chunk_from<SLICED>(p, c.n + step, win, step);
}
template <bool SLICED>
__device__ __forceinline__ Chunk next_chunk(const Params& p, const Chunk& c, const Window& win,
                                            int32_t step = 1) {
    return next_chunk<SLICED>(p, c, seq_end_in<SLICED>(p, c.n, win), win, step);
}

// The (K, NCOL) this scan is built for: the chunked path's K in {64, 128},
// policy::cuda_scan_columns' NCOL in {32, 48, 64}. (The register-state scan,
// chunk_scan_mma.cuh, is built for 64 columns only.)
template <int K_, int NCOL_>
struct Shape {
    static constexpr int K = K_, NCOL = NCOL_;
};
// f(Shape<K, ncol>{}), or cudaErrorInvalidValue for a shape not built.
template <class F>
cudaError_t for_shape(int K, int ncol, F&& f) {
#define GDN_SCAN_SHAPE(KK, NC) \
    if (K == KK && ncol == NC) return f(Shape<KK, NC>{});
    GDN_SCAN_SHAPE(64, 32)
    GDN_SCAN_SHAPE(64, 48)
    GDN_SCAN_SHAPE(64, 64)
    GDN_SCAN_SHAPE(128, 32)
    GDN_SCAN_SHAPE(128, 48)
    GDN_SCAN_SHAPE(128, 64)
#undef GDN_SCAN_SHAPE
    return cudaErrorInvalidValue;
}
// f(Shape) for every shape built; the first error.
template <class F>
cudaError_t for_each_shape(F&& f) {
    const cudaError_t e[] = {f(Shape<64, 32>{}),  f(Shape<64, 48>{}),  f(Shape<64, 64>{}),
                             f(Shape<128, 32>{}), f(Shape<128, 48>{}), f(Shape<128, 64>{})};
    for (cudaError_t x : e)
        if (x != cudaSuccess) return x;
    return cudaSuccess;
}
// A kernel's dynamic shared-memory limit raised to `bytes`, where that fits
// the device's opt-in maximum (dispatch keeps larger shapes off the path).
inline cudaError_t raise_smem_limit(const void* kernel, size_t bytes, size_t smem_limit) {
    if (bytes > smem_limit) return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

// T, P, γ, β, qf, kf rows of chunk c (zeros past its end) -> prep buffer pb
// (layout kPrep*), for the nheads value heads from the key head's gi0-th;
// threads tid, tid + nt, ... of the block issue the copies, one commit group.
__device__ __forceinline__ void copy_prep_async(const Params& p, const ChunkScratch& w, int32_t kh,
                                                int32_t gi0, int nheads, const Chunk& c,
                                                float* pb, int tid, int nt) {
    const int64_t row0 = c.row();
    for (int e = tid; e < nheads * 32 * 16; e += nt) {
        const int l = e / 512, t = (e / 16) % 32, piece = e % 16;
        const int32_t hh = value_head_of(p, kh, gi0 + l);
        const float* src = w.TP + (int64_t(hh) * w.rows + row0 + t) * 64 + piece * 4;
        float* dst = pb + (piece < 8 ? kPrepT : kPrepP) + l * 32 * kLdTP + t * kLdTP + (piece & 7) * 4;
        cp_async16(dst, t < c.L() ? src : w.TP, t < c.L() ? 16 : 0);
    }
    for (int e = tid; e < nheads * 32; e += nt) {
        const int l = e / 32, t = e % 32;
        const int32_t hh = value_head_of(p, kh, gi0 + l);
        const float* src = w.gb + (int64_t(hh) * w.rows + row0 + t) * 2;
        cp_async8(pb + kPrepGB + l * 64 + t * 2, t < c.L() ? src : w.gb, t < c.L() ? 8 : 0);
    }
    for (int t = tid; t < 32; t += nt) {
        const float* src = w.qkf + (int64_t(kh) * w.rows + row0 + t) * 2;
        cp_async8(pb + kPrepQKF + t * 2, t < c.L() ? src : w.qkf, t < c.L() ? 8 : 0);
    }
    cp_async_commit();
}

__device__ __forceinline__ void fma4(float (&acc)[4], float a, const float4& b) {
    acc[0] = fmaf(a, b.x, acc[0]);
    acc[1] = fmaf(a, b.y, acc[1]);
    acc[2] = fmaf(a, b.z, acc[2]);
    acc[3] = fmaf(a, b.w, acc[3]);
}
__device__ __forceinline__ float4 add4(const float4& a, const float4& b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

template <int K, int NCOL, int IN_BYTES, ScanMode MODE, bool SLICED>
__global__ void __launch_bounds__(8 * NCOL, 1)
    chunk_scan_kernel(const Params p, const ChunkScratch w, int64_t win_begin, int64_t win_end,
                      int64_t win_slice, int zero_empty_sequences) {
    // The window, from scalar parameters (ptxas allocates registers differently
    // for a struct parameter: docs/perf-notes.md v39).
    const Window win{win_begin, win_end, win_slice};
    using In = typename Raw<IN_BYTES>::type;
    constexpr int NT = 8 * NCOL;
    constexpr int CG = NCOL / 4;      // column groups of 4
    constexpr int NW = NT / 32;
    constexpr int KH = K / 2;         // rows of K per half of the first product
    constexpr int RPT = K / 32;       // state rows per thread in the update
    constexpr int RB_PER = (K / 8 + NW - 1) / NW;  // r-blocks of 8 rows per warp (prefetch)
    constexpr int V_PER = 32 * NCOL / NT;
    static_assert(NCOL % 16 == 0 && K % 32 == 0, "tile shapes");
    static_assert(NW == (CG / 4) * 2 * 2, "warps = column blocks x row blocks x K halves");
    static_assert(MODE == ScanMode::kFp32 || MODE == ScanMode::kTf32x3, "FP32 or TF32X3");
    static_assert(GDN_STATE_BLOCK % kChunk == 0, "block ends are chunk ends");
    constexpr bool kTc = MODE != ScanMode::kFp32;
    constexpr int SLD = NCOL + (kTc ? policy::kCudaScanStatePadTc : 0);  // S_s row stride
    // D and D2 row stride: the update's B-fragment loads (rows t of an
    // 8-token step) hit distinct banks with NCOL + 8; policy::kCudaScanDPadTc
    // floats are set aside.
    constexpr int DLD = NCOL + (kTc ? 8 : 0);
    static_assert(DLD - NCOL <= policy::kCudaScanDPadTc, "D rows fit their allocation");
    // As the register-state scan (chunk_scan_mma.cuh): wait for the prep and
    // the previous window, then let the next window's prep start.
    grid_dependency_wait();
    allow_dependent_launch();

    extern __shared__ __align__(16) float smem[];
    float* kqT = smem;                      // [2][K][kLdKQ] k (cols 0..31), q (32..63), raw, transposed
    float* v_s = kqT + 2 * K * kLdKQ;       // [2][32][NCOL]
    float* prep = v_s + 2 * 32 * NCOL;      // [2][kPrep]
    float* S_s = prep + 2 * kPrep;          // [K][SLD] S0
    float* WQ = S_s + K * SLD;              // [2 halves][64][NCOL] S0ᵀk rows (then U), S0ᵀq rows
    float* D_s = WQ + 2 * 64 * NCOL;        // [32][DLD] D
    float* D2_s = D_s + 32 * DLD;           // [32][DLD] e^{γ_last−γ_i} kf_i D_i

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // Warp w: column block w % (CG/4), row block (w / (CG/4)) % 2, K half w / (CG/2);
    // lane: row group lane % 8, column group lane / 8 of those blocks.
    const int cg = (warp % (CG / 4)) * 4 + (lane >> 3);
    const int rg = ((warp / (CG / 4)) % 2) * 8 + (lane & 7);  // 0..15
    const int half = warp / (CG / 2);                        // 0..1
    const int t_own = rg + 16 * half;  // this thread's token row in the small products (0..31)
    const int32_t kh = blockIdx.y;
    const bool bf16 = p.in_dt == GDN_DTYPE_BF16;
    // Columns are numbered across the key head's value heads (G·V of them).
    const int32_t gc0 = int32_t(blockIdx.x) * NCOL;
    const int32_t gi0 = gc0 / p.V;
    const int nheads = (gc0 + NCOL - 1) / p.V - gi0 + 1;  // 1 or 2 (NCOL <= V)
    const int32_t my_gc = gc0 + 4 * cg;
    const int lh = my_gc / p.V - gi0;  // this thread's head within the block
    const int32_t vcol = my_gc % p.V;  // first of its 4 columns
    const int32_t h = value_head_of(p, kh, gi0 + lh);

    // The v element this thread prefetches: column tid % NCOL, rows tid / NCOL + 8i.
    const int v_c = tid % NCOL;
    const int32_t v_gc = gc0 + v_c;
    const int64_t v_col_off = int64_t(value_head_of(p, kh, v_gc / p.V)) * p.v_head + v_gc % p.V;
    const In* q_in = static_cast<const In*>(p.q);
    const In* k_in = static_cast<const In*>(p.k);
    const In* v_in = static_cast<const In*>(p.v);

    uint32_t q_r[RB_PER * 8], k_r[RB_PER * 8], v_r[V_PER];

    // The next chunk's k/q rows: warp w takes blocks of 8 rows of K (r-blocks
    // w, w + NW, ...), 4 tokens x 8 rows at a time, so its transposed stores
    // hit 32 banks.
    auto prefetch = [&](const Chunk& c) {
#pragma unroll
        for (int m = 0; m < RB_PER; ++m) {
            const int rb = warp + m * NW;
            if (rb >= K / 8) break;
            const int64_t tok = c.cs + (lane >> 3);
            const int r = rb * 8 + (lane & 7);
            const In* qp = q_in + (tok * p.q_tok + kh * p.q_head + r);
            const In* kp = k_in + (tok * p.k_tok + kh * p.k_head + r);
            const int64_t qs = 4 * p.q_tok, ks = 4 * p.k_tok;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const bool ok = 4 * i + (lane >> 3) < c.L();
                q_r[m * 8 + i] = ok ? uint32_t(__ldg(qp + i * qs)) : 0u;
                k_r[m * 8 + i] = ok ? uint32_t(__ldg(kp + i * ks)) : 0u;
            }
        }
        const In* vp = v_in + ((c.cs + tid / NCOL) * p.v_tok + v_col_off);
        const int64_t vs = int64_t(NT / NCOL) * p.v_tok;
#pragma unroll
        for (int i = 0; i < V_PER; ++i) {
            const int t = tid / NCOL + (NT / NCOL) * i;
            v_r[i] = t < c.L() ? uint32_t(__ldg(vp + i * vs)) : 0u;
        }
    };
    auto stage = [&](int buf) {
        float* kq = kqT + buf * K * kLdKQ;
#pragma unroll
        for (int m = 0; m < RB_PER; ++m) {
            const int rb = warp + m * NW;
            if (rb >= K / 8) break;
            float* row = kq + (rb * 8 + (lane & 7)) * kLdKQ + (lane >> 3);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                row[4 * i] = Raw<IN_BYTES>::to_float(k_r[m * 8 + i], bf16);
                row[32 + 4 * i] = Raw<IN_BYTES>::to_float(q_r[m * 8 + i], bf16);
            }
        }
        float* vb = v_s + buf * 32 * NCOL;
#pragma unroll
        for (int i = 0; i < V_PER; ++i)
            vb[(tid / NCOL + (NT / NCOL) * i) * NCOL + v_c] = Raw<IN_BYTES>::to_float(v_r[i], bf16);
    };
    auto prep_async = [&](const Chunk& c, int buf) {
        copy_prep_async(p, w, kh, gi0, nheads, c, prep + buf * kPrep, tid, NT);
    };
    // The state moves between S_s and a slot's heads (head h's K·V floats at
    // base + h·K·V: a pool slot, or the workspace's carry) cooperatively
    // (coalesced for [K][V] slots), once per sequence and window. Column c of
    // the block is value column (gc0 + c) % V of the group's value head
    // (gc0 + c) / V.
    const bool token_states = p.token_state_indices != nullptr;
    auto slot_base = [&](int32_t slot) { return p.state + int64_t(slot) * p.slot_stride; };
    auto load_from = [&](const float* base, bool zero) {
        for (int e = tid; e < K * NCOL; e += NT) {
            const int r = e / NCOL, col = e % NCOL;
            const int32_t gc = gc0 + col;
            const float* st = base + int64_t(value_head_of(p, kh, gc / p.V)) * p.K * p.V;
            S_s[r * SLD + col] = zero ? 0.0f : st[state_offset(p, r, gc % p.V)];
        }
    };
    auto store_to = [&](float* base) {
        for (int e = tid; e < K * NCOL; e += NT) {
            const int r = e / NCOL, col = e % NCOL;
            const int32_t gc = gc0 + col;
            float* st = base + int64_t(value_head_of(p, kh, gc / p.V)) * p.K * p.V;
            st[state_offset(p, r, gc % p.V)] = S_s[r * SLD + col];
        }
    };
    auto load_state = [&](const Chunk& c) {
        // A sequence's first chunk may start from zero; later windows read
        // back what the previous one wrote: to the slot, or with
        // GDN_FLAG_TOKEN_STATES (own slots only read) to the carry.
        const bool first = c.cs == seq_begin(p, c.n);
        load_from(token_states && !first ? w.carry_in : slot_base(seq_slot(p, c.n)),
                  seq_from_zero(p, c.n) && first);
    };

    // Sequences without tokens that start from zero still get a zero state
    // (the sequential path writes one too); window 0 takes care of them.
    // With GDN_FLAG_TOKEN_STATES they have no token to name a slot: nothing.
    if (zero_empty_sequences && p.start_from_zero && !token_states && blockIdx.z == 0) {
        for (int e = tid; e < K * SLD; e += NT) S_s[e] = 0.0f;
        __syncthreads();
        for (int32_t n = 0; n < p.num_seqs; ++n)
            if (seq_end(p, n) == seq_begin(p, n) && seq_slot(p, n) >= 0 && seq_from_zero(p, n))
                store_to(slot_base(seq_slot(p, n)));
        __syncthreads();
    }

    // Sequence lanes (gridDim.z, policy::cuda_scan_lanes): lane z walks the
    // window's sequences z, z + lanes, ... (counted from the first that
    // reaches into the window); the bits of a sequence do not depend on it.
    Chunk cur = first_chunk_from<SLICED>(p, first_seq_of<SLICED>(p, win) + int32_t(blockIdx.z), win,
                                         int32_t(gridDim.z));
    if (cur.n < 0) return;
    load_state(cur);
    prefetch(cur);
    prep_async(cur, 0);
    stage(0);
    cp_async_wait_all();
    __syncthreads();

#pragma unroll 1
    for (int b = 0;; b ^= 1) {
        const Chunk nxt = next_chunk<SLICED>(p, cur, win, int32_t(gridDim.z));
        if (nxt.n >= 0) {
            prefetch(nxt);
            prep_async(nxt, b ^ 1);
        }
        const float* kq = kqT + b * K * kLdKQ;
        const float* vb = v_s + b * 32 * NCOL;
        const float* pb = prep + b * kPrep;
        const float* T_ = pb + kPrepT + lh * 32 * kLdTP;
        const float* P_ = pb + kPrepP + lh * 32 * kLdTP;
        const float* gb = pb + kPrepGB + lh * 64;
        const float* qkf = pb + kPrepQKF;
        const int L = cur.L();

        // [S0ᵀk ; S0ᵀq]: tensor cores over all of K (rows 0..63 of WQ), ...
        if constexpr (kTc) {
            // warp w: token tile w % 4, column tiles 2 (w / 4) and 2 (w / 4) + 1.
            const int g = lane >> 2, tq = lane & 3;
            const int mt = warp & 3, nt0 = 2 * (warp >> 2);
            const float* a_p = kq + 16 * mt + g;  // A[tok][r] = kq[r * kLdKQ + tok]
            const float* b_p = S_s + 8 * nt0 + g; // B[r][c] = S_s[r * SLD + c]
            float acc[2][4] = {};
#pragma unroll 4
            for (int r0 = 0; r0 < K; r0 += 8) {
                const float* ar = a_p + (r0 + tq) * kLdKQ;
                const mma::Split a[4] = {mma::split_tf32(ar[0]), mma::split_tf32(ar[8]),
                                         mma::split_tf32(ar[4 * kLdKQ]),
                                         mma::split_tf32(ar[4 * kLdKQ + 8])};
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const float* br = b_p + (r0 + tq) * SLD + 8 * j;
                    const mma::Split b[2] = {mma::split_tf32(br[0]), mma::split_tf32(br[4 * SLD])};
                    mma::mma_3xtf32<IN_BYTES == 2>(acc[j], a, b);
                }
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                float* out = WQ + (16 * mt + g) * NCOL + 8 * (nt0 + j) + 2 * tq;
                *reinterpret_cast<float2*>(out) = make_float2(acc[j][0], acc[j][1]);
                *reinterpret_cast<float2*>(out + 8 * NCOL) = make_float2(acc[j][2], acc[j][3]);
            }
        } else {
            // ... or FP32 over this half of K: 4 rows (tokens) x 4 columns per thread.
            float acc[4][4] = {};
            const float* a_p = kq + half * KH * kLdKQ + 4 * rg;
            const float* s_p = S_s + half * KH * SLD + 4 * cg;
#pragma unroll 4
            for (int r = 0; r < KH; ++r) {
                const float4 a = *reinterpret_cast<const float4*>(a_p + r * kLdKQ);
                const float4 s = *reinterpret_cast<const float4*>(s_p + r * SLD);
                fma4(acc[0], a.x, s);
                fma4(acc[1], a.y, s);
                fma4(acc[2], a.z, s);
                fma4(acc[3], a.w, s);
            }
            float* out = WQ + half * 64 * NCOL + 4 * rg * NCOL + 4 * cg;
#pragma unroll
            for (int i = 0; i < 4; ++i)
                *reinterpret_cast<float4*>(out + i * NCOL) =
                    make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        }
        // The next chunk's rows, loaded during the product, go to buffer b^1
        // (last read by the previous chunk): the registers are free again.
        // (Staging them at the end of the chunk instead, in the tensor-core
        // modes, gained nothing and cost TF32X3 ~8%: docs/perf-notes.md.)
        if (nxt.n >= 0) stage(b ^ 1);
        __syncthreads();

        // U = β (v − e^γ kf S0ᵀk) for row t_own, in place of half 0's S0ᵀk.
        {
            const int t = t_own;
            const float eg = expf(gb[2 * t]) * qkf[2 * t + 1];
            const float beta = gb[2 * t + 1];
            float4* wr = reinterpret_cast<float4*>(WQ + t * NCOL + 4 * cg);
            float4 x = *wr;
            if constexpr (!kTc) x = add4(x, *reinterpret_cast<const float4*>(WQ + (64 + t) * NCOL + 4 * cg));
            const float4 v = *reinterpret_cast<const float4*>(vb + t * NCOL + 4 * cg);
            *wr = make_float4(beta * (v.x - eg * x.x), beta * (v.y - eg * x.y),
                              beta * (v.z - eg * x.z), beta * (v.w - eg * x.w));
        }
        __syncthreads();

        // D = T U, and D2 = e^{γ_last−γ_t} kf_t D (zero past the chunk's end).
        const float gamma_last = gb[2 * (L - 1)];
        {
            const int t = t_own;
            float acc[4] = {};
#pragma unroll
            for (int i4 = 0; i4 < 8; ++i4) {
                const float4 ta = *reinterpret_cast<const float4*>(T_ + t * kLdTP + 4 * i4);
                fma4(acc, ta.x, *reinterpret_cast<const float4*>(WQ + (4 * i4 + 0) * NCOL + 4 * cg));
                fma4(acc, ta.y, *reinterpret_cast<const float4*>(WQ + (4 * i4 + 1) * NCOL + 4 * cg));
                fma4(acc, ta.z, *reinterpret_cast<const float4*>(WQ + (4 * i4 + 2) * NCOL + 4 * cg));
                fma4(acc, ta.w, *reinterpret_cast<const float4*>(WQ + (4 * i4 + 3) * NCOL + 4 * cg));
            }
            const float f = t < L ? expf(gamma_last - gb[2 * t]) * qkf[2 * t + 1] : 0.0f;
            *reinterpret_cast<float4*>(D_s + t * DLD + 4 * cg) =
                make_float4(acc[0], acc[1], acc[2], acc[3]);
            *reinterpret_cast<float4*>(D2_s + t * DLD + 4 * cg) =
                make_float4(f * acc[0], f * acc[1], f * acc[2], f * acc[3]);
        }
        __syncthreads();

        // o_t = e^{γ_t} qf_t S0ᵀq_t + Σ_i P[t][i] D_i
        {
            const int t = t_own;
            float acc[4] = {};
            // Unrolled by 4, not 8, below sm_90 (where it stays fully
            // unrolled): sm_80's ptxas, and sm_86/89's in the TF32X3 mode,
            // hoist the 40 float4 loads of the full unroll and then spill
            // (up to 456 bytes at sm_80, 8-56 at sm_86/89). The sums are the
            // same chain in the same order either way.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
            constexpr int kOUnroll = (__CUDA_ARCH__ == 800 || kTc) ? 4 : 8;
#pragma unroll kOUnroll
#else
#pragma unroll
#endif
            for (int i4 = 0; i4 < 8; ++i4) {
                const float4 pa = *reinterpret_cast<const float4*>(P_ + t * kLdTP + 4 * i4);
                fma4(acc, pa.x, *reinterpret_cast<const float4*>(D_s + (4 * i4 + 0) * DLD + 4 * cg));
                fma4(acc, pa.y, *reinterpret_cast<const float4*>(D_s + (4 * i4 + 1) * DLD + 4 * cg));
                fma4(acc, pa.z, *reinterpret_cast<const float4*>(D_s + (4 * i4 + 2) * DLD + 4 * cg));
                fma4(acc, pa.w, *reinterpret_cast<const float4*>(D_s + (4 * i4 + 3) * DLD + 4 * cg));
            }
            if (t < L) {
                const float f = expf(gb[2 * t]) * qkf[2 * t];
                float4 sq = *reinterpret_cast<const float4*>(WQ + (32 + t) * NCOL + 4 * cg);
                if constexpr (!kTc)
                    sq = add4(sq, *reinterpret_cast<const float4*>(WQ + (64 + 32 + t) * NCOL + 4 * cg));
                const float o[4] = {fmaf(f, sq.x, acc[0]), fmaf(f, sq.y, acc[1]),
                                    fmaf(f, sq.z, acc[2]), fmaf(f, sq.w, acc[3])};
                const int64_t tok = cur.cs + t;
                if (p.flags & GDN_FLAG_OUTPUT_NORM) {
                    float* dst = w.O + ((int64_t(cur.row()) + t) * p.Hv + h) * p.V + vcol;
#pragma unroll
                    for (int j = 0; j < 4; ++j) dst[j] = o[j];
                } else {
                    const int64_t off = tok * p.o_tok + int64_t(h) * p.o_head + vcol;
                    if (p.out_dt == GDN_DTYPE_F32) {
                        float* dst = static_cast<float*>(p.out) + off;
#pragma unroll
                        for (int j = 0; j < 4; ++j) dst[j] = o[j];
                    } else if (p.out_dt == GDN_DTYPE_BF16) {
                        __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(p.out) + off;
#pragma unroll
                        for (int j = 0; j < 4; ++j) dst[j] = __float2bfloat16_rn(o[j]);
                    } else {
                        __half* dst = static_cast<__half*>(p.out) + off;
#pragma unroll
                        for (int j = 0; j < 4; ++j) dst[j] = __float2half_rn(o[j]);
                    }
                }
            }
        }

        // S = e^{γ_last} S + Σ_t k_t D2_t (k raw: kf is in D2). S_s was last
        // read by the first product, three barriers ago. Tensor cores: warp w
        // owns column tile w % (NCOL / 8) of row tiles w / (NCOL / 8) + 2 i.
        if constexpr (kTc) {
            constexpr int NT8 = NCOL / 8;
            constexpr int MSTEP = NW / NT8;
            constexpr int MT = K / 16 / MSTEP;
            static_assert(MSTEP * NT8 == NW && MT * MSTEP * 16 == K, "update tiles");
            const int g = lane >> 2, tq = lane & 3;
            const int nt = warp % NT8, mg = warp / NT8;
            // The decay of the tile's value head (a block may hold two; an
            // 8-column tile never straddles them, V being a multiple of 8),
            // not of this thread's own columns in the other steps.
            const int tile_head = (gc0 + 8 * nt) / p.V - gi0;
            const float decay = expf(pb[kPrepGB + tile_head * 64 + 2 * (L - 1)]);
            float acc[MT][4];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const float* sr = S_s + (16 * (mg + MSTEP * i) + g) * SLD + 8 * nt + 2 * tq;
                const float2 x0 = *reinterpret_cast<const float2*>(sr);
                const float2 x1 = *reinterpret_cast<const float2*>(sr + 8 * SLD);
                acc[i][0] = decay * x0.x;
                acc[i][1] = decay * x0.y;
                acc[i][2] = decay * x1.x;
                acc[i][3] = decay * x1.y;
            }
            const float* d_p = D2_s + 8 * nt + g;  // B[tok][c] = D2_s[tok * DLD + c]
#pragma unroll
            for (int t0 = 0; t0 < 32; t0 += 8) {
                const mma::Split b[2] = {mma::split_tf32(d_p[(t0 + tq) * DLD]),
                                         mma::split_tf32(d_p[(t0 + tq + 4) * DLD])};
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    // A[r][tok] = kq[r * kLdKQ + tok]
                    const float* ar = kq + (16 * (mg + MSTEP * i) + g) * kLdKQ + t0 + tq;
                    const mma::Split a[4] = {mma::split_tf32(ar[0]), mma::split_tf32(ar[8 * kLdKQ]),
                                             mma::split_tf32(ar[4]),
                                             mma::split_tf32(ar[8 * kLdKQ + 4])};
                    mma::mma_3xtf32<IN_BYTES == 2>(acc[i], a, b);
                }
            }
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                float* sr = S_s + (16 * (mg + MSTEP * i) + g) * SLD + 8 * nt + 2 * tq;
                *reinterpret_cast<float2*>(sr) = make_float2(acc[i][0], acc[i][1]);
                *reinterpret_cast<float2*>(sr + 8 * SLD) = make_float2(acc[i][2], acc[i][3]);
            }
        } else {
            // FP32: rows t_own + 32 i of the state, in registers.
            const float decay = expf(gamma_last);
            float S[RPT][4];
#pragma unroll
            for (int i = 0; i < RPT; ++i) {
                const float4 x =
                    *reinterpret_cast<const float4*>(S_s + (t_own + 32 * i) * SLD + 4 * cg);
                S[i][0] = decay * x.x;
                S[i][1] = decay * x.y;
                S[i][2] = decay * x.z;
                S[i][3] = decay * x.w;
            }
#pragma unroll 2
            for (int t4 = 0; t4 < 8; ++t4) {
                float4 d[4];
#pragma unroll
                for (int tt = 0; tt < 4; ++tt)
                    d[tt] = *reinterpret_cast<const float4*>(D2_s + (4 * t4 + tt) * DLD + 4 * cg);
#pragma unroll
                for (int i = 0; i < RPT; ++i) {
                    const float4 kr =
                        *reinterpret_cast<const float4*>(kq + (t_own + 32 * i) * kLdKQ + 4 * t4);
                    fma4(S[i], kr.x, d[0]);
                    fma4(S[i], kr.y, d[1]);
                    fma4(S[i], kr.z, d[2]);
                    fma4(S[i], kr.w, d[3]);
                }
            }
#pragma unroll
            for (int i = 0; i < RPT; ++i)
                *reinterpret_cast<float4*>(S_s + (t_own + 32 * i) * SLD + 4 * cg) =
                    make_float4(S[i][0], S[i][1], S[i][2], S[i][3]);
        }

        // GDN_FLAG_BLOCK_STATES (with GDN_FLAG_TOKEN_STATES): after a chunk
        // that ends a block of the sequence (C divides GDN_STATE_BLOCK) or
        // the sequence, the state to the slot its last token names (-1:
        // none; the other entries are not read).
        if (token_states) {
            const int64_t end = cur.cs + L;
            if ((end - seq_begin(p, cur.n)) % GDN_STATE_BLOCK == 0 || end == seq_end(p, cur.n)) {
                const int32_t ts = p.token_state_indices[end - 1];
                if (ts >= 0) {
                    __syncthreads();
                    store_to(slot_base(ts));
                }
            }
        }
        if (nxt.n != cur.n) {  // the sequence's last chunk in this window
            __syncthreads();
            if (!token_states) store_to(slot_base(seq_slot(p, cur.n)));
            else if (cur.cs + L < seq_end(p, cur.n)) store_to(w.carry_out);  // on in the next window
            if (nxt.n >= 0) {
                __syncthreads();
                load_state(nxt);
            }
        }
        if (nxt.n < 0) break;
        cp_async_wait_all();
        __syncthreads();
        cur = nxt;
    }
}

template <int K, int NCOL, int IN_BYTES, ScanMode MODE>
cudaError_t launch(const Params& p, const ChunkScratch& w, const Window& win, int lanes,
                   bool zero_empty, cudaStream_t stream, bool overlap) {
    const dim3 grid(unsigned(int64_t(p.G) * p.V / NCOL), unsigned(p.Hk), unsigned(lanes));
    const size_t smem = policy::cuda_scan_smem_bytes(K, NCOL, MODE != ScanMode::kFp32);
    if (win.slice)
        return launch_kernel(chunk_scan_kernel<K, NCOL, IN_BYTES, MODE, true>, grid, dim3(8 * NCOL),
                             smem, stream, overlap, p, w, win.begin, win.end, win.slice,
                             zero_empty ? 1 : 0);
    return launch_kernel(chunk_scan_kernel<K, NCOL, IN_BYTES, MODE, false>, grid, dim3(8 * NCOL), smem,
                         stream, overlap, p, w, win.begin, win.end, win.slice, zero_empty ? 1 : 0);
}

// Every (K, NCOL) of one input element size and mode.
template <int IN_BYTES, ScanMode MODE>
cudaError_t launch_in(const Params& p, const ChunkScratch& w, const Window& win, int ncol,
                      int lanes, bool zero_empty, cudaStream_t stream, bool overlap) {
    if (lanes < 1 || lanes > 65535) return cudaErrorInvalidValue;
    return for_shape(p.K, ncol, [&](auto shape) {
        using S = decltype(shape);
        return launch<S::K, S::NCOL, IN_BYTES, MODE>(p, w, win, lanes, zero_empty, stream, overlap);
    });
}

template <int IN_BYTES, ScanMode MODE>
cudaError_t set_attributes_in(size_t smem_limit) {
    return for_each_shape([&](auto shape) {
        using S = decltype(shape);
        const size_t bytes = policy::cuda_scan_smem_bytes(S::K, S::NCOL, MODE != ScanMode::kFp32);
        if (const cudaError_t e = raise_smem_limit(
                reinterpret_cast<const void*>(&chunk_scan_kernel<S::K, S::NCOL, IN_BYTES, MODE, false>),
                bytes, smem_limit))
            return e;
        return raise_smem_limit(
            reinterpret_cast<const void*>(&chunk_scan_kernel<S::K, S::NCOL, IN_BYTES, MODE, true>), bytes,
            smem_limit);
    });
}

// Explicitly instantiated, one mode per file: chunk_scan_in2.cu and
// chunk_scan_in4.cu (FP32), chunk_scan_bf16.cu, chunk_scan_fp16.cu and
// chunk_scan_tf32x3.cu (both input sizes each).
#define GDN_SCAN_INSTANCES(EXTERN, IN_BYTES, MODE)                                                \
    EXTERN template cudaError_t launch_in<IN_BYTES, MODE>(const Params&, const ChunkScratch&,     \
                                                          const Window&, int, int, bool,          \
                                                          cudaStream_t, bool);                     \
    EXTERN template cudaError_t set_attributes_in<IN_BYTES, MODE>(size_t);
GDN_SCAN_INSTANCES(extern, 2, ScanMode::kFp32)
GDN_SCAN_INSTANCES(extern, 4, ScanMode::kFp32)
GDN_SCAN_INSTANCES(extern, 2, ScanMode::kTf32x3)
GDN_SCAN_INSTANCES(extern, 4, ScanMode::kTf32x3)

}  // namespace scan
}  // namespace gdn::cuda
