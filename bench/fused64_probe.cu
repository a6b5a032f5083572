// gdn_fused64_probe: the harness of the library's fused BF16 kernel (src/cuda/fused64.cuh,
// docs/perf-notes.md v40-v44): the whole chunked recurrence in one kernel with chunks of
// C = 64, a cluster of two CTAs per (sequence, value head), 512 threads each (the state
// warpgroup, two prep warpgroups on every other chunk, a load warpgroup; two rings of
// input and output slots). It builds the kernel's arguments from a Params made as the
// library makes them (gdn::read_problem, read_tensors, cuda::make_params) for plain
// features (bf16 q/k/v packed as [tokens][heads][128], f32 g/β, K = V = 128, grouped
// heads, state [N][Hv][K][V] in slots 0..N−1, outputs f32 unless --out says otherwise),
// checks itself against the project's FP64 reference (gdn::ref::run, as the tests do),
// reruns for identical bits, prints a hash of the bits to compare two builds by, and times
// itself. The variants it once compared (--role, --noload, --cluster, --tchain, --two,
// --early and the stage layouts before --rings) are in perf-notes v40-v44 and in the git
// history before the kernel moved into the library.
// Options ("--name value"):
//  --t, --n            tokens per sequence, sequences (4096, 1);
//  --hk, --hv          key and value heads (16, 48);
//  --reps, --check     launches per timing, the checks on (20, 1);
//  --out f32|bf16|f16  the output dtype (the checks then compare the rounded outputs);
//  --phases 1          the cycles per chunk of each warp's phases in CTA 0 (clock64);
//  --phases n (n > 1)  also n launches one by one with the marks on, each timed, and CTA 0's
//                      phases for warps 0, 4 and 8 per launch (built with
//                      -DGDN_FUSED64_CHAIN_MARKS: the chain's work split at its wgmma waits);
//                      the timing after them runs without the marks (--phases 1: with them);
//  --trace n           n launches with the events on, each timed: the first one's chunk
//                      event times in CTAs 0 and 1, and for every one the mean time of each
//                      step on the path load -> prep -> chain;
//  --norm 1            the q/k L2 norm (the library's NORM instances, with GX; the checks
//                      against the FP64 reference with the norm too);
//  --each n            after the timing, n launches timed one by one: the spread of their
//                      times (min, deciles, max), which the batches' median hides;
//  --balance 1         the kernel's BAL option: warpgroup 1 forms Pᵀ = k·qᵀ (stored as P by
//                      stmatrix.trans), so that A's and Pᵀ's live tiles balance the four
//                      schedulers; the exponentials without the denormal guard; T's
//                      diagonal blocks without warpgroup 0's barrier before them (perf-notes
//                      v44; their 16-byte row loads are every instance's since 0.6.5, v116);
//  --marks 0           the instances without the marks compiled in (the library takes those
//                      with them, flags off: ~20% faster at 32K, perf-notes v47);
//  --pair 1 --tma 1 --split 1 --rings 1  accepted and ignored (what the kernel is; scripts
//                      pass them).
// The probe's instances are the library's kernel (src/cuda/fused64.cuh) under their own names.
//
// Built by CMake where CUDA is on (sm_90a: wgmma); runs on an sm_90 device, says "skipped"
// elsewhere. Results on the H200: docs/perf-notes.md v40-v44 and docs/cuda.md (nineteenth
// to twenty-second runs). Built with -DGDN_PROBE_HANG_REPORT, a wait that times out records
// where and returns (the results are then garbage) instead of trapping.
#define GDN_FUSED64_PROFILE 1

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "common/reference.hpp"
#include "common/validate.hpp"
#include "cuda/fused64.cuh"
#include "cuda/kernels.hpp"
#include "gdn/gdn.h"

namespace f64 = gdn::cuda::fused64;
using Kernel = void (*)(f64::Args);

template <bool BAL, bool PROF, bool NORM = false>
static Kernel kernel_for(gdn_dtype_t out) {
    // NORM: the library's q/k L2-norm instances (always with GX, fused64.cu), marks compiled in.
    return out == GDN_DTYPE_BF16  ? f64::fused64_kernel<BAL, PROF, GDN_DTYPE_BF16, NORM, NORM>
           : out == GDN_DTYPE_F16 ? f64::fused64_kernel<BAL, PROF, GDN_DTYPE_F16, NORM, NORM>
                                  : f64::fused64_kernel<BAL, PROF, GDN_DTYPE_F32, NORM, NORM>;
}

