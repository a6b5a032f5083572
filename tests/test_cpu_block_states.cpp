// GDN_FLAG_BLOCK_STATES (prefix caching): with GDN_FLAG_TOKEN_STATES, only
// the entries of token_state_indices at the tokens that end a block of
// GDN_STATE_BLOCK tokens of their sequence, and at its last token, are read.
// Checked here, on the CPU's chunked paths (which keep these states from
// their chunk ends) and on its sequential path:
//   - each named slot holds, bit for bit, the state of a run of the same path
//     that stops at its token; outputs are those of a plain run;
//   - the entries at other tokens are ignored whatever they hold (past the
//     pool, another sequence's own slot, a slot named twice): no error, and
//     nothing written there;
//   - own slots are read, never written (unless a token names its own slot);
//     slots nobody writes, padding sequences' entries and guard bands are
//     untouched; cu_seqlens NULL too;
//   - auto runs the chunked path on the CPU with the flag, and the
//     sequential path on backends whose chunked paths do not keep these
//     states, where forced chunked says why; the flag alone is an error, and
//     bad entries where they are read are errors that name them.
#include <catch2/catch.hpp>

#include "token_states_support.hpp"

using namespace gdn_test;

namespace {

// A prefill batch: own slots 0, 1, 2, padding, 3; sequence 1 starts from
// zero. Slots 18, 19 are nobody's.
Spec batch_spec(const StateLayout& L) {
    Spec s;
    s.seq_lens = {200, 64, 1, 130, 130};
    s.state_indices = {0, 1, 2, -1, 3};
    s.start_from_zero = {0, 1, 0, 0, 0};
    s.num_state_slots = 20;
    s.hk = 1;
    s.hv = 2;
    apply_layout(s, L);
    s.seed = 31;
    return s;
}

// Per token: every entry the flag does not read holds something that would be
// an error if it were read (past the pool, another sequence's own slot, a
// slot named twice); the entries read:
//   sequence 0 (200 tokens): 63 -> 10, 127 -> 11, 191 -> none, 199 -> 12;
//   sequence 1 (64): 63 -> its own slot 1 (the block end is its last token);
//   sequence 2 (1): 0 -> 13;
//   sequence 3 (padding): 63 -> 14, which it must not write;
//   sequence 4 (130): 63 -> 15, 127 -> 16, 129 -> 17.
struct Named {
    int32_t seq;
    int64_t pos;
    int32_t slot;
};
const Named kNamed[] = {{0, 63, 10}, {0, 127, 11}, {0, 191, -1}, {0, 199, 12}, {1, 63, 1},
                        {2, 0, 13},  {3, 63, 14},  {4, 63, 15},  {4, 127, 16}, {4, 129, 17}};

std::vector<int32_t> block_slots(const Problem& p) {
    std::vector<int32_t> slots(size_t(p.T));
    const int32_t junk[] = {9999, 3, 10, -7, 0, 20};
    for (size_t i = 0; i < slots.size(); ++i) slots[i] = junk[i % 6];
    for (const Named& n : kNamed) slots[size_t(p.cu_seqlens[size_t(n.seq)] + n.pos)] = n.slot;
    return slots;
}

struct Mode {
    const char* name;
    gdn_algorithm_t algorithm;
    gdn_precision_t precision;
    gdn_path_t path;  // the path the batch takes
};
const Mode kModes[] = {
    {"auto (chunked, C = 32)", GDN_ALGO_AUTO, GDN_PRECISION_FP32, GDN_PATH_CHUNKED_FP32},
    {"chunked FP32, forced", GDN_ALGO_CHUNKED, GDN_PRECISION_FP32, GDN_PATH_CHUNKED_FP32},
    {"chunked C = 16, BF16 operands, forced", GDN_ALGO_CHUNKED, GDN_PRECISION_BF16,
     GDN_PATH_CHUNKED_LOWP_C16},
    {"sequential, forced", GDN_ALGO_SEQUENTIAL, GDN_PRECISION_FP32, GDN_PATH_SEQUENTIAL},
};

gdn_status_t run_block_states(Problem& p, const std::vector<int32_t>& token_slots, const Mode& m,
                              const gdn_caps_t& caps) {
    gdn_problem_t prob = p.problem;
    prob.flags |= GDN_FLAG_TOKEN_STATES | GDN_FLAG_BLOCK_STATES;
    prob.algorithm = m.algorithm;
    prob.precision = m.precision;
    gdn_tensors_t t = p.tensors();
    t.token_state_indices = token_slots.data();
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    if (gdn_status_t st = gdn_select_path(&caps, &prob, &t, &info)) return st;
    INFO(info.reason);
    CHECK(info.path == m.path);
    Workspace ws;
    ws.size_for(caps, prob);
    ws.fill_nan();
    return gdn_chunked_recurrence(&caps, &prob, &t, ws.data(), ws.size(), nullptr);
}

// Tokens [0, count) of sequence `seq` alone, a plain call of mode m's
// algorithm and precision, from that sequence's own slot (or zero): the slot
// then holds the state after the last of them.
void run_prefix(Problem& p, int32_t seq, int64_t count, const Mode& m, const gdn_caps_t& caps) {
    gdn_problem_t prob;
    gdn_tensors_t t;
    p.part(p.cu_seqlens[size_t(seq)], count, &prob, &t);
    prob.num_seqs = 1;
    prob.algorithm = m.algorithm;
    prob.precision = m.precision;
    const int32_t own = p.state_indices.empty() ? seq : p.state_indices[size_t(seq)];
    t.state_indices = &own;
    t.start_from_zero = p.start_from_zero.empty() ? nullptr : &p.start_from_zero[size_t(seq)];
    Workspace ws;
    ws.size_for(caps, prob);
    ws.fill_nan();
    REQUIRE(gdn_chunked_recurrence(&caps, &prob, &t, ws.data(), ws.size(), nullptr) == GDN_SUCCESS);
}

}  // namespace

