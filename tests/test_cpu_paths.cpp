// The CPU sequential and chunked (C = 32, FP32) paths against the FP64
// reference, a request split in two with the state carried, and the honesty
// of `auto` (the path it reports is the one that runs).
#include <catch2/catch.hpp>

#include "common/cpu_kernels.hpp"
#include "support.hpp"

using namespace gdn_test;

namespace {

constexpr double kFp32Bound = 2e-6;  // max|diff| / max|ref|, DESIGN.md §5

const char* path_name(gdn_algorithm_t a) {
    return a == GDN_ALGO_SEQUENTIAL ? "sequential" : a == GDN_ALGO_CHUNKED ? "chunked" : "auto";
}

// Runs `spec` on the CPU and checks out and the final state against FP64.
void check_vs_fp64(const Spec& spec, double bound = kFp32Bound) {
    Problem p(spec);
    const Reference want = reference(p);
    REQUIRE(run(p, cpu_caps()) == GDN_SUCCESS);
    const Comparison out = compare_out(p, want.out, Bound{bound});
    const Comparison state = compare_state(p, want.state, Bound{bound});
    INFO(path_name(spec.algorithm) << ", T = " << p.T << ", K = " << spec.k << ", V = " << spec.v);
    INFO(describe(out, "out"));
    INFO(describe(state, "state"));
    CHECK(out.ok());
    CHECK(state.ok());
}

}  // namespace

TEST_CASE("sequential and chunked paths match FP64 at every T from 1 to 70 and at 4099",
          "[cpu][accuracy]") {
    for (gdn_algorithm_t algo : {GDN_ALGO_SEQUENTIAL, GDN_ALGO_CHUNKED}) {
        std::vector<int32_t> lengths;
        for (int32_t T = 1; T <= 70; ++T) lengths.push_back(T);
        lengths.push_back(4099);
        for (int32_t T : lengths) {
            Spec s;
            s.seq_lens = {T};
            s.hk = 1;
            s.hv = 2;
            s.k = s.v = 128;
            s.algorithm = algo;
            s.seed = uint64_t(T) * 7 + 1;
            check_vs_fp64(s);
        }
    }
}

TEST_CASE("head dims 64, 128 and dims that need padding match FP64", "[cpu][accuracy]") {
    const int32_t dims[][2] = {{64, 64}, {128, 64}, {64, 128}, {40, 24}, {7, 9}, {256, 32}};
    for (gdn_algorithm_t algo : {GDN_ALGO_SEQUENTIAL, GDN_ALGO_CHUNKED})
        for (const auto& kv : dims)
            for (int32_t T : {1, 31, 32, 33, 95, 200}) {
                Spec s;
                s.seq_lens = {T};
                s.k = kv[0];
                s.v = kv[1];
                s.algorithm = algo;
                s.seed = uint64_t(T + kv[0] * 1000 + kv[1]);
                check_vs_fp64(s);
            }
}

TEST_CASE("the chunked path's tail chunk: every remainder mod 32 over several chunks",
          "[cpu][accuracy]") {
    for (int32_t T = 96; T < 128; ++T) {
        Spec s;
        s.seq_lens = {T};
        s.k = s.v = 32;
        s.algorithm = GDN_ALGO_CHUNKED;
        s.seed = uint64_t(T);
        check_vs_fp64(s);
    }
}

TEST_CASE("a request split at 129 + 128 tokens with the state carried equals the unsplit run",
          "[cpu][split]") {
    for (gdn_algorithm_t algo : {GDN_ALGO_SEQUENTIAL, GDN_ALGO_CHUNKED}) {
        Spec s;
        s.seq_lens = {257};
        s.hk = 1;
        s.hv = 2;
        s.k = s.v = 64;
        s.algorithm = algo;
        s.seed = 11;
        Problem whole(s);
        REQUIRE(run(whole, cpu_caps()) == GDN_SUCCESS);
        const std::vector<float> out_whole = whole.out_f32(), state_whole = whole.state_f32();

        Problem split(s);
        const gdn_caps_t caps = cpu_caps();
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
        INFO(path_name(algo));
        if (algo == GDN_ALGO_SEQUENTIAL) {
            // Token by token: the split changes nothing, bit for bit.
            CHECK(first_byte_difference(whole.out, split.out, "out") == "");
            CHECK(first_byte_difference(whole.state, split.state, "state") == "");
        } else {
            // The chunks fall elsewhere (129 = 4 * 32 + 1): within the FP32 bound.
            const Comparison out =
                compare(split.out_f32(), out_whole, nullptr, Bound{kFp32Bound},
                        [&](size_t i) { return split.out_index(i); });
            const Comparison state =
                compare(split.state_f32(), state_whole, nullptr, Bound{kFp32Bound},
                        [&](size_t i) { return split.state_index(i); });
            INFO(describe(out, "out, split vs unsplit"));
            INFO(describe(state, "state, split vs unsplit"));
            CHECK(out.ok());
            CHECK(state.ok());
        }
        // And the split run is itself right.
        const Reference want = reference(split);
        const Comparison out = compare_out(split, want.out, Bound{kFp32Bound});
        INFO(describe(out, "out, split vs FP64"));
        CHECK(out.ok());
    }
}

