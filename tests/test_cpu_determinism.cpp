// Bitwise determinism of every CPU path: the same bits on reruns and for any
// number of threads, with the workspace filled with NaN before every other
// run (so nothing is read from it before it is written) and the outputs
// pre-filled with NaN; the guard bands around out, state and workspace hold.
#include <catch2/catch.hpp>

#include "common/cpu_kernels.hpp"
#include "support.hpp"

using namespace gdn_test;

namespace {

struct PathCase {
    const char* name;
    gdn_algorithm_t algorithm;
    gdn_precision_t precision;
};

const PathCase kPaths[] = {
    {"sequential", GDN_ALGO_SEQUENTIAL, GDN_PRECISION_FP32},
    {"chunked FP32", GDN_ALGO_CHUNKED, GDN_PRECISION_FP32},
    {"chunked FP16 operands", GDN_ALGO_CHUNKED, GDN_PRECISION_FP16},
    {"chunked BF16 operands", GDN_ALGO_CHUNKED, GDN_PRECISION_BF16},
};

Spec shape(int which, const PathCase& path) {
    Spec s;
    switch (which) {
        case 0:  // a varlen batch, several heads
            s.seq_lens = {100, 37, 64, 1};
            s.hk = 2;
            s.hv = 4;
            s.k = s.v = 32;
            break;
        case 1:  // one longer sequence, every flag, bf16 in, f16 out
            s.seq_lens = {300};
            s.hk = 1;
            s.hv = 3;
            s.k = 48;
            s.v = 40;
            s.input = GDN_DTYPE_BF16;
            s.output = GDN_DTYPE_F16;
            s.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS |
                      GDN_FLAG_OUTPUT_NORM;
            break;
        default:  // a decode batch through a pool
            s.seq_lens = std::vector<int32_t>(6, 1);
            s.state_indices = {3, 0, -1, 5, 1, 2};
            s.num_state_slots = 6;
            s.hk = 2;
            s.hv = 6;
            s.k = s.v = 32;
            break;
    }
    s.algorithm = path.algorithm;
    s.precision = path.precision;
    s.seed = uint64_t(17 + which);
    return s;
}

struct FirstRun {
    std::string build;  // the kernels' build that made it
    std::vector<unsigned char> out, state;
};

// A first run on one thread, by `build`, checked near FP64.
FirstRun first_run(const PathCase& path, int which, gdn::cpu::KernelVariant build) {
    gdn::cpu::set_kernel_variant(build);
    FirstRun r;
    r.build = gdn::cpu::kernel_variant_name();
    INFO(r.build << ", " << path.name << ", shape " << which << ": the first run");
    Problem first(shape(which, path));
    REQUIRE(run(first, cpu_caps(1)) == GDN_SUCCESS);
    // The bits repeated below must be a result, not garbage repeated: finite
    // and near FP64 (accuracy itself is checked elsewhere, tightly).
    const Reference want = reference(first);
    const Comparison out = compare_out(first, want.out, Bound{0.2, 0.0, 1e-5});
    const Comparison state = compare_state(first, want.state, Bound{0.2, 0.0, 1e-5});
    INFO(describe(out, "first run, out"));
    INFO(describe(state, "first run, state"));
    REQUIRE(out.ok());
    REQUIRE(state.ok());
    r.out = first.out.snapshot();
    r.state = first.state.snapshot();
    return r;
}

// 100 runs of one problem by `build`, cycling through 1, 2, 3 and 7
// threads, each equal bit for bit to `first`.
void check_reruns(const PathCase& path, int which, gdn::cpu::KernelVariant build, const FirstRun& first) {
    gdn::cpu::set_kernel_variant(build);
    INFO(gdn::cpu::kernel_variant_name() << " against a first run by " << first.build << ", " << path.name
                                         << ", shape " << which);
    const std::vector<unsigned char>& out_bits = first.out;
    const std::vector<unsigned char>& state_bits = first.state;

    Problem p(shape(which, path));
    const int32_t thread_counts[] = {1, 2, 3, 7};
    // One workspace per thread count, reused: its contents from the last run
    // stay, or are replaced by NaN every other run.
    Workspace ws[4];
    for (int rerun = 0; rerun < 100; ++rerun) {
        const int32_t threads = thread_counts[rerun % 4];
        const gdn_caps_t caps = cpu_caps(threads);
        Workspace& w = ws[rerun % 4];
        if (rerun < 4) w.size_for(caps, p.problem);
        if (rerun % 8 < 4) w.fill_nan();
        p.reset_state();
        p.fill_out_nan();
        INFO("rerun " << rerun << ", " << threads << " threads");
        REQUIRE(run(p, caps, &w) == GDN_SUCCESS);
        const std::string out_diff =
            first_byte_difference(out_bits.data(), p.out.data(), out_bits.size(), "out");
        const std::string state_diff =
            first_byte_difference(state_bits.data(), p.state.data(), state_bits.size(), "state");
        CHECK(out_diff == "");
        CHECK(state_diff == "");
        CHECK(w.bytes.guard_damage() == "");
        if (!out_diff.empty() || !state_diff.empty()) break;
    }
    CHECK(p.out.guard_damage() == "");
    CHECK(p.state.guard_damage() == "");
}

}  // namespace

