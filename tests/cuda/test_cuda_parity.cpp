// Parity of the CUDA paths with the FP64 recurrence (DESIGN.md §5): the
// chunked path at T = 1..4099 (every remainder mod 32, each scan tiling),
// 8192 and 32768, from a non-zero state, within 2e-6 (max|diff|/max|ref|) for
// output and final state; the sequential kernel within 2e-6 of FP64 too; the
// two within 1e-4 of each other.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>

#include "cuda_support.hpp"

using namespace gdn_cuda_test;

namespace {

constexpr double kVsFp64 = 2e-6;
constexpr double kChunkedVsSequential = 1e-4;

// Runs `algo` on tokens [0, T) of a one-sequence device problem (from the
// initial state) and returns out rows [0, T) and the state, as FP32.
struct Result {
    std::vector<float> out, state;
};
Result run_prefix(DeviceProblem& d, const gdn_caps_t& caps, const DeviceWorkspace& ws, int64_t T,
                  gdn_algorithm_t algo, gdn_precision_t precision = GDN_PRECISION_FP32) {
    gdn_problem_t p = d.host.problem;
    p.num_tokens = T;
    p.max_seqlen = 0;
    p.algorithm = algo;
    p.precision = precision;
    gdn_tensors_t t = d.tensors();
    t.cu_seqlens = nullptr;
    d.reset_state();
    d.fill_out_nan();
    const gdn_status_t st = gdn_chunked_recurrence(&caps, &p, &t, ws.data(), ws.size(), nullptr);
    INFO(gdn_last_error());
    REQUIRE(st == GDN_SUCCESS);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    const Spec& s = d.host.spec;
    REQUIRE(s.output == GDN_DTYPE_F32);
    Result r;
    r.out.resize(size_t(T) * s.hv * s.v);
    d.out.download(r.out.data(), r.out.size() * 4);
    r.state.resize(d.state.size() / 4);
    d.state.download(r.state.data(), d.state.size());
    return r;
}

template <class W>
Comparison compare_vec(const std::vector<float>& got, const std::vector<W>& want, size_t n,
                       double rel) {
    std::vector<W> w(want.begin(), want.begin() + std::ptrdiff_t(n));
    std::vector<float> g(got.begin(), got.begin() + std::ptrdiff_t(n));
    Bound b;
    b.rel_max = rel;
    return compare(g, w, nullptr, b, [](size_t i) { return "element " + std::to_string(i); });
}

// The FP64 recurrence of a one-sequence problem, advanced segment by
// segment: outputs of every token so far, and the state after the last one.
class IncrementalReference {
public:
    explicit IncrementalReference(Problem& p) : p_(p) {
        REQUIRE(p.normalised(&shape_, &x_));
        out_.assign(size_t(p.T) * p.spec.hv * p.spec.v, 0.0);
        state_.assign(p.state_initial.begin(), p.state_initial.end());
    }
    void advance_to(int64_t T) {
        if (T <= done_) return;
        gdn::Shape s = shape_;
        s.num_seqs = 1;
        s.num_tokens = T - done_;
        s.max_seqlen = T - done_;
        gdn::Tensors x = x_;
        auto shift = [&](const void* b, int64_t tok_stride, gdn_dtype_t dt) -> const void* {
            return b ? static_cast<const char*>(b) + done_ * tok_stride * int64_t(gdn::dtype_size(dt))
                     : nullptr;
        };
        x.q = shift(x_.q, x_.q_stride.token, shape_.input_dtype);
        x.k = shift(x_.k, x_.k_stride.token, shape_.input_dtype);
        x.v = shift(x_.v, x_.v_stride.token, shape_.input_dtype);
        x.z = shift(x_.z, x_.z_stride.token, shape_.input_dtype);
        x.g = shift(x_.g, x_.g_stride.token, shape_.gate_dtype);
        x.beta = shift(x_.beta, x_.beta_stride.token, shape_.gate_dtype);
        x.cu_seqlens = nullptr;
        gdn::ref::run(s, x, out_.data() + done_ * p_.spec.hv * p_.spec.v, state_.data());
        done_ = T;
    }
    const std::vector<double>& out() const { return out_; }
    const std::vector<double>& state() const { return state_; }

private:
    Problem& p_;
    gdn::Shape shape_;
    gdn::Tensors x_;
    std::vector<double> out_, state_;
    int64_t done_ = 0;
};

struct Worst {
    double value = 0.0;
    int64_t at = 0;
    void add(double v, int64_t T) {
        if (v > value) value = v, at = T;
    }
};

// The chunked call in `precision` (BF16 by default) on the first T tokens of d against FP64
// (its output within bound_out, its state within bound_state); the errors into the worst
// cases. (The caller's INFO names the case.)
void check_prefix(DeviceProblem& d, const gdn_caps_t& caps, const DeviceWorkspace& ws,
                  IncrementalReference& ref, int64_t T, double bound_out, double bound_state,
                  Worst& worst_out, Worst& worst_state, gdn_precision_t precision = GDN_PRECISION_BF16) {
    const Spec& spec = d.host.spec;
    ref.advance_to(T);
    const Result r = run_prefix(d, caps, ws, T, GDN_ALGO_CHUNKED, precision);
    const Comparison co = compare_vec(r.out, ref.out(), size_t(T) * spec.hv * spec.v, bound_out);
    const Comparison cs = compare_vec(r.state, ref.state(), ref.state().size(), bound_state);
    INFO(describe(co, "out vs FP64"));
    INFO(describe(cs, "state vs FP64"));
    CHECK(co.ok());
    CHECK(cs.ok());
    worst_out.add(co.rel(), T);
    worst_state.add(cs.rel(), T);
}

// The tensor-core sweeps' lengths: 1..70, then every 63rd (63 = -1 mod 32) to 4067, then
// 4090..4099.
std::vector<int64_t> tc_sweep_lengths() {
    std::vector<int64_t> lengths;
    for (int64_t T = 1; T <= 70; ++T) lengths.push_back(T);
    for (int64_t T = 71; T < 4068; T += 63) lengths.push_back(T);
    for (int64_t T = 4090; T <= 4099; ++T) lengths.push_back(T);
    return lengths;
}

}  // namespace

