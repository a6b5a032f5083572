#include "validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "error.hpp"

namespace gdn {

namespace {

constexpr int64_t kMaxTokens = int64_t(1) << 31;  // cu_seqlens is int32
constexpr int32_t kMaxHeadDim = 1024;
constexpr int32_t kMaxMultiprocessors = 1 << 16;

// Copies min(struct_size, sizeof) bytes over a defaulted struct.
template <class T>
gdn_status_t read_versioned(const T* in, const char* name, size_t min_size, T* out) {
    if (in == nullptr) return fail(GDN_ERROR_INVALID_ARGUMENT, "{} is NULL", name);
    const size_t size = in->struct_size;
    if (size < min_size)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "{}->struct_size ({}) < {}, the smallest size any gdn.h had: not initialised "
                    "with its gdn_*_init()?",
                    name, size, min_size);
    if (size > sizeof(T))
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "{}->struct_size ({}) > {}, the size this library knows: the caller was built "
                    "against a newer gdn.h (library version {}.{}.{})",
                    name, size, sizeof(T), GDN_VERSION_MAJOR, GDN_VERSION_MINOR,
                    GDN_VERSION_PATCH);
    // Whole 8-byte units only: every gdn.h's sizes are multiples of 8 (each
    // struct holds a size_t), and a size between them must not hand the
    // backend half a pointer (found by the fuzzer: tensors.struct_size 202
    // tore state_indices into 0xe250, read by the CPU backend).
    const size_t whole = size / alignof(T) * alignof(T);
    std::memset(static_cast<void*>(out), 0, sizeof(T));
    std::memcpy(static_cast<void*>(out), static_cast<const void*>(in), whole);
    out->struct_size = sizeof(T);
    return GDN_SUCCESS;
}

bool finite_nonneg(float x) { return std::isfinite(x) && x >= 0.0f; }

// An enum field as the int32 the caller stored. A C caller can store any
// value, and in C++ loading an enum object that holds a value outside its
// enumerators' range is undefined (found by the fuzz harness under UBSan:
// input_dtype = -1), so fields are checked through this before any load.
template <class E>
int32_t enum_value(const E& field) {
    static_assert(sizeof(E) == sizeof(int32_t), "gdn enums are 32-bit");
    int32_t v;
    std::memcpy(&v, &field, sizeof v);
    return v;
}

struct TensorSpec {
    const char* name;
    const void* ptr;
    int64_t token_stride;  // as given (0 = packed)
    int64_t head_stride;
    int32_t heads;
    int32_t dim;
    gdn_dtype_t dtype;
};

