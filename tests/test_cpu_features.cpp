// Every API feature on every CPU path against the FP64 reference with the
// same feature applied in double: flags (q/k L2 norm, gate from raw inputs,
// β from logits, gated RMSNorm), state layouts, head mappings, dtypes,
// strides, scale and eps.
#include <catch2/catch.hpp>

#include <functional>

#include "support.hpp"

using namespace gdn_test;

namespace {

constexpr double kFp32Bound = 2e-6;

struct Variant {
    const char* name;
    std::function<void(Spec&)> apply;
};

// A small varlen batch through a state pool; each variant changes it.
Spec base_spec(gdn_algorithm_t algo) {
    Spec s;
    s.seq_lens = {70, 33, 1};
    s.hk = 2;
    s.hv = 4;
    s.k = 32;
    s.v = 48;
    s.state_indices = {2, 0, 3};
    s.algorithm = algo;
    return s;
}

void check_variant(const Variant& var, gdn_algorithm_t algo) {
    Spec s = base_spec(algo);
    var.apply(s);
    Problem p(s);
    const Reference want = reference(p);
    REQUIRE(want.out.size() > 0);
    REQUIRE(run(p, cpu_caps()) == GDN_SUCCESS);
    // f16/bf16 outputs: the FP32 bound plus the format's rounding.
    const Bound out_bound{kFp32Bound, half_ulp_of(s.output), 0.0};
    const Comparison out = compare_out(p, want.out, out_bound);
    const Comparison state = compare_state(p, want.state, Bound{kFp32Bound});
    INFO(var.name << ", " << (algo == GDN_ALGO_SEQUENTIAL ? "sequential" : "chunked"));
    INFO(describe(out, "out"));
    INFO(describe(state, "state"));
    CHECK(out.ok());
    CHECK(state.ok());
    CHECK(p.out.guard_damage() == "");
    CHECK(p.state.guard_damage() == "");
}

const std::vector<Variant>& variants() {
    static const std::vector<Variant> v = {
        {"defaults", [](Spec&) {}},
        {"q/k L2 norm", [](Spec& s) { s.flags = GDN_FLAG_QK_L2NORM; }},
        {"q/k L2 norm, eps 1e-2", [](Spec& s) { s.flags = GDN_FLAG_QK_L2NORM; s.l2norm_eps = 1e-2f; }},
        {"gate from raw inputs", [](Spec& s) { s.flags = GDN_FLAG_GATE_FROM_RAW; }},
        {"beta from logits", [](Spec& s) { s.flags = GDN_FLAG_BETA_FROM_LOGITS; }},
        {"gated RMSNorm epilogue", [](Spec& s) { s.flags = GDN_FLAG_OUTPUT_NORM; }},
        {"gated RMSNorm epilogue, eps 0.5", [](Spec& s) { s.flags = GDN_FLAG_OUTPUT_NORM; s.norm_eps = 0.5f; }},
        {"every flag", [](Spec& s) {
             s.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS |
                       GDN_FLAG_OUTPUT_NORM;
         }},
        {"scale 0.3", [](Spec& s) { s.scale = 0.3f; }},
        {"state layout [V][K]", [](Spec& s) { s.layout = GDN_STATE_VK; }},
        {"interleaved head mapping", [](Spec& s) { s.mapping = GDN_HEADS_INTERLEAVED; }},
        {"interleaved, Hk = 3, Hv = 6", [](Spec& s) { s.mapping = GDN_HEADS_INTERLEAVED; s.hk = 3; s.hv = 6; }},
        {"grouped, Hk = 1, Hv = 5", [](Spec& s) { s.hk = 1; s.hv = 5; }},
        {"Hk = Hv = 3", [](Spec& s) { s.hk = 3; s.hv = 3; }},
        {"f16 inputs", [](Spec& s) { s.input = GDN_DTYPE_F16; }},
        {"bf16 inputs", [](Spec& s) { s.input = GDN_DTYPE_BF16; }},
        {"f16 inputs and gates", [](Spec& s) { s.input = s.gate = GDN_DTYPE_F16; }},
        {"bf16 inputs and gates", [](Spec& s) { s.input = s.gate = GDN_DTYPE_BF16; }},
        {"f16 output", [](Spec& s) { s.output = GDN_DTYPE_F16; }},
        {"bf16 output", [](Spec& s) { s.output = GDN_DTYPE_BF16; }},
        {"bf16 everything, every flag", [](Spec& s) {
             s.input = s.gate = s.output = GDN_DTYPE_BF16;
             s.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS |
                       GDN_FLAG_OUTPUT_NORM;
         }},
        {"row stride + 8 (a fused projection)", [](Spec& s) { s.row_pad = 8; }},
        {"row stride + 1, head stride + 3", [](Spec& s) { s.row_pad = 1; s.head_pad = 3; }},
        {"head-major strides", [](Spec& s) { s.head_major = true; s.row_pad = 2; }},
        {"head-major, f16, every flag", [](Spec& s) {
             s.head_major = true;
             s.input = s.output = GDN_DTYPE_F16;
             s.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_OUTPUT_NORM;
         }},
        {"state slot stride + 5", [](Spec& s) { s.slot_pad = 5; s.num_state_slots = 5; }},
        {"[V][K], interleaved, strides, every flag", [](Spec& s) {
             s.layout = GDN_STATE_VK;
             s.mapping = GDN_HEADS_INTERLEAVED;
             s.row_pad = 3;
             s.head_pad = 1;
             s.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS |
                       GDN_FLAG_OUTPUT_NORM;
         }},
        {"K = V = 128", [](Spec& s) { s.k = s.v = 128; }},
        {"K = V = 64", [](Spec& s) { s.k = s.v = 64; }},
    };
    return v;
}

}  // namespace