TEST_CASE("block states: each named slot holds the state after its block end, bit for bit",
          "[cpu][token_states][block_states]") {
    const gdn_caps_t caps = cpu_caps();
    REQUIRE((caps.features & GDN_FEATURE_BLOCK_STATES) != 0);
    for (const StateLayout& L : kStateLayouts)
        for (const Mode& m : kModes) {
            INFO(L.name << "; " << m.name);
            const Spec s = batch_spec(L);
            Problem p(s);
            const std::vector<int32_t> slots = block_slots(p);
            const std::vector<unsigned char> before = p.state.snapshot();
            REQUIRE(run_block_states(p, slots, m, caps) == GDN_SUCCESS);
            CHECK(p.state.guard_damage() == "");
            CHECK(p.out.guard_damage() == "");

            std::vector<char> written(size_t(p.slots), 0);
            Problem single(s);
            for (const Named& n : kNamed) {
                if (n.slot < 0 || p.padding_seq(n.seq)) continue;
                written[size_t(n.slot)] = 1;
                single.reset_state();
                run_prefix(single, n.seq, n.pos + 1, m, caps);
                INFO("sequence " << n.seq << ", token " << n.pos << " -> slot " << n.slot);
                CHECK(std::memcmp(slot_at(p, n.slot), slot_at(single, single.state_indices[size_t(n.seq)]),
                                  slot_bytes(p)) == 0);
            }
            // The outputs: those of each sequence run alone.
            for (int32_t seq : {0, 1, 2, 4}) {
                single.reset_state();
                single.fill_out_nan();
                run_prefix(single, seq, s.seq_lens[size_t(seq)], m, caps);
                for (int64_t t = p.cu_seqlens[size_t(seq)]; t < p.cu_seqlens[size_t(seq) + 1]; ++t)
                    for (int32_t h = 0; h < s.hv; ++h) {
                        const size_t at = size_t(p.out_l.offset(t, h)) * dtype_bytes(s.output);
                        INFO("out row of token " << t << ", head " << h);
                        CHECK(std::memcmp(p.out.data() + at, single.out.data() + at,
                                          size_t(s.v) * dtype_bytes(s.output)) == 0);
                    }
            }
            // Own slots 0, 2, 3 only read; slot 14 (the padding sequence's)
            // and the junk entries' slots not written.
            check_untouched(p, before, written);
            for (int64_t t = p.cu_seqlens[3]; t < p.cu_seqlens[4]; ++t)
                CHECK(std::isnan(gdn::load_element(p.out.data(), s.output, p.out_l.offset(t, 0))));

            // The last states against FP64 (the FP32 paths).
            if (m.precision != GDN_PRECISION_FP32) continue;
            const Reference want = reference(p);
            const int64_t kv = int64_t(s.k) * s.v;
            double max_diff = 0, max_ref = 0;
            for (const Named& n : {kNamed[3], kNamed[4], kNamed[5], kNamed[9]}) {
                const int32_t own = s.state_indices[size_t(n.seq)];
                for (int64_t e = 0; e < s.hv * kv; ++e) {
                    const double r = want.state[size_t(own * p.slot_stride + e)];
                    const double g = p.state.as<float>()[size_t(n.slot * p.slot_stride + e)];
                    max_diff = std::max(max_diff, std::fabs(g - r));
                    max_ref = std::max(max_ref, std::fabs(r));
                }
            }
            INFO("max|diff| " << max_diff << ", max|ref| " << max_ref);
            CHECK(max_ref > 0.1);
            CHECK(max_diff <= 2e-6 * max_ref);
        }
}

