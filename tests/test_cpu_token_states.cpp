// GDN_FLAG_TOKEN_STATES (speculative decoding): the state after each token
// goes to the slot that token names. Checked here:
//   - every named slot holds, bit for bit, the state of a run that stops at
//     that token (the sequential kernel, which the feature tests hold to FP64),
//     and the last one matches FP64; outputs are those of a plain run;
//   - own slots are read, never written (unless a token names its own slot);
//     slots nobody writes, padding rows and guard bands stay untouched;
//   - one, two and five threads give the same bytes;
//   - a speculative round: keep the state of the last accepted draft token,
//     continue from it, and the result is the accepted stream run straight;
//   - auto takes the sequential path (on CUDA and HIP too); forced chunked is
//     NOT_SUPPORTED; bad indices are errors that name them, with nothing
//     written.
#include <catch2/catch.hpp>

#include "token_states_support.hpp"

using namespace gdn_test;

namespace {

// Five sequences of a speculative step: own slots 2, 7, 0, padding, 9; the
// third starts from zero. Slots 20..23 are nobody's.
Spec step_spec(const StateLayout& L) {
    Spec s;
    s.seq_lens = {4, 1, 3, 2, 5};
    s.state_indices = {2, 7, 0, -1, 9};
    s.start_from_zero = {0, 0, 1, 0, 0};
    s.num_state_slots = 24;
    s.hk = 2;
    s.hv = 4;
    apply_layout(s, L);
    s.seed = 11;
    return s;
}

// Per token: sequence 0 names its own slot for its first token and skips its
// third; sequence 1 (one token) a fresh slot, so its own slot is only read;
// sequence 2 its own slot last; the padding sequence names slot 9 (sequence
// 4's own) and 14, which it must not write; sequence 4 five fresh slots.
const std::vector<int32_t> kTokenSlots = {2, 10, -1, 11, /**/ 12, /**/ 13, -1, 0,
                                          /**/ 9, 14, /**/ 15, 16, 17, 18, 19};

gdn_status_t run_token_states(Problem& p, const std::vector<int32_t>& token_slots,
                              const gdn_caps_t& caps, gdn_algorithm_t algorithm = GDN_ALGO_AUTO) {
    gdn_problem_t prob = p.problem;
    prob.flags |= GDN_FLAG_TOKEN_STATES;
    prob.algorithm = algorithm;
    gdn_tensors_t t = p.tensors();
    t.token_state_indices = token_slots.data();
    Workspace ws;
    ws.size_for(caps, prob);
    ws.fill_nan();
    return gdn_chunked_recurrence(&caps, &prob, &t, ws.data(), ws.size(), nullptr);
}

// Runs tokens [bos, bos + count) of sequence `seq` of `p` alone on the
// sequential path, from that sequence's own slot (or zero), with a plain
// call: the slot then holds the state after the last of them.
void run_prefix(Problem& p, int32_t seq, int64_t count, const gdn_caps_t& caps) {
    gdn_problem_t prob;
    gdn_tensors_t t;
    p.part(p.cu_seqlens[size_t(seq)], count, &prob, &t);
    prob.num_seqs = 1;
    prob.algorithm = GDN_ALGO_SEQUENTIAL;
    t.state_indices = &p.state_indices[size_t(seq)];
    t.start_from_zero = p.start_from_zero.empty() ? nullptr : &p.start_from_zero[size_t(seq)];
    Workspace ws;
    ws.size_for(caps, prob);
    ws.fill_nan();
    REQUIRE(gdn_chunked_recurrence(&caps, &prob, &t, ws.data(), ws.size(), nullptr) == GDN_SUCCESS);
}

}  // namespace