TEST_CASE("chunked and sequential match FP64 at T = 1..4099, every remainder mod 32",
          "[cuda][parity]") {
    Spec spec;
    spec.seq_lens = {4099};
    spec.hk = 1;
    spec.hv = 3;
    spec.k = spec.v = 128;
    spec.seed = 31;
    Problem p(spec);
    DeviceProblem d(p);
    IncrementalReference ref(p);
    gdn_caps_t caps = cuda_caps();
    DeviceWorkspace ws;
    REQUIRE(ws.size_for(caps, with_algorithm(p.problem, GDN_ALGO_CHUNKED)) == GDN_SUCCESS);

    std::vector<int64_t> lengths;
    for (int64_t T = 1; T <= 130; ++T) lengths.push_back(T);
    for (int64_t T = 131; T < 4068; T += 31) lengths.push_back(T);  // 31 = -1 mod 32: every remainder
    for (int64_t T = 4068; T <= 4099; ++T) lengths.push_back(T);

    // The scan's column tiling follows the SM count: 12 SMs -> 32 columns
    // per block, 8 -> 48, 6 -> 64 (Hk = 1, G·V = 384). Rotate through them.
    const int32_t sm_counts[] = {8, 12, 6};
    Worst chunk_out, chunk_state, seq_out, seq_state, diff_out, diff_state;
    size_t i = 0;
    for (int64_t T : lengths) {
        gdn_caps_t c = caps;
        c.multiprocessor_count = sm_counts[i++ % 3];
        ref.advance_to(T);
        const Result chunked = run_prefix(d, c, ws, T, GDN_ALGO_CHUNKED);
        const Result seq = run_prefix(d, c, ws, T, GDN_ALGO_SEQUENTIAL);
        const size_t n_out = size_t(T) * spec.hv * spec.v;
        const Comparison co = compare_vec(chunked.out, ref.out(), n_out, kVsFp64);
        const Comparison cs = compare_vec(chunked.state, ref.state(), ref.state().size(), kVsFp64);
        const Comparison so = compare_vec(seq.out, ref.out(), n_out, kVsFp64);
        const Comparison ss = compare_vec(seq.state, ref.state(), ref.state().size(), kVsFp64);
        const Comparison xo = compare_vec(chunked.out, seq.out, n_out, kChunkedVsSequential);
        const Comparison xs =
            compare_vec(chunked.state, seq.state, seq.state.size(), kChunkedVsSequential);
        INFO("T = " << T << ", SMs = " << c.multiprocessor_count);
        INFO(describe(co, "chunked out vs FP64"));
        INFO(describe(cs, "chunked state vs FP64"));
        INFO(describe(so, "sequential out vs FP64"));
        INFO(describe(ss, "sequential state vs FP64"));
        INFO(describe(xo, "chunked vs sequential out"));
        INFO(describe(xs, "chunked vs sequential state"));
        REQUIRE(co.ok());
        REQUIRE(cs.ok());
        REQUIRE(so.ok());
        REQUIRE(ss.ok());
        REQUIRE(xo.ok());
        REQUIRE(xs.ok());
        chunk_out.add(co.rel(), T);
        chunk_state.add(cs.rel(), T);
        seq_out.add(so.rel(), T);
        seq_state.add(ss.rel(), T);
        diff_out.add(xo.rel(), T);
        diff_state.add(xs.rel(), T);
    }
    std::printf(
        "parity sweep (%zu lengths, Hk 1, Hv 3, K = V = 128), worst max|diff|/max|ref|:\n"
        "  chunked vs FP64     out %.3g (T %lld)  state %.3g (T %lld)\n"
        "  sequential vs FP64  out %.3g (T %lld)  state %.3g (T %lld)\n"
        "  chunked vs seq      out %.3g (T %lld)  state %.3g (T %lld)\n",
        lengths.size(), chunk_out.value, (long long)chunk_out.at, chunk_state.value,
        (long long)chunk_state.at, seq_out.value, (long long)seq_out.at, seq_state.value,
        (long long)seq_state.at, diff_out.value, (long long)diff_out.at, diff_state.value,
        (long long)diff_state.at);
}

TEST_CASE("chunked and sequential match FP64 at 8192 and 32768 tokens, Hk 16, Hv 48",
          "[cuda][parity][long]") {
    const gdn_caps_t caps = cuda_caps();
    for (int32_t T : {8192, 32768}) {
        Spec spec;
        spec.seq_lens = {T};
        spec.hk = 16;
        spec.hv = 48;
        spec.k = spec.v = 128;
        spec.seed = 7 + uint64_t(T);
        Problem p(spec);
        DeviceProblem d(p);
        const Reference ref = reference_parallel(p);
        DeviceWorkspace ws;
        REQUIRE(ws.size_for(caps, with_algorithm(p.problem, GDN_ALGO_CHUNKED)) == GDN_SUCCESS);
        const Result chunked = run_prefix(d, caps, ws, T, GDN_ALGO_CHUNKED);
        const Result seq = run_prefix(d, caps, ws, T, GDN_ALGO_SEQUENTIAL);
        const size_t n_out = chunked.out.size();
        const Comparison co = compare_vec(chunked.out, ref.out, n_out, kVsFp64);
        const Comparison cs = compare_vec(chunked.state, ref.state, ref.state.size(), kVsFp64);
        const Comparison so = compare_vec(seq.out, ref.out, n_out, kVsFp64);
        const Comparison ss = compare_vec(seq.state, ref.state, ref.state.size(), kVsFp64);
        const Comparison xo = compare_vec(chunked.out, seq.out, n_out, kChunkedVsSequential);
        const Comparison xs = compare_vec(chunked.state, seq.state, seq.state.size(), kChunkedVsSequential);
        std::printf("parity T = %d (Hk 16, Hv 48, K = V = 128): chunked vs FP64 out %.3g state %.3g; "
                    "sequential vs FP64 out %.3g state %.3g; chunked vs sequential out %.3g state %.3g\n",
                    T, co.rel(), cs.rel(), so.rel(), ss.rel(), xo.rel(), xs.rel());
        INFO("T = " << T);
        INFO(describe(co, "chunked out vs FP64"));
        INFO(describe(cs, "chunked state vs FP64"));
        INFO(describe(so, "sequential out vs FP64"));
        INFO(describe(ss, "sequential state vs FP64"));
        INFO(describe(xo, "chunked vs sequential out"));
        INFO(describe(xs, "chunked vs sequential state"));
        CHECK(co.ok());
        CHECK(cs.ok());
        CHECK(so.ok());
        CHECK(ss.ok());
        CHECK(xo.ok());
        CHECK(xs.ok());
    }
}

