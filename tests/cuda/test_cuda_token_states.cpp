// GDN_FLAG_TOKEN_STATES on the CUDA backend (the sequential kernel): each
// named slot holds, bit for bit, the state of a run that stops at its token;
// outputs are a plain run's; own slots are read only; slots nobody writes,
// padding rows and guard bands are untouched; the last token's state matches
// FP64; reruns and a CUDA graph replay give the same bytes; GDN_FLAG_VALIDATE
// rejects a slot written twice with nothing written. GDN_FLAG_BLOCK_STATES:
// only block ends' and last tokens' entries read (the others junk), also
// under VALIDATE.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../token_states_support.hpp"
#include "cuda_support.hpp"

using namespace gdn_cuda_test;

namespace {

struct Layout {
    const char* name;
    int32_t k, v;
    gdn_state_layout_t state_layout;
    gdn_head_mapping_t mapping;
    gdn_dtype_t input;
    int64_t slot_pad;
};

const Layout kLayouts[] = {
    {"K = V = 128, [K][V], grouped, bf16", 128, 128, GDN_STATE_KV, GDN_HEADS_GROUPED, GDN_DTYPE_BF16, 0},
    {"K = 64, V = 40, [V][K], interleaved, f16, padded slots", 64, 40, GDN_STATE_VK, GDN_HEADS_INTERLEAVED,
     GDN_DTYPE_F16, 3},
    {"K = V = 64, [K][V], grouped, f32, a 20-token sequence", 64, 64, GDN_STATE_KV, GDN_HEADS_GROUPED,
     GDN_DTYPE_F32, 0},
};

// As tests/test_cpu_token_states.cpp: own slots 2, 7, 0, padding, 9; the
// third sequence starts from zero; the last one has 5 tokens (20 in the
// third layout: a longer run of the kernel's one-token tiles).
Spec step_spec(const Layout& L) {
    Spec s;
    const int32_t last = L.k == 64 && L.v == 64 ? 20 : 5;
    s.seq_lens = {4, 1, 3, 2, last};
    s.state_indices = {2, 7, 0, -1, 9};
    s.start_from_zero = {0, 0, 1, 0, 0};
    s.num_state_slots = 40;
    s.hk = 2;
    s.hv = 4;
    s.k = L.k;
    s.v = L.v;
    s.layout = L.state_layout;
    s.mapping = L.mapping;
    s.input = L.input;
    s.slot_pad = L.slot_pad;
    s.seed = 11;
    return s;
}

std::vector<int32_t> token_slots(const Spec& s) {
    std::vector<int32_t> t = {2, 10, -1, 11, /**/ 12, /**/ 13, -1, 0, /**/ 9, 14};
    for (int32_t j = 0; j < s.seq_lens[4]; ++j) t.push_back(j % 3 == 2 ? -1 : 15 + j);
    return t;
}

const void* offset(const void* base, int64_t elements, gdn_dtype_t dt) {
    return base ? static_cast<const char*>(base) + elements * int64_t(dtype_bytes(dt)) : nullptr;
}

// Tokens [bos, bos + count) of sequence `seq` alone (a plain call, forced
// sequential or `algorithm` at `precision`) from its own slot: the slot then
// holds the state after them. Returns the path the call took.
gdn_path_info_t run_prefix(const DeviceProblem& d, int32_t seq, int64_t count, const gdn_caps_t& caps,
                           gdn_algorithm_t algorithm = GDN_ALGO_SEQUENTIAL,
                           gdn_precision_t precision = GDN_PRECISION_FP32) {
    const Problem& p = d.host;
    const Spec& s = p.spec;
    const int64_t bos = p.cu_seqlens[size_t(seq)];
    gdn_problem_t one = p.problem;
    one.num_seqs = 1;
    one.num_tokens = count;
    one.max_seqlen = 0;
    one.algorithm = algorithm;
    one.precision = precision;
    gdn_tensors_t t = d.tensors();
    t.q = offset(t.q, bos * p.q_l.token_stride, s.input);
    t.k = offset(t.k, bos * p.k_l.token_stride, s.input);
    t.v = offset(t.v, bos * p.v_l.token_stride, s.input);
    t.g = offset(t.g, bos * p.g_l.token_stride, s.gate);
    t.beta = offset(t.beta, bos * p.beta_l.token_stride, s.gate);
    t.out = const_cast<void*>(offset(t.out, bos * p.out_l.token_stride, s.output));
    t.q_token_stride = p.q_l.token_stride, t.q_head_stride = p.q_l.head_stride;
    t.k_token_stride = p.k_l.token_stride, t.k_head_stride = p.k_l.head_stride;
    t.v_token_stride = p.v_l.token_stride, t.v_head_stride = p.v_l.head_stride;
    t.g_token_stride = p.g_l.token_stride, t.g_head_stride = p.g_l.head_stride;
    t.beta_token_stride = p.beta_l.token_stride, t.beta_head_stride = p.beta_l.head_stride;
    t.out_token_stride = p.out_l.token_stride, t.out_head_stride = p.out_l.head_stride;
    t.cu_seqlens = nullptr;
    t.state_indices += seq;
    t.start_from_zero += seq;
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    REQUIRE(gdn_select_path(&caps, &one, &t, &info) == GDN_SUCCESS);
    DeviceWorkspace ws;
    REQUIRE(ws.size_for(caps, one) == GDN_SUCCESS);
    REQUIRE(gdn_chunked_recurrence(&caps, &one, &t, ws.data(), ws.size(), nullptr) == GDN_SUCCESS);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    return info;
}


struct Flagged {
    gdn_problem_t problem;
    gdn_tensors_t tensors;
};

Flagged flagged(const DeviceProblem& d, const DeviceBuffer& slots, uint32_t extra_flags = 0) {
    Flagged f;
    f.problem = d.host.problem;
    f.problem.flags |= GDN_FLAG_TOKEN_STATES | extra_flags;
    f.tensors = d.tensors();
    f.tensors.token_state_indices = slots.as<const int32_t>();
    return f;
}

// A GDN_FLAG_BLOCK_STATES call of `d` (its token slots already in `slots`),
// out NaN-filled first and the workspace too: the path it took, the pool
// before and after, out after; guards checked.
struct BlockRun {
    gdn_path_info_t info;
    std::vector<unsigned char> before, after, out;
};
BlockRun run_block_states(DeviceProblem& d, const DeviceBuffer& slots, const gdn_caps_t& caps) {
    BlockRun r;
    d.fill_out_nan();
    r.before = d.state.bytes();
    Flagged f = flagged(d, slots, GDN_FLAG_BLOCK_STATES);
    gdn_path_info_init(&r.info);
    REQUIRE(gdn_select_path(&caps, &f.problem, &f.tensors, &r.info) == GDN_SUCCESS);
    DeviceWorkspace ws;
    REQUIRE(ws.size_for(caps, f.problem) == GDN_SUCCESS);
    ws.fill_nan();
    REQUIRE(gdn_chunked_recurrence(&caps, &f.problem, &f.tensors, ws.data(), ws.size(), nullptr) == GDN_SUCCESS);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(d.guard_damage() == "");
    r.after = d.state.bytes();
    r.out = d.out.bytes();
    return r;
}

}  // namespace

