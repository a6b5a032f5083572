// gdn_bench_cuda: per-launch device time of the CUDA paths through the public
// API (CUDA events around batches of launches after a warm-up, the median of
// several batches, inputs and states rotated over enough copies to exceed
// twice the L2), and host time per call without graphs.
//
//   gdn_bench_cuda [prompt|decode|tc|windows|host|all|profile-chunked|profile-decode|bits] [--reps N]
//
// bits (not part of all): one forced-chunked call per case (6 precisions x 10
// shapes), printing FNV-1a hashes of out and state: diff two builds' outputs.
//
// Shapes: H_k = 16, H_v = 48, K = V = 128, one sequence (prompt) or N
// sequences of one token (decode); FP32 state in a pool.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/dispatch.hpp"
#include "common/numeric.hpp"
#include "common/validate.hpp"
#include "gdn/gdn.h"

// bench_kernels.cu
cudaError_t bench_scale_in_place(void* x, size_t bytes, int sms, cudaStream_t stream);

namespace {

constexpr int32_t kHk = 16, kHv = 48, kK = 128, kV = 128;
constexpr double kRotateBytes = 128e6;  // > 2x the H200's 60 MB L2
constexpr double kCopyBandwidth = 4.28e12;  // H200 device copy, bytes/s (docs/perf-notes.md)

void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}
#define CK(x) check((x), #x)

void check_gdn(gdn_status_t st, const char* what) {
    if (st != GDN_SUCCESS) {
        std::fprintf(stderr, "%s: %s: %s\n", what, gdn_status_string(st), gdn_last_error());
        std::exit(1);
    }
}

// A device copy of bytes bytes at src (at least one byte allocated).
void* upload(const void* src, size_t bytes) {
    void* d = nullptr;
    CK(cudaMalloc(&d, std::max<size_t>(bytes, 1)));
    CK(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice));
    return d;
}

struct DeviceSet {
    void *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr, *out = nullptr;
    float* state = nullptr;
    int32_t* cu = nullptr;
};

// Random inputs of one set (host), in the input dtype: q ~ N(0,1), k unit
// rows, v ~ N(0,1), g ~ U(-0.3, -0.01), β ~ U(0, 1); gates in f32.
struct HostInputs {
    std::vector<uint16_t> q16, k16, v16;
    std::vector<float> q32, k32, v32, g, beta, state;
};

uint64_t g_rng = 0x1234567;
double uniform() {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return double(g_rng >> 11) * (1.0 / 9007199254740992.0);
}
double normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

constexpr int kMaxWorkspaceFactor = 4;

