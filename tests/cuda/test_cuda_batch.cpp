// Batches: a decode step (one token for each of N sequences, states in a
// pool, padding slots, mixed zero-start flags) equals N separate runs bit for
// bit, and the decode kernel gives the sequential kernel's bits; a varlen
// prompt batch on the chunked path equals its sequences run one by one; a
// call captured in a CUDA graph and replayed gives the bits of a direct call.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/dispatch.hpp"
#include "cuda_support.hpp"
#include "test_kernels.hpp"

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
    // FP32 paths: 5e-6; the tensor-core scan: its precision's bound (as in
    // test_cuda_parity.cpp; FP16X3, BF16X3 on FP16 terms, FP32-class: 2e-6).
    // FP16X3 by the precision the path reports: where its split scan does not
    // fit, TF32X3 serves it, and TF32X3's bound applies.
    gdn_precision_t precision = s.precision;
    if (precision == GDN_PRECISION_FP16X3) {
        const gdn_tensors_t t = d.tensors();
        gdn_path_info_t info;
        gdn_path_info_init(&info);
        REQUIRE(gdn_select_path(&caps, &p.problem, &t, &info) == GDN_SUCCESS);
        precision = info.precision;
    }
    const double rel = precision == GDN_PRECISION_BF16     ? (s.input == GDN_DTYPE_F32 ? 8e-3 : 5e-3)
                       : precision == GDN_PRECISION_FP16   ? 1e-3
                       : precision == GDN_PRECISION_TF32X3 ? 1e-5
                       : precision == GDN_PRECISION_BF16X3 ? 1e-5
                       : precision == GDN_PRECISION_FP16X3 ? 2e-6
                                                            : 5e-6;
    const Comparison co = compare_out(p, ref.out, Bound{rel, ulp, 0.0});
    const Comparison cs = compare_state(p, ref.state, Bound{rel, 0.0, 0.0});
    if (s.precision == GDN_PRECISION_BF16X3 || s.precision == GDN_PRECISION_FP16X3)
        std::printf("batch: %s %s out %.3g state %.3g vs FP64%s\n", what,
                    s.precision == GDN_PRECISION_BF16X3 ? "BF16X3" : "FP16X3", co.rel(), cs.rel(),
                    precision != s.precision ? " (TF32X3 served it)" : "");
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

// The batch in every precision of the chunked path: BF16 and BF16X3 on bf16
// inputs, FP16X3 on f16 ones (each its exact input type); FP16 and FP32 on
// f32 inputs with the q/k norm and the output norm; TF32X3 on bf16 inputs
// without flags.
void batch_equals_separate_every_precision(Spec s, const std::string& what) {
    auto check = [&](gdn_precision_t precision, gdn_dtype_t input, uint32_t flags, const char* name) {
        s.precision = precision;
        s.input = input;
        s.flags = flags;
        batch_equals_separate(s, (name + what).c_str());
    };
    const uint32_t norms = GDN_FLAG_QK_L2NORM | GDN_FLAG_OUTPUT_NORM;
    check(GDN_PRECISION_BF16, GDN_DTYPE_BF16, 0, "BF16, ");
    check(GDN_PRECISION_BF16X3, GDN_DTYPE_BF16, 0, "BF16X3, ");
    check(GDN_PRECISION_FP16X3, GDN_DTYPE_F16, 0, "FP16X3, f16 inputs, ");
    check(GDN_PRECISION_FP16, GDN_DTYPE_F32, norms, "FP16, f32 inputs, q/k norm, output norm, ");
    check(GDN_PRECISION_FP32, GDN_DTYPE_F32, norms, "FP32, f32 inputs, q/k norm, output norm, ");
    check(GDN_PRECISION_TF32X3, GDN_DTYPE_BF16, 0, "TF32X3, ");
}

// The decode kernel (auto with max_seqlen == 1; a [K][V] state, or a
// 16-byte-aligned [V][K] one without the output norm) against FP64
// (2e-6, the sequential kernel's bar), against the sequential kernel (the same
// problem with max_seqlen = 2, forced sequential: bit for bit), and against
// itself (reruns with out NaN-filled: identical bits); padding rows stay NaN,
// unnamed slots and the floats between slots keep their bytes, guard bands
// hold.
void decode_kernel_checks(const Spec& s, const char* what) {
    INFO(what);
    const gdn_caps_t caps = cuda_caps();
    Problem p(s);
    REQUIRE(p.problem.max_seqlen == 1);
    DeviceProblem d(p);
    DeviceWorkspace ws;
    REQUIRE(ws.size_for(caps, p.problem) == GDN_SUCCESS);
    d.fill_out_nan();
    {
        const gdn_status_t st = run(d, p.problem, caps, ws);
        INFO(gdn_last_error());
        REQUIRE(st == GDN_SUCCESS);
    }
    const auto out0 = d.out.bytes();
    const auto state0 = d.state.bytes();

    d.download();
    const Reference ref = reference(p);
    const Comparison co = compare_out(p, ref.out, Bound{2e-6, half_ulp_of(s.output), 0.0});
    const Comparison cs = compare_state(p, ref.state, Bound{2e-6, 0.0, 0.0});
    INFO(describe(co, "decode out vs FP64"));
    INFO(describe(cs, "decode state vs FP64"));
    CHECK(co.ok());
    CHECK(cs.ok());
    const std::vector<char> out_mask = p.out_live(), state_mask = p.state_live();
    const std::vector<float> out_now = p.out_f32(), state_now = p.state_f32();
    size_t written = 0, changed = 0;
    for (size_t i = 0; i < out_now.size(); ++i) written += !out_mask[i] && !std::isnan(out_now[i]);
    for (size_t i = 0; i < state_now.size(); ++i)
        changed += !state_mask[i] && std::memcmp(&state_now[i], &p.state_initial[i], 4) != 0;
    CHECK(written == 0);  // padding rows
    CHECK(changed == 0);  // unnamed slots, floats between slots
    CHECK(d.guard_damage() == "");

    for (int rerun = 0; rerun < 5; ++rerun) {
        d.reset_state();
        d.fill_out_nan();
        REQUIRE(run(d, p.problem, caps, ws) == GDN_SUCCESS);
        INFO("rerun " << rerun);
        REQUIRE(same_bits(d.out.bytes(), out0, "out") == "");
        REQUIRE(same_bits(d.state.bytes(), state0, "state") == "");
    }

    if (p.T >= 2) {  // max_seqlen <= num_tokens
        gdn_problem_t seq = with_algorithm(p.problem, GDN_ALGO_SEQUENTIAL);
        seq.max_seqlen = 2;  // tiles of 16 tokens: the sequential kernel
        d.reset_state();
        d.fill_out_nan();
        const gdn_status_t st = run(d, seq, caps, ws);
        INFO(gdn_last_error());
        REQUIRE(st == GDN_SUCCESS);
        CHECK(same_bits(d.out.bytes(), out0, "out, sequential kernel vs decode kernel") == "");
        CHECK(same_bits(d.state.bytes(), state0, "state, sequential kernel vs decode kernel") == "");
    }
    CHECK(d.guard_damage() == "");
}