// ---------------------------------------------------------------- harness
static double uni(std::mt19937_64& r) { return (r() >> 11) * (1.0 / 9007199254740992.0); }
static double nrm(std::mt19937_64& r) {
    const double u1 = 1.0 - uni(r), u2 = uni(r);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
static float bf(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

#define CK(x)                                                                               \
    do {                                                                                    \
        cudaError_t e_ = (x);                                                               \
        if (e_ != cudaSuccess) {                                                            \
            std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
            std::exit(1);                                                                   \
        }                                                                                   \
    } while (0)

int main(int argc, char** argv) {
    // Options come as "--name value" pairs; the last of a name counts.
    auto opt = [&](const char* name) -> const char* {
        const char* v = nullptr;
        for (int i = 1; i + 1 < argc; i += 2)
            if (!std::strcmp(argv[i], name)) v = argv[i + 1];
        return v;
    };
    auto iopt = [&](const char* name, int def) { const char* v = opt(name); return v ? std::atoi(v) : def; };
    // The options this harness knows; the ones the kernel is (accepted with the value 1
    // only); the removed variants' (an error, not a silent other kernel).
    for (int i = 1; i < argc; i += 2) {
        const std::string name = argv[i];
        static const char* const known[] = {"--t", "--n", "--hk", "--hv", "--reps", "--check",
                                            "--phases", "--trace", "--balance", "--out", "--marks",
                                            "--norm", "--each"};
        static const char* const fixed[] = {"--pair", "--tma", "--split", "--rings"};
        static const char* const removed[] = {"--role", "--noload", "--cluster", "--tchain", "--two", "--early"};
        auto in = [&](const auto& list) {
            return std::any_of(std::begin(list), std::end(list), [&](const char* x) { return name == x; });
        };
        if (i + 1 >= argc) {
            std::printf("%s: no value\n", name.c_str());
            return 1;
        }
        if (in(removed)) {
            std::printf("%s: that variant is gone (the kernel is --pair 1 --tma 1 --split 1 --rings 1; the "
                        "variants are in git history)\n", name.c_str());
            return 1;
        }
        if (in(fixed) && std::strcmp(argv[i + 1], "1") != 0) {
            std::printf("%s %s: only 1 (the kernel is --pair 1 --tma 1 --split 1 --rings 1)\n", name.c_str(),
                        argv[i + 1]);
            return 1;
        }
        if (!in(known) && !in(fixed)) {
            std::printf("%s: unknown option\n", name.c_str());
            return 1;
        }
    }
    gdn_dtype_t out_dt = GDN_DTYPE_F32;
    if (const char* o = opt("--out")) {
        if (!std::strcmp(o, "bf16"))
            out_dt = GDN_DTYPE_BF16;
        else if (!std::strcmp(o, "f16"))
            out_dt = GDN_DTYPE_F16;
        else if (std::strcmp(o, "f32") != 0) {
            std::printf("--out %s: f32, bf16 or f16\n", o);
            return 1;
        }
    }
    const size_t osz = out_dt == GDN_DTYPE_F32 ? 4 : 2;
    const int Hk = iopt("--hk", 16), Hv = iopt("--hv", 48), N = iopt("--n", 1), T = iopt("--t", 4096);
    const int reps = iopt("--reps", 20), check = iopt("--check", 1), norm = iopt("--norm", 0);
    {
        int dev = 0;
        cudaDeviceProp prop;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
            std::printf("skipped: no device\n");
            return 0;
        }
        if (prop.major != 9) {
            std::printf("skipped: wgmma needs an sm_90 device (this is sm_%d%d)\n", prop.major, prop.minor);
            return 0;
        }
    }
    const int D = 128;
    const int64_t NT = int64_t(N) * T;
    std::mt19937_64 rng(12345);
    std::vector<float> q(NT * Hk * D), k(NT * Hk * D), v(NT * Hv * D), g(NT * Hv), b(NT * Hv),
        s0(size_t(N) * Hv * D * D);
    std::vector<double> pool(999983);
    for (auto& x : pool) x = nrm(rng);
    size_t pi = 0;
    auto pn = [&] { const double x = pool[pi]; pi = pi + 1 == pool.size() ? 0 : pi + 1; return x; };
    for (auto& x : q) x = bf(float(pn()));
    for (int64_t r = 0; r < NT * Hk; ++r) {
        double n2 = 0, row[128];
        for (auto& x : row) x = pn(), n2 += x * x;
        for (int i = 0; i < D; ++i) k[r * D + i] = bf(float(row[i] / std::sqrt(n2)));
    }
    for (auto& x : v) x = bf(float(pn()));
    for (auto& x : g) x = float(-0.3 + 0.29 * uni(rng));
    for (auto& x : b) x = float(uni(rng));
    for (auto& x : s0) x = float(0.5 * nrm(rng));
    std::vector<__nv_bfloat16> qb(q.size()), kb(k.size()), vb(v.size());
    for (size_t i = 0; i < q.size(); ++i) qb[i] = __float2bfloat16_rn(q[i]), kb[i] = __float2bfloat16_rn(k[i]);
    for (size_t i = 0; i < v.size(); ++i) vb[i] = __float2bfloat16_rn(v[i]);
    std::vector<int> cu(N + 1);
    for (int i = 0; i <= N; ++i) cu[i] = i * T;
    const float scale = 1.0f / std::sqrt(float(D));

    __nv_bfloat16 *dq, *dk, *dv;
    float *dg, *db, *ds;
    void* dout;
    int* dcu;
    CK(cudaMalloc(&dq, qb.size() * 2));
    CK(cudaMalloc(&dk, kb.size() * 2));
    CK(cudaMalloc(&dv, vb.size() * 2));
    CK(cudaMalloc(&dg, g.size() * 4));
    CK(cudaMalloc(&db, b.size() * 4));
    CK(cudaMalloc(&ds, s0.size() * 4));
    CK(cudaMalloc(&dout, size_t(NT) * Hv * D * osz));
    CK(cudaMalloc(&dcu, (N + 1) * 4));
    CK(cudaMemcpy(dq, qb.data(), qb.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dk, kb.data(), kb.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv, vb.data(), vb.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dg, g.data(), g.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dcu, cu.data(), (N + 1) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0xff, size_t(NT) * Hv * D * osz));  // NaN

    // The kernel's arguments from a Params made as the library makes them.
    gdn_problem_t pr;
    gdn_problem_init(&pr);
    pr.num_seqs = N, pr.num_tokens = NT, pr.max_seqlen = T;
    pr.num_k_heads = Hk, pr.num_v_heads = Hv, pr.head_dim_k = D, pr.head_dim_v = D;
    pr.head_mapping = GDN_HEADS_GROUPED, pr.state_layout = GDN_STATE_KV;
    pr.input_dtype = GDN_DTYPE_BF16, pr.gate_dtype = GDN_DTYPE_F32, pr.output_dtype = out_dt;
    pr.num_state_slots = N, pr.scale = scale;
    if (norm) pr.flags |= GDN_FLAG_QK_L2NORM;
    gdn_tensors_t tn;
    gdn_tensors_init(&tn);
    tn.q = dq, tn.q_token_stride = int64_t(Hk) * D, tn.q_head_stride = D;
    tn.k = dk, tn.k_token_stride = int64_t(Hk) * D, tn.k_head_stride = D;
    tn.v = dv, tn.v_token_stride = int64_t(Hv) * D, tn.v_head_stride = D;
    tn.g = dg, tn.g_token_stride = Hv, tn.g_head_stride = 1;
    tn.beta = db, tn.beta_token_stride = Hv, tn.beta_head_stride = 1;
    tn.out = dout, tn.out_token_stride = int64_t(Hv) * D, tn.out_head_stride = D;
    tn.state = ds, tn.state_slot_stride = int64_t(Hv) * D * D, tn.cu_seqlens = dcu;
    gdn::Shape pshape;
    gdn::Tensors ptens;
    if (gdn::read_problem(&pr, &pshape) != GDN_SUCCESS || gdn::read_tensors(pshape, &tn, &ptens) != GDN_SUCCESS) {
        std::printf("the problem was refused: %s\n", gdn::last_error_cstr());
        return 1;
    }
    const gdn::cuda::Params params = gdn::cuda::make_params(pshape, ptens);
    f64::Args a;
    if (f64::make_args(params, &a) != cudaSuccess) {
        std::printf("the tensor maps could not be encoded (cuTensorMapEncodeTiled)\n");
        return 1;
    }
    if (a.gate_xform && !norm) {  // (the plain instances take f32 g and β as stored; NORM's are GX)
        std::printf("the probe takes f32 g and beta without transforms\n");
        return 1;
    }
    const int phases = iopt("--phases", 0), trace = iopt("--trace", 0), bal = iopt("--balance", 0);
    // The instances with the marks compiled in (their flags off unless --phases or --trace), as
    // the library takes them; --marks 0: without them (~20% slower at 32K, perf-notes v47).
    const int marks = iopt("--marks", 1);
    if (!marks && (phases || trace)) {
        std::printf("--marks 0 leaves out what --phases and --trace read\n");
        return 1;
    }
    const bool prof = marks != 0;
    if (norm && (bal || !marks)) {
        std::printf("--norm takes the library's instances: --balance 0 --marks 1\n");
        return 1;
    }
    const Kernel kern = norm  ? kernel_for<false, true, true>(out_dt)
                        : bal ? (prof ? kernel_for<true, true>(out_dt) : kernel_for<true, false>(out_dt))
                              : (prof ? kernel_for<false, true>(out_dt) : kernel_for<false, false>(out_dt));
    a.phases = phases;
    const int smem = f64::kRSmem;
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    auto launch = [&] { CK(f64::launch_args(kern, a, nullptr)); };
    // One launch between two events, its time in ms (--trace n, --phases n, --each n).
    cudaEvent_t le0, le1;
    CK(cudaEventCreate(&le0));
    CK(cudaEventCreate(&le1));
    auto timed_launch = [&] {
        CK(cudaEventRecord(le0));
        launch();
        CK(cudaEventRecord(le1));
        CK(cudaEventSynchronize(le1));
        float t = 0;
        CK(cudaEventElapsedTime(&t, le0, le1));
        return t;
    };
    std::printf("fused64: Hk %d Hv %d, %d x %d tokens, smem %d B\n", Hk, Hv, N, T, smem);

    if (check) {
        CK(cudaMemcpy(ds, s0.data(), s0.size() * 4, cudaMemcpyHostToDevice));
        launch();
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        // The outputs as floats (exact from bf16/f16).
        std::vector<unsigned char> raw(size_t(NT) * Hv * D * osz);
        auto fetch_out = [&](std::vector<float>& o) {
            CK(cudaMemcpy(raw.data(), dout, raw.size(), cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < o.size(); ++i) {
                if (out_dt == GDN_DTYPE_F32)
                    std::memcpy(&o[i], &raw[4 * i], 4);
                else {
                    uint16_t u;
                    std::memcpy(&u, &raw[2 * i], 2);
                    o[i] = out_dt == GDN_DTYPE_BF16 ? __bfloat162float(__ushort_as_bfloat16(u))
                                                    : __half2float(__ushort_as_half(u));
                }
            }
        };
        std::vector<float> out(size_t(NT) * Hv * D), sf(s0.size());
        fetch_out(out);
        CK(cudaMemcpy(sf.data(), ds, sf.size() * 4, cudaMemcpyDeviceToHost));
        // Rerun: same bits.
        CK(cudaMemcpy(ds, s0.data(), s0.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemset(dout, 0xff, size_t(NT) * Hv * D * osz));
        launch();
        CK(cudaDeviceSynchronize());
        std::vector<float> out2(out.size()), sf2(sf.size());
        fetch_out(out2);
        CK(cudaMemcpy(sf2.data(), ds, sf.size() * 4, cudaMemcpyDeviceToHost));
        const bool same = !std::memcmp(out.data(), out2.data(), out.size() * 4) &&
                          !std::memcmp(sf.data(), sf2.data(), sf.size() * 4);
        // The FP64 reference (gdn::ref::run, src/common/reference.hpp), threads over views
        // of one (sequence, value head) each.
        std::vector<double> ro(out.size()), rs(s0.size());
        // The views' state (the library's checks want one; ref writes rs).
        const std::vector<float> state_view(size_t(D) * D);
        std::atomic<bool> ref_ok{true};
        auto work = [&](int id0, int step) {
            for (int id = id0; id < N * Hv; id += step) {
                const int nn = id / Hv, hh = id % Hv, kh = hh / (Hv / Hk), len = cu[nn + 1] - cu[nn];
                double* st = rs.data() + (size_t(nn) * Hv + hh) * D * D;
                for (int i = 0; i < D * D; ++i) st[i] = s0[(size_t(nn) * Hv + hh) * D * D + i];
                if (len == 0) continue;
                gdn_problem_t pr;
                gdn_problem_init(&pr);
                pr.num_seqs = 1, pr.num_tokens = len, pr.max_seqlen = len;
                pr.num_k_heads = 1, pr.num_v_heads = 1, pr.head_dim_k = D, pr.head_dim_v = D;
                pr.input_dtype = GDN_DTYPE_BF16, pr.gate_dtype = GDN_DTYPE_F32, pr.output_dtype = GDN_DTYPE_F32;
                pr.num_state_slots = 1, pr.scale = scale;
                if (norm) pr.flags |= GDN_FLAG_QK_L2NORM;
                const int32_t cu1[2] = {0, len};
                gdn_tensors_t tn;
                gdn_tensors_init(&tn);
                tn.q = qb.data() + (int64_t(cu[nn]) * Hk + kh) * D, tn.q_token_stride = int64_t(Hk) * D;
                tn.k = kb.data() + (int64_t(cu[nn]) * Hk + kh) * D, tn.k_token_stride = int64_t(Hk) * D;
                tn.v = vb.data() + (int64_t(cu[nn]) * Hv + hh) * D, tn.v_token_stride = int64_t(Hv) * D;
                tn.g = g.data() + int64_t(cu[nn]) * Hv + hh, tn.g_token_stride = Hv;
                tn.beta = b.data() + int64_t(cu[nn]) * Hv + hh, tn.beta_token_stride = Hv;
                tn.q_head_stride = tn.k_head_stride = tn.v_head_stride = tn.out_head_stride = D;
                tn.g_head_stride = tn.beta_head_stride = 1;
                std::vector<float> out_view(size_t(len) * D);  // likewise (ref writes ro)
                tn.out = out_view.data(), tn.out_token_stride = D;
                tn.state = const_cast<float*>(state_view.data()), tn.cu_seqlens = cu1;
                gdn::Shape shape;
                gdn::Tensors x;
                if (gdn::read_problem(&pr, &shape) != GDN_SUCCESS || gdn::read_tensors(shape, &tn, &x) != GDN_SUCCESS) {
                    // The last error is the calling thread's.
                    std::fprintf(stderr, "the reference's view of the problem was refused: %s\n", gdn::last_error_cstr());
                    ref_ok = false;
                    continue;
                }
                std::vector<double> o(size_t(len) * D);
                gdn::ref::run(shape, x, o.data(), st);
                for (int t = 0; t < len; ++t)
                    std::copy(o.begin() + int64_t(t) * D, o.begin() + int64_t(t + 1) * D,
                              ro.begin() + ((int64_t(cu[nn]) + t) * Hv + hh) * D);
            }
        };
        const int nth = std::max(1u, std::thread::hardware_concurrency());
        std::vector<std::thread> th;
        for (int i = 0; i < nth; ++i) th.emplace_back(work, i, nth);
        for (auto& x : th) x.join();
        if (!ref_ok) return 1;
        auto err = [](const std::vector<float>& x, const std::vector<double>& r) {
            double md = 0, mr = 0;
            size_t bad = 0;
            for (size_t i = 0; i < x.size(); ++i) {
                if (!std::isfinite(x[i])) ++bad;
                md = std::max(md, std::fabs(double(x[i]) - r[i]));
                mr = std::max(mr, std::fabs(r[i]));
            }
            if (bad) std::printf("  %zu non-finite values\n", bad);
            return bad ? INFINITY : md / mr;
        };
        // FNV-1a of the outputs' and the states' bits: two builds compare by it.
        uint64_t hash = 1469598103934665603ull;
        for (const auto* v : {&out, &sf}) {
            const unsigned char* b = reinterpret_cast<const unsigned char*>(v->data());
            for (size_t i = 0; i < v->size() * 4; ++i) hash = (hash ^ b[i]) * 1099511628211ull;
        }
        std::printf("error vs FP64: out %.3e  state %.3e  rerun %s  bits %016llx\n", err(out, ro), err(sf, rs),
                    same ? "bit-identical" : "DIFFERS", (unsigned long long)hash);
        // Phases (mark(n) ends phase n). State warps 0-3: 3 the `out_full` and `in_loaded`
        // waits, 4 a chunk's work. Prep warps 4-11: 0 the `in_loaded` wait and barrier, 2 γ
        // and the product, 11 A and P, 5 T's diagonal blocks, 6 level 2 and Z's first terms,
        // 12 Z's last, 13 level 3, 14 the `out_empty` wait, 7 the stores, 1 the arrival.
        if (phases) {
        unsigned long long dbg[12][16];
        CK(cudaMemcpyFromSymbol(dbg, f64::g_dbg, sizeof dbg));
        const int nch = (T + 63) / 64;
        for (int w = 0; w < 12; ++w) {
            std::printf("warp %d cycles/chunk (two runs):", w);
            for (int p = 0; p < 16; ++p) std::printf(" %llu", dbg[w][p] / (2ull * nch));
            std::printf("\n");
        }
        }
    }
    if (trace) {
        // --trace n: n launches with the events on, after a warm one, each timed by events; the
        // first one's chunks printed, every one's means (a launch's time can differ from the
        // next one's: perf-notes v115).
        CK(cudaMemcpy(ds, s0.data(), s0.size() * 4, cudaMemcpyHostToDevice));
        launch();
        int khz = 0;
        CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
        const double us = 1e3 / khz;  // a cycle in µs (at the rated clock)
        const int nch = std::min((T + 63) / 64, f64::kTraceChunks);
        const int pairs = 2;
        // The prep's events are the CTA's that prepared the chunk (PAIR: CTA j % 2).
        auto prep_cta = [&](int j) { return pairs == 2 ? j % 2 : 0; };
        for (int tl = 0; tl < trace; ++tl) {
            a.trace = 1;
            const float launch_ms = timed_launch();
            a.trace = 0;
            std::printf("traced launch %d: %.4f ms\n", tl, launch_ms);
            static long long tr[2][f64::kTraceEvents][f64::kTraceChunks];
            CK(cudaMemcpyFromSymbol(tr, f64::g_trace, sizeof tr));
            for (int c = 0; c < pairs; ++c) {
                if (tl == 0) {
                    std::printf("trace CTA %d (µs since its start): chunk  load:pass issued  prep:start end  "
                                "chain:pass released\n", c);
                    for (int j = std::max(0, nch / 2 - 6); j < std::min(nch, nch / 2 + 6); ++j) {
                        const bool own = prep_cta(j) == c;
                        std::printf("  %4d  %8.2f %8.2f  %8s %8s  %8.2f %8.2f\n", j, tr[c][0][j] * us, tr[c][1][j] * us,
                                    own ? std::to_string(tr[c][2][j] * us).substr(0, 8).c_str() : "-",
                                    own ? std::to_string(tr[c][3][j] * us).substr(0, 8).c_str() : "-", tr[c][4][j] * us,
                                    tr[c][5][j] * us);
                    }
                }
                // Means over the middle chunks: where a chunk's time goes on the path
                // chain(j − 3) released → load(j) → prep(j) → chain(j) (--rings: chain(j − 4)).
                const int ring = 4;
                double n = 0, wait_empty = 0, issue = 0, wait_loaded = 0, prep = 0, handoff = 0, gap = 0, work = 0;
                for (int j = std::max(ring, nch / 8); j < nch - nch / 8; ++j) {
                    if (prep_cta(j) != c) continue;
                    n += 1;
                    wait_empty += tr[c][0][j] - tr[c][5][j - ring];
                    issue += tr[c][1][j] - tr[c][0][j];
                    wait_loaded += tr[c][2][j] - tr[c][1][j];
                    prep += tr[c][3][j] - tr[c][2][j];
                    handoff += tr[c][4][j] - tr[c][3][j];
                    gap += tr[c][4][j] - tr[c][5][j - 1];
                    work += tr[c][5][j] - tr[c][4][j];
                }
                if (n > 0)
                    std::printf("  means (µs, %d chunks): released(j-%d)->load pass %.2f, copies issued %.2f, "
                                "issued->prep start %.2f, prep %.2f, prep end->chain pass %.2f; chain: wait %.2f, "
                                "work %.2f\n",
                                int(n), ring, wait_empty / n * us, issue / n * us, wait_loaded / n * us, prep / n * us,
                                handoff / n * us, gap / n * us, work / n * us);
                if constexpr (f64::kTraceEvents > 6) {
                    // GDN_FUSED64_CHAIN_MARKS: the chain's stages over every chunk of the window
                    // (pass → S [k|q] → D → S + O and the release → the chunk's end).
                    double m = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0;
                    for (int j = std::max(ring, nch / 8); j < nch - nch / 8; ++j, m += 1) {
                        s1 += tr[c][6][j] - tr[c][4][j];
                        s2 += tr[c][7][j] - tr[c][6][j];
                        s3 += tr[c][5][j] - tr[c][7][j];
                        s4 += tr[c][8][j] - tr[c][5][j];
                    }
                    if (m > 0)
                        std::printf("  chain stages (µs, %d chunks): S[k|q] %.2f, D %.2f, S+O %.2f, rest %.2f\n", int(m),
                                    s1 / m * us, s2 / m * us, s3 / m * us, s4 / m * us);
                }
            }
        }
    }
    if (phases > 1) {
        // --phases n (n >= 2): n launches with the marks on, one by one, each timed; CTA 0's
        // cycles by phase for the state warp 0 (per chunk) and the prep warps 4 and 8 (per
        // chunk this CTA prepares). Built with GDN_FUSED64_CHAIN_MARKS, the chain's work is
        // split at its three wgmma waits (perf-notes v115); without, those columns stay 0.
        const int nch = (T + 63) / 64, own = (nch + 1) / 2;
        for (int pl = 0; pl < phases; ++pl) {
            static unsigned long long dbg[12][16];
            std::memset(dbg, 0, sizeof dbg);
            CK(cudaMemcpyToSymbol(f64::g_dbg, dbg, sizeof dbg));
            a.phases = 1;
            const float pms = timed_launch();
            a.phases = 0;
            CK(cudaMemcpyFromSymbol(dbg, f64::g_dbg, sizeof dbg));
            auto c = [&](int w, int ph, int per) { return double(dbg[w][ph]) / per; };
            std::printf("phases launch %d: %.4f ms | chain (cycles/chunk): wait %.0f, S[k|q] %.0f, D %.0f, S+O %.0f, "
                        "rest %.0f\n", pl, pms, c(0, 3, nch), c(0, 8, nch), c(0, 9, nch), c(0, 10, nch), c(0, 4, nch));
            for (int w : {4, 8})
                std::printf("  prep warp %d (cycles/own chunk): in %.0f, prod %.0f, A/P %.0f, Tdiag %.0f, L2+Z %.0f, Z %.0f, "
                            "L3 %.0f, out_empty %.0f, stores %.0f, arrive %.0f\n", w, c(w, 0, own), c(w, 2, own),
                            c(w, 11, own), c(w, 5, own), c(w, 6, own), c(w, 12, own), c(w, 13, own), c(w, 14, own),
                            c(w, 7, own), c(w, 1, own));
        }
    }
#ifdef GDN_PROBE_HANG_REPORT
    {
        unsigned hang[6];
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpyFromSymbol(hang, f64::g_hang, sizeof hang));
        std::printf("hang report: %u timeouts; first CTA (%u, %u) thread %u, barrier %u (the region's), parity %u\n", hang[0],
                    hang[1], hang[2], hang[3], hang[4], hang[5]);
        return 0;
    }
#endif
    // Timing.
    CK(cudaMemcpy(ds, s0.data(), s0.size() * 4, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; ++i) launch();
    std::vector<float> ms;
    for (int r = 0; r < 5; ++r) {
        CK(cudaEventRecord(e0));
        for (int i = 0; i < reps; ++i) launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t / reps);
    }
    CK(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    std::printf("time per launch: median %.4f ms (min %.4f, max %.4f)\n", ms[2], ms[0], ms[4]);
    if (const int each = iopt("--each", 0); each > 0) {
        // --each n: n launches timed one by one (events around each), their spread, which the
        // batches' median above hides (perf-notes v115).
        std::vector<float> one;
        for (int i = 0; i < each; ++i) one.push_back(timed_launch());
        std::sort(one.begin(), one.end());
        auto at = [&](double f) { return one[std::min(one.size() - 1, size_t(f * double(one.size())))]; };
        const auto slow = std::count_if(one.begin(), one.end(), [&](float t) { return t > 1.1f * one[0]; });
        std::printf("each of %d launches (ms): min %.4f p10 %.4f p25 %.4f median %.4f p75 %.4f p90 %.4f max %.4f; "
                    "%d over 1.1 x min\n", each, one[0], at(0.1), at(0.25), at(0.5), at(0.75), at(0.9), one.back(),
                    int(slow));
    }
    return 0;
}
