// Small shapes that cover every kernel and branch of both CUDA paths, cheap
// enough to run under compute-sanitizer (memcheck, racecheck, initcheck,
// synccheck): scripts/gpu-check.sh runs `gdn_tests_cuda "[sanitize]"` under
// each tool. The results are checked against FP64 too.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <utility>

#include "cuda_support.hpp"

using namespace gdn_cuda_test;

namespace {

// Runs s with caps c and checks its output and final state against FP64
// within rel (and half an ulp of the output dtype); `what` names the run in
// a failure's message. Returns the two errors (out, state).
std::pair<double, double> run_against_fp64(const gdn_caps_t& c, const Spec& s, double rel,
                                           const std::string& what) {
    Problem p(s);
    DeviceProblem d(p);
    DeviceWorkspace ws;
    REQUIRE(ws.size_for(c, p.problem) == GDN_SUCCESS);
    const gdn_status_t st = run(d, p.problem, c, ws);
    INFO(gdn_last_error());
    REQUIRE(st == GDN_SUCCESS);
    GDN_CUDA_CHECK(cudaDeviceSynchronize());
    d.download();
    const Reference ref = reference(p);
    const Comparison co = compare_out(p, ref.out, Bound{rel, half_ulp_of(s.output), 0.0});
    const Comparison cs = compare_state(p, ref.state, Bound{rel, 0.0, 0.0});
    INFO("T = " << p.T << ", " << what);
    INFO(describe(co, "out vs FP64"));
    INFO(describe(cs, "state vs FP64"));
    CHECK(co.ok());
    CHECK(cs.ok());
    return {co.rel(), cs.rel()};
}

}  // namespace