// Resolves packed strides and checks one [token][head][dim] tensor.
gdn_status_t check_tensor(const TensorSpec& t, int64_t tokens, Strides* out, bool written) {
    if (t.ptr == nullptr) return fail(GDN_ERROR_INVALID_ARGUMENT, "tensors.{} is NULL", t.name);
    const size_t esize = dtype_size(t.dtype);
    if (reinterpret_cast<uintptr_t>(t.ptr) % esize != 0)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "tensors.{} ({}) is not aligned to its element size ({} bytes, {})",
                    t.name, t.ptr, esize, dtype_name(t.dtype));
    if (t.head_stride < 0)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "{}.head_stride ({}) < 0", t.name, t.head_stride);
    if (t.token_stride < 0)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "{}.token_stride ({}) < 0", t.name, t.token_stride);
    Strides s;
    s.head = t.head_stride == 0 ? t.dim : t.head_stride;
    // The packed token stride (heads x head stride) must not wrap (found by
    // the fuzz harness: head_stride 2^62 with token_stride 0 overflowed int64).
    if (t.token_stride == 0 && s.head > INT64_MAX / t.heads)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "{}: the packed token stride ({} heads x head_stride {}) overflows 64 bits",
                    t.name, t.heads, s.head);
    s.token = t.token_stride == 0 ? int64_t(t.heads) * s.head : t.token_stride;
    if (t.heads > 1 && s.head < t.dim)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "{}.head_stride ({}) < its row ({} elements)", t.name,
                    s.head, t.dim);
    if (tokens > 1 && s.token < t.dim)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "{}.token_stride ({}) < its row ({} elements)", t.name,
                    s.token, t.dim);
    // The largest element offset must fit in 63 bits (it does for any sane
    // stride, but an absurd one must not wrap). Checked first: the overlap
    // test below multiplied absurd strides (found by the fuzzer).
    const double span = double(tokens - 1) * double(s.token) + double(t.heads - 1) * double(s.head) +
                        double(t.dim);
    if (span > 9.0e18)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "{}: strides ({}, {}) span more than 2^63 elements",
                    t.name, s.token, s.head);
    if (written && t.heads > 1 && tokens > 1) {
        // Rows written must not overlap: the larger stride steps over the
        // whole span of the smaller one (outer >= inner * count, by division).
        const bool head_inner = s.head <= s.token;
        const int64_t inner = head_inner ? s.head : s.token;
        const int64_t inner_count = head_inner ? t.heads : tokens;
        const int64_t outer = head_inner ? s.token : s.head;
        if (outer / inner_count < inner)
            return fail(GDN_ERROR_INVALID_ARGUMENT,
                        "{}: token_stride ({}) and head_stride ({}) make rows overlap ({} heads, "
                        "{} tokens)",
                        t.name, s.token, s.head, t.heads, tokens);
    }
    *out = s;
    return GDN_SUCCESS;
}

// [first, last) byte range a tensor touches.
struct Range {
    const char* name;
    uintptr_t begin;
    uintptr_t end;
};

Range range_of(const char* name, const void* p, int64_t tokens, Strides s, int32_t heads,
               int32_t dim, size_t esize) {
    const uintptr_t b = reinterpret_cast<uintptr_t>(p);
    const uint64_t last = uint64_t(tokens - 1) * uint64_t(s.token) +
                          uint64_t(heads - 1) * uint64_t(s.head) + uint64_t(dim);
    return {name, b, b + last * esize};
}

bool overlap(const Range& a, const Range& b) { return a.begin < b.end && b.begin < a.end; }