TEST_CASE("block states: equal lengths without cu_seqlens, and one, two and five threads",
          "[cpu][token_states][block_states]") {
    Spec s;
    s.seq_lens = {100, 100, 100};
    s.null_cu_seqlens = true;
    s.num_state_slots = 9;
    s.hk = 1;
    s.hv = 3;
    s.k = s.v = 32;
    s.seed = 41;
    Problem one(s);
    // Sequence n keeps token 63 in slot 3 + 2n and its last token (99) in
    // slot 4 + 2n; the other entries are junk.
    std::vector<int32_t> slots(300, 1000);
    for (int32_t n = 0; n < 3; ++n) slots[size_t(100 * n + 63)] = 3 + 2 * n, slots[size_t(100 * n + 99)] = 4 + 2 * n;
    const std::vector<unsigned char> before = one.state.snapshot();
    const Mode& m = kModes[0];
    REQUIRE(run_block_states(one, slots, m, cpu_caps(1)) == GDN_SUCCESS);
    std::vector<char> written(9, 0);
    Problem single(s);
    for (int32_t n = 0; n < 3; ++n)
        for (int64_t pos : {63, 99}) {
            const int32_t slot = slots[size_t(100 * n + pos)];
            written[size_t(slot)] = 1;
            single.reset_state();
            run_prefix(single, n, pos + 1, m, cpu_caps(1));
            INFO("sequence " << n << ", token " << pos);
            CHECK(std::memcmp(slot_at(one, slot), slot_at(single, n), slot_bytes(one)) == 0);
        }
    check_untouched(one, before, written);
    for (int32_t threads : {2, 5}) {
        INFO(threads << " threads");
        Problem p(s);
        REQUIRE(run_block_states(p, slots, m, cpu_caps(threads)) == GDN_SUCCESS);
        CHECK(first_byte_difference(p.state, one.state, "state pool") == "");
        CHECK(first_byte_difference(p.out, one.out, "out") == "");
    }
}