TEST_CASE("per-token states: each named slot holds the state after its token, bit for bit",
          "[cuda][token_states]") {
    const gdn_caps_t caps = cuda_caps();
    REQUIRE((caps.features & GDN_FEATURE_TOKEN_STATES) != 0);
    for (const Layout& L : kLayouts) {
        INFO(L.name);
        const Spec s = step_spec(L);
        const std::vector<int32_t> tsi = token_slots(s);
        Problem p(s);
        DeviceProblem d(p);
        DeviceBuffer slots(tsi.size() * 4);
        slots.upload(tsi.data(), slots.size());
        d.fill_out_nan();  // as before each rerun: padding rows keep these bytes
        const std::vector<unsigned char> before = d.state.bytes();
        Flagged f = flagged(d, slots);
        DeviceWorkspace ws;
        REQUIRE(ws.size_for(caps, f.problem) == GDN_SUCCESS);
        ws.fill_nan();
        REQUIRE(gdn_chunked_recurrence(&caps, &f.problem, &f.tensors, ws.data(), ws.size(), nullptr) ==
                GDN_SUCCESS);
        GDN_CUDA_CHECK(cudaDeviceSynchronize());
        CHECK(d.guard_damage() == "");
        const std::vector<unsigned char> after = d.state.bytes(), out = d.out.bytes();

        // Reruns: the same bytes.
        for (int r = 0; r < 10; ++r) {
            d.reset_state();
            d.fill_out_nan();
            REQUIRE(gdn_chunked_recurrence(&caps, &f.problem, &f.tensors, ws.data(), ws.size(), nullptr) ==
                    GDN_SUCCESS);
            GDN_CUDA_CHECK(cudaDeviceSynchronize());
            CHECK(same_bits(d.state.bytes(), after, "state pool") == "");
            CHECK(same_bits(d.out.bytes(), out, "out") == "");
        }

        std::vector<char> written(size_t(p.slots), 0);
        Problem single_host(s);
        DeviceProblem single(single_host);
        for (int32_t seq = 0; seq < int32_t(s.seq_lens.size()); ++seq) {
            if (p.padding_seq(seq)) continue;
            const int32_t bos = p.cu_seqlens[size_t(seq)];
            const int32_t own = s.state_indices[size_t(seq)];
            for (int32_t j = 0; j < s.seq_lens[size_t(seq)]; ++j) {
                const int32_t slot = tsi[size_t(bos + j)];
                if (slot < 0) continue;
                written[size_t(slot)] = 1;
                single.reset_state();
                run_prefix(single, seq, j + 1, caps);
                const std::vector<unsigned char> want = single.state.bytes();
                INFO("sequence " << seq << ", token " << j << " -> slot " << slot);
                CHECK(std::memcmp(after.data() + size_t(slot) * size_t(p.slot_stride) * 4,
                                  want.data() + size_t(own) * size_t(p.slot_stride) * 4, slot_bytes(p)) == 0);
            }
            // Outputs: those of the whole sequence run alone.
            single.reset_state();
            single.fill_out_nan();
            run_prefix(single, seq, s.seq_lens[size_t(seq)], caps);
            const std::vector<unsigned char> want_out = single.out.bytes();
            for (int64_t t = bos; t < p.cu_seqlens[size_t(seq) + 1]; ++t)
                for (int32_t h = 0; h < s.hv; ++h) {
                    const size_t at = size_t(p.out_l.offset(t, h)) * dtype_bytes(s.output);
                    INFO("out row of token " << t << ", head " << h);
                    CHECK(std::memcmp(out.data() + at, want_out.data() + at, size_t(s.v) * dtype_bytes(s.output)) ==
                          0);
                }
        }
        check_untouched(p, before, after, written);

        // The last token's slot of every live sequence against FP64.
        const Reference want = reference(p);
        double max_diff = 0, max_ref = 0;
        for (int32_t seq : {0, 1, 2, 4}) {
            const int32_t last = tsi[size_t(p.cu_seqlens[size_t(seq) + 1] - 1)];
            if (last < 0) continue;
            const int32_t own = s.state_indices[size_t(seq)];
            for (size_t e = 0; e < slot_bytes(p) / 4; ++e) {
                float g;
                std::memcpy(&g, after.data() + (size_t(last) * size_t(p.slot_stride) + e) * 4, 4);
                const double r = want.state[size_t(own) * size_t(p.slot_stride) + e];
                max_diff = std::max(max_diff, std::fabs(double(g) - r));
                max_ref = std::max(max_ref, std::fabs(r));
            }
        }
        INFO("max|diff| " << max_diff << ", max|ref| " << max_ref);
        CHECK(max_ref > 0.1);
        CHECK(max_diff <= 2e-6 * max_ref);
    }
}