// GDN_FLAG_TOKEN_STATES (cu and idx already checked): every entry read below
// num_state_slots; the slots a call writes (the entries of the sequences that
// are not padding) named once, and none of them another sequence's own slot,
// which that sequence reads while this one writes. A sequence may name its
// own slot: it reads it before its first token's state is written. With
// GDN_FLAG_BLOCK_STATES only the entries at block ends and last tokens are
// read, and only those are checked.
gdn_status_t check_token_state_indices(const Shape& s, const int32_t* cu, const int32_t* idx,
                                       const int32_t* token_idx) {
    const int64_t equal_len = s.num_tokens / s.num_seqs;
    auto bos_of = [&](int32_t n) { return cu ? int64_t(cu[n]) : int64_t(n) * equal_len; };
    auto eos_of = [&](int32_t n) { return cu ? int64_t(cu[n + 1]) : int64_t(n + 1) * equal_len; };
    auto read = [&](int64_t i, int64_t bos, int64_t eos) {
        return !s.block_states() || block_state_read(i - bos, eos - bos);
    };
    for (int32_t n = 0; n < s.num_seqs; ++n) {
        const int64_t bos = bos_of(n), eos = eos_of(n);
        for (int64_t i = bos; i < eos; ++i)
            if (read(i, bos, eos) && token_idx[i] >= s.num_state_slots)
                return fail(GDN_ERROR_INVALID_ARGUMENT,
                            "token_state_indices[{}] ({}) >= num_state_slots ({})", i, token_idx[i],
                            s.num_state_slots);
    }
    // Sorted (slot, sequence) of the own slots and (slot, token, sequence)
    // of the writes: O((num_seqs + num_tokens) log) whatever the pool's size.
    struct Own {
        int32_t slot, seq;
    };
    struct Write {
        int32_t slot;
        int64_t token;
        int32_t seq;
    };
    std::vector<Own> own;
    own.reserve(size_t(s.num_seqs));
    for (int32_t n = 0; n < s.num_seqs; ++n) {
        const int32_t slot = idx ? idx[n] : n;
        if (slot >= 0) own.push_back({slot, n});
    }
    std::sort(own.begin(), own.end(), [](const Own& x, const Own& y) { return x.slot < y.slot; });
    std::vector<Write> writes;
    for (int32_t n = 0; n < s.num_seqs; ++n) {
        if (idx && idx[n] < 0) continue;  // padding: writes nothing
        const int64_t bos = bos_of(n), eos = eos_of(n);
        for (int64_t i = bos; i < eos; ++i)
            if (read(i, bos, eos) && token_idx[i] >= 0) writes.push_back({token_idx[i], i, n});
    }
    std::sort(writes.begin(), writes.end(), [](const Write& x, const Write& y) {
        return x.slot != y.slot ? x.slot < y.slot : x.token < y.token;
    });
    for (size_t j = 0; j < writes.size(); ++j) {
        const Write& w = writes[j];
        if (j > 0 && writes[j - 1].slot == w.slot)
            return fail(GDN_ERROR_INVALID_ARGUMENT, "token_state_indices[{}] and [{}] both name slot {}",
                        writes[j - 1].token, w.token, w.slot);
        auto it = std::lower_bound(own.begin(), own.end(), w.slot,
                                   [](const Own& x, int32_t slot) { return x.slot < slot; });
        if (it != own.end() && it->slot == w.slot && it->seq != w.seq)
            return fail(GDN_ERROR_INVALID_ARGUMENT,
                        "token_state_indices[{}] (sequence {}) names slot {}, the own slot of "
                        "sequence {}",
                        w.token, w.seq, w.slot, it->seq);
    }
    return GDN_SUCCESS;
}

}  // namespace

const char* dtype_name(gdn_dtype_t t) {
    switch (t) {
        case GDN_DTYPE_F32: return "f32";
        case GDN_DTYPE_F16: return "f16";
        case GDN_DTYPE_BF16: return "bf16";
        default: break;  // a value gdn.h does not name (rejected by validation)
    }
    return "?";
}

const char* precision_name(gdn_precision_t p) {
    switch (p) {
        case GDN_PRECISION_FP32: return "fp32";
        case GDN_PRECISION_TF32X3: return "tf32x3";
        case GDN_PRECISION_FP16: return "fp16";
        case GDN_PRECISION_BF16: return "bf16";
        case GDN_PRECISION_BF16X3: return "bf16x3";
        case GDN_PRECISION_FP16X3: return "fp16x3";
        default: break;  // a value gdn.h does not name
    }
    return "?";
}

size_t min_struct_size_caps() { return offsetof(gdn_caps_t, compute_major); }
size_t min_struct_size_problem() { return offsetof(gdn_problem_t, head_mapping); }
size_t min_struct_size_tensors() { return offsetof(gdn_tensors_t, state_slot_stride); }
size_t min_struct_size_path_info() { return offsetof(gdn_path_info_t, chunk_size); }