class Bench {
public:
    Bench(int64_t tokens, int32_t seqs, gdn_dtype_t dtype) : T_(tokens), N_(seqs), dt_(dtype) {
        gdn_caps_init(&caps_);
        check_gdn(gdn_probe(GDN_BACKEND_CUDA, 0, &caps_), "gdn_probe");
        gdn_problem_init(&prob_);
        prob_.num_seqs = N_;
        prob_.num_tokens = T_;
        prob_.max_seqlen = T_ / N_;
        prob_.num_k_heads = kHk;
        prob_.num_v_heads = kHv;
        prob_.head_dim_k = kK;
        prob_.head_dim_v = kV;
        prob_.input_dtype = dt_;
        prob_.output_dtype = dt_;
        prob_.gate_dtype = GDN_DTYPE_F32;
        const size_t es = dt_ == GDN_DTYPE_F32 ? 4 : 2;
        qk_bytes_ = size_t(T_) * kHk * kK * es;
        v_bytes_ = size_t(T_) * kHv * kV * es;
        gate_bytes_ = size_t(T_) * kHv * 4;
        state_bytes_ = size_t(N_) * kHv * kK * kV * 4;
        const double set_bytes = double(2 * qk_bytes_ + 2 * v_bytes_ + 2 * gate_bytes_ + state_bytes_);
        const int sets = int(std::min<double>(64.0, std::max(1.0, std::ceil(kRotateBytes / set_bytes))));

        HostInputs h;
        const size_t nqk = size_t(T_) * kHk * kK, nv = size_t(T_) * kHv * kV;
        // A pool of normals repeated with a prime period: random enough for
        // timing, and fast to make for 200M elements.
        static std::vector<float> pool;
        if (pool.empty()) {
            pool.resize(1048573);
            for (auto& x : pool) x = float(normal());
        }
        std::vector<float> q(nqk), k(nqk), v(nv);
        for (size_t i = 0; i < nqk; ++i) q[i] = pool[i % pool.size()];
        for (size_t i = 0; i < nv; ++i) v[i] = pool[(i + 4099) % pool.size()];
        for (size_t row = 0; row < nqk / kK; ++row) {
            double n2 = 0;
            for (int i = 0; i < kK; ++i) {
                const float x = pool[(row * kK + i + 77777) % pool.size()];
                k[row * kK + i] = x;
                n2 += double(x) * x;
            }
            for (int i = 0; i < kK; ++i) k[row * kK + i] = float(k[row * kK + i] / std::sqrt(n2));
        }
        h.g.resize(size_t(T_) * kHv);
        h.beta.resize(h.g.size());
        for (auto& x : h.g) x = float(-0.3 + 0.29 * uniform());
        for (auto& x : h.beta) x = float(uniform());
        h.state.resize(state_bytes_ / 4);
        for (auto& x : h.state) x = float(0.5 * normal());
        std::vector<int32_t> cu(size_t(N_) + 1);
        for (int32_t i = 0; i <= N_; ++i) cu[size_t(i)] = int32_t(T_ / N_ * i);
        auto as_dtype = [&](const std::vector<float>& x) {
            std::vector<unsigned char> b(x.size() * es);
            for (size_t i = 0; i < x.size(); ++i) gdn::store_element(b.data(), dt_, int64_t(i), x[i]);
            return b;
        };
        const auto qb = as_dtype(q), kb = as_dtype(k), vb = as_dtype(v);
        sets_.resize(size_t(sets));
        for (DeviceSet& s : sets_) {
            s.q = upload(qb.data(), qk_bytes_);
            s.k = upload(kb.data(), qk_bytes_);
            s.v = upload(vb.data(), v_bytes_);
            s.g = upload(h.g.data(), gate_bytes_);
            s.beta = upload(h.beta.data(), gate_bytes_);
            s.state = static_cast<float*>(upload(h.state.data(), state_bytes_));
            s.cu = static_cast<int32_t*>(upload(cu.data(), cu.size() * 4));
            CK(cudaMalloc(&s.out, v_bytes_));
            CK(cudaMemset(s.out, 0, v_bytes_));
        }
        size_t ws = 0;
        for (gdn_algorithm_t a : {GDN_ALGO_SEQUENTIAL, GDN_ALGO_CHUNKED, GDN_ALGO_AUTO})
            for (gdn_precision_t pr : {GDN_PRECISION_FP32, GDN_PRECISION_TF32X3, GDN_PRECISION_BF16,
                                       GDN_PRECISION_FP16, GDN_PRECISION_BF16X3, GDN_PRECISION_FP16X3}) {
                gdn_problem_t p = prob_;
                p.algorithm = a;
                p.precision = pr;
                size_t need = 0;
                if (gdn_workspace_size(&caps_, &p, &need) == GDN_SUCCESS) ws = std::max(ws, need);
            }
        // Room for kMaxWorkspaceFactor times the largest: a call passes its
        // own path's bytes times the factor (set_workspace_factor), since the
        // chunked path takes longer windows where the workspace holds them.
        ws_bytes_ = ws * kMaxWorkspaceFactor;
        if (ws) CK(cudaMalloc(&ws_, ws_bytes_));
        CK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        CK(cudaEventCreate(&e0_));
        CK(cudaEventCreate(&e1_));
    }
    ~Bench() {
        for (DeviceSet& s : sets_) {
            cudaFree(s.q), cudaFree(s.k), cudaFree(s.v), cudaFree(s.out), cudaFree(s.g);
            cudaFree(s.beta), cudaFree(s.state), cudaFree(s.cu);
        }
        if (ws_) cudaFree(ws_);
        cudaStreamDestroy(stream_);
        cudaEventDestroy(e0_);
        cudaEventDestroy(e1_);
    }