// The tensor-core chunked path (GDN_PATH_CHUNKED_TC) in each precision:
// TF32X3 and BF16X3 (split BF16 operands: two terms, three where they set
// the error; where its scan does not fit, the TF32X3 one serves it) within
// issue 7's near-FP32 bound (1e-5), for bf16 and f32 inputs alike (f32
// inputs are split too): the H200 measured BF16X3 at <= 4.7e-6 / 6.4e-6
// (out / state) in the sweep, <= 5.3e-6 at 8K and 32K (2026-11-30, c7920a5);
// FP16X3, BF16X3 on FP16 terms (an FP16 value and one or two unscaled FP16
// remainders: FP32-class, ~3e-7..8e-7 expected), within the FP32 paths'
// 2e-6 (kVsFp64), for f32 and bf16 inputs alike (where its scan does not fit,
// TF32X3 serves it: <= 1.2e-6 measured, within the same bound);
// BF16/FP16 operands within
// the bf16-kernel class: with bf16 inputs at most flash-linear-attention's
// bf16 error (~5e-3, METHOD.md); f32 inputs are rounded to BF16 operands
// too (q, k on top of the state and D), measured up to 5.9e-3 on the H200
// (2026-11-29), hence 8e-3 for them.
namespace {
struct TcMode {
    const char* name;
    gdn_precision_t precision;
    double bound;
    double bound_f32_inputs;
};
const TcMode kTcModes[] = {{"TF32X3", GDN_PRECISION_TF32X3, 1e-5, 1e-5},
                           {"BF16", GDN_PRECISION_BF16, 5e-3, 8e-3},
                           {"FP16", GDN_PRECISION_FP16, 1e-3, 1e-3},
                           {"BF16X3", GDN_PRECISION_BF16X3, 1e-5, 1e-5},
                           {"FP16X3", GDN_PRECISION_FP16X3, kVsFp64, kVsFp64}};
constexpr int kNumTcModes = int(sizeof kTcModes / sizeof kTcModes[0]);

// One workspace for every mode: the largest of their scratch layouts
// (BF16X3's and FP16X3's hold BF16's / FP16's and the remainders).
void size_for_tc_modes(DeviceWorkspace& ws, const gdn_caps_t& caps, const gdn_problem_t& problem) {
    size_t most = 0;
    for (const TcMode& m : kTcModes) {
        gdn_problem_t p = with_algorithm(problem, GDN_ALGO_CHUNKED);
        p.precision = m.precision;
        size_t need = 0;
        INFO(m.name);
        REQUIRE(gdn_workspace_size(&caps, &p, &need) == GDN_SUCCESS);
        most = std::max(most, need);
    }
    ws.buf.resize(most);
}

// What the dispatch picks for d's problem as a chunked BF16 call (its reason in INFO).
gdn_path_info_t bf16_chunked_path(DeviceProblem& d, const gdn_caps_t& caps) {
    gdn_problem_t q = with_algorithm(d.host.problem, GDN_ALGO_CHUNKED);
    q.precision = GDN_PRECISION_BF16;
    const gdn_tensors_t t = d.tensors();
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    REQUIRE(gdn_select_path(&caps, &q, &t, &info) == GDN_SUCCESS);
    return info;
}

// The fused path's lengths in the strong-decay and key-length cases: around one and two chunks.
const std::vector<int64_t> kFusedPrefixes = {17, 63, 64, 130, 1000};

// spec's one sequence through the fused BF16 path (which the dispatch must pick) at each
// prefix in `lengths`, against FP64, from spec's non-zero state; the worst printed after
// `what`. The output within the BF16 bound of bf16 inputs (kTcModes); the state within
// 6e-3: the fused path rounds T diag(β), P, Sᵀ and D2 to one BF16 term each (the C = 32
// path keeps two for T diag(β) and P), which puts its state at up to 5.5e-3 in the parity
// sweep (H200, run 164), where flash-linear-attention's bf16 kernels reach ~5e-3
// (docs/perf-notes.md v46: the same class).
void check_fused_prefixes(const gdn_caps_t& caps, const Spec& spec, const std::string& what,
                          const std::vector<int64_t>& lengths = kFusedPrefixes) {
    constexpr double kBound = 5e-3, kBoundState = 6e-3;
    Problem p(spec);
    DeviceProblem d(p);
    IncrementalReference ref(p);
    DeviceWorkspace ws;
    size_for_tc_modes(ws, caps, p.problem);
    {
        const gdn_path_info_t info = bf16_chunked_path(d, caps);
        INFO(info.reason);
        REQUIRE(info.chunk_size == 64);
    }
    Worst worst_out, worst_state;
    for (int64_t T : lengths) {
        INFO(what << ", T = " << T);
        check_prefix(d, caps, ws, ref, T, kBound, kBoundState, worst_out, worst_state);
    }
    std::printf("%s: worst out %.3g (T %lld) state %.3g (T %lld), bounds %.0e / %.0e\n", what.c_str(),
                worst_out.value, (long long)worst_out.at, worst_state.value, (long long)worst_state.at, kBound,
                kBoundState);
}
}  // namespace

