// The CPU backend's kernels: every path computes one (sequence, value head)
// task at a time, with its state in a worker-private FP32 buffer carved from
// the caller's workspace. cpu_backend.cpp spreads the tasks over threads;
// since a task is computed by one thread, start to end, in a fixed order, the
// bits do not depend on the number of threads.
//
// The optional features, exactly as every path computes them (in FP32 here,
// in double in reference.cpp; the GPU backends copy these formulas):
//   q/k L2 norm (GDN_FLAG_QK_L2NORM), per token and head, over K:
//       k̂ = k / sqrt(Σ k² + l2norm_eps)
//       q̂ = q · (scale / sqrt(Σ q² + l2norm_eps))      (normalised, then scaled)
//     without the flag: k̂ = k, q̂ = q · scale.
//   gate from raw inputs (GDN_FLAG_GATE_FROM_RAW), g holds a:
//       g = −exp(A_log[h]) · softplus(a + dt_bias[h]),
//       softplus(x) = x for x > 20 (as torch), log1p(exp(x)) otherwise.
//   β from logits (GDN_FLAG_BETA_FROM_LOGITS), beta holds b:
//       β = 1 / (1 + exp(−b)).
//   gated RMSNorm epilogue (GDN_FLAG_OUTPUT_NORM), per token and value head,
//   over V:
//       out = o · (1 / sqrt(Σ o² / V + norm_eps)) · w ⊙ silu(z),
//       silu(z) = z · sigmoid(z) = z / (1 + exp(−z)).
//
// The low-precision emulation (GDN_PATH_CHUNKED_LOWP_C16: the numerics of
// the HIP gfx11 WMMA path) is the chunked WY form with C = 16 in which every
// matrix product takes operands rounded to FP16 (BF16 with
// GDN_PRECISION_BF16) and accumulates in FP32. The rounded operands:
//   k̂, q̂          in k·k, q·k, S0ᵀk and qᵀS0
//   S0             in S0ᵀk and qᵀS0
//   T, U           in D = T·U, with U = β ⊙ (v − e^γ ⊙ S0ᵀk) formed in FP32
//   P, D           in P·D, with P[t][i] = e^{γ_t−γ_i} q·k formed in FP32
//   e^{γ_{L−1}−γ_i} k_i (formed in FP32), D   in the state update Σ_i k_i D_iᵀ
// and o_t = e^{γ_t} (q̂_t·S0) + Σ_i P[t][i] D_i. FP32 throughout otherwise:
// γ and every decay, A and the forward substitution for T, the state S.
#pragma once

#include <cstdint>

#include "internal.hpp"

