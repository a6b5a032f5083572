// The CPU emulation of the HIP gfx11 path's numerics (C = 16, every product
// on FP16 operands with FP32 accumulation, FP32 state) against FP64, within
// the HIP bounds of DESIGN.md §5: relative RMS of out and of the final state
// <= 0.003, max|diff| <= 2% of the reference's max + 1e-5, all finite.
#include <catch2/catch.hpp>

#include "support.hpp"

using namespace gdn_test;

namespace {

constexpr double kRelRms = 0.003;
const Bound kHipBound{0.02, 0.0, 1e-5};

Spec lowp_spec(int32_t T, uint64_t seed) {
    Spec s;
    s.seq_lens = {T};
    s.hk = 1;
    s.hv = 2;
    s.k = s.v = 128;  // the HIP path's head dims
    s.algorithm = GDN_ALGO_CHUNKED;
    s.precision = GDN_PRECISION_FP16;
    s.seed = seed;
    return s;
}

struct Errors {
    Comparison out, state;
};

Errors run_vs_fp64(const Spec& s) {
    Problem p(s);
    const Reference want = reference(p);
    REQUIRE(selected_path(p, cpu_caps()) == GDN_PATH_CHUNKED_LOWP_C16);
    REQUIRE(run(p, cpu_caps()) == GDN_SUCCESS);
    return {compare_out(p, want.out, kHipBound), compare_state(p, want.state, kHipBound)};
}

void check_hip_bounds(const Errors& e) {
    INFO(describe(e.out, "out"));
    INFO(describe(e.state, "state"));
    CHECK(e.out.ok());  // finite, max|diff| <= 2% max|ref| + 1e-5
    CHECK(e.state.ok());
    CHECK(e.out.rel_rms() <= kRelRms);
    CHECK(e.state.rel_rms() <= kRelRms);
}

}  // namespace

TEST_CASE("forced chunked takes the C = 16 emulation for FP16 and BF16, auto takes FP32 there",
          "[cpu][lowp]") {
    // The emulation is slower than the CPU's FP32 chunked path and less
    // accurate: auto serves FP16/BF16 with FP32 and says so; forcing the
    // chunked path gives the emulation (docs/cpu.md).
    for (gdn_precision_t prec : {GDN_PRECISION_FP16, GDN_PRECISION_BF16}) {
        INFO("precision " << int(prec));
        Spec s = lowp_spec(100, 1);
        s.precision = prec;
        Problem forced(s);
        gdn_path_info_t info;
        gdn_path_info_init(&info);
        gdn_tensors_t t = forced.tensors();
        const gdn_caps_t caps = cpu_caps();
        REQUIRE(gdn_select_path(&caps, &forced.problem, &t, &info) == GDN_SUCCESS);
        CHECK(info.path == GDN_PATH_CHUNKED_LOWP_C16);
        CHECK(info.chunk_size == 16);
        CHECK(info.precision == prec);

        s.algorithm = GDN_ALGO_AUTO;
        Problem a(s);
        gdn_path_info_init(&info);
        t = a.tensors();
        REQUIRE(gdn_select_path(&caps, &a.problem, &t, &info) == GDN_SUCCESS);
        INFO(info.reason);
        CHECK(info.path == GDN_PATH_CHUNKED_FP32);
        CHECK(info.chunk_size == 32);
        CHECK(info.precision == GDN_PRECISION_FP32);
        CHECK(std::string(info.reason).find("FP32 serves FP16/BF16") != std::string::npos);
        // Auto's bits are the FP32 chunked path's.
        REQUIRE(run(a, caps) == GDN_SUCCESS);
        s.precision = GDN_PRECISION_FP32;
        s.algorithm = GDN_ALGO_CHUNKED;
        Problem f(s);
        REQUIRE(run(f, caps) == GDN_SUCCESS);
        CHECK(first_byte_difference(a.out, f.out, "out, auto FP16/BF16 vs chunked FP32") == "");
        CHECK(first_byte_difference(a.state, f.state, "state, auto FP16/BF16 vs chunked FP32") == "");
    }
}