TEST_CASE("tensor-core chunked path matches FP64 at T = 1..4099 in every precision",
          "[cuda][parity][tc]") {
    Spec spec;
    spec.seq_lens = {4099};
    spec.hk = 1;
    spec.hv = 3;
    spec.k = spec.v = 128;
    spec.seed = 41;
    Problem p(spec);
    DeviceProblem d(p);
    IncrementalReference ref(p);
    const gdn_caps_t caps = cuda_caps();
    DeviceWorkspace ws;
    size_for_tc_modes(ws, caps, p.problem);

    const std::vector<int64_t> lengths = tc_sweep_lengths();

    // 48, 32, 64 columns per block for the shared-memory scan (TF32X3); the
    // register-state scan (BF16, FP16, BF16X3, FP16X3) takes 64 at each.
    const int32_t sm_counts[] = {8, 12, 6};
    Worst worst_out[kNumTcModes], worst_state[kNumTcModes];
    size_t i = 0;
    for (int64_t T : lengths) {
        gdn_caps_t c = caps;
        c.multiprocessor_count = sm_counts[i++ % 3];
        ref.advance_to(T);
        const size_t n_out = size_t(T) * spec.hv * spec.v;
        for (int m = 0; m < kNumTcModes; ++m) {
            const Result r = run_prefix(d, c, ws, T, GDN_ALGO_CHUNKED, kTcModes[m].precision);
            const double bound = kTcModes[m].bound_f32_inputs;  // this problem's inputs are f32
            const Comparison co = compare_vec(r.out, ref.out(), n_out, bound);
            const Comparison cs = compare_vec(r.state, ref.state(), ref.state().size(), bound);
            INFO("T = " << T << ", SMs = " << c.multiprocessor_count << ", " << kTcModes[m].name);
            INFO(describe(co, "out vs FP64"));
            INFO(describe(cs, "state vs FP64"));
            CHECK(co.ok());
            CHECK(cs.ok());
            worst_out[m].add(co.rel(), T);
            worst_state[m].add(cs.rel(), T);
        }
    }
    for (int m = 0; m < kNumTcModes; ++m)
        std::printf("tc parity sweep %-6s (%zu lengths, Hk 1, Hv 3, f32 inputs): worst out %.3g (T %lld) "
                    "state %.3g (T %lld), bound %.0e\n",
                    kTcModes[m].name, lengths.size(), worst_out[m].value, (long long)worst_out[m].at,
                    worst_state[m].value, (long long)worst_state[m].at, kTcModes[m].bound_f32_inputs);
}

// FP16X3 on its exact input type: f16 q/k/v are FP16 values already (no
// remainders of their own; only the state and the prep's products are split),
// from a non-zero state, at every length 1..70 and every 63rd up to 4099,
// within the FP32 paths' 2e-6 of FP64 (kTcModes' FP16X3 bound), as BF16X3 runs
// bf16 inputs in the sweep above. The path's precision is printed: where the
// split scan does not fit, TF32X3 serves it (within the same bound).
TEST_CASE("tensor-core chunked path: FP16X3 on f16 inputs matches FP64 at T = 1..4099",
          "[cuda][parity][tc]") {
    Spec spec;
    spec.seq_lens = {4099};
    spec.hk = 1;
    spec.hv = 3;
    spec.k = spec.v = 128;
    spec.input = GDN_DTYPE_F16;
    spec.seed = 45;
    Problem p(spec);
    DeviceProblem d(p);
    IncrementalReference ref(p);
    const gdn_caps_t caps = cuda_caps();
    DeviceWorkspace ws;
    size_for_tc_modes(ws, caps, p.problem);
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    {
        gdn_problem_t q = with_algorithm(p.problem, GDN_ALGO_CHUNKED);
        q.precision = GDN_PRECISION_FP16X3;
        REQUIRE(gdn_select_path(&caps, &q, nullptr, &info) == GDN_SUCCESS);
        INFO(info.reason);
        CHECK(info.path == GDN_PATH_CHUNKED_TC);
        CHECK((info.precision == GDN_PRECISION_FP16X3 || info.precision == GDN_PRECISION_TF32X3));
    }

    const std::vector<int64_t> lengths = tc_sweep_lengths();
    const int32_t sm_counts[] = {8, 12, 6};
    Worst worst_out, worst_state;
    size_t i = 0;
    for (int64_t T : lengths) {
        gdn_caps_t c = caps;
        c.multiprocessor_count = sm_counts[i++ % 3];
        INFO("T = " << T << ", SMs = " << c.multiprocessor_count << ", FP16X3, f16 inputs");
        check_prefix(d, c, ws, ref, T, kVsFp64, kVsFp64, worst_out, worst_state, GDN_PRECISION_FP16X3);
    }
    std::printf("tc parity sweep FP16X3 (%zu lengths, Hk 1, Hv 3, f16 inputs; ran as %s): worst out %.3g "
                "(T %lld) state %.3g (T %lld), bound %.0e\n",
                lengths.size(), info.precision == GDN_PRECISION_FP16X3 ? "FP16X3" : "TF32X3",
                worst_out.value, (long long)worst_out.at, worst_state.value, (long long)worst_state.at,
                kVsFp64);
}

