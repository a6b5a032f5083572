// The fuzz harness: turns a FuzzCase into caps / problem / tensors structs and
// host buffers, calls gdn_workspace_size, gdn_select_path and
// gdn_chunked_recurrence on the CPU backend, and checks the ABI's promises:
//
//   - every status is a documented value, never INTERNAL (a bug in gdn) nor
//     DEVICE (there is no device);
//   - a failed call leaves its out-parameters, out, state and workspace (each
//     with guard bands) byte for byte as they were, and sets a message; a
//     successful one clears it;
//   - a successful run writes only the out rows of real (non-padding)
//     sequences and the state slots they name: no guard band, no gap between
//     rows, no input;
//   - every fault the harness injected on purpose (a NULL, a misaligned
//     pointer, a negative stride, out aliasing an input, a bad cu_seqlens, a
//     short workspace, ...) is rejected;
//   - with plain values on an FP32 path, out and state match the FP64
//     reference.
//
// Buffers are sized from the problem by the harness's own reading of the
// contract and allocated exactly (so ASan sees a read one element past the
// end), but only while they fit a small budget. When they do not (a raw size
// or stride), the run is made only if an injected fault must stop it before
// any data is touched: then the buffers are tiny, and a validator that lets
// the call through is caught by ASan.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "common/reference.hpp"
#include "common/validate.hpp"
#include "fuzz_case.hpp"
#include "gdn/gdn.h"

#ifndef GDN_FUZZ_CPU_ONLY
#define GDN_FUZZ_CPU_ONLY 0
#endif

// fuzz_c_shim.c: enum arguments holding any int32.
extern "C" gdn_status_t gdn_fuzz_probe_raw(int32_t backend, int32_t device, gdn_caps_t* caps);
extern "C" const char* gdn_fuzz_status_string_raw(int32_t status);

namespace gdn_fuzz {

namespace {

constexpr unsigned char kPattern = 0xA5;
constexpr size_t kGuard = 64;
constexpr int64_t kMaxBufferBytes = int64_t(8) << 20;
constexpr int64_t kMaxWorkspaceBytes = int64_t(64) << 20;
constexpr int64_t kMaxWork = int64_t(1) << 17;  // tokens * Hv * K * V: a run stays in the milliseconds
constexpr int64_t kMaxSeqs = 4096;
constexpr size_t kTinyBytes = 64;
constexpr size_t kSentinel = 0x5A5A5A5A;

using i128 = __int128;

int64_t saturate(i128 x) {
    const i128 hi = i128(INT64_MAX), lo = i128(INT64_MIN);
    return int64_t(x > hi ? hi : x < lo ? lo : x);
}

// Enum fields hold whatever int32 the fuzzer picks: in C++ an enum object
// may not hold a value outside its enumerators' range, so they are written
// and read as the int32 bytes a C caller would leave there.
template <class E>
void set_raw(E& field, int32_t v) {
    static_assert(sizeof(E) == sizeof(int32_t), "gdn enums are 32-bit");
    std::memcpy(&field, &v, sizeof v);
}
template <class E>
int32_t raw(const E& field) {
    int32_t v;
    std::memcpy(&v, &field, sizeof v);
    return v;
}

std::string g_context;  // the decoded case, printed with a violation

[[noreturn]] void violation(const char* format, ...) {
    std::va_list args;
    va_start(args, format);
    std::fprintf(stderr, "\ngdn fuzz invariant violated: ");
    std::vfprintf(stderr, format, args);
    va_end(args);
    std::fprintf(stderr, "\n  case: %s\n  last error: \"%s\"\n", g_context.c_str(), gdn_last_error());
    std::fflush(stderr);
    std::abort();
}

void check_status(const char* call, gdn_status_t st) {
    if (int(st) < 0 || int(st) > 6) violation("%s returned %d, not a gdn_status_t", call, int(st));
    if (st == GDN_ERROR_INTERNAL) violation("%s returned GDN_ERROR_INTERNAL", call);
    if (st == GDN_ERROR_DEVICE) violation("%s returned GDN_ERROR_DEVICE on the CPU", call);
    const char* msg = gdn_last_error();
    if (msg == nullptr) violation("%s: gdn_last_error() is NULL", call);
    if (st == GDN_SUCCESS && msg[0] != '\0')
        violation("%s succeeded but gdn_last_error() is \"%s\"", call, msg);
    if (st != GDN_SUCCESS && msg[0] == '\0')
        violation("%s failed (%s) with an empty gdn_last_error()", call, gdn_status_string(st));
}

// Deterministic numbers from the case's seed (splitmix64).
struct Rng {
    uint64_t s;
    uint64_t next() {
        s += 0x9E3779B97F4A7C15ull;
        uint64_t z = s;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    float uniform(float lo, float hi) { return lo + (hi - lo) * float(next() >> 40) / float(1 << 24); }
};

size_t esize_of(int32_t dtype) { return dtype == GDN_DTYPE_F32 ? 4 : 2; }

// One host buffer: [guard][misalign][extent][guard] for written buffers,
// [misalign][extent] for read ones (ASan's redzone right at the end).
struct Buffer {
    std::vector<unsigned char> mem;
    size_t begin = 0;  // where the tensor starts (after guard and misalignment)
    size_t bytes = 0;  // its extent
    bool allocated = false;
    unsigned char* ptr() { return allocated ? mem.data() + begin : nullptr; }
    void allocate(size_t extent, size_t misalign, bool guarded) {
        const size_t guard = guarded ? kGuard : 0;
        mem.assign(guard + misalign + extent + guard, kPattern);
        begin = guard + misalign;
        bytes = extent;
        allocated = true;
    }
};

const char* buffer_name(int b) {
    static const char* const names[kNumBuffers] = {"q",     "k",          "v",
                                                   "g",     "beta",       "out",
                                                   "z",     "state",      "cu_seqlens",
                                                   "state_indices",       "start_from_zero",
                                                   "A_log", "dt_bias",    "norm_weight",
                                                   "token_state_indices"};
    return b >= 0 && b < kNumBuffers ? names[b] : "?";
}

// A struct as the library must read it: min(struct_size, sizeof) bytes over
// zeros (zero = default for every field), in whole 8-byte units (no gdn.h
// size is anything else; a size between them must not tear a pointer).
template <class T>
T effective(const T& given) {
    T eff;
    std::memset(static_cast<void*>(&eff), 0, sizeof eff);
    const size_t n = std::min(given.struct_size, sizeof(T)) / alignof(T) * alignof(T);
    std::memcpy(static_cast<void*>(&eff), static_cast<const void*>(&given), n);
    return eff;
}

template <class T>
bool struct_size_ok(const T& s) {
    return s.struct_size != 0 && s.struct_size <= sizeof(T);
}

uint64_t struct_size_from(uint64_t raw, size_t real) {
    // Small raw values probe truncated and slightly-too-large sizes; huge
    // ones stay huge.
    return raw >> 32 ? raw : raw % (real + 9);
}

// A [token][head][dim] tensor as the harness resolves it.
struct Layout {
    int64_t token = 0, head = 0;  // resolved strides (elements)
    int32_t heads = 1, dim = 1;
    int32_t dtype = GDN_DTYPE_F32;
    size_t esize = 4;
    bool negative = false;  // a stride as given was negative
    i128 extent = 0;        // elements from the first to one past the last
};

class Harness {
public:
    explicit Harness(const FuzzCase& c) : c_(c), rng_{uint64_t(c.value_seed) * 2654435761u + 1} {}