// The q/k L2 norm, the gate from raw inputs and β from logits.
constexpr uint32_t kDecodeFlags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS;

// Decode shapes that both state layouts run (the decode kernel's walk: several
// items a block, K = V = 128, bf16 inputs, every flag but the output norm).
// N one-token sequences at H_k / H_v heads, K = V = 128, bf16 inputs, the
// decode flags, in a pool of `slots`; the caller names the slots and zero starts.
Spec one_token_batch_spec(int N, int32_t hk, int32_t hv, int32_t slots, uint64_t seed) {
    Spec s;
    s.seq_lens = std::vector<int32_t>(N, 1);
    s.hk = hk, s.hv = hv, s.k = s.v = 128;
    s.input = GDN_DTYPE_BF16;
    s.flags = kDecodeFlags;
    s.num_state_slots = slots;
    s.seed = seed;
    return s;
}
// 300 sequences of one token in a pool of 320 slots with padding rows and zero
// starts, f16 outputs.
Spec decode_pool_spec(gdn_state_layout_t layout, int64_t slot_pad, uint64_t seed) {
    const int N = 300;
    Spec s = one_token_batch_spec(N, 2, 4, 320, seed);
    s.layout = layout;
    s.output = GDN_DTYPE_F16;
    s.slot_pad = slot_pad;
    for (int i = 0; i < N; ++i) {
        s.state_indices.push_back(i % 11 == 7 ? -1 : (i * 13) % 320);
        s.start_from_zero.push_back(uint8_t(i % 7 == 3));
    }
    return s;
}
// 613 sequences, empty ones (zero-start or not) and padding mid-walk (2452
// items at 32 columns, 4904 at 16), bf16 throughout.
Spec decode_empty_sequences_spec(gdn_state_layout_t layout, int64_t slot_pad, uint64_t seed) {
    Spec s;
    const int N = 613;
    s.hk = 1, s.hv = 1, s.k = s.v = 128;
    s.layout = layout;
    s.input = s.gate = s.output = GDN_DTYPE_BF16;
    s.flags = kDecodeFlags;
    s.num_state_slots = N;
    s.slot_pad = slot_pad;
    s.seq_lens.clear();  // Spec's default is one 64-token sequence
    for (int i = 0; i < N; ++i) {
        s.seq_lens.push_back(i % 5 == 1 ? 0 : 1);
        s.state_indices.push_back(i % 17 == 4 ? -1 : N - 1 - i);
        s.start_from_zero.push_back(uint8_t(i % 3 == 0));
    }
    s.seed = seed;
    return s;
}
// 1031 sequences of one token at one head of K = 64, V = 32 (1031 items: a
// prime, so some blocks or warps walk one item fewer on any GPU), padding and
// zero starts, f32, slot_pad floats between slots.
Spec decode_prime_items_spec(int64_t slot_pad, uint64_t seed) {
    Spec s;
    const int N = 1031;
    s.seq_lens = std::vector<int32_t>(N, 1);
    s.hk = 1, s.hv = 1, s.k = 64, s.v = 32;
    s.flags = kDecodeFlags;
    s.num_state_slots = N + 4;
    s.slot_pad = slot_pad;
    for (int i = 0; i < N; ++i) {
        s.state_indices.push_back(i % 13 == 5 ? -1 : (i * 17) % (N + 4));
        s.start_from_zero.push_back(uint8_t(i % 7 == 2));
    }
    s.seed = seed;
    return s;
}
// 200 sequences, some of 2 tokens under max_seqlen = 1 (the caller's bug;
// still right), two of them from zero (7: two tokens from zero).
Spec decode_two_token_spec(gdn_state_layout_t layout, uint64_t seed) {
    Spec s;
    const int N = 200;
    s.hk = 2, s.hv = 4, s.k = s.v = 128;
    s.layout = layout;
    s.input = GDN_DTYPE_BF16;
    s.flags = kDecodeFlags;
    s.seq_lens.clear();
    for (int i = 0; i < N; ++i) s.seq_lens.push_back(i % 4 == 3 ? 2 : 1);
    s.max_seqlen = 1;
    s.start_from_zero = std::vector<uint8_t>(N, 0);
    s.start_from_zero[5] = s.start_from_zero[7] = 1;
    s.seed = seed;
    return s;
}

}  // namespace