// FP16X3 on bf16 inputs (0.6.4, docs/perf-notes.md v107): a bf16 value (times
// a power of two) is an FP16 value and a zero FP16 remainder, so the prep
// writes no k/q remainders for bf16 inputs and the scan takes no product with
// a remainder of k, q or v. The same values as f32 inputs (every q, k, v, z
// rounded to bf16 first) still take those products, with remainders that are
// all zero: the two calls must give the same bits, output and state, at
// lengths that miss the chunk and from a non-zero state; the plain shape also
// within 2e-6 of FP64. Two shapes: plain, and every input transform with the
// output norm. (Where FP16X3's scan does not fit the device, TF32X3 serves
// both, whose bits this case does not claim: it says so and checks nothing.)
TEST_CASE("tensor-core chunked path: FP16X3 on bf16 inputs gives the bits of the same values as f32",
          "[cuda][parity][tc]") {
    const gdn_caps_t caps = cuda_caps();
    for (const uint32_t flags : {0u, unsigned(GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW |
                                              GDN_FLAG_BETA_FROM_LOGITS | GDN_FLAG_OUTPUT_NORM)}) {
        Spec spec;
        spec.seq_lens = {1100};
        spec.hk = 1;
        spec.hv = 3;
        spec.k = spec.v = 128;
        spec.flags = flags;
        spec.seed = 47;
        spec.input = GDN_DTYPE_BF16;
        Problem pb(spec);
        spec.input = GDN_DTYPE_F32;
        Problem pf(spec);
        // pf's inputs to pb's values: the same draws (one seed), rounded to bf16.
        for (Bytes* b : {&pf.q, &pf.k, &pf.v, &pf.z}) {
            float* x = b->as<float>();
            for (size_t i = 0; i < b->size() / 4; ++i) x[i] = gdn::round_to_bf16(x[i]);
        }
        REQUIRE(pb.state_initial == pf.state_initial);
        DeviceProblem db(pb), df(pf);
        DeviceWorkspace ws;
        size_for_tc_modes(ws, caps, pf.problem);  // f32 inputs need the larger scratch
        gdn_path_info_t info;
        gdn_path_info_init(&info);
        gdn_problem_t q = with_algorithm(pb.problem, GDN_ALGO_CHUNKED);
        q.precision = GDN_PRECISION_FP16X3;
        REQUIRE(gdn_select_path(&caps, &q, nullptr, &info) == GDN_SUCCESS);
        if (info.precision != GDN_PRECISION_FP16X3) {
            std::printf("FP16X3 bf16 / f32 bits (flags %u): skipped: %s\n", flags, info.reason);
            continue;
        }
        IncrementalReference ref(pb);
        int64_t differing = 0;
        Result last;  // the bf16 call at 1100 tokens
        for (const int64_t T : {int64_t(1), int64_t(31), int64_t(32), int64_t(33), int64_t(97),
                                int64_t(1100)}) {
            const Result rb = run_prefix(db, caps, ws, T, GDN_ALGO_CHUNKED, GDN_PRECISION_FP16X3);
            last = rb;
            const Result rf = run_prefix(df, caps, ws, T, GDN_ALGO_CHUNKED, GDN_PRECISION_FP16X3);
            INFO("T = " << T << ", flags " << flags);
            REQUIRE(rb.out.size() == rf.out.size());
            REQUIRE(rb.state.size() == rf.state.size());
            for (const auto* pair : {&rb.out, &rb.state}) {
                const std::vector<float>& a = *pair;
                const std::vector<float>& b = pair == &rb.out ? rf.out : rf.state;
                for (size_t i = 0; i < a.size(); ++i)
                    if (std::memcmp(&a[i], &b[i], 4) != 0) {
                        if (differing++ == 0)
                            UNSCOPED_INFO("first difference: " << (pair == &rb.out ? "out" : "state")
                                                               << " element " << i << ": bf16 " << a[i]
                                                               << ", f32 " << b[i]);
                    }
            }
            CHECK(differing == 0);
            if (flags == 0) {
                ref.advance_to(T);
                const Comparison co = compare_vec(rb.out, ref.out(), size_t(T) * spec.hv * spec.v, kVsFp64);
                const Comparison cs = compare_vec(rb.state, ref.state(), ref.state().size(), kVsFp64);
                INFO(describe(co, "out vs FP64"));
                INFO(describe(cs, "state vs FP64"));
                CHECK(co.ok());
                CHECK(cs.ok());
            }
        }
        std::printf("FP16X3 bf16 / f32 bits (flags %u, T 1..1100): %lld elements differ\n", flags,
                    (long long)differing);
        // A rerun over a NaN-filled workspace gives the same bits.
        ws.fill_nan();
        const Result again = run_prefix(db, caps, ws, 1100, GDN_ALGO_CHUNKED, GDN_PRECISION_FP16X3);
        CHECK(again.out.size() == last.out.size());
        CHECK(std::memcmp(again.out.data(), last.out.data(), 4 * std::min(again.out.size(), last.out.size())) == 0);
        CHECK(std::memcmp(again.state.data(), last.state.data(), 4 * std::min(again.state.size(), last.state.size())) == 0);
    }
}

// The fused BF16 path (C = 64; sm_90 builds with its sm_90a code): BF16
// q/k/v, K = V = 128, G = 3; f32 gates as stored, then the input transforms
// (q/k L2 norm, raw gate, β from logits, bf16 g and β). Every length 1..130
// (each remainder mod 64, one and two chunks), then every 61st up to 4099
// (61 = -3 mod 64), from a non-zero state, within the BF16 bound of bf16
// inputs.
TEST_CASE("fused BF16 path matches FP64 at T = 1..4099, every remainder mod 64",
          "[cuda][parity][tc][fused]") {
    const gdn_caps_t caps = cuda_caps();
    std::vector<int64_t> lengths;
    for (int64_t T = 1; T <= 130; ++T) lengths.push_back(T);
    for (int64_t T = 191; T < 4099; T += 61) lengths.push_back(T);
    lengths.push_back(4099);
    for (const bool transforms : {false, true}) {
        Spec spec;
        spec.seq_lens = {4099};
        spec.hk = 1;
        spec.hv = 3;
        spec.k = spec.v = 128;
        spec.input = GDN_DTYPE_BF16;
        spec.seed = 43;
        if (transforms) {
            spec.gate = GDN_DTYPE_BF16;
            spec.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS;
            spec.seed = 44;
        }
        if (!(caps.features & GDN_FEATURE_WGMMA)) {
            // No fused path here: the dispatch must say C = 32 (the parity sweep
            // above covers that path).
            Problem p(spec);
            DeviceProblem d(p);
            const gdn_path_info_t info = bf16_chunked_path(d, caps);
            INFO(info.reason);
            CHECK(info.chunk_size == 32);
            std::printf("fused parity: %s has no fused path (no sm_90a code): C = 32 serves BF16\n", caps.arch);
            return;
        }
        std::ostringstream what;
        what << "fused parity sweep, " << (transforms ? "l2norm, raw gate, beta logits, bf16 gates" : "f32 gates")
             << " (" << lengths.size() << " lengths, Hk 1, Hv 3, bf16 inputs)";
        check_fused_prefixes(caps, spec, what.str(), lengths);
    }
}