namespace gdn::cpu {

// A task computes up to this many value heads that share one key head
// together: the chunked paths load q and k, and form k·k and q·k, once for
// them. (Bounded, so the workspace is: one state per head per worker.)
constexpr int32_t kMaxTaskHeads = 4;

// Padded sizes of the worker buffers. Padding rows/columns hold zeros, so
// the register-tiled products never need a tail.
struct Dims {
    int32_t K, V;        // head dims
    int32_t Kp, Vp;      // K rounded up to 4 (tile rows), V rounded up to 16 (tile columns)
    int32_t C;           // chunk length; 1 for the sequential path (one token row)
    int32_t task_heads;  // value heads per task: 1 (sequential) or min(Hv / Hk, kMaxTaskHeads)
};

Dims dims_of(const Shape& shape, const PathChoice& path);

// One worker's scratch. Row-major; a row of a [.][Kp] buffer is one token.
struct WorkerScratch {
    float* S[kMaxTaskHeads] = {};  // [Kp][Vp] each: the task's states, [K][V] orientation
    float* q = nullptr;      // [C][Kp]  q̂ rows of the chunk (token)
    float* k = nullptr;      // [C][Kp]  k̂ rows
    float* v = nullptr;      // [C][Vp]  v rows, then U = β(v − e^γ S0ᵀk)
    float* o = nullptr;      // [C][Vp]  outputs
    float* w = nullptr;      // [C][Vp]  S0ᵀk rows (sequential: Sᵀk, then d)
    float* z = nullptr;      // [Vp]     one z row (output norm)
    float* g = nullptr;      // [C]      log decay per token
    float* beta = nullptr;   // [C]
    float* gamma = nullptr;  // [C]      running sum of g inside the chunk
    // Chunked paths only.
    float* kT = nullptr;     // [Kp][C]  k operands, transposed (for k·k and q·k)
    float* kd = nullptr;     // [C][Kp]  e^{γ_last−γ_i} k_i operands (state update)
    float* d = nullptr;      // [C][Vp]  D = T·U
    float* kk = nullptr;     // [C][C]   k_t·k_i (shared by the task's heads)
    float* qk = nullptr;     // [C][C]   q_t·k_i (shared by the task's heads)
    float* A = nullptr;      // [C][C]   β_t e^{γ_t−γ_i} k_t·k_i
    float* T = nullptr;      // [C][C]   (I + A)^{-1}
    float* P = nullptr;      // [C][C]   e^{γ_t−γ_i} q_t·k_i, i <= t
    float* e_gamma = nullptr;// [C]      e^{γ_t}
    // Low-precision emulation only: operands rounded to FP16/BF16.
    float* q_op = nullptr;   // [C][Kp]
    float* k_op = nullptr;   // [C][Kp]
    float* S_op = nullptr;   // [Kp][Vp]
    float* d_op = nullptr;   // [C][Vp]
    float* T_op = nullptr;   // [C][C]
};

// Sizes (carver on nullptr) or carves one worker's scratch for `path`.
WorkerScratch carve_worker_scratch(WorkspaceCarver& carver, const Dims& dims, gdn_path_t path);

// One task: value heads heads[0..num_heads) of one sequence, all served by
// key head `key_head`.
struct HeadTask {
    int32_t key_head;
    int32_t num_heads;                 // 1..dims.task_heads
    int32_t heads[kMaxTaskHeads];      // value heads h
    float* states[kMaxTaskHeads];      // each head's state inside the sequence's slot
    int64_t bos;                       // first token of the sequence
    int64_t len;                       // its tokens (may be 0)
    bool from_zero;                    // start from S = 0 (the slot is written, never read)
    // GDN_FLAG_TOKEN_STATES: token_slots[t] is the slot that receives the
    // state after the sequence's token t (< 0: none); the task's own states
    // are read, never written. Null: the final state is written back into the
    // task's own states. The sequential path reads every entry; with
    // GDN_FLAG_BLOCK_STATES every path reads only those at block ends and the
    // last token (block_state_read), which the chunked paths' chunks end at.
    const int32_t* token_slots = nullptr;
};

// Whether the chunked kernels take this chunk length (a multiple of their
// register tile; the dispatch policy's 32 and 16 are).
bool chunk_size_supported(int32_t chunk_size);

// The instruction-set build of the kernels that runs: the best this CPU
// has (default: on x86-64 AVX-512F where present, else AVX2 + FMA where
// present), the AVX2 + FMA build (where present), or the baseline build.
// For tests, so that each is checked on one machine; not thread-safe
// against running calls.
enum class KernelVariant { best, baseline, avx2 };
void set_kernel_variant(KernelVariant v);
const char* kernel_variant_name();  // of the variant that runs now

// Runs one task on `path` (sequential, chunked FP32 or the low-precision
// emulation): reads each head's state (unless from_zero), walks the tokens
// writing their out rows, writes the final states back. A head's bits do
// not depend on which heads share its task.
void run_head_task(const Shape& shape, const Tensors& tensors, const PathChoice& path,
                   const Dims& dims, const HeadTask& task, const WorkerScratch& scratch);

}  // namespace gdn::cpu