TEST_CASE("decode kernel: FP64, the sequential kernel's bits, reruns, padding, guards",
          "[cuda][decode]") {
    const uint32_t every = kDecodeFlags;
    {
        Spec s;  // N = 1 at the engine shape: the small grid (16 columns per block)
        s.seq_lens = {1};
        s.hk = 16, s.hv = 48, s.k = s.v = 128;
        s.input = s.gate = s.output = GDN_DTYPE_BF16;
        s.flags = every;
        s.seed = 31;
        decode_kernel_checks(s, "N = 1, Hv 48, bf16");
        s.seq_lens = {1, 1};
        s.state_indices = {-1, 0};
        s.num_state_slots = 1;
        decode_kernel_checks(s, "N = 2, one padding row, bf16");
    }
    {
        // Large grid (32 columns per block), slots not 16-byte aligned, guard floats between them.
        const Spec s = decode_pool_spec(GDN_STATE_KV, 3, 32);
        decode_kernel_checks(s, "N = 300, K = V = 128, padding, zero-start, slot pad 3, f16 out");
        batch_equals_separate(s, "N = 300 decode batch vs separate runs");
    }
    {
        // The output norm on 1200 rows, padding, zero starts, unaligned slots: from 384 rows
        // the streaming kernel takes it (a row an item), below v3's block a row (the cases
        // of 24-240 rows that follow).
        Spec s = decode_pool_spec(GDN_STATE_KV, 3, 36);
        s.flags |= GDN_FLAG_OUTPUT_NORM;
        decode_kernel_checks(s, "N = 300, 1200 rows, output norm, padding, zero-start, slot pad 3");
    }
    {
        Spec s;  // empty sequences (zero-start: slot zeroed; else untouched), output norm V = 128
        s.seq_lens = {1, 0, 1, 1, 0, 1};
        s.hk = 2, s.hv = 4, s.k = s.v = 128;
        s.flags = every | GDN_FLAG_OUTPUT_NORM;
        s.state_indices = {5, 1, -1, 0, 2, 3};
        s.start_from_zero = {0, 1, 0, 1, 0, 0};
        s.num_state_slots = 7;
        s.seed = 33;
        decode_kernel_checks(s, "empty sequences, output norm, V = 128");
    }
    {
        Spec s;  // K = V = 64 with the output norm, interleaved heads, f32
        s.seq_lens = std::vector<int32_t>(40, 1);
        s.hk = 3, s.hv = 6, s.k = s.v = 64;
        s.mapping = GDN_HEADS_INTERLEAVED;
        s.flags = every | GDN_FLAG_OUTPUT_NORM;
        s.state_indices = std::vector<int32_t>(40);
        for (int i = 0; i < 40; ++i) s.state_indices[size_t(i)] = i % 9 == 8 ? -1 : 39 - i;
        s.seed = 34;
        decode_kernel_checks(s, "K = V = 64, output norm, interleaved");
    }
    {
        Spec s;  // V = 40 with the output norm (64-column tile, partial), bf16, padded head rows
        s.seq_lens = std::vector<int32_t>(9, 1);
        s.hk = 1, s.hv = 3, s.k = 128, s.v = 40;
        s.input = s.gate = GDN_DTYPE_BF16;
        s.flags = GDN_FLAG_OUTPUT_NORM | GDN_FLAG_QK_L2NORM;
        s.head_pad = 5, s.row_pad = 3;
        s.start_from_zero = {1, 0, 0, 1, 0, 0, 0, 0, 1};
        s.seed = 35;
        decode_kernel_checks(s, "K = 128, V = 40, output norm");
    }
    {
        Spec s;  // V = 200 (not 128: generic row stride, a partial column block), no norm
        s.seq_lens = std::vector<int32_t>(33, 1);
        s.hk = 2, s.hv = 4, s.k = 64, s.v = 200;
        s.flags = GDN_FLAG_BETA_FROM_LOGITS;
        s.null_cu_seqlens = true;
        s.seed = 36;
        decode_kernel_checks(s, "K = 64, V = 200, cu_seqlens NULL");
        s.seq_lens = {1};
        s.null_cu_seqlens = false;
        decode_kernel_checks(s, "K = 64, V = 200, N = 1");
    }
    // The persistent kernel (v4): a grid of about one round of resident
    // blocks walks the items (sequence, head, 32 columns) with the next item's
    // loads in flight. Item counts that no grid divides evenly (primes, or
    // not a multiple of the grid on the H200), padding, empty sequences and
    // zero starts in the middle of a block's walk.
    {
        const Spec s = decode_prime_items_spec(1, 37);
        decode_kernel_checks(s, "N = 1031 items (prime), K = 64, V = 32, padding, zero-start");
    }
    {
        const Spec s = decode_empty_sequences_spec(GDN_STATE_KV, 3, 38);
        decode_kernel_checks(s, "N = 613, empty sequences and padding mid-walk, K = V = 128");
    }
    {
        Spec s = decode_two_token_spec(GDN_STATE_KV, 39);  // 3200 items at 32 columns
        decode_kernel_checks(s, "N = 200, some sequences of 2 tokens with max_seqlen = 1 (warp kernel)");
        s.slot_pad = 3;
        decode_kernel_checks(s, "N = 200, some sequences of 2 tokens with max_seqlen = 1, slot pad 3 (v4)");
    }
    // The warp kernel (v5: a warp a 32-column item, the state staged by 16-byte
    // copies) takes [K][V] decodes of 512 to 5759 such items (3839 under
    // GDN_FLAG_PDL; 8191 where the bulk-copy kernel cannot run) whose pool, slot
    // stride and rows are 16-byte aligned (V % 4 == 0), on devices that hold 6 of
    // its warps a block (sm_90; elsewhere v4 runs these too); the cases above with
    // slot pads 1 and 3 run v4's kernel, the 2-token case and K = 64, V = 200 (a
    // partial column block past V, zero-filled) the warp kernel. These run the
    // walks above on it.
    {
        const Spec s = decode_pool_spec(GDN_STATE_KV, 4, 46);
        decode_kernel_checks(s, "warp kernel: N = 300, K = V = 128, padding, zero-start, slot pad 4");
        batch_equals_separate(s, "warp kernel: N = 300 decode batch vs separate runs");
    }
    {
        const Spec s = decode_empty_sequences_spec(GDN_STATE_KV, 0, 47);
        decode_kernel_checks(s, "warp kernel: N = 613, empty sequences and padding mid-walk, K = V = 128");
    }
    {
        const Spec s = decode_prime_items_spec(4, 48);  // slots 16-byte aligned
        decode_kernel_checks(s, "warp kernel: N = 1031 items (prime), K = 64, V = 32, padding, zero-start");
    }
    {
        Spec s;  // K = 128, V = 100 (the generic row stride; columns 96-99 of the last block)
        s.seq_lens = std::vector<int32_t>(70, 1);
        s.hk = 2, s.hv = 4, s.k = 128, s.v = 100;
        s.input = GDN_DTYPE_F16;
        s.flags = every;
        s.start_from_zero = std::vector<uint8_t>(70, 0);
        s.start_from_zero[3] = s.start_from_zero[69] = 1;
        s.seed = 49;
        decode_kernel_checks(s, "warp kernel: N = 70, K = 128, V = 100, f16");
    }
    {
        // From 5760 32-column items at K = V = 128 (sm_90) the bulk-copy kernel (v6, a
        // head an item): 1601 sequences x 4 heads (6404 heads over the SMs' rounds, no
        // multiple of a round; over 32 heads a block, so the heads between a block's
        // first 2 and last 4 update from the stage, the ends from registers), padding,
        // zero starts, empty sequences (zero-start or not) and 2-token sequences under
        // max_seqlen = 1 mid-walk, slots 16-byte aligned in a pool of 1609 (a 421 MB
        // pool); then slot pad 3 (v4's kernel) on the same walk.
        Spec s;
        const int N = 1601;
        s.seq_lens.clear();  // (Spec's default is one 64-token sequence)
        s.hk = 2, s.hv = 4, s.k = s.v = 128;
        s.input = GDN_DTYPE_BF16;
        s.flags = kDecodeFlags;
        s.num_state_slots = N + 8;
        for (int i = 0; i < N; ++i) {
            s.seq_lens.push_back(i % 29 == 6 ? 0 : i % 31 == 9 ? 2 : 1);
            s.state_indices.push_back(i % 23 == 11 ? -1 : (i * 7) % (N + 8));
            s.start_from_zero.push_back(uint8_t(i % 5 == 2));
        }
        s.max_seqlen = 1;
        s.seed = 50;
        decode_kernel_checks(s, "bulk-copy kernel: N = 1601, 6404 heads, K = V = 128, padding, zero starts, 2 tokens");
        s.slot_pad = 3;
        decode_kernel_checks(s, "N = 1601, 6404 heads, slot pad 3 (v4)");
    }
    {
        // The engine shape (H_k 16, H_v 48) at N = 30: 5760 32-column items, from which
        // the bulk-copy kernel takes it (sm_90; the warp kernel below, and before 0.3.7
        // up to 8192), under 32 heads a block; padding and zero starts in a pool of 36,
        // bits equal to the sequential kernel's.
        const int N = 30;
        Spec s = one_token_batch_spec(N, 16, 48, N + 6, 59);
        for (int i = 0; i < N; ++i) {
            s.state_indices.push_back(i % 13 == 5 ? -1 : N + 5 - i);
            s.start_from_zero.push_back(uint8_t(i % 6 == 1));
        }
        decode_kernel_checks(s, "bulk-copy kernel from 5760 items: N = 30 x 48 heads, padding, zero starts");
    }
    {
        // The bulk-copy kernel's last round (a block an SM, block b heads b + k SMs): R
        // heads past the whole rounds, sized from this device's SM count: R = 0, 5,
        // SMs / 2 + 1 and SMs - 3; one head a sequence, with padding, zero starts, empty
        // and 2-token sequences among the last ones (the last round's heads).
        const int sms = cuda_caps().multiprocessor_count;
        const int rounds = (2048 + sms - 1) / sms;  // >= 2048 heads (8192 32-column items), <= 32 a block
        for (const int r : {0, 5, sms / 2 + 1, sms - 3}) {
            Spec s;
            const int N = rounds * sms + r;
            s.seq_lens.clear();
            s.hk = s.hv = 1, s.k = s.v = 128;
            s.input = GDN_DTYPE_BF16;
            s.flags = kDecodeFlags;
            s.num_state_slots = N + 5;
            for (int i = 0; i < N; ++i) {
                const int back = N - 1 - i;  // counted from the last sequence
                s.seq_lens.push_back(back % 9 == 4 ? 0 : back % 13 == 6 ? 2 : 1);
                s.state_indices.push_back(back % 7 == 5 ? -1 : N + 4 - i);
                s.start_from_zero.push_back(uint8_t(back % 4 == 1));
            }
            s.max_seqlen = 1;
            s.seed = 60 + uint64_t(r);
            const std::string what = "bulk-copy kernel's last round: N = " + std::to_string(N) + " heads, " +
                                     std::to_string(r) + " past " + std::to_string(rounds) + " rounds of " +
                                     std::to_string(sms) + " SMs";
            decode_kernel_checks(s, what.c_str());
        }
    }
    {
        // The same with the output norm; empty sequences and padding mid-walk with it.
        Spec s = decode_two_token_spec(GDN_STATE_KV, 40);
        s.flags |= GDN_FLAG_OUTPUT_NORM;
        decode_kernel_checks(s, "N = 200, 2-token sequences, output norm");
        Spec e = decode_empty_sequences_spec(GDN_STATE_KV, 3, 41);
        e.hv = 2;
        e.flags |= GDN_FLAG_OUTPUT_NORM;
        decode_kernel_checks(e, "N = 613 x 2 heads, empty sequences, output norm");
    }
}

