// 64-bit offsets on the CPU backend: tensors whose element offsets pass 2^31
// (and, for f32, byte offsets past 2^33), made with large strides over
// address-space reservations (MAP_NORESERVE: only the rows used are ever
// touched). An offset computed in 32 bits anywhere would read or write the
// wrong row: the result must equal, bit for bit, the same problem run on
// packed buffers, and match the FP64 reference run on the strided tensors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "common/reference.hpp"
#include "common/validate.hpp"
#include "gdn/gdn.h"
#include "rel_support.hpp"

namespace {

constexpr int64_t k2e31 = int64_t(1) << 31;

enum class Spread { token_strides, head_strides };

// One [token][head][dim] tensor, packed and strided copies of the same values.
struct Tensor {
    const char* name;
    int32_t heads, dim;
    gdn_dtype_t dtype;
    float lo, hi;
    uint64_t seed;
    int64_t token_stride = 0, head_stride = 0;  // of the strided copy
    rel::Reservation strided;
    std::vector<unsigned char> packed;

    Tensor(const char* n, int32_t h, int32_t d, gdn_dtype_t t, float l, float u, uint64_t s)
        : name(n), heads(h), dim(d), dtype(t), lo(l), hi(u), seed(s) {}

    int64_t last_offset(int64_t T) const {
        return (T - 1) * token_stride + int64_t(heads - 1) * head_stride + dim - 1;
    }
    int64_t strided_offset(int64_t t, int32_t h) const { return t * token_stride + h * head_stride; }
    int64_t packed_offset(int64_t t, int32_t h) const { return (t * heads + h) * int64_t(dim); }

