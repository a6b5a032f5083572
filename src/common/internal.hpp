// Backend-neutral internal types: the problem after validation and
// normalisation (every default filled in, every stride explicit), the path
// choice, and the workspace carver. No vendor header may be included here:
// src/cuda and src/hip include this file from their device code too.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gdn/gdn.h"

namespace gdn {

// The problem, validated and normalised (src/common/validate.cpp).
struct Shape {
    int32_t num_seqs;
    int64_t num_tokens;
    int64_t max_seqlen;        // >= 1, never 0
    int32_t num_k_heads;       // Hk
    int32_t num_v_heads;       // Hv
    int32_t group;             // Hv / Hk
    int32_t head_dim_k;        // K
    int32_t head_dim_v;        // V
    gdn_head_mapping_t head_mapping;
    gdn_dtype_t input_dtype;
    gdn_dtype_t gate_dtype;
    gdn_dtype_t output_dtype;
    gdn_state_layout_t state_layout;
    int32_t num_state_slots;   // >= 1
    gdn_algorithm_t algorithm;
    gdn_precision_t precision;
    uint32_t flags;
    float scale;               // resolved (never 0)
    float l2norm_eps;          // resolved
    float norm_eps;            // resolved

    bool qk_l2norm() const { return (flags & GDN_FLAG_QK_L2NORM) != 0; }
    bool gate_from_raw() const { return (flags & GDN_FLAG_GATE_FROM_RAW) != 0; }
    bool beta_from_logits() const { return (flags & GDN_FLAG_BETA_FROM_LOGITS) != 0; }
    bool output_norm() const { return (flags & GDN_FLAG_OUTPUT_NORM) != 0; }
    bool validate() const { return (flags & GDN_FLAG_VALIDATE) != 0; }
    bool token_states() const { return (flags & GDN_FLAG_TOKEN_STATES) != 0; }
    bool block_states() const { return (flags & GDN_FLAG_BLOCK_STATES) != 0; }
};

// GDN_FLAG_BLOCK_STATES: whether token_state_indices is read at token `pos` (counted from the
// sequence's first token) of a sequence of `len` tokens: a block's last token or the sequence's.
inline bool block_state_read(int64_t pos, int64_t len) {
    return (pos + 1) % GDN_STATE_BLOCK == 0 || pos == len - 1;
}

// The key head that serves value head h.
inline int32_t key_head_of(const Shape& s, int32_t h) {
    return s.head_mapping == GDN_HEADS_GROUPED ? h / s.group : h % s.num_k_heads;
}

// Element strides of one [token][head][dim] tensor (dim contiguous).
struct Strides {
    int64_t token;
    int64_t head;
};

// The tensors, with every stride explicit (0 = packed resolved).
struct Tensors {
    const void* q;    Strides q_stride;
    const void* k;    Strides k_stride;
    const void* v;    Strides v_stride;
    const void* g;    Strides g_stride;
    const void* beta; Strides beta_stride;
    void* out;        Strides out_stride;
    const void* z;    Strides z_stride;     // null unless output_norm
    float* state;     int64_t state_slot_stride;
    const int32_t* cu_seqlens;              // null: equal lengths num_tokens / num_seqs
    const int32_t* state_indices;           // null: sequence i -> slot i
    const uint8_t* start_from_zero;         // null: every sequence continues
    const float* A_log;
    const float* dt_bias;
    const float* norm_weight;
    const int32_t* token_state_indices;     // null unless token_states: per token, the slot of its state
};

// Element (k, v) of one head's state, in either layout.
inline int64_t state_index(const Shape& s, int32_t k, int32_t v) {
    return s.state_layout == GDN_STATE_KV ? int64_t(k) * s.head_dim_v + v
                                          : int64_t(v) * s.head_dim_k + k;
}

// What gdn_select_path decided (src/common/dispatch.cpp).
struct PathChoice {
    gdn_path_t path = GDN_PATH_NONE;
    int32_t chunk_size = 0;
    gdn_precision_t precision = GDN_PRECISION_FP32;
    // The CPU under auto: a sequence shorter than this takes the sequential
    // kernel inside a chunked call (its bits those of auto on it alone).
    int64_t sequential_below = 0;
    // The CUDA fused BF16 path (chunk_size 64): its CTAs a (sequence, value head), a
    // cluster of 2, or of 4 where every (sequence, head) gets one in a single wave
    // (docs/perf-notes.md v98); 0 on the other paths.
    int32_t cluster = 0;
    char reason[192] = {};
};

// CUB-style carver: the same code sizes the workspace (base == nullptr) and
// carves it (base == the caller's buffer), so the two can never disagree.
class WorkspaceCarver {
public:
    explicit WorkspaceCarver(void* base) : base_(static_cast<char*>(base)) {}
    template <class T>
    T* take(size_t count) {
        offset_ = (offset_ + GDN_WORKSPACE_ALIGNMENT - 1) / GDN_WORKSPACE_ALIGNMENT *
                  GDN_WORKSPACE_ALIGNMENT;
        T* p = base_ ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
        offset_ += count * sizeof(T);
        return p;
    }
    size_t bytes() const { return offset_; }

private:
    char* base_;
    size_t offset_ = 0;
};

}  // namespace gdn