TEST_CASE("the FP16-operand emulation is within the HIP bounds up to a few thousand tokens",
          "[cpu][lowp]") {
    for (int32_t T : {1, 15, 16, 17, 63, 64, 65, 129, 1000, 3001}) {
        INFO("T = " << T);
        check_hip_bounds(run_vs_fp64(lowp_spec(T, uint64_t(T) + 40)));
    }
}

TEST_CASE("the FP16-operand emulation with weak decay (g near 0) is within the HIP bounds",
          "[cpu][lowp]") {
    Spec s = lowp_spec(2000, 7);
    s.g_lo = -1e-4;
    s.g_hi = -1e-7;
    check_hip_bounds(run_vs_fp64(s));
}

TEST_CASE("the FP16-operand emulation with beta = 0 is within the HIP bounds", "[cpu][lowp]") {
    Spec s = lowp_spec(1000, 8);
    s.beta_lo = s.beta_hi = 0.0;
    s.g_lo = -0.01;  // slow decay, so the state still matters at the end
    s.g_hi = -0.001;
    check_hip_bounds(run_vs_fp64(s));
}

TEST_CASE("the FP16-operand emulation with f16 inputs, every flag and the VK state layout",
          "[cpu][lowp]") {
    Spec s = lowp_spec(700, 9);
    s.input = GDN_DTYPE_F16;
    s.layout = GDN_STATE_VK;
    s.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS |
              GDN_FLAG_OUTPUT_NORM;
    check_hip_bounds(run_vs_fp64(s));
}

TEST_CASE("the FP16-operand emulation: a 129 + 128 split with the state carried is within bounds",
          "[cpu][lowp][split]") {
    const Spec s = lowp_spec(257, 12);
    const gdn_caps_t caps = cpu_caps();
    Problem whole(s);
    REQUIRE(run(whole, caps) == GDN_SUCCESS);
    Problem split(s);
    const Reference want = reference(split);
    for (auto part : {std::pair<int64_t, int64_t>{0, 129}, {129, 128}}) {
        gdn_problem_t prob;
        gdn_tensors_t t;
        split.part(part.first, part.second, &prob, &t);
        Workspace ws;
        ws.size_for(caps, prob);
        ws.fill_nan();
        REQUIRE(gdn_chunked_recurrence(&caps, &prob, &t, ws.data(), ws.size(), nullptr) ==
                GDN_SUCCESS);
    }
    // The split run against FP64 ...
    check_hip_bounds({compare_out(split, want.out, kHipBound),
                      compare_state(split, want.state, kHipBound)});
    // ... and against the unsplit run.
    const std::vector<float> out_whole = whole.out_f32(), state_whole = whole.state_f32();
    const Comparison out = compare(split.out_f32(), out_whole, nullptr, kHipBound,
                                   [&](size_t i) { return split.out_index(i); });
    const Comparison state = compare(split.state_f32(), state_whole, nullptr, kHipBound,
                                     [&](size_t i) { return split.state_index(i); });
    INFO(describe(out, "out, split vs unsplit"));
    INFO(describe(state, "state, split vs unsplit"));
    CHECK(out.ok());
    CHECK(state.ok());
    CHECK(out.rel_rms() <= kRelRms);
    CHECK(state.rel_rms() <= kRelRms);
}

TEST_CASE("the emulation does round: its error is FP16's, far above FP32's", "[cpu][lowp]") {
    // If the operands were not rounded, the error would be ~1e-7 (FP32).
    const Errors fp16 = run_vs_fp64(lowp_spec(500, 3));
    INFO(describe(fp16.out, "out, FP16 operands"));
    CHECK(fp16.out.rel_rms() > 5e-5);
    Spec b = lowp_spec(500, 3);
    b.precision = GDN_PRECISION_BF16;
    const Errors bf16 = run_vs_fp64(b);
    INFO(describe(bf16.out, "out, BF16 operands"));
    // BF16 keeps 8 bits to FP16's 11: about 8x the error.
    CHECK(bf16.out.rel_rms() > 3.0 * fp16.out.rel_rms());
}

