// peer_flashinfer: FlashInfer's Hopper (sm_90a, CUTLASS) gated-delta-rule prefill
// beside gdn, on the same inputs, in one process.
//
// Not part of the CMake build (CI has no FlashInfer): scripts/bench_flashinfer.sh
// builds it from a FlashInfer and a CUTLASS source tree and links libgdn.so. No
// FlashInfer or CUTLASS code is in this file; it includes their headers.
//
// What runs, per shape (H_k = H_q = 16, H_v = 48 and 64, K = V = 128; one
// sequence of T = 512 .. 65536 tokens, and 8 sequences of 4096 through
// cu_seqlens; every sequence from its own non-zero FP32 initial state):
//   FlashInfer   flat::launch_delta_rule_prefill_kernel_gbai<GVA, beta, alpha,
//                initial state, no checkpoints, Sm90, bf16, bf16, float>: the
//                variant its dispatcher flat::launch_delta_rule_prefill_kernel
//                (csrc/prefill_kernel_delta_rule_sm90.cu) picks for these
//                arguments; bf16 q/k/v/out, f32 alpha/beta, FP32 state.
//   gdn BF16     gdn_chunked_recurrence, algorithm CHUNKED, precision BF16
//   gdn BF16X3   the same, precision BF16X3
//                (bf16 q/k/v/out, f32 g/beta, FP32 state, gdn_workspace_size()).
//
// The semantics mapping (FlashInfer at 992848ad3d0e21650f2d6cd2e03becae187cf743):
//   - alpha is the decay itself, e^g, not its log: the kernel takes
//     log2f(alpha + 1e-10) before its in-chunk cumulative sum
//     (hopper/collective/flat_collective_tma_warpspecialized_delta_rule.hpp,
//     AlphaProcessor), and the reference multiplies the state by alpha
//     (tests/gdn/reference_delta_rule.py, delta_rule). So alpha = expf(g) for
//     FlashInfer, g for gdn.
//   - beta, scale: the same as gdn's (d = beta (v - k^T alpha S), o = scale S^T q).
//   - state: [seq][H_v][V][K] ("K-last"): the kernel's state tensor is
//     (KDim, VDim, heads, seqs) column-major (kv_load / kv_store in the same file);
//     gdn_prefill.py: "The final state layout is [N, H, V, K]". It reads
//     input_state and writes output_state (separate buffers).
//   - heads (GVA, H_v > H_q = H_k): value head h reads q/k head h / (H_v / H_q)
//     (hopper/kernel/flat_tile_scheduler.hpp), gdn's GDN_HEADS_GROUPED.
//   - no q/k L2 normalisation in the kernel (gdn_prefill.py's
//     use_qk_l2norm_in_kernel reaches no kernel): k is L2-normalised here before
//     rounding to bf16, q is not, and gdn runs without GDN_FLAG_QK_L2NORM.
//   - workspace: one TMA descriptor (128 bytes) per SM, indexed by the SM id
//     (hopper/collective/flat_collective_store.hpp); the pre-DSL gdn_prefill.py
//     allocated sm_count * 128 bytes.
//
// Errors: max|diff| / max|ref| of the output and of the final state against an
// FP64 token-by-token recurrence on the CPU (threads over (sequence, head)),
// from the same bf16-rounded q/k/v, f32 g and beta and FP32 initial state. Both
// libraries' timed runs write bf16 outputs; gdn is also run once with f32
// outputs (its arithmetic's error without the output rounding). A start-up check
// on a small varlen shape prints FlashInfer's error under the mapping above and
// under the transposed state layout (the wrong one should be O(1)).
//
// Times: CUDA events around 20 back-to-back launches after 3 warm-ups, median of
// 5 repeats, per call ("eager"); and the same 20 launches captured into one CUDA
// graph and replayed ("graph"), which leaves out host launch cost. gdn runs in
// place on its state (each timed call continues from the previous one);
// FlashInfer reads the initial state and writes a separate final state.
//
// usage: peer_flashinfer [--quick] [--shapes 48:32768,64:4096x8] [--err-max-tokens 32768]
//                        [--gdn-state vk|kv] [--gdn-workspace-x 1] [--threads N] [--no-check]
//        peer_flashinfer --selftest-cpu    (the FP64 reference against gdn's CPU backend)

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

// ---------------------------------------------------------------------------
// The FlashInfer kernel: one explicit instantiation, as the JIT's
// gdn_prefill_sm90_kernel_inst.jinja makes for each variant. The build script
// compiles this part alone (-DPEER_FI_PART_KERNEL, slow: CUTLASS) and the
// driver alone (-DPEER_FI_PART_DRIVER, fast); with neither defined, both are in
// one translation unit.
#if !defined(PEER_FI_PART_DRIVER)
#include "flashinfer/flat/prefill/prefill_kernel_delta_rule_sm90.cuh"

namespace flat {
template void launch_delta_rule_prefill_kernel_gbai<
    /*IsGVA=*/true, /*NeedsBeta=*/true, /*NeedsAlpha=*/true, /*InitStateFromInput=*/true,
    /*EnableCheckpointing=*/false, cutlass::arch::Sm90, nv_bfloat16, nv_bfloat16, float>(
    cudaStream_t, nv_bfloat16*, float*, nv_bfloat16 const*, nv_bfloat16 const*,
    nv_bfloat16 const*, float const*, float const*, float const*, int64_t const*, uint8_t*,
    int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int64_t, float, int32_t, float*,
    int64_t const*, int32_t);
}  // namespace flat
#endif

#if !defined(PEER_FI_PART_KERNEL)
#include "gdn/gdn.h"