gdn_status_t read_caps(const gdn_caps_t* in, gdn_caps_t* out) {
    if (gdn_status_t st = read_versioned(in, "caps", min_struct_size_caps(), out)) return st;
    const int32_t backend = enum_value(out->backend);
    if (backend != GDN_BACKEND_CPU && backend != GDN_BACKEND_CUDA && backend != GDN_BACKEND_HIP)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "caps->backend ({}) is not a gdn_backend_t", backend);
    if (out->device < 0)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "caps->device ({}) < 0", out->device);
    if (out->multiprocessor_count < 1)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "caps->multiprocessor_count ({}) < 1: caps not filled by gdn_probe()?",
                    out->multiprocessor_count);
    // No device has more (GPUs: a few hundred SMs; the CPU probe caps its
    // workers at 1024). The CPU backend sizes one scratch per worker, so an
    // absurd count made gdn_workspace_size loop for minutes (found by the
    // fuzzer: 2^31 - 1, a 10 s timeout).
    if (out->multiprocessor_count > kMaxMultiprocessors)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "caps->multiprocessor_count ({}) > {}: caps not filled by gdn_probe()?",
                    out->multiprocessor_count, kMaxMultiprocessors);
    if (out->warp_size < 1)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "caps->warp_size ({}) < 1: caps not filled by gdn_probe()?", out->warp_size);
    out->arch[sizeof out->arch - 1] = '\0';
    out->name[sizeof out->name - 1] = '\0';
    return GDN_SUCCESS;
}