TEST_CASE("the BF16-operand emulation stays within BF16-sized bounds", "[cpu][lowp]") {
    // Not a DESIGN.md bound (the HIP path uses FP16): BF16 rounds 8x coarser,
    // so the FP16 bounds are scaled by 8.
    for (int32_t T : {1, 17, 129, 1500}) {
        Spec s = lowp_spec(T, uint64_t(T) + 90);
        s.precision = GDN_PRECISION_BF16;
        Problem p(s);
        const Reference want = reference(p);
        REQUIRE(run(p, cpu_caps()) == GDN_SUCCESS);
        const Bound b{0.16, 0.0, 1e-5};
        const Comparison out = compare_out(p, want.out, b);
        const Comparison state = compare_state(p, want.state, b);
        INFO("T = " << T);
        INFO(describe(out, "out"));
        INFO(describe(state, "state"));
        CHECK(out.ok());
        CHECK(state.ok());
        CHECK(out.rel_rms() <= 8 * kRelRms);
        CHECK(state.rel_rms() <= 8 * kRelRms);
    }
}

namespace {

// Rounding points of the emulation (cpu_kernels.cpp, chunk_step): the
// operands of every product.
enum Rounding : unsigned {
    kRoundQ = 1,    // q̂ in q·k and qᵀS0
    kRoundK = 2,    // k̂ in k·k, q·k and S0ᵀk
    kRoundS = 4,    // S0 in S0ᵀk and qᵀS0
    kRoundU = 8,    // U = β(v − e^γ S0ᵀk) in T·U
    kRoundT = 16,   // T in T·U
    kRoundP = 32,   // P in P·D
    kRoundD = 64,   // D in P·D and kᵀD
    kRoundKd = 128, // e^{γ_last−γ_i} k_i in kᵀD
    kRoundAll = 255,
};

// An independent model of the emulated numerics: the C = 16 WY form in
// double, with the operands named in `rounding` rounded to FP16 (or BF16)
// at the same points as the emulation. The emulation accumulates in FP32,
// the model in double, so the two differ by FP32 rounding and the rare
// operand that falls on the other side of an FP16 rounding point.
// One sequence, one head, f32 inputs, no flags.
Reference lowp_model(Problem& p, unsigned rounding, bool bf16) {
    gdn::Shape shape;
    gdn::Tensors x;
    REQUIRE(p.normalised(&shape, &x));
    const int C = 16, K = p.spec.k, V = p.spec.v;
    auto op = [&](unsigned point, double v) {
        if (!(rounding & point)) return v;
        return double(bf16 ? gdn::round_to_bf16(float(v)) : gdn::round_to_half(float(v)));
    };
    auto in = [&](const Bytes& b, const TensorLayout& L, int64_t t, int i) {
        return double(gdn::load_element(b.data(), L.dtype, L.offset(t, 0) + i));
    };
    std::vector<double> S(p.state_initial.begin(), p.state_initial.begin() + K * V);
    Reference r;
    r.out.assign(size_t(p.T) * size_t(V), 0.0);
    for (int64_t c0 = 0; c0 < p.T; c0 += C) {
        const int L = int(std::min<int64_t>(C, p.T - c0));
        const size_t LK = size_t(L * K), LV = size_t(L * V), Ln = size_t(L);
        std::vector<double> k(LK), q_op(LK), k_op(LK), v(LV), beta(Ln), gamma(Ln);
        auto at = [](int row, int col, int n) { return size_t(row) * size_t(n) + size_t(col); };
        for (int t = 0; t < L; ++t) {
            for (int i = 0; i < K; ++i) {
                const double q = double(float(in(p.q, p.q_l, c0 + t, i)) * shape.scale);
                k[at(t, i, K)] = in(p.k, p.k_l, c0 + t, i);
                q_op[at(t, i, K)] = op(kRoundQ, q);
                k_op[at(t, i, K)] = op(kRoundK, k[at(t, i, K)]);
            }
            for (int i = 0; i < V; ++i) v[at(t, i, V)] = in(p.v, p.v_l, c0 + t, i);
            beta[size_t(t)] = in(p.beta, p.beta_l, c0 + t, 0);
            gamma[size_t(t)] = (t ? gamma[size_t(t - 1)] : 0.0) + in(p.g, p.g_l, c0 + t, 0);
        }
        const size_t LL = size_t(L * L);
        std::vector<double> A(LL, 0.0), P(LL, 0.0), T(LL, 0.0);
        for (int t = 0; t < L; ++t)
            for (int i = 0; i <= t; ++i) {
                double kk = 0.0, qk = 0.0;
                for (int j = 0; j < K; ++j) {
                    kk += k_op[at(t, j, K)] * k_op[at(i, j, K)];
                    qk += q_op[at(t, j, K)] * k_op[at(i, j, K)];
                }
                const double decay = std::exp(gamma[size_t(t)] - gamma[size_t(i)]);
                P[at(t, i, L)] = op(kRoundP, decay * qk);
                if (i < t) A[at(t, i, L)] = beta[size_t(t)] * decay * kk;
            }
        for (int t = 0; t < L; ++t) {
            T[at(t, t, L)] = 1.0;
            for (int i = 0; i < t; ++i)
                for (int j = 0; j <= i; ++j) T[at(t, j, L)] -= A[at(t, i, L)] * T[at(i, j, L)];
        }
        std::vector<double> S_op(S.size()), U(LV), D_op(LV);
        for (size_t i = 0; i < S.size(); ++i) S_op[i] = op(kRoundS, S[i]);
        for (int t = 0; t < L; ++t)
            for (int j = 0; j < V; ++j) {
                double w = 0.0, qs = 0.0;
                for (int i = 0; i < K; ++i) {
                    w += k_op[at(t, i, K)] * S_op[at(i, j, V)];
                    qs += q_op[at(t, i, K)] * S_op[at(i, j, V)];
                }
                const double e_gamma = std::exp(gamma[size_t(t)]);
                U[at(t, j, V)] = op(kRoundU, beta[size_t(t)] * (v[at(t, j, V)] - e_gamma * w));
                r.out[size_t(c0 + t) * size_t(V) + size_t(j)] = e_gamma * qs;
            }
        for (int t = 0; t < L; ++t)
            for (int j = 0; j < V; ++j) {
                double d = 0.0;
                for (int i = 0; i <= t; ++i) d += op(kRoundT, T[at(t, i, L)]) * U[at(i, j, V)];
                D_op[at(t, j, V)] = op(kRoundD, d);
            }
        for (int t = 0; t < L; ++t)
            for (int j = 0; j < V; ++j)
                for (int i = 0; i <= t; ++i)
                    r.out[size_t(c0 + t) * size_t(V) + size_t(j)] += P[at(t, i, L)] * D_op[at(i, j, V)];
        const double gamma_last = gamma[size_t(L - 1)];
        for (int i = 0; i < K; ++i)
            for (int j = 0; j < V; ++j) {
                double s = std::exp(gamma_last) * S[at(i, j, V)];
                for (int t = 0; t < L; ++t)
                    s += op(kRoundKd, std::exp(gamma_last - gamma[size_t(t)]) * k[at(t, i, K)]) *
                         D_op[at(t, j, V)];
                S[at(i, j, V)] = s;
            }
    }
    r.state = S;
    return r;
}

}  // namespace