// A [V][K] state pool (FlashInfer's "K-last" layout): the decode kernel reads
// each thread's rows of a column as 16-byte pieces where the pool and its slot
// stride are 16-byte aligned, else the sequential kernel runs; the same
// checks as the [K][V] cases.
TEST_CASE("decode kernel on a [V][K] state: FP64, the sequential kernel's bits, reruns, padding, guards",
          "[cuda][decode]") {
    const uint32_t every = kDecodeFlags;
    {
        Spec s;  // N = 1 at the engine shape: 16 columns per block
        s.seq_lens = {1};
        s.hk = 16, s.hv = 48, s.k = s.v = 128;
        s.layout = GDN_STATE_VK;
        s.input = s.gate = s.output = GDN_DTYPE_BF16;
        s.flags = every;
        s.seed = 41;
        decode_kernel_checks(s, "[V][K], N = 1, Hv 48, bf16");
    }
    {
        // 16-byte-aligned slots with guard floats between them.
        Spec s = decode_pool_spec(GDN_STATE_VK, 4, 42);
        decode_kernel_checks(s, "[V][K], N = 300, K = V = 128, padding, zero-start, slot pad 4");
        batch_equals_separate(s, "[V][K], N = 300 decode batch vs separate runs");
        s.slot_pad = 3;  // slots not 16-byte aligned: the sequential kernel
        decode_kernel_checks(s, "[V][K], N = 300, slot pad 3 (sequential kernel)");
    }
    {
        const Spec s = decode_empty_sequences_spec(GDN_STATE_VK, 0, 43);
        decode_kernel_checks(s, "[V][K], N = 613, empty sequences and padding mid-walk");
    }
    {
        Spec s;  // K = 64, V = 200: a partial column block, cu_seqlens NULL, f32
        s.seq_lens = std::vector<int32_t>(700, 1);
        s.hk = 2, s.hv = 4, s.k = 64, s.v = 200;
        s.layout = GDN_STATE_VK;
        s.flags = GDN_FLAG_BETA_FROM_LOGITS;
        s.null_cu_seqlens = true;
        s.seed = 44;
        decode_kernel_checks(s, "[V][K], K = 64, V = 200, N = 700, cu_seqlens NULL");
    }
    {
        const Spec s = decode_two_token_spec(GDN_STATE_VK, 45);
        decode_kernel_checks(s, "[V][K], N = 200, some sequences of 2 tokens with max_seqlen = 1");
    }
}

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
    batch_equals_separate(s, "decode N = 37, bf16");  // 32-column blocks vs 16 (N = 1)
    s.flags |= GDN_FLAG_OUTPUT_NORM;
    s.layout = GDN_STATE_VK;
    s.output = GDN_DTYPE_F32;
    batch_equals_separate(s, "decode N = 37, output norm, [V][K] state");
    // Speculative decode: a few tokens each.
    s.seq_lens.clear();
    for (int i = 0; i < N; ++i) s.seq_lens.push_back(1 + i % 4);
    batch_equals_separate(s, "decode 1..4 tokens each");
    // Up to 8 tokens each: the batch in one-token tiles (37 x 48 rows), the
    // sequences of 3-8 tokens alone in 16-token tiles (backend.cpp).
    s.seq_lens.clear();
    for (int i = 0; i < N; ++i) s.seq_lens.push_back(1 + (i * 3) % 8);
    batch_equals_separate(s, "decode 1..8 tokens each");
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
    // BF16X3: f32 inputs (k/q/v split into values and remainders), then bf16.
    s.precision = GDN_PRECISION_BF16X3;
    batch_equals_separate(s, "tensor-core (BF16X3) varlen batch, output norm, f32");
    s.input = GDN_DTYPE_BF16;
    batch_equals_separate(s, "tensor-core (BF16X3) varlen batch, output norm, bf16");
    // FP16X3: f32 inputs (split into FP16 values and remainders), then f16
    // (exact in FP16: no remainders of k/q/v).
    s.precision = GDN_PRECISION_FP16X3;
    s.input = GDN_DTYPE_F32;
    batch_equals_separate(s, "tensor-core (FP16X3) varlen batch, output norm, f32");
    s.input = GDN_DTYPE_F16;
    batch_equals_separate(s, "tensor-core (FP16X3) varlen batch, output norm, f16");
}