    gdn_status_t call(gdn_algorithm_t algo, size_t set) {
        const DeviceSet& s = sets_[set % sets_.size()];
        gdn_problem_t p = prob_;
        p.algorithm = algo;
        gdn_tensors_t t;
        gdn_tensors_init(&t);
        t.q = s.q, t.k = s.k, t.v = s.v, t.g = s.g, t.beta = s.beta, t.out = s.out;
        t.state = s.state;
        t.cu_seqlens = N_ > 1 ? s.cu : nullptr;
        return gdn_chunked_recurrence(&caps_, &p, &t, ws_, workspace_bytes(p), stream_);
    }

    // gdn_workspace_size() of the call's algorithm and precision, times the
    // factor (cached: the host timing calls this path too).
    size_t workspace_bytes(const gdn_problem_t& p) {
        const int key = int(p.algorithm) * 16 + int(p.precision);
        auto it = need_.find(key);
        if (it == need_.end()) {
            size_t need = 0;
            check_gdn(gdn_workspace_size(&caps_, &p, &need), "gdn_workspace_size");
            it = need_.emplace(key, need).first;
        }
        return it->second * size_t(ws_factor_);
    }
    // Workspace passed to a call: gdn_workspace_size() times `f` (1 to
    // kMaxWorkspaceFactor), which on the chunked path allows longer windows.
    void set_workspace_factor(int f) { ws_factor_ = std::max(1, std::min(kMaxWorkspaceFactor, f)); }

    // Median device time per launch (ms).
    double device_ms(gdn_algorithm_t algo, int reps) {
        size_t set = 0;
        for (int i = 0; i < 2; ++i) check_gdn(call(algo, set++), "warm-up");
        CK(cudaEventRecord(e0_, stream_));
        for (int i = 0; i < 2; ++i) check_gdn(call(algo, set++), "probe run");
        CK(cudaEventRecord(e1_, stream_));
        CK(cudaEventSynchronize(e1_));
        float probe_ms = 0;
        CK(cudaEventElapsedTime(&probe_ms, e0_, e1_));
        const int batch = std::max(2, std::min(2000, int(2.0 / std::max(1e-4, double(probe_ms) / 2))));
        std::vector<double> per_launch;
        for (int r = 0; r < reps; ++r) {
            CK(cudaEventRecord(e0_, stream_));
            for (int i = 0; i < batch; ++i) check_gdn(call(algo, set++), "timed run");
            CK(cudaEventRecord(e1_, stream_));
            CK(cudaEventSynchronize(e1_));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, e0_, e1_));
            per_launch.push_back(double(ms) / batch);
        }
        std::sort(per_launch.begin(), per_launch.end());
        return per_launch[per_launch.size() / 2];
    }

    // Host time per call (µs), no graph: `calls` calls back to back, then sync.
    double host_us(gdn_algorithm_t algo, int calls) {
        for (int i = 0; i < 3; ++i) check_gdn(call(algo, size_t(i)), "warm-up");
        CK(cudaStreamSynchronize(stream_));
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) check_gdn(call(algo, size_t(i)), "host timing");
        const auto t1 = std::chrono::steady_clock::now();
        CK(cudaStreamSynchronize(stream_));
        return std::chrono::duration<double, std::micro>(t1 - t0).count() / calls;
    }

    std::string path(gdn_algorithm_t algo) {
        gdn_problem_t p = prob_;
        p.algorithm = algo;
        gdn_path_info_t info;
        gdn_path_info_init(&info);
        if (gdn_select_path(&caps_, &p, nullptr, &info) != GDN_SUCCESS) return gdn_last_error();
        return info.reason;
    }
    size_t state_bytes() const { return state_bytes_; }
    // The precision the calls allow (the workspace fits every precision).
    void set_precision(gdn_precision_t p) { prob_.precision = p; }
    // The state pool's layout (the pool's bytes do not depend on it).
    void set_layout(gdn_state_layout_t l) { prob_.state_layout = l; }
    size_t sets() const { return sets_.size(); }
    const gdn_caps_t& caps() const { return caps_; }

private:
    int64_t T_;
    int32_t N_;
    gdn_dtype_t dt_;
    gdn_caps_t caps_;
    gdn_problem_t prob_;
    size_t qk_bytes_ = 0, v_bytes_ = 0, gate_bytes_ = 0, state_bytes_ = 0, ws_bytes_ = 0;
    std::map<int, size_t> need_;
    int ws_factor_ = 1;
    std::vector<DeviceSet> sets_;
    void* ws_ = nullptr;
    cudaStream_t stream_ = nullptr;
    cudaEvent_t e0_ = nullptr, e1_ = nullptr;
};