TEST_CASE("per-token states: a CUDA graph replay gives a direct call's bytes, VALIDATE rejects a slot "
          "written twice",
          "[cuda][token_states][graph]") {
    const gdn_caps_t caps = cuda_caps();
    const Spec s = step_spec(kLayouts[0]);
    std::vector<int32_t> tsi = token_slots(s);
    Problem p(s);
    DeviceProblem d(p);
    DeviceBuffer slots(tsi.size() * 4);
    slots.upload(tsi.data(), slots.size());
    Flagged f = flagged(d, slots);
    DeviceWorkspace ws;
    REQUIRE(ws.size_for(caps, f.problem) == GDN_SUCCESS);
    d.fill_out_nan();  // as before the replay: padding rows keep these bytes
    REQUIRE(gdn_chunked_recurrence(&caps, &f.problem, &f.tensors, ws.data(), ws.size(), nullptr) == GDN_SUCCESS);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<unsigned char> state = d.state.bytes(), out = d.out.bytes();

    cudaStream_t stream;
    GDN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    d.reset_state(stream);
    d.fill_out_nan(stream);
    cudaGraph_t graph;
    GDN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const gdn_status_t st = gdn_chunked_recurrence(&caps, &f.problem, &f.tensors, ws.data(), ws.size(), stream);
    GDN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    REQUIRE(st == GDN_SUCCESS);
    cudaGraphExec_t exec;
    GDN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    GDN_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
    CHECK(same_bits(d.state.bytes(), state, "state pool") == "");
    CHECK(same_bits(d.out.bytes(), out, "out") == "");
    GDN_CUDA_CHECK(cudaGraphExecDestroy(exec));
    GDN_CUDA_CHECK(cudaGraphDestroy(graph));
    GDN_CUDA_CHECK(cudaStreamDestroy(stream));

    // A slot written twice, under GDN_FLAG_VALIDATE: refused, nothing written.
    tsi.back() = 10;
    slots.upload(tsi.data(), slots.size());
    d.reset_state();
    d.fill_out_nan();
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<unsigned char> state0 = d.state.bytes(), out0 = d.out.bytes();
    Flagged v = flagged(d, slots, GDN_FLAG_VALIDATE);
    CHECK(gdn_chunked_recurrence(&caps, &v.problem, &v.tensors, ws.data(), ws.size(), nullptr) ==
          GDN_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(gdn_last_error()).find("both name slot 10") != std::string::npos);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(same_bits(d.state.bytes(), state0, "state pool") == "");
    CHECK(same_bits(d.out.bytes(), out0, "out") == "");
}