TEST_CASE("the emulation rounds the operands of every product, as the model of the HIP numerics does",
          "[cpu][lowp]") {
    // Emulation vs the model with every rounding point: FP32-accumulation
    // noise (<= 1.5e-5 relative RMS measured). Without any one rounding
    // point the model moves >= 8.8e-5 away (FP16) — so the bound below
    // would see an operand the emulation forgot to round.
    const double kMatched = 4e-5;
    const struct { unsigned point; const char* name; } points[] = {
        {kRoundQ, "q"}, {kRoundK, "k"}, {kRoundS, "S0"}, {kRoundU, "U"},
        {kRoundT, "T"}, {kRoundP, "P"}, {kRoundD, "D"}, {kRoundKd, "decayed k"},
    };
    for (bool bf16 : {false, true})
        for (int32_t T : {300, 501}) {
            Spec s = lowp_spec(T, uint64_t(T) + (bf16 ? 1 : 0));
            s.hv = 1;
            s.k = s.v = T == 300 ? 64 : 128;
            s.precision = bf16 ? GDN_PRECISION_BF16 : GDN_PRECISION_FP16;
            Problem p(s);
            REQUIRE(run(p, cpu_caps()) == GDN_SUCCESS);
            const std::vector<float> out = p.out_f32(), state = p.state_f32();
            auto distance = [&](const Reference& m) {
                auto none = [](size_t) { return std::string(); };
                const Comparison o = compare(out, m.out, nullptr, Bound{1.0}, none);
                const Comparison st = compare(state, m.state, nullptr, Bound{1.0}, none);
                return std::make_pair(o.rel_rms(), st.rel_rms());
            };
            INFO((bf16 ? "BF16" : "FP16") << " operands, T = " << T << ", K = V = " << s.k);
            const auto matched = distance(lowp_model(p, kRoundAll, bf16));
            INFO("emulation vs model: rel RMS out " << matched.first << ", state " << matched.second);
            CHECK(matched.first <= kMatched);
            CHECK(matched.second <= kMatched);
            for (const auto& point : points) {
                const auto without = distance(lowp_model(p, kRoundAll & ~point.point, bf16));
                INFO("model without rounding " << point.name << ": rel RMS out " << without.first
                                               << ", state " << without.second);
                CHECK(std::max(without.first, without.second) > kMatched);
            }
        }
}