void prompt(int reps) {
    std::printf("\n## prompt: per-launch device time (median of %d batches), Hk 16, Hv 48, K = V = 128, "
                "one sequence, f32 gates and state\n\n",
                reps);
    std::printf("| T | inputs | sequential | chunked | seq / chunked | auto takes |\n|---|---|---:|---:|---:|---|\n");
    for (gdn_dtype_t dt : {GDN_DTYPE_BF16, GDN_DTYPE_F32}) {
        for (int64_t T : {32, 96, 128, 160, 192, 256, 512, 2048, 8192, 32768}) {
            Bench b(T, 1, dt);
            const double seq = b.device_ms(GDN_ALGO_SEQUENTIAL, T >= 8192 ? 3 : reps);
            const double chk = b.device_ms(GDN_ALGO_CHUNKED, reps);
            std::string why = b.path(GDN_ALGO_AUTO);
            std::printf("| %lld | %s | %.4f ms | %.4f ms | %.2fx | %s |\n", (long long)T,
                        gdn::dtype_name(dt), seq, chk, seq / chk,
                        why.find("chunked") != std::string::npos && why.find("sequential") == std::string::npos
                            ? "chunked" : "sequential");
            std::fflush(stdout);
        }
    }
}

void decode(int reps) {
    for (gdn_state_layout_t layout : {GDN_STATE_KV, GDN_STATE_VK}) {
        std::printf("\n## decode: one token for each of N sequences, bf16 q/k/v/out, f32 gates, FP32 state "
                    "pool, %s (median of %d batches)\n\n",
                    layout == GDN_STATE_KV ? "[K][V] state" : "[V][K] state", reps);
        std::printf("| N | time | state bytes (read + write) | bandwidth | of %.2f TB/s |\n|---:|---:|---:|---:|---:|\n",
                    kCopyBandwidth / 1e12);
        for (int32_t N : {1, 8, 64, 256, 1024}) {
            Bench b(N, N, GDN_DTYPE_BF16);
            b.set_layout(layout);
            const double ms = b.device_ms(GDN_ALGO_AUTO, reps);
            const double bytes = 2.0 * double(b.state_bytes());
            std::printf("| %d | %.2f us | %.1f MB | %.2f TB/s | %.0f%% |\n", N, ms * 1e3, bytes / 1e6,
                        bytes / (ms * 1e-3) / 1e12, 100.0 * bytes / (ms * 1e-3) / kCopyBandwidth);
            std::fflush(stdout);
        }
    }
}

// The memory system's own rate for the decode's traffic: the same bytes as
// N states, rewritten in place by a plain kernel (x = 1·x, float4, four loads
// in flight per thread) and copied by cudaMemcpyAsync (read + write counted).
void memory_floor(int reps, const gdn_caps_t& caps) {
    std::printf("\n## the decode's memory floor: N states' bytes, read and written (median of %d "
                "batches of 20)\n\n| N | state bytes (read + write) | in place, plain kernel | copy "
                "(cudaMemcpyAsync) |\n|---:|---:|---:|---:|\n",
                reps);
    for (int32_t N : {64, 256, 1024}) {
        const size_t bytes = size_t(N) * kHv * kK * kV * sizeof(float);
        void *a = nullptr, *b = nullptr;
        CK(cudaMalloc(&a, bytes));
        CK(cudaMalloc(&b, bytes));
        CK(cudaMemset(a, 0, bytes));
        cudaStream_t st;
        cudaEvent_t e0, e1;
        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        auto median_us = [&](auto&& launch) {
            for (int i = 0; i < 3; ++i) launch();
            std::vector<double> v;
            for (int r = 0; r < reps; ++r) {
                CK(cudaEventRecord(e0, st));
                for (int i = 0; i < 20; ++i) launch();
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                float ms = 0;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                v.push_back(ms * 1e3 / 20);
            }
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
        };
        const double rmw = median_us([&] { CK(bench_scale_in_place(a, bytes, caps.multiprocessor_count, st)); });
        const double cp = median_us([&] { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st)); });
        const double moved = 2.0 * double(bytes);
        std::printf("| %d | %.1f MB | %.2f us (%.2f TB/s) | %.2f us (%.2f TB/s) |\n", N, moved / 1e6, rmw,
                    moved / (rmw * 1e-6) / 1e12, cp, moved / (cp * 1e-6) / 1e12);
        std::fflush(stdout);
        CK(cudaEventDestroy(e0));
        CK(cudaEventDestroy(e1));
        CK(cudaStreamDestroy(st));
        CK(cudaFree(a));
        CK(cudaFree(b));
    }
}