TEST_CASE("small shapes over both paths (for compute-sanitizer)", "[cuda][sanitize]") {
    const gdn_caps_t caps = cuda_caps();
    std::vector<Spec> specs;
    {
        Spec s;  // two windows, varlen, padding, empty zero-start sequence, every flag
        s.seq_lens = {2100, 0, 45, 1};
        s.hk = 1, s.hv = 2, s.k = s.v = 64;
        s.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS |
                  GDN_FLAG_OUTPUT_NORM;
        s.state_indices = {3, 1, -1, 0};
        s.start_from_zero = {0, 1, 0, 1};
        s.input = GDN_DTYPE_BF16;
        specs.push_back(s);
    }
    {
        Spec s;  // two windows without the output norm: on sm_90 each kernel a
                 // programmatic dependent of the one before (the prep of window 1
                 // beside the scan of window 0, the scan launched while the
                 // prep's last blocks run), varlen, padding, zero starts
        s.seq_lens = {2080, 0, 33, 1};
        s.hk = 1, s.hv = 2, s.k = s.v = 64;
        s.flags = GDN_FLAG_QK_L2NORM;
        s.state_indices = {2, 1, -1, 0};
        s.start_from_zero = {0, 1, 1, 0};
        s.input = GDN_DTYPE_BF16;
        specs.push_back(s);
    }
    {
        Spec s;  // time-sliced windows (policy::cuda_scan_slice_for: slices of 512
                 // tokens of every sequence, both scans, also with 8 SMs): a
                 // padding slot, an empty zero-start sequence, the output norm's
                 // rows of a slice
        s.seq_lens = {800, 790, 0, 811};
        s.hk = 1, s.hv = 2, s.k = s.v = 64;
        s.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_OUTPUT_NORM;
        s.state_indices = {2, -1, 1, 0};
        s.start_from_zero = {1, 0, 1, 0};
        s.input = GDN_DTYPE_BF16;
        specs.push_back(s);
    }
    {
        Spec s;  // K = V = 128, G = 3, [V][K], interleaved, f16 out, odd row strides
        s.seq_lens = {97};
        s.hk = 1, s.hv = 3, s.k = s.v = 128;
        s.row_pad = 1;  // unaligned v rows: the register-state scan loads v through registers
        s.layout = GDN_STATE_VK;
        s.mapping = GDN_HEADS_INTERLEAVED;
        s.output = GDN_DTYPE_F16;
        specs.push_back(s);
    }
    {
        Spec s;  // bf16 out, aligned rows: the register-state scan's 16-byte output
                 // rows (sm_90, four stages) on full chunks, 2-byte stores on the last
        s.seq_lens = {77, 40};
        s.hk = 1, s.hv = 2, s.k = 128, s.v = 64;
        s.input = s.output = GDN_DTYPE_BF16;
        specs.push_back(s);
    }
    {
        Spec s;  // the fused BF16 path (variant 3 on sm_90): full and partial chunks of
                 // 64, an empty zero-start sequence, a padding sequence of NaN rows
                 // between two live ones, the pool, [V][K]
        s.seq_lens = {130, 0, 64, 65, 1};
        s.hk = 1, s.hv = 2, s.k = s.v = 128;
        s.input = GDN_DTYPE_BF16;
        s.layout = GDN_STATE_VK;
        s.state_indices = {3, 1, -1, 0, 2};
        s.start_from_zero = {0, 1, 0, 1, 0};
        s.nan_in_padding = true;
        specs.push_back(s);
    }
    {
        Spec s;  // the fused path's input transforms: the prep's q/k factors (kN in
                 // the input slot), bf16 g and β read, transformed and stored by the load
                 // warps (in_loaded's extra arrivals); bf16 out: the chain's lane
                 // exchanges and 8-byte stores
        s.seq_lens = {130, 65};
        s.hk = 1, s.hv = 2, s.k = s.v = 128;
        s.input = s.gate = s.output = GDN_DTYPE_BF16;
        s.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS;
        specs.push_back(s);
    }
    {
        Spec s;  // the fused path's output norm (the plain fused kernel's raw rows, then
                 // fused64_norm_kernel in place as its programmatic dependent), three
                 // chunks and a partial one, a padding sequence between live ones
        s.seq_lens = {200, 70, 130};
        s.hk = 1, s.hv = 2, s.k = s.v = 128;
        s.input = s.output = GDN_DTYPE_BF16;
        s.flags = GDN_FLAG_OUTPUT_NORM;
        s.state_indices = {1, -1, 0};
        s.nan_in_padding = true;
        specs.push_back(s);
    }
    {
        Spec s;  // decode with padding
        s.seq_lens = std::vector<int32_t>(6, 1);
        s.hk = 1, s.hv = 2, s.k = s.v = 128;
        s.flags = GDN_FLAG_OUTPUT_NORM;
        s.state_indices = {5, -1, 0, 2, 3, 1};
        s.num_state_slots = 6;
        specs.push_back(s);
    }
    // Decode without the output norm: the persistent decode kernels, each
    // block or warp walking several items, with padding and zero starts
    // mid-walk; V = 128 is their compile-time-V instance, V = 64 the generic
    // one, V = 100 (K = 128) a last column block partly past V (the warp
    // kernel's copies of it read nothing), and a [V][K] pool v4's 16-byte
    // accesses. These run the sequential variants only (the chunked ones take
    // a chunk per sequence and are slow under racecheck; the decode shape
    // above runs them).
    const size_t decode_from = specs.size();
    for (int v : {128, 64, 100, 0}) {  // 0: V = 128, [V][K]
        Spec s;
        const int n = v == 64 ? 300 : 400;
        s.seq_lens = std::vector<int32_t>(n, 1);
        s.hk = 1, s.hv = 2;
        s.k = v == 64 ? 64 : 128;
        s.v = v == 0 ? 128 : v;
        if (v == 0) s.layout = GDN_STATE_VK;
        s.input = GDN_DTYPE_BF16;
        s.num_state_slots = n;
        s.state_indices.resize(n);
        s.start_from_zero.resize(n);
        for (int i = 0; i < n; ++i) {
            s.state_indices[i] = i % 11 == 5 ? -1 : (i * 7) % n;  // a permutation, some padding
            s.start_from_zero[i] = i % 13 == 3 ? 1 : 0;
        }
        specs.push_back(s);
    }
    for (size_t si = 0; si < specs.size(); ++si) {
        Spec s = specs[si];
        // Sequential with the caps as probed and with one SM, chunked FP32,
        // the tensor-core scans: BF16 (the register-state scan, 64 columns
        // per block) with 8 SMs, TF32X3 (the shared-memory scan), BF16X3
        // (the register-state scan with split operands) with the spec's
        // inputs and with the other of bf16 / f32 (the remainders of k, q
        // and v exist only for inputs other than bf16), and FP16X3 (the same
        // scan on FP16 terms) with f16 inputs (variant 7: exact in FP16, no
        // remainders of k, q and v) and with f32 ones (variant 8: split).
        for (int variant = 0; variant < (si < decode_from ? 9 : 2); ++variant) {
            const gdn_algorithm_t algo = variant >= 2 ? GDN_ALGO_CHUNKED : GDN_ALGO_SEQUENTIAL;
            gdn_caps_t c = caps;
            if (variant == 1) c.multiprocessor_count = 1;
            if (variant == 3) c.multiprocessor_count = 8;
            s.algorithm = algo;
            const bool fp16x3 = variant >= 7;
            s.precision = variant == 3   ? GDN_PRECISION_BF16
                          : variant == 4 ? GDN_PRECISION_TF32X3
                          : fp16x3       ? GDN_PRECISION_FP16X3
                          : variant >= 5 ? GDN_PRECISION_BF16X3
                                         : GDN_PRECISION_FP32;
            // FP16X3 (FP32-class) within the FP32 paths' 5e-6, as in
            // test_cuda_features.cpp.
            const double rel = variant == 3   ? 8e-3
                               : fp16x3       ? 5e-6
                               : variant >= 4 ? 1e-5
                                              : 5e-6;
            Spec run_spec = s;
            if (variant == 6 || fp16x3) {
                run_spec.input = variant == 7   ? GDN_DTYPE_F16
                                 : variant == 8 ? GDN_DTYPE_F32
                                 : s.input == GDN_DTYPE_BF16 ? GDN_DTYPE_F32
                                                             : GDN_DTYPE_BF16;
                // 16-bit g and β only beside inputs of their dtype (the API's rule).
                if (s.gate != GDN_DTYPE_F32) run_spec.gate = run_spec.input;
            }
            const auto e = run_against_fp64(c, run_spec, rel,
                                            "variant " + std::to_string(variant) + ", input dtype " +
                                                std::to_string(int(run_spec.input)));
            if (variant >= 5)
                std::printf("sanitize: spec %zu, %s, input dtype %d: out %.3g state %.3g vs FP64\n", si,
                            fp16x3 ? "FP16X3" : "BF16X3", int(run_spec.input), e.first, e.second);
        }
    }
}