    void run() {
        if (c_.caps_ops & 64) probe_and_status_string();
        build_caps();
        build_problem();
        check_problem();
        gdn_tensors_init(&tensors_);
        if (c_.tensors_ops & 2) tensors_.struct_size = struct_size_from(c_.tensors_struct_size, sizeof tensors_);
        layouts();
        build_buffers();
        fill_values();
        build_sequence_arrays();
        set_pointers();
        derive_faults();
        describe();
        call_workspace_size();
        call_select_path();
        call_run();
    }

private:
    void probe_and_status_string();
    void build_caps();
    void build_problem();
    void check_problem();
    void layouts();
    i128 extent_bytes(int b) const;
    void build_buffers();
    void fill_values();
    void build_sequence_arrays();
    void set_pointers();
    void derive_faults();
    void describe();
    void call_workspace_size();
    void call_select_path();
    void call_run();
    void check_written_regions(const std::vector<unsigned char>& state_before);
    void compare_with_reference(const std::vector<unsigned char>& state_before);
    void fatal(const std::string& why) {
        if (fatal_why_.empty()) fatal_why_ = why;
    }
    void content_fault(const std::string& why) {
        if (content_why_.empty()) content_why_ = why;
    }
    bool in_use(int b) const;
    bool token_states() const { return (eff_.flags & GDN_FLAG_TOKEN_STATES) != 0; }
    // Whether the library reads token t's entry of token_state_indices (t of
    // sequence s, from sound arrays): every entry, or with
    // GDN_FLAG_BLOCK_STATES those of block ends and of the last token.
    bool tsi_read(int32_t s, int64_t t) const {
        if (!(eff_.flags & GDN_FLAG_BLOCK_STATES)) return true;
        const int64_t pos = t - seq_begin(s), len = seq_begin(s + 1) - seq_begin(s);
        return (pos + 1) % GDN_STATE_BLOCK == 0 || pos == len - 1;
    }
    // The first token of sequence s (s = n_: num_tokens), from sound arrays.
    int64_t seq_begin(int32_t s) const { return cu_null_ ? int64_t(s) * (T_ / n_) : cu_[size_t(s)]; }

    const FuzzCase& c_;
    Rng rng_;
    gdn_caps_t caps_{};
    gdn_problem_t problem_{};
    gdn_problem_t eff_{};
    gdn_tensors_t tensors_{};
    gdn_tensors_t eff_tensors_{};
    bool caps_null_ = false, problem_null_ = false, tensors_null_ = false;
    bool problem_ok_ = false;  // the effective problem keeps the documented rules
    bool sizes_ok_ = false;    // every buffer fits the budget: the run may touch data
    std::string fatal_why_;    // a fault host-side validation must reject before any data
    std::string content_why_;  // a fault in the contents of cu_seqlens / state_indices
    bool values_plain_ = false;

    // The resolved shape (defaults while !problem_ok_: then only tiny buffers).
    int64_t T_ = 1;
    int32_t n_ = 1, Hk_ = 1, Hv_ = 1, K_ = 1, V_ = 1, slots_ = 1;
    int64_t slot_stride_ = 1, max_seqlen_ = 1;
    Layout lay_[kNumStrided];

    Buffer buf_[kNumBuffers];
    std::vector<int32_t> cu_, idx_, tsi_;
    bool cu_null_ = true, idx_null_ = true, sfz_null_ = true, tsi_null_ = true;