// The chunked path in each precision (FP32 scan, tensor-core scan with
// TF32X3 / BF16 / FP16 / BF16X3 / FP16X3 operands; BF16X3 and FP16X3 run the
// TF32X3 scan where their own does not fit the device), on bf16, f16 (FP16X3's
// exact input type, as bf16 is BF16X3's) and f32 inputs.
void tensor_cores(int reps) {
    std::printf("\n## chunked path by precision: per-launch device time (median of %d batches), Hk 16, "
                "Hv 48, K = V = 128, one sequence\n\n",
                reps);
    std::printf("| T | inputs | FP32 | TF32X3 | BF16 | FP16 | BF16X3 | FP16X3 |\n"
                "|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (gdn_dtype_t dt : {GDN_DTYPE_BF16, GDN_DTYPE_F16, GDN_DTYPE_F32}) {
        for (int64_t T : {512, 2048, 8192, 32768}) {
            Bench b(T, 1, dt);
            std::printf("| %lld | %s |", (long long)T, gdn::dtype_name(dt));
            for (gdn_precision_t p : {GDN_PRECISION_FP32, GDN_PRECISION_TF32X3, GDN_PRECISION_BF16,
                                      GDN_PRECISION_FP16, GDN_PRECISION_BF16X3, GDN_PRECISION_FP16X3}) {
                b.set_precision(p);
                std::printf(" %.4f ms |", b.device_ms(GDN_ALGO_CHUNKED, reps));
                std::fflush(stdout);
            }
            std::printf("\n");
        }
    }
}

// The chunked path's windows: the same calls with gdn_workspace_size()'s
// bytes (2048-token windows) and with two and four times as many, which
// allow 4096- and 8192-token windows where the prompt makes at least
// kCudaMinWindows of them (dispatch.hpp; the window each cell ran is printed
// beside it, by the same rule), bf16 inputs.
void windows(int reps) {
    namespace pol = gdn::policy;
    std::printf("\n## chunked path by workspace: per-launch device time (median of %d batches), Hk 16, "
                "Hv 48, K = V = 128, one sequence, bf16 inputs; (window tokens)\n\n",
                reps);
    std::printf("| T | precision | x1 | x2 | x4 |\n|---|---|---:|---:|---:|\n");
    for (int64_t T : {8192, 32768, 65536}) {
        Bench b(T, 1, GDN_DTYPE_BF16);
        for (gdn_precision_t p : {GDN_PRECISION_FP32, GDN_PRECISION_BF16, GDN_PRECISION_FP16,
                                  GDN_PRECISION_BF16X3, GDN_PRECISION_FP16X3}) {
            b.set_precision(p);
            std::printf("| %lld | %s |", (long long)T, gdn::precision_name(p));
            for (int f : {1, 2, 4}) {
                int64_t w = pol::kCudaWindowTokens;
                while (2 * w <= pol::kCudaMaxWindowTokens && pol::kCudaMinWindows * 2 * w <= T &&
                       2 * w <= pol::kCudaWindowTokens * f)
                    w *= 2;
                b.set_workspace_factor(f);
                std::printf(" %.4f ms (%lld) |", b.device_ms(GDN_ALGO_CHUNKED, reps), (long long)w);
                std::fflush(stdout);
            }
            std::printf("\n");
        }
    }
}