// The fact behind the CUDA FP16 modes' taking bf16 k/q/v as exact operands
// (src/cuda/kernels.hpp, exact_16bit_input; docs/perf-notes.md v107): every
// finite bf16 value, at the power-of-two scales FP16X3 applies (v and the
// state at 64), is an FP16 value and a zero FP16 remainder, x − rn16(x)
// rounding to ±0 in FP16, wherever rn16(x) is finite (|x| <= 65504). The
// remainders the kernels would otherwise compute are these same roundings,
// so they are zero on the device too. (f32 values do leave remainders, the
// counter-check.)
TEST_CASE("a bf16 value, at FP16X3's scales, leaves a zero FP16 remainder", "[cpu][lowp]") {
    int64_t checked = 0, subnormal = 0;
    for (const float scale : {1.0f, 64.0f, 1.0f / 64.0f}) {
        for (uint32_t b = 0; b < 0x10000u; ++b) {
            const float x = gdn::bf16_to_float(uint16_t(b)) * scale;
            if (!std::isfinite(x) || std::fabs(x) > 65504.0f) continue;
            const float hi = gdn::round_to_half(x);
            const float r = x - hi;  // exact: hi is within a step of x
            INFO("bf16 bits " << b << " x " << scale << ": " << x << ", FP16 value " << hi);
            REQUIRE(gdn::round_to_half(r) == 0.0f);
            ++checked;
            if (std::fabs(x) < 6.103515625e-05f && x != 0.0f) ++subnormal;
        }
    }
    // Every bf16 value within FP16's range at each scale: exponent fields 0..142,
    // 0..136 and 0..148, 256 patterns each (both signs).
    CHECK(checked == (143 + 137 + 149) * 256);
    CHECK(subnormal > 1000);  // values under FP16's normal range were among them
    // The counter-check: f32 values keep remainders (1 + 2^-12: one bit past FP16's 11).
    const float f = 1.0f + 1.0f / 4096.0f;
    CHECK(gdn::round_to_half(f - gdn::round_to_half(f)) != 0.0f);
}