TEST_CASE("block states (GDN_FLAG_BLOCK_STATES) from the sequential kernel: block ends' and last tokens' "
          "states, the other entries ignored, VALIDATE checks only those read",
          "[cuda][token_states][block_states]") {
    const gdn_caps_t caps = cuda_caps();
    // Own slots 0, 1, 2, padding, 3 (sequence 1 from zero); the entries read:
    // sequence 0's tokens 63 -> 10, 127 -> 11, 191 -> none, 199 -> 12; sequence
    // 1's 63 (its last) -> its own slot 1; sequence 2's only token -> 13; the
    // padding sequence's 63 -> 14 (not written); sequence 4's 63 -> 15, 127 ->
    // 16, 129 -> 17. Every other entry would be an error if it were read.
    // The sequential kernel's, forced (auto takes the chunked path here: the
    // case after this one).
    Spec s = step_spec(kLayouts[0]);
    s.seq_lens = {200, 64, 1, 130, 130};
    s.state_indices = {0, 1, 2, -1, 3};
    s.start_from_zero = {0, 1, 0, 0, 0};
    s.num_state_slots = 20;
    s.seed = 31;
    s.algorithm = GDN_ALGO_SEQUENTIAL;
    Problem p(s);
    std::vector<int32_t> tsi(size_t(p.T));
    const int32_t junk[] = {9999, 3, 10, -7, 0, 20};
    for (size_t i = 0; i < tsi.size(); ++i) tsi[i] = junk[i % 6];
    struct Named {
        int32_t seq;
        int64_t pos;
        int32_t slot;
    };
    const Named named[] = {{0, 63, 10}, {0, 127, 11}, {0, 191, -1}, {0, 199, 12}, {1, 63, 1},
                           {2, 0, 13},  {3, 63, 14},  {4, 63, 15},  {4, 127, 16}, {4, 129, 17}};
    for (const Named& n : named) tsi[size_t(p.cu_seqlens[size_t(n.seq)] + n.pos)] = n.slot;
    DeviceProblem d(p);
    DeviceBuffer slots(tsi.size() * 4);
    slots.upload(tsi.data(), slots.size());
    const BlockRun run = run_block_states(d, slots, caps);
    CHECK(run.info.path == GDN_PATH_SEQUENTIAL);
    const std::vector<unsigned char>&before = run.before, &after = run.after, &out = run.out;

    std::vector<char> written(size_t(p.slots), 0);
    Problem single_host(s);
    DeviceProblem single(single_host);
    for (const Named& n : named) {
        if (n.slot < 0 || p.padding_seq(n.seq)) continue;
        written[size_t(n.slot)] = 1;
        single.reset_state();
        run_prefix(single, n.seq, n.pos + 1, caps);
        const std::vector<unsigned char> want = single.state.bytes();
        INFO("sequence " << n.seq << ", token " << n.pos << " -> slot " << n.slot);
        CHECK(std::memcmp(after.data() + size_t(n.slot) * size_t(p.slot_stride) * 4,
                          want.data() + size_t(s.state_indices[size_t(n.seq)]) * size_t(p.slot_stride) * 4,
                          slot_bytes(p)) == 0);
    }
    for (int32_t seq : {0, 1, 2, 4}) {  // outputs: each sequence run alone
        single.reset_state();
        single.fill_out_nan();
        run_prefix(single, seq, s.seq_lens[size_t(seq)], caps);
        const std::vector<unsigned char> want_out = single.out.bytes();
        for (int64_t t = p.cu_seqlens[size_t(seq)]; t < p.cu_seqlens[size_t(seq) + 1]; ++t)
            for (int32_t h = 0; h < s.hv; ++h) {
                const size_t at = size_t(p.out_l.offset(t, h)) * dtype_bytes(s.output);
                INFO("out row of token " << t << ", head " << h);
                CHECK(std::memcmp(out.data() + at, want_out.data() + at, size_t(s.v) * dtype_bytes(s.output)) == 0);
            }
    }
    check_untouched(p, before, after, written);

    // GDN_FLAG_VALIDATE reads the same entries: the junk passes, with the same bytes ...
    Flagged v = flagged(d, slots, GDN_FLAG_BLOCK_STATES | GDN_FLAG_VALIDATE);
    DeviceWorkspace ws;
    REQUIRE(ws.size_for(caps, v.problem) == GDN_SUCCESS);
    d.reset_state();
    d.fill_out_nan();
    REQUIRE(gdn_chunked_recurrence(&caps, &v.problem, &v.tensors, ws.data(), ws.size(), nullptr) == GDN_SUCCESS);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(same_bits(d.state.bytes(), after, "state pool") == "");
    CHECK(same_bits(d.out.bytes(), out, "out") == "");
    // ... and a block end past the pool is refused, with nothing written.
    tsi[63] = 20;
    slots.upload(tsi.data(), slots.size());
    d.reset_state();
    d.fill_out_nan();
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<unsigned char> state0 = d.state.bytes(), out0 = d.out.bytes();
    CHECK(gdn_chunked_recurrence(&caps, &v.problem, &v.tensors, ws.data(), ws.size(), nullptr) ==
          GDN_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(gdn_last_error()).find("token_state_indices[63] (20) >= num_state_slots (20)") !=
          std::string::npos);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(same_bits(d.state.bytes(), state0, "state pool") == "");
    CHECK(same_bits(d.out.bytes(), out0, "out") == "");
}

