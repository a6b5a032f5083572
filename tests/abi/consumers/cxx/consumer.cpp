// A C++ consumer of the installed gdn (find_package(gdn CONFIG), gdn::gdn):
// bf16 q/k/v straight from a model, f32 gates and output, llama.cpp's
// interleaved head mapping, the chunked path forced, on the CPU backend,
// checked against a double-precision recurrence of the same bf16 values.
#include <gdn/gdn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace {

constexpr int T = 100, Hk = 2, Hv = 4, K = 64, V = 64;

uint16_t to_bf16(float x) {  // round to nearest even
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}

float from_bf16(uint16_t b) {
    const uint32_t u = uint32_t(b) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}

struct AlignedFree {
    void operator()(void* p) const { std::free(p); }
};

}  // namespace

int main() {
    uint32_t seed = 99;
    auto rnd = [&seed] {
        seed = seed * 1664525u + 1013904223u;
        return float((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    };
    std::vector<uint16_t> q(size_t(T) * Hk * K), k(q.size()), v(size_t(T) * Hv * V);
    std::vector<float> g(size_t(T) * Hv), beta(g.size()), out(size_t(T) * Hv * V, NAN);
    std::vector<float> state(size_t(Hv) * K * V);
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < Hk; ++h) {
            std::vector<float> kk(K);
            double n = 0;
            for (int d = 0; d < K; ++d) {
                kk[d] = rnd();
                n += double(kk[d]) * kk[d];
            }
            for (int d = 0; d < K; ++d) {
                k[(size_t(t) * Hk + h) * K + d] = to_bf16(float(kk[d] / std::sqrt(n)));
                q[(size_t(t) * Hk + h) * K + d] = to_bf16(rnd());
            }
        }
    for (auto& x : v) x = to_bf16(rnd());
    for (auto& x : g) x = -0.02f - 0.1f * (rnd() + 0.5f);
    for (auto& x : beta) x = 0.5f + rnd();
    for (auto& x : state) x = 0.05f * rnd();
    std::vector<double> ref_state(state.begin(), state.end());

    gdn_caps_t caps;
    gdn_caps_init(&caps);
    if (gdn_probe(GDN_BACKEND_CPU, 0, &caps) != GDN_SUCCESS) {
        std::fprintf(stderr, "gdn_probe: %s\n", gdn_last_error());
        return 1;
    }
    gdn_problem_t problem;
    gdn_problem_init(&problem);
    problem.num_tokens = T;
    problem.num_k_heads = Hk;
    problem.num_v_heads = Hv;
    problem.head_dim_k = K;
    problem.head_dim_v = V;
    problem.head_mapping = GDN_HEADS_INTERLEAVED;
    problem.input_dtype = GDN_DTYPE_BF16;
    problem.gate_dtype = GDN_DTYPE_F32;
    problem.output_dtype = GDN_DTYPE_F32;
    problem.algorithm = GDN_ALGO_CHUNKED;

    gdn_tensors_t tensors;
    gdn_tensors_init(&tensors);
    tensors.q = q.data();
    tensors.k = k.data();
    tensors.v = v.data();
    tensors.g = g.data();
    tensors.beta = beta.data();
    tensors.out = out.data();
    tensors.state = state.data();

    gdn_path_info_t info;
    gdn_path_info_init(&info);
    size_t bytes = 0;
    if (gdn_select_path(&caps, &problem, &tensors, &info) != GDN_SUCCESS ||
        gdn_workspace_size(&caps, &problem, &bytes) != GDN_SUCCESS) {
        std::fprintf(stderr, "gdn_select_path / gdn_workspace_size: %s\n", gdn_last_error());
        return 1;
    }
    std::unique_ptr<void, AlignedFree> workspace(
        bytes ? std::aligned_alloc(GDN_WORKSPACE_ALIGNMENT,
                                   (bytes + GDN_WORKSPACE_ALIGNMENT - 1) /
                                       GDN_WORKSPACE_ALIGNMENT * GDN_WORKSPACE_ALIGNMENT)
              : nullptr);
    const gdn_status_t st =
        gdn_chunked_recurrence(&caps, &problem, &tensors, workspace.get(), bytes, nullptr);
    if (st != GDN_SUCCESS) {
        std::fprintf(stderr, "gdn_chunked_recurrence: %s: %s\n", gdn_status_string(st),
                     gdn_last_error());
        return 1;
    }

    // The recurrence in double, key head h % Hk (interleaved).
    std::vector<double> ref_out(out.size());
    for (int h = 0; h < Hv; ++h) {
        const int kh = h % Hk;
        double* S = &ref_state[size_t(h) * K * V];
        for (int t = 0; t < T; ++t) {
            const uint16_t* kt = &k[(size_t(t) * Hk + kh) * K];
            const uint16_t* qt = &q[(size_t(t) * Hk + kh) * K];
            const double decay = std::exp(double(g[size_t(t) * Hv + h]));
            for (int a = 0; a < K * V; ++a) S[a] *= decay;
            for (int b = 0; b < V; ++b) {
                double sk = 0;
                for (int a = 0; a < K; ++a) sk += S[a * V + b] * from_bf16(kt[a]);
                const double d =
                    beta[size_t(t) * Hv + h] * (from_bf16(v[(size_t(t) * Hv + h) * V + b]) - sk);
                for (int a = 0; a < K; ++a) S[a * V + b] += from_bf16(kt[a]) * d;
            }
            for (int b = 0; b < V; ++b) {
                double o = 0;
                for (int a = 0; a < K; ++a) o += S[a * V + b] * from_bf16(qt[a]);
                ref_out[(size_t(t) * Hv + h) * V + b] = o / std::sqrt(double(K));
            }
        }
    }
    double max_ref = 0, max_diff = 0, max_sref = 0, max_sdiff = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        max_ref = std::fmax(max_ref, std::fabs(ref_out[i]));
        const double d = std::fabs(out[i] - ref_out[i]);
        if (!(d <= max_diff)) max_diff = d;  // NaN sticks
    }
    for (size_t i = 0; i < state.size(); ++i) {
        max_sref = std::fmax(max_sref, std::fabs(ref_state[i]));
        const double d = std::fabs(state[i] - ref_state[i]);
        if (!(d <= max_sdiff)) max_sdiff = d;
    }
    std::printf("C++ consumer (find_package): gdn %u on %s, path %d (%s); vs FP64: out %.2e, "
                "state %.2e\n",
                unsigned(gdn_version()), caps.arch, int(info.path), info.reason,
                max_diff / max_ref, max_sdiff / max_sref);
    if (info.path != GDN_PATH_CHUNKED_FP32) {
        std::fprintf(stderr, "FAILED: forced chunked ran path %d\n", int(info.path));
        return 1;
    }
    if (!(max_diff <= 2e-6 * max_ref) || !(max_sdiff <= 2e-6 * max_sref)) {
        std::fprintf(stderr, "FAILED: beyond 2e-6 of the FP64 recurrence\n");
        return 1;
    }
    return 0;
}