// The entry point's declaration (its definition is in FlashInfer's
// include/flashinfer/flat/prefill/prefill_kernel_delta_rule_sm90.cuh), so that
// the driver needs no CUTLASS header.
namespace cutlass::arch {
struct Sm90;
}
namespace flat {
template <bool IsGVA, bool NeedsBeta, bool NeedsAlpha, bool InitStateFromInput,
          bool EnableCheckpointing, typename ArchTag, typename TO, typename TQKV, typename TState>
void launch_delta_rule_prefill_kernel_gbai(
    cudaStream_t stream, TO* output, TState* output_state, TQKV const* q, TQKV const* k,
    TQKV const* v, TState const* input_state, float const* alpha, float const* beta,
    int64_t const* cu_seqlens, uint8_t* workspace_buffer, int32_t num_seqs, int32_t num_q_heads,
    int32_t num_k_heads, int32_t num_v_heads, int32_t num_o_heads, int32_t head_size,
    int64_t total_seqlen, float scale, int32_t sm_count, float* state_checkpoints,
    int64_t const* checkpoint_cu_starts, int32_t checkpoint_every_n_tokens);
}  // namespace flat

namespace {

constexpr int HK = 16;  // H_q = H_k
constexpr int DK = 128, DV = 128;

// ------------------------------------------------------------------ errors

#define PEER_CUDA_CHECK(expr)                                                               \
    do {                                                                                    \
        cudaError_t e_ = (expr);                                                            \
        if (e_ != cudaSuccess) {                                                            \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,              \
                         cudaGetErrorString(e_));                                           \
            std::exit(1);                                                                   \
        }                                                                                   \
    } while (0)

#define PEER_GDN_CHECK(expr)                                                                \
    do {                                                                                    \
        gdn_status_t s_ = (expr);                                                           \
        if (s_ != GDN_SUCCESS) {                                                            \
            std::fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #expr,          \
                         gdn_status_string(s_), gdn_last_error());                          \
            std::exit(1);                                                                   \
        }                                                                                   \
    } while (0)

// ------------------------------------------------------------------ host helpers

// bf16 stored as its bits on the host; round to nearest even (inputs are finite).
uint16_t to_bf16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}

