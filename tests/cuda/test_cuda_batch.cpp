// Batches: a decode step (one token for each of N sequences, states in a
// pool, padding slots, mixed zero-start flags) equals N separate runs bit for
// bit; a varlen prompt batch on the chunked path equals its sequences run one
// by one; a call captured in a CUDA graph and replayed gives the bits of a
// direct call.
#include <catch2/catch.hpp>

#include <cstdio>

#include "cuda_support.hpp"

using namespace gdn_cuda_test;

namespace {

const void* offset(const void* base, int64_t elements, gdn_dtype_t dt) {
    return base ? static_cast<const char*>(base) + elements * int64_t(dtype_bytes(dt)) : nullptr;
}

// Runs sequence `seq` of the batch on its own: a one-sequence problem whose
// tensors point at its rows, its slot index and its zero-start flag.
gdn_status_t run_one(const DeviceProblem& d, int32_t seq, const gdn_caps_t& caps,
                     const DeviceWorkspace& ws) {
    const Problem& p = d.host;
    const Spec& s = p.spec;
    const int64_t bos = p.cu_seqlens[size_t(seq)];
    const int64_t len = p.cu_seqlens[size_t(seq) + 1] - bos;
    gdn_problem_t one = p.problem;
    one.num_seqs = 1;
    one.num_tokens = len;
    one.max_seqlen = 0;
    gdn_tensors_t t = d.tensors();
    t.q = offset(t.q, bos * p.q_l.token_stride, s.input);
    t.k = offset(t.k, bos * p.k_l.token_stride, s.input);
    t.v = offset(t.v, bos * p.v_l.token_stride, s.input);
    t.g = offset(t.g, bos * p.g_l.token_stride, s.gate);
    t.beta = offset(t.beta, bos * p.beta_l.token_stride, s.gate);
    t.out = const_cast<void*>(offset(t.out, bos * p.out_l.token_stride, s.output));
    t.z = offset(t.z, bos * p.z_l.token_stride, s.input);
    // Explicit strides: packed ones depend on nothing that changes here, but
    // head-major ones would.
    t.q_token_stride = p.q_l.token_stride, t.q_head_stride = p.q_l.head_stride;
    t.k_token_stride = p.k_l.token_stride, t.k_head_stride = p.k_l.head_stride;
    t.v_token_stride = p.v_l.token_stride, t.v_head_stride = p.v_l.head_stride;
    t.g_token_stride = p.g_l.token_stride, t.g_head_stride = p.g_l.head_stride;
    t.beta_token_stride = p.beta_l.token_stride, t.beta_head_stride = p.beta_l.head_stride;
    t.out_token_stride = p.out_l.token_stride, t.out_head_stride = p.out_l.head_stride;
    if (t.z) t.z_token_stride = p.z_l.token_stride, t.z_head_stride = p.z_l.head_stride;
    t.cu_seqlens = nullptr;
    if (t.state_indices) t.state_indices += seq;
    else {
        // Without indices sequence i uses slot i: point the pool at it.
        t.state += int64_t(seq) * p.slot_stride;
        one.num_state_slots = 1;
    }
    if (t.start_from_zero) t.start_from_zero += seq;
    if (len == 0) {
        // A call needs >= 1 token: an empty sequence only zeroes its slot (or
        // leaves it), which the batch must also do; skip the separate run.
        return GDN_SUCCESS;
    }
    return gdn_chunked_recurrence(&caps, &one, &t, ws.data(), ws.size(), nullptr);
}

void batch_equals_separate(const Spec& s, const char* what) {
    const gdn_caps_t caps = cuda_caps();
    Problem p(s);
    DeviceProblem d(p);
    DeviceWorkspace ws;
    REQUIRE(ws.size_for(caps, p.problem) == GDN_SUCCESS);
    ws.fill_nan();
    d.fill_out_nan();  // the same bytes in padding rows as before the separate runs
    REQUIRE(run(d, p.problem, caps, ws) == GDN_SUCCESS);
    const auto out_batch = d.out.bytes();
    const auto state_batch = d.state.bytes();

    // The FP64 reference too, for the batch.
    d.download();
    const Reference ref = reference(p);
    const double ulp = half_ulp_of(s.output);
    const Comparison co = compare_out(p, ref.out, Bound{5e-6, ulp, 0.0});
    const Comparison cs = compare_state(p, ref.state, Bound{5e-6, 0.0, 0.0});
    INFO(what);
    INFO(describe(co, "batch out vs FP64"));
    INFO(describe(cs, "batch state vs FP64"));
    CHECK(co.ok());
    CHECK(cs.ok());

    d.reset_state();
    d.fill_out_nan();
    for (int32_t seq = 0; seq < p.problem.num_seqs; ++seq) {
        const int32_t slot = p.state_indices.empty() ? seq : p.state_indices[size_t(seq)];
        const bool empty = p.cu_seqlens[size_t(seq) + 1] == p.cu_seqlens[size_t(seq)];
        if (empty && slot >= 0 && !p.start_from_zero.empty() && p.start_from_zero[size_t(seq)]) {
            // What the batch does for an empty zero-start sequence: a zero slot.
            const size_t slot_elems = size_t(s.hv) * s.k * s.v;
            GDN_CUDA_CHECK(cudaMemset(d.state.as<float>() + int64_t(slot) * p.slot_stride, 0,
                                      slot_elems * 4));
        }
        INFO("sequence " << seq);
        REQUIRE(run_one(d, seq, caps, ws) == GDN_SUCCESS);
    }
    CHECK(same_bits(d.out.bytes(), out_batch, "out") == "");
    CHECK(same_bits(d.state.bytes(), state_batch, "state") == "");
    CHECK(d.guard_damage() == "");
}

}  // namespace

