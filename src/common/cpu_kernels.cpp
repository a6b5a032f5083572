// The CPU paths of one task (value heads of one key head, one sequence).
// See cpu_kernels.hpp for the feature formulas and the low-precision
// emulation, DESIGN.md §1 for the math; each step below is commented with
// the line of §1 it computes.
#include "cpu_kernels.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "dispatch.hpp"
#include "numeric.hpp"
#include "validate.hpp"

namespace gdn::cpu {

namespace {

#if defined(__GNUC__) || defined(__clang__)
#define GDN_CPU_INLINE inline __attribute__((always_inline))
#else
#error "the CPU kernels use the GCC/clang vector extension"
#endif

// x86-64: the kernels are also built for AVX2 + FMA and for AVX-512F, and
// the best the CPU has is picked at run time.
#if defined(__x86_64__)
#define GDN_CPU_AVX2_VARIANT 1
#else
#define GDN_CPU_AVX2_VARIANT 0
#endif

// Register tiles of the products, per instruction set: kTileRows rows x
// kTileVecs vectors of kLanes floats. Baseline x86-64 (SSE2), other 128-bit
// ISAs and AVX2 have 16 vector registers: 12 accumulators, 2 b vectors, the
// broadcast (12 independent sums hide the FMA latency); 4 lanes, AVX2 8.
// AVX-512: 32 registers, 16 lanes, a tile one vector wide (kPadCols) and 8
// rows high (12 rows were slower: docs/cpu.md).
struct IsaBase {
    static constexpr int kLanes = 4, kTileRows = 6, kTileVecs = 2;
};
struct IsaAvx2 {
    static constexpr int kLanes = 8, kTileRows = 6, kTileVecs = 2;
};
struct IsaAvx512 {
    static constexpr int kLanes = 16, kTileRows = 8, kTileVecs = 1;
};
// The buffers are padded to multiples of 4 rows (the rows past the last
// whole tile of 6 take tiles of 4 and 2) and of every tile's columns.
constexpr int32_t kPadRows = 4;
constexpr int32_t kPadCols = 16;
static_assert(kPadCols % (IsaBase::kLanes * IsaBase::kTileVecs) == 0 &&
                  kPadCols % (IsaAvx2::kLanes * IsaAvx2::kTileVecs) == 0 &&
                  kPadCols % (IsaAvx512::kLanes * IsaAvx512::kTileVecs) == 0,
              "tile columns");
static_assert(policy::kCpuChunk % kPadCols == 0 && policy::kCpuLowpChunk % kPadCols == 0,
              "a chunk must be a whole number of tile columns (k·k and q·k are C x C)");

int32_t round_up(int32_t x, int32_t m) { return (x + m - 1) / m * m; }

// ------------------------------------------------------------ feature math

inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// n elements of one row of a tensor of dtype `dt`, starting at element
// `offset`, as FP32.
void load_row(const void* base, gdn_dtype_t dt, int64_t offset, int32_t n, float* dst) {
    switch (dt) {
        case GDN_DTYPE_F32: {
            const float* p = static_cast<const float*>(base) + offset;
            for (int32_t i = 0; i < n; ++i) dst[i] = p[i];
            break;
        }
        case GDN_DTYPE_F16: {
            const uint16_t* p = static_cast<const uint16_t*>(base) + offset;
            for (int32_t i = 0; i < n; ++i) dst[i] = half_to_float(p[i]);
            break;
        }
        case GDN_DTYPE_BF16: {
            const uint16_t* p = static_cast<const uint16_t*>(base) + offset;
            for (int32_t i = 0; i < n; ++i) dst[i] = bf16_to_float(p[i]);
            break;
        }
        default: break;  // a value gdn.h does not name (rejected by validation)
    }
}

void store_row(void* base, gdn_dtype_t dt, int64_t offset, int32_t n, const float* src) {
    switch (dt) {
        case GDN_DTYPE_F32: {
            float* p = static_cast<float*>(base) + offset;
            for (int32_t i = 0; i < n; ++i) p[i] = src[i];
            break;
        }
        case GDN_DTYPE_F16: {
            uint16_t* p = static_cast<uint16_t*>(base) + offset;
            for (int32_t i = 0; i < n; ++i) p[i] = float_to_half(src[i]);
            break;
        }
        case GDN_DTYPE_BF16: {
            uint16_t* p = static_cast<uint16_t*>(base) + offset;
            for (int32_t i = 0; i < n; ++i) p[i] = float_to_bf16(src[i]);
            break;
        }
        default: break;  // a value gdn.h does not name (rejected by validation)
    }
}

// q̂ and k̂ of token t, key head kh (K values; the padding past K stays as is).
void load_qk(const Shape& s, const Tensors& x, int64_t t, int32_t kh, float* q, float* k) {
    const int32_t K = s.head_dim_k;
    load_row(x.q, s.input_dtype, t * x.q_stride.token + kh * x.q_stride.head, K, q);
    load_row(x.k, s.input_dtype, t * x.k_stride.token + kh * x.k_stride.head, K, k);
    float q_scale = s.scale;
    if (s.qk_l2norm()) {
        float qq = 0.0f, kk = 0.0f;
        for (int32_t i = 0; i < K; ++i) qq += q[i] * q[i];
        for (int32_t i = 0; i < K; ++i) kk += k[i] * k[i];
        q_scale = s.scale / std::sqrt(qq + s.l2norm_eps);
        const float k_scale = 1.0f / std::sqrt(kk + s.l2norm_eps);
        for (int32_t i = 0; i < K; ++i) k[i] *= k_scale;
    }
    for (int32_t i = 0; i < K; ++i) q[i] *= q_scale;
}

// g_t of value head h (log decay, <= 0 for valid inputs).
float load_gate(const Shape& s, const Tensors& x, int64_t t, int32_t h) {
    const float a = load_element(x.g, s.gate_dtype, t * x.g_stride.token + h * x.g_stride.head);
    if (!s.gate_from_raw()) return a;
    return -std::exp(x.A_log[h]) * softplus(a + x.dt_bias[h]);
}

float load_beta(const Shape& s, const Tensors& x, int64_t t, int32_t h) {
    const float b =
        load_element(x.beta, s.gate_dtype, t * x.beta_stride.token + h * x.beta_stride.head);
    return s.beta_from_logits() ? sigmoid(b) : b;
}

// Writes o (V values) as the out row of token t, head h, through the gated
// RMSNorm epilogue when it is on. `z_row` is scratch of V floats.
void store_out_row(const Shape& s, const Tensors& x, int64_t t, int32_t h, const float* o,
                   float* z_row) {
    const int32_t V = s.head_dim_v;
    const int64_t offset = t * x.out_stride.token + h * x.out_stride.head;
    if (!s.output_norm()) {
        store_row(x.out, s.output_dtype, offset, V, o);
        return;
    }
    load_row(x.z, s.input_dtype, t * x.z_stride.token + h * x.z_stride.head, V, z_row);
    float oo = 0.0f;
    for (int32_t i = 0; i < V; ++i) oo += o[i] * o[i];
    const float inv_rms = 1.0f / std::sqrt(oo / float(V) + s.norm_eps);
    for (int32_t i = 0; i < V; ++i) {
        const float z = z_row[i];
        z_row[i] = o[i] * inv_rms * x.norm_weight[i] * (z * sigmoid(z));
    }
    store_row(x.out, s.output_dtype, offset, V, z_row);
}

// Asks for the cache lines of `bytes` bytes at p (into L2) before they are
// needed: the rows of a chunk are far apart (a token stride each), which
// the hardware prefetchers do not follow.
GDN_CPU_INLINE void prefetch_bytes(const void* p, size_t bytes, bool for_write) {
    const char* c = static_cast<const char*>(p);
    for (size_t off = 0; off < bytes; off += 64) {
        if (for_write)
            __builtin_prefetch(c + off, 1, 2);
        else
            __builtin_prefetch(c + off, 0, 2);
    }
}

// Prefetches the q and k rows of key head kh, tokens [first, first + count).
// (Inlined: as a function of its own GCC finds it free of side effects and
// drops the call.)
GDN_CPU_INLINE void prefetch_qk(const Shape& s, const Tensors& x, int32_t kh, int64_t first,
                                int64_t count) {
    const size_t in = dtype_size(s.input_dtype), row = size_t(s.head_dim_k) * in;
    const char* q = static_cast<const char*>(x.q);
    const char* k = static_cast<const char*>(x.k);
    for (int64_t t = first; t < first + count; ++t) {
        prefetch_bytes(q + size_t(t * x.q_stride.token + kh * x.q_stride.head) * in, row, false);
        prefetch_bytes(k + size_t(t * x.k_stride.token + kh * x.k_stride.head) * in, row, false);
    }
}

// Prefetches what value head h reads (v, g, β, z) and writes (out) for
// tokens [first, first + count).
GDN_CPU_INLINE void prefetch_head(const Shape& s, const Tensors& x, int32_t h, int64_t first,
                                  int64_t count) {
    const size_t in = dtype_size(s.input_dtype), gate = dtype_size(s.gate_dtype);
    const size_t outs = dtype_size(s.output_dtype);
    const size_t v_row = size_t(s.head_dim_v) * in, out_row = size_t(s.head_dim_v) * outs;
    const char* v = static_cast<const char*>(x.v);
    const char* z = static_cast<const char*>(x.z);
    const char* g = static_cast<const char*>(x.g);
    const char* beta = static_cast<const char*>(x.beta);
    const char* out = static_cast<const char*>(x.out);
    for (int64_t t = first; t < first + count; ++t) {
        prefetch_bytes(v + size_t(t * x.v_stride.token + h * x.v_stride.head) * in, v_row, false);
        prefetch_bytes(g + size_t(t * x.g_stride.token + h * x.g_stride.head) * gate, 1, false);
        prefetch_bytes(beta + size_t(t * x.beta_stride.token + h * x.beta_stride.head) * gate, 1,
                       false);
        prefetch_bytes(out + size_t(t * x.out_stride.token + h * x.out_stride.head) * outs,
                       out_row, true);
        if (z) prefetch_bytes(z + size_t(t * x.z_stride.token + h * x.z_stride.head) * in, v_row, false);
    }
}

// ----------------------------------------------------------------- state

// S (padded [Kp][Vp], [K][V] orientation) from a head's state in its slot,
// or zero. A [K][V] slot is copied by rows (V contiguous on both sides), and
// only the padding is zeroed.
void load_state(const Shape& s, const Dims& d, const float* src, bool from_zero, float* S) {
    if (!from_zero && s.state_layout == GDN_STATE_KV) {
        for (int32_t k = 0; k < d.K; ++k) {
            float* row = S + size_t(k) * d.Vp;
            std::copy(src + size_t(k) * d.V, src + size_t(k + 1) * d.V, row);
            std::fill(row + d.V, row + d.Vp, 0.0f);
        }
        std::fill(S + size_t(d.K) * d.Vp, S + size_t(d.Kp) * d.Vp, 0.0f);
        return;
    }
    std::fill(S, S + size_t(d.Kp) * size_t(d.Vp), 0.0f);
    if (from_zero) return;
    for (int32_t k = 0; k < d.K; ++k)
        for (int32_t v = 0; v < d.V; ++v) S[size_t(k) * d.Vp + v] = src[state_index(s, k, v)];
}

void store_state(const Shape& s, const Dims& d, const float* S, float* dst) {
    if (s.state_layout == GDN_STATE_KV) {
        for (int32_t k = 0; k < d.K; ++k)
            std::copy(S + size_t(k) * d.Vp, S + size_t(k) * d.Vp + d.V, dst + size_t(k) * d.V);
        return;
    }
    for (int32_t k = 0; k < d.K; ++k)
        for (int32_t v = 0; v < d.V; ++v) dst[state_index(s, k, v)] = S[size_t(k) * d.Vp + v];
}

// ------------------------------------------------------------ sequential

// DESIGN.md §1 token by token, FP32:
//     d_t = β_t (v_t − e^{g_t} S_{t−1}ᵀ k_t)
//     S_t = e^{g_t} S_{t−1} + k_t d_tᵀ
//     o_t = S_tᵀ q̂_t
// Inner loops run over V (contiguous in S), each sum in a fixed order.
void run_sequential_head(const Shape& s, const Tensors& x, const Dims& d, const HeadTask& task,
                         int32_t head_index, const WorkerScratch& w) {
    const int32_t K = d.K, Vp = d.Vp;
    const int32_t h = task.heads[head_index], kh = task.key_head;
    // A [K][V] slot without padding columns is updated where it lies (the loops below touch
    // rows < K, columns < Vp = V); any other is copied in and out of the worker's scratch.
    float* const slot = task.states[head_index];
    // With per-token states the own slot is only read: S lives in the scratch.
    const bool in_place = s.state_layout == GDN_STATE_KV && Vp == d.V && !task.token_slots;
    float* __restrict S = in_place ? slot : w.S[0];
    float* __restrict q = w.q;
    float* __restrict k = w.k;
    float* __restrict v = w.v;
    float* __restrict o = w.o;
    float* __restrict u = w.w;
    std::fill(v, v + Vp, 0.0f);
    if (!in_place)
        load_state(s, d, slot, task.from_zero, S);
    else if (task.from_zero)
        std::fill(S, S + size_t(K) * Vp, 0.0f);
    const int64_t end = task.bos + task.len;
    for (int64_t t = task.bos; t < end; ++t) {
        // Token t + 2's rows arrive while t and t + 1 compute.
        if (t + 2 < end) {
            prefetch_qk(s, x, kh, t + 2, 1);
            prefetch_head(s, x, h, t + 2, 1);
        }
        load_qk(s, x, t, kh, q, k);
        load_row(x.v, s.input_dtype, t * x.v_stride.token + h * x.v_stride.head, d.V, v);
        const float decay = std::exp(load_gate(s, x, t, h));
        const float beta = load_beta(s, x, t, h);
        // u = S_{t−1}ᵀ k
        for (int32_t j = 0; j < Vp; ++j) u[j] = 0.0f;
        for (int32_t i = 0; i < K; ++i) {
            const float* __restrict S_i = S + size_t(i) * Vp;
            const float k_i = k[i];
            for (int32_t j = 0; j < Vp; ++j) u[j] += S_i[j] * k_i;
        }
        // d = β (v − e^g u), in place of u
        for (int32_t j = 0; j < Vp; ++j) u[j] = beta * (v[j] - decay * u[j]);
        // S = e^g S + k dᵀ, and o = Sᵀ q̂ on the fly
        for (int32_t j = 0; j < Vp; ++j) o[j] = 0.0f;
        for (int32_t i = 0; i < K; ++i) {
            float* __restrict S_i = S + size_t(i) * Vp;
            const float k_i = k[i], q_i = q[i];
            for (int32_t j = 0; j < Vp; ++j) {
                const float s_ij = decay * S_i[j] + k_i * u[j];
                S_i[j] = s_ij;
                o[j] += s_ij * q_i;
            }
        }
        store_out_row(s, x, t, h, o, w.z);
        const int64_t pos = t - task.bos;
        if (task.token_slots && (!s.block_states() || block_state_read(pos, task.len)) &&
            task.token_slots[pos] >= 0)
            store_state(s, d, S,
                        x.state + int64_t(task.token_slots[pos]) * x.state_slot_stride +
                            int64_t(h) * K * d.V);
    }
    if (!in_place && !task.token_slots) store_state(s, d, S, slot);
}

// The sequential path walks the task's heads one after another.
void run_sequential(const Shape& s, const Tensors& x, const Dims& d, const HeadTask& task,
                    const WorkerScratch& w) {
    for (int32_t i = 0; i < task.num_heads; ++i) run_sequential_head(s, x, d, task, i, w);
}

// -------------------------------------------------------------- products

// The products are register-tiled with the compiler's vector extension
// (GCC, clang): an MR x (NV vectors) tile of FP32 accumulators stays in
// registers while p runs over the shared dimension. Tile shapes per
// instruction set (see Isa* below).
// `unaligned` is the same vector for loads and stores at any float address.
template <int Lanes>
struct VecOf;
template <>
struct VecOf<4> {
    typedef float type __attribute__((vector_size(16)));
    typedef float unaligned __attribute__((vector_size(16), aligned(4), may_alias));
};
template <>
struct VecOf<8> {
    typedef float type __attribute__((vector_size(32)));
    typedef float unaligned __attribute__((vector_size(32), aligned(4), may_alias));
};
template <>
struct VecOf<16> {
    typedef float type __attribute__((vector_size(64)));
    typedef float unaligned __attribute__((vector_size(64), aligned(4), may_alias));
};

// A matrix operand read one element at a time: (m, p) at data[m * row + p * col].
struct Operand {
    const float* data;
    int64_t row, col;
};

// out[m][n] = init + Σ_p a(m, p) · b[p][n] for one MR-row tile, p = 0..P−1
// in order; init = row_scale[m] · out[m][n], or 0 when row_scale is null.
// The sum order of an element does not depend on the tiling.
template <class Isa, int MR>
GDN_CPU_INLINE void product_tile(int32_t P, Operand a, const float* __restrict b, int64_t ldb,
                                 float* out, int64_t ldo, const float* row_scale,
                                 int64_t row_scale_step) {
    typedef typename VecOf<Isa::kLanes>::type Vec;
    typedef typename VecOf<Isa::kLanes>::unaligned VecU;
    constexpr int NV = Isa::kTileVecs, W = Isa::kLanes;
    Vec acc[MR][NV];
    if (row_scale) {
        for (int r = 0; r < MR; ++r)
            for (int j = 0; j < NV; ++j)
                acc[r][j] = row_scale[r * row_scale_step] *
                            *reinterpret_cast<const VecU*>(out + r * ldo + j * W);
    } else {
        for (int r = 0; r < MR; ++r)
            for (int j = 0; j < NV; ++j) acc[r][j] = Vec{};
    }
    const float* __restrict a_p = a.data;
    for (int32_t p = 0; p < P; ++p, a_p += a.col) {
        Vec b_p[NV];
        for (int j = 0; j < NV; ++j) b_p[j] = *reinterpret_cast<const VecU*>(b + p * ldb + j * W);
        for (int r = 0; r < MR; ++r) {
            const float a_rp = a_p[r * a.row];
            for (int j = 0; j < NV; ++j) acc[r][j] += a_rp * b_p[j];
        }
    }
    for (int r = 0; r < MR; ++r)
        for (int j = 0; j < NV; ++j) *reinterpret_cast<VecU*>(out + r * ldo + j * W) = acc[r][j];
}

// Which part of a product is needed: all of it; a lower-triangular a
// (a(m, p) = 0 for p > m: the sum stops at the tile's last row); or only
// out[m][n] for n <= m (tiles wholly above the diagonal are skipped).
enum class Part { all, a_lower, out_lower };

// Rows [m0, m0 + MR) of one column panel.
template <class Isa, int MR>
GDN_CPU_INLINE void product_rows(Part part, int32_t m0, int32_t n0, int32_t P, Operand a,
                                 const float* b, int64_t ldb, float* out, int64_t ldo,
                                 const float* row_scale, int64_t row_scale_step) {
    if (part == Part::out_lower && n0 >= m0 + MR) return;
    const int32_t P_tile = part == Part::a_lower ? std::min(P, m0 + MR) : P;
    const Operand a_tile{a.data + m0 * a.row, a.row, a.col};
    product_tile<Isa, MR>(P_tile, a_tile, b + n0, ldb, out + m0 * ldo + n0, ldo,
                          row_scale ? row_scale + m0 * row_scale_step : nullptr, row_scale_step);
}

// out = [diag(row_scale) out +] a · b with a: M x P, b: P x N (row stride
// ldb), out: M x N (ldo). M % kPadRows == 0, N % kPadCols == 0 (the buffers
// are padded for it). row_scale_step 0 broadcasts one scale.
template <class Isa>
GDN_CPU_INLINE void product_impl(Part part, int32_t M, int32_t N, int32_t P, Operand a,
                                 const float* b, int64_t ldb, float* out, int64_t ldo,
                                 const float* row_scale, int64_t row_scale_step) {
    constexpr int MR = Isa::kTileRows, NR = Isa::kTileVecs * Isa::kLanes;
    const int32_t M_tiles = M / MR * MR;
    // Column panels outside: a panel of b (P x NR) stays in L1 across the rows.
    for (int32_t n0 = 0; n0 < N; n0 += NR) {
        int32_t m0 = 0;
        for (; m0 < M_tiles; m0 += MR)
            product_rows<Isa, MR>(part, m0, n0, P, a, b, ldb, out, ldo, row_scale, row_scale_step);
        for (; m0 + 4 <= M; m0 += 4)
            product_rows<Isa, 4>(part, m0, n0, P, a, b, ldb, out, ldo, row_scale, row_scale_step);
        for (; m0 + 2 <= M; m0 += 2)
            product_rows<Isa, 2>(part, m0, n0, P, a, b, ldb, out, ldo, row_scale, row_scale_step);
    }
}

// The products are functions of their own (not inlined into the chunk step):
// the tile loop then gets the registers to itself.
__attribute__((noinline)) void product_base(Part part, int32_t M, int32_t N, int32_t P,
                                            Operand a, const float* b, int64_t ldb, float* out,
                                            int64_t ldo, const float* row_scale,
                                            int64_t row_scale_step) {
    product_impl<IsaBase>(part, M, N, P, a, b, ldb, out, ldo, row_scale, row_scale_step);
}
#if GDN_CPU_AVX2_VARIANT
__attribute__((noinline, target("avx2,fma"))) void product_avx2(
    Part part, int32_t M, int32_t N, int32_t P, Operand a, const float* b, int64_t ldb,
    float* out, int64_t ldo, const float* row_scale, int64_t row_scale_step) {
    product_impl<IsaAvx2>(part, M, N, P, a, b, ldb, out, ldo, row_scale, row_scale_step);
}
__attribute__((noinline, target("avx512f,avx2,fma"))) void product_avx512(
    Part part, int32_t M, int32_t N, int32_t P, Operand a, const float* b, int64_t ldb,
    float* out, int64_t ldo, const float* row_scale, int64_t row_scale_step) {
    product_impl<IsaAvx512>(part, M, N, P, a, b, ldb, out, ldo, row_scale, row_scale_step);
}
#endif

template <class Isa>
GDN_CPU_INLINE void product(Part part, int32_t M, int32_t N, int32_t P, Operand a,
                            const float* b, int64_t ldb, float* out, int64_t ldo,
                            const float* row_scale = nullptr, int64_t row_scale_step = 1) {
#if GDN_CPU_AVX2_VARIANT
    if (std::is_same<Isa, IsaAvx2>::value) {
        product_avx2(part, M, N, P, a, b, ldb, out, ldo, row_scale, row_scale_step);
        return;
    }
    if (std::is_same<Isa, IsaAvx512>::value) {
        product_avx512(part, M, N, P, a, b, ldb, out, ldo, row_scale, row_scale_step);
        return;
    }
#endif
    product_base(part, M, N, P, a, b, ldb, out, ldo, row_scale, row_scale_step);
}

// A row-major M x P matrix as a product operand.
inline Operand rows(const float* data, int64_t ld) { return {data, ld, 1}; }

// ---------------------------------------------------------------- chunked

// Operand formats of the products: FP32 (exact), or FP16/BF16 rounding of
// every product operand, as the gfx11 WMMA path does (FP32 accumulation).
struct OperandFp32 {
    static constexpr bool exact = true;
    float operator()(float x) const { return x; }
};
struct OperandFp16 {
    static constexpr bool exact = false;
    float operator()(float x) const { return round_to_half(x); }
};
struct OperandBf16 {
    static constexpr bool exact = false;
    float operator()(float x) const { return round_to_bf16(x); }
};

template <class Op>
const float* rounded(const Op& op, const float* src, size_t n, float* dst) {
    if (Op::exact) return src;
    for (size_t i = 0; i < n; ++i) dst[i] = op(src[i]);
    return dst;
}

// The part of a chunk step the heads of a task share. On entry w.q, w.k hold
// the chunk's q̂, k̂ rows (rows L..C−1 zero). On exit w.kk and w.qk hold
// k_t·k_i and q_t·k_i for i <= t, on operands through `op`.
template <class Op, class Isa>
GDN_CPU_INLINE void chunk_prep_shared(const Dims& d, const WorkerScratch& w) {
    const Op op;
    const int32_t C = d.C, Kp = d.Kp;
    const size_t CK = size_t(C) * Kp;
    const float* q_op = rounded(op, w.q, CK, w.q_op);
    const float* k_op = rounded(op, w.k, CK, w.k_op);
    for (int32_t i = 0; i < Kp; ++i)
        for (int32_t t = 0; t < C; ++t) w.kT[size_t(i) * C + t] = k_op[size_t(t) * Kp + i];
    product<Isa>(Part::out_lower, C, C, Kp, rows(k_op, Kp), w.kT, C, w.kk, C);
    product<Isa>(Part::out_lower, C, C, Kp, rows(q_op, Kp), w.kT, C, w.qk, C);
}

// One chunk of DESIGN.md §1's WY form for one head. On entry: the shared
// part is done (w.q, w.k, w.kk, w.qk, and w.q_op, w.k_op when rounding);
// w.v holds the head's v rows, w.g and w.beta its gates, rows L..C−1 zero
// (g = 0, β = 0, so they add nothing); S holds S0. On exit: w.o holds o for
// the chunk's rows and S holds S_C. Every matrix product takes its operands
// through `op` (FP32, or rounded to FP16/BF16) and accumulates in FP32.
template <class Op, class Isa>
GDN_CPU_INLINE void chunk_step(const Dims& d, int32_t L, const WorkerScratch& w, float* S) {
    const Op op;
    const int32_t C = d.C, Kp = d.Kp, Vp = d.Vp;
    const size_t CV = size_t(C) * Vp, CC = size_t(C) * C;
    const float* q_op = Op::exact ? w.q : w.q_op;
    const float* k_op = Op::exact ? w.k : w.k_op;

    // γ_t = Σ_{i<=t} g_i inside the chunk (padding rows keep γ_{L−1}).
    float gamma_t = 0.0f;
    for (int32_t t = 0; t < C; ++t) {
        gamma_t += w.g[t];
        w.gamma[t] = gamma_t;
        w.e_gamma[t] = std::exp(gamma_t);
    }
    const float* gamma = w.gamma;

    // P[t][i] = e^{γ_t−γ_i} q_t·k_i (i <= t, 0 above the diagonal) and
    // A[t][i] = β_t e^{γ_t−γ_i} k_t·k_i (i < t).
    for (int32_t t = 0; t < C; ++t) {
        float* P_t = w.P + size_t(t) * C;
        float* A_t = w.A + size_t(t) * C;
        const float* qk_t = w.qk + size_t(t) * C;
        const float* kk_t = w.kk + size_t(t) * C;
        for (int32_t i = 0; i <= t; ++i) {
            const float decay = std::exp(gamma[t] - gamma[i]);
            P_t[i] = op(decay * qk_t[i]);
            A_t[i] = w.beta[t] * decay * kk_t[i];
        }
        for (int32_t i = t + 1; i < C; ++i) P_t[i] = 0.0f;
    }

    // T = (I + A)^{-1} by forward substitution: row t of (I + A) T = I is
    // T_t = e_t − Σ_{i<t} A[t][i] T_i (T is unit lower triangular).
    for (int32_t t = 0; t < C; ++t) {
        float* T_t = w.T + size_t(t) * C;
        const float* A_t = w.A + size_t(t) * C;
        std::fill(T_t, T_t + C, 0.0f);
        T_t[t] = 1.0f;
        for (int32_t i = 0; i < t; ++i) {
            // Whole rows (T_i is 0 past column i): fixed-length, vectorised.
            const float* T_i = w.T + size_t(i) * C;
            const float A_ti = A_t[i];
            for (int32_t j = 0; j < C; ++j) T_t[j] -= A_ti * T_i[j];
        }
    }

    // S0ᵀ k_t and S0ᵀ q_t, one row per token.
    const float* S_op = rounded(op, S, size_t(Kp) * Vp, w.S_op);
    product<Isa>(Part::all, C, Vp, Kp, rows(k_op, Kp), S_op, Vp, w.w, Vp);
    product<Isa>(Part::all, C, Vp, Kp, rows(q_op, Kp), S_op, Vp, w.o, Vp);

    // U = β ⊙ (v − e^{γ} ⊙ (S0ᵀ k)), in place of v;  D = T · U.
    for (int32_t t = 0; t < C; ++t) {
        float* U_t = w.v + size_t(t) * Vp;
        const float* W_t = w.w + size_t(t) * Vp;
        const float beta_t = w.beta[t], e_gamma_t = w.e_gamma[t];
        for (int32_t j = 0; j < Vp; ++j) U_t[j] = op(beta_t * (U_t[j] - e_gamma_t * W_t[j]));
    }
    const float* T_op = rounded(op, w.T, CC, w.T_op);
    product<Isa>(Part::a_lower, C, Vp, C, rows(T_op, C), w.v, Vp, w.d, Vp);

    // o_t = e^{γ_t} S0ᵀ q_t + Σ_{i<=t} P[t][i] D_i.
    const float* D_op = rounded(op, w.d, CV, w.d_op);
    product<Isa>(Part::a_lower, C, Vp, C, rows(w.P, C), D_op, Vp, w.o, Vp, w.e_gamma, 1);

    // S_C = e^{γ_{L−1}} S0 + Σ_i e^{γ_{L−1}−γ_i} k_i D_iᵀ: the decayed k rows
    // (0 for padding rows), read as the transposed operand of the product.
    const float gamma_last = gamma[L - 1];
    for (int32_t t = 0; t < C; ++t) {
        const float decay = t < L ? std::exp(gamma_last - gamma[t]) : 0.0f;
        const float* k_t = w.k + size_t(t) * Kp;
        float* kd_t = w.kd + size_t(t) * Kp;
        for (int32_t i = 0; i < Kp; ++i) kd_t[i] = op(decay * k_t[i]);
    }
    product<Isa>(Part::all, Kp, Vp, C, Operand{w.kd, 1, Kp}, D_op, Vp, S, Vp, &w.e_gamma[L - 1], 0);
}

// The WY form over a whole sequence: chunks of C tokens, the last one
// shorter when the length is not a multiple of C. The task's heads walk the
// chunks together, sharing the chunk's q and k.
template <class Op, class Isa>
void run_chunked(const Shape& s, const Tensors& x, const Dims& d, const HeadTask& task,
                 const WorkerScratch& w) {
    const int32_t C = d.C, Kp = d.Kp, Vp = d.Vp;
    // Padding columns (past K, past V) stay zero for the whole task.
    std::fill(w.q, w.q + size_t(C) * Kp, 0.0f);
    std::fill(w.k, w.k + size_t(C) * Kp, 0.0f);
    std::fill(w.v, w.v + size_t(C) * Vp, 0.0f);
    for (int32_t j = 0; j < task.num_heads; ++j)
        load_state(s, d, task.states[j], task.from_zero, w.S[j]);
    for (int64_t c0 = 0; c0 < task.len; c0 += C) {
        const int32_t L = int32_t(std::min<int64_t>(C, task.len - c0));
        const int64_t first = task.bos + c0;
        // The next chunk's rows arrive while this one computes.
        const int64_t next = std::min<int64_t>(C, task.len - c0 - C);
        if (next > 0) prefetch_qk(s, x, task.key_head, first + C, next);
        for (int32_t t = 0; t < L; ++t)
            load_qk(s, x, first + t, task.key_head, w.q + size_t(t) * Kp, w.k + size_t(t) * Kp);
        if (L < C) {  // a tail chunk: rows past L add nothing
            std::fill(w.q + size_t(L) * Kp, w.q + size_t(C) * Kp, 0.0f);
            std::fill(w.k + size_t(L) * Kp, w.k + size_t(C) * Kp, 0.0f);
        }
        chunk_prep_shared<Op, Isa>(d, w);
        for (int32_t j = 0; j < task.num_heads; ++j) {
            const int32_t h = task.heads[j];
            if (next > 0) prefetch_head(s, x, h, first + C, next);
            for (int32_t t = 0; t < L; ++t) {
                load_row(x.v, s.input_dtype, (first + t) * x.v_stride.token + h * x.v_stride.head,
                         d.V, w.v + size_t(t) * Vp);
                w.g[t] = load_gate(s, x, first + t, h);
                w.beta[t] = load_beta(s, x, first + t, h);
            }
            if (L < C) {
                std::fill(w.v + size_t(L) * Vp, w.v + size_t(C) * Vp, 0.0f);
                std::fill(w.g + L, w.g + C, 0.0f);
                std::fill(w.beta + L, w.beta + C, 0.0f);
            }
            chunk_step<Op, Isa>(d, L, w, w.S[j]);
            for (int32_t t = 0; t < L; ++t)
                store_out_row(s, x, first + t, h, w.o + size_t(t) * Vp, w.z);
            // GDN_FLAG_BLOCK_STATES: C divides the block (dispatch), so a block
            // ends only at a chunk's end.
            const int64_t pos = c0 + L - 1;
            if (task.token_slots && block_state_read(pos, task.len) && task.token_slots[pos] >= 0)
                store_state(s, d, w.S[j],
                            x.state + int64_t(task.token_slots[pos]) * x.state_slot_stride +
                                int64_t(h) * d.K * d.V);
        }
    }
    if (!task.token_slots)
        for (int32_t j = 0; j < task.num_heads; ++j) store_state(s, d, w.S[j], task.states[j]);
}

}  // namespace

Dims dims_of(const Shape& shape, const PathChoice& path) {
    Dims d;
    d.K = shape.head_dim_k;
    d.V = shape.head_dim_v;
    d.Kp = round_up(d.K, kPadRows);
    d.Vp = round_up(d.V, kPadCols);
    const bool sequential = path.path == GDN_PATH_SEQUENTIAL;
    d.C = sequential ? 1 : path.chunk_size;
    d.task_heads = sequential ? 1 : std::min(shape.group, kMaxTaskHeads);
    return d;
}

WorkerScratch carve_worker_scratch(WorkspaceCarver& carver, const Dims& d, gdn_path_t path) {
    const size_t C = size_t(d.C), Kp = size_t(d.Kp), Vp = size_t(d.Vp);
    WorkerScratch w;
    for (int32_t j = 0; j < d.task_heads; ++j) w.S[j] = carver.take<float>(Kp * Vp);
    w.q = carver.take<float>(C * Kp);
    w.k = carver.take<float>(C * Kp);
    w.v = carver.take<float>(C * Vp);
    w.o = carver.take<float>(C * Vp);
    w.w = carver.take<float>(C * Vp);
    w.z = carver.take<float>(Vp);
    w.g = carver.take<float>(C);
    w.beta = carver.take<float>(C);
    w.gamma = carver.take<float>(C);
    if (path == GDN_PATH_SEQUENTIAL) return w;
    w.kT = carver.take<float>(Kp * C);
    w.kd = carver.take<float>(C * Kp);
    w.d = carver.take<float>(C * Vp);
    w.kk = carver.take<float>(C * C);
    w.qk = carver.take<float>(C * C);
    w.A = carver.take<float>(C * C);
    w.T = carver.take<float>(C * C);
    w.P = carver.take<float>(C * C);
    w.e_gamma = carver.take<float>(C);
    if (path != GDN_PATH_CHUNKED_LOWP_C16) return w;
    w.q_op = carver.take<float>(C * Kp);
    w.k_op = carver.take<float>(C * Kp);
    w.S_op = carver.take<float>(Kp * Vp);
    w.d_op = carver.take<float>(C * Vp);
    w.T_op = carver.take<float>(C * C);
    return w;
}

namespace {

template <class Isa>
GDN_CPU_INLINE void run_path(const Shape& shape, const Tensors& tensors, const PathChoice& path,
                             const Dims& dims, const HeadTask& task, const WorkerScratch& scratch) {
    switch (path.path) {
        case GDN_PATH_SEQUENTIAL: run_sequential(shape, tensors, dims, task, scratch); break;
        case GDN_PATH_CHUNKED_FP32:
            run_chunked<OperandFp32, Isa>(shape, tensors, dims, task, scratch);
            break;
        case GDN_PATH_CHUNKED_LOWP_C16:
            if (path.precision == GDN_PRECISION_BF16)
                run_chunked<OperandBf16, Isa>(shape, tensors, dims, task, scratch);
            else
                run_chunked<OperandFp16, Isa>(shape, tensors, dims, task, scratch);
            break;
        case GDN_PATH_NONE: break;
        default: break;  // a value gdn.h does not name (rejected by validation)
    }
}

void run_path_base(const Shape& shape, const Tensors& tensors, const PathChoice& path,
                   const Dims& dims, const HeadTask& task, const WorkerScratch& scratch) {
    run_path<IsaBase>(shape, tensors, path, dims, task, scratch);
}

#if GDN_CPU_AVX2_VARIANT
// The same code for AVX2 + FMA and for AVX-512F: `flatten` inlines every
// callee, so all of it is compiled for that target. Their bits differ from
// the baseline build's (fused multiply-adds) but not from each other's (a
// product's element is one chain of FMAs in p order, whatever the tile;
// tests/test_cpu_determinism.cpp checks it where the CPU has AVX-512F).
__attribute__((target("avx2,fma"), flatten)) void run_path_avx2(
    const Shape& shape, const Tensors& tensors, const PathChoice& path, const Dims& dims,
    const HeadTask& task, const WorkerScratch& scratch) {
    run_path<IsaAvx2>(shape, tensors, path, dims, task, scratch);
}
__attribute__((target("avx512f,avx2,fma"), flatten)) void run_path_avx512(
    const Shape& shape, const Tensors& tensors, const PathChoice& path, const Dims& dims,
    const HeadTask& task, const WorkerScratch& scratch) {
    run_path<IsaAvx512>(shape, tensors, path, dims, task, scratch);
}

bool cpu_has_avx2_fma() {
    static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return yes;
}
// (libgcc's check includes the OS's saving of the 512-bit registers.)
bool cpu_has_avx512f() {
    static const bool yes = cpu_has_avx2_fma() && __builtin_cpu_supports("avx512f");
    return yes;
}
#endif

std::atomic<KernelVariant> g_variant{KernelVariant::best};

enum class Build { base, avx2, avx512 };

Build build_that_runs() {
#if GDN_CPU_AVX2_VARIANT
    const KernelVariant v = g_variant.load(std::memory_order_relaxed);
    if (v == KernelVariant::baseline || !cpu_has_avx2_fma()) return Build::base;
    if (v == KernelVariant::best && cpu_has_avx512f()) return Build::avx512;
    return Build::avx2;
#else
    return Build::base;
#endif
}

}  // namespace

bool chunk_size_supported(int32_t chunk_size) {
    return chunk_size > 0 && chunk_size % kPadCols == 0;
}

void set_kernel_variant(KernelVariant v) { g_variant.store(v, std::memory_order_relaxed); }

const char* kernel_variant_name() {
    switch (build_that_runs()) {
        case Build::avx512: return "avx512f+fma";
        case Build::avx2: return "avx2+fma";
        default: return "baseline";
    }
}

void run_head_task(const Shape& shape, const Tensors& tensors, const PathChoice& path,
                   const Dims& dims, const HeadTask& task, const WorkerScratch& scratch) {
    // Nothing to read or change (a zero-start sequence of no tokens writes its
    // zero state, unless its states go to its tokens' slots).
    if (task.len == 0 && (!task.from_zero || task.token_slots)) return;
#if GDN_CPU_AVX2_VARIANT
    switch (build_that_runs()) {
        case Build::avx512: run_path_avx512(shape, tensors, path, dims, task, scratch); return;
        case Build::avx2: run_path_avx2(shape, tensors, path, dims, task, scratch); return;
        default: break;
    }
#endif
    run_path_base(shape, tensors, path, dims, task, scratch);
}

}  // namespace gdn::cpu
