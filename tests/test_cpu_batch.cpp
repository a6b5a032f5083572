// Batches on the CPU paths: a varlen batch equals its sequences run one by
// one; padding sequences and slots nobody names stay untouched byte for
// byte; start-from-zero writes a slot without reading it; cu_seqlens NULL
// means equal lengths; a decode batch through a permuted pool is right.
#include <catch2/catch.hpp>

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
    {"chunked FP16 operands (C = 16)", GDN_ALGO_CHUNKED, GDN_PRECISION_FP16},
    // Each sequence as auto runs it alone: at K = V = 32 the 64-, 100- and
    // 129-token ones chunked, the 37-, 1- and 5-token ones sequential.
    {"auto", GDN_ALGO_AUTO, GDN_PRECISION_FP32},
};

Spec batch_spec(const PathCase& path) {
    Spec s;
    s.seq_lens = {37, 0, 100, 1, 64, 129, 5};
    s.state_indices = {4, 0, 2, -1, 6, 1, 3};
    s.start_from_zero = {0, 1, 0, 0, 1, 0, 0};
    s.num_state_slots = 8;  // slots 5 and 7: nobody's
    s.hk = 2;
    s.hv = 4;
    s.k = s.v = 32;
    s.algorithm = path.algorithm;
    s.precision = path.precision;
    s.seed = 5;
    return s;
}

// Marks the out buffer elements a run may write: the rows of live tokens.
std::vector<char> out_written_elements(const Problem& p) {
    std::vector<char> m(p.out_l.elements, 0);
    for (int64_t t = 0; t < p.T; ++t) {
        if (!p.live_token(t)) continue;
        for (int32_t h = 0; h < p.spec.hv; ++h)
            std::fill_n(m.begin() + std::ptrdiff_t(p.out_l.offset(t, h)), p.spec.v, char(1));
    }
    return m;
}

// "" when every element outside `written` has the bytes of `before`.
std::string untouched_outside(const std::vector<unsigned char>& before, const Bytes& after,
                              const std::vector<char>& written, size_t esize, const char* what) {
    for (size_t e = 0; e < written.size(); ++e) {
        if (written[e]) continue;
        if (std::memcmp(before.data() + e * esize, after.data() + e * esize, esize) != 0)
            return std::string(what) + ": element " + std::to_string(e) +
                   " changed, but no live sequence owns it";
    }
    return "";
}

}  // namespace

TEST_CASE("a varlen batch equals the same sequences run one by one", "[cpu][batch]") {
    const gdn_caps_t caps = cpu_caps();
    for (const PathCase& path : kPaths) {
        INFO(path.name);
        const Spec s = batch_spec(path);
        Problem batch(s);
        REQUIRE(run(batch, caps) == GDN_SUCCESS);

        Problem single(s);
        for (int32_t seq = 0; seq < int32_t(s.seq_lens.size()); ++seq) {
            const int32_t len = s.seq_lens[size_t(seq)];
            const int32_t slot = single.state_indices[size_t(seq)];
            if (len == 0) {
                // Nothing to run alone; the batch must zero a start-from-zero slot.
                if (slot >= 0 && single.start_from_zero[size_t(seq)])
                    std::fill_n(single.state.as<float>() + slot * single.slot_stride,
                                s.hv * s.k * s.v, 0.0f);
                continue;
            }
            gdn_problem_t prob;
            gdn_tensors_t t;
            single.part(single.cu_seqlens[size_t(seq)], len, &prob, &t);
            prob.num_seqs = 1;
            t.state_indices = &single.state_indices[size_t(seq)];
            t.start_from_zero = &single.start_from_zero[size_t(seq)];
            Workspace ws;
            ws.size_for(caps, prob);
            ws.fill_nan();
            INFO("sequence " << seq);
            REQUIRE(gdn_chunked_recurrence(&caps, &prob, &t, ws.data(), ws.size(), nullptr) ==
                    GDN_SUCCESS);
        }
        CHECK(first_byte_difference(batch.out, single.out, "out") == "");
        CHECK(first_byte_difference(batch.state, single.state, "state pool") == "");
        // And the batch is right.
        const Reference want = reference(batch);
        // FP32 paths: 2e-6 of max|ref|; FP16 operands: the HIP bound.
        const bool lowp = path.precision == GDN_PRECISION_FP16;
        const Bound bound = lowp ? Bound{0.02, 0, 1e-5} : Bound{2e-6};
        const Comparison out = compare_out(batch, want.out, bound);
        const Comparison state = compare_state(batch, want.state, bound);
        INFO(describe(out, "out"));
        INFO(describe(state, "state"));
        CHECK(out.ok());
        CHECK(state.ok());
    }
}

