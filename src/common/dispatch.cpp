// The dispatch policy: which path runs for a problem on a device, and why.
// Rules (numbers from measurements, see docs/perf-notes.md):
//   - `sequential` forced: the sequential path, always (every backend has it).
//   - `chunked` forced: the chunked path of the backend, or NOT_SUPPORTED with
//     the reason it cannot run here — never a silent fallback.
//   - `auto`: the chunked path where it is eligible and faster, else sequential.
//   - GDN_FLAG_TOKEN_STATES: the sequential path (auto or forced; every
//     backend's sequential kernel writes per-token states); forced chunked
//     is NOT_SUPPORTED.
//   - GDN_FLAG_BLOCK_STATES (with it): the states at block ends, which a
//     chunked path has at its chunk ends. The choice is made as without
//     token states where the backend's chunked paths keep them (caps with
//     GDN_FEATURE_BLOCK_STATES: the CPU's, HIP's gfx11 path, CUDA's chunked
//     paths on sm_80+); elsewhere as with GDN_FLAG_TOKEN_STATES alone.
// The precision is what the caller allows: a more accurate path is always
// allowed, so FP32 paths serve every precision request.
#include "dispatch.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "error.hpp"
#include "validate.hpp"

namespace gdn {

namespace {

void set_reason(PathChoice* c, const std::string& why) {
    std::snprintf(c->reason, sizeof c->reason, "%s", why.c_str());
}

bool lowp(gdn_precision_t p) { return p == GDN_PRECISION_FP16 || p == GDN_PRECISION_BF16; }
// The near-FP32 modes of the register-state scan: 16-bit operands split into a
// value and remainders.
bool split_precision(gdn_precision_t p) { return p == GDN_PRECISION_BF16X3 || p == GDN_PRECISION_FP16X3; }

// The chunked path this backend would take, if eligible: sets path/chunk/
// precision and returns "" when eligible, or the reason it is not. The CPU's
// C = 16 path is an emulation of the HIP path's FP16/BF16-operand numerics
// (for their bounds in CI): slower than its FP32 path (docs/cpu.md: 80.7
// against 65.4 ms at T = 2048, H_v 48) and less accurate, so it runs only
// where the caller forces the chunked path; auto serves FP16 and BF16 with
// FP32, as it serves TF32X3, BF16X3 and FP16X3.
std::string cpu_chunked(const Shape& s, PathChoice* c) {
    if (lowp(s.precision) && s.algorithm == GDN_ALGO_CHUNKED) {
        c->path = GDN_PATH_CHUNKED_LOWP_C16;
        c->chunk_size = policy::kCpuLowpChunk;
        c->precision = s.precision;
    } else {
        c->path = GDN_PATH_CHUNKED_FP32;
        c->chunk_size = policy::kCpuChunk;
        c->precision = GDN_PRECISION_FP32;
    }
    return "";
}

std::string cuda_chunked_as(const gdn_caps_t& caps, const Shape& s, gdn_precision_t precision,
                            PathChoice* c) {
    // FP32 (the default) keeps every product in FP32; any other precision the
    // caller allows takes the tensor-core scan with those operands (TF32X3:
    // split operands, within ~1e-6 of FP32; BF16X3 / FP16X3: split BF16 / FP16
    // operands).
    const bool tc = precision != GDN_PRECISION_FP32;
    c->path = tc ? GDN_PATH_CHUNKED_TC : GDN_PATH_CHUNKED_FP32;
    c->chunk_size = policy::kCudaChunk;
    c->precision = precision;
    if (caps.compute_major < 8)
        return fmt::format("the CUDA chunked path needs sm_80+ (cp.async); this is {}", caps.arch);
    if ((s.head_dim_k != 64 && s.head_dim_k != 128) || (s.head_dim_v != 64 && s.head_dim_v != 128))
        return fmt::format("the CUDA chunked path takes K and V in {{64, 128}}, not K = {}, V = {}",
                           s.head_dim_k, s.head_dim_v);
    // BF16/FP16/BF16X3/FP16X3 take the register-state scan, TF32X3 and FP32
    // the shared-memory one.
    const bool split = split_precision(precision);
    const bool reg_state = split || precision == GDN_PRECISION_BF16 || precision == GDN_PRECISION_FP16;
    const int32_t ncol = policy::cuda_scan_columns(s.num_k_heads, s.group, s.head_dim_v,
                                                   caps.multiprocessor_count, reg_state);
    if (ncol == 0)
        return fmt::format("its scan grid ({} key heads x {} value columns / 64 = {} blocks at the "
                           "least) does not fit one wave on {} SMs",
                           s.num_k_heads, int64_t(s.group) * s.head_dim_v,
                           int64_t(s.num_k_heads) * s.group * s.head_dim_v / 64,
                           caps.multiprocessor_count);
    // The register-state scan runs with three stages of loaded rows, or four
    // where they fit (policy::cuda_scan_mma_stages): three decide.
    const int32_t stages = policy::kCudaScanMmaMinStages;
    const policy::ScanMmaRows rows = policy::cuda_scan_mma_rows(precision, int32_t(dtype_size(s.input_dtype)));
    const size_t scan_smem = reg_state ? policy::cuda_scan_mma_smem_bytes(s.head_dim_k, ncol, stages, rows)
                                       : policy::cuda_scan_smem_bytes(s.head_dim_k, ncol, tc);
    const size_t smem = std::max(scan_smem, policy::cuda_prep_smem_bytes(s.head_dim_k));
    if (smem > caps.shared_mem_per_block_optin)
        return fmt::format("the CUDA chunked path needs {} bytes of shared memory per block; {} "
                           "allows {}",
                           smem, caps.arch, caps.shared_mem_per_block_optin);
    return "";
}

std::string cuda_chunked(const gdn_caps_t& caps, const Shape& s, const Tensors* t, PathChoice* c) {
    // The C = 32 kernels load element by element: any stride and alignment
    // works; the fused C = 64 one (BF16) reads q/k/v rows by TMA.
    std::string why = cuda_chunked_as(caps, s, s.precision, c);
    if (why.empty() && s.precision == GDN_PRECISION_BF16 && cuda_fused64_problem(caps, s, t).empty()) {
        c->chunk_size = policy::kCudaFusedChunk;
        c->cluster = int64_t(s.num_seqs) * s.num_v_heads <= int64_t(cuda_fused_cluster4_fit(caps.device)) ? 4 : 2;
    }
    // The split scans (BF16X3, FP16X3) need more shared memory than TF32X3's
    // (K = 128: H100/H200 only); where they do not fit, the more accurate
    // TF32X3 scan serves them.
    if (!why.empty() && split_precision(s.precision)) {
        PathChoice tf32x3 = *c;
        if (cuda_chunked_as(caps, s, GDN_PRECISION_TF32X3, &tf32x3).empty()) {
            *c = tf32x3;
            return "";
        }
    }
    return why;
}

}  // namespace

std::string cuda_fused64_problem(const gdn_caps_t& caps, const Shape& s, const Tensors* t) {
    if (s.precision != GDN_PRECISION_BF16)
        return "the fused CUDA path is the BF16 precision's";
    if (caps.compute_major != 9 || !(caps.features & GDN_FEATURE_WGMMA))
        return fmt::format("the fused CUDA path needs sm_90 and a library built with sm_90a code; "
                           "this is {}{}",
                           caps.arch, caps.compute_major == 9 ? " without it" : "");
    if (caps.shared_mem_per_block_optin < policy::kCudaFusedSmemBytes)
        return fmt::format("the fused CUDA path needs {} bytes of shared memory per block; {} allows {}",
                           policy::kCudaFusedSmemBytes, caps.arch, caps.shared_mem_per_block_optin);
    if (s.head_dim_k != policy::kCudaFusedHeadDim || s.head_dim_v != policy::kCudaFusedHeadDim)
        return fmt::format("the fused CUDA path takes K = V = 128, not K = {}, V = {}", s.head_dim_k,
                           s.head_dim_v);
    if (s.input_dtype != GDN_DTYPE_BF16)
        return "the fused CUDA path takes bf16 q/k/v";
    if (s.num_seqs > policy::kCudaFusedMaxSeqs)
        return fmt::format("the fused CUDA path takes up to {} sequences, not {}",
                           policy::kCudaFusedMaxSeqs, s.num_seqs);
    if (s.num_tokens > INT32_MAX)
        return fmt::format("the fused CUDA path takes up to 2^31 - 1 tokens, not {}", s.num_tokens);
    if (t) {
        const struct {
            const char* name;
            const void* ptr;
            Strides st;
        } rows[] = {{"q", t->q, t->q_stride}, {"k", t->k, t->k_stride}, {"v", t->v, t->v_stride}};
        for (const auto& r : rows) {
            const int64_t tok = r.st.token * 2, head = r.st.head * 2;  // bf16 bytes
            if (reinterpret_cast<uintptr_t>(r.ptr) % policy::kCudaFusedRowAlign != 0 ||
                tok % policy::kCudaFusedRowAlign != 0 || head % policy::kCudaFusedRowAlign != 0)
                return fmt::format("the fused CUDA path reads q/k/v rows by TMA: tensors.{} ({}, token "
                                   "stride {}, head stride {}) is not 16-byte aligned in pointer and "
                                   "strides",
                                   r.name, r.ptr, r.st.token, r.st.head);
            if (tok >= policy::kCudaFusedMaxStrideBytes || head >= policy::kCudaFusedMaxStrideBytes)
                return fmt::format("the fused CUDA path takes strides below 2^39 bytes: tensors.{} "
                                   "token stride {}, head stride {}",
                                   r.name, r.st.token, r.st.head);
        }
    }
    return "";
}

namespace {

// A tensor the HIP chunked kernels read as 16-byte row vectors, or "".
std::string hip_row_problem(const char* name, const void* ptr, Strides st, bool vector_rows) {
    if (vector_rows) {
        if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
            return fmt::format("the HIP chunked path needs 16-byte aligned rows: tensors.{} ({}) is "
                               "not 16-byte aligned",
                               name, ptr);
        if (st.token % policy::kHipRowStrideMultiple != 0 || st.head % policy::kHipRowStrideMultiple != 0)
            return fmt::format("the HIP chunked path needs row strides divisible by {}: {}.token_stride "
                               "= {}, {}.head_stride = {}",
                               policy::kHipRowStrideMultiple, name, st.token, name, st.head);
    }
    if (st.token > policy::kHipMaxTokenStride)
        return fmt::format("the HIP chunked path takes token strides up to 2^27: {}.token_stride = {}",
                           name, st.token);
    return "";
}

std::string hip_chunked(const gdn_caps_t& caps, const Shape& s, const Tensors* t, PathChoice* c) {
    c->path = GDN_PATH_CHUNKED_LOWP_C16;
    c->chunk_size = policy::kHipChunk;
    c->precision = GDN_PRECISION_FP16;
    if (!(caps.features & GDN_FEATURE_GFX11_WMMA))
        return fmt::format("the HIP chunked path needs gfx11 WMMA (gfx1100-1103, gfx1150, gfx1151); "
                           "this is {}",
                           caps.arch);
    if (s.precision != GDN_PRECISION_FP16)
        return "the HIP chunked path uses FP16 operands (it changes bits): allow it with "
               "problem.precision = GDN_PRECISION_FP16";
    if (s.head_dim_k != policy::kHipChunkHeadDim || s.head_dim_v != policy::kHipChunkHeadDim)
        return fmt::format("the HIP chunked path takes K = V = 128, not K = {}, V = {}",
                           s.head_dim_k, s.head_dim_v);
    if (t) {
        const struct {
            const char* name;
            const void* ptr;
            Strides st;
            bool vector_rows;
        } rows[] = {{"q", t->q, t->q_stride, true},
                    {"k", t->k, t->k_stride, true},
                    {"v", t->v, t->v_stride, true},
                    {"z", t->z, t->z_stride, true},
                    {"out", t->out, t->out_stride, false}};
        for (const auto& r : rows) {
            if (r.ptr == nullptr) continue;  // z without the output norm
            std::string why = hip_row_problem(r.name, r.ptr, r.st, r.vector_rows);
            if (!why.empty()) return why;
        }
    }
    return "";
}

// Auto's length rule: the chunked launches pay off from this many tokens in
// the longest sequence on.
int64_t chunked_min_tokens(const gdn_caps_t& caps, const Shape& s) {
    switch (caps.backend) {
        case GDN_BACKEND_CUDA: return policy::kCudaChunkedMinTokens;
        case GDN_BACKEND_HIP: return policy::kHipChunkedMinTokens;
        default: {
            const int32_t d = std::min(s.head_dim_k, s.head_dim_v);
            return d >= 128  ? policy::kCpuChunkedMinTokensHd128
                   : d >= 64 ? policy::kCpuChunkedMinTokensHd64
                             : policy::kCpuChunkedMinTokensSmallHeads;
        }
    }
}

}  // namespace

gdn_status_t choose_path(const gdn_caps_t& caps, const Shape& s, const Tensors* t,
                         PathChoice* out) {
    PathChoice c;
    // The chunked paths that keep them (the CPU's, HIP's on gfx11, CUDA's on
    // sm_80+: their probes set the bit).
    const bool chunk_states = (caps.features & GDN_FEATURE_BLOCK_STATES) != 0;
    if (s.token_states() && !(s.block_states() && chunk_states)) {
        // The state after every token: the sequential kernel has it, the
        // chunked ones only at chunk ends, and keep it there only on the
        // backends above.
        if (s.algorithm == GDN_ALGO_CHUNKED)
            return fail(GDN_ERROR_NOT_SUPPORTED,
                        s.block_states()
                            ? "problem.algorithm = chunked, but this backend's chunked paths do not "
                              "keep GDN_FLAG_BLOCK_STATES' states (caps.features lacks "
                              "GDN_FEATURE_BLOCK_STATES): its sequential path runs the flag"
                            : "problem.algorithm = chunked, but GDN_FLAG_TOKEN_STATES writes the state "
                              "after every token, which only the sequential path does (with "
                              "GDN_FLAG_BLOCK_STATES, the states at block ends only, the chunked "
                              "paths of backends with GDN_FEATURE_BLOCK_STATES run it)");
        c.path = GDN_PATH_SEQUENTIAL;
        set_reason(&c, s.algorithm == GDN_ALGO_SEQUENTIAL ? "sequential: forced by problem.algorithm"
                       : s.block_states()
                           ? "auto: sequential, this backend's chunked paths do not keep "
                             "GDN_FLAG_BLOCK_STATES' states"
                           : "auto: sequential, GDN_FLAG_TOKEN_STATES writes the state after every token");
        *out = c;
        return GDN_SUCCESS;
    }
    if (s.algorithm == GDN_ALGO_SEQUENTIAL) {
        c.path = GDN_PATH_SEQUENTIAL;
        set_reason(&c, "sequential: forced by problem.algorithm");
        *out = c;
        return GDN_SUCCESS;
    }
    std::string not_eligible;
    switch (caps.backend) {
        case GDN_BACKEND_CPU: not_eligible = cpu_chunked(s, &c); break;
        case GDN_BACKEND_CUDA: not_eligible = cuda_chunked(caps, s, t, &c); break;
        case GDN_BACKEND_HIP: not_eligible = hip_chunked(caps, s, t, &c); break;
        default: break;  // a value gdn.h does not name (rejected by validation)
    }
    // A precision served by a more accurate one says so (CUDA: BF16X3 and FP16X3 by
    // TF32X3, whose scan needs less shared memory; the CPU: FP16 and BF16 by
    // FP32 under auto, faster than the C = 16 emulation). The clauses are
    // short so that the whole reason fits gdn_path_info_t.reason (at most
    // 191 characters; tests/test_validation.cpp checks every case).
    std::string served;
    if (not_eligible.empty() && c.path == GDN_PATH_CHUNKED_TC && c.precision != s.precision)
        served = fmt::format("; TF32X3 serves {} (whose scan does not fit)",
                             s.precision == GDN_PRECISION_FP16X3 ? "FP16X3" : "BF16X3");
    else if (caps.backend == GDN_BACKEND_CPU && lowp(s.precision) && c.path == GDN_PATH_CHUNKED_FP32)
        served = "; FP32 serves FP16/BF16 (faster on the CPU)";
    if (not_eligible.empty() && s.block_states() && GDN_STATE_BLOCK % c.chunk_size != 0)
        not_eligible = fmt::format("its chunk length ({}) does not divide GDN_FLAG_BLOCK_STATES' "
                                   "block ({})",
                                   c.chunk_size, GDN_STATE_BLOCK);
    if (not_eligible.empty() && s.block_states())
        served += "; GDN_FLAG_BLOCK_STATES from the chunk ends";
    if (not_eligible.empty() && c.cluster == 4) served += "; clusters of four CTAs";
    if (s.algorithm == GDN_ALGO_CHUNKED) {
        if (!not_eligible.empty())
            return fail(GDN_ERROR_NOT_SUPPORTED, "problem.algorithm = chunked, but {}",
                        not_eligible);
        set_reason(&c, fmt::format("chunked (C = {}): forced by problem.algorithm{}", c.chunk_size,
                                   served));
        *out = c;
        return GDN_SUCCESS;
    }
    // auto
    const int64_t min_tokens = chunked_min_tokens(caps, s);
    PathChoice seq;
    seq.path = GDN_PATH_SEQUENTIAL;
    if (!not_eligible.empty()) {
        set_reason(&seq, "auto: sequential, because " + not_eligible);
        *out = seq;
    } else if (s.max_seqlen < min_tokens) {
        set_reason(&seq, fmt::format("auto: sequential, the longest sequence ({} tokens) is below "
                                     "the chunked threshold ({} tokens)",
                                     s.max_seqlen, min_tokens));
        *out = seq;
    } else {
        // The CPU's tasks are sequences: each shorter one takes the kernel
        // auto would give it alone (a one-token row of a mixed batch costs a
        // whole chunk on the chunked path: docs/cpu.md).
        const bool per_sequence = caps.backend == GDN_BACKEND_CPU && s.num_seqs > 1;
        if (per_sequence) c.sequential_below = min_tokens;
        set_reason(&c, fmt::format("auto: chunked (C = {}), the longest sequence ({} tokens) >= {}{}{}",
                                   c.chunk_size, s.max_seqlen, min_tokens,
                                   per_sequence ? "; shorter ones sequential" : "", served));
        *out = c;
    }
    return GDN_SUCCESS;
}

}  // namespace gdn