void host() {
    std::printf("\n## host time per call (no graph, calls back to back)\n\n| call | host time |\n|---|---:|\n");
    {
        Bench b(1, 1, GDN_DTYPE_BF16);
        std::printf("| decode N = 1 | %.2f us |\n", b.host_us(GDN_ALGO_AUTO, 2000));
    }
    {
        Bench b(64, 64, GDN_DTYPE_BF16);
        std::printf("| decode N = 64 | %.2f us |\n", b.host_us(GDN_ALGO_AUTO, 500));
    }
    {
        Bench b(2048, 1, GDN_DTYPE_BF16);
        std::printf("| prompt T = 2048, chunked (1 window: 2 launches) | %.2f us |\n",
                    b.host_us(GDN_ALGO_CHUNKED, 200));
    }
    {
        Bench b(32768, 1, GDN_DTYPE_BF16);
        std::printf("| prompt T = 32768, chunked (16 windows: 32 launches) | %.2f us |\n",
                    b.host_us(GDN_ALGO_CHUNKED, 20));
    }
    std::fflush(stdout);
}

// ------------------------------------------------------------------- bits
// `bits`: one forced-chunked call per case on deterministic inputs, workspace
// and outputs pre-filled with 0xFF; prints FNV-1a 64 hashes of out and of the
// whole state pool, so that two builds can be compared with diff.

uint64_t fnv1a(const std::vector<unsigned char>& b) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : b) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

// A shape; each one runs under every precision (same inputs: the seed is the
// shape's index).
struct BitsCase {
    int32_t dim;          // K = V
    gdn_dtype_t in, out;  // q/k/v/z and out; gates f32
    int32_t hk, hv;
    bool varlen;          // lengths {1, 33, 700, 2065, 95}, slots with padding; else one of 4099
    uint32_t flags;
};

const BitsCase kBitsCases[] = {
    {128, GDN_DTYPE_BF16, GDN_DTYPE_BF16, 2, 16, false, 0},
    {128, GDN_DTYPE_BF16, GDN_DTYPE_BF16, 4, 8, true, GDN_FLAG_QK_L2NORM},
    {128, GDN_DTYPE_F32, GDN_DTYPE_F32, 4, 12, false, GDN_FLAG_QK_L2NORM | GDN_FLAG_OUTPUT_NORM},
    {128, GDN_DTYPE_F32, GDN_DTYPE_BF16, 2, 16, true, 0},
    {64, GDN_DTYPE_BF16, GDN_DTYPE_BF16, 4, 12, true, GDN_FLAG_OUTPUT_NORM},
    {64, GDN_DTYPE_F32, GDN_DTYPE_F32, 2, 16, false, GDN_FLAG_QK_L2NORM},
    {64, GDN_DTYPE_BF16, GDN_DTYPE_BF16, 2, 16, false, GDN_FLAG_QK_L2NORM | GDN_FLAG_OUTPUT_NORM},
    {64, GDN_DTYPE_F32, GDN_DTYPE_F32, 4, 8, true, 0},
    // f16 inputs (FP16X3's exact type; appended, so the cases above keep their seeds)
    {128, GDN_DTYPE_F16, GDN_DTYPE_F16, 2, 16, false, 0},
    {64, GDN_DTYPE_F16, GDN_DTYPE_F32, 4, 8, true, GDN_FLAG_QK_L2NORM | GDN_FLAG_OUTPUT_NORM},
};

// Status of a call: true on success, false on GDN_ERROR_NOT_SUPPORTED (the
// case is skipped), exit otherwise.
bool supported(gdn_status_t st, const std::string& name, const char* what) {
    if (st == GDN_SUCCESS) return true;
    if (st == GDN_ERROR_NOT_SUPPORTED) {
        std::printf("bits %s skipped: %s\n", name.c_str(), gdn_last_error());
        return false;
    }
    check_gdn(st, (name + ": " + what).c_str());
    return false;
}

