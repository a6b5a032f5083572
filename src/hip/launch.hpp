// The HIP backend's host logic that needs no HIP runtime: which kernel runs,
// its grid, the super-blocks of the chunked path, the workspace layout and
// the kernel argument. backend.cpp launches through the HIP runtime; the
// emulation tests (tests/hip) launch the same sequence of kernels on an
// NVIDIA GPU or on host fibers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/dispatch.hpp"
#include "common/error.hpp"
#include "common/internal.hpp"
#include "params.hpp"

namespace gdn::hip {

static_assert(kChunk == policy::kHipChunk, "dispatch policy and kernels disagree on C");
static_assert(kChunkHeadDim == policy::kHipChunkHeadDim, "dispatch policy and kernels disagree on K, V");

// One launch: a 1-D grid of `grid` blocks of `block` threads.
struct Launch {
    Kernel kernel;
    uint32_t grid;
    uint32_t block;
};

// The sequential kernel for (K, V), or false.
inline bool sequential_kernel(int32_t K, int32_t V, Kernel* out) {
    if (K == 64 && V == 64) *out = Kernel::sequential_k64_v64;
    else if (K == 64 && V == 128) *out = Kernel::sequential_k64_v128;
    else if (K == 128 && V == 64) *out = Kernel::sequential_k128_v64;
    else if (K == 128 && V == 128) *out = Kernel::sequential_k128_v128;
    else return false;
    return true;
}

inline gdn_status_t check_sequential_dims(const Shape& s) {
    Kernel k;
    if (!sequential_kernel(s.head_dim_k, s.head_dim_v, &k))
        return fail(GDN_ERROR_NOT_SUPPORTED,
                    "the HIP backend takes K and V in {{64, 128}}, not K = {}, V = {}",
                    s.head_dim_k, s.head_dim_v);
    return GDN_SUCCESS;
}

// The chunked path's super-blocks: chunks_per_seq chunks of every sequence
// per prep + scan pair of launches.
struct ChunkGeometry {
    int32_t chunks_per_seq;  // slots of each sequence in the workspace
    int32_t super_blocks;    // prep + scan launches needed for max_seqlen
    int64_t slots;           // num_seqs * chunks_per_seq
};

inline ChunkGeometry chunk_geometry(const Shape& s) {
    const int64_t chunks = (s.max_seqlen + kChunk - 1) / kChunk;
    int64_t per_seq = policy::kHipSuperBlockChunkBudget / s.num_seqs;
    if (per_seq < policy::kHipMinSuperBlockChunks) per_seq = policy::kHipMinSuperBlockChunks;
    if (per_seq > policy::kHipSuperBlockChunks) per_seq = policy::kHipSuperBlockChunks;
    if (per_seq > chunks) per_seq = chunks;
    if (per_seq < 1) per_seq = 1;
    ChunkGeometry g;
    g.chunks_per_seq = int32_t(per_seq);
    g.super_blocks = int32_t((chunks + per_seq - 1) / per_seq);
    g.slots = int64_t(s.num_seqs) * per_seq;
    return g;
}

// The prep's output for one super-block (launch.hpp is the only layout).
struct ChunkWorkspace {
    uint16_t* T;     // [slots][Hv][16][16] FP16
    uint16_t* P;     // [slots][Hv][16][16] FP16
    float* gamma;    // [slots][Hv][2][16]
    float* carry;    // [carried_states][Hv][K·V]: see KernelParams::ws_carry (null when not needed)
};

// The states the scans carry between super-blocks through the workspace:
// with GDN_FLAG_TOKEN_STATES (which the chunked path runs only with
// GDN_FLAG_BLOCK_STATES) a sequence's own slot is read, never written, so
// each sequence longer than a super-block has one there (numbered in
// sequence order, as the scan counts them). There are at most num_tokens /
// (its tokens + 1) of them: a batch of short sequences needs few.
inline int64_t carried_states(const Shape& s) {
    const ChunkGeometry g = chunk_geometry(s);
    if (!s.token_states() || g.super_blocks <= 1) return 0;
    const int64_t sb_tokens = int64_t(g.chunks_per_seq) * kChunk;
    return std::min<int64_t>(s.num_seqs, s.num_tokens / (sb_tokens + 1));
}

inline ChunkWorkspace carve_chunked(const Shape& s, WorkspaceCarver& carver) {
    const int64_t n = chunk_geometry(s).slots * s.num_v_heads;
    ChunkWorkspace w;
    w.T = carver.take<uint16_t>(size_t(n) * kChunk * kChunk);
    w.P = carver.take<uint16_t>(size_t(n) * kChunk * kChunk);
    w.gamma = carver.take<float>(size_t(n) * 2 * kChunk);
    const int64_t carried = carried_states(s);
    w.carry = carried ? carver.take<float>(size_t(carried) * size_t(s.num_v_heads) * kChunkHeadDim *
                                           kChunkHeadDim)
                      : nullptr;
    return w;
}

// Workspace bytes of `path` (the sequential kernel needs none).
inline size_t workspace_bytes(const Shape& s, const PathChoice& path) {
    if (path.path != GDN_PATH_CHUNKED_LOWP_C16) return 0;
    WorkspaceCarver carver(nullptr);
    carve_chunked(s, carver);
    return carver.bytes();
}

inline KernelParams make_params(const Shape& s, const Tensors& t) {
    KernelParams p{};
    p.num_tokens = s.num_tokens;
    p.num_seqs = s.num_seqs;
    p.num_k_heads = s.num_k_heads;
    p.num_v_heads = s.num_v_heads;
    p.group = s.group;
    p.head_dim_k = s.head_dim_k;
    p.head_dim_v = s.head_dim_v;
    p.head_mapping = s.head_mapping;
    p.input_dtype = s.input_dtype;
    p.gate_dtype = s.gate_dtype;
    p.output_dtype = s.output_dtype;
    p.state_layout = s.state_layout;
    p.flags = s.flags;
    p.scale = s.scale;
    p.l2norm_eps = s.l2norm_eps;
    p.norm_eps = s.norm_eps;
    p.q = t.q; p.q_token_stride = t.q_stride.token; p.q_head_stride = t.q_stride.head;
    p.k = t.k; p.k_token_stride = t.k_stride.token; p.k_head_stride = t.k_stride.head;
    p.v = t.v; p.v_token_stride = t.v_stride.token; p.v_head_stride = t.v_stride.head;
    p.g = t.g; p.g_token_stride = t.g_stride.token; p.g_head_stride = t.g_stride.head;
    p.beta = t.beta; p.beta_token_stride = t.beta_stride.token; p.beta_head_stride = t.beta_stride.head;
    p.out = t.out; p.out_token_stride = t.out_stride.token; p.out_head_stride = t.out_stride.head;
    p.z = t.z; p.z_token_stride = t.z_stride.token; p.z_head_stride = t.z_stride.head;
    p.state = t.state;
    p.state_slot_stride = t.state_slot_stride;
    p.cu_seqlens = t.cu_seqlens;
    p.state_indices = t.state_indices;
    p.start_from_zero = t.start_from_zero;
    p.A_log = t.A_log;
    p.dt_bias = t.dt_bias;
    p.norm_weight = t.norm_weight;
    p.token_state_indices = t.token_state_indices;
    return p;
}

// Enqueues one call's kernels in order through `launch(const Launch&, const
// KernelParams&) -> gdn_status_t`. The shape, tensors and path are validated
// (dispatch.cpp chose `path` for these tensors); `workspace` holds at least
// workspace_bytes(shape, path).
template <class LaunchFn>
gdn_status_t enqueue(const Shape& s, const Tensors& t, const PathChoice& path, void* workspace,
                     LaunchFn&& launch) {
    KernelParams p = make_params(s, t);
    const int64_t head_blocks = int64_t(s.num_seqs) * s.num_v_heads;
    if (head_blocks > INT32_MAX)
        return fail(GDN_ERROR_NOT_SUPPORTED, "num_seqs x num_v_heads ({}) is above 2^31 - 1 blocks",
                    head_blocks);
    if (path.path == GDN_PATH_SEQUENTIAL) {
        Kernel k;
        if (!sequential_kernel(s.head_dim_k, s.head_dim_v, &k)) return check_sequential_dims(s);
        return launch(Launch{k, uint32_t(head_blocks), uint32_t(kSequentialThreads)}, p);
    }
    if (path.path != GDN_PATH_CHUNKED_LOWP_C16 || s.head_dim_k != kChunkHeadDim ||
        s.head_dim_v != kChunkHeadDim)
        return fail(GDN_ERROR_INTERNAL, "the HIP backend has no path {} for K = {}, V = {}",
                    int(path.path), s.head_dim_k, s.head_dim_v);

    const ChunkGeometry geo = chunk_geometry(s);
    WorkspaceCarver carver(workspace);
    const ChunkWorkspace ws = carve_chunked(s, carver);
    p.ws_T = ws.T;
    p.ws_P = ws.P;
    p.ws_gamma = ws.gamma;
    p.ws_carry = ws.carry;
    p.carry_count = int32_t(carried_states(s));
    p.sb_chunks = geo.chunks_per_seq;
    // A prep block has a wave per value head of the group, 2 or 4 waves (wave
    // 0 forms k·k, wave 1 q·k); the staging loop needs 128 % threads == 0.
    p.prep_threads = s.group >= 3 ? kPrepMaxThreads : kPrepMaxThreads / 2;
    const int64_t prep_blocks = geo.slots * s.num_k_heads;
    if (prep_blocks > INT32_MAX)
        return fail(GDN_ERROR_NOT_SUPPORTED, "the chunked prep grid ({} blocks) is above 2^31 - 1",
                    prep_blocks);
    const Kernel scan = s.input_dtype == GDN_DTYPE_F32 ? Kernel::chunk_scan_f32 : Kernel::chunk_scan;
    for (int32_t sb = 0; sb < geo.super_blocks; ++sb) {
        p.sb_first_chunk = sb * geo.chunks_per_seq;
        if (gdn_status_t st = launch(Launch{Kernel::chunk_prep, uint32_t(prep_blocks),
                                            uint32_t(p.prep_threads)},
                                     p))
            return st;
        if (gdn_status_t st = launch(Launch{scan, uint32_t(head_blocks), uint32_t(kScanThreads)}, p))
            return st;
    }
    return GDN_SUCCESS;
}

}  // namespace gdn::hip