TEST_CASE("per-token states: each named slot holds the state after its token, bit for bit",
          "[cpu][token_states]") {
    const gdn_caps_t caps = cpu_caps();
    REQUIRE((caps.features & GDN_FEATURE_TOKEN_STATES) != 0);
    for (const StateLayout& L : kStateLayouts) {
        INFO(L.name);
        const Spec s = step_spec(L);
        Problem p(s);
        const std::vector<unsigned char> before = p.state.snapshot();
        REQUIRE(run_token_states(p, kTokenSlots, caps) == GDN_SUCCESS);
        CHECK(p.state.guard_damage() == "");
        CHECK(p.out.guard_damage() == "");

        // Which slots the call may have written: the entries of live sequences.
        std::vector<char> written(size_t(p.slots), 0);
        Problem single(s);
        for (int32_t seq = 0; seq < int32_t(s.seq_lens.size()); ++seq) {
            if (p.padding_seq(seq)) continue;
            const int32_t bos = p.cu_seqlens[size_t(seq)];
            for (int32_t j = 0; j < s.seq_lens[size_t(seq)]; ++j) {
                const int32_t slot = kTokenSlots[size_t(bos + j)];
                if (slot < 0) continue;
                written[size_t(slot)] = 1;
                single.reset_state();
                run_prefix(single, seq, j + 1, caps);
                INFO("sequence " << seq << ", token " << j << " -> slot " << slot);
                CHECK(std::memcmp(slot_at(p, slot), slot_at(single, single.state_indices[size_t(seq)]),
                                  slot_bytes(p)) == 0);
            }
            // The outputs: those of the whole sequence run alone.
            single.reset_state();
            single.fill_out_nan();
            run_prefix(single, seq, s.seq_lens[size_t(seq)], caps);
            for (int64_t t = bos; t < p.cu_seqlens[size_t(seq) + 1]; ++t)
                for (int32_t h = 0; h < s.hv; ++h) {
                    const size_t at = size_t(p.out_l.offset(t, h)) * dtype_bytes(s.output);
                    INFO("out row of token " << t << ", head " << h);
                    CHECK(std::memcmp(p.out.data() + at, single.out.data() + at,
                                      size_t(s.v) * dtype_bytes(s.output)) == 0);
                }
        }
        // Every other slot (own slots only read, slot 14 of the padding
        // sequence, nobody's slots) and the gaps between slots: unchanged.
        check_untouched(p, before, written);
        // The padding sequence's out rows: still NaN.
        for (int64_t t = p.cu_seqlens[3]; t < p.cu_seqlens[4]; ++t)
            CHECK(std::isnan(gdn::load_element(p.out.data(), s.output, p.out_l.offset(t, 0))));

        // The last token's slot of every live sequence against FP64: the final
        // state of a plain run's reference.
        const Reference want = reference(p);
        const int64_t kv = int64_t(s.k) * s.v;
        double max_diff = 0, max_ref = 0;
        for (int32_t seq : {0, 1, 2, 4}) {
            const int32_t last = kTokenSlots[size_t(p.cu_seqlens[size_t(seq) + 1] - 1)];
            if (last < 0) continue;
            const int32_t own = s.state_indices[size_t(seq)];
            for (int64_t e = 0; e < s.hv * kv; ++e) {
                const double r = want.state[size_t(own * p.slot_stride + e)];
                const double g = p.state.as<float>()[size_t(last * p.slot_stride + e)];
                max_diff = std::max(max_diff, std::fabs(g - r));
                max_ref = std::max(max_ref, std::fabs(r));
            }
        }
        INFO("max|diff| " << max_diff << ", max|ref| " << max_ref);
        CHECK(max_ref > 0.1);
        CHECK(max_diff <= 2e-6 * max_ref);
    }
}

TEST_CASE("per-token states: the same bytes from one, two and five threads", "[cpu][token_states]") {
    const Spec s = step_spec(kStateLayouts[0]);
    Problem one(s);
    REQUIRE(run_token_states(one, kTokenSlots, cpu_caps(1)) == GDN_SUCCESS);
    for (int32_t threads : {2, 5}) {
        INFO(threads << " threads");
        Problem p(s);
        REQUIRE(run_token_states(p, kTokenSlots, cpu_caps(threads)) == GDN_SUCCESS);
        CHECK(first_byte_difference(p.state, one.state, "state pool") == "");
        CHECK(first_byte_difference(p.out, one.out, "out") == "");
    }
}