void run_bits_case(const gdn_caps_t& caps, const BitsCase& c, size_t seed, gdn_precision_t prec) {
    const std::vector<int32_t> lens = c.varlen ? std::vector<int32_t>{1, 33, 700, 2065, 95}
                                               : std::vector<int32_t>{4099};
    // Varlen: sequence 1 is padding, slots 1 and 3 are named by no one,
    // sequences 0 and 3 start from zero.
    const std::vector<int32_t> slots = {4, -1, 0, 2, 5};
    const std::vector<uint8_t> zero = {1, 0, 0, 1, 0};
    const int32_t n_slots = c.varlen ? 6 : 1;
    std::vector<int32_t> cu(1, 0);
    for (int32_t l : lens) cu.push_back(cu.back() + l);
    const int64_t T = cu.back();
    const int32_t D = c.dim;
    char name[160];
    std::snprintf(name, sizeof name, "%s/K%d/%s-%s/hk%d-hv%d/%s%s%s", gdn::precision_name(prec), D,
                  gdn::dtype_name(c.in), gdn::dtype_name(c.out), c.hk, c.hv, c.varlen ? "varlen" : "T4099",
                  c.flags & GDN_FLAG_QK_L2NORM ? "/l2norm" : "", c.flags & GDN_FLAG_OUTPUT_NORM ? "/onorm" : "");

    gdn_problem_t p;
    gdn_problem_init(&p);
    p.num_seqs = int32_t(lens.size());
    p.num_tokens = T;
    p.max_seqlen = *std::max_element(lens.begin(), lens.end());
    p.num_k_heads = c.hk, p.num_v_heads = c.hv;
    p.head_dim_k = p.head_dim_v = D;
    p.input_dtype = c.in, p.gate_dtype = GDN_DTYPE_F32, p.output_dtype = c.out;
    p.num_state_slots = n_slots;
    p.algorithm = GDN_ALGO_CHUNKED;
    p.precision = prec;
    p.flags = c.flags;

    // Inputs: q, v, z ~ N(0,1), k ~ N(0,1) (3x with the L2 norm, else unit rows).
    g_rng = 0x9E3779B97F4A7C15ull * (seed + 1);
    const size_t es = c.in == GDN_DTYPE_F32 ? 4 : 2, eo = c.out == GDN_DTYPE_F32 ? 4 : 2;
    const size_t nqk = size_t(T) * c.hk * D, nv = size_t(T) * c.hv * D, ng = size_t(T) * c.hv;
    std::vector<unsigned char> q(nqk * es), k(nqk * es), v(nv * es), z(nv * es);
    for (size_t i = 0; i < nqk; ++i) gdn::store_element(q.data(), c.in, int64_t(i), float(normal()));
    const bool l2 = (c.flags & GDN_FLAG_QK_L2NORM) != 0;
    std::vector<double> row(static_cast<size_t>(D));
    for (size_t r = 0; r < nqk / size_t(D); ++r) {
        double n2 = 0;
        for (double& x : row) x = normal() * (l2 ? 3.0 : 1.0), n2 += x * x;
        const double f = l2 ? 1.0 : 1.0 / std::sqrt(n2);
        for (int32_t i = 0; i < D; ++i)
            gdn::store_element(k.data(), c.in, int64_t(r) * D + i, float(row[size_t(i)] * f));
    }
    for (size_t i = 0; i < nv; ++i) gdn::store_element(v.data(), c.in, int64_t(i), float(normal()));
    for (size_t i = 0; i < nv; ++i) gdn::store_element(z.data(), c.in, int64_t(i), float(normal()));
    std::vector<float> g(ng), beta(ng), w(static_cast<size_t>(D)), state(size_t(n_slots) * c.hv * D * D);
    for (float& x : g) x = float(-0.3 + 0.29 * uniform());
    for (float& x : beta) x = float(uniform());
    for (float& x : w) x = float(0.5 + uniform());
    for (float& x : state) x = float(0.5 * normal());

    gdn_path_info_t info;
    gdn_path_info_init(&info);
    if (!supported(gdn_select_path(&caps, &p, nullptr, &info), name, "gdn_select_path")) return;
    size_t ws_bytes = 0;
    if (!supported(gdn_workspace_size(&caps, &p, &ws_bytes), name, "gdn_workspace_size")) return;

    std::vector<void*> bufs;
    auto up = [&](const void* src, size_t bytes) { bufs.push_back(upload(src, bytes)); return bufs.back(); };
    gdn_tensors_t t;
    gdn_tensors_init(&t);
    t.q = up(q.data(), q.size()), t.k = up(k.data(), k.size()), t.v = up(v.data(), v.size());
    t.g = up(g.data(), g.size() * 4), t.beta = up(beta.data(), beta.size() * 4);
    t.state = static_cast<float*>(up(state.data(), state.size() * 4));
    if (c.flags & GDN_FLAG_OUTPUT_NORM) {
        t.z = up(z.data(), z.size());
        t.norm_weight = static_cast<const float*>(up(w.data(), w.size() * 4));
    }
    if (c.varlen) {
        t.cu_seqlens = static_cast<const int32_t*>(up(cu.data(), cu.size() * 4));
        t.state_indices = static_cast<const int32_t*>(up(slots.data(), slots.size() * 4));
        t.start_from_zero = static_cast<const uint8_t*>(up(zero.data(), zero.size()));
    }
    std::vector<unsigned char> out(nv * eo), pool(state.size() * 4);
    void* d_out = nullptr;
    void* ws = nullptr;
    CK(cudaMalloc(&d_out, out.size()));
    CK(cudaMemset(d_out, 0xFF, out.size()));
    bufs.push_back(t.out = d_out);
    if (ws_bytes) {
        CK(cudaMalloc(&ws, ws_bytes));
        CK(cudaMemset(ws, 0xFF, ws_bytes));
        bufs.push_back(ws);
    }
    const bool ran = supported(gdn_chunked_recurrence(&caps, &p, &t, ws, ws_bytes, nullptr), name,
                               "gdn_chunked_recurrence");
    CK(cudaDeviceSynchronize());
    if (ran) {
        CK(cudaMemcpy(out.data(), d_out, out.size(), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(pool.data(), t.state, pool.size(), cudaMemcpyDeviceToHost));
        std::printf("bits %s out=%016llx state=%016llx\n", name, (unsigned long long)fnv1a(out),
                    (unsigned long long)fnv1a(pool));
    }
    std::fflush(stdout);
    for (void* b : bufs) CK(cudaFree(b));
}

void bits() {
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    check_gdn(gdn_probe(GDN_BACKEND_CUDA, 0, &caps), "gdn_probe");
    std::printf("\n## bits: forced chunked, one call per case; FNV-1a 64 of out and of the state pool\n\n");
    for (gdn_precision_t prec : {GDN_PRECISION_FP32, GDN_PRECISION_BF16, GDN_PRECISION_FP16,
                                 GDN_PRECISION_BF16X3, GDN_PRECISION_TF32X3, GDN_PRECISION_FP16X3})
        for (size_t i = 0; i < sizeof kBitsCases / sizeof kBitsCases[0]; ++i)
            run_bits_case(caps, kBitsCases[i], i, prec);
}

}  // namespace