TEST_CASE("block states: the chunked path where it keeps them, else sequential, and why",
          "[cpu][token_states][block_states][dispatch]") {
    const gdn_caps_t cpu = cpu_caps();
    Problem p(batch_spec(kStateLayouts[0]));
    gdn_problem_t prob = p.problem;
    prob.flags |= GDN_FLAG_TOKEN_STATES | GDN_FLAG_BLOCK_STATES;
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    REQUIRE(gdn_select_path(&cpu, &prob, nullptr, &info) == GDN_SUCCESS);
    CHECK(info.path == GDN_PATH_CHUNKED_FP32);
    CHECK(std::string(info.reason).find("GDN_FLAG_BLOCK_STATES") != std::string::npos);
    gdn_caps_t gpu = cpu;  // made by hand: the policy is pure
    gpu.features = GDN_FEATURE_TOKEN_STATES;
    gpu.compute_major = 9;
    gpu.multiprocessor_count = 132;
    gpu.shared_mem_per_block_optin = 227 * 1024;
    for (gdn_backend_t backend : {GDN_BACKEND_CUDA, GDN_BACKEND_HIP}) {
        INFO("backend " << int(backend));
        gpu.backend = backend;
        prob.algorithm = GDN_ALGO_AUTO;
        REQUIRE(gdn_select_path(&gpu, &prob, nullptr, &info) == GDN_SUCCESS);
        CHECK(info.path == GDN_PATH_SEQUENTIAL);
        CHECK(std::string(info.reason).find("GDN_FLAG_BLOCK_STATES") != std::string::npos);
        prob.algorithm = GDN_ALGO_CHUNKED;
        CHECK(gdn_select_path(&gpu, &prob, nullptr, &info) == GDN_ERROR_NOT_SUPPORTED);
        CHECK(std::string(gdn_last_error()).find("GDN_FEATURE_BLOCK_STATES") != std::string::npos);
    }
    // HIP's gfx11 path keeps them (tests/hip has its runs), and CUDA's
    // chunked paths on sm_80+ (tests/cuda): each precision as without them.
    gpu.features = GDN_FEATURE_TOKEN_STATES | GDN_FEATURE_BLOCK_STATES | GDN_FEATURE_GFX11_WMMA |
                   GDN_FEATURE_FP16_MMA;
    gpu.backend = GDN_BACKEND_HIP;
    prob.algorithm = GDN_ALGO_AUTO;
    prob.precision = GDN_PRECISION_FP16;
    prob.head_dim_k = prob.head_dim_v = 128;  // the HIP chunked path's
    REQUIRE(gdn_select_path(&gpu, &prob, nullptr, &info) == GDN_SUCCESS);
    INFO(info.reason);
    CHECK(info.path == GDN_PATH_CHUNKED_LOWP_C16);
    CHECK(std::string(info.reason).find("GDN_FLAG_BLOCK_STATES") != std::string::npos);
    gpu.backend = GDN_BACKEND_CUDA;
    gpu.features = GDN_FEATURE_TOKEN_STATES | GDN_FEATURE_BLOCK_STATES | GDN_FEATURE_ASYNC_COPY |
                   GDN_FEATURE_FP16_MMA | GDN_FEATURE_TF32_MMA | GDN_FEATURE_WGMMA;
    const struct {
        gdn_precision_t precision;
        gdn_dtype_t input;
        gdn_path_t path;
        int32_t chunk;
    } cuda_paths[] = {
        {GDN_PRECISION_FP32, GDN_DTYPE_F32, GDN_PATH_CHUNKED_FP32, 32},
        {GDN_PRECISION_TF32X3, GDN_DTYPE_F32, GDN_PATH_CHUNKED_TC, 32},
        {GDN_PRECISION_FP16, GDN_DTYPE_F32, GDN_PATH_CHUNKED_TC, 32},
        {GDN_PRECISION_BF16, GDN_DTYPE_F32, GDN_PATH_CHUNKED_TC, 32},   // the register-state scan
        {GDN_PRECISION_BF16, GDN_DTYPE_BF16, GDN_PATH_CHUNKED_TC, 64},  // the fused kernel
        {GDN_PRECISION_BF16X3, GDN_DTYPE_F32, GDN_PATH_CHUNKED_TC, 32},
        {GDN_PRECISION_FP16X3, GDN_DTYPE_F32, GDN_PATH_CHUNKED_TC, 32},  // BF16X3's split scan
        {GDN_PRECISION_FP16X3, GDN_DTYPE_F16, GDN_PATH_CHUNKED_TC, 32},
    };
    for (const auto& cp : cuda_paths) {
        prob.precision = cp.precision;
        prob.input_dtype = cp.input;
        REQUIRE(gdn_select_path(&gpu, &prob, nullptr, &info) == GDN_SUCCESS);
        INFO("precision " << int(cp.precision) << ", input " << int(cp.input) << ": " << info.reason);
        CHECK(info.path == cp.path);
        CHECK(info.chunk_size == cp.chunk);
        CHECK(info.precision == cp.precision);
        CHECK(std::string(info.reason).find("GDN_FLAG_BLOCK_STATES from the chunk ends") !=
              std::string::npos);
    }
    prob.input_dtype = p.problem.input_dtype;
    prob.precision = GDN_PRECISION_FP32;
    prob.head_dim_k = p.problem.head_dim_k;
    prob.head_dim_v = p.problem.head_dim_v;
    prob.algorithm = GDN_ALGO_CHUNKED;
    // Without GDN_FLAG_BLOCK_STATES forced chunked names it as the way out.
    prob.flags &= ~GDN_FLAG_BLOCK_STATES;
    CHECK(gdn_select_path(&cpu, &prob, nullptr, &info) == GDN_ERROR_NOT_SUPPORTED);
    CHECK(std::string(gdn_last_error()).find("GDN_FLAG_BLOCK_STATES") != std::string::npos);
}