TEST_CASE("a speculative round: continue from the last accepted token's state", "[cpu][token_states]") {
    // Three sequences of one prompt's worth of decode (own slots 0, 1, 2),
    // each with 4 tokens per step: the token it is sure of and 3 drafts. Step
    // 1's states go to slots 3 + 4n .. 6 + 4n; sequence n accepts 1 + n of its
    // tokens, so step 2 continues from the state after its token n. Checked:
    // step 2's outputs and final states equal those of the accepted tokens and
    // step 2's run straight through (sequential, one call per sequence).
    const gdn_caps_t caps = cpu_caps();
    Spec s;
    s.seq_lens = {8, 8, 8};  // step 1: tokens 0-3 of each, step 2: 4-7
    s.num_state_slots = 15;
    s.state_indices = {0, 1, 2};
    s.hk = 1;
    s.hv = 2;
    s.k = s.v = 32;
    s.seed = 23;
    Problem full(s);  // the token streams; runs below take parts of them

    // Step 1 and 2 through the feature, one call each for all three
    // sequences (equal lengths, cu_seqlens NULL): tokens 4n..4n+3 of the call
    // are tokens 0..3 (step 1) or 4..7 (step 2) of sequence n.
    auto step = [&](Problem& p, int32_t first, const std::vector<int32_t>& own,
                    const std::vector<int32_t>& token_slots) {
        gdn_problem_t prob = p.problem;
        prob.num_seqs = 3;
        prob.num_tokens = 12;
        prob.max_seqlen = 4;
        prob.flags |= GDN_FLAG_TOKEN_STATES;
        // The three sequences' 4 tokens, gathered into one packed call.
        std::vector<float> q(12 * 32), k(12 * 32), v(12 * 2 * 32), g(12 * 2), b(12 * 2), out(12 * 2 * 32);
        for (int32_t n = 0; n < 3; ++n)
            for (int32_t j = 0; j < 4; ++j) {
                const int64_t src = p.cu_seqlens[size_t(n)] + first + j, dst = 4 * n + j;
                for (int32_t i = 0; i < 32; ++i) {
                    q[size_t(dst * 32 + i)] = p.q.as<float>()[p.q_l.offset(src, 0) + i];
                    k[size_t(dst * 32 + i)] = p.k.as<float>()[p.k_l.offset(src, 0) + i];
                }
                for (int32_t h = 0; h < 2; ++h) {
                    for (int32_t i = 0; i < 32; ++i)
                        v[size_t((dst * 2 + h) * 32 + i)] = p.v.as<float>()[p.v_l.offset(src, h) + i];
                    g[size_t(dst * 2 + h)] = p.g.as<float>()[p.g_l.offset(src, h)];
                    b[size_t(dst * 2 + h)] = p.beta.as<float>()[p.beta_l.offset(src, h)];
                }
            }
        gdn_tensors_t t;
        gdn_tensors_init(&t);
        t.q = q.data();
        t.k = k.data();
        t.v = v.data();
        t.g = g.data();
        t.beta = b.data();
        t.out = out.data();
        t.state = p.state.as<float>();
        t.state_indices = own.data();
        t.token_state_indices = token_slots.data();
        Workspace ws;
        ws.size_for(caps, prob);
        REQUIRE(gdn_chunked_recurrence(&caps, &prob, &t, ws.data(), ws.size(), nullptr) == GDN_SUCCESS);
        return out;
    };
    Problem spec_run(s);
    std::vector<int32_t> slots1, slots2;
    for (int32_t n = 0; n < 3; ++n)
        for (int32_t j = 0; j < 4; ++j) slots1.push_back(3 + 4 * n + j);
    step(spec_run, 0, {0, 1, 2}, slots1);
    // Sequence n accepted tokens 0..n: it continues from slot 3 + 4n + n and
    // writes step 2's last state into its old own slot n.
    const std::vector<int32_t> own2 = {3, 8, 13};
    for (int32_t n = 0; n < 3; ++n) slots2.insert(slots2.end(), {-1, -1, -1, n});
    const std::vector<float> out2 = step(spec_run, 4, own2, slots2);

    // Straight: sequence n's accepted tokens 0..n, then tokens 4..7, each a
    // plain sequential run over the concatenation.
    for (int32_t n = 0; n < 3; ++n) {
        INFO("sequence " << n);
        Problem straight(s);
        const int32_t bos = straight.cu_seqlens[size_t(n)];
        std::vector<int64_t> tokens;
        for (int32_t j = 0; j <= n; ++j) tokens.push_back(bos + j);
        for (int32_t j = 4; j < 8; ++j) tokens.push_back(bos + j);
        // One call per token (decode): the same sequential kernel.
        std::vector<float> out_rows;
        for (int64_t tok : tokens) {
            gdn_problem_t prob;
            gdn_tensors_t t;
            straight.part(tok, 1, &prob, &t);
            prob.num_seqs = 1;
            prob.algorithm = GDN_ALGO_SEQUENTIAL;
            t.state_indices = &straight.state_indices[size_t(n)];
            Workspace ws;
            ws.size_for(caps, prob);
            REQUIRE(gdn_chunked_recurrence(&caps, &prob, &t, ws.data(), ws.size(), nullptr) == GDN_SUCCESS);
            if (tok >= bos + 4)
                for (int32_t h = 0; h < 2; ++h)
                    for (int32_t i = 0; i < 32; ++i)
                        out_rows.push_back(straight.out.as<float>()[straight.out_l.offset(tok, h) + i]);
        }
        CHECK(std::memcmp(out_rows.data(), out2.data() + size_t(n) * 4 * 2 * 32, out_rows.size() * 4) == 0);
        CHECK(std::memcmp(slot_at(spec_run, n), slot_at(straight, n), slot_bytes(spec_run)) == 0);
    }
}