TEST_CASE("chunked varlen batch with few heads: the scan's sequence lanes give each sequence's bits",
          "[cuda][batch]") {
    // H_k 2, H_v 4, K = V = 128: 8 register-state scan blocks, so that scan
    // runs up to 16 lanes of them (policy::cuda_scan_lanes on >= 128 SMs;
    // fewer on smaller cards), each taking every lanes-th sequence of a
    // window; the shared-memory scan (FP32, TF32X3: 32 columns a block, 16
    // blocks) up to 8. 37 sequences: short ones (several per 2048-token window and per
    // lane), empty ones, padding slots, zero starts, and two that cross
    // windows, so that a lane's sequence continues from the pool in the next
    // window.
    Spec s;
    s.hk = 2, s.hv = 4, s.k = s.v = 128;
    s.algorithm = GDN_ALGO_CHUNKED;
    s.input = GDN_DTYPE_BF16;
    s.precision = GDN_PRECISION_BF16;
    const int32_t n = 37;
    s.seq_lens.clear();
    for (int32_t i = 0; i < n; ++i) {
        const int32_t len = i == 5 ? 2500 : i == 20 ? 3100 : i % 9 == 4 ? 0 : 1 + (i * 97) % 300;
        s.seq_lens.push_back(len);
        s.state_indices.push_back(i % 11 == 3 ? -1 : (i * 7) % n);
        s.start_from_zero.push_back(uint8_t(i % 3 == 0));
    }
    batch_equals_separate_every_precision(s, "few heads, 37 sequences");
}

TEST_CASE("chunked batch of long sequences at few heads: time-sliced windows give each sequence's bits",
          "[cuda][batch]") {
    // H_k 2, H_v 4, K = V = 128, 7 sequences of ~2500 tokens: a 2048-token
    // window of the batch holds about one of them, so the backend takes
    // time-sliced windows (policy::cuda_scan_slice: 288 tokens of every
    // sequence a window, ten windows), with 7 lanes in both scans. Among
    // them: a short sequence (its part ends in the first window), an empty
    // zero-start one, a padding slot, zero starts and pool states, lengths
    // that miss the chunk and the slice. Each sequence must get the bits of
    // its run alone (windows of its own tokens).
    const gdn_caps_t caps = cuda_caps();
    Spec s;
    s.hk = 2, s.hv = 4, s.k = s.v = 128;
    s.algorithm = GDN_ALGO_CHUNKED;
    s.input = GDN_DTYPE_BF16;
    s.precision = GDN_PRECISION_BF16;
    s.seq_lens = {2600, 2533, 100, 0, 2601, 2590, 2477};
    s.state_indices = {3, 0, 6, 5, -1, 1, 2};
    s.start_from_zero = {1, 0, 1, 1, 0, 0, 1};
    const int32_t n = int32_t(s.seq_lens.size());
    int64_t tokens = 0;
    for (int32_t len : s.seq_lens) tokens += len;
    // The shape takes the time-sliced windows in both scans on this device
    // (the backend's own choice from the same policy, with the workspace
    // gdn_workspace_size gives: 2048-token windows; without them this case
    // would only repeat the one above).
    for (bool reg_state : {true, false}) {
        const int32_t g = s.hv / s.hk;
        const int32_t ncol =
            gdn::policy::cuda_scan_columns(s.hk, g, s.v, caps.multiprocessor_count, reg_state);
        INFO("register-state scan " << reg_state);
        for (int64_t max_seqlen : {2601, 2900})
            REQUIRE(gdn::policy::cuda_scan_slice_for(gdn::policy::kCudaWindowTokens, true, n, max_seqlen,
                                                     tokens, s.hk, g, s.v, ncol,
                                                     caps.multiprocessor_count, reg_state) > 0);
    }
    // (FP16 and FP32 with the output norm: its rows of a slice.)
    batch_equals_separate_every_precision(s, "time-sliced windows");
    // A max_seqlen above the longest sequence: the windows past it have no
    // chunks (their preps and scans find none).
    s.precision = GDN_PRECISION_BF16;
    s.max_seqlen = 2900;
    batch_equals_separate(s, "BF16, time-sliced windows, max_seqlen 2900");
}