TEST_CASE("the same bits on 100 reruns and for 1, 2, 3 and 7 threads", "[cpu][determinism]") {
    // Every instruction-set build of the kernels this CPU runs. The baseline
    // build's bits differ from the others' (no FMA); the AVX-512F build's
    // must be the AVX2 build's (where the CPU has AVX-512F; elsewhere "best"
    // is the AVX2 or the baseline build itself).
    using gdn::cpu::KernelVariant;
    struct Restore {
        ~Restore() { gdn::cpu::set_kernel_variant(KernelVariant::best); }
    } restore;
    for (const PathCase& path : kPaths)
        for (int which = 0; which < 3; ++which) {
            const FirstRun fma = first_run(path, which, KernelVariant::avx2);
            check_reruns(path, which, KernelVariant::best, fma);
            check_reruns(path, which, KernelVariant::avx2, fma);
            const FirstRun base = first_run(path, which, KernelVariant::baseline);
            check_reruns(path, which, KernelVariant::baseline, base);
        }
}

TEST_CASE("the workspace size does not grow with the number of tokens", "[cpu][determinism]") {
    const gdn_caps_t caps = cpu_caps(2);
    for (const PathCase& path : kPaths) {
        INFO(path.name);
        size_t sizes[2] = {0, 0};
        const int64_t tokens[2] = {2048, int64_t(1) << 30};
        for (int i = 0; i < 2; ++i) {
            gdn_problem_t prob;
            gdn_problem_init(&prob);
            prob.num_tokens = tokens[i];
            prob.num_k_heads = 16;
            prob.num_v_heads = 48;
            prob.head_dim_k = prob.head_dim_v = 128;
            prob.algorithm = path.algorithm;
            prob.precision = path.precision;
            REQUIRE(gdn_workspace_size(&caps, &prob, &sizes[i]) == GDN_SUCCESS);
        }
        CHECK(sizes[0] == sizes[1]);
        CHECK(sizes[0] < size_t(4) << 20);  // two workers' buffers, well under 4 MiB
    }
}

TEST_CASE("a head's bits do not depend on the heads computed with it", "[cpu][determinism]") {
    // Hk = 1, Hv = 6: the chunked paths compute value heads in groups that
    // share q and k. Head 2 run alone (a one-head view of the same buffers)
    // must give the bits it gets inside the group.
    for (const PathCase& path : kPaths) {
        INFO(path.name);
        Spec s;
        s.seq_lens = {150};
        s.hk = 1;
        s.hv = 6;
        s.k = s.v = 32;
        s.algorithm = path.algorithm;
        s.precision = path.precision;
        s.row_pad = 0;
        s.head_pad = 1;  // explicit strides, so a view of one head is easy
        Problem all(s);
        REQUIRE(run(all, cpu_caps(1)) == GDN_SUCCESS);

        Problem one(s);
        const int32_t h = 2;
        gdn_problem_t prob = one.problem;
        prob.num_v_heads = 1;
        gdn_tensors_t t = one.tensors();
        auto at = [](const void* base, const TensorLayout& L, int32_t head) {
            return static_cast<const unsigned char*>(base) +
                   size_t(head * L.head_stride) * dtype_bytes(L.dtype);
        };
        t.v = at(t.v, one.v_l, h);
        t.g = at(t.g, one.g_l, h);
        t.beta = at(t.beta, one.beta_l, h);
        t.out = const_cast<unsigned char*>(at(t.out, one.out_l, h));
        t.v_head_stride = t.g_head_stride = t.beta_head_stride = t.out_head_stride = 0;
        t.state = one.state.as<float>() + h * s.k * s.v;
        t.state_slot_stride = int64_t(s.hv) * s.k * s.v;
        const gdn_caps_t caps = cpu_caps(1);
        Workspace ws;
        ws.size_for(caps, prob);
        ws.fill_nan();
        REQUIRE(gdn_chunked_recurrence(&caps, &prob, &t, ws.data(), ws.size(), nullptr) ==
                GDN_SUCCESS);
        for (int64_t tok = 0; tok < one.T; ++tok) {
            const size_t off = size_t(one.out_l.offset(tok, h)) * 4;
            if (std::memcmp(all.out.data() + off, one.out.data() + off, size_t(s.v) * 4) != 0) {
                FAIL_CHECK("out row of token " << tok << " differs");
                break;
            }
        }
        CHECK(std::memcmp(all.state.as<float>() + h * s.k * s.v, one.state.as<float>() + h * s.k * s.v,
                          size_t(s.k * s.v) * 4) == 0);
    }
}