    void make(int64_t T, bool write_values) {
        const size_t es = rel::dtype_bytes(dtype);
        strided = rel::Reservation(size_t(last_offset(T) + 1) * es);
        packed.assign(size_t(T) * size_t(heads) * size_t(dim) * es, 0);
        REQUIRE(strided.data() != nullptr);
        if (!write_values) return;
        for (int64_t t = 0; t < T; ++t)
            for (int32_t h = 0; h < heads; ++h)
                for (int32_t i = 0; i < dim; ++i) {
                    const float x = rel::value_at(seed, uint64_t(packed_offset(t, h) + i), lo, hi);
                    gdn::store_element(strided.data(), dtype, strided_offset(t, h) + i, x);
                    gdn::store_element(packed.data(), dtype, packed_offset(t, h) + i, x);
                }
    }
};

struct Result {
    double max_ref = 0, max_diff = 0;
};

void check_offsets(Spread spread, gdn_dtype_t dtype, gdn_algorithm_t algorithm, gdn_precision_t precision,
                   uint32_t flags) {
    const int64_t T = 100;  // three chunks of 32 and a tail; six of 16 and a tail
    const int32_t Hk = 2, Hv = 4, K = 16, V = 16, slots = 3;
    const float qk = 0.25f;
    Tensor q{"q", Hk, K, dtype, -qk, qk, 11};
    Tensor k{"k", Hk, K, dtype, -qk, qk, 12};
    Tensor v{"v", Hv, V, dtype, -1.0f, 1.0f, 13};
    Tensor g{"g", Hv, 1, GDN_DTYPE_F32, (flags & GDN_FLAG_GATE_FROM_RAW) ? -3.0f : -0.4f,
             (flags & GDN_FLAG_GATE_FROM_RAW) ? 3.0f : 0.0f, 14};
    Tensor beta{"beta", Hv, 1, GDN_DTYPE_F32, 0.0f, 1.0f, 15};
    Tensor z{"z", Hv, V, dtype, -2.0f, 2.0f, 16};
    Tensor out{"out", Hv, V, dtype, 0, 0, 17};
    Tensor* all[] = {&q, &k, &v, &g, &beta, &z, &out};
    for (Tensor* t : all) {
        // Rows one element apart, so a write past a row's end shows.
        if (spread == Spread::token_strides) {
            // Heads side by side, tokens 2^25 elements apart: token 99 is past 2^31.
            t->head_stride = t->dim + 1;
            t->token_stride = (int64_t(1) << 25) + 3 * t->dim + 1;
        } else {
            // Tokens side by side, heads far apart: the last head is past 2^31.
            t->token_stride = t->dim + 1;
            t->head_stride = t->heads == Hk ? k2e31 + 64 : (int64_t(1) << 30) + 64;
        }
        INFO(t->name << ": last element offset " << t->last_offset(T));
        REQUIRE(t->last_offset(T) > k2e31);
        t->make(T, t != &out);
    }
    // The state pool: slots 2^31 + 1024 elements apart; sequence 0 uses slot
    // 2 (offset past 2^32), sequence 1 slot 0; slot 1 must stay untouched.
    const int64_t slot_elems = int64_t(Hv) * K * V;
    const int64_t slot_stride = k2e31 + 1024;
    rel::Reservation state(size_t((slots - 1) * slot_stride + slot_elems) * 4);
    rel::Reservation ref_state(size_t((slots - 1) * slot_stride + slot_elems) * 8);
    REQUIRE(state.data() != nullptr);
    REQUIRE(ref_state.data() != nullptr);
    std::vector<float> packed_state(size_t(slots * slot_elems), 0.0f);
    float* st = static_cast<float*>(state.data());
    double* rst = static_cast<double*>(ref_state.data());
    for (int32_t s : {0, 2})
        for (int64_t i = 0; i < slot_elems; ++i) {
            const float x = rel::value_at(99, uint64_t(s * slot_elems + i), -0.5f, 0.5f);
            st[s * slot_stride + i] = x;
            rst[s * slot_stride + i] = x;
            packed_state[size_t(s * slot_elems + i)] = x;
        }
    std::vector<float> A_log = {-0.5f, 0.1f, -1.0f, 0.3f}, dt_bias = {0.1f, -0.2f, 0.0f, 0.4f};
    std::vector<float> norm_weight(static_cast<size_t>(V));
    for (int32_t i = 0; i < V; ++i) norm_weight[size_t(i)] = 0.75f + 0.03125f * float(i);
    const std::vector<int32_t> cu_seqlens = {0, 37, int32_t(T)};
    const std::vector<int32_t> state_indices = {2, 0};

    gdn_problem_t p;
    gdn_problem_init(&p);
    p.num_seqs = 2;
    p.num_tokens = T;
    p.num_k_heads = Hk;
    p.num_v_heads = Hv;
    p.head_dim_k = K;
    p.head_dim_v = V;
    p.input_dtype = dtype;
    p.gate_dtype = GDN_DTYPE_F32;
    p.output_dtype = dtype;
    p.num_state_slots = slots;
    p.algorithm = algorithm;
    p.precision = precision;
    p.flags = flags;

    auto tensors_of = [&](bool strided) {
        gdn_tensors_t t;
        gdn_tensors_init(&t);
        auto ptr = [&](Tensor& x) -> void* { return strided ? x.strided.data() : x.packed.data(); };
        t.q = ptr(q), t.k = ptr(k), t.v = ptr(v), t.g = ptr(g), t.beta = ptr(beta), t.z = ptr(z);
        t.out = ptr(out);
        if (strided) {
            t.q_token_stride = q.token_stride, t.q_head_stride = q.head_stride;
            t.k_token_stride = k.token_stride, t.k_head_stride = k.head_stride;
            t.v_token_stride = v.token_stride, t.v_head_stride = v.head_stride;
            t.g_token_stride = g.token_stride, t.g_head_stride = g.head_stride;
            t.beta_token_stride = beta.token_stride, t.beta_head_stride = beta.head_stride;
            t.z_token_stride = z.token_stride, t.z_head_stride = z.head_stride;
            t.out_token_stride = out.token_stride, t.out_head_stride = out.head_stride;
            t.state = st;
            t.state_slot_stride = slot_stride;
        } else {
            t.state = packed_state.data();
        }
        t.cu_seqlens = cu_seqlens.data();
        t.state_indices = state_indices.data();
        t.A_log = A_log.data();
        t.dt_bias = dt_bias.data();
        t.norm_weight = norm_weight.data();
        return t;
    };
    const gdn_tensors_t strided = tensors_of(true), packed = tensors_of(false);

    gdn_caps_t caps;
    gdn_caps_init(&caps);
    REQUIRE(gdn_probe(GDN_BACKEND_CPU, 0, &caps) == GDN_SUCCESS);
    size_t need = 0;
    REQUIRE(gdn_workspace_size(&caps, &p, &need) == GDN_SUCCESS);
    std::vector<unsigned char> ws(need + GDN_WORKSPACE_ALIGNMENT);
    void* w = ws.data() + (GDN_WORKSPACE_ALIGNMENT - reinterpret_cast<uintptr_t>(ws.data()) % GDN_WORKSPACE_ALIGNMENT);

    gdn_path_info_t path_strided, path_packed;
    gdn_path_info_init(&path_strided);
    gdn_path_info_init(&path_packed);
    REQUIRE(gdn_select_path(&caps, &p, &strided, &path_strided) == GDN_SUCCESS);
    REQUIRE(gdn_select_path(&caps, &p, &packed, &path_packed) == GDN_SUCCESS);
    CHECK(path_strided.path == path_packed.path);
    INFO("path: " << path_strided.reason);

    REQUIRE(gdn_chunked_recurrence(&caps, &p, &packed, w, need, nullptr) == GDN_SUCCESS);
    const gdn_status_t st_strided = gdn_chunked_recurrence(&caps, &p, &strided, w, need, nullptr);
    INFO("gdn_last_error: " << gdn_last_error());
    REQUIRE(st_strided == GDN_SUCCESS);

    // The FP64 reference on the strided tensors themselves.
    gdn::Shape shape;
    gdn::Tensors x;
    REQUIRE(gdn::read_problem(&p, &shape) == GDN_SUCCESS);
    REQUIRE(gdn::read_tensors(shape, &strided, &x) == GDN_SUCCESS);
    std::vector<double> ref_out(size_t(T) * Hv * V);
    gdn::ref::run(shape, x, ref_out.data(), rst);

    const size_t es = rel::dtype_bytes(dtype);
    const bool lowp = path_strided.path == GDN_PATH_CHUNKED_LOWP_C16;
    // FP32 paths: the chunked bound of DESIGN.md §5 with room; the FP16
    // operand emulation: its 2% bound; 16-bit outputs add their rounding.
    const double tol = (lowp ? 2e-2 : 1e-5) + (dtype == GDN_DTYPE_BF16 ? 4e-3 : dtype == GDN_DTYPE_F16 ? 5e-4 : 0.0);
    Result r;
    for (int64_t t = 0; t < T; ++t)
        for (int32_t h = 0; h < Hv; ++h) {
            const unsigned char* a = static_cast<const unsigned char*>(out.strided.data()) + out.strided_offset(t, h) * int64_t(es);
            const unsigned char* b = out.packed.data() + out.packed_offset(t, h) * int64_t(es);
            if (std::memcmp(a, b, size_t(V) * es) != 0) {
                FAIL_CHECK("out row (t " << t << ", h " << h << ") at element offset " << out.strided_offset(t, h)
                                         << " differs from the packed run");
            }
            // The elements just outside the row were never written.
            const int64_t after = out.strided_offset(t, h) + V;
            if (after <= out.last_offset(T)) CHECK(gdn::load_element(out.strided.data(), dtype, after) == 0.0f);
            for (int32_t j = 0; j < V; ++j) {
                const double got = gdn::load_element(out.strided.data(), dtype, out.strided_offset(t, h) + j);
                const double want = ref_out[size_t((t * Hv + h) * V + j)];
                r.max_ref = std::max(r.max_ref, std::fabs(want));
                r.max_diff = std::max(r.max_diff, std::fabs(got - want));
            }
        }
    INFO("out: max|diff| " << r.max_diff << ", max|ref| " << r.max_ref);
    CHECK(r.max_diff <= tol * r.max_ref);

    Result s;
    for (int32_t slot : {0, 2})
        for (int64_t i = 0; i < slot_elems; ++i) {
            const float got = st[slot * slot_stride + i];
            const float packed_got = packed_state[size_t(slot * slot_elems + i)];
            if (std::memcmp(&got, &packed_got, 4) != 0)
                FAIL_CHECK("state slot " << slot << " element " << i << ": " << got << " vs packed " << packed_got);
            const double want = rst[slot * slot_stride + i];
            s.max_ref = std::max(s.max_ref, std::fabs(want));
            s.max_diff = std::max(s.max_diff, std::fabs(double(got) - want));
        }
    INFO("state: max|diff| " << s.max_diff << ", max|ref| " << s.max_ref);
    CHECK(s.max_diff <= (lowp ? 2e-2 : 1e-5) * s.max_ref);
    // The slot no sequence names (at 2^31 + 1024) is untouched.
    for (int64_t i = 0; i < slot_elems; ++i)
        if (st[slot_stride + i] != 0.0f) FAIL_CHECK("unused slot 1, element " << i << " written");
}

}  // namespace