// A counter-based generator: element i of stream `s` is the same whatever the
// thread count.
uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
double uniform01(uint64_t seed, uint64_t stream, uint64_t i) {  // in (0, 1)
    uint64_t r = mix64(seed * 0x100000001B3ull ^ mix64(stream * 0x51ull + i * 0x9E37ull + 1));
    return (static_cast<double>(r >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
double normal(uint64_t seed, uint64_t stream, uint64_t i) {  // Box-Muller
    double u1 = uniform01(seed, stream, 2 * i), u2 = uniform01(seed, stream, 2 * i + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

int g_threads = 0;  // worker threads for the host loops (0: hardware concurrency)

// fn(i) for i in [0, n) over worker threads (std::thread: no OpenMP runtime needed).
void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
    int nt = g_threads > 0 ? g_threads : static_cast<int>(std::thread::hardware_concurrency());
    nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(nt, n)));
    std::atomic<int64_t> next{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < nt; ++t)
        pool.emplace_back([&] {
            for (int64_t i; (i = next.fetch_add(1)) < n;) fn(i);
        });
    for (auto& th : pool) th.join();
}

// ------------------------------------------------------------------ inputs

// One problem's host inputs. Logical layouts: q, k [T][HK][DK] (bf16 bits),
// v [T][Hv][DV] (bf16 bits), g, beta [T][Hv] (f32), h0 [N][Hv][DK][DV] (f32).
struct Inputs {
    int hv = 0;
    std::vector<int64_t> cu;  // N + 1 offsets
    std::vector<uint16_t> q, k, v;
    std::vector<float> g, beta, alpha, h0;
    int64_t T() const { return cu.back(); }
    int N() const { return static_cast<int>(cu.size()) - 1; }
};

// As scripts/bench_fla.py: q ~ N(0, 1); k ~ N(0, 1) L2-normalised per row; v ~ N(0, 1);
// g ~ U(-0.3, -0.01) (log decay); beta ~ U(0, 1); h0 ~ 0.5 N(0, 1). alpha = expf(g).
Inputs make_inputs(int hv, const std::vector<int64_t>& lens, uint64_t seed) {
    Inputs in;
    in.hv = hv;
    in.cu.push_back(0);
    for (int64_t L : lens) in.cu.push_back(in.cu.back() + L);
    const int64_t T = in.T();
    in.q.resize(T * HK * DK);
    in.k.resize(T * HK * DK);
    in.v.resize(T * hv * DV);
    in.g.resize(T * hv);
    in.beta.resize(T * hv);
    in.alpha.resize(T * hv);
    in.h0.resize(static_cast<size_t>(in.N()) * hv * DK * DV);
    parallel_for(T, [&](int64_t t) {
        for (int h = 0; h < HK; ++h) {
            const int64_t row = (t * HK + h) * DK;
            double kr[DK], nrm = 0;
            for (int d = 0; d < DK; ++d) {
                in.q[row + d] = to_bf16(static_cast<float>(normal(seed, 1, row + d)));
                kr[d] = normal(seed, 2, row + d);
                nrm += kr[d] * kr[d];
            }
            const double inv = 1.0 / std::sqrt(nrm);
            for (int d = 0; d < DK; ++d) in.k[row + d] = to_bf16(static_cast<float>(kr[d] * inv));
        }
        for (int64_t i = t * hv * DV; i < (t + 1) * hv * DV; ++i)
            in.v[i] = to_bf16(static_cast<float>(normal(seed, 3, i)));
        for (int64_t i = t * hv; i < (t + 1) * hv; ++i) {
            in.g[i] = static_cast<float>(-0.3 + 0.29 * uniform01(seed, 4, i));
            in.beta[i] = static_cast<float>(uniform01(seed, 5, i));
            in.alpha[i] = std::exp(in.g[i]);
        }
    });
    parallel_for(static_cast<int64_t>(in.h0.size() / (DK * DV)), [&](int64_t s) {
        for (int64_t i = s * DK * DV; i < (s + 1) * DK * DV; ++i)
            in.h0[i] = static_cast<float>(0.5 * normal(seed, 6, i));
    });
    return in;
}

// h0 [N][Hv][K][V] -> [N][Hv][V][K] (FlashInfer's layout, gdn's GDN_STATE_VK).
std::vector<float> transpose_states(const std::vector<float>& s) {
    std::vector<float> r(s.size());
    parallel_for(static_cast<int64_t>(s.size() / (DK * DV)), [&](int64_t m) {
        const float* a = s.data() + m * DK * DV;
        float* b = r.data() + m * DK * DV;
        for (int kk = 0; kk < DK; ++kk)
            for (int vv = 0; vv < DV; ++vv) b[vv * DK + kk] = a[kk * DV + vv];
    });
    return r;
}

// ------------------------------------------------------------------ FP64 reference

// A result to check: output [T][Hv][V] (bf16 bits or f32) and final state
// [N][Hv][K][V] (kv) or [N][Hv][V][K].
struct Result {
    const uint16_t* out_bf16 = nullptr;
    const float* out_f32 = nullptr;
    const float* state = nullptr;
    bool state_kv = true;
};
struct Errors {
    double out = NAN, state = NAN;
};

// The recurrence in FP64, token by token, for every (sequence, value head) on
// worker threads; returns max|diff| / max|ref| of each result's output and final
// state. h0 is the logical [N][Hv][K][V] initial state the reference starts from.
std::vector<Errors> reference_errors(const Inputs& in, const std::vector<float>& h0,
                                     const std::vector<Result>& res) {
    const int hv = in.hv, N = in.N(), R = static_cast<int>(res.size());
    const int ratio = hv / HK;
    const double scale = 1.0 / std::sqrt(static_cast<double>(DK));
    // Per task: max|ref out|, max|ref state|, and each result's max|diff| of both.
    std::vector<double> task_max(static_cast<size_t>(N) * hv * (2 + 2 * R), 0.0);
    parallel_for(static_cast<int64_t>(N) * hv, [&](int64_t task) {
        const int n = static_cast<int>(task / hv), h = static_cast<int>(task % hv);
        const int kh = h / ratio;  // grouped heads
        double* mx = task_max.data() + task * (2 + 2 * R);
        std::vector<double> S(DK * DV), kS(DV), o(DV);
        const float* s0 = h0.data() + (static_cast<int64_t>(n) * hv + h) * DK * DV;
        for (int i = 0; i < DK * DV; ++i) S[i] = s0[i];
        double qd[DK], kd[DK];
        for (int64_t t = in.cu[n]; t < in.cu[n + 1]; ++t) {
            const int64_t qk_row = (t * HK + kh) * DK, v_row = (t * hv + h) * DV;
            for (int d = 0; d < DK; ++d) {
                qd[d] = from_bf16(in.q[qk_row + d]) * scale;
                kd[d] = from_bf16(in.k[qk_row + d]);
            }
            const double a = std::exp(static_cast<double>(in.g[t * hv + h]));
            const double b = in.beta[t * hv + h];
            // S <- a S; kS = S^T k
            std::fill(kS.begin(), kS.end(), 0.0);
            for (int kk = 0; kk < DK; ++kk) {
                double* row = S.data() + kk * DV;
                const double kv = kd[kk];
                for (int vv = 0; vv < DV; ++vv) {
                    row[vv] *= a;
                    kS[vv] += kv * row[vv];
                }
            }
            // d = b (v - kS) (in kS); S += k d^T; o = S^T (scale q)
            for (int vv = 0; vv < DV; ++vv) kS[vv] = b * (from_bf16(in.v[v_row + vv]) - kS[vv]);
            std::fill(o.begin(), o.end(), 0.0);
            for (int kk = 0; kk < DK; ++kk) {
                double* row = S.data() + kk * DV;
                const double kv = kd[kk], qv = qd[kk];
                for (int vv = 0; vv < DV; ++vv) {
                    row[vv] += kv * kS[vv];
                    o[vv] += qv * row[vv];
                }
            }
            for (int vv = 0; vv < DV; ++vv) {
                mx[0] = std::max(mx[0], std::fabs(o[vv]));
                for (int r = 0; r < R; ++r) {
                    const double got = res[r].out_bf16 ? from_bf16(res[r].out_bf16[v_row + vv])
                                                       : res[r].out_f32[v_row + vv];
                    // NaN-propagating: a NaN output reads as an infinite error.
                    const double d = std::fabs(got - o[vv]);
                    mx[2 + 2 * r] = (d == d) ? std::max(mx[2 + 2 * r], d) : INFINITY;
                }
            }
        }
        const int64_t base = (static_cast<int64_t>(n) * hv + h) * DK * DV;
        for (int kk = 0; kk < DK; ++kk)
            for (int vv = 0; vv < DV; ++vv) {
                const double want = S[kk * DV + vv];
                mx[1] = std::max(mx[1], std::fabs(want));
                for (int r = 0; r < R; ++r) {
                    const int64_t at = base + (res[r].state_kv ? kk * DV + vv : vv * DK + kk);
                    const double d = std::fabs(static_cast<double>(res[r].state[at]) - want);
                    mx[3 + 2 * r] = (d == d) ? std::max(mx[3 + 2 * r], d) : INFINITY;
                }
            }
    });
    std::vector<double> m(2 + 2 * R, 0.0);
    for (size_t task = 0; task < task_max.size() / m.size(); ++task)
        for (size_t j = 0; j < m.size(); ++j) m[j] = std::max(m[j], task_max[task * m.size() + j]);
    std::vector<Errors> e(R);
    for (int r = 0; r < R; ++r) e[r] = {m[2 + 2 * r] / m[0], m[3 + 2 * r] / m[1]};
    return e;
}

// ------------------------------------------------------------------ device buffers

template <class T>
struct DeviceBuffer {
    T* p = nullptr;
    size_t n = 0;
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t count) : n(count) {
        PEER_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() {
        if (p) cudaFree(p);
    }
};

template <class T>
void upload(DeviceBuffer<T>& d, const std::vector<T>& h) {
    PEER_CUDA_CHECK(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <class T>
std::vector<T> download(const DeviceBuffer<T>& d) {
    std::vector<T> h(d.n);
    PEER_CUDA_CHECK(cudaMemcpy(h.data(), d.p, d.n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// ------------------------------------------------------------------ timing

struct Times {
    double eager = NAN, graph = NAN;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Per-call ms: events around `inner` back-to-back launches after `warmup` calls,
// median of `reps`; then the same launches as one captured CUDA graph.
Times time_calls(const std::function<void()>& launch, cudaStream_t stream, int warmup = 3,
                 int inner = 20, int reps = 5) {
    Times t;
    cudaEvent_t e0, e1;
    PEER_CUDA_CHECK(cudaEventCreate(&e0));
    PEER_CUDA_CHECK(cudaEventCreate(&e1));
    // The median over reps of `body` (inner launches) between two events, per launch.
    auto median_ms = [&](auto&& body) {
        std::vector<double> ms;
        for (int r = 0; r < reps; ++r) {
            PEER_CUDA_CHECK(cudaEventRecord(e0, stream));
            body();
            PEER_CUDA_CHECK(cudaEventRecord(e1, stream));
            PEER_CUDA_CHECK(cudaEventSynchronize(e1));
            float x;
            PEER_CUDA_CHECK(cudaEventElapsedTime(&x, e0, e1));
            ms.push_back(x / inner);
        }
        return median(ms);
    };
    for (int i = 0; i < warmup; ++i) launch();
    PEER_CUDA_CHECK(cudaStreamSynchronize(stream));
    t.eager = median_ms([&] {
        for (int i = 0; i < inner; ++i) launch();
    });

    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    PEER_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < inner; ++i) launch();
    cudaError_t ec = cudaStreamEndCapture(stream, &graph);
    if (ec == cudaSuccess) ec = cudaGraphInstantiate(&exec, graph, 0);
    if (ec != cudaSuccess) {
        std::printf("  (graph capture failed: %s)\n", cudaGetErrorString(ec));
        (void)cudaGetLastError();
    } else {
        PEER_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up
        PEER_CUDA_CHECK(cudaStreamSynchronize(stream));
        t.graph = median_ms([&] { PEER_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
    }
    if (exec) PEER_CUDA_CHECK(cudaGraphExecDestroy(exec));
    if (graph) PEER_CUDA_CHECK(cudaGraphDestroy(graph));
    PEER_CUDA_CHECK(cudaEventDestroy(e0));
    PEER_CUDA_CHECK(cudaEventDestroy(e1));
    return t;
}

// ------------------------------------------------------------------ one problem on the GPU

struct Context {
    gdn_caps_t caps;
    cudaStream_t stream = nullptr;
    int sm_count = 0;
    bool gdn_state_vk = true;
    int gdn_workspace_x = 1;  // gdn's workspace: gdn_workspace_size() times this
};

// gdn's problem for `in`: bf16 q/k/v, f32 g (the log decay) and beta, grouped
// heads, scale 1/sqrt(K), no flags (no q/k L2 norm, no raw gates, no output norm).
gdn_problem_t make_gdn_problem(const Inputs& in, gdn_algorithm_t algorithm,
                               gdn_precision_t precision, gdn_dtype_t out_dtype, bool state_vk) {
    gdn_problem_t p;
    gdn_problem_init(&p);
    p.num_seqs = in.N();
    p.num_tokens = in.T();
    p.max_seqlen = 0;
    for (int n = 0; n < in.N(); ++n) p.max_seqlen = std::max(p.max_seqlen, in.cu[n + 1] - in.cu[n]);
    p.num_k_heads = HK;
    p.num_v_heads = in.hv;
    p.head_dim_k = DK;
    p.head_dim_v = DV;
    p.head_mapping = GDN_HEADS_GROUPED;
    p.input_dtype = GDN_DTYPE_BF16;
    p.gate_dtype = GDN_DTYPE_F32;
    p.output_dtype = out_dtype;
    p.state_layout = state_vk ? GDN_STATE_VK : GDN_STATE_KV;
    p.num_state_slots = in.N();
    p.algorithm = algorithm;
    p.precision = precision;
    p.flags = 0;
    p.scale = 1.0f / std::sqrt(static_cast<float>(DK));
    return p;
}

gdn_tensors_t make_gdn_tensors(const void* q, const void* k, const void* v, const float* g,
                               const float* beta, void* out, float* state,
                               const int32_t* cu_seqlens) {
    gdn_tensors_t t;
    gdn_tensors_init(&t);  // packed strides
    t.q = q;
    t.k = k;
    t.v = v;
    t.g = g;
    t.beta = beta;
    t.out = out;
    t.state = state;
    t.cu_seqlens = cu_seqlens;
    return t;
}

const gdn_precision_t kPrecisions[2] = {GDN_PRECISION_BF16, GDN_PRECISION_BF16X3};

// Device copies of one problem's inputs, with the calls of both libraries on them.
struct Problem {
    const Context& ctx;
    const Inputs& in;
    int64_t T;
    int N, hv;
    float scale = 1.0f / std::sqrt(static_cast<float>(DK));
    DeviceBuffer<uint16_t> q, k, v, out_fi, out_gdn;
    DeviceBuffer<float> g, beta, alpha, h0_vk, h0_gdn, state_fi, state_gdn;
    DeviceBuffer<int64_t> cu64;
    DeviceBuffer<int32_t> cu32;
    DeviceBuffer<uint8_t> ws_fi;  // one TMA descriptor (128 bytes) per SM

    Problem(const Context& c, const Inputs& inputs)
        : ctx(c), in(inputs), T(inputs.T()), N(inputs.N()), hv(inputs.hv),
          q(T * HK * DK), k(T * HK * DK), v(T * hv * DV), out_fi(T * hv * DV),
          out_gdn(T * hv * DV), g(T * hv), beta(T * hv), alpha(T * hv),
          h0_vk(inputs.h0.size()), h0_gdn(inputs.h0.size()), state_fi(inputs.h0.size()),
          state_gdn(inputs.h0.size()), cu64(N + 1), cu32(N + 1),
          ws_fi(static_cast<size_t>(c.sm_count) * 128) {
        upload(q, in.q);
        upload(k, in.k);
        upload(v, in.v);
        upload(g, in.g);
        upload(beta, in.beta);
        upload(alpha, in.alpha);
        std::vector<float> vk = transpose_states(in.h0);
        upload(h0_vk, vk);
        upload(h0_gdn, ctx.gdn_state_vk ? vk : in.h0);
        upload(cu64, in.cu);
        std::vector<int32_t> c32(in.cu.begin(), in.cu.end());
        upload(cu32, c32);
    }

    // FlashInfer: the dispatcher's variant for these arguments (GVA since H_v > H_q;
    // alpha, beta and an input state given; no checkpoints).
    void flashinfer() {
        try {
            flat::launch_delta_rule_prefill_kernel_gbai<true, true, true, true, false,
                                                        cutlass::arch::Sm90, nv_bfloat16,
                                                        nv_bfloat16, float>(
                ctx.stream, reinterpret_cast<nv_bfloat16*>(out_fi.p), state_fi.p,
                reinterpret_cast<const nv_bfloat16*>(q.p),
                reinterpret_cast<const nv_bfloat16*>(k.p),
                reinterpret_cast<const nv_bfloat16*>(v.p), h0_vk.p, alpha.p, beta.p, cu64.p,
                ws_fi.p, N, /*num_q_heads=*/HK, /*num_k_heads=*/HK, /*num_v_heads=*/hv,
                /*num_o_heads=*/hv, /*head_size=*/DK, T, scale, ctx.sm_count,
                /*state_checkpoints=*/nullptr, /*checkpoint_cu_starts=*/nullptr,
                /*checkpoint_every_n_tokens=*/0);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "FlashInfer launch failed: %s\n", e.what());
            std::exit(1);
        }
        PEER_CUDA_CHECK(cudaGetLastError());
    }

    gdn_problem_t gdn_problem(gdn_precision_t precision, gdn_dtype_t out_dtype) const {
        return make_gdn_problem(in, GDN_ALGO_CHUNKED, precision, out_dtype, ctx.gdn_state_vk);
    }

    gdn_tensors_t gdn_tensors(void* out) const {
        // One sequence: cu_seqlens NULL, as bench_fla.py.
        return make_gdn_tensors(q.p, k.p, v.p, g.p, beta.p, out, state_gdn.p,
                                N > 1 ? cu32.p : nullptr);
    }

    std::string gdn_path(gdn_precision_t precision) const {
        gdn_problem_t p = gdn_problem(precision, GDN_DTYPE_BF16);
        gdn_path_info_t info;
        gdn_path_info_init(&info);
        if (gdn_select_path(&ctx.caps, &p, nullptr, &info) != GDN_SUCCESS)
            return std::string("n/a (") + gdn_last_error() + ")";
        static const char* names[] = {"none", "sequential", "chunked-fp32", "chunked-lowp-c16",
                                      "chunked-tc"};
        std::string s = (info.path >= 0 && info.path <= 4) ? names[info.path] : "?";
        s += " C=" + std::to_string(info.chunk_size);
        if (info.precision != precision) s += " (precision " + std::to_string(info.precision) + ")";
        return s;
    }
};

// gdn's call on `out` (dtype out_dtype) at `precision`, with its own workspace.
struct GdnCall {
    Problem& pb;
    gdn_problem_t prob;
    gdn_tensors_t tens;
    DeviceBuffer<uint8_t> ws;
    GdnCall(Problem& p, gdn_precision_t precision, gdn_dtype_t out_dtype, void* out)
        : pb(p), prob(p.gdn_problem(precision, out_dtype)), tens(p.gdn_tensors(out)),
          ws(workspace_bytes(p, prob)) {}
    static size_t workspace_bytes(const Problem& p, const gdn_problem_t& prob) {
        size_t bytes = 0;
        PEER_GDN_CHECK(gdn_workspace_size(&p.ctx.caps, &prob, &bytes));
        return std::max<size_t>(bytes * p.ctx.gdn_workspace_x, GDN_WORKSPACE_ALIGNMENT);
    }
    void operator()() {
        PEER_GDN_CHECK(gdn_chunked_recurrence(&pb.ctx.caps, &prob, &tens, ws.p, ws.n, pb.ctx.stream));
    }
    void reset_state() {
        PEER_CUDA_CHECK(cudaMemcpyAsync(pb.state_gdn.p, pb.h0_gdn.p, pb.h0_gdn.n * sizeof(float),
                                   cudaMemcpyDeviceToDevice, pb.ctx.stream));
    }
};

// ------------------------------------------------------------------ the matrix

struct Shape {
    int hv;
    std::vector<int64_t> lens;
};

std::string shape_name(const Shape& s) {
    return s.lens.size() == 1 ? "T = " + std::to_string(s.lens[0])
                              : std::to_string(s.lens.size()) + " x " + std::to_string(s.lens[0]);
}

struct Row {
    Shape shape;
    Times fi, gdn[2];
    bool has_err = false;
    Errors e_fi, e_gdn[2], e_gdn_f32[2];
    std::string paths[2];
};

std::string fmt_ms(double x) {
    char b[32];
    std::snprintf(b, sizeof b, std::isnan(x) ? "-" : "%.4f", x);
    return b;
}
std::string fmt_err(const Errors& e) {
    char b[48];
    std::snprintf(b, sizeof b, "%.2e / %.2e", e.out, e.state);
    return b;
}

Row run_shape(const Context& ctx, const Shape& s, int64_t err_max_tokens, uint64_t seed) {
    Row row;
    row.shape = s;
    auto t0 = std::chrono::steady_clock::now();
    Inputs in = make_inputs(s.hv, s.lens, seed);
    Problem pb(ctx, in);
    const int64_t T = pb.T;
    row.has_err = T <= err_max_tokens;

    // Error runs: FlashInfer (bf16 out); gdn BF16 / BF16X3 with bf16 and with f32 outputs.
    std::vector<uint16_t> out_fi, out_gdn[2];
    std::vector<float> out_gdn_f32[2], st_fi, st_gdn[2], st_gdn_f32[2];
    if (row.has_err) {
        pb.flashinfer();
        PEER_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
        out_fi = download(pb.out_fi);
        st_fi = download(pb.state_fi);
        DeviceBuffer<float> out32(T * s.hv * DV);
        for (int p = 0; p < 2; ++p) {
            GdnCall c16(pb, kPrecisions[p], GDN_DTYPE_BF16, pb.out_gdn.p);
            c16.reset_state();
            c16();
            PEER_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
            out_gdn[p] = download(pb.out_gdn);
            st_gdn[p] = download(pb.state_gdn);
            GdnCall c32(pb, kPrecisions[p], GDN_DTYPE_F32, out32.p);
            c32.reset_state();
            c32();
            PEER_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
            out_gdn_f32[p] = download(out32);
            st_gdn_f32[p] = download(pb.state_gdn);
        }
    }

    // Timed runs (bf16 outputs).
    row.fi = time_calls([&] { pb.flashinfer(); }, ctx.stream);
    for (int p = 0; p < 2; ++p) {
        GdnCall c(pb, kPrecisions[p], GDN_DTYPE_BF16, pb.out_gdn.p);
        c.reset_state();
        row.gdn[p] = time_calls([&] { c(); }, ctx.stream);
        row.paths[p] = pb.gdn_path(kPrecisions[p]);
    }
    PEER_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    PEER_CUDA_CHECK(cudaGetLastError());
    const double gpu_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    if (row.has_err) {
        const bool kv = !ctx.gdn_state_vk;
        std::vector<Result> res = {
            {out_fi.data(), nullptr, st_fi.data(), false},
            {out_gdn[0].data(), nullptr, st_gdn[0].data(), kv},
            {out_gdn[1].data(), nullptr, st_gdn[1].data(), kv},
            {nullptr, out_gdn_f32[0].data(), st_gdn_f32[0].data(), kv},
            {nullptr, out_gdn_f32[1].data(), st_gdn_f32[1].data(), kv},
        };
        std::vector<Errors> e = reference_errors(in, in.h0, res);
        row.e_fi = e[0];
        row.e_gdn[0] = e[1];
        row.e_gdn[1] = e[2];
        row.e_gdn_f32[0] = e[3];
        row.e_gdn_f32[1] = e[4];
    }
    const double all_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("  [H_v %d, %s: %.1f s (inputs + GPU %.1f s, FP64 reference %.1f s)] FlashInfer %s ms, "
                "gdn BF16 %s ms, gdn BF16X3 %s ms (eager)",
                s.hv, shape_name(s).c_str(), all_s, gpu_s, all_s - gpu_s, fmt_ms(row.fi.eager).c_str(),
                fmt_ms(row.gdn[0].eager).c_str(), fmt_ms(row.gdn[1].eager).c_str());
    if (row.has_err)
        std::printf("; errors out / state: FlashInfer %s, gdn BF16 %s, gdn BF16X3 %s",
                    fmt_err(row.e_fi).c_str(), fmt_err(row.e_gdn[0]).c_str(),
                    fmt_err(row.e_gdn[1]).c_str());
    std::printf("\n");
    std::fflush(stdout);
    return row;
}

// A small varlen problem: FlashInfer and gdn against the FP64 recurrence, and
// FlashInfer under the transposed state layout (which should be far off).
void startup_check(const Context& ctx) {
    const Shape s{48, {64, 130, 61}};
    Inputs in = make_inputs(s.hv, s.lens, 7);
    Problem pb(ctx, in);
    pb.flashinfer();
    GdnCall c(pb, GDN_PRECISION_BF16, GDN_DTYPE_BF16, pb.out_gdn.p);
    c.reset_state();
    c();
    PEER_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    std::vector<uint16_t> out_fi = download(pb.out_fi), out_gdn = download(pb.out_gdn);
    std::vector<float> st_fi = download(pb.state_fi), st_gdn = download(pb.state_gdn);
    const bool kv = !ctx.gdn_state_vk;
    std::vector<Errors> e = reference_errors(
        in, in.h0,
        {{out_fi.data(), nullptr, st_fi.data(), false}, {out_gdn.data(), nullptr, st_gdn.data(), kv}});
    // The alternative: FlashInfer reads its input state as [K][V], i.e. the
    // reference starts from h0 transposed, and the final state is read as [K][V].
    std::vector<Errors> alt = reference_errors(in, transpose_states(in.h0),
                                               {{out_fi.data(), nullptr, st_fi.data(), true}});
    std::printf("start-up check (H_v %d, varlen 64 + 130 + 61, bf16 outputs), max|diff|/max|ref| "
                "out / state:\n  FlashInfer, state [V][K] (the mapping used): %s\n"
                "  FlashInfer, state read as [K][V] (should be O(1)):  %s\n"
                "  gdn BF16:                                            %s\n",
                s.hv, fmt_err(e[0]).c_str(), fmt_err(alt[0]).c_str(), fmt_err(e[1]).c_str());
    if (!(e[0].out < 3e-2 && e[0].state < 3e-2))
        std::printf("  WARNING: FlashInfer's error is not bf16-class: the semantics mapping is wrong\n");
    std::fflush(stdout);
}

// --selftest-cpu (no GPU): gdn's CPU backend, sequential FP32, on the start-up
// shape with both state layouts and f32 outputs, against the FP64 reference
// here: checks the reference and the gdn call set-up (expect ~1e-6).
int selftest_cpu() {
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    PEER_GDN_CHECK(gdn_probe(GDN_BACKEND_CPU, 0, &caps));
    Inputs in = make_inputs(48, {64, 130, 61}, 7);
    std::vector<int32_t> cu(in.cu.begin(), in.cu.end());
    double worst = 0;
    for (bool vk : {false, true}) {
        gdn_problem_t p = make_gdn_problem(in, GDN_ALGO_SEQUENTIAL, GDN_PRECISION_FP32,
                                           GDN_DTYPE_F32, vk);
        std::vector<float> out(in.T() * in.hv * DV), state = vk ? transpose_states(in.h0) : in.h0;
        gdn_tensors_t t = make_gdn_tensors(in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                                           in.beta.data(), out.data(), state.data(), cu.data());
        size_t bytes = 0;
        PEER_GDN_CHECK(gdn_workspace_size(&caps, &p, &bytes));
        std::vector<uint8_t> ws(bytes + GDN_WORKSPACE_ALIGNMENT);
        void* wp = ws.data() + (GDN_WORKSPACE_ALIGNMENT -
                                reinterpret_cast<uintptr_t>(ws.data()) % GDN_WORKSPACE_ALIGNMENT);
        PEER_GDN_CHECK(gdn_chunked_recurrence(&caps, &p, &t, bytes ? wp : nullptr, bytes, nullptr));
        Errors e = reference_errors(in, in.h0, {{nullptr, out.data(), state.data(), !vk}})[0];
        std::printf("gdn CPU sequential FP32 vs the FP64 reference, state %s: out / state %s\n",
                    vk ? "[V][K]" : "[K][V]", fmt_err(e).c_str());
        worst = std::max({worst, e.out, e.state});
    }
    const bool ok = worst < 1e-5;
    std::printf("selftest %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "%s\nusage: peer_flashinfer [--quick] [--shapes HV:T,HV:TxN,...] "
                 "[--err-max-tokens 32768]\n"
                 "                       [--gdn-state vk|kv] [--gdn-workspace-x 1] [--threads N] "
                 "[--no-check]\n"
                 "       peer_flashinfer --selftest-cpu   (the FP64 reference against gdn's CPU "
                 "backend; no GPU)\n"
                 "  default shapes: H_v 48 and 64 x (T = 512, 2048, 8192, 32768, 65536; 8 x 4096)\n"
                 "  --gdn-state: gdn's state layout (vk: the same [V][K] buffer layout as "
                 "FlashInfer; kv: gdn's default)\n"
                 "  --gdn-workspace-x: pass gdn N times gdn_workspace_size() (longer windows on "
                 "long prompts, the same bits)\n",
                 why);
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<Shape> shapes;
    int64_t err_max_tokens = 32768;
    bool quick = false, check = true, selftest = false;
    int workspace_x = 1;
    std::string state_layout = "vk";
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) usage(("missing value after " + a).c_str());
            return argv[++i];
        };
        if (a == "--help" || a == "-h") {
            usage("peer_flashinfer: FlashInfer's sm90 GDN prefill beside gdn (times, errors vs FP64)");
        } else if (a == "--quick") {
            quick = true;
        } else if (a == "--shapes") {
            std::string list = next();
            size_t p = 0;
            while (p < list.size()) {
                size_t e = list.find(',', p);
                if (e == std::string::npos) e = list.size();
                std::string item = list.substr(p, e - p);
                p = e + 1;
                int hv = 0;
                long long t = 0, n = 1;
                if (std::sscanf(item.c_str(), "%d:%lldx%lld", &hv, &t, &n) < 2 || hv <= 0 ||
                    hv % HK || t <= 0 || n <= 0)
                    usage(("bad shape " + item).c_str());
                shapes.push_back({hv, std::vector<int64_t>(static_cast<size_t>(n), t)});
            }
        } else if (a == "--err-max-tokens") {
            err_max_tokens = std::atoll(next().c_str());
        } else if (a == "--gdn-state") {
            state_layout = next();
            if (state_layout != "vk" && state_layout != "kv") usage("--gdn-state takes vk or kv");
        } else if (a == "--gdn-workspace-x") {
            workspace_x = std::atoi(next().c_str());
            if (workspace_x < 1) usage("--gdn-workspace-x takes a positive integer");
        } else if (a == "--threads") {
            g_threads = std::atoi(next().c_str());
        } else if (a == "--no-check") {
            check = false;
        } else if (a == "--selftest-cpu") {
            selftest = true;
        } else {
            usage(("unknown argument " + a).c_str());
        }
    }
    if (selftest) return selftest_cpu();
    if (shapes.empty()) {
        if (quick) {
            shapes = {{48, {2048}}, {64, {8192}}, {64, std::vector<int64_t>(8, 1024)}};
        } else {
            for (int hv : {48, 64}) {
                for (int64_t t : {512, 2048, 8192, 32768, 65536}) shapes.push_back({hv, {t}});
                shapes.push_back({hv, std::vector<int64_t>(8, 4096)});
            }
        }
    }

    Context ctx;
    ctx.gdn_state_vk = state_layout == "vk";
    ctx.gdn_workspace_x = workspace_x;
    int dev = 0;
    PEER_CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    PEER_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    if (prop.major != 9) {
        std::fprintf(stderr, "this FlashInfer kernel is sm_90a only; device %d is %s (sm_%d%d)\n",
                     dev, prop.name, prop.major, prop.minor);
        return 1;
    }
    PEER_CUDA_CHECK(cudaDeviceGetAttribute(&ctx.sm_count, cudaDevAttrMultiProcessorCount, dev));
    PEER_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
    gdn_caps_init(&ctx.caps);
    PEER_GDN_CHECK(gdn_probe(GDN_BACKEND_CUDA, dev, &ctx.caps));
    const uint32_t ver = gdn_version();
    std::printf("# FlashInfer sm90 GDN prefill (CUTLASS, 992848ad) vs gdn %u.%u.%u on %s (%d SMs)\n",
                ver / 10000, ver / 100 % 100, ver % 100, prop.name, ctx.sm_count);
    std::printf("H_q = H_k = %d, K = V = %d, bf16 q/k/v/out, f32 gates, FP32 state; gdn state %s, "
                "workspace %dx gdn_workspace_size(); FlashInfer workspace %d bytes (128 per SM)\n\n",
                HK, DK, ctx.gdn_state_vk ? "[V][K] (GDN_STATE_VK)" : "[K][V]", ctx.gdn_workspace_x,
                ctx.sm_count * 128);

    if (check) startup_check(ctx);

    std::printf("\nshapes (errors up to %lld tokens):\n", static_cast<long long>(err_max_tokens));
    std::vector<Row> rows;
    for (size_t i = 0; i < shapes.size(); ++i)
        rows.push_back(run_shape(ctx, shapes[i], err_max_tokens, 10 + i));

    std::vector<int> hvs;
    for (const Shape& s : shapes)
        if (std::find(hvs.begin(), hvs.end(), s.hv) == hvs.end()) hvs.push_back(s.hv);
    for (int hv : hvs) {
        std::printf("\n### H_v = %d: ms per call (eager: events around 20 back-to-back launches, "
                    "median of 5; graph: the same 20 launches as one CUDA graph)\n\n", hv);
        std::printf("| shape | FlashInfer | gdn BF16 | gdn BF16X3 | FlashInfer / gdn BF16 "
                    "| graph: FlashInfer | graph: gdn BF16 | graph: gdn BF16X3 |\n"
                    "|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for (const Row& r : rows) {
            if (r.shape.hv != hv) continue;
            std::printf("| %s | %s | %s | %s | %.2fx | %s | %s | %s |\n", shape_name(r.shape).c_str(),
                        fmt_ms(r.fi.eager).c_str(), fmt_ms(r.gdn[0].eager).c_str(),
                        fmt_ms(r.gdn[1].eager).c_str(), r.fi.eager / r.gdn[0].eager,
                        fmt_ms(r.fi.graph).c_str(), fmt_ms(r.gdn[0].graph).c_str(),
                        fmt_ms(r.gdn[1].graph).c_str());
        }
        std::printf("\n### H_v = %d: error vs FP64, max|diff|/max|ref|, out / final state "
                    "(bf16 outputs; last two columns: gdn with f32 outputs)\n\n", hv);
        std::printf("| shape | FlashInfer | gdn BF16 | gdn BF16X3 | gdn BF16, f32 out | "
                    "gdn BF16X3, f32 out |\n|---|---|---|---|---|---|\n");
        for (const Row& r : rows) {
            if (r.shape.hv != hv) continue;
            if (!r.has_err) {
                std::printf("| %s | not measured | | | | |\n", shape_name(r.shape).c_str());
                continue;
            }
            std::printf("| %s | %s | %s | %s | %s | %s |\n", shape_name(r.shape).c_str(),
                        fmt_err(r.e_fi).c_str(), fmt_err(r.e_gdn[0]).c_str(),
                        fmt_err(r.e_gdn[1]).c_str(), fmt_err(r.e_gdn_f32[0]).c_str(),
                        fmt_err(r.e_gdn_f32[1]).c_str());
        }
    }
    if (!rows.empty())
        std::printf("\ngdn paths (gdn_select_path, forced chunked, %s): BF16: %s; BF16X3: %s\n",
                    shape_name(rows.back().shape).c_str(), rows.back().paths[0].c_str(),
                    rows.back().paths[1].c_str());
    PEER_CUDA_CHECK(cudaStreamDestroy(ctx.stream));
    return 0;
}
#endif  // !PEER_FI_PART_KERNEL