namespace {

// A non-blocking stream for one test case.
struct TestStream {
    cudaStream_t s = nullptr;
    TestStream() { GDN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
    ~TestStream() { cudaStreamDestroy(s); }
    TestStream(const TestStream&) = delete;
    TestStream& operator=(const TestStream&) = delete;
};

struct NamedSpec {
    Spec spec;
    const char* what;
};

// Decode at N = 1 at the engine shape (H_k 16, H_v 48, K = V = 128), bf16:
// the streaming decode kernel with one item a block.
Spec engine_decode_spec() {
    Spec s;
    s.seq_lens = {1};
    s.hk = 16, s.hv = 48, s.k = s.v = 128;
    s.input = s.gate = s.output = GDN_DTYPE_BF16;
    return s;
}

gdn_problem_t with_pdl(gdn_problem_t problem) {
    problem.flags |= GDN_FLAG_PDL;
    return problem;
}

// Instantiates graph and replays it three times, each after reset() (on
// stream), checking d's output and state against out_ref and state_ref;
// then destroys both.
void replays_give(cudaGraph_t graph, cudaStream_t stream, const std::function<void()>& reset,
                  const DeviceProblem& d, const std::vector<unsigned char>& out_ref,
                  const std::vector<unsigned char>& state_ref, const std::string& what) {
    cudaGraphExec_t exec;
    GDN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 3; ++replay) {
        reset();
        GDN_CUDA_CHECK(cudaGraphLaunch(exec, stream));
        GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
        INFO(what << ", replay " << replay);
        CHECK(same_bits(d.out.bytes(), out_ref, "out") == "");
        CHECK(same_bits(d.state.bytes(), state_ref, "state") == "");
    }
    GDN_CUDA_CHECK(cudaGraphExecDestroy(exec));
    GDN_CUDA_CHECK(cudaGraphDestroy(graph));
}

// The [pdl] cases' check: after reset(), enqueue() puts the work under test
// on stream (gdn calls with GDN_FLAG_PDL, and what runs ahead of them) without
// a synchronisation; d's output and state must equal out_ref and state_ref.
// Then the same work, captured as a graph (programmatic edges between its
// kernels), replayed by replays_give.
void direct_and_graph_give(cudaStream_t stream, const std::function<void()>& reset,
                           const std::function<gdn_status_t()>& enqueue, const DeviceProblem& d,
                           const std::vector<unsigned char>& out_ref, const std::vector<unsigned char>& state_ref,
                           const std::string& what) {
    reset();
    const gdn_status_t st = enqueue();
    INFO(what << ": " << gdn_last_error());
    REQUIRE(st == GDN_SUCCESS);
    GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
    CHECK(same_bits(d.out.bytes(), out_ref, (what + ", out").c_str()) == "");
    CHECK(same_bits(d.state.bytes(), state_ref, (what + ", state").c_str()) == "");

    cudaGraph_t graph;
    GDN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const gdn_status_t sg = enqueue();
    GDN_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    INFO(gdn_last_error());
    REQUIRE(sg == GDN_SUCCESS);
    replays_give(graph, stream, reset, d, out_ref, state_ref, what + ", in a graph");
}

}  // namespace

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
    for (gdn_precision_t precision :
         {GDN_PRECISION_BF16, GDN_PRECISION_TF32X3, GDN_PRECISION_BF16X3, GDN_PRECISION_FP16X3}) {
        Spec s;  // the tensor-core scan, three windows, output norm, padding (BF16 on sm_90:
                 // the fused kernel and its norm kernel, a programmatic edge in the graph;
                 // FP16X3 on f16 inputs, its exact type)
        s.seq_lens = {5000, 300};
        s.hk = 2, s.hv = 6, s.k = s.v = 128;
        s.input = precision == GDN_PRECISION_FP16X3 ? GDN_DTYPE_F16 : GDN_DTYPE_BF16;
        s.flags = GDN_FLAG_OUTPUT_NORM | GDN_FLAG_QK_L2NORM;
        s.state_indices = {-1, 0};
        s.num_state_slots = 1;
        s.precision = precision;
        specs.push_back(s);
    }
    {
        Spec s;  // the fused BF16 path (sm_90): its tensor maps are kernel parameters
        s.seq_lens = {5000, 300, 0};
        s.hk = 2, s.hv = 6, s.k = s.v = 128;
        s.input = GDN_DTYPE_BF16;
        s.state_indices = {2, -1, 0};
        s.start_from_zero = {0, 0, 1};
        s.num_state_slots = 3;
        s.precision = GDN_PRECISION_BF16;
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
        const gdn_status_t st = capture(d, p.problem, caps, ws, stream, &graph);
        INFO(gdn_last_error());
        REQUIRE(st == GDN_SUCCESS);
        replays_give(graph, stream, [&] { d.reset_state(stream); d.fill_out_nan(stream); }, d, out_direct,
                     state_direct, "T = " + std::to_string(p.T));
    }
    GDN_CUDA_CHECK(cudaStreamDestroy(stream));
}