TEST_CASE("forced sequential gives the bits auto gives where auto picks sequential",
          "[cpu][dispatch]") {
    const gdn_caps_t caps = cpu_caps();
    for (int32_t T : {1, 17, 63}) {
        Spec s;
        s.seq_lens = {T, T / 2};
        s.hk = 2;
        s.hv = 4;
        s.k = s.v = 32;
        s.seed = uint64_t(T);
        s.algorithm = GDN_ALGO_AUTO;
        Problem a(s);
        INFO("T = " << T);
        REQUIRE(selected_path(a, caps) == GDN_PATH_SEQUENTIAL);
        REQUIRE(run(a, caps) == GDN_SUCCESS);
        s.algorithm = GDN_ALGO_SEQUENTIAL;
        Problem f(s);
        REQUIRE(selected_path(f, caps) == GDN_PATH_SEQUENTIAL);
        REQUIRE(run(f, caps) == GDN_SUCCESS);
        CHECK(first_byte_difference(a.out, f.out, "out") == "");
        CHECK(first_byte_difference(a.state, f.state, "state") == "");
    }
}

TEST_CASE("auto runs the path gdn_select_path reports", "[cpu][dispatch]") {
    const gdn_caps_t caps = cpu_caps();
    // 64 tokens and more take the chunked path at K = V = 32 (every sequence
    // here: a shorter one would take the sequential kernel, test_cpu_batch.cpp).
    for (int32_t T : {64, 100, 300}) {
        Spec s;
        s.seq_lens = {T, 64};
        s.hk = 1;
        s.hv = 2;
        s.k = s.v = 32;
        s.seed = uint64_t(T) + 3;
        Problem a(s);
        INFO("T = " << T);
        REQUIRE(selected_path(a, caps) == GDN_PATH_CHUNKED_FP32);
        REQUIRE(run(a, caps) == GDN_SUCCESS);
        s.algorithm = GDN_ALGO_CHUNKED;
        Problem c(s);
        REQUIRE(run(c, caps) == GDN_SUCCESS);
        s.algorithm = GDN_ALGO_SEQUENTIAL;
        Problem q(s);
        REQUIRE(run(q, caps) == GDN_SUCCESS);
        // Auto's bits are the chunked path's, and not the sequential one's
        // (the two sum in different orders).
        CHECK(first_byte_difference(a.out, c.out, "out, auto vs chunked") == "");
        CHECK(first_byte_difference(a.state, c.state, "state, auto vs chunked") == "");
        CHECK(first_byte_difference(a.out, q.out, "out, auto vs sequential") != "");
    }
}

TEST_CASE("auto's length rule on the CPU: from 16 tokens with K and V >= 128, 24 with >= 64, 64 below",
          "[cpu][dispatch]") {
    const gdn_caps_t caps = cpu_caps();
    struct Case {
        int32_t k, v, T;
        gdn_path_t want;
    };
    const Case cases[] = {
        {64, 64, 23, GDN_PATH_SEQUENTIAL},     {64, 64, 24, GDN_PATH_CHUNKED_FP32},
        {128, 64, 23, GDN_PATH_SEQUENTIAL},    {128, 64, 24, GDN_PATH_CHUNKED_FP32},
        {128, 128, 15, GDN_PATH_SEQUENTIAL},   {128, 128, 16, GDN_PATH_CHUNKED_FP32},
        {128, 32, 63, GDN_PATH_SEQUENTIAL},
        {128, 32, 64, GDN_PATH_CHUNKED_FP32},  {32, 32, 63, GDN_PATH_SEQUENTIAL},
        {32, 32, 64, GDN_PATH_CHUNKED_FP32},
    };
    for (const Case& c : cases) {
        Spec s;
        s.seq_lens = {c.T, 3};  // the longest sequence decides
        s.hk = 1;
        s.hv = 2;
        s.k = c.k;
        s.v = c.v;
        s.seed = uint64_t(c.T);
        Problem p(s);
        INFO("K = " << c.k << ", V = " << c.v << ", T = " << c.T);
        CHECK(selected_path(p, caps) == c.want);
    }
}