    size_t need_ = 0;
    Buffer workspace_;
    void* ws_ptr_ = nullptr;
    size_t ws_bytes_ = 0;
    gdn_status_t path_status_ = GDN_SUCCESS;
    gdn_path_info_t info_{};
};

// Whether the run reads buffer b (writing over it must then be refused).
bool Harness::in_use(int b) const {
    const uint32_t f = eff_.flags;
    switch (b) {
        case kZ:
        case kBufNormWeight: return (f & GDN_FLAG_OUTPUT_NORM) != 0;
        case kBufALog:
        case kBufDtBias: return (f & GDN_FLAG_GATE_FROM_RAW) != 0;
        case kBufCuSeqlens: return eff_tensors_.cu_seqlens != nullptr;
        case kBufStateIndices: return eff_tensors_.state_indices != nullptr;
        case kBufStartFromZero: return eff_tensors_.start_from_zero != nullptr;
        case kBufTokenStates: return eff_tensors_.token_state_indices != nullptr;
        default: return true;
    }
}

// gdn_probe with any backend value, device and struct_size; and
// gdn_status_string of any value.
void Harness::probe_and_status_string() {
    gdn_caps_t caps;
    std::memset(&caps, 0x5A, sizeof caps);
    gdn_caps_init(&caps);
    if (c_.caps_ops & 2) caps.struct_size = struct_size_from(c_.caps_struct_size, sizeof caps);
    const gdn_caps_t before = caps;
    const gdn_status_t st = gdn_fuzz_probe_raw(c_.caps_backend, c_.caps_device, &caps);
    g_context = "gdn_probe(" + std::to_string(c_.caps_backend) + ", " + std::to_string(c_.caps_device) + ")";
    check_status("gdn_probe", st);
    if (st != GDN_SUCCESS) {
        if (std::memcmp(&caps, &before, sizeof caps) != 0) violation("gdn_probe failed but wrote the caps");
    } else {
        if (c_.caps_backend < 0 || c_.caps_backend > 2 || c_.caps_device < 0 || !struct_size_ok(before))
            violation("gdn_probe accepted an invalid call");
        if (c_.caps_backend == GDN_BACKEND_CPU && c_.caps_device != 0) violation("the CPU has a device %d", c_.caps_device);
#if GDN_FUZZ_CPU_ONLY
        if (c_.caps_backend != GDN_BACKEND_CPU) violation("a GPU backend probed in a CPU-only build");
#endif
    }
    const char* name = gdn_fuzz_status_string_raw(c_.caps_warp);
    if (name == nullptr || name[0] == '\0') violation("gdn_status_string(%d) is empty", c_.caps_warp);
}

void Harness::build_caps() {
    static const gdn_caps_t probed = [] {
        gdn_caps_t c;
        gdn_caps_init(&c);
        if (gdn_probe(GDN_BACKEND_CPU, 0, &c) != GDN_SUCCESS) {
            std::fprintf(stderr, "gdn_probe(CPU) failed: %s\n", gdn_last_error());
            std::abort();
        }
        return c;
    }();
    caps_ = probed;
    caps_null_ = (c_.caps_ops & 1) != 0;
    caps_.multiprocessor_count = 1 + c_.threads % 4;
    if (c_.caps_ops & 2) caps_.struct_size = struct_size_from(c_.caps_struct_size, sizeof caps_);
    if (c_.caps_ops & 4) set_raw(caps_.backend, c_.caps_backend);
    if (c_.caps_ops & 8) caps_.device = c_.caps_device;
    if (c_.caps_ops & 16) caps_.multiprocessor_count = c_.caps_mp;
    if (c_.caps_ops & 32) caps_.warp_size = c_.caps_warp;
    if (caps_null_) fatal("caps is NULL");
    else if (!struct_size_ok(caps_)) fatal("caps->struct_size");
#if GDN_FUZZ_CPU_ONLY
    // No GPU backend in this build: another backend is unavailable or invalid.
    else if (raw(effective(caps_).backend) != GDN_BACKEND_CPU) fatal("caps->backend is not the CPU in a CPU-only build");
#endif
}

void Harness::build_problem() {
    const uint32_t raw = c_.raw_fields;
    gdn_problem_init(&problem_);
    problem_null_ = (c_.problem_ops & 1) != 0;
    if (c_.problem_ops & 2) problem_.struct_size = struct_size_from(c_.problem_struct_size, sizeof problem_);

    problem_.num_seqs = raw & kRawNumSeqs ? c_.num_seqs : 1 + int32_t(uint32_t(c_.num_seqs) % 4);
    problem_.num_tokens = raw & kRawNumTokens ? c_.num_tokens : 1 + int64_t(uint64_t(c_.num_tokens) % 96);
    if (raw & kRawMaxSeqlen) {
        problem_.max_seqlen = c_.max_seqlen;
    } else {
        const uint64_t m = uint64_t(c_.max_seqlen);
        const uint64_t T = problem_.num_tokens > 0 ? uint64_t(problem_.num_tokens) : 1;
        problem_.max_seqlen = m % 4 == 0 ? 0 : 1 + int64_t((m >> 2) % T);
    }
    if (raw & kRawHeads) {
        problem_.num_k_heads = c_.num_k_heads;
        problem_.num_v_heads = c_.num_v_heads;
    } else {
        problem_.num_k_heads = 1 + int32_t(uint32_t(c_.num_k_heads) % 3);
        problem_.num_v_heads = problem_.num_k_heads * (1 + int32_t(uint32_t(c_.num_v_heads) % 3));
    }
    if (raw & kRawHeadDims) {
        problem_.head_dim_k = c_.head_dim_k;
        problem_.head_dim_v = c_.head_dim_v;
    } else {
        problem_.head_dim_k = kDims[uint32_t(c_.head_dim_k) % kNumDims];
        problem_.head_dim_v = kDims[uint32_t(c_.head_dim_v) % kNumDims];
    }
    if (raw & kRawEnums) {
        set_raw(problem_.head_mapping, c_.head_mapping);
        set_raw(problem_.input_dtype, c_.input_dtype);
        set_raw(problem_.gate_dtype, c_.gate_dtype);
        set_raw(problem_.output_dtype, c_.output_dtype);
        set_raw(problem_.state_layout, c_.state_layout);
        set_raw(problem_.algorithm, c_.algorithm);
        set_raw(problem_.precision, c_.precision);
    } else {
        // Now and then one value past the last valid one.
        set_raw(problem_.head_mapping, int32_t(uint32_t(c_.head_mapping) % 3));
        const int32_t in = int32_t(uint32_t(c_.input_dtype) % 4);
        set_raw(problem_.input_dtype, in);
        const uint32_t gd = uint32_t(c_.gate_dtype);
        set_raw(problem_.gate_dtype, gd % 4 == 0 ? int32_t(GDN_DTYPE_F32) : gd % 4 < 3 ? in : int32_t((gd >> 2) % 4));
        set_raw(problem_.output_dtype, int32_t(uint32_t(c_.output_dtype) % 4));
        set_raw(problem_.state_layout, int32_t(uint32_t(c_.state_layout) % 3));
        set_raw(problem_.algorithm, int32_t(uint32_t(c_.algorithm) % 4));
        set_raw(problem_.precision, int32_t(uint32_t(c_.precision) % 7));  // 0..5 valid, 6 not
    }
    problem_.num_state_slots = raw & kRawSlots ? c_.num_state_slots : int32_t(uint32_t(c_.num_state_slots) % 6);
    problem_.flags = raw & kRawFlags ? c_.flags : c_.flags & GDN_FLAG_ALL_;
    if (raw & kRawFloats) {
        std::memcpy(&problem_.scale, &c_.scale, 4);
        std::memcpy(&problem_.l2norm_eps, &c_.l2norm_eps, 4);
        std::memcpy(&problem_.norm_eps, &c_.norm_eps, 4);
    } else {
        static const float kScales[] = {0.0f, 0.5f, 0.0625f, 2.0f};
        static const float kEps[] = {0.0f, 1e-6f, 1e-3f, 0.5f};
        problem_.scale = kScales[c_.scale % 4];
        problem_.l2norm_eps = kEps[c_.l2norm_eps % 4];
        problem_.norm_eps = kEps[c_.norm_eps % 4];
    }
}

// The documented rules on the problem alone (gdn.h): an effective problem
// that breaks one must be rejected by every call.
void Harness::check_problem() {
    if (problem_null_) fatal("problem is NULL");
    else if (!struct_size_ok(problem_)) fatal("problem->struct_size");
    eff_ = effective(problem_);
    if (problem_null_ || !struct_size_ok(problem_)) return;
    const gdn_problem_t& p = eff_;
    auto in = [](int32_t v, int32_t lo, int32_t hi) { return v >= lo && v <= hi; };
    std::string bad;
    if (p.num_seqs < 1) bad = "num_seqs < 1";
    else if (p.num_tokens < 1 || p.num_tokens >= (int64_t(1) << 31)) bad = "num_tokens outside [1, 2^31)";
    else if (p.max_seqlen < 0 || p.max_seqlen > p.num_tokens) bad = "max_seqlen outside [0, num_tokens]";
    else if (p.num_k_heads < 1 || p.num_v_heads < 1) bad = "a head count < 1";
    else if (p.num_v_heads % p.num_k_heads != 0) bad = "Hv % Hk != 0";
    else if (p.head_dim_k < 1 || p.head_dim_v < 1) bad = "a head dim < 1";
    else if (!in(raw(p.head_mapping), 0, 1)) bad = "head_mapping";
    else if (!in(raw(p.input_dtype), 0, 2) || !in(raw(p.gate_dtype), 0, 2) || !in(raw(p.output_dtype), 0, 2)) bad = "a dtype";
    else if (raw(p.gate_dtype) != GDN_DTYPE_F32 && raw(p.gate_dtype) != raw(p.input_dtype)) bad = "gate_dtype";
    else if (!in(raw(p.state_layout), 0, 1)) bad = "state_layout";
    else if (p.num_state_slots < 0) bad = "num_state_slots < 0";
    else if (!in(raw(p.algorithm), 0, 2)) bad = "algorithm";
    else if (!in(raw(p.precision), 0, 5)) bad = "precision";  // FP32 .. FP16X3
    else if (p.flags & ~GDN_FLAG_ALL_) bad = "unknown flags";
    else if ((p.flags & GDN_FLAG_BLOCK_STATES) && !(p.flags & GDN_FLAG_TOKEN_STATES)) bad = "BLOCK_STATES alone";
    else if (!std::isfinite(p.scale)) bad = "scale not finite";
    else if (!std::isfinite(p.l2norm_eps) || p.l2norm_eps < 0) bad = "l2norm_eps";
    else if (!std::isfinite(p.norm_eps) || p.norm_eps < 0) bad = "norm_eps";
    if (!bad.empty()) {
        fatal("problem: " + bad);
        return;
    }
    problem_ok_ = true;
    T_ = p.num_tokens;
    n_ = p.num_seqs;
    Hk_ = p.num_k_heads;
    Hv_ = p.num_v_heads;
    K_ = p.head_dim_k;
    V_ = p.head_dim_v;
    slots_ = p.num_state_slots == 0 ? n_ : p.num_state_slots;
    max_seqlen_ = p.max_seqlen == 0 ? T_ : p.max_seqlen;
}

// Strides per stride_mode, each tensor's extent, and the stride rules.
void Harness::layouts() {
    const int32_t heads[kNumStrided] = {Hk_, Hk_, Hv_, Hv_, Hv_, Hv_, Hv_};
    const int32_t dims[kNumStrided] = {K_, K_, V_, 1, 1, V_, V_};
    auto dt = [](int32_t d) { return d >= 0 && d <= 2 ? d : int32_t(GDN_DTYPE_F32); };
    const int32_t in = dt(raw(eff_.input_dtype)), gate = dt(raw(eff_.gate_dtype)), out = dt(raw(eff_.output_dtype));
    const int32_t dtypes[kNumStrided] = {in, in, in, gate, gate, out, in};
    int64_t* token_field[kNumStrided] = {&tensors_.q_token_stride, &tensors_.k_token_stride,
                                         &tensors_.v_token_stride, &tensors_.g_token_stride,
                                         &tensors_.beta_token_stride, &tensors_.out_token_stride,
                                         &tensors_.z_token_stride};
    int64_t* head_field[kNumStrided] = {&tensors_.q_head_stride, &tensors_.k_head_stride,
                                        &tensors_.v_head_stride, &tensors_.g_head_stride,
                                        &tensors_.beta_head_stride, &tensors_.out_head_stride,
                                        &tensors_.z_head_stride};
    for (int i = 0; i < kNumStrided; ++i) {
        const TensorCase& t = c_.tensor[i];
        Layout& L = lay_[i];
        L.heads = heads[i];
        L.dim = dims[i];
        L.dtype = dtypes[i];
        L.esize = esize_of(dtypes[i]);
        int64_t ts = 0, hs = 0;  // as given to the library
        const uint64_t a = uint64_t(t.token_stride), b = uint64_t(t.head_stride);
        switch (t.stride_mode % 6) {
            case 0: break;
            case 1:  // padded rows
                hs = int64_t(L.dim) + 1 + int64_t(a & 7);  // raw dims reach INT32_MAX
                ts = saturate(i128(L.heads) * hs + int64_t(b & 7));
                break;
            case 2:  // head-major: [head][token][dim]
                ts = int64_t(L.dim) + int64_t(a & 3);
                hs = saturate(i128(T_) * ts + int64_t(b & 3));
                break;
            case 3:  // a view into a fused projection row (row strides like 6145)
                hs = L.dim;
                ts = saturate(i128(L.heads) * L.dim + 1 + int64_t(a % 4099));
                break;
            case 4:
                ts = t.token_stride;
                hs = t.head_stride;
                break;
            case 5:
                ts = int16_t(a & 0xffff);
                hs = int16_t(b & 0xffff);
                break;
        }
        *token_field[i] = ts;
        *head_field[i] = hs;
        L.negative = ts < 0 || hs < 0;
        L.head = hs == 0 ? L.dim : hs;
        L.token = ts == 0 ? saturate(i128(L.heads) * L.head) : ts;
        L.extent = L.negative ? 0 : i128(T_ - 1) * L.token + i128(L.heads - 1) * L.head + L.dim;
    }
    const TensorCase& s = c_.state;
    const int64_t slot = saturate(i128(Hv_) * K_ * V_);  // raw head dims may be huge
    switch (s.stride_mode % 3) {
        case 0: tensors_.state_slot_stride = 0; break;
        case 1: tensors_.state_slot_stride = saturate(i128(slot) + int64_t(uint64_t(s.token_stride) & 63)); break;
        case 2: tensors_.state_slot_stride = s.token_stride; break;
    }
    // As the library reads it: a struct_size that ends at state_slot_stride
    // drops it (0: one slot apart), and the pool is sized for that, not for
    // the stride as given (found by the fuzzer: a pool sized for a stride
    // shorter than a slot, which the run, one slot apart, read past).
    const int64_t effective_stride = effective(tensors_).state_slot_stride;
    slot_stride_ = effective_stride == 0 ? slot : effective_stride;
}

// The bytes from buffer b's pointer that the run may read or write, by the
// present sizes, strides and slot stride (a negative stride's extent is 0).
i128 Harness::extent_bytes(int b) const {
    if (b < kNumStrided) return lay_[b].extent * i128(lay_[b].esize);
    switch (b) {
        case kBufState: return (i128(slots_ - 1) * slot_stride_ + i128(Hv_) * K_ * V_) * 4;
        case kBufCuSeqlens: return (i128(n_) + 1) * 4;
        case kBufStateIndices: return i128(n_) * 4;
        case kBufStartFromZero: return i128(n_);
        case kBufNormWeight: return i128(V_) * 4;
        case kBufTokenStates: return i128(T_) * 4;
        default: return i128(Hv_) * 4;  // A_log, dt_bias
    }
}

void Harness::build_buffers() {
    // The budget: everything the run could touch must fit, or the run is
    // made only when a fault stops it first.
    sizes_ok_ = problem_ok_ && n_ <= kMaxSeqs && i128(T_) * Hv_ * K_ * V_ <= kMaxWork;
    i128 needed[kNumBuffers] = {};  // -1: no extent (a negative stride, no slot stride)
    for (int b = 0; b < kNumBuffers; ++b) {
        const bool none = b < kNumStrided ? lay_[b].negative : b == kBufState && slot_stride_ <= 0;
        needed[b] = none ? -1 : extent_bytes(b);
        if (needed[b] <= 0 || needed[b] > kMaxBufferBytes) sizes_ok_ = false;
    }

    for (int b = 0; b < kNumBuffers; ++b) {
        const size_t extent = sizes_ok_ ? size_t(needed[b]) : kTinyBytes;
        // Pointer modes that offset the pointer need that many more bytes.
        uint8_t mode = 0;
        if (b < kNumStrided) mode = c_.tensor[b].ptr_mode % 8;
        else if (b == kBufState) mode = c_.state.ptr_mode % 8;
        else if (b >= kBufALog && b <= kBufNormWeight) mode = c_.param_ptr_mode[b - kBufALog] % 8;
        size_t misalign = mode == 5 ? 1 : mode == 7 ? 2 : 0;
        if (b == kBufStateIndices && c_.idx_mode % 5 == 4) misalign = 2;
        if (b == kBufTokenStates && c_.tsi_mode % 5 == 4) misalign = 2;
        if (b == kBufCuSeqlens || b == kBufStartFromZero) misalign = 0;
        buf_[b].allocate(extent, misalign, b == kOut || b == kBufState);
    }
}

void Harness::fill_values() {
    const bool specials = c_.value_mode % 4 == 3;
    values_plain_ = !specials;
    const float qk = 1.0f / std::sqrt(float(std::max(K_, 1)));  // keeps k·k near 1/3: a stable recurrence
    auto fill = [&](int b, int32_t dtype, float lo, float hi) {
        Buffer& B = buf_[b];
        const size_t count = B.bytes / esize_of(dtype);
        unsigned char* p = B.ptr();
        for (size_t i = 0; i < count; ++i) {
            float x = rng_.uniform(lo, hi);
            if (specials && rng_.next() % 16 == 0) {
                static const float kSpecial[] = {NAN, INFINITY, -INFINITY, 1e30f, -1e30f, 1e-40f, 0.0f, 65536.0f};
                x = kSpecial[rng_.next() % 8];
            }
            // Through a copy: the buffer may be misaligned on purpose.
            alignas(4) unsigned char e[4];
            gdn::store_element(e, gdn_dtype_t(dtype), 0, x);
            std::memcpy(p + i * esize_of(dtype), e, esize_of(dtype));
        }
    };
    const bool raw_gate = (eff_.flags & GDN_FLAG_GATE_FROM_RAW) != 0;
    const bool logits = (eff_.flags & GDN_FLAG_BETA_FROM_LOGITS) != 0;
    fill(kQ, lay_[kQ].dtype, -qk, qk);
    fill(kK, lay_[kK].dtype, -qk, qk);
    fill(kV, lay_[kV].dtype, -1.0f, 1.0f);
    fill(kZ, lay_[kZ].dtype, -2.0f, 2.0f);
    fill(kG, lay_[kG].dtype, raw_gate ? -3.0f : -0.5f, raw_gate ? 3.0f : 0.0f);
    fill(kBeta, lay_[kBeta].dtype, logits ? -3.0f : 0.0f, logits ? 3.0f : 1.0f);
    fill(kBufState, GDN_DTYPE_F32, -0.5f, 0.5f);
    fill(kBufALog, GDN_DTYPE_F32, -1.0f, 0.5f);
    fill(kBufDtBias, GDN_DTYPE_F32, -0.5f, 0.5f);
    fill(kBufNormWeight, GDN_DTYPE_F32, 0.5f, 1.5f);
    // out keeps the pattern: a byte not written stays 0xA5.
}

void Harness::build_sequence_arrays() {
    if (!sizes_ok_) return;  // tiny buffers: their (pattern) contents are never valid arrays
    const int cm = c_.cu_mode % 5;
    if (cm != 0) {
        cu_.assign(size_t(n_) + 1, 0);
        uint64_t total = 0;
        std::vector<uint64_t> w(static_cast<size_t>(n_), 0);
        for (int32_t i = 0; i < n_; ++i) total += (w[size_t(i)] = 1u + c_.cu_bytes[i % 8]);
        uint64_t acc = 0;
        for (int32_t i = 0; i < n_; ++i) {
            acc += w[size_t(i)];
            cu_[size_t(i) + 1] = int32_t(uint64_t(T_) * acc / total);
        }
        if (cm == 2) {  // an empty sequence
            const size_t j = c_.cu_bytes[0] % size_t(n_);
            cu_[j + 1] = cu_[j];
        } else if (cm == 3) {  // one entry off
            const size_t j = c_.cu_bytes[1] % (size_t(n_) + 1);
            cu_[j] += int8_t(c_.cu_bytes[2]);
        } else if (cm == 4) {
            for (size_t i = 0; i < cu_.size(); ++i) cu_[i] = int8_t(c_.cu_bytes[i % 8]);
        }
        std::memcpy(buf_[kBufCuSeqlens].ptr(), cu_.data(), cu_.size() * 4);
    }
    const int im = c_.idx_mode % 5;
    if (im != 0) {
        idx_.assign(size_t(n_), 0);
        const int64_t r = c_.idx_bytes[0];
        for (int32_t i = 0; i < n_; ++i) {
            if (im == 3) idx_[size_t(i)] = int8_t(c_.idx_bytes[i % 8]);
            else idx_[size_t(i)] = int32_t((i + r) % slots_);
            if (im == 2 && (c_.idx_bytes[1] >> (i % 8)) & 1) idx_[size_t(i)] = -1;
        }
        std::memcpy(buf_[kBufStateIndices].ptr(), idx_.data(), idx_.size() * 4);
    }
    const int sm = c_.sfz_mode % 3;
    if (sm != 0) {
        uint8_t* p = buf_[kBufStartFromZero].ptr();
        for (int32_t i = 0; i < n_; ++i) p[i] = uint8_t(sm == 2 ? 1 : (c_.sfz_bits >> (i % 8)) & 1);
    }
    const int tm = c_.tsi_mode % 5;
    if (tm != 0) {
        tsi_.assign(size_t(T_), -1);
        if (tm == 3) {
            for (int64_t i = 0; i < T_; ++i) tsi_[size_t(i)] = int8_t(c_.tsi_bytes[i % 8]);
        } else {
            // Each sequence's tokens (clamped: cu_seqlens may be a fault of
            // its own), its own slot, and slots owned by nobody else.
            std::vector<int32_t> owner(size_t(slots_), -1);
            auto own_slot = [&](int32_t s) { return idx_.empty() ? s : idx_[size_t(s)]; };
            for (int32_t s = 0; s < n_; ++s)
                if (own_slot(s) >= 0 && own_slot(s) < slots_) owner[size_t(own_slot(s))] = s;
            std::vector<char> used(size_t(slots_), 0);
            for (int32_t s = 0; s < n_; ++s) {
                const int64_t b = cu_.empty() ? int64_t(s) * (T_ / n_) : cu_[size_t(s)];
                const int64_t e = cu_.empty() ? int64_t(s + 1) * (T_ / n_) : cu_[size_t(s) + 1];
                const int64_t lo = std::max<int64_t>(0, std::min(b, T_)), hi = std::max(lo, std::min(e, T_));
                if (tm == 2) {
                    if (hi > lo) tsi_[size_t(hi - 1)] = own_slot(s);
                    continue;
                }
                for (int64_t i = lo; i < hi; ++i) {
                    if ((c_.tsi_bytes[0] >> (i % 8)) & 1) continue;  // this token's state: not kept
                    const int32_t cand = int32_t((uint64_t(i) * 5u + c_.tsi_bytes[1 + i % 7]) % uint64_t(slots_));
                    if (used[size_t(cand)] || (owner[size_t(cand)] >= 0 && owner[size_t(cand)] != s)) continue;
                    used[size_t(cand)] = 1;
                    tsi_[size_t(i)] = cand;
                }
            }
        }
        std::memcpy(buf_[kBufTokenStates].ptr(), tsi_.data(), tsi_.size() * 4);
    }
}

void Harness::set_pointers() {
    tensors_null_ = (c_.tensors_ops & 1) != 0;
    void* own[kNumBuffers] = {};
    for (int b = 0; b < kNumBuffers; ++b) own[b] = buf_[b].ptr();
    // Whether the run certainly reads buffer b: then writing over it is a
    // fault the validator must see (and not a harness bug writing into a
    // buffer sized for something else).
    const bool norm = (eff_.flags & GDN_FLAG_OUTPUT_NORM) != 0;
    const bool raw_gate = (eff_.flags & GDN_FLAG_GATE_FROM_RAW) != 0;
    auto present = [&](size_t offset) {
        return struct_size_ok(tensors_) && tensors_.struct_size >= offset + sizeof(void*);
    };
    auto certainly_read = [&](int b) {
        switch (b) {
            case kZ: return norm;
            case kBufCuSeqlens: return c_.cu_mode % 5 != 0 && present(offsetof(gdn_tensors_t, cu_seqlens));
            case kBufStateIndices: return c_.idx_mode % 5 != 0 && present(offsetof(gdn_tensors_t, state_indices));
            case kBufStartFromZero: return c_.sfz_mode % 3 != 0 && present(offsetof(gdn_tensors_t, start_from_zero));
            case kBufALog: return raw_gate && present(offsetof(gdn_tensors_t, A_log));
            case kBufDtBias: return raw_gate && present(offsetof(gdn_tensors_t, dt_bias));
            case kBufNormWeight: return norm && present(offsetof(gdn_tensors_t, norm_weight));
            case kBufTokenStates:
                return c_.tsi_mode % 5 != 0 && present(offsetof(gdn_tensors_t, token_state_indices));
            default: return true;
        }
    };
    void* p[kNumBuffers] = {};
    auto resolve = [&](int b, uint8_t mode, uint8_t alias) -> void* {
        switch (mode % 8) {
            case 4: return nullptr;
            case 6: {  // alias: point at the start of another buffer
                const int target = alias % kNumBuffers;
                if (target == b) return own[b];
                // Over what the target tensor really reads (resolved first:
                // it may itself alias another buffer; found by the fuzzer).
                if (b == kOut || b == kBufState)
                    return certainly_read(target) && p[target] ? p[target] : own[b];
                // A read-only tensor may share a buffer it fits in (q and k,
                // say), and is then legitimately read; over out or state it
                // is a fault.
                if (buf_[target].bytes < buf_[b].bytes) return own[b];
                return own[target];
            }
            default: return own[b];  // modes 5 and 7 are in the buffer's misalignment
        }
    };
    // What is read first, then what is written (out, state) over it.
    p[kBufCuSeqlens] = c_.cu_mode % 5 == 0 ? nullptr : own[kBufCuSeqlens];
    p[kBufStateIndices] = c_.idx_mode % 5 == 0 ? nullptr : own[kBufStateIndices];
    p[kBufStartFromZero] = c_.sfz_mode % 3 == 0 ? nullptr : own[kBufStartFromZero];
    p[kBufTokenStates] = c_.tsi_mode % 5 == 0 ? nullptr : own[kBufTokenStates];
    for (int j = 0; j < 3; ++j) p[kBufALog + j] = resolve(kBufALog + j, c_.param_ptr_mode[j], uint8_t(j));
    for (int i = 0; i < kNumStrided; ++i)
        if (i != kOut) p[i] = resolve(i, c_.tensor[i].ptr_mode, c_.tensor[i].alias);
    p[kOut] = resolve(kOut, c_.tensor[kOut].ptr_mode, c_.tensor[kOut].alias);
    p[kBufState] = resolve(kBufState, c_.state.ptr_mode, c_.state.alias);

    tensors_.q = p[kQ];
    tensors_.k = p[kK];
    tensors_.v = p[kV];
    tensors_.g = p[kG];
    tensors_.beta = p[kBeta];
    tensors_.out = p[kOut];
    tensors_.z = p[kZ];
    tensors_.state = static_cast<float*>(p[kBufState]);
    tensors_.cu_seqlens = static_cast<const int32_t*>(p[kBufCuSeqlens]);
    tensors_.state_indices = static_cast<const int32_t*>(p[kBufStateIndices]);
    tensors_.start_from_zero = static_cast<const uint8_t*>(p[kBufStartFromZero]);
    tensors_.A_log = static_cast<const float*>(p[kBufALog]);
    tensors_.dt_bias = static_cast<const float*>(p[kBufDtBias]);
    tensors_.norm_weight = static_cast<const float*>(p[kBufNormWeight]);
    tensors_.token_state_indices = static_cast<const int32_t*>(p[kBufTokenStates]);
}

// The faults of this call, read off the effective structs as the library
// must read them (a truncated tensors struct drops its optional fields).
void Harness::derive_faults() {
    if (tensors_null_) fatal("tensors is NULL");
    else if (!struct_size_ok(tensors_)) fatal("tensors->struct_size");
    eff_tensors_ = effective(tensors_);
    const gdn_tensors_t& e = eff_tensors_;
    cu_null_ = e.cu_seqlens == nullptr;
    idx_null_ = e.state_indices == nullptr;
    sfz_null_ = e.start_from_zero == nullptr;
    tsi_null_ = e.token_state_indices == nullptr;
    if (!problem_ok_ || tensors_null_ || !struct_size_ok(tensors_)) return;

    const void* ptr[kNumBuffers] = {e.q, e.k, e.v, e.g, e.beta, e.out, e.z, e.state,
                                    e.cu_seqlens, e.state_indices, e.start_from_zero,
                                    e.A_log, e.dt_bias, e.norm_weight, e.token_state_indices};
    size_t align[kNumBuffers] = {};
    for (int i = 0; i < kNumStrided; ++i) align[i] = lay_[i].esize;
    for (int b = kBufState; b < kNumBuffers; ++b) align[b] = 4;
    align[kBufStartFromZero] = 1;
    bool optional[kNumBuffers] = {false, false, false, false, false, false, false, false,
                                  true,  true,  true};
    optional[kBufTokenStates] = true;  // NULL with the flag: below
    for (int b = 0; b < kNumBuffers; ++b) {
        if (!in_use(b)) continue;  // z and the parameters without their flag, NULL arrays
        if (ptr[b] == nullptr) {
            if (!optional[b]) fatal(std::string(buffer_name(b)) + " is NULL");
        } else if (reinterpret_cast<uintptr_t>(ptr[b]) % align[b] != 0) {
            fatal(std::string(buffer_name(b)) + " misaligned");
        }
    }
    // Strides: never negative, never smaller than the row they step over.
    for (int i = 0; i < kNumStrided; ++i) {
        if (!in_use(i)) continue;
        const Layout& L = lay_[i];
        if (L.negative) fatal(std::string(buffer_name(i)) + ": a negative stride");
        else if (L.heads > 1 && L.head < L.dim) fatal(std::string(buffer_name(i)) + ".head_stride < its row");
        else if (T_ > 1 && L.token < L.dim) fatal(std::string(buffer_name(i)) + ".token_stride < its row");
    }
    // Rows of out must not overlap one another: it is written.
    const Layout& O = lay_[kOut];
    if (!O.negative && i128(T_) * O.heads <= 4096) {
        std::vector<i128> starts;
        for (int64_t t = 0; t < T_; ++t)
            for (int32_t h = 0; h < O.heads; ++h) starts.push_back(i128(t) * O.token + i128(h) * O.head);
        std::sort(starts.begin(), starts.end());
        for (size_t j = 1; j < starts.size(); ++j)
            if (starts[j] - starts[j - 1] < O.dim) {
                fatal("out rows overlap");
                break;
            }
    }
    const int64_t slot = saturate(i128(Hv_) * K_ * V_);
    if (e.state_slot_stride < 0) fatal("state_slot_stride < 0");
    slot_stride_ = e.state_slot_stride == 0 ? slot : e.state_slot_stride;
    if (slots_ > 1 && slot_stride_ < slot) fatal("state_slot_stride < one slot");

    // What is written (out, state) must not overlap anything the run reads:
    // certain when two pointers are equal; with real buffers, by range.
    auto range = [&](int b) -> std::pair<i128, i128> {
        const i128 begin = i128(reinterpret_cast<uintptr_t>(ptr[b]));
        return {begin, begin + extent_bytes(b)};
    };
    for (int w : {int(kOut), int(kBufState)}) {
        if (ptr[w] == nullptr) continue;
        for (int b = 0; b < kNumBuffers; ++b) {
            if (b == w || ptr[b] == nullptr || !in_use(b)) continue;
            if (w == kBufState && b == kOut) continue;  // the out/state pair is covered from the out side
            bool overlap = ptr[w] == ptr[b];
            if (!overlap && sizes_ok_) {
                const auto a = range(w), r = range(b);
                overlap = a.first < r.second && r.first < a.second;
            }
            if (overlap) fatal(std::string(buffer_name(w)) + " overlaps " + buffer_name(b));
        }
    }

    if (cu_null_) {
        if (T_ % n_ != 0) fatal("cu_seqlens NULL, num_tokens not a multiple of num_seqs");
        else if (T_ / n_ > max_seqlen_) fatal("cu_seqlens NULL, num_tokens / num_seqs > max_seqlen");
    }
    if (idx_null_ && slots_ < n_) fatal("num_state_slots < num_seqs without state_indices");
    if (token_states() && tsi_null_) fatal("token_state_indices NULL with GDN_FLAG_TOKEN_STATES");
    if (!token_states() && !tsi_null_) fatal("token_state_indices set without GDN_FLAG_TOKEN_STATES");

    // The contents of the per-sequence arrays (the CPU backend checks them).
    if (!cu_null_ && !cu_.empty()) {
        if (cu_[0] != 0) content_fault("cu_seqlens[0] != 0");
        for (int32_t i = 0; i < n_; ++i) {
            const int64_t len = int64_t(cu_[size_t(i) + 1]) - cu_[size_t(i)];
            if (len < 0) content_fault("cu_seqlens decreases");
            else if (len > max_seqlen_) content_fault("a sequence longer than max_seqlen");
        }
        if (cu_[size_t(n_)] != T_) content_fault("cu_seqlens[num_seqs] != num_tokens");
    }
    if (!idx_null_ && !idx_.empty()) {
        std::vector<int32_t> used;
        for (int32_t v : idx_) {
            if (v >= slots_) content_fault("a state index >= num_state_slots");
            if (v >= 0) used.push_back(v);
        }
        std::sort(used.begin(), used.end());
        if (std::adjacent_find(used.begin(), used.end()) != used.end()) content_fault("two sequences name one slot");
    }
    // Per-token slots (their own rules only where cu_seqlens and the slots
    // are sound: the library checks those first).
    if (token_states() && !tsi_null_ && !tsi_.empty() && content_why_.empty()) {
        for (int32_t s = 0; s < n_; ++s)
            for (int64_t i = seq_begin(s); i < seq_begin(s + 1); ++i)
                if (tsi_read(s, i) && tsi_[size_t(i)] >= slots_)
                    content_fault("a token state index >= num_state_slots");
        if (content_why_.empty()) {
            std::vector<int32_t> owner(size_t(slots_), -1), writes(size_t(slots_), 0);
            for (int32_t s = 0; s < n_; ++s) {
                const int32_t own = idx_null_ ? s : idx_[size_t(s)];
                if (own >= 0 && own < slots_) owner[size_t(own)] = s;  // (slots_ < num_seqs: a fault of its own)
            }
            for (int32_t s = 0; s < n_; ++s) {
                if (!idx_null_ && idx_[size_t(s)] < 0) continue;  // padding writes nothing
                for (int64_t i = seq_begin(s); i < seq_begin(s + 1); ++i) {
                    const int32_t v = tsi_[size_t(i)];
                    if (v < 0 || !tsi_read(s, i)) continue;
                    if (owner[size_t(v)] >= 0 && owner[size_t(v)] != s) content_fault("a token names another sequence's slot");
                    if (writes[size_t(v)]++) content_fault("two tokens name one slot");
                }
            }
        }
    }
}

void Harness::describe() {
    char s[640];
    const gdn_problem_t& p = eff_;
    std::snprintf(s, sizeof s,
                  "T=%lld seqs=%d max_seqlen=%lld Hk=%d Hv=%d K=%d V=%d map=%d dtypes(in,gate,out)=%d,%d,%d "
                  "layout=%d slots=%d algo=%d prec=%d flags=0x%x | strides q(%lld,%lld) k(%lld,%lld) "
                  "v(%lld,%lld) g(%lld,%lld) beta(%lld,%lld) out(%lld,%lld) z(%lld,%lld) slot %lld | "
                  "cu %s idx %s sfz %s tsi %s | sizes_ok=%d fault=\"%s\" content=\"%s\"",
                  (long long)p.num_tokens, p.num_seqs, (long long)p.max_seqlen, p.num_k_heads, p.num_v_heads,
                  p.head_dim_k, p.head_dim_v, raw(p.head_mapping), raw(p.input_dtype), raw(p.gate_dtype),
                  raw(p.output_dtype), raw(p.state_layout), p.num_state_slots, raw(p.algorithm),
                  raw(p.precision), p.flags, (long long)tensors_.q_token_stride,
                  (long long)tensors_.q_head_stride, (long long)tensors_.k_token_stride,
                  (long long)tensors_.k_head_stride, (long long)tensors_.v_token_stride,
                  (long long)tensors_.v_head_stride, (long long)tensors_.g_token_stride,
                  (long long)tensors_.g_head_stride, (long long)tensors_.beta_token_stride,
                  (long long)tensors_.beta_head_stride, (long long)tensors_.out_token_stride,
                  (long long)tensors_.out_head_stride, (long long)tensors_.z_token_stride,
                  (long long)tensors_.z_head_stride, (long long)tensors_.state_slot_stride,
                  cu_null_ ? "NULL" : "set", idx_null_ ? "NULL" : "set", sfz_null_ ? "NULL" : "set",
                  tsi_null_ ? "NULL" : "set",
                  int(sizes_ok_), fatal_why_.c_str(), content_why_.c_str());
    g_context = s;
}

void Harness::call_workspace_size() {
    const gdn_caps_t* caps = caps_null_ ? nullptr : &caps_;
    const gdn_problem_t* problem = problem_null_ ? nullptr : &problem_;
    size_t bytes = kSentinel;
    const gdn_status_t st = gdn_workspace_size(caps, problem, &bytes);
    check_status("gdn_workspace_size", st);
    if (st != GDN_SUCCESS) {
        if (bytes != kSentinel) violation("gdn_workspace_size failed but wrote *bytes");
        // The library's own verdict on caps + problem: the run must fail too,
        // before it reads any data.
        fatal(std::string("gdn_workspace_size failed: ") + gdn_last_error());
        need_ = 0;
    } else {
        if (caps_null_ || problem_null_ || !problem_ok_ || fatal_why_.rfind("caps", 0) == 0 ||
            fatal_why_.rfind("problem", 0) == 0)
            violation("gdn_workspace_size accepted an invalid call (%s)", fatal_why_.c_str());
        need_ = bytes;
    }
    if (gdn_workspace_size(caps, problem, nullptr) != GDN_ERROR_INVALID_ARGUMENT)
        violation("gdn_workspace_size(bytes = NULL) was not GDN_ERROR_INVALID_ARGUMENT");

    // The workspace the run gets, honestly sized.
    auto align_up = [](unsigned char* p) {
        return p + (GDN_WORKSPACE_ALIGNMENT - reinterpret_cast<uintptr_t>(p) % GDN_WORKSPACE_ALIGNMENT) %
                       GDN_WORKSPACE_ALIGNMENT;
    };
    if (need_ > size_t(kMaxWorkspaceBytes)) {
        workspace_.allocate(2 * GDN_WORKSPACE_ALIGNMENT, 0, true);
        ws_ptr_ = align_up(workspace_.ptr());
        ws_bytes_ = GDN_WORKSPACE_ALIGNMENT;
        fatal("a workspace smaller than gdn_workspace_size()");
        return;
    }
    const int wm = c_.workspace_mode % 6;
    size_t given = need_;
    if (wm == 1) given = need_ + 1 + c_.value_seed % 1000;
    if (wm == 2 && need_ > 0) given = need_ - 1;
    workspace_.allocate(given + GDN_WORKSPACE_ALIGNMENT + 16, 0, true);
    unsigned char* aligned = align_up(workspace_.ptr());
    ws_ptr_ = aligned;
    ws_bytes_ = given;
    switch (wm) {
        case 2:
            if (need_ > 0) fatal("workspace one byte short");
            break;
        case 3:
            ws_ptr_ = nullptr;
            if (need_ > 0) fatal("workspace NULL");
            break;
        case 4:
            ws_ptr_ = aligned + 16;
            fatal("workspace misaligned");
            break;
        case 5:
            ws_ptr_ = nullptr;
            ws_bytes_ = 0;
            if (need_ > 0) fatal("workspace NULL, 0 bytes");
            break;
        default: break;
    }
    describe();
}

void Harness::call_select_path() {
    for (int with_tensors = 0; with_tensors < 2; ++with_tensors) {
        gdn_path_info_t info;
        std::memset(&info, 0x5A, sizeof info);
        gdn_path_info_init(&info);
        const gdn_path_info_t before = info;
        const gdn_status_t st =
            gdn_select_path(caps_null_ ? nullptr : &caps_, problem_null_ ? nullptr : &problem_,
                            with_tensors && !tensors_null_ ? &tensors_ : nullptr, &info);
        check_status("gdn_select_path", st);
        if (st != GDN_SUCCESS) {
            if (std::memcmp(&info, &before, sizeof info) != 0) violation("gdn_select_path failed but wrote info");
        } else {
            if (info.path != GDN_PATH_SEQUENTIAL && info.path != GDN_PATH_CHUNKED_FP32 &&
                info.path != GDN_PATH_CHUNKED_LOWP_C16 && info.path != GDN_PATH_CHUNKED_TC)
                violation("gdn_select_path chose path %d", int(info.path));
            if (std::memchr(info.reason, '\0', sizeof info.reason) == nullptr || info.reason[0] == '\0')
                violation("gdn_select_path: reason empty or not terminated");
        }
        if (with_tensors) {
            path_status_ = tensors_null_ ? GDN_ERROR_INVALID_ARGUMENT : st;
            info_ = info;
        }
    }
}

void Harness::call_run() {
    // A GPU backend may be compiled in (a CUDA build): never hand it host
    // pointers.
    if (!GDN_FUZZ_CPU_ONLY && !caps_null_ && struct_size_ok(caps_) &&
        raw(effective(caps_).backend) != GDN_BACKEND_CPU)
        return;
    if (!sizes_ok_ && fatal_why_.empty()) return;  // a valid call we cannot afford to back with memory

    std::vector<std::vector<unsigned char>> before(kNumBuffers);
    for (int b = 0; b < kNumBuffers; ++b) before[size_t(b)] = buf_[b].mem;
    const std::vector<unsigned char> ws_before = workspace_.mem;

    const gdn_status_t st =
        gdn_chunked_recurrence(caps_null_ ? nullptr : &caps_, problem_null_ ? nullptr : &problem_,
                               tensors_null_ ? nullptr : &tensors_, ws_ptr_, ws_bytes_, nullptr);
    check_status("gdn_chunked_recurrence", st);

    for (int b = 0; b < kNumBuffers; ++b) {
        if (b == kOut || b == kBufState) continue;
        if (buf_[b].mem != before[size_t(b)])
            violation("gdn_chunked_recurrence (%s) wrote into input %s", gdn_status_string(st), buffer_name(b));
    }
    if (st != GDN_SUCCESS) {
        if (buf_[kOut].mem != before[kOut]) violation("failed (%s) but wrote out", gdn_status_string(st));
        if (buf_[kBufState].mem != before[kBufState]) violation("failed (%s) but wrote state", gdn_status_string(st));
        if (workspace_.mem != ws_before) violation("failed (%s) but wrote the workspace", gdn_status_string(st));
        return;
    }
    if (!fatal_why_.empty()) violation("gdn_chunked_recurrence accepted an invalid call: %s", fatal_why_.c_str());
    if (!content_why_.empty()) violation("gdn_chunked_recurrence accepted bad contents: %s", content_why_.c_str());
    if (path_status_ != GDN_SUCCESS) violation("the run succeeded where gdn_select_path(tensors) failed");

    // The workspace: nothing outside [workspace, workspace + bytes).
    const size_t ws_begin = size_t(static_cast<unsigned char*>(ws_ptr_) - workspace_.mem.data());
    for (size_t i = 0; i < workspace_.mem.size(); ++i)
        if ((i < ws_begin || i >= ws_begin + ws_bytes_) && workspace_.mem[i] != kPattern)
            violation("workspace byte %zd (relative to the pointer) written outside [0, %zu)",
                      ptrdiff_t(i) - ptrdiff_t(ws_begin), ws_bytes_);
    check_written_regions(before[kBufState]);
    compare_with_reference(before[kBufState]);
}

// After a successful run: only out rows of real sequences and the slots
// they name are written.
void Harness::check_written_regions(const std::vector<unsigned char>& state_before) {
    std::vector<int64_t> bos(size_t(n_) + 1);
    for (int32_t i = 0; i <= n_; ++i) bos[size_t(i)] = cu_null_ ? int64_t(i) * (T_ / n_) : cu_[size_t(i)];
    std::vector<unsigned char> out_ok(buf_[kOut].mem.size(), 0), state_ok(buf_[kBufState].mem.size(), 0);
    const Layout& O = lay_[kOut];
    const size_t row = size_t(V_) * O.esize, slot = size_t(Hv_) * K_ * V_ * 4;
    for (int32_t s = 0; s < n_; ++s) {
        const int32_t slot_index = idx_null_ ? s : idx_[size_t(s)];
        if (slot_index < 0) continue;  // padding: nothing written
        for (int64_t t = bos[size_t(s)]; t < bos[size_t(s) + 1]; ++t)
            for (int32_t h = 0; h < Hv_; ++h) {
                const size_t off = buf_[kOut].begin + size_t(t * O.token + h * O.head) * O.esize;
                std::fill(out_ok.begin() + ptrdiff_t(off), out_ok.begin() + ptrdiff_t(off + row), 1);
            }
        // The slot it names, or with per-token states the slots its tokens name.
        std::vector<int32_t> written{slot_index};
        if (token_states()) {
            written.clear();
            for (int64_t t = bos[size_t(s)]; t < bos[size_t(s) + 1]; ++t)
                if (tsi_[size_t(t)] >= 0 && tsi_read(s, t)) written.push_back(tsi_[size_t(t)]);
        }
        for (int32_t w : written) {
            const size_t off = buf_[kBufState].begin + size_t(int64_t(w) * slot_stride_) * 4;
            std::fill(state_ok.begin() + ptrdiff_t(off), state_ok.begin() + ptrdiff_t(off + slot), 1);
        }
    }
    const std::vector<unsigned char>& out = buf_[kOut].mem;
    for (size_t i = 0; i < out.size(); ++i)
        if (!out_ok[i] && out[i] != kPattern)
            violation("out byte %zd (relative to out) written outside the rows of real sequences",
                      ptrdiff_t(i) - ptrdiff_t(buf_[kOut].begin));
    const std::vector<unsigned char>& st = buf_[kBufState].mem;
    for (size_t i = 0; i < st.size(); ++i)
        if (!state_ok[i] && st[i] != state_before[i])
            violation("state byte %zd (relative to state) written outside the slots of real sequences",
                      ptrdiff_t(i) - ptrdiff_t(buf_[kBufState].begin));
}

// Plain values, no output norm (it divides by rms(o), which amplifies
// tiny differences when o is near zero), an FP32 path: out and state must
// match the FP64 reference.
void Harness::compare_with_reference(const std::vector<unsigned char>& state_before) {
    if (!values_plain_ || (eff_.flags & GDN_FLAG_OUTPUT_NORM) != 0) return;
    // A raw scale can be 2e12: out then overflows an f16 (found by the fuzzer).
    if (c_.raw_fields & kRawFloats) return;
    // Only inputs in the ranges the math assumes (g <= 0, beta in [0, 1],
    // small k): a read-only tensor aliasing another buffer reads its values
    // (g from v: e^g > 1, a state that grows without bound, found by the
    // fuzzer as a 3.7e-4 mismatch at max|state| 697).
    const void* own[] = {tensors_.q, tensors_.k, tensors_.v, tensors_.g, tensors_.beta};
    for (int i = 0; i < 5; ++i)
        if (own[i] != buf_[i].ptr()) return;
    if (info_.path != GDN_PATH_SEQUENTIAL && info_.path != GDN_PATH_CHUNKED_FP32) return;
    gdn::Shape shape;
    gdn::Tensors x;
    if (gdn::read_problem(&problem_, &shape) != GDN_SUCCESS || gdn::read_tensors(shape, &tensors_, &x) != GDN_SUCCESS)
        violation("the run succeeded, but reading its structs again failed");
    const size_t state_elems = buf_[kBufState].bytes / 4;
    std::vector<double> ref_state(state_elems);
    for (size_t i = 0; i < state_elems; ++i) {
        float f;
        std::memcpy(&f, state_before.data() + buf_[kBufState].begin + 4 * i, 4);
        ref_state[i] = f;
    }
    std::vector<double> ref_out(size_t(T_) * size_t(Hv_) * size_t(V_), 0.0);
    gdn::ref::run(shape, x, ref_out.data(), ref_state.data());

    std::vector<int64_t> bos(size_t(n_) + 1);
    for (int32_t i = 0; i <= n_; ++i) bos[size_t(i)] = cu_null_ ? int64_t(i) * (T_ / n_) : cu_[size_t(i)];
    const Layout& O = lay_[kOut];
    const double out_tol = O.dtype == GDN_DTYPE_F32 ? 1e-4 : O.dtype == GDN_DTYPE_F16 ? 2e-3 : 1e-2;
    double ref_max = 1e-3, worst = 0.0;
    int64_t worst_t = -1;
    int32_t worst_h = 0, worst_j = 0;
    double worst_got = 0, worst_want = 0;
    for (double r : ref_out) ref_max = std::max(ref_max, std::fabs(r));
    for (int32_t s = 0; s < n_; ++s) {
        if (!idx_null_ && idx_[size_t(s)] < 0) continue;
        for (int64_t t = bos[size_t(s)]; t < bos[size_t(s) + 1]; ++t)
            for (int32_t h = 0; h < Hv_; ++h)
                for (int32_t j = 0; j < V_; ++j) {
                    const double got = gdn::load_element(buf_[kOut].ptr(), gdn_dtype_t(O.dtype),
                                                         t * O.token + h * O.head + j);
                    const double want = ref_out[(size_t(t) * size_t(Hv_) + size_t(h)) * size_t(V_) + size_t(j)];
                    const double d = std::fabs(got - want);
                    if (!(d <= worst)) {
                        worst = d;
                        worst_t = t, worst_h = h, worst_j = j, worst_got = got, worst_want = want;
                    }
                }
    }
    if (!(worst <= out_tol * ref_max))
        violation("out[t=%lld][h=%d][%d] = %.9g, the FP64 reference says %.9g (|diff| %.3g > %.1g * max|ref| %.3g, path %d)",
                  (long long)worst_t, worst_h, worst_j, worst_got, worst_want, worst, out_tol, ref_max,
                  int(info_.path));
    double state_max = 1e-3, state_worst = 0.0;
    size_t state_at = 0;
    const float* st = reinterpret_cast<const float*>(buf_[kBufState].ptr());
    for (size_t i = 0; i < state_elems; ++i) state_max = std::max(state_max, std::fabs(ref_state[i]));
    // Element i of the library's pool against element `want` of the
    // reference's. With per-token states the reference (a plain run) has
    // each sequence's final state in its own slot, and the library in the
    // slot its last token names (if any; other slots: the unit tests).
    auto check_element = [&](size_t i, size_t want) {
        float f;
        std::memcpy(&f, st + i, 4);
        const double d = std::fabs(double(f) - ref_state[want]);
        if (!(d <= state_worst)) state_worst = d, state_at = i;
    };
    if (!token_states()) {
        for (size_t i = 0; i < state_elems; ++i) check_element(i, i);
    } else {
        const size_t slot = size_t(Hv_) * K_ * V_;
        for (int32_t s = 0; s < n_; ++s) {
            const int32_t own_slot = idx_null_ ? s : idx_[size_t(s)];
            if (own_slot < 0 || bos[size_t(s) + 1] == bos[size_t(s)]) continue;
            const int32_t last = tsi_[size_t(bos[size_t(s) + 1] - 1)];
            if (last < 0) continue;
            for (size_t e = 0; e < slot; ++e)
                check_element(size_t(int64_t(last) * slot_stride_) + e, size_t(int64_t(own_slot) * slot_stride_) + e);
        }
    }
    if (!(state_worst <= 1e-4 * state_max))
        violation("state element %zu differs from the FP64 reference by %.3g (max|ref| %.3g, path %d)", state_at,
                  state_worst, state_max, int(info_.path));
}

}  // namespace

void run_case(const FuzzCase& c) {
    Harness h(c);
    h.run();
}

}  // namespace gdn_fuzz