TEST_CASE("per-token states: auto runs sequential on every backend, chunked says why not",
          "[cpu][token_states][dispatch]") {
    const gdn_caps_t cpu = cpu_caps();
    Spec s = step_spec(kStateLayouts[0]);
    s.seq_lens = {200, 1, 3, 2, 5};  // auto would chunk a 200-token sequence
    Problem p(s);
    gdn_problem_t prob = p.problem;
    prob.flags |= GDN_FLAG_TOKEN_STATES;
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    REQUIRE(gdn_select_path(&cpu, &prob, nullptr, &info) == GDN_SUCCESS);
    CHECK(info.path == GDN_PATH_SEQUENTIAL);
    CHECK(std::string(info.reason).find("GDN_FLAG_TOKEN_STATES") != std::string::npos);
    prob.algorithm = GDN_ALGO_CHUNKED;
    CHECK(gdn_select_path(&cpu, &prob, nullptr, &info) == GDN_ERROR_NOT_SUPPORTED);
    CHECK(std::string(gdn_last_error()).find("only the sequential path") != std::string::npos);
    size_t bytes = 7;
    CHECK(gdn_workspace_size(&cpu, &prob, &bytes) == GDN_ERROR_NOT_SUPPORTED);
    CHECK(bytes == 7);
    prob.algorithm = GDN_ALGO_AUTO;
    gdn_caps_t gpu = cpu;  // made by hand: the policy is pure
    gpu.features = 0;
    gpu.compute_major = 9;
    for (gdn_backend_t backend : {GDN_BACKEND_CUDA, GDN_BACKEND_HIP}) {
        gpu.backend = backend;
        REQUIRE(gdn_select_path(&gpu, &prob, nullptr, &info) == GDN_SUCCESS);
        CHECK(info.path == GDN_PATH_SEQUENTIAL);
        CHECK(std::string(info.reason).find("GDN_FLAG_TOKEN_STATES") != std::string::npos);
    }
}