// The fused path's prep forms A's and P's decays e^{γ_t − γ_i} without the denormal
// guard: a decay below 2^-126 is flushed to 0 (docs/perf-notes.md v52), and only the
// blocks on and below the diagonal are formed. Strong gates make such decays common
// inside a chunk: g ~ U(−4, −0.01) in the chunk's later rows, U(−12, −0.01) beyond a few
// tokens. Both with and without the q/k L2 norm (whose ln kf terms join the exponents),
// from a non-zero state, against FP64, at lengths around the chunk and beyond one.
TEST_CASE("fused BF16 path with strong decays (flushed to zero inside a chunk) matches FP64",
          "[cuda][parity][tc][fused]") {
    const gdn_caps_t caps = cuda_caps();
    if (!(caps.features & GDN_FEATURE_WGMMA)) {
        std::printf("fused strong decays: skipped: %s has no fused path (no sm_90a code)\n", caps.arch);
        return;
    }
    for (const double g_lo : {-4.0, -12.0})
        for (const bool norm : {false, true}) {
            Spec spec;
            spec.seq_lens = {1000};
            spec.hk = 1;
            spec.hv = 3;
            spec.k = spec.v = 128;
            spec.input = GDN_DTYPE_BF16;
            spec.g_lo = g_lo;
            spec.seed = norm ? 46 : 45;
            if (norm) spec.flags = GDN_FLAG_QK_L2NORM;
            std::ostringstream what;
            what << "fused strong decays, g ~ U(" << g_lo << ", -0.01), " << (norm ? "l2norm" : "no norm");
            check_fused_prefixes(caps, spec, what.str());
        }
}

// With the q/k L2 norm the fused prep's A is kf_t kf_i k_t·k_i (times β_t and the decay): a
// cosine whatever the keys' lengths, which is what lets the solve merge T's blocks on FP16
// operands under the norm (GDN_FUSED64_F16_SOLVE=1, off by default: perf-notes v114; this
// case passed on that build in docs/cuda.md run 304). Keys whose lengths span 10^-3 ...
// 10^3 times the usual (~0.03 to ~3e4) token by token, so that neighbours in a chunk
// differ by up to 10^6: kf from k·kᵀ's diagonal and A over that range, with the f32 gates
// and with the input transforms (the NORM and NORM/GX instances), from a non-zero state,
// against FP64.
TEST_CASE("fused BF16 path with the q/k L2 norm: keys of lengths 10^-3 to 10^3 times the usual match FP64",
          "[cuda][parity][tc][fused]") {
    const gdn_caps_t caps = cuda_caps();
    if (!(caps.features & GDN_FEATURE_WGMMA)) {
        std::printf("fused key lengths: skipped: %s has no fused path (no sm_90a code)\n", caps.arch);
        return;
    }
    for (const bool transforms : {false, true}) {
        Spec spec;
        spec.seq_lens = {1000};
        spec.hk = 1;
        spec.hv = 3;
        spec.k = spec.v = 128;
        spec.input = GDN_DTYPE_BF16;
        spec.flags = GDN_FLAG_QK_L2NORM;
        spec.key_log10_spread = 3.0;
        spec.seed = transforms ? 51 : 50;
        if (transforms) {
            spec.gate = GDN_DTYPE_BF16;
            spec.flags |= GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS;
        }
        check_fused_prefixes(caps, spec,
                             std::string("fused key lengths 10^U(-3, 3), l2norm, ") +
                                 (transforms ? "raw gate, beta logits, bf16 gates" : "f32 gates"));
    }
}

// The fused path writes 16-bit outputs as 8-byte stores of four columns after two
// lane exchanges where the output allows (8-byte aligned, strides multiples of 4
// elements), and one element a store otherwise (perf-notes v50): both must give the
// same bits, at every chunk remainder (sequences of 1 ... 130 tokens in one call),
// and write every row (the feature cases check that padding rows stay untouched).
TEST_CASE("fused BF16 path: 16-bit outputs by 8-byte and by 2-byte stores give the same bits",
          "[cuda][tc][fused]") {
    const gdn_caps_t caps = cuda_caps();
    if (!(caps.features & GDN_FEATURE_WGMMA)) {
        std::printf("fused output stores: %s has no fused path (no sm_90a code): not applicable\n", caps.arch);
        return;
    }
    for (const gdn_dtype_t out_dt : {GDN_DTYPE_BF16, GDN_DTYPE_F16}) {
        std::vector<std::vector<float>> outs;
        for (const int64_t pad : {0, 4, 2}) {  // 8-byte stores (packed, then strided), 2-byte
            Spec s;
            s.seq_lens.clear();  // (Spec's default is one 64-token sequence)
            for (int32_t L = 1; L <= 130; ++L) s.seq_lens.push_back(L);
            s.hk = 1, s.hv = 3, s.k = s.v = 128;
            s.input = GDN_DTYPE_BF16;
            s.output = out_dt;
            s.out_row_pad = pad;
            s.precision = GDN_PRECISION_BF16;
            s.algorithm = GDN_ALGO_CHUNKED;
            s.seed = 45;
            Problem p(s);
            DeviceProblem d(p);
            DeviceWorkspace ws;
            REQUIRE(ws.size_for(caps, p.problem) == GDN_SUCCESS);
            const gdn_tensors_t t = d.tensors();
            gdn_path_info_t info;
            gdn_path_info_init(&info);
            REQUIRE(gdn_select_path(&caps, &p.problem, &t, &info) == GDN_SUCCESS);
            INFO("output row pad " << pad << ": " << info.reason);
            REQUIRE(info.chunk_size == 64);
            const gdn_status_t st = run(d, p.problem, caps, ws);
            INFO(gdn_last_error());
            REQUIRE(st == GDN_SUCCESS);
            GDN_CUDA_CHECK(cudaDeviceSynchronize());
            d.download();
            outs.push_back(p.out_f32());
            size_t unwritten = 0;
            for (float x : outs.back()) unwritten += std::isnan(x) ? 1 : 0;
            CHECK(unwritten == 0);
            INFO(d.guard_damage());
            CHECK(d.guard_damage().empty());
        }
        for (size_t i = 1; i < outs.size(); ++i) {
            REQUIRE(outs[i].size() == outs[0].size());
            size_t differ = 0;
            for (size_t e = 0; e < outs[0].size(); ++e)
                differ += std::memcmp(&outs[i][e], &outs[0][e], sizeof(float)) != 0 ? 1 : 0;
            INFO((out_dt == GDN_DTYPE_BF16 ? "bf16" : "f16") << " out, layout " << i << " against packed");
            CHECK(differ == 0);
        }
        std::printf("fused output stores, %s out: 130 sequences, packed / strided / 2-byte rows, %zu values each\n",
                    out_dt == GDN_DTYPE_BF16 ? "bf16" : "f16", outs[0].size());
    }
}