TEST_CASE("every feature on the sequential path matches FP64", "[cpu][features]") {
    for (const Variant& v : variants()) check_variant(v, GDN_ALGO_SEQUENTIAL);
}

TEST_CASE("every feature on the chunked path matches FP64", "[cpu][features]") {
    for (const Variant& v : variants()) check_variant(v, GDN_ALGO_CHUNKED);
}

TEST_CASE("the gate formula: softplus is linear above 20, g = -exp(A_log) softplus(a + dt_bias)",
          "[cpu][features]") {
    // One token, one head, K = V = 1, S0 = 1, β = 0, q = 1: S1 = e^g and
    // o = e^g (scale = 1/sqrt(1)), so the state and out show g.
    for (float a : {-3.0f, 0.0f, 5.0f, 19.5f, 20.5f, 40.0f}) {
        Spec s;
        s.seq_lens = {1};
        s.hk = s.hv = 1;
        s.k = s.v = 1;
        s.flags = GDN_FLAG_GATE_FROM_RAW;
        s.algorithm = GDN_ALGO_SEQUENTIAL;
        Problem p(s);
        p.A_log[0] = -1.5f;
        p.dt_bias[0] = 0.25f;
        gdn::store_element(p.g.data(), s.gate, 0, a);
        gdn::store_element(p.beta.data(), s.gate, 0, 0.0f);
        gdn::store_element(p.q.data(), s.input, 0, 1.0f);
        p.state_initial[0] = 1.0f;
        p.reset_state();
        REQUIRE(run(p, cpu_caps()) == GDN_SUCCESS);
        const double x = double(a) + 0.25;
        const double softplus = x > 20.0 ? x : std::log1p(std::exp(x));
        const double g = -std::exp(-1.5) * softplus;
        INFO("a = " << a);
        CHECK(p.state.as<float>()[0] == Approx(std::exp(g)).epsilon(1e-6));
        CHECK(p.out_f32()[0] == Approx(std::exp(g)).epsilon(1e-6));  // scale = 1/sqrt(1)
    }
}

TEST_CASE("the epilogue formula: out = o / sqrt(mean(o^2) + eps) * w * silu(z)", "[cpu][features]") {
    // S0 = I-like diagonal, β = 0, g = 0: o = S0ᵀ q scale, known exactly.
    Spec s;
    s.seq_lens = {1};
    s.hk = s.hv = 1;
    s.k = 2;
    s.v = 2;
    s.flags = GDN_FLAG_OUTPUT_NORM;
    s.norm_eps = 0.25f;
    s.scale = 1.0f;
    s.algorithm = GDN_ALGO_SEQUENTIAL;
    Problem p(s);
    const float q[2] = {3.0f, -1.0f}, z[2] = {0.5f, -2.0f};
    for (int i = 0; i < 2; ++i) {
        gdn::store_element(p.q.data(), s.input, i, q[i]);
        gdn::store_element(p.z.data(), s.input, i, z[i]);
    }
    gdn::store_element(p.g.data(), s.gate, 0, 0.0f);
    gdn::store_element(p.beta.data(), s.gate, 0, 0.0f);
    p.norm_weight = {2.0f, 0.5f};
    p.state_initial = {1.0f, 0.0f, 0.0f, 1.0f};
    p.reset_state();
    REQUIRE(run(p, cpu_caps()) == GDN_SUCCESS);
    const double o[2] = {3.0, -1.0};
    const double inv_rms = 1.0 / std::sqrt((9.0 + 1.0) / 2.0 + 0.25);
    const std::vector<float> got = p.out_f32();
    for (int i = 0; i < 2; ++i) {
        const double silu = z[i] / (1.0 + std::exp(-double(z[i])));
        INFO("element " << i);
        CHECK(got[size_t(i)] == Approx(o[i] * inv_rms * p.norm_weight[size_t(i)] * silu).epsilon(1e-6));
    }
}