// GDN_FLAG_PDL: each call's first kernel is a programmatic dependent of the
// work ahead in the stream and waits for it before its first access. A chain
// of calls on one pool (each call continues the states the call before it
// wrote, without a synchronisation between them) must give the bits of the
// same calls run one at a time, directly and captured in a graph. Our
// kernels let their dependents launch early (the sequential kernel and the
// fused one as their blocks start, the decode kernel once its last item's
// loads are out, the bulk-copy decode kernel as each block starts its last
// head), so a kernel that read its state before the wait would read the
// state of the call before the last one. Below sm_90 the flag changes
// nothing (and this checks that too).
TEST_CASE("GDN_FLAG_PDL: chained calls give the bits of calls run one at a time, direct and in a graph",
          "[cuda][graph][pdl]") {
    const gdn_caps_t caps = cuda_caps();
    const TestStream ts;
    const cudaStream_t stream = ts.s;
    std::vector<NamedSpec> cases;
    {
        cases.push_back({engine_decode_spec(), "decode N = 1, Hv 48"});
        // N = 300 in a pool of 320 with padding and zero starts: blocks walk several items
        cases.push_back({decode_pool_spec(GDN_STATE_KV, 3, 51), "decode N = 300, pool"});
        cases.push_back({decode_pool_spec(GDN_STATE_VK, 4, 52), "decode N = 300, [V][K] pool"});
        // The same walk with aligned slots on the warp kernel at 2 heads (2400 32-column
        // items: under the flag the bulk-copy kernel takes 3840 or more), and at 8 heads
        // (9600) on the bulk-copy kernel (sm_90).
        Spec w = decode_pool_spec(GDN_STATE_KV, 4, 53);
        w.hv = 2;
        cases.push_back({w, "decode N = 300 x 2 heads, pool, slot pad 4 (warp kernel)"});
        Spec s = decode_pool_spec(GDN_STATE_KV, 0, 54);
        s.hv = 8;
        cases.push_back({s, "decode N = 300 x 8 heads, pool, aligned slots (bulk-copy kernel)"});
        // The engine shape at N = 25 (4800 32-column items): the bulk-copy kernel with the
        // flag (from 3840 items), the warp kernel without it (below 5760): the same bits.
        Spec e = one_token_batch_spec(25, 16, 48, 28, 55);
        for (int i = 0; i < 25; ++i) {
            e.state_indices.push_back(i == 17 ? -1 : 27 - i);
            e.start_from_zero.push_back(uint8_t(i % 5 == 3));
        }
        cases.push_back({e, "decode N = 25 x 48 heads: the bulk-copy kernel chained, the warp kernel alone"});
    }
    {
        Spec s;  // the decode kernel with the output norm (one block a row)
        s.seq_lens = std::vector<int32_t>(40, 1);
        s.hk = 2, s.hv = 6, s.k = s.v = 128;
        s.flags = GDN_FLAG_OUTPUT_NORM;
        cases.push_back({s, "decode N = 40, output norm"});
    }
    {
        Spec s;  // the sequential kernel: a varlen prompt batch
        s.seq_lens = {300, 0, 77, 129};
        s.hk = 2, s.hv = 4, s.k = s.v = 128;
        s.algorithm = GDN_ALGO_SEQUENTIAL;
        s.state_indices = {2, 1, -1, 0};
        cases.push_back({s, "sequential, varlen"});
    }
    {
        Spec s;  // the fused BF16 path on sm_90 (its output norm kernel after it), else the TC scan
        s.seq_lens = {1000, 130};
        s.hk = 2, s.hv = 6, s.k = s.v = 128;
        s.input = s.output = GDN_DTYPE_BF16;
        s.algorithm = GDN_ALGO_CHUNKED;
        s.precision = GDN_PRECISION_BF16;
        cases.push_back({s, "chunked BF16"});
        s.flags = GDN_FLAG_OUTPUT_NORM;
        cases.push_back({s, "chunked BF16, output norm"});
        s.precision = GDN_PRECISION_FP32;  // the C = 32 path: the flag changes nothing there
        cases.push_back({s, "chunked FP32, output norm"});
    }
    constexpr int kCalls = 4;
    for (const NamedSpec& c : cases) {
        INFO(c.what);
        Problem p(c.spec);
        DeviceProblem d(p);
        DeviceWorkspace ws;
        REQUIRE(ws.size_for(caps, p.problem) == GDN_SUCCESS);
        const gdn_problem_t chained = with_pdl(p.problem);

        // One at a time, without the flag.
        d.reset_state(stream);
        for (int i = 0; i < kCalls; ++i) {
            d.fill_out_nan(stream);
            REQUIRE(run(d, p.problem, caps, ws, stream) == GDN_SUCCESS);
            GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
        }
        const auto out_ref = d.out.bytes();
        const auto state_ref = d.state.bytes();

        // Chained, with the flag, directly and as a graph.
        direct_and_graph_give(
            stream, [&] { d.reset_state(stream); d.fill_out_nan(stream); },
            [&] {
                gdn_status_t st = GDN_SUCCESS;
                for (int i = 0; i < kCalls && st == GDN_SUCCESS; ++i) st = run(d, chained, caps, ws, stream);
                return st;
            },
            d, out_ref, state_ref, "chained with GDN_FLAG_PDL");
    }
}

// GDN_FLAG_PDL when the kernel ahead writes the call's inputs: call B's q is
// call A's output (bf16 [T][Hv][V], packed; H_k = H_v and K = V, so that it
// has q's shape), with A's output filled with NaN before A. Both calls carry
// the flag and run back to back (and as a graph); B's first kernel may launch
// while A's last one runs, so a first kernel that read q before its wait
// would read NaN. B must give the bits of the two calls run one at a time.
// Every first kernel reads q: the decode kernels, the sequential kernel, the
// fused BF16 kernel, and the first prep of the C = 32 paths (FP32 and the
// tensor-core scan).
TEST_CASE("GDN_FLAG_PDL: a call whose q is the output of the call ahead reads it after that call",
          "[cuda][graph][pdl]") {
    const gdn_caps_t caps = cuda_caps();
    const TestStream ts;
    const cudaStream_t stream = ts.s;
    std::vector<NamedSpec> cases;
    Spec base;
    base.input = base.output = GDN_DTYPE_BF16;
    {
        Spec s = base;  // the streaming decode kernel at the engine's H_v
        s.seq_lens = {1};
        s.hk = s.hv = 48, s.k = s.v = 128;
        cases.push_back({s, "decode N = 1, Hv 48"});
        s.seq_lens = std::vector<int32_t>(8, 1);  // the decode kernel with the output norm
        s.hk = s.hv = 6;
        s.flags = GDN_FLAG_OUTPUT_NORM;
        cases.push_back({s, "decode N = 8, output norm"});
    }
    {
        Spec s = base;
        s.seq_lens = {300, 77};
        s.hk = s.hv = 4, s.k = s.v = 128;
        s.algorithm = GDN_ALGO_SEQUENTIAL;
        cases.push_back({s, "sequential"});
        s.seq_lens = {1000, 130};
        s.algorithm = GDN_ALGO_CHUNKED;
        s.precision = GDN_PRECISION_BF16;  // sm_90: the fused kernel
        cases.push_back({s, "chunked BF16"});
        s.precision = GDN_PRECISION_FP32;  // the C = 32 prep and FP32 scan
        cases.push_back({s, "chunked FP32"});
        s.precision = GDN_PRECISION_BF16X3;  // the C = 32 prep and the tensor-core scan
        cases.push_back({s, "chunked BF16X3"});
        s.precision = GDN_PRECISION_FP16X3;  // the same on FP16 terms, f16 in and out
        s.input = s.output = GDN_DTYPE_F16;
        cases.push_back({s, "chunked FP16X3, f16"});
    }
    for (const NamedSpec& c : cases) {
        INFO(c.what);
        Problem pa(c.spec);
        Spec sb = c.spec;
        sb.seed = c.spec.seed + 100;  // B: its own k, v, g, β, z and state
        Problem pb(sb);
        DeviceProblem da(pa), db(pb);
        DeviceWorkspace wa, wb;
        REQUIRE(wa.size_for(caps, pa.problem) == GDN_SUCCESS);
        REQUIRE(wb.size_for(caps, pb.problem) == GDN_SUCCESS);
        gdn_tensors_t tb = db.tensors();
        tb.q = da.out.data();
        const gdn_problem_t a_pdl = with_pdl(pa.problem), b_pdl = with_pdl(pb.problem);
        const auto reset = [&] {
            da.reset_state(stream);
            db.reset_state(stream);
            da.fill_out_nan(stream);
            db.fill_out_nan(stream);
        };

        // One at a time, without the flag.
        reset();
        REQUIRE(run(da, pa.problem, caps, wa, stream) == GDN_SUCCESS);
        GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
        REQUIRE(run(tb, pb.problem, caps, wb, stream) == GDN_SUCCESS);
        GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
        const auto out_ref = db.out.bytes();
        const auto state_ref = db.state.bytes();
        {
            // A wrote every row of B's q (no bf16 / f16 element left as the fill's 0xFFFF).
            const auto v = da.out.bytes();
            size_t fill = 0;
            for (size_t i = 0; i + 1 < v.size(); i += 2) fill += v[i] == 0xFF && v[i + 1] == 0xFF;
            REQUIRE(fill == 0);
        }

        // Back to back, with the flag, directly and as a graph.
        direct_and_graph_give(
            stream, reset,
            [&] {
                const gdn_status_t sa = run(da, a_pdl, caps, wa, stream);
                return sa == GDN_SUCCESS ? run(tb, b_pdl, caps, wb, stream) : sa;
            },
            db, out_ref, state_ref, "B, back to back with A and GDN_FLAG_PDL");
    }
}