// Where a call's (sequence, value head) pairs fit one wave as clusters of four CTAs, the
// fused path takes them (two pairs that each carry the whole state, every CTA preparing
// every fourth chunk; perf-notes v98) instead of a pair per (sequence, head): the same
// arithmetic, so the same bits. The first k sequences of a batch alone (k x 4 (sequence, head)
// pairs: clusters of four) against the whole batch of 40 (160: pairs), without and with the
// input transforms (the
// NORM/GX instances), f32 and 16-bit outputs, from a non-zero state; lengths around the
// chunk, an empty sequence, and 4099 tokens.
TEST_CASE("fused BF16 path: clusters of four (few heads) and pairs give the same bits", "[cuda][tc][fused]") {
    const gdn_caps_t caps = cuda_caps();
    if (!(caps.features & GDN_FEATURE_WGMMA)) {
        std::printf("fused clusters of four: %s has no fused path (no sm_90a code): not applicable\n", caps.arch);
        return;
    }
    for (const bool transforms : {false, true}) {
        Spec s;
        s.seq_lens = {1000, 64, 4099, 1, 130, 0, 65, 777};
        while (s.seq_lens.size() < 40) s.seq_lens.push_back(int32_t(37 * s.seq_lens.size() % 300));
        s.hk = 2, s.hv = 4, s.k = s.v = 128;
        s.input = GDN_DTYPE_BF16;
        s.output = transforms ? GDN_DTYPE_BF16 : GDN_DTYPE_F32;
        s.precision = GDN_PRECISION_BF16;
        s.algorithm = GDN_ALGO_CHUNKED;
        s.seed = transforms ? 48 : 47;
        if (transforms) {
            s.gate = GDN_DTYPE_BF16;
            s.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS;
        }
        Problem p(s);
        DeviceProblem d(p);
        DeviceWorkspace ws;
        REQUIRE(ws.size_for(caps, p.problem) == GDN_SUCCESS);
        // (quad: whether the dispatch must say it takes clusters of four; -1: either.)
        auto call = [&](const gdn_problem_t& q, int quad) {
            const gdn_tensors_t t = d.tensors();
            gdn_path_info_t info;
            gdn_path_info_init(&info);
            REQUIRE(gdn_select_path(&caps, &q, &t, &info) == GDN_SUCCESS);
            INFO(info.reason);
            REQUIRE(info.chunk_size == 64);
            const bool four = std::string(info.reason).find("clusters of four") != std::string::npos;
            if (quad >= 0) REQUIRE(four == (quad == 1));
            if (quad < 0) std::printf("fused clusters of four: %d sequences x %d heads: %s\n", q.num_seqs, s.hv,
                                      four ? "clusters of four" : "pairs");
            d.reset_state();
            d.fill_out_nan();
            const gdn_status_t st = run(d, q, caps, ws);
            INFO(gdn_last_error());
            REQUIRE(st == GDN_SUCCESS);
            GDN_CUDA_CHECK(cudaDeviceSynchronize());
            d.download();
        };
        call(p.problem, 0);  // 160 (sequence, head) pairs: more than one wave of clusters of four
        const std::vector<unsigned char> out_all = p.out.snapshot(), state_all = p.state.snapshot();
        const size_t row = size_t(s.hv) * s.v * (s.output == GDN_DTYPE_F32 ? 4 : 2);
        const size_t slot = size_t(p.slot_stride) * 4;
        for (const int32_t k : {1, 3, 8}) {
            gdn_problem_t q = p.problem;
            q.num_seqs = k;
            q.num_tokens = p.cu_seqlens[size_t(k)];
            q.max_seqlen = 0;
            call(q, k <= 3 ? 1 : -1);  // (4 or 12 clusters of four always fit one wave)
            const size_t ob = size_t(q.num_tokens) * row, sb = size_t(k) * slot;
            INFO((transforms ? "l2norm, raw gate, beta logits, bf16 out" : "f32 out") << ", the first " << k
                                                                                      << " sequences alone");
            CHECK(std::memcmp(p.out.data(), out_all.data(), ob) == 0);
            CHECK(std::memcmp(p.state.data(), state_all.data(), sb) == 0);
            INFO(d.guard_damage());
            CHECK(d.guard_damage().empty());
        }
    }
    std::printf("fused clusters of four: the first 1, 3, 8 of 40 sequences alone give the batch's bits\n");
}