TEST_CASE("block states (GDN_FLAG_BLOCK_STATES) on every CUDA chunked path (the FP32 and tensor-core scans "
          "across windows, the fused BF16 kernel): kept states bit for bit with their prefixes' runs",
          "[cuda][token_states][block_states]") {
    const gdn_caps_t caps = cuda_caps();
    REQUIRE((caps.features & GDN_FEATURE_BLOCK_STATES) != 0);
    // The paths below are an H100/H200's (sm_90 with the library's sm_90a
    // code); elsewhere each variant runs the chunked path its precision gets.
    const bool hopper = caps.compute_major == 9 && (caps.features & GDN_FEATURE_WGMMA) != 0;
    struct Variant {
        const char* name;
        int32_t kv;
        gdn_state_layout_t layout;
        gdn_head_mapping_t mapping;
        gdn_dtype_t input, output;
        gdn_precision_t precision;
        int64_t slot_pad;
        uint32_t flags;
        gdn_path_t path;  // on sm_90
        int32_t chunk;
    };
    const Variant variants[] = {
        {"FP32 scan: K = V = 128, [K][V], grouped, bf16, q/k L2 norm", 128, GDN_STATE_KV, GDN_HEADS_GROUPED,
         GDN_DTYPE_BF16, GDN_DTYPE_F32, GDN_PRECISION_FP32, 0, GDN_FLAG_QK_L2NORM, GDN_PATH_CHUNKED_FP32, 32},
        {"TF32X3 scan: K = V = 64, [K][V], interleaved, bf16 in and out", 64, GDN_STATE_KV, GDN_HEADS_INTERLEAVED,
         GDN_DTYPE_BF16, GDN_DTYPE_BF16, GDN_PRECISION_TF32X3, 0, 0u, GDN_PATH_CHUNKED_TC, 32},
        {"register-state scan, BF16: K = V = 64, [V][K], interleaved, f32, padded slots, q/k L2 norm", 64,
         GDN_STATE_VK, GDN_HEADS_INTERLEAVED, GDN_DTYPE_F32, GDN_DTYPE_F32, GDN_PRECISION_BF16, 3,
         GDN_FLAG_QK_L2NORM, GDN_PATH_CHUNKED_TC, 32},
        {"register-state scan, FP16: K = V = 128, [V][K], grouped, f16 in and out", 128, GDN_STATE_VK,
         GDN_HEADS_GROUPED, GDN_DTYPE_F16, GDN_DTYPE_F16, GDN_PRECISION_FP16, 0, 0u, GDN_PATH_CHUNKED_TC, 32},
        {"register-state scan, BF16X3: K = V = 128, [K][V], interleaved, f32, padded slots", 128, GDN_STATE_KV,
         GDN_HEADS_INTERLEAVED, GDN_DTYPE_F32, GDN_DTYPE_F32, GDN_PRECISION_BF16X3, 3, 0u, GDN_PATH_CHUNKED_TC,
         32},
        {"register-state scan, FP16X3: K = V = 128, [V][K], grouped, f16 in, f32 out, padded slots", 128,
         GDN_STATE_VK, GDN_HEADS_GROUPED, GDN_DTYPE_F16, GDN_DTYPE_F32, GDN_PRECISION_FP16X3, 3, 0u,
         GDN_PATH_CHUNKED_TC, 32},
        {"fused kernel: K = V = 128, [V][K], interleaved, bf16, padded slots, q/k L2 norm", 128, GDN_STATE_VK,
         GDN_HEADS_INTERLEAVED, GDN_DTYPE_BF16, GDN_DTYPE_F32, GDN_PRECISION_BF16, 3, GDN_FLAG_QK_L2NORM,
         GDN_PATH_CHUNKED_TC, 64},
        {"fused kernel: K = V = 128, [K][V], grouped, bf16 in and out", 128, GDN_STATE_KV, GDN_HEADS_GROUPED,
         GDN_DTYPE_BF16, GDN_DTYPE_BF16, GDN_PRECISION_BF16, 0, 0u, GDN_PATH_CHUNKED_TC, 64},
    };
    for (const Variant& var : variants) {
        INFO(var.name);
        // 5364 tokens: windows of 2048 (the workspace gdn_workspace_size
        // gives), crossed by sequences 0 (2100 tokens) and 2 (3000). Own
        // slots 0, padding, 1, 2 (named by its last token), 3, 4, 5 (empty,
        // from zero: untouched), 6.
        Spec s;
        s.seq_lens = {2100, 70, 3000, 64, 129, 1, 0, 200};
        s.state_indices = {0, -1, 1, 2, 3, 4, 5, 6};
        s.start_from_zero = {0, 0, 1, 0, 1, 0, 1, 0};
        s.hk = 2;
        s.hv = 4;
        s.k = s.v = var.kv;
        s.layout = var.layout;
        s.mapping = var.mapping;
        s.input = var.input;
        s.output = var.output;
        s.precision = var.precision;
        s.slot_pad = var.slot_pad;
        s.flags = var.flags;
        s.seed = 47;
        // The entries read: kept at the first two block ends, near the
        // window edges (token 2048 and 4096 of the batch), every ninth block
        // end and the last token (sequence 4's: none); -1 at the others;
        // the padding sequence names slots 7 and 8, which it must not
        // write; every entry not read holds junk.
        struct Named {
            int32_t seq;
            int64_t pos;
            int32_t slot;
        };
        std::vector<Named> named;
        int32_t next_slot = 9;
        std::vector<int32_t> tsi;
        const int32_t junk[] = {9999, 3, -7, 0, 100000};
        for (int32_t n = 0, bos = 0; n < int32_t(s.seq_lens.size()); bos += s.seq_lens[size_t(n++)]) {
            const int64_t len = s.seq_lens[size_t(n)];
            for (int64_t i = 0; i < len; ++i) {
                tsi.push_back(junk[(bos + i) % 5]);
                if ((i + 1) % GDN_STATE_BLOCK != 0 && i != len - 1) continue;
                const int64_t edge = (bos + i + 1) % 2048;
                int32_t slot = -1;
                if (n == 1) slot = i == 63 ? 7 : 8;
                else if (n == 3 && i == len - 1) slot = 2;  // its own slot
                else if (n == 4 && i == len - 1) slot = -1;
                else if (i < 128 || i == len - 1 || edge < 160 || edge > 1920 || (i / 64) % 9 == 4)
                    slot = next_slot++;
                tsi.back() = slot;
                if (slot >= 0 && n != 1) named.push_back({n, i, slot});
            }
        }
        s.num_state_slots = next_slot;
        Problem p(s);
        REQUIRE(p.T == int64_t(tsi.size()));
        DeviceProblem d(p);
        DeviceBuffer slots(tsi.size() * 4);
        slots.upload(tsi.data(), slots.size());
        const BlockRun run = run_block_states(d, slots, caps);
        INFO(run.info.reason);
        CHECK(run.info.path != GDN_PATH_SEQUENTIAL);
        if (hopper) {
            CHECK(run.info.path == var.path);
            CHECK(run.info.chunk_size == var.chunk);
            CHECK(run.info.precision == var.precision);
        }
        CHECK(std::string(run.info.reason).find("GDN_FLAG_BLOCK_STATES") != std::string::npos);
        // The plain call and the prefix runs on the flagged call's path.
        const gdn_precision_t run_precision = run.info.precision;
        const std::vector<unsigned char>&before = run.before, &after = run.after, &out = run.out;

        // A rerun (the workspace NaN again) gives the same bytes.
        d.reset_state();
        const BlockRun again = run_block_states(d, slots, caps);
        CHECK(same_bits(again.after, after, "state pool (rerun)") == "");
        CHECK(same_bits(again.out, out, "out (rerun)") == "");

        // The plain call on the same path: the same out bytes, and its final
        // states where the last tokens keep them.
        gdn_problem_t plain = d.host.problem;
        plain.algorithm = GDN_ALGO_CHUNKED;
        plain.precision = run_precision;
        gdn_tensors_t plain_t = d.tensors();
        gdn_path_info_t plain_info;
        gdn_path_info_init(&plain_info);
        REQUIRE(gdn_select_path(&caps, &plain, &plain_t, &plain_info) == GDN_SUCCESS);
        CHECK(plain_info.path == run.info.path);
        CHECK(plain_info.chunk_size == run.info.chunk_size);
        d.reset_state();
        d.fill_out_nan();
        DeviceWorkspace plain_ws;
        REQUIRE(plain_ws.size_for(caps, plain) == GDN_SUCCESS);
        REQUIRE(gdn_chunked_recurrence(&caps, &plain, &plain_t, plain_ws.data(), plain_ws.size(), nullptr) ==
                GDN_SUCCESS);
        GDN_CUDA_CHECK(cudaDeviceSynchronize());
        CHECK(same_bits(d.out.bytes(), out, "out (plain call)") == "");
        const std::vector<unsigned char> plain_state = d.state.bytes();

        std::vector<char> written(size_t(p.slots), 0);
        Problem single_host(s);
        DeviceProblem single(single_host);
        int prefix_runs = 0;
        for (const Named& n : named) {
            written[size_t(n.slot)] = 1;
            const int64_t len = s.seq_lens[size_t(n.seq)];
            const int32_t own = s.state_indices[size_t(n.seq)];
            INFO("sequence " << n.seq << ", token " << n.pos << " of " << len << " -> slot " << n.slot);
            const unsigned char* got = after.data() + size_t(n.slot) * size_t(p.slot_stride) * 4;
            if (n.pos == len - 1) {
                CHECK(std::memcmp(got, plain_state.data() + size_t(own) * size_t(p.slot_stride) * 4,
                                  slot_bytes(p)) == 0);
                continue;
            }
            single.reset_state();
            const gdn_path_info_t prefix = run_prefix(single, n.seq, n.pos + 1, caps, GDN_ALGO_CHUNKED, run_precision);
            CHECK(prefix.path == run.info.path);
            CHECK(prefix.chunk_size == run.info.chunk_size);
            ++prefix_runs;
            const std::vector<unsigned char> want = single.state.bytes();
            CHECK(std::memcmp(got, want.data() + size_t(own) * size_t(p.slot_stride) * 4, slot_bytes(p)) == 0);
        }
        CHECK(prefix_runs >= 12);
        // Nothing else in the pool changed: own slots (read, not written; 2
        // is named), the padding sequence's 7 and 8, the empty sequence's 5,
        // the gaps after every slot.
        check_untouched(p, before, after, written);
    }
}
