// Same bits on reruns: >= 100 reruns of the chunked path at 5 shapes (130 to
// 8192 tokens), the workspace filled with NaN before every other run (so a
// read of anything the prep did not write this call would show), outputs
// pre-filled with NaN before every run, guard bands around every output and
// state buffer unchanged at the end. The sequential kernel likewise.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>

#include "common/dispatch.hpp"
#include "cuda_support.hpp"

using namespace gdn_cuda_test;

namespace {

std::vector<Spec> determinism_shapes() {
    std::vector<Spec> shapes;
    Spec a;
    a.seq_lens = {130};
    a.hk = 2, a.hv = 6, a.k = a.v = 128;
    shapes.push_back(a);
    Spec b;  // varlen, padding, zero-start, gate features, bf16
    b.seq_lens = {1000, 33, 0, 517};
    b.hk = 4, b.hv = 8;
    b.input = b.gate = GDN_DTYPE_BF16;
    b.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS;
    b.state_indices = {1, 0, 3, -1};
    b.start_from_zero = {0, 1, 1, 0};
    b.seed = 12;
    shapes.push_back(b);
    Spec c;  // crosses a window (2048 chunk starts)
    c.seq_lens = {2048 + 77};
    c.hk = 16, c.hv = 48, c.k = c.v = 128;
    c.seed = 13;
    shapes.push_back(c);
    Spec d;  // the output-norm pass, f16 out
    d.seq_lens = {4099};
    d.hk = 2, d.hv = 4, d.k = d.v = 128;
    d.flags = GDN_FLAG_OUTPUT_NORM;
    d.output = GDN_DTYPE_F16;
    d.seed = 14;
    shapes.push_back(d);
    Spec e;
    e.seq_lens = {8192};
    e.hk = 16, e.hv = 48, e.k = e.v = 128;
    e.input = e.gate = e.output = GDN_DTYPE_BF16;
    e.seed = 15;
    shapes.push_back(e);
    Spec f;  // f32 gates: BF16 takes the fused path on sm_90 (a cluster pair per head)
    f.seq_lens = {3000, 0, 77, 1100};
    f.hk = 4, f.hv = 12, f.k = f.v = 128;
    f.input = GDN_DTYPE_BF16;
    f.state_indices = {1, 3, -1, 0};
    f.start_from_zero = {0, 1, 0, 1};
    f.nan_in_padding = true;
    f.seed = 16;
    shapes.push_back(f);
    Spec g;  // the fused path's input transforms (the q/k L2 norm as the prep's per-token
             // factors, raw gate, β logits, bf16 g and β through the load warps)
    g.seq_lens = {2000, 0, 130};
    g.hk = 2, g.hv = 6, g.k = g.v = 128;
    g.input = g.gate = GDN_DTYPE_BF16;
    g.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS;
    g.start_from_zero = {0, 1, 0};
    g.seed = 17;
    shapes.push_back(g);
    Spec h;  // the fused path's output norm (the norm kernel after the fused one) with
             // the q/k L2 norm, bf16 out, a padding sequence
    h.seq_lens = {1500, 0, 333, 40};
    h.hk = 2, h.hv = 4, h.k = h.v = 128;
    h.input = h.output = GDN_DTYPE_BF16;
    h.flags = GDN_FLAG_OUTPUT_NORM | GDN_FLAG_QK_L2NORM;
    h.state_indices = {2, 0, -1, 1};
    h.start_from_zero = {0, 1, 0, 0};
    h.nan_in_padding = true;
    h.seed = 18;
    shapes.push_back(h);
    return shapes;
}

// FP16X3 on f16 where a spec has bf16 (its exact input type, as bf16 is
// BF16X3's: k/q/v without remainders); the f32 specs keep the split inputs.
Spec bf16_as_f16(Spec s) {
    auto swap = [](gdn_dtype_t& t) {
        if (t == GDN_DTYPE_BF16) t = GDN_DTYPE_F16;
    };
    swap(s.input), swap(s.gate), swap(s.output);
    return s;
}

void check_reruns(gdn_algorithm_t algo, int reruns,
                  gdn_precision_t precision = GDN_PRECISION_FP32) {
    const gdn_caps_t caps = cuda_caps();
    for (Spec s : determinism_shapes()) {
        if (precision == GDN_PRECISION_FP16X3) s = bf16_as_f16(s);
        s.algorithm = algo;
        s.precision = precision;
        Problem p(s);
        DeviceProblem d(p);
        DeviceWorkspace ws;
        REQUIRE(ws.size_for(caps, p.problem) == GDN_SUCCESS);
        std::vector<unsigned char> out0, state0;
        for (int run_i = 0; run_i < reruns; ++run_i) {
            if (run_i % 2 == 0) ws.fill_nan();
            d.reset_state();
            d.fill_out_nan();
            const gdn_status_t st = run(d, p.problem, caps, ws);
            INFO("T = " << p.T << ", run " << run_i << ": " << gdn_last_error());
            REQUIRE(st == GDN_SUCCESS);
            std::vector<unsigned char> out = d.out.bytes(), state = d.state.bytes();
            if (run_i == 0) {
                out0 = std::move(out);
                state0 = std::move(state);
                // The first run is also right: every live out element written.
                d.download();
                const std::vector<char> mask = p.out_live();
                const std::vector<float> o = p.out_f32();
                for (size_t i = 0; i < o.size(); ++i)
                    if (mask[i] && !std::isfinite(o[i])) {
                        INFO(p.out_index(i) << " not written");
                        REQUIRE(std::isfinite(o[i]));
                    }
                continue;
            }
            REQUIRE(same_bits(out, out0, "out") == "");
            REQUIRE(same_bits(state, state0, "state") == "");
        }
        const std::string damage = d.guard_damage() + ws.buf.guard_damage("workspace");
        INFO(damage);
        CHECK(damage.empty());
        std::printf("determinism (%s, precision %d): T = %lld, %d runs, identical bits\n",
                    algo == GDN_ALGO_CHUNKED ? "chunked" : "sequential", int(precision),
                    (long long)p.T, reruns);
    }
}

}  // namespace