gdn_status_t read_problem(const gdn_problem_t* in, Shape* s) {
    gdn_problem_t p;
    if (gdn_status_t st = read_versioned(in, "problem", min_struct_size_problem(), &p)) return st;

    if (p.num_seqs < 1)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.num_seqs ({}) < 1", p.num_seqs);
    if (p.num_tokens < 1)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.num_tokens ({}) < 1", p.num_tokens);
    if (p.num_tokens >= kMaxTokens)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "problem.num_tokens ({}) >= 2^31 (cu_seqlens is int32): split the call",
                    p.num_tokens);
    if (p.max_seqlen < 0 || p.max_seqlen > p.num_tokens)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "problem.max_seqlen ({}) is outside [0, num_tokens ({})]", p.max_seqlen,
                    p.num_tokens);
    if (p.num_k_heads < 1)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.num_k_heads ({}) < 1", p.num_k_heads);
    if (p.num_v_heads < 1)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.num_v_heads ({}) < 1", p.num_v_heads);
    if (p.num_v_heads % p.num_k_heads != 0)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "problem.num_v_heads ({}) is not a multiple of num_k_heads ({})",
                    p.num_v_heads, p.num_k_heads);
    if (p.head_dim_k < 1 || p.head_dim_k > kMaxHeadDim)
        return fail(p.head_dim_k < 1 ? GDN_ERROR_INVALID_ARGUMENT : GDN_ERROR_NOT_SUPPORTED,
                    "problem.head_dim_k ({}) is outside [1, {}]", p.head_dim_k, kMaxHeadDim);
    if (p.head_dim_v < 1 || p.head_dim_v > kMaxHeadDim)
        return fail(p.head_dim_v < 1 ? GDN_ERROR_INVALID_ARGUMENT : GDN_ERROR_NOT_SUPPORTED,
                    "problem.head_dim_v ({}) is outside [1, {}]", p.head_dim_v, kMaxHeadDim);
    const int32_t head_mapping = enum_value(p.head_mapping);
    if (head_mapping != GDN_HEADS_GROUPED && head_mapping != GDN_HEADS_INTERLEAVED)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.head_mapping ({}) is not a gdn_head_mapping_t",
                    head_mapping);
    auto dtype_ok = [](int32_t t) {
        return t == GDN_DTYPE_F32 || t == GDN_DTYPE_F16 || t == GDN_DTYPE_BF16;
    };
    if (!dtype_ok(enum_value(p.input_dtype)))
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.input_dtype ({}) is not a gdn_dtype_t",
                    enum_value(p.input_dtype));
    if (!dtype_ok(enum_value(p.output_dtype)))
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.output_dtype ({}) is not a gdn_dtype_t",
                    enum_value(p.output_dtype));
    if (!dtype_ok(enum_value(p.gate_dtype)))
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.gate_dtype ({}) is not a gdn_dtype_t",
                    enum_value(p.gate_dtype));
    if (p.gate_dtype != GDN_DTYPE_F32 && p.gate_dtype != p.input_dtype)
        return fail(GDN_ERROR_NOT_SUPPORTED,
                    "problem.gate_dtype ({}) must be f32 or the input dtype ({})",
                    dtype_name(p.gate_dtype), dtype_name(p.input_dtype));
    const int32_t state_layout = enum_value(p.state_layout);
    if (state_layout != GDN_STATE_KV && state_layout != GDN_STATE_VK)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.state_layout ({}) is not a gdn_state_layout_t",
                    state_layout);
    if (p.num_state_slots < 0)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.num_state_slots ({}) < 0",
                    p.num_state_slots);
    const int32_t algorithm = enum_value(p.algorithm), precision = enum_value(p.precision);
    if (algorithm != GDN_ALGO_AUTO && algorithm != GDN_ALGO_SEQUENTIAL && algorithm != GDN_ALGO_CHUNKED)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.algorithm ({}) is not a gdn_algorithm_t",
                    algorithm);
    if (precision != GDN_PRECISION_FP32 && precision != GDN_PRECISION_TF32X3 &&
        precision != GDN_PRECISION_FP16 && precision != GDN_PRECISION_BF16 &&
        precision != GDN_PRECISION_BF16X3 && precision != GDN_PRECISION_FP16X3)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.precision ({}) is not a gdn_precision_t",
                    precision);
    if ((p.flags & ~GDN_FLAG_ALL_) != 0)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.flags (0x{:x}) has unknown bits 0x{:x}",
                    p.flags, p.flags & ~GDN_FLAG_ALL_);
    if ((p.flags & GDN_FLAG_BLOCK_STATES) && !(p.flags & GDN_FLAG_TOKEN_STATES))
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "problem.flags (0x{:x}) has GDN_FLAG_BLOCK_STATES without GDN_FLAG_TOKEN_STATES",
                    p.flags);
    if (!std::isfinite(p.scale))
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.scale ({}) is not finite", p.scale);
    if (!finite_nonneg(p.l2norm_eps))
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.l2norm_eps ({}) is negative or not finite",
                    p.l2norm_eps);
    if (!finite_nonneg(p.norm_eps))
        return fail(GDN_ERROR_INVALID_ARGUMENT, "problem.norm_eps ({}) is negative or not finite",
                    p.norm_eps);

    s->num_seqs = p.num_seqs;
    s->num_tokens = p.num_tokens;
    s->max_seqlen = p.max_seqlen == 0 ? p.num_tokens : p.max_seqlen;
    s->num_k_heads = p.num_k_heads;
    s->num_v_heads = p.num_v_heads;
    s->group = p.num_v_heads / p.num_k_heads;
    s->head_dim_k = p.head_dim_k;
    s->head_dim_v = p.head_dim_v;
    s->head_mapping = p.head_mapping;
    s->input_dtype = p.input_dtype;
    s->gate_dtype = p.gate_dtype;
    s->output_dtype = p.output_dtype;
    s->state_layout = p.state_layout;
    s->num_state_slots = p.num_state_slots == 0 ? p.num_seqs : p.num_state_slots;
    s->algorithm = p.algorithm;
    s->precision = p.precision;
    s->flags = p.flags;
    s->scale = p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(float(p.head_dim_k));
    s->l2norm_eps = p.l2norm_eps != 0.0f ? p.l2norm_eps : 1e-6f;
    s->norm_eps = p.norm_eps != 0.0f ? p.norm_eps : 1e-6f;
    return GDN_SUCCESS;
}