TEST_CASE("BF16X3 and FP16X3 on the CPU are the FP32 chunked path: the same bits as FP32", "[cpu][dispatch]") {
    // BF16X3 and FP16X3 ask for near-FP32 products; the CPU has no
    // split-operand kernels, and a more accurate path is always allowed, so
    // its FP32 chunked path serves them (reported as such) and the bits are
    // FP32's, whatever the inputs' type.
    const gdn_caps_t caps = cpu_caps();
    for (gdn_precision_t x3 : {GDN_PRECISION_BF16X3, GDN_PRECISION_FP16X3})
        for (gdn_dtype_t input : {GDN_DTYPE_F32, GDN_DTYPE_F16, GDN_DTYPE_BF16})
            for (gdn_algorithm_t algo : {GDN_ALGO_AUTO, GDN_ALGO_CHUNKED}) {
                const char* name = x3 == GDN_PRECISION_FP16X3 ? "FP16X3" : "BF16X3";
                Spec s;
                s.seq_lens = {130, 64, 7};  // auto: the longest sequence (130) takes the chunked path
                s.hk = 2;
                s.hv = 4;
                s.k = 64;
                s.v = 32;
                s.input = s.gate = input;
                s.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_OUTPUT_NORM;
                s.algorithm = algo;
                s.precision = x3;
                s.seed = 29;
                Problem x(s);
                INFO(name << ", " << path_name(algo) << ", "
                          << (input == GDN_DTYPE_BF16 ? "bf16" : input == GDN_DTYPE_F16 ? "f16" : "f32")
                          << " inputs");
                gdn_path_info_t info;
                gdn_path_info_init(&info);
                gdn_tensors_t t = x.tensors();
                REQUIRE(gdn_select_path(&caps, &x.problem, &t, &info) == GDN_SUCCESS);
                INFO(info.reason);
                CHECK(info.path == GDN_PATH_CHUNKED_FP32);
                CHECK(info.precision == GDN_PRECISION_FP32);
                CHECK(info.chunk_size == 32);
                REQUIRE(run(x, caps) == GDN_SUCCESS);
                s.precision = GDN_PRECISION_FP32;
                Problem fp32(s);
                REQUIRE(run(fp32, caps) == GDN_SUCCESS);
                CHECK(first_byte_difference(x.out, fp32.out, "out, split mode vs FP32") == "");
                CHECK(first_byte_difference(x.state, fp32.state, "state, split mode vs FP32") == "");
                // Short prompts: auto's sequential kernel, FP32 as well.
                if (algo == GDN_ALGO_AUTO) {
                    s.precision = x3;
                    s.seq_lens = {40, 3};
                    Problem short_p(s);
                    CHECK(selected_path(short_p, caps) == GDN_PATH_SEQUENTIAL);
                }
            }
}

TEST_CASE("the baseline build of the kernels (no AVX2) matches FP64 too", "[cpu][accuracy]") {
    // The kernels run their best instruction-set build; force the baseline
    // one, so that it is checked on machines that have AVX2 as well.
    struct Baseline {
        Baseline() { gdn::cpu::set_kernel_variant(gdn::cpu::KernelVariant::baseline); }
        ~Baseline() { gdn::cpu::set_kernel_variant(gdn::cpu::KernelVariant::best); }
    } baseline;
    REQUIRE(std::string(gdn::cpu::kernel_variant_name()) == "baseline");
    for (gdn_algorithm_t algo : {GDN_ALGO_SEQUENTIAL, GDN_ALGO_CHUNKED})
        for (int32_t T : {1, 31, 33, 70, 1025}) {
            Spec s;
            s.seq_lens = {T, 40};
            s.hk = 1;
            s.hv = 2;
            s.k = 128;
            s.v = 48;
            s.algorithm = algo;
            s.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_OUTPUT_NORM;
            s.seed = uint64_t(T) + 5;
            check_vs_fp64(s);
        }
    // The FP16-operand emulation too, within the HIP bound.
    Spec s;
    s.seq_lens = {300};
    s.k = s.v = 128;
    s.algorithm = GDN_ALGO_CHUNKED;
    s.precision = GDN_PRECISION_FP16;
    Problem p(s);
    const Reference want = reference(p);
    REQUIRE(run(p, cpu_caps()) == GDN_SUCCESS);
    const Comparison out = compare_out(p, want.out, Bound{0.02, 0, 1e-5});
    INFO(describe(out, "out, FP16 operands"));
    CHECK(out.ok());
    CHECK(out.rel_rms() <= 0.003);
}