TEST_CASE("chunked path: 100 reruns give identical bits, NaN workspace every other run",
          "[cuda][determinism]") {
    check_reruns(GDN_ALGO_CHUNKED, 100);
}

TEST_CASE("sequential path: reruns give identical bits", "[cuda][determinism]") {
    check_reruns(GDN_ALGO_SEQUENTIAL, 20);
}

// (Two cases, so that the BF16 one, the fused path's on sm_90, runs alone by its name:
// no comma in the names, which Catch reads as a list of filters.)
TEST_CASE("tensor-core chunked path: 100 reruns give identical bits (BF16)", "[cuda][determinism][tc]") {
    check_reruns(GDN_ALGO_CHUNKED, 100, GDN_PRECISION_BF16);
}

TEST_CASE("tensor-core chunked path: reruns give identical bits (TF32X3 FP16 BF16X3 FP16X3)",
          "[cuda][determinism][tc]") {
    check_reruns(GDN_ALGO_CHUNKED, 100, GDN_PRECISION_TF32X3);
    check_reruns(GDN_ALGO_CHUNKED, 30, GDN_PRECISION_FP16);
    check_reruns(GDN_ALGO_CHUNKED, 100, GDN_PRECISION_BF16X3);
    // FP16X3: BF16X3's scan on FP16 terms (the same pipeline, which its 100 cover).
    check_reruns(GDN_ALGO_CHUNKED, 30, GDN_PRECISION_FP16X3);
}