gdn_status_t read_tensors(const Shape& s, const gdn_tensors_t* in, Tensors* out) {
    gdn_tensors_t t;
    if (gdn_status_t st = read_versioned(in, "tensors", min_struct_size_tensors(), &t)) return st;
    const int64_t T = s.num_tokens;
    Tensors r{};

    const TensorSpec specs[] = {
        {"q", t.q, t.q_token_stride, t.q_head_stride, s.num_k_heads, s.head_dim_k, s.input_dtype},
        {"k", t.k, t.k_token_stride, t.k_head_stride, s.num_k_heads, s.head_dim_k, s.input_dtype},
        {"v", t.v, t.v_token_stride, t.v_head_stride, s.num_v_heads, s.head_dim_v, s.input_dtype},
        {"g", t.g, t.g_token_stride, t.g_head_stride, s.num_v_heads, 1, s.gate_dtype},
        {"beta", t.beta, t.beta_token_stride, t.beta_head_stride, s.num_v_heads, 1, s.gate_dtype},
        {"out", t.out, t.out_token_stride, t.out_head_stride, s.num_v_heads, s.head_dim_v,
         s.output_dtype},
        {"z", t.z, t.z_token_stride, t.z_head_stride, s.num_v_heads, s.head_dim_v, s.input_dtype},
    };
    Strides* dst[] = {&r.q_stride, &r.k_stride, &r.v_stride, &r.g_stride,
                      &r.beta_stride, &r.out_stride, &r.z_stride};
    const int n_specs = s.output_norm() ? 7 : 6;
    for (int i = 0; i < n_specs; ++i)
        if (gdn_status_t st = check_tensor(specs[i], T, dst[i], i == 5)) return st;
    r.q = t.q;
    r.k = t.k;
    r.v = t.v;
    r.g = t.g;
    r.beta = t.beta;
    r.out = t.out;
    r.z = s.output_norm() ? t.z : nullptr;

    if (t.state == nullptr) return fail(GDN_ERROR_INVALID_ARGUMENT, "tensors.state is NULL");
    if (reinterpret_cast<uintptr_t>(t.state) % alignof(float) != 0)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "tensors.state ({}) is not aligned to 4 bytes",
                    static_cast<const void*>(t.state));
    const int64_t head_state = int64_t(s.head_dim_k) * s.head_dim_v;
    const int64_t slot_elems = head_state * s.num_v_heads;
    if (t.state_slot_stride < 0)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "tensors.state_slot_stride ({}) < 0",
                    t.state_slot_stride);
    r.state = t.state;
    r.state_slot_stride = t.state_slot_stride == 0 ? slot_elems : t.state_slot_stride;
    if (s.num_state_slots > 1 && r.state_slot_stride < slot_elems)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "tensors.state_slot_stride ({}) < one slot (Hv*K*V = {} elements)",
                    r.state_slot_stride, slot_elems);
    // As for the tensors: the pool's last element offset must fit in 63 bits
    // (found by the fuzz harness: 3 slots 2^62 apart overflowed int64).
    if (double(s.num_state_slots - 1) * double(r.state_slot_stride) + double(slot_elems) > 9.0e18)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "tensors.state: {} slots, state_slot_stride ({}) span more than 2^63 elements",
                    s.num_state_slots, r.state_slot_stride);

    if (t.cu_seqlens == nullptr && T % s.num_seqs != 0)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "tensors.cu_seqlens is NULL but num_tokens ({}) is not a multiple of num_seqs "
                    "({})",
                    T, s.num_seqs);
    if (t.cu_seqlens == nullptr && T / s.num_seqs > s.max_seqlen)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "problem.max_seqlen ({}) < num_tokens / num_seqs ({})", s.max_seqlen,
                    T / s.num_seqs);
    if (t.state_indices == nullptr && s.num_state_slots < s.num_seqs)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "problem.num_state_slots ({}) < num_seqs ({}) without state_indices",
                    s.num_state_slots, s.num_seqs);
    if (t.cu_seqlens && reinterpret_cast<uintptr_t>(t.cu_seqlens) % 4 != 0)
        return fail(GDN_ERROR_INVALID_ARGUMENT, "tensors.cu_seqlens ({}) is not aligned to 4 bytes",
                    static_cast<const void*>(t.cu_seqlens));
    if (t.state_indices && reinterpret_cast<uintptr_t>(t.state_indices) % 4 != 0)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "tensors.state_indices ({}) is not aligned to 4 bytes",
                    static_cast<const void*>(t.state_indices));
    r.cu_seqlens = t.cu_seqlens;
    r.state_indices = t.state_indices;
    r.start_from_zero = t.start_from_zero;
    if (s.token_states() && t.token_state_indices == nullptr)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "tensors.token_state_indices is NULL with GDN_FLAG_TOKEN_STATES");
    if (!s.token_states() && t.token_state_indices != nullptr)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "tensors.token_state_indices ({}) is set without GDN_FLAG_TOKEN_STATES in "
                    "problem.flags",
                    static_cast<const void*>(t.token_state_indices));
    if (t.token_state_indices && reinterpret_cast<uintptr_t>(t.token_state_indices) % 4 != 0)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "tensors.token_state_indices ({}) is not aligned to 4 bytes",
                    static_cast<const void*>(t.token_state_indices));
    r.token_state_indices = t.token_state_indices;

    if (s.gate_from_raw()) {
        if (t.A_log == nullptr)
            return fail(GDN_ERROR_INVALID_ARGUMENT, "tensors.A_log is NULL with GDN_FLAG_GATE_FROM_RAW");
        if (t.dt_bias == nullptr)
            return fail(GDN_ERROR_INVALID_ARGUMENT, "tensors.dt_bias is NULL with GDN_FLAG_GATE_FROM_RAW");
        r.A_log = t.A_log;
        r.dt_bias = t.dt_bias;
    }
    if (s.output_norm()) {
        if (t.norm_weight == nullptr)
            return fail(GDN_ERROR_INVALID_ARGUMENT,
                        "tensors.norm_weight is NULL with GDN_FLAG_OUTPUT_NORM");
        r.norm_weight = t.norm_weight;
    }
    for (const float* p : {r.A_log, r.dt_bias, r.norm_weight})
        if (p && reinterpret_cast<uintptr_t>(p) % 4 != 0)
            return fail(GDN_ERROR_INVALID_ARGUMENT,
                        "a per-head parameter pointer ({}) is not aligned to 4 bytes",
                        static_cast<const void*>(p));

    // out must not overlap anything read (it is written while they are read).
    const Range out_range = range_of("out", r.out, T, r.out_stride, s.num_v_heads, s.head_dim_v,
                                     dtype_size(s.output_dtype));
    const Range state_range = {
        "state", reinterpret_cast<uintptr_t>(r.state),
        reinterpret_cast<uintptr_t>(r.state) +
            uint64_t((s.num_state_slots - 1) * r.state_slot_stride + slot_elems) * 4};
    Range inputs[] = {
        range_of("q", r.q, T, r.q_stride, s.num_k_heads, s.head_dim_k, dtype_size(s.input_dtype)),
        range_of("k", r.k, T, r.k_stride, s.num_k_heads, s.head_dim_k, dtype_size(s.input_dtype)),
        range_of("v", r.v, T, r.v_stride, s.num_v_heads, s.head_dim_v, dtype_size(s.input_dtype)),
        range_of("g", r.g, T, r.g_stride, s.num_v_heads, 1, dtype_size(s.gate_dtype)),
        range_of("beta", r.beta, T, r.beta_stride, s.num_v_heads, 1, dtype_size(s.gate_dtype)),
        state_range,
        r.z ? range_of("z", r.z, T, r.z_stride, s.num_v_heads, s.head_dim_v,
                       dtype_size(s.input_dtype))
            : Range{"z", 0, 0},
    };
    for (const Range& in_range : inputs)
        if (in_range.end > in_range.begin && overlap(out_range, in_range))
            return fail(GDN_ERROR_INVALID_ARGUMENT, "tensors.out overlaps tensors.{}",
                        in_range.name);
    for (int i = 0; i < 5; ++i)
        if (overlap(state_range, inputs[i]))
            return fail(GDN_ERROR_INVALID_ARGUMENT, "tensors.state overlaps tensors.{}",
                        inputs[i].name);
    // Nor may out or state overlap z or the small arrays, which are read
    // while they are written (found by the fuzz harness: out over cu_seqlens let a
    // run rewrite its own sequence bounds and write out of bounds).
    auto array_range = [](const char* name, const void* p, uint64_t bytes) {
        const uintptr_t b = reinterpret_cast<uintptr_t>(p);
        return p ? Range{name, b, b + bytes} : Range{name, 0, 0};
    };
    const uint64_t n = uint64_t(s.num_seqs);
    const Range arrays[] = {
        inputs[6],
        array_range("cu_seqlens", r.cu_seqlens, (n + 1) * 4),
        array_range("state_indices", r.state_indices, n * 4),
        array_range("start_from_zero", r.start_from_zero, n),
        array_range("A_log", r.A_log, uint64_t(s.num_v_heads) * 4),
        array_range("dt_bias", r.dt_bias, uint64_t(s.num_v_heads) * 4),
        array_range("norm_weight", r.norm_weight, uint64_t(s.head_dim_v) * 4),
        array_range("token_state_indices", r.token_state_indices, uint64_t(T) * 4),
    };
    for (const Range& a : arrays) {
        if (a.end <= a.begin) continue;
        if (overlap(out_range, a))
            return fail(GDN_ERROR_INVALID_ARGUMENT, "tensors.out overlaps tensors.{}", a.name);
        if (overlap(state_range, a))
            return fail(GDN_ERROR_INVALID_ARGUMENT, "tensors.state overlaps tensors.{}", a.name);
    }

    *out = r;
    return GDN_SUCCESS;
}