// The fused path's output norm over many blocks at 6 value heads (the norm
// kernel's (token, head) of a row by its multiply-high division), with
// 16-byte rows (bf16 out) and with 4-byte ones (f32 out rows padded by 1); a
// padding sequence between live ones. The BF16 path only (the others run
// these flags in the shapes above).
TEST_CASE("the fused path's output norm at 6 value heads, 16-byte and 4-byte rows (for compute-sanitizer)",
          "[cuda][sanitize][fused]") {
    const gdn_caps_t caps = cuda_caps();
    for (const bool f32_out : {false, true}) {
        Spec s;
        s.seq_lens = {1000, 70, 1130};
        s.hk = 2, s.hv = 6, s.k = s.v = 128;
        s.input = GDN_DTYPE_BF16;
        s.output = f32_out ? GDN_DTYPE_F32 : GDN_DTYPE_BF16;
        s.out_row_pad = f32_out ? 1 : 0;
        s.flags = GDN_FLAG_OUTPUT_NORM;
        s.state_indices = {1, -1, 0};
        s.nan_in_padding = true;
        s.algorithm = GDN_ALGO_CHUNKED;
        s.precision = GDN_PRECISION_BF16;
        s.seed = 31;
        run_against_fp64(caps, s, 8e-3, f32_out ? "f32 out" : "bf16 out");
    }
}

// The fused path's rows longest sequence first (fused64_order_kernel ahead of the fused
// kernel: a varlen batch whose pairs take more than one wave, lengths that differ): 70
// sequences at 2 value heads (140 pairs), most of one token, a few of one or two chunks and
// the longest last; a pool with padding entries (NaN rows) and zero starts. Small enough for
// racecheck with every kernel instrumented.
TEST_CASE("the fused path's rows longest sequence first (for compute-sanitizer)", "[cuda][sanitize][fused]") {
    const gdn_caps_t caps = cuda_caps();
    Spec s;
    const int32_t n = 70;
    s.seq_lens.clear();  // (Spec's default is one 64-token sequence)
    for (int32_t i = 0; i < n; ++i) s.seq_lens.push_back(i % 10 == 4 ? 65 + i : 1);
    s.seq_lens[n - 1] = 200;
    for (int32_t i = 0; i < n; ++i) {
        s.state_indices.push_back(i % 17 == 9 ? -1 : (11 * i + 5) % n);
        s.start_from_zero.push_back(uint8_t(i % 5 == 2));
    }
    s.nan_in_padding = true;
    s.hk = 1, s.hv = 2, s.k = s.v = 128;
    s.input = GDN_DTYPE_BF16;
    s.algorithm = GDN_ALGO_CHUNKED;
    s.precision = GDN_PRECISION_BF16;
    s.seed = 32;
    run_against_fp64(caps, s, 8e-3, "rows longest first");
    if (!(caps.features & GDN_FEATURE_WGMMA)) return;  // (no fused path: the C = 32 one ran)
    // The call as a graph (captured, not run): the order kernel, then the fused one.
    Problem p(s);
    DeviceProblem d(p);
    DeviceWorkspace ws;
    REQUIRE(ws.size_for(caps, p.problem) == GDN_SUCCESS);
    cudaStream_t stream;
    GDN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    REQUIRE(capture(d, p.problem, caps, ws, stream, &graph) == GDN_SUCCESS);
    size_t nodes = 0;
    GDN_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    CHECK(nodes == 2);
    GDN_CUDA_CHECK(cudaGraphDestroy(graph));
    GDN_CUDA_CHECK(cudaStreamDestroy(stream));
}