#if defined(GDN_TESTS_CUDA_KERNELS)
// GDN_FLAG_PDL when the kernel ahead writes the slot indices (an engine that
// builds them on the device): a kernel of the test lets its dependents launch
// at once, spins for ~20 µs, then writes the call's indices over stale ones
// (other slots of the pool, padding, slots past the pool, INT32_MAX). Under
// the flag the decode kernel reads its first item's slot before its wait,
// only as a hint that asks L2 for that slot's state (perf-notes v68); the
// state it uses must be that of the written slot. The call must give the
// bits of the same call made after the indices were written, directly and in
// a graph, and leave the other slots as they were.
TEST_CASE("GDN_FLAG_PDL: a decode whose slot indices the kernel ahead writes uses the written ones",
          "[cuda][graph][pdl]") {
    const gdn_caps_t caps = cuda_caps();
    const TestStream ts;
    const cudaStream_t stream = ts.s;
    std::vector<NamedSpec> cases;
    {
        Spec s = engine_decode_spec();  // in a pool of 6 (stale: past the pool)
        s.state_indices = {4};
        s.num_state_slots = 6;
        cases.push_back({s, "decode N = 1, Hv 48, pool of 6"});
        s.layout = GDN_STATE_VK;
        cases.push_back({s, "decode N = 1, Hv 48, [V][K] pool of 6"});
    }
    cases.push_back({decode_pool_spec(GDN_STATE_KV, 3, 61), "decode N = 300, pool of 320"});
    cases.push_back({decode_pool_spec(GDN_STATE_VK, 4, 62), "decode N = 300, [V][K] pool of 320"});
    {
        Spec s = decode_pool_spec(GDN_STATE_KV, 4, 63);
        s.hv = 2;  // 2400 32-column items: the warp kernel (the bulk-copy kernel from 3840 under the flag)
        cases.push_back({s, "decode N = 300 x 2 heads, pool of 320, slot pad 4 (warp kernel)"});
    }
    {
        Spec s = decode_pool_spec(GDN_STATE_KV, 0, 64);
        s.hv = 8;  // 9600 32-column items: the bulk-copy kernel (sm_90)
        cases.push_back({s, "decode N = 300 x 8 heads, pool of 320 (bulk-copy kernel)"});
    }
    for (const NamedSpec& c : cases) {
        INFO(c.what);
        Problem p(c.spec);
        DeviceProblem d(p);
        DeviceWorkspace ws;
        REQUIRE(ws.size_for(caps, p.problem) == GDN_SUCCESS);
        const std::vector<int32_t>& slots = c.spec.state_indices;
        const int n = int(slots.size());
        const int pool = c.spec.num_state_slots;
        std::vector<int32_t> stale(slots.size());
        for (int i = 0; i < n; ++i) {
            const int kind = i % 4;
            stale[size_t(i)] = kind == 0 ? pool + i : kind == 1 ? (slots[size_t(i)] + 1) % pool
                             : kind == 2 ? -1 : 2147483647;
        }
        DeviceBuffer written(slots.size() * 4), live(slots.size() * 4);
        written.upload(slots.data(), slots.size() * 4);
        gdn_tensors_t t = d.tensors();
        t.state_indices = live.as<int32_t>();
        const gdn_problem_t pdl = with_pdl(p.problem);
        const auto reset = [&] {
            d.reset_state(stream);
            d.fill_out_nan(stream);
            GDN_CUDA_CHECK(cudaMemcpyAsync(live.data(), stale.data(), stale.size() * 4, cudaMemcpyHostToDevice,
                                           stream));
            GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
        };
        constexpr long long kSpin = 40000;  // ~20 µs at the H200's clock

        // The indices written first, then the call without the flag.
        reset();
        GDN_CUDA_CHECK(spin_then_copy(live.as<int32_t>(), written.as<int32_t>(), n, kSpin, stream));
        GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
        REQUIRE(run(t, p.problem, caps, ws, stream) == GDN_SUCCESS);
        GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
        const auto out_ref = d.out.bytes();
        const auto state_ref = d.state.bytes();

        // The writer, then the call with the flag, back to back, directly and as a graph.
        direct_and_graph_give(
            stream, reset,
            [&] {
                const cudaError_t we = spin_then_copy(live.as<int32_t>(), written.as<int32_t>(), n, kSpin, stream);
                CHECK(we == cudaSuccess);
                return we == cudaSuccess ? run(t, pdl, caps, ws, stream) : GDN_ERROR_INTERNAL;
            },
            d, out_ref, state_ref, "after the writer, with GDN_FLAG_PDL");
    }
}
#endif