TEST_CASE("per-token states: bad indices are errors that name them, and nothing is written",
          "[cpu][token_states][validation]") {
    const gdn_caps_t caps = cpu_caps();
    struct Case {
        const char* name;
        std::vector<int32_t> slots;  // empty: NULL
        bool flag;
        const char* needle;
    };
    std::vector<int32_t> out_of_range = kTokenSlots, twice = kTokenSlots, others = kTokenSlots,
                         others_last = kTokenSlots;
    out_of_range[6] = 24;
    twice[14] = 10;    // sequence 4's last token and sequence 0's second
    others[1] = 7;     // sequence 0's second token names sequence 1's own slot
    others_last[14] = 7;  // sequence 4's last token names sequence 1's own slot
    const Case cases[] = {
        {"flag without indices", {}, true, "tensors.token_state_indices is NULL with GDN_FLAG_TOKEN_STATES"},
        {"indices without the flag", kTokenSlots, false, "without GDN_FLAG_TOKEN_STATES"},
        {"an entry past the pool", out_of_range, true, "token_state_indices[6] (24) >= num_state_slots (24)"},
        {"a slot written twice", twice, true, "token_state_indices[1] and [14] both name slot 10"},
        {"another sequence's own slot", others, true, "token_state_indices[1] (sequence 0) names slot 7, the own slot of sequence 1"},
        {"another sequence's own slot, last token", others_last, true, "token_state_indices[14] (sequence 4) names slot 7, the own slot of sequence 1"},
    };
    for (const Case& c : cases) {
        INFO(c.name);
        Problem p(step_spec(kStateLayouts[0]));
        const std::vector<unsigned char> state = p.state.snapshot(), out = p.out.snapshot();
        gdn_problem_t prob = p.problem;
        if (c.flag) prob.flags |= GDN_FLAG_TOKEN_STATES;
        gdn_tensors_t t = p.tensors();
        t.token_state_indices = c.slots.empty() ? nullptr : c.slots.data();
        Workspace ws;
        ws.size_for(caps, prob);
        CHECK(gdn_chunked_recurrence(&caps, &prob, &t, ws.data(), ws.size(), nullptr) ==
              GDN_ERROR_INVALID_ARGUMENT);
        INFO(gdn_last_error());
        CHECK(std::string(gdn_last_error()).find(c.needle) != std::string::npos);
        CHECK(p.state.snapshot() == state);
        CHECK(p.out.snapshot() == out);
    }
    // Misaligned, and inside out.
    Problem p(step_spec(kStateLayouts[0]));
    gdn_problem_t prob = p.problem;
    prob.flags |= GDN_FLAG_TOKEN_STATES;
    gdn_tensors_t t = p.tensors();
    std::vector<int32_t> buf(kTokenSlots.size() + 1);
    t.token_state_indices = reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(buf.data()) + 2);
    Workspace ws;
    ws.size_for(caps, prob);
    CHECK(gdn_chunked_recurrence(&caps, &prob, &t, ws.data(), ws.size(), nullptr) == GDN_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(gdn_last_error()).find("tensors.token_state_indices") != std::string::npos);
    CHECK(std::string(gdn_last_error()).find("aligned") != std::string::npos);
    t.token_state_indices = reinterpret_cast<const int32_t*>(p.out.data());
    CHECK(gdn_chunked_recurrence(&caps, &prob, &t, ws.data(), ws.size(), nullptr) == GDN_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(gdn_last_error()).find("tensors.out overlaps tensors.token_state_indices") !=
          std::string::npos);
}