TEST_CASE("decode: N sequences with padding slots and mixed zero-start equal N separate runs",
          "[cuda][decode]") {
    Spec s;
    const int N = 37;
    s.seq_lens = std::vector<int32_t>(N, 1);
    s.hk = 16, s.hv = 48, s.k = s.v = 128;
    s.input = s.gate = s.output = GDN_DTYPE_BF16;
    s.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS;
    s.num_state_slots = 50;
    for (int i = 0; i < N; ++i) {
        s.state_indices.push_back(i % 9 == 4 ? -1 : (i * 7) % 50);  // distinct, some padding
        s.start_from_zero.push_back(uint8_t(i % 5 == 2));
    }
    batch_equals_separate(s, "decode N = 37, bf16");
    s.flags |= GDN_FLAG_OUTPUT_NORM;
    s.layout = GDN_STATE_VK;
    s.output = GDN_DTYPE_F32;
    batch_equals_separate(s, "decode N = 37, output norm, [V][K] state");
    // Speculative decode: a few tokens each.
    s.seq_lens.clear();
    for (int i = 0; i < N; ++i) s.seq_lens.push_back(1 + i % 4);
    batch_equals_separate(s, "decode 1..4 tokens each");
}

TEST_CASE("chunked varlen batch equals its sequences run one by one", "[cuda][batch]") {
    Spec s;
    s.seq_lens = {3000, 1, 0, 2100, 37, 129, 4500};  // crosses windows inside sequences
    s.hk = 4, s.hv = 12, s.k = s.v = 128;
    s.algorithm = GDN_ALGO_CHUNKED;
    s.state_indices = {2, 6, 0, -1, 1, 3, 5};
    s.start_from_zero = {1, 0, 1, 0, 1, 0, 0};
    batch_equals_separate(s, "chunked varlen batch");
    s.algorithm = GDN_ALGO_SEQUENTIAL;
    batch_equals_separate(s, "sequential varlen batch");
    s.algorithm = GDN_ALGO_CHUNKED;
    s.flags = GDN_FLAG_OUTPUT_NORM | GDN_FLAG_QK_L2NORM;
    s.input = GDN_DTYPE_BF16;
    batch_equals_separate(s, "chunked varlen batch, output norm, bf16");
    s.precision = GDN_PRECISION_BF16;  // the tensor-core scan
    batch_equals_separate(s, "tensor-core (BF16) varlen batch, output norm, bf16");
    s.precision = GDN_PRECISION_TF32X3;
    s.input = GDN_DTYPE_F32;
    batch_equals_separate(s, "tensor-core (TF32X3) varlen batch, output norm, f32");
}

TEST_CASE("a call captured in a CUDA graph and replayed gives the bits of a direct call",
          "[cuda][graph]") {
    const gdn_caps_t caps = cuda_caps();
    cudaStream_t stream;
    GDN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::vector<Spec> specs;
    {
        Spec s;  // chunked, three windows, output-norm pass, varlen with padding
        s.seq_lens = {5000, 300};
        s.hk = 2, s.hv = 6, s.k = s.v = 128;
        s.flags = GDN_FLAG_OUTPUT_NORM | GDN_FLAG_GATE_FROM_RAW;
        s.state_indices = {1, -1};
        s.num_state_slots = 2;
        specs.push_back(s);
    }
    for (gdn_precision_t precision : {GDN_PRECISION_BF16, GDN_PRECISION_TF32X3}) {
        Spec s;  // the tensor-core scan, three windows, output norm, padding
        s.seq_lens = {5000, 300};
        s.hk = 2, s.hv = 6, s.k = s.v = 128;
        s.input = GDN_DTYPE_BF16;
        s.flags = GDN_FLAG_OUTPUT_NORM | GDN_FLAG_QK_L2NORM;
        s.state_indices = {-1, 0};
        s.num_state_slots = 1;
        s.precision = precision;
        specs.push_back(s);
    }
    {
        Spec s;  // decode
        s.seq_lens = std::vector<int32_t>(64, 1);
        s.hk = 16, s.hv = 48, s.k = s.v = 128;
        s.input = s.gate = GDN_DTYPE_BF16;
        specs.push_back(s);
    }
    for (const Spec& s : specs) {
        Problem p(s);
        DeviceProblem d(p);
        DeviceWorkspace ws;
        REQUIRE(ws.size_for(caps, p.problem) == GDN_SUCCESS);
        ws.fill_nan(stream);
        d.fill_out_nan(stream);  // the same bytes in padding rows as before the replays
        REQUIRE(run(d, p.problem, caps, ws, stream) == GDN_SUCCESS);
        GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
        const auto out_direct = d.out.bytes();
        const auto state_direct = d.state.bytes();

        d.reset_state(stream);
        d.fill_out_nan(stream);
        ws.fill_nan(stream);
        GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
        cudaGraph_t graph;
        GDN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        const gdn_status_t st = run(d, p.problem, caps, ws, stream);
        GDN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        INFO(gdn_last_error());
        REQUIRE(st == GDN_SUCCESS);
        cudaGraphExec_t exec;
        GDN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        for (int replay = 0; replay < 3; ++replay) {
            d.reset_state(stream);
            d.fill_out_nan(stream);
            GDN_CUDA_CHECK(cudaGraphLaunch(exec, stream));
            GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
            INFO("replay " << replay << ", T = " << p.T);
            CHECK(same_bits(d.out.bytes(), out_direct, "out") == "");
            CHECK(same_bits(d.state.bytes(), state_direct, "state") == "");
        }
        GDN_CUDA_CHECK(cudaGraphExecDestroy(exec));
        GDN_CUDA_CHECK(cudaGraphDestroy(graph));
    }
    GDN_CUDA_CHECK(cudaStreamDestroy(stream));
}