TEST_CASE("padding sequences and unnamed slots stay untouched, byte for byte", "[cpu][batch]") {
    const gdn_caps_t caps = cpu_caps();
    for (const PathCase& path : kPaths) {
        INFO(path.name);
        Spec s;
        s.seq_lens = {20, 15, 70, 3, 66};
        s.state_indices = {3, -1, 0, -2, 5};
        s.num_state_slots = 6;
        s.slot_pad = 7;  // floats between slots: never written
        s.row_pad = 4;   // elements between out rows: never written
        s.head_pad = 1;
        s.hk = 1;
        s.hv = 2;
        s.k = s.v = 16;
        s.algorithm = path.algorithm;
        s.precision = path.precision;
        Problem p(s);
        // A pattern in out (not NaN), so a write of anything shows.
        std::memset(p.out.data(), 0x5A, p.out.size());
        const std::vector<unsigned char> out_before = p.out.snapshot();
        const std::vector<unsigned char> state_before = p.state.snapshot();
        REQUIRE(run(p, caps) == GDN_SUCCESS);

        CHECK(untouched_outside(out_before, p.out, out_written_elements(p), 4, "out") == "");
        CHECK(untouched_outside(state_before, p.state, p.state_live(), 4, "state pool") == "");
        CHECK(p.out.guard_damage() == "");
        CHECK(p.state.guard_damage() == "");
        // The live rows were written (the pattern is gone from each).
        const std::vector<float> out = p.out_f32();
        const std::vector<char> live = p.out_live();
        for (size_t i = 0; i < out.size(); ++i)
            if (live[i] && std::memcmp(&out[i], out_before.data(), 4) == 0) {
                FAIL_CHECK(p.out_index(i) << " still holds the pattern");
                break;
            }
    }
}

TEST_CASE("start from zero: the slot is written, never read", "[cpu][batch]") {
    const gdn_caps_t caps = cpu_caps();
    for (const PathCase& path : kPaths) {
        INFO(path.name);
        Spec s;
        s.seq_lens = {50, 70, 0};
        s.state_indices = {1, 0, 2};
        s.start_from_zero = {1, 0, 1};
        s.hk = 1;
        s.hv = 2;
        s.k = s.v = 16;
        s.algorithm = path.algorithm;
        s.precision = path.precision;
        const int64_t slot_elems = int64_t(s.hv) * s.k * s.v;

        // Slots 1 and 2 hold NaN: a read of either would show in the result.
        Problem nan_slots(s);
        std::fill_n(nan_slots.state_initial.begin() + slot_elems, 2 * slot_elems,
                    std::numeric_limits<float>::quiet_NaN());
        nan_slots.reset_state();
        REQUIRE(run(nan_slots, caps) == GDN_SUCCESS);

        // The same from slots of zeros without the flag.
        Spec z = s;
        z.start_from_zero.clear();
        Problem zero_slots(z);
        std::fill_n(zero_slots.state_initial.begin() + slot_elems, 2 * slot_elems, 0.0f);
        zero_slots.reset_state();
        REQUIRE(run(zero_slots, caps) == GDN_SUCCESS);

        CHECK(first_byte_difference(nan_slots.out, zero_slots.out, "out") == "");
        CHECK(first_byte_difference(nan_slots.state, zero_slots.state, "state pool") == "");
        // The zero-length sequence's slot is now zero.
        const float* slot2 = nan_slots.state.as<float>() + 2 * slot_elems;
        CHECK(std::all_of(slot2, slot2 + slot_elems, [](float x) { return x == 0.0f; }));
    }
}

TEST_CASE("cu_seqlens NULL means equal lengths num_tokens / num_seqs", "[cpu][batch]") {
    const gdn_caps_t caps = cpu_caps();
    for (const PathCase& path : kPaths) {
        INFO(path.name);
        Spec s;
        s.seq_lens = {67, 67, 67};
        s.hk = 1;
        s.hv = 2;
        s.k = s.v = 32;
        s.algorithm = path.algorithm;
        s.precision = path.precision;
        Problem with_cu(s);
        s.null_cu_seqlens = true;
        s.max_seqlen = 0;
        Problem without(s);
        REQUIRE(run(with_cu, caps) == GDN_SUCCESS);
        REQUIRE(run(without, caps) == GDN_SUCCESS);
        CHECK(first_byte_difference(with_cu.out, without.out, "out") == "");
        CHECK(first_byte_difference(with_cu.state, without.state, "state pool") == "");
    }
}

TEST_CASE("a decode batch through a permuted state pool matches FP64, step after step",
          "[cpu][batch]") {
    const gdn_caps_t caps = cpu_caps();
    Spec s;
    s.seq_lens = std::vector<int32_t>(8, 1);
    s.null_cu_seqlens = true;
    s.state_indices = {5, 2, 7, 0, -1, 3, 1, 6};
    s.num_state_slots = 9;
    s.hk = 2;
    s.hv = 4;
    s.k = s.v = 64;
    s.layout = GDN_STATE_VK;
    std::vector<float> pool;  // carried from step to step
    for (int step = 0; step < 3; ++step) {
        s.seed = uint64_t(100 + step);  // new tokens each step
        Problem p(s);
        if (!pool.empty()) {
            p.state_initial = pool;
            p.reset_state();
        }
        REQUIRE(selected_path(p, caps) == GDN_PATH_SEQUENTIAL);
        REQUIRE(run(p, caps) == GDN_SUCCESS);
        const Reference want = reference(p);
        const Comparison out = compare_out(p, want.out, Bound{2e-6});
        const Comparison state = compare_state(p, want.state, Bound{2e-6});
        INFO("step " << step);
        INFO(describe(out, "out"));
        INFO(describe(state, "state"));
        CHECK(out.ok());
        CHECK(state.ok());
        pool = p.state_f32();
    }
}