TEST_CASE("CPU: element offsets past 2^31 through token strides", "[reliability][offsets64]") {
    for (gdn_dtype_t dtype : {GDN_DTYPE_F32, GDN_DTYPE_BF16})
        for (gdn_algorithm_t algo : {GDN_ALGO_SEQUENTIAL, GDN_ALGO_CHUNKED}) {
            CAPTURE(int(dtype), int(algo));
            check_offsets(Spread::token_strides, dtype, algo, GDN_PRECISION_FP32, 0);
        }
    CAPTURE("lowp");
    check_offsets(Spread::token_strides, GDN_DTYPE_F16, GDN_ALGO_CHUNKED, GDN_PRECISION_FP16, 0);
}

TEST_CASE("CPU: element offsets past 2^31 through head strides", "[reliability][offsets64]") {
    for (gdn_dtype_t dtype : {GDN_DTYPE_F32, GDN_DTYPE_BF16})
        for (gdn_algorithm_t algo : {GDN_ALGO_SEQUENTIAL, GDN_ALGO_CHUNKED}) {
            CAPTURE(int(dtype), int(algo));
            check_offsets(Spread::head_strides, dtype, algo, GDN_PRECISION_FP32, 0);
        }
    check_offsets(Spread::head_strides, GDN_DTYPE_BF16, GDN_ALGO_CHUNKED, GDN_PRECISION_BF16, 0);
}

TEST_CASE("CPU: offsets past 2^31 with every fused feature (z, gate, beta, norm)", "[reliability][offsets64]") {
    const uint32_t all = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS | GDN_FLAG_OUTPUT_NORM;
    for (Spread spread : {Spread::token_strides, Spread::head_strides})
        for (gdn_algorithm_t algo : {GDN_ALGO_SEQUENTIAL, GDN_ALGO_CHUNKED}) {
            CAPTURE(int(spread), int(algo));
            check_offsets(spread, GDN_DTYPE_F32, algo, GDN_PRECISION_FP32, all);
        }
}