gdn_status_t check_sequence_arrays(const Shape& s, const int32_t* cu, const int32_t* idx,
                                   const int32_t* token_idx) {
    if (cu) {
        if (cu[0] != 0)
            return fail(GDN_ERROR_INVALID_ARGUMENT, "cu_seqlens[0] ({}) != 0", cu[0]);
        for (int32_t i = 0; i < s.num_seqs; ++i) {
            const int64_t len = int64_t(cu[i + 1]) - cu[i];
            if (len < 0)
                return fail(GDN_ERROR_INVALID_ARGUMENT, "cu_seqlens[{}] ({}) < cu_seqlens[{}] ({})",
                            i + 1, cu[i + 1], i, cu[i]);
            if (len > s.max_seqlen)
                return fail(GDN_ERROR_INVALID_ARGUMENT,
                            "sequence {} has {} tokens > problem.max_seqlen ({})", i, len,
                            s.max_seqlen);
        }
        if (cu[s.num_seqs] != s.num_tokens)
            return fail(GDN_ERROR_INVALID_ARGUMENT, "cu_seqlens[{}] ({}) != num_tokens ({})",
                        s.num_seqs, cu[s.num_seqs], s.num_tokens);
    }
    if (idx) {
        std::vector<int32_t> used;
        used.reserve(size_t(s.num_seqs));
        for (int32_t i = 0; i < s.num_seqs; ++i) {
            if (idx[i] >= s.num_state_slots)
                return fail(GDN_ERROR_INVALID_ARGUMENT,
                            "state_indices[{}] ({}) >= num_state_slots ({})", i, idx[i],
                            s.num_state_slots);
            if (idx[i] >= 0) used.push_back(idx[i]);
        }
        std::sort(used.begin(), used.end());
        auto dup = std::adjacent_find(used.begin(), used.end());
        if (dup != used.end())
            return fail(GDN_ERROR_INVALID_ARGUMENT, "state_indices name slot {} twice", *dup);
    }
    if (token_idx) return check_token_state_indices(s, cu, idx, token_idx);
    return GDN_SUCCESS;
}

}  // namespace gdn