int main(int argc, char** argv) {
    int device_count = 0;
    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
        std::printf("skipped: no device\n");
        return 77;
    }
    std::string what = "all";
    int reps = 7;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--reps" && i + 1 < argc)
            reps = std::atoi(argv[++i]);
        else
            what = a;
    }
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    check_gdn(gdn_probe(GDN_BACKEND_CUDA, 0, &caps), "gdn_probe");
    std::printf("# gdn_bench_cuda: %s (%s, %d SMs), gdn %u\n", caps.name, caps.arch,
                caps.multiprocessor_count, gdn_version());
    if (what == "prompt" || what == "all") prompt(reps);
    if (what == "decode" || what == "all") {
        decode(reps);
        memory_floor(reps, caps);
    }
    if (what == "host" || what == "all") host();
    if (what == "tc" || what == "all") tensor_cores(reps);
    if (what == "windows" || what == "all") windows(reps);
    if (what == "bits") bits();
    // A few calls of one shape, for a profiler: "profile-chunked" (T = 2048,
    // bf16) or "profile-decode" (N = 64, bf16).
    if (what == "profile-chunked" || what == "profile-decode") {
        const bool chunked = what == "profile-chunked";
        Bench b(chunked ? 2048 : 64, chunked ? 1 : 64, GDN_DTYPE_BF16);
        // GDN_BENCH_PRECISION=1|2|3|4|5 (gdn_precision_t): the tensor-core scan.
        if (const char* pr = std::getenv("GDN_BENCH_PRECISION"))
            b.set_precision(gdn_precision_t(std::atoi(pr)));
        for (size_t i = 0; i < 4; ++i)
            check_gdn(b.call(chunked ? GDN_ALGO_CHUNKED : GDN_ALGO_AUTO, i), "profile run");
        CK(cudaDeviceSynchronize());
    }
    return 0;
}