// The pipelines' shape does not change the arithmetic: the BF16/FP16/BF16X3/
// FP16X3 scan with four stages of loaded rows (taken where they fit, the H200;
// for BF16X3, and FP16X3 with f32 inputs, at K = 64 only) and with three (caps
// whose opt-in shared memory fits three at the spec's K, not four: K = 64 and
// K = 128 are both compared), and windows overlapped (sm_90) or one after
// another (caps that say sm_80), give the same bits. FP16X3 runs the specs'
// bf16 inputs as f16 (its exact type).
TEST_CASE("the BF16/FP16/BF16X3/FP16X3 scan: three or four stages, overlapped windows or not, the same bits",
          "[cuda][determinism][tc]") {
    // Caps without GDN_FEATURE_WGMMA: BF16 takes the register-state scan here
    // too, not the fused C = 64 path (which the device's own caps would give
    // the first spec on sm_90, and the reduced and serial ones would not).
    gdn_caps_t caps = cuda_caps();
    caps.features &= ~uint64_t(GDN_FEATURE_WGMMA);
    // The register-state scan's one width (dispatch gives it no other).
    constexpr int32_t ncol = gdn::policy::kCudaScanMmaColumns;
    gdn_caps_t serial = caps;  // no programmatic dependent launch: windows in turn
    serial.compute_major = 8;
    serial.compute_minor = 0;
    std::printf("windows on this device: %s\n", caps.compute_major >= 9 ? "overlapped" : "in turn (below sm_90)");
    std::vector<Spec> specs;
    {
        Spec s;  // three windows, varlen with a padding slot, the output-norm pass
        s.seq_lens = {5000, 300};
        s.hk = 2, s.hv = 6, s.k = s.v = 128;
        s.input = GDN_DTYPE_BF16;
        s.flags = GDN_FLAG_OUTPUT_NORM | GDN_FLAG_QK_L2NORM;
        s.state_indices = {1, -1};
        s.num_state_slots = 2;
        specs.push_back(s);
    }
    {
        Spec s;  // f32 inputs, K = 64, five windows, a short second sequence
        s.seq_lens = {8192 + 5, 40};
        s.hk = 2, s.hv = 4, s.k = 64, s.v = 128;
        s.seed = 21;
        specs.push_back(s);
    }
    // Per precision and spec, caps that fit three stages at its K, not four:
    // the bytes of four stages at that K less one (never above the device's
    // own). One set cut for K = 128 would not do: four stages at K = 64 fit
    // under it, so the K = 64 spec would compare four with four. BF16X3's
    // stages hold remainders too (split), and FP16X3's with f32 inputs: at
    // K = 128 four never fit (the H200 runs three), at K = 64 they do. FP16X3
    // with 16-bit inputs holds no k/q remainders: four fit at K = 128 too
    // (H100/H200; since 0.6.4).
    auto stage_caps = [&](gdn_precision_t precision, std::vector<gdn_caps_t>& three,
                          std::vector<signed char>& compare_stages) {
        three.assign(specs.size(), caps);
        compare_stages.assign(specs.size(), 0);
        for (size_t j = 0; j < specs.size(); ++j) {
            const int32_t K = specs[j].k;
            const gdn::policy::ScanMmaRows rows =
                gdn::policy::cuda_scan_mma_rows(precision, int32_t(dtype_bytes(specs[j].input)));
            const bool split = rows.split;
            const size_t four = gdn::policy::cuda_scan_mma_smem_bytes(K, ncol, 4, rows);
            three[j].shared_mem_per_block_optin = std::min<size_t>(caps.shared_mem_per_block_optin, four - 1);
            const int here = gdn::policy::cuda_scan_mma_stages(K, ncol, caps.shared_mem_per_block_optin, rows);
            const int reduced =
                gdn::policy::cuda_scan_mma_stages(K, ncol, three[j].shared_mem_per_block_optin, rows);
            std::printf("stages at K = %d%s: %d on this device, %d with the reduced caps\n", K,
                        split ? " (split)" : "", here, reduced);
            // A device without the shared memory for three stages at this K
            // has no register-state scan to compare (dispatch serves the
            // precision otherwise): skipped, and said so.
            if (here < 3) {
                compare_stages[j] = -1;
                std::printf("skipped: K = %d%s, the device's %zu bytes of opt-in shared memory per block do not "
                            "fit three stages of the register-state scan\n",
                            K, split ? " (split)" : "", size_t(caps.shared_mem_per_block_optin));
                continue;
            }
            INFO("K = " << K << ": reduced opt-in " << three[j].shared_mem_per_block_optin << " bytes");
            REQUIRE(reduced == 3);
            // Where the device fits four, its own caps must take them, or the
            // comparison would be three with three. Where it does not, there is
            // no four-stage run to compare with: the comparison is left out, with
            // the reason printed, rather than passed as three against three.
            if (caps.shared_mem_per_block_optin >= four) {
                REQUIRE(here == 4);
                compare_stages[j] = 1;
            } else {
                std::printf("three or four stages at K = %d%s: not compared (the device's %zu bytes of opt-in "
                            "shared memory per block do not fit four)\n",
                            K, split ? " (split)" : "", size_t(caps.shared_mem_per_block_optin));
            }
        }
    };
    std::vector<gdn_caps_t> three;
    std::vector<signed char> compare_stages;  // 1: compare three with four, 0: not, -1: skipped
    for (gdn_precision_t precision :
         {GDN_PRECISION_BF16, GDN_PRECISION_FP16, GDN_PRECISION_BF16X3, GDN_PRECISION_FP16X3}) {
        stage_caps(precision, three, compare_stages);
        for (size_t j = 0; j < specs.size(); ++j) {
            if (compare_stages[j] < 0) continue;  // skipped above, with the reason
            Spec s = precision == GDN_PRECISION_FP16X3 ? bf16_as_f16(specs[j]) : specs[j];
            s.algorithm = GDN_ALGO_CHUNKED;
            s.precision = precision;
            Problem p(s);
            DeviceProblem d(p);
            std::vector<unsigned char> out0, state0;
            const gdn_caps_t* all[] = {&caps, &three[j], &serial};
            for (int i = 0; i < 3; ++i) {
                if (i == 1 && !compare_stages[j]) continue;
                const gdn_caps_t& c = *all[i];
                DeviceWorkspace ws;
                REQUIRE(ws.size_for(c, p.problem) == GDN_SUCCESS);
                ws.fill_nan();
                d.reset_state();
                d.fill_out_nan();
                const gdn_status_t st = run(d, p.problem, c, ws);
                INFO("precision " << int(precision) << ", K = " << s.k << ", T = " << p.T << ", caps " << i
                                  << ": " << gdn_last_error());
                REQUIRE(st == GDN_SUCCESS);
                if (i == 0) {
                    out0 = d.out.bytes();
                    state0 = d.state.bytes();
                    continue;
                }
                CHECK(same_bits(d.out.bytes(), out0, "out") == "");
                CHECK(same_bits(d.state.bytes(), state0, "state") == "");
                CHECK(ws.buf.guard_damage("workspace") == "");
            }
            CHECK(d.guard_damage() == "");
        }
    }
}

