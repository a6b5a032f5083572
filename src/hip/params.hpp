// The one argument every HIP kernel takes (by value): the normalised problem,
// the tensors with explicit element strides, the workspace and the
// super-block being processed. Plain data, built on the host by launch.hpp.
#pragma once

#include <cstdint>

#include "gdn/gdn.h"

namespace gdn::hip {

// The chunked path's fixed shape (DESIGN.md §3): 16-token chunks, K = V = 128,
// a scan block of 8 waves, one per 16 value columns.
constexpr int kChunk = 16;
constexpr int kChunkHeadDim = 128;
constexpr int kScanThreads = 256;
constexpr int kSequentialThreads = 256;
constexpr int kPrepMaxThreads = 128;

// The kernels of the code object, in one order everywhere (names: kKernelNames).
enum class Kernel : int {
    sequential_k64_v64,
    sequential_k64_v128,
    sequential_k128_v64,
    sequential_k128_v128,
    chunk_prep,
    chunk_scan,      // f16 / bf16 inputs
    chunk_scan_f32,  // f32 inputs
    count
};
constexpr const char* kKernelNames[] = {
    "gdn_hip_sequential_k64_v64", "gdn_hip_sequential_k64_v128", "gdn_hip_sequential_k128_v64",
    "gdn_hip_sequential_k128_v128", "gdn_hip_chunk_prep", "gdn_hip_chunk_scan",
    "gdn_hip_chunk_scan_f32",
};
static_assert(sizeof kKernelNames / sizeof kKernelNames[0] == int(Kernel::count), "names");
// Not launched by the library: one 16x16x16 WMMA, for the layout tests.
constexpr const char* kWmmaTileKernelName = "gdn_hip_wmma_tile";

struct KernelParams {
    // shape
    int64_t num_tokens;
    int32_t num_seqs;
    int32_t num_k_heads;
    int32_t num_v_heads;
    int32_t group;         // Hv / Hk
    int32_t head_dim_k;
    int32_t head_dim_v;
    int32_t head_mapping;  // gdn_head_mapping_t
    int32_t input_dtype;   // gdn_dtype_t of q, k, v, z
    int32_t gate_dtype;    // of g, beta
    int32_t output_dtype;  // of out
    int32_t state_layout;  // gdn_state_layout_t
    uint32_t flags;        // GDN_FLAG_*
    float scale;
    float l2norm_eps;
    float norm_eps;

    // tensors (element strides)
    const void* q;    int64_t q_token_stride, q_head_stride;
    const void* k;    int64_t k_token_stride, k_head_stride;
    const void* v;    int64_t v_token_stride, v_head_stride;
    const void* g;    int64_t g_token_stride, g_head_stride;
    const void* beta; int64_t beta_token_stride, beta_head_stride;
    void* out;        int64_t out_token_stride, out_head_stride;
    const void* z;    int64_t z_token_stride, z_head_stride;
    float* state;     int64_t state_slot_stride;
    const int32_t* cu_seqlens;
    const int32_t* state_indices;
    const uint8_t* start_from_zero;
    const float* A_log;
    const float* dt_bias;
    const float* norm_weight;
    const int32_t* token_state_indices;  // GDN_FLAG_TOKEN_STATES: per token, the slot of its state

    // chunked path: the prep's output for one super-block, per (sequence,
    // chunk of the super-block) slot and value head
    uint16_t* ws_T;        // [slot][Hv][16][16] FP16: T·diag(β), row-major
    uint16_t* ws_P;        // [slot][Hv][16][16] FP16: e^{γ_t−γ_i} q̂_t·k̂_i (i <= t), row-major
    float* ws_gamma;       // [slot][Hv][2][16]: γ (the running sum of g inside the chunk), e^{γ_15−γ}
    float* ws_carry;       // GDN_FLAG_TOKEN_STATES (with GDN_FLAG_BLOCK_STATES) and more than one
                           // super-block: [i][Hv][K·V], the state the i-th sequence longer than a
                           // super-block starts its next one from (its own slot is only read), in
                           // the pool's layout (launch.hpp: carried_states); else null
    int32_t sb_first_chunk;  // first chunk (of every sequence) in this super-block
    int32_t sb_chunks;       // chunks per sequence in this super-block (slots per sequence)
    int32_t prep_threads;    // the prep block's size (64 or 128)
    int32_t carry_count;     // states ws_carry holds (0: none)
};

}  // namespace gdn::hip
