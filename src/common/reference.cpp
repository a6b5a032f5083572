// The FP64 reference: DESIGN.md §1 token by token in double, with every
// feature applied in double by the formulas of cpu_kernels.hpp. Inputs are
// read at their stored precision (an f16 input is the exact f16 value).
#include "reference.hpp"

#include <cmath>

#include "numeric.hpp"

namespace gdn::ref {

namespace {

double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

void load_row(const void* base, gdn_dtype_t dt, int64_t offset, int32_t n, double* dst) {
    for (int32_t i = 0; i < n; ++i) dst[i] = double(load_element(base, dt, offset + i));
}

}  // namespace

void run(const Shape& s, const Tensors& x, double* out, double* state) {
    const int32_t K = s.head_dim_k, V = s.head_dim_v, Hv = s.num_v_heads;
    const size_t Kn = static_cast<size_t>(K), Vn = static_cast<size_t>(V);
    std::vector<double> S(Kn * Vn), q(Kn), k(Kn), v(Vn), u(Vn), o(Vn), z(Vn);
    const int64_t equal_len = s.num_tokens / s.num_seqs;
    for (int32_t seq = 0; seq < s.num_seqs; ++seq) {
        const int32_t slot = x.state_indices ? x.state_indices[seq] : seq;
        if (slot < 0) continue;  // padding: nothing read, nothing written
        const int64_t bos = x.cu_seqlens ? x.cu_seqlens[seq] : int64_t(seq) * equal_len;
        const int64_t eos = x.cu_seqlens ? x.cu_seqlens[seq + 1] : bos + equal_len;
        const bool from_zero = x.start_from_zero && x.start_from_zero[seq] != 0;
        for (int32_t h = 0; h < Hv; ++h) {
            const int32_t kh = key_head_of(s, h);
            double* st = state + int64_t(slot) * x.state_slot_stride + int64_t(h) * K * V;
            for (int32_t i = 0; i < K; ++i)
                for (int32_t j = 0; j < V; ++j)
                    S[size_t(i) * V + j] = from_zero ? 0.0 : st[state_index(s, i, j)];
            for (int64_t t = bos; t < eos; ++t) {
                load_row(x.q, s.input_dtype, t * x.q_stride.token + kh * x.q_stride.head, K, q.data());
                load_row(x.k, s.input_dtype, t * x.k_stride.token + kh * x.k_stride.head, K, k.data());
                load_row(x.v, s.input_dtype, t * x.v_stride.token + h * x.v_stride.head, V, v.data());
                double q_scale = double(s.scale);
                if (s.qk_l2norm()) {
                    double qq = 0.0, kk = 0.0;
                    for (int32_t i = 0; i < K; ++i) qq += q[size_t(i)] * q[size_t(i)];
                    for (int32_t i = 0; i < K; ++i) kk += k[size_t(i)] * k[size_t(i)];
                    q_scale /= std::sqrt(qq + double(s.l2norm_eps));
                    const double k_scale = 1.0 / std::sqrt(kk + double(s.l2norm_eps));
                    for (double& e : k) e *= k_scale;
                }
                for (double& e : q) e *= q_scale;
                double g = load_element(x.g, s.gate_dtype, t * x.g_stride.token + h * x.g_stride.head);
                if (s.gate_from_raw())
                    g = -std::exp(double(x.A_log[h])) * softplus(g + double(x.dt_bias[h]));
                double beta = load_element(x.beta, s.gate_dtype,
                                           t * x.beta_stride.token + h * x.beta_stride.head);
                if (s.beta_from_logits()) beta = sigmoid(beta);
                const double decay = std::exp(g);

                // d = β (v − e^g Sᵀk);  S = e^g S + k dᵀ;  o = Sᵀ q̂
                for (int32_t j = 0; j < V; ++j) u[size_t(j)] = 0.0;
                for (int32_t i = 0; i < K; ++i)
                    for (int32_t j = 0; j < V; ++j) u[size_t(j)] += S[size_t(i) * V + j] * k[size_t(i)];
                for (int32_t j = 0; j < V; ++j) u[size_t(j)] = beta * (v[size_t(j)] - decay * u[size_t(j)]);
                for (int32_t j = 0; j < V; ++j) o[size_t(j)] = 0.0;
                for (int32_t i = 0; i < K; ++i)
                    for (int32_t j = 0; j < V; ++j) {
                        double& s_ij = S[size_t(i) * V + j];
                        s_ij = decay * s_ij + k[size_t(i)] * u[size_t(j)];
                        o[size_t(j)] += s_ij * q[size_t(i)];
                    }

                if (s.output_norm()) {
                    load_row(x.z, s.input_dtype, t * x.z_stride.token + h * x.z_stride.head, V, z.data());
                    double oo = 0.0;
                    for (double e : o) oo += e * e;
                    const double inv_rms = 1.0 / std::sqrt(oo / double(V) + double(s.norm_eps));
                    for (int32_t j = 0; j < V; ++j) {
                        const double zj = z[size_t(j)];
                        o[size_t(j)] = o[size_t(j)] * inv_rms * double(x.norm_weight[j]) * (zj * sigmoid(zj));
                    }
                }
                double* out_row = out + (t * Hv + h) * int64_t(V);
                for (int32_t j = 0; j < V; ++j) out_row[j] = o[size_t(j)];
            }
            for (int32_t i = 0; i < K; ++i)
                for (int32_t j = 0; j < V; ++j) st[state_index(s, i, j)] = S[size_t(i) * V + j];
        }
    }
}

}  // namespace gdn::ref