// gdn_workspace_size() sizes the chunked path for 2048-token windows; a call
// given more workspace runs longer ones (doubling, up to 8192 tokens) where
// the prompt still makes 8 of them (dispatch.hpp): fewer launches, the same
// bits. Checked black-box: the call is captured in a graph, whose kernel
// count gives the windows (prep + scan, + the output norm's pass, per
// window), and replayed over NaN-filled outputs and workspace; every window
// length must give the bits of the 2048-token one, and leave the guard bands
// of the workspace, outputs and state intact. The caps leave out
// GDN_FEATURE_WGMMA, so that BF16 takes the C = 32 path's windows on sm_90
// too (the fused C = 64 path has none).
TEST_CASE("a larger workspace: longer chunked windows, the same bits", "[cuda][determinism][window]") {
    gdn_caps_t caps = cuda_caps();
    caps.features &= ~uint64_t(GDN_FEATURE_WGMMA);
    cudaStream_t stream;
    GDN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::vector<Spec> specs;
    {
        Spec s;  // too short for longer windows: 2048 with any workspace
        s.seq_lens = {9000 + 7, 300, 0, 4100};
        s.hk = 2, s.hv = 4, s.k = s.v = 128;
        s.input = GDN_DTYPE_BF16;
        s.flags = GDN_FLAG_OUTPUT_NORM | GDN_FLAG_QK_L2NORM;
        s.state_indices = {2, -1, 0, 1};
        s.num_state_slots = 3;
        s.start_from_zero = {0, 0, 1, 1};
        specs.push_back(s);
    }
    {
        Spec s;  // varlen across window ends, a padding slot, zero-start, the output-norm pass
        s.seq_lens = {40000 + 7, 300, 0, 26000 - 3};
        s.hk = 1, s.hv = 2, s.k = s.v = 128;
        s.input = GDN_DTYPE_BF16;
        s.flags = GDN_FLAG_OUTPUT_NORM | GDN_FLAG_QK_L2NORM;
        s.state_indices = {2, -1, 0, 1};
        s.num_state_slots = 3;
        s.start_from_zero = {0, 0, 1, 0};
        s.seed = 41;
        specs.push_back(s);
    }
    {
        Spec s;  // f32 inputs, K = 64, one sequence that misses the chunk size
        s.seq_lens = {65536 + 13};
        s.hk = 1, s.hv = 2, s.k = 64, s.v = 128;
        s.seed = 33;
        specs.push_back(s);
    }
    namespace pol = gdn::policy;
    for (gdn_precision_t precision : {GDN_PRECISION_FP32, GDN_PRECISION_TF32X3, GDN_PRECISION_BF16,
                                      GDN_PRECISION_FP16, GDN_PRECISION_BF16X3, GDN_PRECISION_FP16X3}) {
        for (const Spec& spec : specs) {
            Spec s = spec;
            s.algorithm = GDN_ALGO_CHUNKED;
            s.precision = precision;
            Problem p(s);
            // A device that cannot run this forced request (no chunked path at
            // this K and precision): skipped, and said so; gdn_select_path's
            // answer is what gdn_chunked_recurrence would return.
            gdn_path_info_t info;
            gdn_path_info_init(&info);
            const gdn_status_t sel = gdn_select_path(&caps, &p.problem, nullptr, &info);
            if (sel == GDN_ERROR_NOT_SUPPORTED) {
                std::printf("skipped: precision %d, K = %d, T = %lld: %s\n", int(precision), s.k,
                            static_cast<long long>(p.T), gdn_last_error());
                continue;
            }
            REQUIRE(sel == GDN_SUCCESS);
            DeviceProblem d(p);
            size_t need = 0;
            REQUIRE(gdn_workspace_size(&caps, &p.problem, &need) == GDN_SUCCESS);
            REQUIRE(need > 0);
            const bool norm = (s.flags & GDN_FLAG_OUTPUT_NORM) != 0;
            REQUIRE(info.chunk_size == pol::kCudaChunk);
            std::vector<unsigned char> out0, state0;
            std::vector<int64_t> seen;
            int sliced = 0;
            for (int factor : {1, 2, 4, 16}) {
                // The window the rule gives: the scratch grows with the
                // window's rows (window + one chunk), so `factor` times the
                // bytes hold a window `factor` times as long.
                int64_t window = pol::kCudaWindowTokens;
                while (2 * window <= pol::kCudaMaxWindowTokens && pol::kCudaMinWindows * 2 * window <= p.T &&
                       2 * window <= pol::kCudaWindowTokens * factor)
                    window *= 2;
                seen.push_back(window);
                // Where the batch takes time-sliced windows (the second spec:
                // two long sequences side by side), ceil(max_seqlen / slice)
                // of them (policy::cuda_scan_slice_for, as the backend asks it).
                const bool reg_state = info.precision == GDN_PRECISION_BF16 ||
                                       info.precision == GDN_PRECISION_FP16 ||
                                       info.precision == GDN_PRECISION_BF16X3 ||
                                       info.precision == GDN_PRECISION_FP16X3;
                const int32_t g = s.hv / s.hk;
                const int32_t ncol = pol::cuda_scan_columns(s.hk, g, s.v, caps.multiprocessor_count, reg_state);
                const int64_t rounded = (p.T + pol::kCudaChunk - 1) / pol::kCudaChunk * pol::kCudaChunk;
                const int64_t slice = pol::cuda_scan_slice_for(
                    std::min(window, rounded), caps.compute_major < 9 || rounded > window,
                    p.problem.num_seqs, p.problem.max_seqlen, p.T, s.hk, g, s.v, ncol,
                    caps.multiprocessor_count, reg_state);
                if (slice) ++sliced;
                const int64_t windows = slice ? (p.problem.max_seqlen + slice - 1) / slice
                                              : (p.T + window - 1) / window;
                DeviceWorkspace ws;
                ws.buf.resize(need * size_t(factor));
                ws.fill_nan(stream);
                d.reset_state(stream);
                d.fill_out_nan(stream);
                GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
                cudaGraph_t graph;
                const gdn_status_t st = capture(d, p.problem, caps, ws, stream, &graph);
                INFO("precision " << int(precision) << ", K = " << s.k << ", T = " << p.T << ", workspace x"
                                  << factor << " (" << window << "-token windows): " << gdn_last_error());
                REQUIRE(st == GDN_SUCCESS);
                size_t nodes = 0;
                GDN_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
                CHECK(int64_t(nodes) == windows * (norm ? 3 : 2));
                cudaGraphExec_t exec;
                GDN_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
                GDN_CUDA_CHECK(cudaGraphLaunch(exec, stream));
                GDN_CUDA_CHECK(cudaStreamSynchronize(stream));
                GDN_CUDA_CHECK(cudaGraphExecDestroy(exec));
                GDN_CUDA_CHECK(cudaGraphDestroy(graph));
                CHECK(ws.buf.guard_damage("workspace") == "");
                if (factor == 1) {
                    out0 = d.out.bytes();
                    state0 = d.state.bytes();
                    continue;
                }
                CHECK(same_bits(d.out.bytes(), out0, "out") == "");
                CHECK(same_bits(d.state.bytes(), state0, "state") == "");
            }
            CHECK(d.guard_damage() == "");
            // The specs reach what they are for: the short one keeps 2048, the
            // long ones reach 4096 and 8192.
            if (p.T < pol::kCudaMinWindows * 2 * pol::kCudaWindowTokens)
                CHECK(seen.back() == pol::kCudaWindowTokens);
            else
                CHECK(seen == std::vector<int64_t>{2048, 4096, 8192, 8192});
            // The second spec's batch takes time-sliced windows at every
            // workspace (both scans), so that their lengths are covered too.
            if (s.seq_lens.size() == 4 && s.seq_lens[0] == 40000 + 7) CHECK(sliced == 4);
        }
    }
    GDN_CUDA_CHECK(cudaStreamDestroy(stream));
}