TEST_CASE("block states: the flag alone and bad entries where they are read are errors, nothing written",
          "[cpu][token_states][block_states][validation]") {
    const gdn_caps_t caps = cpu_caps();
    struct Case {
        const char* name;
        int64_t token;  // the entry changed (-1: none)
        int32_t slot;
        uint32_t flags;
        const char* needle;
    };
    // Tokens 63 and 199 of sequence 0; token 63 of sequence 4, which starts
    // after 200 + 64 + 1 + 130 tokens: 458.
    const Case cases[] = {
        {"GDN_FLAG_BLOCK_STATES alone", -1, 0, GDN_FLAG_BLOCK_STATES,
         "has GDN_FLAG_BLOCK_STATES without GDN_FLAG_TOKEN_STATES"},
        {"a block end past the pool", 63, 20, GDN_FLAG_TOKEN_STATES | GDN_FLAG_BLOCK_STATES,
         "token_state_indices[63] (20) >= num_state_slots (20)"},
        {"a last token naming a block end's slot", 199, 10, GDN_FLAG_TOKEN_STATES | GDN_FLAG_BLOCK_STATES,
         "token_state_indices[63] and [199] both name slot 10"},
        {"a block end naming another sequence's own slot", 458, 0,
         GDN_FLAG_TOKEN_STATES | GDN_FLAG_BLOCK_STATES,
         "token_state_indices[458] (sequence 4) names slot 0, the own slot of sequence 0"},
    };
    for (const Case& c : cases) {
        INFO(c.name);
        Problem p(batch_spec(kStateLayouts[0]));
        std::vector<int32_t> slots = block_slots(p);
        if (c.token >= 0) slots[size_t(c.token)] = c.slot;
        const std::vector<unsigned char> state = p.state.snapshot(), out = p.out.snapshot();
        gdn_problem_t prob = p.problem;
        prob.flags |= c.flags;
        gdn_tensors_t t = p.tensors();
        if (c.flags & GDN_FLAG_TOKEN_STATES) t.token_state_indices = slots.data();
        Workspace ws;
        size_t bytes = 0;
        if (gdn_workspace_size(&caps, &prob, &bytes) == GDN_SUCCESS) ws.size_for(caps, prob);
        CHECK(gdn_chunked_recurrence(&caps, &prob, &t, ws.data(), ws.size(), nullptr) ==
              GDN_ERROR_INVALID_ARGUMENT);
        INFO(gdn_last_error());
        CHECK(std::string(gdn_last_error()).find(c.needle) != std::string::npos);
        CHECK(p.state.snapshot() == state);
        CHECK(p.out.snapshot() == out);
    }
}