// A batch whose (sequence, value head) pairs take several waves of the fused grid runs its
// rows longest sequence first (a one-block kernel orders them into the workspace; the
// fused kernel reads each row's tokens, slot and zero-start flag from there): the
// sequences' bits must not change. Lengths rising to the longest last, so the order is far
// from the identity; a pool with padding entries (NaN rows) and zero starts; an empty
// zero-start sequence. Against each sequence run alone (one wave: rows in index order),
// directly and from a CUDA graph, whose two kernel nodes show the order kernel ran.
TEST_CASE("fused BF16 path: a batch of several waves runs longest sequence first with each sequence's bits",
          "[cuda][tc][fused]") {
    const gdn_caps_t caps = cuda_caps();
    if (!(caps.features & GDN_FEATURE_WGMMA)) {
        std::printf("fused row order: %s has no fused path (no sm_90a code): not applicable\n", caps.arch);
        return;
    }
    Spec s;
    const int32_t n = 40;
    s.seq_lens.clear();  // (Spec's default is one 64-token sequence)
    for (int32_t i = 0; i < n; ++i) s.seq_lens.push_back(5 + 13 * i);
    s.seq_lens[30] = 0;      // empty, from zero
    s.seq_lens[n - 1] = 2100;
    for (int32_t i = 0; i < n; ++i) s.state_indices.push_back((7 * i + 3) % n);
    s.state_indices[4] = s.state_indices[33] = -1;  // padding entries
    for (int32_t i = 0; i < n; ++i) s.start_from_zero.push_back(uint8_t(i % 3 == 0 || i == 30));
    s.nan_in_padding = true;
    s.hk = 2, s.hv = 8, s.k = s.v = 128;  // 320 (sequence, head) pairs: several waves
    s.input = GDN_DTYPE_BF16;
    s.output = GDN_DTYPE_F32;
    s.precision = GDN_PRECISION_BF16;
    s.algorithm = GDN_ALGO_CHUNKED;
    s.seed = 49;
    Problem p(s);
    DeviceProblem d(p);
    DeviceWorkspace ws;
    REQUIRE(ws.size_for(caps, p.problem) == GDN_SUCCESS);
    {
        const gdn_tensors_t t = d.tensors();
        gdn_path_info_t info;
        gdn_path_info_init(&info);
        REQUIRE(gdn_select_path(&caps, &p.problem, &t, &info) == GDN_SUCCESS);
        INFO(info.reason);
        REQUIRE(info.chunk_size == 64);
    }
    ws.fill_nan();
    d.reset_state();
    d.fill_out_nan();
    {
        const gdn_status_t st = run(d, p.problem, caps, ws);
        INFO(gdn_last_error());
        REQUIRE(st == GDN_SUCCESS);
    }
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    d.download();
    const std::vector<unsigned char> out_all = p.out.snapshot(), state_all = p.state.snapshot();
    INFO(d.guard_damage());
    CHECK(d.guard_damage().empty());

    // The same call from a graph: two kernels (the order, then the fused kernel), the same bits.
    {
        cudaStream_t stream;
        GDN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        d.reset_state(stream);
        d.fill_out_nan(stream);
        cudaGraph_t graph;
        REQUIRE(capture(d, p.problem, caps, ws, stream, &graph) == GDN_SUCCESS);
        size_t nodes = 0;
        GDN_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
        CHECK(nodes == 2);
        cudaGraphExec_t exec;
        GDN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        GDN_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
        GDN_CUDA_CHECK(cudaGraphExecDestroy(exec));
        GDN_CUDA_CHECK(cudaGraphDestroy(graph));
        GDN_CUDA_CHECK(cudaStreamDestroy(stream));
        d.download();
        CHECK(p.out.snapshot() == out_all);
        CHECK(p.state.snapshot() == state_all);
    }

    // Every live row written; the padding entries' rows left as they were (NaN).
    const size_t row = size_t(s.hv) * s.v * 4, slot = size_t(p.slot_stride) * 4;
    size_t live_nan = 0, padding_written = 0;
    for (int32_t i = 0; i < n; ++i)
        for (size_t b = size_t(p.cu_seqlens[size_t(i)]) * row; b < size_t(p.cu_seqlens[size_t(i) + 1]) * row; b += 4) {
            float x;
            std::memcpy(&x, &out_all[b], 4);
            if (s.state_indices[size_t(i)] >= 0) live_nan += std::isnan(x) ? 1 : 0;
            else padding_written += std::isnan(x) ? 0 : 1;
        }
    CHECK(live_nan == 0);
    CHECK(padding_written == 0);

    // Each of these sequences alone (one wave: no order kernel) gives the batch's bits.
    for (const int32_t j : {n - 1, 0, 1, 17, 29, 30, 38}) {
        gdn_tensors_t t = d.tensors();
        t.cu_seqlens += j, t.state_indices += j, t.start_from_zero += j;
        gdn_problem_t q = p.problem;
        q.num_seqs = 1;
        q.max_seqlen = 0;
        d.reset_state();
        d.fill_out_nan();
        const gdn_status_t st = run(t, q, caps, ws);
        INFO("sequence " << j << " alone: " << gdn_last_error());
        REQUIRE(st == GDN_SUCCESS);
        GDN_CUDA_CHECK(cudaDeviceSynchronize());
        d.download();
        const size_t o0 = size_t(p.cu_seqlens[size_t(j)]) * row, o1 = size_t(p.cu_seqlens[size_t(j) + 1]) * row;
        CHECK(std::memcmp(p.out.data() + o0, out_all.data() + o0, o1 - o0) == 0);
        const size_t sl = size_t(s.state_indices[size_t(j)]) * slot;
        CHECK(std::memcmp(p.state.data() + sl, state_all.data() + sl, slot) == 0);
    }
    std::printf("fused row order: 40 sequences x 8 heads (longest last) give each sequence's bits alone, "
                "from a graph of 2 nodes too\n");
}

TEST_CASE("tensor-core chunked path matches FP64 at 8192 and 32768 tokens, Hk 16, Hv 48",
          "[cuda][parity][tc][long]") {
    const gdn_caps_t caps = cuda_caps();
    for (int32_t T : {8192, 32768}) {
        for (gdn_dtype_t in : {GDN_DTYPE_BF16, GDN_DTYPE_F32}) {
            Spec spec;
            spec.seq_lens = {T};
            spec.hk = 16;
            spec.hv = 48;
            spec.k = spec.v = 128;
            spec.input = spec.gate = in;
            spec.seed = 9 + uint64_t(T);
            Problem p(spec);
            DeviceProblem d(p);
            const Reference ref = reference_parallel(p);
            DeviceWorkspace ws;
            size_for_tc_modes(ws, caps, p.problem);
            for (const TcMode& m : kTcModes) {
                const Result r = run_prefix(d, caps, ws, T, GDN_ALGO_CHUNKED, m.precision);
                const double bound = in == GDN_DTYPE_F32 ? m.bound_f32_inputs : m.bound;
                const Comparison co = compare_vec(r.out, ref.out, r.out.size(), bound);
                const Comparison cs = compare_vec(r.state, ref.state, ref.state.size(), bound);
                std::printf("tc parity T = %d (Hk 16, Hv 48, %s inputs) %-6s: out %.3g state %.3g vs FP64\n",
                            T, in == GDN_DTYPE_BF16 ? "bf16" : "f32", m.name, co.rel(), cs.rel());
                INFO("T = " << T << ", " << m.name);
                INFO(describe(co, "out vs FP64"));
                INFO(describe(cs, "state vs FP64"));
                CHECK(co.ok());
                CHECK(cs.ok());
            }
        }
    }
}
