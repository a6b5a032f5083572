// The HIP backend's kernels against the FP64 reference and against each other
// (tests/hip/device.hpp says where they run). Bounds (DESIGN.md §5, the seed's):
//   chunked, FP16 operands: relative RMS of output and final state <= 0.003,
//     max|diff| <= 2% of the reference's max + 1e-5, all finite;
//   sequential, FP32: max|diff| <= 1e-5 of the reference's max;
//   fallbacks: bit-identical to the sequential kernel.
// Every case pre-fills out with NaN and checks the gaps between rows, the
// guards around the buffer, padding rows and untouched slots are unchanged.
// Lines starting "[hip]" are the measurements docs/hip.md records.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dispatch.hpp"
#include "common/numeric.hpp"
#include "common/reference.hpp"
#include "common/validate.hpp"
#include "device.hpp"
#include "hip/launch.hpp"

using gdn::hiptest::device;

namespace {

// ------------------------------------------------------------ a case

struct Spec {
    int64_t T = 64;                  // tokens of all sequences
    int32_t num_seqs = 1;
    std::vector<int32_t> lens;       // per sequence (empty: equal lengths, cu_seqlens NULL)
    int32_t Hk = 1, Hv = 2, K = 128, V = 128;
    gdn_head_mapping_t mapping = GDN_HEADS_GROUPED;
    gdn_dtype_t in = GDN_DTYPE_F16, gate = GDN_DTYPE_F32, out = GDN_DTYPE_F32;
    gdn_state_layout_t layout = GDN_STATE_KV;
    gdn_algorithm_t algo = GDN_ALGO_CHUNKED;
    gdn_precision_t precision = GDN_PRECISION_FP16;
    uint32_t flags = GDN_FLAG_QK_L2NORM;
    int64_t row_stride = 0;          // q|k|v|z of a token in one row of this many elements (0: packed rows, padded to 8)
    float g_lo = -1.0f, g_hi = -0.01f;  // log decay (raw a with GATE_FROM_RAW)
    float beta_lo = 0.0f, beta_hi = 1.0f;
    bool padding_slot = false;       // state_indices, sequence 0 padding (-1), slots shuffled
    bool some_fresh = false;         // start_from_zero for every other sequence
    bool wmma = true;                // caps: the gfx11 stand-in, or a part without WMMA
    uint64_t seed = 1;
    int32_t extra_slots = 0;         // pool slots past the sequences' (GDN_FLAG_TOKEN_STATES)
    std::vector<int32_t> token_slots;  // non-empty: GDN_FLAG_TOKEN_STATES with these per-token slots
};

struct Buffers {  // host copies of everything a call reads and writes
    Spec spec;
    int64_t row = 0;                    // elements per fused input row
    int64_t q_off = 0, k_off = 0, v_off = 0, z_off = 0;
    std::vector<uint8_t> in;            // [T][row] input dtype
    std::vector<uint8_t> g, beta;       // [T][Hv] gate dtype
    std::vector<float> A_log, dt_bias, norm_weight;
    int32_t slots = 1;
    int64_t slot_stride = 0;            // floats, with a gap after each slot
    std::vector<float> state;           // the pool, gaps included
    int64_t out_token_stride = 0;       // Hv*V + 8: a gap after each token
    int64_t out_guard = 64;             // elements before and after the rows
    std::vector<uint8_t> out_init;      // out buffer before the call (sentinels)
    std::vector<int32_t> cu, slot_of;
    std::vector<uint8_t> fresh;
};

size_t esize(gdn_dtype_t t) { return gdn::dtype_size(t); }

void put(std::vector<uint8_t>& buf, gdn_dtype_t t, int64_t i, float x) {
    gdn::store_element(buf.data(), t, i, x);
}
float get(const std::vector<uint8_t>& buf, gdn_dtype_t t, int64_t i) {
    return gdn::load_element(buf.data(), t, i);
}

// A NaN pattern per dtype that no kernel computes.
void put_sentinel(std::vector<uint8_t>& buf, gdn_dtype_t t, int64_t i) {
    if (t == GDN_DTYPE_F32) {
        const uint32_t bits = 0x7fc0abcdu;
        std::memcpy(buf.data() + i * 4, &bits, 4);
    } else {
        const uint16_t bits = t == GDN_DTYPE_F16 ? 0x7e5au : 0x7fa5u;
        std::memcpy(buf.data() + i * 2, &bits, 2);
    }
}

Buffers make_buffers(const Spec& sp) {
    Buffers b;
    b.spec = sp;
    std::mt19937_64 rng(sp.seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto uniform = [&](float lo, float hi) {
        return std::uniform_real_distribution<float>(lo, hi)(rng);
    };
    const int64_t T = sp.T;
    const int64_t qk = int64_t(sp.Hk) * sp.K, vz = int64_t(sp.Hv) * sp.V;
    b.q_off = 0;
    b.k_off = qk;
    b.v_off = 2 * qk;
    b.z_off = 2 * qk + vz;
    const int64_t used = 2 * qk + 2 * vz;
    b.row = sp.row_stride ? sp.row_stride : (used + 7) / 8 * 8;
    REQUIRE(b.row >= used);
    b.in.assign(size_t(T * b.row) * esize(sp.in), 0);
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < used; ++i) {
            float x = normal(rng);
            if (!(sp.flags & GDN_FLAG_QK_L2NORM) && i < 2 * qk) x /= std::sqrt(float(sp.K));  // |k| ~ 1
            put(b.in, sp.in, t * b.row + i, x);
        }
    }
    b.g.assign(size_t(T * sp.Hv) * esize(sp.gate), 0);
    b.beta.assign(size_t(T * sp.Hv) * esize(sp.gate), 0);
    for (int64_t i = 0; i < T * sp.Hv; ++i) {
        put(b.g, sp.gate, i, uniform(sp.g_lo, sp.g_hi));
        const float beta = uniform(sp.beta_lo, sp.beta_hi);
        // logits: b = log(β / (1 − β)), clamped
        const float logit = std::log(std::max(beta, 1e-4f) / std::max(1.0f - beta, 1e-4f));
        put(b.beta, sp.gate, i, (sp.flags & GDN_FLAG_BETA_FROM_LOGITS) ? logit : beta);
    }
    for (int32_t h = 0; h < sp.Hv; ++h) {
        b.A_log.push_back(std::log(uniform(1.0f, 16.0f)));
        b.dt_bias.push_back(uniform(-4.0f, -1.0f));
    }
    for (int32_t v = 0; v < sp.V; ++v) b.norm_weight.push_back(1.0f + 0.1f * normal(rng));

    // sequences, slots
    if (!sp.lens.empty()) {
        REQUIRE(int32_t(sp.lens.size()) == sp.num_seqs);
        b.cu.push_back(0);
        for (int32_t l : sp.lens) b.cu.push_back(b.cu.back() + l);
        REQUIRE(b.cu.back() == T);
    }
    b.slots = sp.num_seqs + (sp.padding_slot ? 2 : 0) + sp.extra_slots;
    if (sp.padding_slot) {
        // sequence 0 is padding; the others take the slots in reverse order
        for (int32_t s = 0; s < sp.num_seqs; ++s) b.slot_of.push_back(s == 0 ? -1 : b.slots - 1 - s);
    }
    if (sp.some_fresh)
        for (int32_t s = 0; s < sp.num_seqs; ++s) b.fresh.push_back(s % 2 == 1);
    b.slot_stride = int64_t(sp.Hv) * sp.K * sp.V + 64;
    b.state.assign(size_t(b.slots * b.slot_stride), 0.0f);
    for (int32_t s = 0; s < b.slots; ++s)
        for (int64_t i = 0; i < b.slot_stride; ++i)
            b.state[size_t(s * b.slot_stride + i)] =
                i < int64_t(sp.Hv) * sp.K * sp.V ? 0.1f * normal(rng) : gdn::bits_to_float(0x7fc0dcbau);

    b.out_token_stride = int64_t(sp.Hv) * sp.V + 8;
    const int64_t out_elems = 2 * b.out_guard + T * b.out_token_stride;
    b.out_init.assign(size_t(out_elems) * esize(sp.out), 0);
    for (int64_t i = 0; i < out_elems; ++i) put_sentinel(b.out_init, sp.out, i);
    return b;
}

gdn_problem_t make_problem(const Spec& sp) {
    gdn_problem_t p;
    gdn_problem_init(&p);
    p.num_seqs = sp.num_seqs;
    p.num_tokens = sp.T;
    p.num_k_heads = sp.Hk;
    p.num_v_heads = sp.Hv;
    p.head_dim_k = sp.K;
    p.head_dim_v = sp.V;
    p.head_mapping = sp.mapping;
    p.input_dtype = sp.in;
    p.gate_dtype = sp.gate;
    p.output_dtype = sp.out;
    p.state_layout = sp.layout;
    p.num_state_slots = sp.num_seqs + (sp.padding_slot ? 2 : 0) + sp.extra_slots;
    p.algorithm = sp.algo;
    p.precision = sp.precision;
    p.flags = sp.flags | (sp.token_slots.empty() ? 0u : GDN_FLAG_TOKEN_STATES);
    if (!sp.lens.empty()) p.max_seqlen = *std::max_element(sp.lens.begin(), sp.lens.end());
    return p;
}

// Pointers into one allocation per buffer (host or device).
struct Ptrs {
    const void* in;
    const void* g;
    const void* beta;
    void* out;  // first row (after the guard)
    float* state;
    const int32_t* cu;
    const int32_t* slot_of;
    const uint8_t* fresh;
    const float* A_log;
    const float* dt_bias;
    const float* norm_weight;
    const int32_t* token_slots;
};

gdn_tensors_t make_tensors(const Buffers& b, const Ptrs& p) {
    const Spec& sp = b.spec;
    const size_t es = esize(sp.in);
    const char* in = static_cast<const char*>(p.in);
    gdn_tensors_t t;
    gdn_tensors_init(&t);
    t.q = in + b.q_off * es; t.q_token_stride = b.row; t.q_head_stride = sp.K;
    t.k = in + b.k_off * es; t.k_token_stride = b.row; t.k_head_stride = sp.K;
    t.v = in + b.v_off * es; t.v_token_stride = b.row; t.v_head_stride = sp.V;
    t.g = p.g;
    t.beta = p.beta;
    t.out = p.out; t.out_token_stride = b.out_token_stride; t.out_head_stride = sp.V;
    if (sp.flags & GDN_FLAG_OUTPUT_NORM) {
        t.z = in + b.z_off * es; t.z_token_stride = b.row; t.z_head_stride = sp.V;
        t.norm_weight = p.norm_weight;
    }
    t.state = p.state;
    t.state_slot_stride = b.slot_stride;
    t.cu_seqlens = b.cu.empty() ? nullptr : p.cu;
    t.state_indices = b.slot_of.empty() ? nullptr : p.slot_of;
    t.start_from_zero = b.fresh.empty() ? nullptr : p.fresh;
    t.token_state_indices = sp.token_slots.empty() ? nullptr : p.token_slots;
    if (sp.flags & GDN_FLAG_GATE_FROM_RAW) {
        t.A_log = p.A_log;
        t.dt_bias = p.dt_bias;
    }
    return t;
}

struct Result {
    gdn_status_t status = GDN_ERROR_INTERNAL;
    std::string error;
    gdn::PathChoice path;
    std::vector<uint8_t> out;  // the whole out buffer, guards included
    std::vector<float> state;  // the whole pool, gaps included
};

// Runs the case on the device (state and out start as in the buffers).
Result run_on_device(const Buffers& b, const gdn_caps_t* caps_override = nullptr) {
    auto& d = device();
    struct Alloc {
        void* p;
        explicit Alloc(size_t n) : p(device().alloc(n)) {}
        ~Alloc() { device().release(p); }
    };
    auto upload = [&](const Alloc& a, const void* src, size_t n) {
        if (n) d.upload(a.p, src, n);
    };
    const Spec& sp = b.spec;
    Alloc in(b.in.size()), g(b.g.size()), beta(b.beta.size()), out(b.out_init.size()),
        state(b.state.size() * 4), cu(b.cu.size() * 4 + 4), slot_of(b.slot_of.size() * 4 + 4),
        fresh(b.fresh.size() + 1), A_log(b.A_log.size() * 4), dt_bias(b.dt_bias.size() * 4),
        norm_weight(b.norm_weight.size() * 4), token_slots(sp.token_slots.size() * 4 + 4);
    upload(in, b.in.data(), b.in.size());
    upload(g, b.g.data(), b.g.size());
    upload(beta, b.beta.data(), b.beta.size());
    upload(out, b.out_init.data(), b.out_init.size());
    upload(state, b.state.data(), b.state.size() * 4);
    upload(cu, b.cu.data(), b.cu.size() * 4);
    upload(slot_of, b.slot_of.data(), b.slot_of.size() * 4);
    upload(fresh, b.fresh.data(), b.fresh.size());
    upload(A_log, b.A_log.data(), b.A_log.size() * 4);
    upload(dt_bias, b.dt_bias.data(), b.dt_bias.size() * 4);
    upload(norm_weight, b.norm_weight.data(), b.norm_weight.size() * 4);
    upload(token_slots, sp.token_slots.data(), sp.token_slots.size() * 4);
    Ptrs p{in.p,
           g.p,
           beta.p,
           static_cast<char*>(out.p) + b.out_guard * esize(sp.out),
           static_cast<float*>(state.p),
           static_cast<const int32_t*>(cu.p),
           static_cast<const int32_t*>(slot_of.p),
           static_cast<const uint8_t*>(fresh.p),
           static_cast<const float*>(A_log.p),
           static_cast<const float*>(dt_bias.p),
           static_cast<const float*>(norm_weight.p),
           static_cast<const int32_t*>(token_slots.p)};
    const gdn_problem_t problem = make_problem(sp);
    const gdn_tensors_t tensors = make_tensors(b, p);
    const gdn_caps_t caps = caps_override ? *caps_override : d.caps(sp.wmma);
    Result r;
    r.status = d.run(caps, problem, tensors, &r.path);
    r.error = gdn_last_error();
    r.out.resize(b.out_init.size());
    r.state.resize(b.state.size());
    d.download(r.out.data(), out.p, r.out.size());
    d.download(r.state.data(), state.p, r.state.size() * 4);
    return r;
}

struct Reference {
    std::vector<double> out;    // [T][Hv][V]
    std::vector<double> state;  // the pool
};

Reference run_reference(const Buffers& b) {
    const Spec& sp = b.spec;
    gdn::Shape s;
    const gdn_problem_t problem = make_problem(sp);
    REQUIRE(gdn::read_problem(&problem, &s) == GDN_SUCCESS);
    std::vector<uint8_t> out_scratch(b.out_init);
    Ptrs p{b.in.data(), b.g.data(), b.beta.data(),
           out_scratch.data() + b.out_guard * esize(sp.out), const_cast<float*>(b.state.data()),
           b.cu.data(), b.slot_of.data(), b.fresh.data(), b.A_log.data(), b.dt_bias.data(),
           b.norm_weight.data(), sp.token_slots.data()};
    const gdn_tensors_t tensors = make_tensors(b, p);
    gdn::Tensors t;
    REQUIRE(gdn::read_tensors(s, &tensors, &t) == GDN_SUCCESS);
    Reference r;
    r.out.assign(size_t(sp.T * sp.Hv * sp.V), std::nan(""));
    r.state.assign(b.state.begin(), b.state.end());
    gdn::ref::run(s, t, r.out.data(), r.state.data());
    return r;
}

// Which tokens belong to a padding sequence (their rows must stay untouched).
std::vector<bool> padding_tokens(const Buffers& b) {
    const Spec& sp = b.spec;
    std::vector<bool> pad(size_t(sp.T), false);
    if (b.slot_of.empty()) return pad;
    for (int32_t s = 0; s < sp.num_seqs; ++s) {
        if (b.slot_of[size_t(s)] >= 0) continue;
        const int64_t bos = b.cu.empty() ? s * (sp.T / sp.num_seqs) : b.cu[size_t(s)];
        const int64_t eos = b.cu.empty() ? bos + sp.T / sp.num_seqs : b.cu[size_t(s + 1)];
        for (int64_t t = bos; t < eos; ++t) pad[size_t(t)] = true;
    }
    return pad;
}

// The out rows as floats [T][Hv][V]; checks every byte outside the rows
// and every padding row kept its sentinel. Returns the first violation.
std::string unpack_out(const Buffers& b, const Result& r, std::vector<float>* rows) {
    const Spec& sp = b.spec;
    const size_t es = esize(sp.out);
    const std::vector<bool> pad = padding_tokens(b);
    std::vector<bool> is_row(b.out_init.size() / es, false);
    rows->assign(size_t(sp.T * sp.Hv * sp.V), 0.0f);
    for (int64_t t = 0; t < sp.T; ++t)
        for (int64_t h = 0; h < sp.Hv; ++h)
            for (int64_t v = 0; v < sp.V; ++v) {
                const int64_t i = b.out_guard + t * b.out_token_stride + h * sp.V + v;
                if (!pad[size_t(t)]) is_row[size_t(i)] = true;
                (*rows)[size_t((t * sp.Hv + h) * sp.V + v)] = get(r.out, sp.out, i);
            }
    for (size_t i = 0; i < is_row.size(); ++i)
        if (!is_row[i] && std::memcmp(r.out.data() + i * es, b.out_init.data() + i * es, es) != 0)
            return "out element " + std::to_string(i) + " outside the written rows changed";
    return "";
}

// Every slot element outside the used slots' heads is unchanged.
std::string check_state_guards(const Buffers& b, const Result& r) {
    const Spec& sp = b.spec;
    std::vector<bool> used(size_t(b.slots), b.slot_of.empty());
    if (b.slot_of.empty())
        for (int32_t s = sp.num_seqs; s < b.slots; ++s) used[size_t(s)] = false;
    for (int32_t s : b.slot_of)
        if (s >= 0) used[size_t(s)] = true;
    const int64_t head_state = int64_t(sp.Hv) * sp.K * sp.V;
    for (int32_t s = 0; s < b.slots; ++s)
        for (int64_t i = 0; i < b.slot_stride; ++i) {
            const size_t at = size_t(s * b.slot_stride + i);
            if ((!used[size_t(s)] || i >= head_state) &&
                std::memcmp(&r.state[at], &b.state[at], 4) != 0)
                return "state element " + std::to_string(at) + " (slot " + std::to_string(s) +
                       ") should be untouched";
        }
    return "";
}

struct Err {
    double rel_rms = 0, max_abs = 0, max_ref = 0;
    bool finite = true;
    int64_t worst = -1;
};

Err compare(const std::vector<float>& got, const std::vector<double>& want, const std::vector<bool>* skip) {
    Err e;
    double se = 0, sr = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (skip && (*skip)[i]) continue;
        if (!std::isfinite(got[i])) e.finite = false;
        const double d = std::fabs(double(got[i]) - want[i]);
        se += d * d;
        sr += want[i] * want[i];
        if (d > e.max_abs || !std::isfinite(d)) {
            e.max_abs = d;
            e.worst = int64_t(i);
        }
        e.max_ref = std::max(e.max_ref, std::fabs(want[i]));
    }
    e.rel_rms = sr > 0 ? std::sqrt(se / sr) : std::sqrt(se);
    return e;
}

bool fp16_bounds(const Err& e) {
    return e.finite && e.rel_rms <= 0.003 && e.max_abs <= 0.02 * e.max_ref + 1e-5;
}

// The state of the used slots' heads, as a flat vector, and its mask.
void state_views(const Buffers& b, const std::vector<float>& pool, const std::vector<double>& ref_pool,
                 std::vector<float>* got, std::vector<double>* want) {
    const Spec& sp = b.spec;
    const int64_t head_state = int64_t(sp.Hv) * sp.K * sp.V;
    for (int32_t seq = 0; seq < sp.num_seqs; ++seq) {
        const int32_t slot = b.slot_of.empty() ? seq : b.slot_of[size_t(seq)];
        if (slot < 0) continue;
        for (int64_t i = 0; i < head_state; ++i) {
            got->push_back(pool[size_t(slot * b.slot_stride + i)]);
            want->push_back(ref_pool[size_t(slot * b.slot_stride + i)]);
        }
    }
}

struct Checked {
    Err out, state;
    std::string guard_problem;
};

// Runs on the device and against the FP64 reference; reports both errors.
Checked check_against_reference(const Buffers& b, const Result& r, const char* label) {
    const Reference ref = run_reference(b);
    Checked c;
    std::vector<float> rows;
    c.guard_problem = unpack_out(b, r, &rows);
    if (c.guard_problem.empty()) c.guard_problem = check_state_guards(b, r);
    std::vector<bool> pad_elems(rows.size(), false);
    const std::vector<bool> pad = padding_tokens(b);
    const int64_t row_elems = int64_t(b.spec.Hv) * b.spec.V;
    for (size_t i = 0; i < rows.size(); ++i) pad_elems[i] = pad[i / size_t(row_elems)];
    c.out = compare(rows, ref.out, &pad_elems);
    std::vector<float> sg;
    std::vector<double> sw;
    state_views(b, r.state, ref.state, &sg, &sw);
    c.state = compare(sg, sw, nullptr);
    std::printf("[hip] %-44s T=%-6lld path=%d out: rel_rms %.2e max %.2e (ref max %.2e)  state: rel_rms "
                "%.2e max %.2e (ref max %.2e)\n",
                label, static_cast<long long>(b.spec.T), int(r.path.path), c.out.rel_rms, c.out.max_abs,
                c.out.max_ref, c.state.rel_rms, c.state.max_abs, c.state.max_ref);
    return c;
}

void require_fp16_bounds(const Buffers& b, const Result& r, const char* label) {
    INFO(label << ": " << r.error);
    REQUIRE(r.status == GDN_SUCCESS);
    REQUIRE(r.path.path == GDN_PATH_CHUNKED_LOWP_C16);
    const Checked c = check_against_reference(b, r, label);
    INFO("guards: " << c.guard_problem);
    CHECK(c.guard_problem.empty());
    INFO("out: rel_rms " << c.out.rel_rms << ", max|diff| " << c.out.max_abs << " at " << c.out.worst
                         << ", ref max " << c.out.max_ref << ", finite " << c.out.finite);
    CHECK(fp16_bounds(c.out));
    INFO("state: rel_rms " << c.state.rel_rms << ", max|diff| " << c.state.max_abs << " at "
                           << c.state.worst << ", ref max " << c.state.max_ref);
    CHECK(fp16_bounds(c.state));
    CHECK(device().wmma_operand_faults() == 0);
}

// Bits of out rows and used state, for bit-identity; the first difference.
std::string first_bit_difference(const Result& a, const Result& b) {
    if (a.out.size() != b.out.size() || a.state.size() != b.state.size()) return "sizes differ";
    for (size_t i = 0; i < a.out.size(); ++i)
        if (a.out[i] != b.out[i]) return "out byte " + std::to_string(i) + " differs";
    for (size_t i = 0; i < a.state.size(); ++i)
        if (std::memcmp(&a.state[i], &b.state[i], 4) != 0)
            return "state element " + std::to_string(i) + ": " + std::to_string(a.state[i]) + " vs " +
                   std::to_string(b.state[i]);
    return "";
}

// Buffers for `sp` (sp.T tokens, one sequence) whose input rows and per-head
// parameters are b's from token `first` on; the pool is make_buffers'.
Buffers rows_of(const Buffers& b, const Spec& sp, int64_t first) {
    Buffers pb = make_buffers(sp);
    REQUIRE(pb.row == b.row);
    const size_t es = esize(sp.in), gs = esize(sp.gate);
    std::memcpy(pb.in.data(), b.in.data() + size_t(first * b.row) * es, pb.in.size());
    std::memcpy(pb.g.data(), b.g.data() + size_t(first * sp.Hv) * gs, pb.g.size());
    std::memcpy(pb.beta.data(), b.beta.data() + size_t(first * sp.Hv) * gs, pb.beta.size());
    pb.A_log = b.A_log;
    pb.dt_bias = b.dt_bias;
    pb.norm_weight = b.norm_weight;
    return pb;
}

Spec sequential_of(Spec sp) {
    sp.algo = GDN_ALGO_SEQUENTIAL;
    return sp;
}

}  // namespace

// ------------------------------------------------------------ WMMA layout

TEST_CASE("hip: the WMMA fragment layout gives a plain matrix product on random and unit tiles", "[hip]") {
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    uint16_t A[256], B[256];
    float C[256], D[256];
    auto product_error = [&](double* worst_rel) {
        double worst = 0;
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 16; ++j) {
                double want = C[i * 16 + j], mag = std::fabs(C[i * 16 + j]);
                for (int k = 0; k < 16; ++k) {
                    const double t = double(gdn::half_to_float(A[i * 16 + k])) * gdn::half_to_float(B[k * 16 + j]);
                    want += t;
                    mag += std::fabs(t);
                }
                worst = std::max(worst, std::fabs(D[i * 16 + j] - want) / (mag + 1e-30));
            }
        *worst_rel = worst;
    };
    // Unit tiles: A = E(i,k), B = E(k,j) -> D = E(i,j) + C exactly; a wrong
    // lane or element order moves the 1.
    for (int trial = 0; trial < 24; ++trial) {
        const int i = trial % 16, k = (trial * 5) % 16, j = (trial * 11) % 16;
        std::fill(A, A + 256, uint16_t(0));
        std::fill(B, B + 256, uint16_t(0));
        std::fill(C, C + 256, 0.0f);
        A[i * 16 + k] = gdn::float_to_half(1.0f);
        B[k * 16 + j] = gdn::float_to_half(1.0f);
        const gdn_status_t st = device().wmma_tile(A, B, C, D);
        if (st == GDN_ERROR_NOT_SUPPORTED) {  // a native part without gfx11 WMMA: nothing to test
            WARN("not applicable: " << device().name() << " has no gfx11 WMMA");
            return;
        }
        REQUIRE(st == GDN_SUCCESS);
        for (int e = 0; e < 256; ++e) {
            INFO("unit tile (" << i << "," << k << ")x(" << k << "," << j << "): D[" << e / 16 << "]["
                               << e % 16 << "] = " << D[e]);
            REQUIRE(D[e] == (e == i * 16 + j ? 1.0f : 0.0f));
        }
    }
    double worst_all = 0;
    for (int trial = 0; trial < 200; ++trial) {
        for (int e = 0; e < 256; ++e) {
            A[e] = gdn::float_to_half(u(rng));
            B[e] = gdn::float_to_half(u(rng));
            C[e] = u(rng);
        }
        REQUIRE(device().wmma_tile(A, B, C, D) == GDN_SUCCESS);
        double worst = 0;
        product_error(&worst);
        worst_all = std::max(worst_all, worst);
        // FP16 products are exact in FP32; 17 FP32 additions: <= 17 * 2^-24 relative to Σ|terms|.
        INFO("random tile " << trial << ": worst error / Σ|terms| = " << worst);
        REQUIRE(worst <= 17 * 5.97e-8);
    }
    std::printf("[hip] WMMA tile vs double product (200 random tiles): worst |error| / sum|terms| = %.2e\n",
                worst_all);
    CHECK(device().wmma_operand_faults() == 0);
}

// ------------------------------------------------------------ sequential

TEST_CASE("hip: the sequential kernel matches the FP64 reference for K and V in 64 and 128 with every feature", "[hip]") {
    struct Dims {
        int32_t K, V;
    };
    const Dims dims[] = {{128, 128}, {64, 64}, {64, 128}, {128, 64}};
    const int64_t T = device().fast() ? 300 : 40;
    int n = 0;
    for (const Dims& d : dims) {
        for (int variant = 0; variant < 3; ++variant) {
            Spec sp;
            sp.algo = GDN_ALGO_SEQUENTIAL;
            sp.K = d.K;
            sp.V = d.V;
            sp.T = T;
            sp.seed = uint64_t(100 + n++);
            if (variant == 0) {  // plain, f32 in/out
                sp.in = GDN_DTYPE_F32;
                sp.flags = 0;
            } else if (variant == 1) {  // every feature, bf16 in, gate bf16, VK, interleaved
                sp.in = GDN_DTYPE_BF16;
                sp.gate = GDN_DTYPE_BF16;
                sp.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS |
                           GDN_FLAG_OUTPUT_NORM;
                sp.g_lo = -2.0f;
                sp.g_hi = 2.0f;
                sp.layout = GDN_STATE_VK;
                sp.mapping = GDN_HEADS_INTERLEAVED;
                sp.Hk = 2;
                sp.Hv = 4;
            } else {  // decode batch: 1 token per sequence, padding slot, fresh starts, f16 out
                sp.T = 6;
                sp.num_seqs = 6;
                sp.padding_slot = true;
                sp.some_fresh = true;
                sp.out = GDN_DTYPE_F16;
                sp.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_OUTPUT_NORM;
            }
            const Buffers b = make_buffers(sp);
            const Result r = run_on_device(b);
            INFO("K " << d.K << " V " << d.V << " variant " << variant << ": " << r.error);
            REQUIRE(r.status == GDN_SUCCESS);
            REQUIRE(r.path.path == GDN_PATH_SEQUENTIAL);
            const std::string label = "sequential K=" + std::to_string(d.K) + " V=" + std::to_string(d.V) +
                                      " variant " + std::to_string(variant);
            const Checked c = check_against_reference(b, r, label.c_str());
            INFO("guards: " << c.guard_problem);
            CHECK(c.guard_problem.empty());
            // f16 output: the FP32 bound plus half an f16 ulp of the value.
            const double out_bound = sp.out == GDN_DTYPE_F16 ? 1e-3 : 1e-5;
            INFO("out max|diff| " << c.out.max_abs << " at " << c.out.worst << " ref max " << c.out.max_ref);
            CHECK(c.out.finite);
            CHECK(c.out.max_abs <= out_bound * c.out.max_ref + 1e-7);
            INFO("state max|diff| " << c.state.max_abs << " ref max " << c.state.max_ref);
            CHECK(c.state.max_abs <= 1e-5 * c.state.max_ref + 1e-7);
        }
    }
}

#if defined(GDN_HIP_TEST_WAVE64)
TEST_CASE("hip: the sequential kernel with 64-lane waves matches the FP64 reference", "[hip]") {
    device().set_wave64(true);
    struct Reset {
        ~Reset() { device().set_wave64(false); }
    } reset;
    int n = 0;
    for (int32_t K : {64, 128})
        for (int32_t V : {64, 128}) {
            Spec sp;
            sp.algo = GDN_ALGO_SEQUENTIAL;
            sp.K = K;
            sp.V = V;
            sp.T = 24;
            sp.Hk = 1;
            sp.Hv = 2;
            sp.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_OUTPUT_NORM | GDN_FLAG_BETA_FROM_LOGITS;
            sp.seed = uint64_t(900 + n++);
            const Buffers b = make_buffers(sp);
            const Result r = run_on_device(b);
            REQUIRE(r.status == GDN_SUCCESS);
            const std::string label = "sequential wave64 K=" + std::to_string(K) + " V=" + std::to_string(V);
            const Checked c = check_against_reference(b, r, label.c_str());
            CHECK(c.guard_problem.empty());
            CHECK(c.out.max_abs <= 1e-5 * c.out.max_ref + 1e-7);
            CHECK(c.state.max_abs <= 1e-5 * c.state.max_ref + 1e-7);
        }
}
#endif

// ------------------------------------------------------------ chunked

TEST_CASE("hip: the chunked path meets the FP16 bounds for T up to 16385 around the 64-token edge and 16-token remainders", "[hip]") {
    std::vector<int64_t> Ts = {1, 15, 16, 17, 31, 33, 47};
    for (int64_t t = 48; t <= 80; ++t) Ts.push_back(t);  // every remainder around the 64-token edge
    for (int64_t t : {96, 127, 128, 129, 255, 257})
        Ts.push_back(t);
    if (device().fast())
        for (int64_t t : {1000, 2047, 2048, 2049, 4099, 8192, 16385}) Ts.push_back(t);
    else  // host fibers: the edges only
        Ts = {1, 15, 16, 17, 48, 63, 64, 65, 79, 80, 81, 129, 257};
    for (int64_t T : Ts) {
        Spec sp;
        sp.T = T;
        sp.seed = uint64_t(T);
        const Buffers b = make_buffers(sp);
        const Result r = run_on_device(b);
        require_fp16_bounds(b, r, "chunked f16, L2 norm");
    }
    // auto switches at the 64-token edge
    for (int64_t T : {int64_t(63), int64_t(64)}) {
        Spec sp;
        sp.T = T;
        sp.algo = GDN_ALGO_AUTO;
        const Buffers b = make_buffers(sp);
        const Result r = run_on_device(b);
        REQUIRE(r.status == GDN_SUCCESS);
        INFO("T = " << T << ": " << r.path.reason);
        CHECK(r.path.path == (T < 64 ? GDN_PATH_SEQUENTIAL : GDN_PATH_CHUNKED_LOWP_C16));
    }
}

TEST_CASE("hip: the chunked path with empty sequences (T = 0) in a batch", "[hip]") {
    Spec sp;
    sp.num_seqs = 4;
    sp.lens = {0, 70, 0, 33};
    sp.T = 103;
    sp.some_fresh = true;  // the empty fresh sequence's slot becomes zero
    const Buffers b = make_buffers(sp);
    const Result r = run_on_device(b);
    require_fp16_bounds(b, r, "chunked, empty sequences");
}

TEST_CASE("hip: the chunked path reads fused-projection rows of stride 6144 and 6152 and 6145 falls back bit-identically", "[hip]") {
    const int64_t T = device().fast() ? 300 : 80;
    for (int64_t stride : {int64_t(6144), int64_t(6152)}) {
        for (gdn_dtype_t in : {GDN_DTYPE_F16, GDN_DTYPE_BF16}) {
            Spec sp;
            sp.T = T;
            sp.row_stride = stride;
            sp.in = in;
            sp.Hk = 2;
            sp.Hv = 6;  // group 3: the prep's 4-wave block
            sp.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_OUTPUT_NORM;
            const Buffers b = make_buffers(sp);
            const Result r = run_on_device(b);
            require_fp16_bounds(b, r, stride == 6144 ? "chunked, row stride 6144" : "chunked, row stride 6152");
        }
    }
    Spec sp;
    sp.T = T;
    sp.row_stride = 6145;
    sp.algo = GDN_ALGO_AUTO;
    const Buffers b = make_buffers(sp);
    const Result r = run_on_device(b);
    REQUIRE(r.status == GDN_SUCCESS);
    INFO(r.path.reason);
    CHECK(r.path.path == GDN_PATH_SEQUENTIAL);
    CHECK(std::string(r.path.reason).find("divisible by 8") != std::string::npos);
    const Result seq = run_on_device(make_buffers(sequential_of(sp)));
    REQUIRE(seq.status == GDN_SUCCESS);
    INFO(first_bit_difference(r, seq));
    CHECK(first_bit_difference(r, seq).empty());
    // forced chunked at that stride: an error naming the stride, nothing written
    Spec forced = sp;
    forced.algo = GDN_ALGO_CHUNKED;
    const Buffers fb = make_buffers(forced);
    const Result fr = run_on_device(fb);
    CHECK(fr.status == GDN_ERROR_NOT_SUPPORTED);
    CHECK(fr.error.find("6145") != std::string::npos);
    CHECK(fr.out == fb.out_init);
}

TEST_CASE("hip: the chunked path with weak decay and with beta = 0", "[hip]") {
    const int64_t T = device().fast() ? 4099 : 100;
    {
        Spec sp;
        sp.T = T;
        sp.g_lo = -1e-3f;
        sp.g_hi = 0.0f;
        const Buffers b = make_buffers(sp);
        require_fp16_bounds(b, run_on_device(b), "chunked, weak decay");
    }
    {
        Spec sp;  // β = 0: the state only decays (slowly, so it stays O(1)); out = e^γ S0ᵀq
        sp.T = T;
        sp.beta_lo = 0.0f;
        sp.beta_hi = 0.0f;
        sp.g_lo = -0.01f;
        sp.g_hi = 0.0f;
        const Buffers b = make_buffers(sp);
        require_fp16_bounds(b, run_on_device(b), "chunked, beta = 0");
    }
}

TEST_CASE("hip: a request split at 129 + 128 tokens with the state carried equals the unsplit one", "[hip]") {
    Spec whole;
    whole.T = 257;
    whole.seed = 7;
    const Buffers b = make_buffers(whole);
    const Result r = run_on_device(b);
    require_fp16_bounds(b, r, "chunked, 257 tokens unsplit");

    // The same tokens in two calls: 129, then 128 continuing from its state.
    auto part = [&](int64_t first, int64_t count, const std::vector<float>& state_in) {
        Spec sp = whole;
        sp.T = count;
        Buffers pb = rows_of(b, sp, first);
        pb.state = state_in;
        return std::make_pair(pb, run_on_device(pb));
    };
    const auto first = part(0, 129, b.state);
    REQUIRE(first.second.status == GDN_SUCCESS);
    REQUIRE(first.second.path.path == GDN_PATH_CHUNKED_LOWP_C16);
    const auto second = part(129, 128, first.second.state);
    REQUIRE(second.second.status == GDN_SUCCESS);
    // split output rows and final state vs the unsplit call's, with the bounds
    std::vector<float> whole_rows, rows1, rows2;
    REQUIRE(unpack_out(b, r, &whole_rows).empty());
    REQUIRE(unpack_out(first.first, first.second, &rows1).empty());
    REQUIRE(unpack_out(second.first, second.second, &rows2).empty());
    std::vector<float> split_rows(rows1);
    split_rows.insert(split_rows.end(), rows2.begin(), rows2.end());
    const std::vector<double> whole_d(whole_rows.begin(), whole_rows.end());
    const Err eo = compare(split_rows, whole_d, nullptr);
    std::vector<float> sg;
    std::vector<double> sw;
    state_views(b, second.second.state, std::vector<double>(r.state.begin(), r.state.end()), &sg, &sw);
    const Err es = compare(sg, sw, nullptr);
    std::printf("[hip] split 129 + 128 vs unsplit 257: out rel_rms %.2e max %.2e, state rel_rms %.2e max %.2e\n",
                eo.rel_rms, eo.max_abs, es.rel_rms, es.max_abs);
    CHECK(fp16_bounds(eo));
    CHECK(fp16_bounds(es));
    // and the split run against the FP64 reference of the whole request
    const Reference ref = run_reference(b);
    const Err eref = compare(split_rows, ref.out, nullptr);
    CHECK(fp16_bounds(eref));
}

TEST_CASE("hip: the fused output norm and z gate equal the CPU epilogue applied to the unfused output", "[hip]") {
    for (gdn_algorithm_t algo : {GDN_ALGO_CHUNKED, GDN_ALGO_SEQUENTIAL}) {
        Spec plain;
        plain.T = device().fast() ? 200 : 40;
        plain.algo = algo;
        plain.Hk = 2;
        plain.Hv = 4;
        const Buffers bp = make_buffers(plain);
        const Result rp = run_on_device(bp);
        Spec normed = plain;
        normed.flags |= GDN_FLAG_OUTPUT_NORM;
        const Buffers bn = make_buffers(normed);  // the same inputs (same seed), plus z and w
        const Result rn = run_on_device(bn);
        REQUIRE(rp.status == GDN_SUCCESS);
        REQUIRE(rn.status == GDN_SUCCESS);
        REQUIRE(rn.path.path == rp.path.path);
        std::vector<float> o, out;
        REQUIRE(unpack_out(bp, rp, &o).empty());
        REQUIRE(unpack_out(bn, rn, &out).empty());
        // src/common/cpu_kernels.hpp: out = o · (1 / sqrt(Σo²/V + eps)) · w ⊙ silu(z)
        double worst = 0;
        for (int64_t t = 0; t < plain.T; ++t)
            for (int32_t h = 0; h < plain.Hv; ++h) {
                const float* orow = &o[size_t((t * plain.Hv + h) * plain.V)];
                float ss = 0.0f;
                for (int32_t v = 0; v < plain.V; ++v) ss += orow[v] * orow[v];
                const float inv_rms = 1.0f / std::sqrt(ss / float(plain.V) + 1e-6f);
                for (int32_t v = 0; v < plain.V; ++v) {
                    const float z = get(bn.in, normed.in, t * bn.row + bn.z_off + h * plain.V + v);
                    const float want = orow[v] * inv_rms * bn.norm_weight[size_t(v)] * (z / (1.0f + std::exp(-z)));
                    const float got = out[size_t((t * plain.Hv + h) * plain.V + v)];
                    worst = std::max(worst, double(std::fabs(got - want)) / (std::fabs(want) + 1e-3));
                }
            }
        std::printf("[hip] fused norm+gate vs CPU epilogue (%s): worst |diff| / (|want| + 1e-3) = %.2e\n",
                    algo == GDN_ALGO_CHUNKED ? "chunked" : "sequential", worst);
        CHECK(worst <= 2e-5);
        if (algo == GDN_ALGO_CHUNKED) require_fp16_bounds(bn, rn, "chunked, output norm");
    }
}

TEST_CASE("hip: the chunked path with every feature - dtypes and VK state and interleaved heads and a varlen batch with padding and fresh starts", "[hip]") {
    const bool fast = device().fast();
    struct Variant {
        const char* label;
        gdn_dtype_t in, gate, out;
        uint32_t flags;
        gdn_state_layout_t layout;
        gdn_head_mapping_t mapping;
        int32_t Hk, Hv;
    };
    const uint32_t all = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS |
                         GDN_FLAG_OUTPUT_NORM;
    const Variant variants[] = {
        {"f32 in, f32 out, no flags", GDN_DTYPE_F32, GDN_DTYPE_F32, GDN_DTYPE_F32, 0, GDN_STATE_KV,
         GDN_HEADS_GROUPED, 1, 1},
        {"bf16 in, bf16 gates, bf16 out, all flags, VK", GDN_DTYPE_BF16, GDN_DTYPE_BF16, GDN_DTYPE_BF16, all,
         GDN_STATE_VK, GDN_HEADS_GROUPED, 2, 4},
        {"f16 in, f16 out, all flags, interleaved", GDN_DTYPE_F16, GDN_DTYPE_F32, GDN_DTYPE_F16, all,
         GDN_STATE_KV, GDN_HEADS_INTERLEAVED, 2, 6},
        {"f32 in, bf16 out, all flags, group 8", GDN_DTYPE_F32, GDN_DTYPE_F32, GDN_DTYPE_BF16, all,
         GDN_STATE_KV, GDN_HEADS_GROUPED, 1, 8},
    };
    int n = 0;
    for (const Variant& v : variants) {
        Spec sp;
        sp.in = v.in;
        sp.gate = v.gate;
        sp.out = v.out;
        sp.flags = v.flags;
        sp.layout = v.layout;
        sp.mapping = v.mapping;
        sp.Hk = v.Hk;
        sp.Hv = v.Hv;
        sp.seed = uint64_t(500 + n++);
        if (v.flags & GDN_FLAG_GATE_FROM_RAW) {  // raw a: softplus(a + dt_bias) spans both branches
            sp.g_lo = -3.0f;
            sp.g_hi = 30.0f;
        }
        // varlen batch: padding sequence 0, fresh starts, lengths across the chunk edges
        sp.num_seqs = 5;
        sp.lens = fast ? std::vector<int32_t>{37, 300, 0, 65, 129} : std::vector<int32_t>{17, 70, 0, 33, 16};
        sp.T = 0;
        for (int32_t l : sp.lens) sp.T += l;
        sp.padding_slot = true;
        sp.some_fresh = true;
        const Buffers b = make_buffers(sp);
        const Result r = run_on_device(b);
        // bf16/f16 outputs: the FP32 bounds plus that format's rounding (half an ulp: 2^-9 of bf16)
        const std::string label = std::string("chunked, ") + v.label;
        if (v.out == GDN_DTYPE_F32) {
            require_fp16_bounds(b, r, label.c_str());
        } else {
            INFO(label << ": " << r.error);
            REQUIRE(r.status == GDN_SUCCESS);
            REQUIRE(r.path.path == GDN_PATH_CHUNKED_LOWP_C16);
            const Checked c = check_against_reference(b, r, label.c_str());
            CHECK(c.guard_problem.empty());
            const double fmt_ulp = v.out == GDN_DTYPE_BF16 ? 0.0039 : 0.00049;
            CHECK(c.out.finite);
            CHECK(c.out.rel_rms <= 0.003 + fmt_ulp);
            CHECK(c.out.max_abs <= (0.02 + fmt_ulp) * c.out.max_ref + 1e-5);
            CHECK(fp16_bounds(c.state));
        }
    }
}

TEST_CASE("hip: the chunked path at a model's shape with 16 key heads and 48 value heads", "[hip]") {
    Spec sp;  // Qwen3.5-like: Hk 16, Hv 48 (group 3), bf16 activations, raw gates
    sp.Hk = device().fast() ? 16 : 2;
    sp.Hv = device().fast() ? 48 : 6;
    sp.T = device().fast() ? 1100 : 40;
    sp.in = GDN_DTYPE_BF16;
    sp.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS | GDN_FLAG_OUTPUT_NORM;
    sp.g_lo = -3.0f;
    sp.g_hi = 3.0f;
    const Buffers b = make_buffers(sp);
    require_fp16_bounds(b, run_on_device(b), "chunked, Hk 16 Hv 48 bf16 all flags");
}

TEST_CASE("hip: a batch of many sequences uses super-blocks of 8 chunks", "[hip]") {
    // 1024 / 136 sequences -> 8 chunks (128 tokens) per sequence per super-block
    const bool fast = device().fast();
    Spec sp;
    sp.num_seqs = 136;
    std::mt19937 rng(3);
    sp.T = 0;
    for (int32_t s = 0; s < sp.num_seqs; ++s) {
        const int32_t len = fast ? int32_t(rng() % 400) : (s < 2 ? 150 : int32_t(rng() % 3));
        sp.lens.push_back(len);
        sp.T += len;
    }
    sp.Hv = 1;
    sp.padding_slot = true;
    sp.some_fresh = true;
    const Buffers b = make_buffers(sp);
    require_fp16_bounds(b, run_on_device(b), "chunked, 136 sequences");
}

// Every byte of the pool in `r` but the state of `written_slots` (not their
// gaps) as the call found it.
void check_pool_untouched(const Buffers& b, const Result& r, const std::vector<int32_t>& written_slots) {
    const size_t slot_floats = size_t(b.spec.Hv) * b.spec.K * b.spec.V;
    std::vector<bool> written(size_t(b.slots), false);
    for (int32_t slot : written_slots) written[size_t(slot)] = true;
    for (int32_t slot = 0; slot < b.slots; ++slot) {
        const size_t from = size_t(slot) * size_t(b.slot_stride);
        const size_t data = written[size_t(slot)] ? slot_floats : 0;
        INFO("slot " << slot);
        CHECK(std::memcmp(r.state.data() + from + data, b.state.data() + from + data,
                          (size_t(b.slot_stride) - data) * 4) == 0);
    }
}

// GDN_FLAG_TOKEN_STATES: the slots in `written` of the device's result `r`
// against the CPU backend's run of the same call (other sums: within 1e-5 of
// the slot's largest value), and every other byte of the pool unchanged.
void check_token_states_against_cpu(const Buffers& b, const Result& r, const std::vector<int32_t>& written_slots) {
    const Spec& sp = b.spec;
    const size_t slot_floats = size_t(sp.Hv) * sp.K * sp.V;
    std::vector<uint8_t> cpu_out(b.out_init);
    std::vector<float> cpu_state(b.state);
    Ptrs hp{b.in.data(), b.g.data(), b.beta.data(), cpu_out.data() + b.out_guard * esize(sp.out),
            cpu_state.data(), b.cu.data(), b.slot_of.data(), b.fresh.data(), b.A_log.data(),
            b.dt_bias.data(), b.norm_weight.data(), sp.token_slots.data()};
    const gdn_problem_t problem = make_problem(sp);
    const gdn_tensors_t tensors = make_tensors(b, hp);
    gdn_caps_t cpu;
    gdn_caps_init(&cpu);
    REQUIRE(gdn_probe(GDN_BACKEND_CPU, 0, &cpu) == GDN_SUCCESS);
    size_t bytes = 0;
    REQUIRE(gdn_workspace_size(&cpu, &problem, &bytes) == GDN_SUCCESS);
    std::vector<uint8_t> ws(bytes + GDN_WORKSPACE_ALIGNMENT);
    void* aligned = ws.data() + (GDN_WORKSPACE_ALIGNMENT - reinterpret_cast<uintptr_t>(ws.data()) %
                                                                GDN_WORKSPACE_ALIGNMENT) %
                                    GDN_WORKSPACE_ALIGNMENT;
    REQUIRE(gdn_chunked_recurrence(&cpu, &problem, &tensors, aligned, bytes, nullptr) == GDN_SUCCESS);
    for (int32_t slot : written_slots) {
        const float* got = r.state.data() + size_t(slot) * size_t(b.slot_stride);
        const float* want = cpu_state.data() + size_t(slot) * size_t(b.slot_stride);
        double max_diff = 0, max_ref = 0;
        for (size_t e = 0; e < slot_floats; ++e) {
            max_diff = std::max(max_diff, std::fabs(double(got[e]) - double(want[e])));
            max_ref = std::max(max_ref, std::fabs(double(want[e])));
        }
        INFO("slot " << slot << ": max|diff| " << max_diff << ", max|ref| " << max_ref);
        CHECK(max_ref > 0.01);
        CHECK(max_diff <= 1e-5 * max_ref);
    }
    check_pool_untouched(b, r, written_slots);
}

TEST_CASE("hip: per-token states (GDN_FLAG_TOKEN_STATES) from the sequential kernel", "[hip]") {
    // Four sequences of 3, 4, 2 and 5 tokens: sequence 0 is padding (it names
    // slots 5 and 16, and writes neither), 1 starts from zero and names its
    // own slot (18) last, 2 never names its own (17), 3 starts from zero and
    // keeps four states. The pool: 4 + 2 slots of the sequences and 14 more.
    for (gdn_state_layout_t layout : {GDN_STATE_KV, GDN_STATE_VK}) {
        Spec sp;
        sp.algo = GDN_ALGO_AUTO;
        sp.K = 64;
        sp.V = 64;
        sp.in = GDN_DTYPE_BF16;
        sp.layout = layout;
        sp.num_seqs = 4;
        sp.lens = {3, 4, 2, 5};
        sp.T = 14;
        sp.padding_slot = true;
        sp.some_fresh = true;
        sp.extra_slots = 14;
        sp.seed = 77;
        sp.token_slots = {5, -1, 16, /**/ 0, -1, 1, 18, /**/ 2, 3, /**/ 4, -1, 6, 7, 8};
        const Buffers b = make_buffers(sp);
        REQUIRE(b.slot_of == std::vector<int32_t>({-1, 18, 17, 16}));
        const Result r = run_on_device(b);
        INFO((layout == GDN_STATE_KV ? "[K][V]: " : "[V][K]: ") << r.error);
        REQUIRE(r.status == GDN_SUCCESS);
        CHECK(r.path.path == GDN_PATH_SEQUENTIAL);

        // A plain run of the same call: the same out bits, and its final
        // states where the last tokens name them.
        Spec plain_sp = sp;
        plain_sp.token_slots.clear();
        const Buffers plain_b = make_buffers(plain_sp);
        const Result plain = run_on_device(plain_b);
        REQUIRE(plain.status == GDN_SUCCESS);
        CHECK(r.out == plain.out);
        const size_t slot_floats = size_t(sp.Hv) * sp.K * sp.V;
        auto slot_at = [&](const std::vector<float>& pool, int32_t slot) {
            return pool.data() + size_t(slot) * size_t(b.slot_stride);
        };
        for (auto [own, last] : {std::pair<int32_t, int32_t>{18, 18}, {17, 3}, {16, 8}}) {
            INFO("own slot " << own << ", last token's slot " << last);
            CHECK(std::memcmp(slot_at(r.state, last), slot_at(plain.state, own), slot_floats * 4) == 0);
        }

        // Every named slot against the CPU backend's per-token states, and the
        // rest of the pool (own slots not named, the padding sequence's slots,
        // nobody's slots, the gaps after each slot) unchanged.
        check_token_states_against_cpu(b, r, {0, 1, 18, 2, 3, 4, 6, 7, 8});
    }
}

TEST_CASE("hip: block states (GDN_FLAG_BLOCK_STATES) from the sequential kernel", "[hip]") {
    // Three sequences of 66, 130 and 3 tokens: sequence 0 is padding (it names
    // slot 0 at its token 63, and writes nothing), sequence 1 keeps its tokens
    // 63 and 127 in slots 1 and 2 and its last in its own slot (9), sequence 2
    // its last in slot 3. Every other entry holds what would be an error if it
    // were read: past the pool, sequence 2's own slot, slot 1 again.
    Spec sp;
    sp.algo = GDN_ALGO_AUTO;
    sp.K = 64;
    sp.V = 64;
    sp.in = GDN_DTYPE_BF16;
    sp.flags |= GDN_FLAG_BLOCK_STATES;
    sp.num_seqs = 3;
    sp.lens = {66, 130, 3};
    sp.T = 199;
    sp.padding_slot = true;
    sp.extra_slots = 6;
    sp.seed = 78;
    const int32_t junk[] = {9999, 8, 1};
    for (int64_t i = 0; i < sp.T; ++i) sp.token_slots.push_back(junk[i % 3]);
    sp.token_slots[63] = 0;
    sp.token_slots[66 + 63] = 1, sp.token_slots[66 + 127] = 2, sp.token_slots[66 + 129] = 9;
    sp.token_slots[196 + 2] = 3;
    const Buffers b = make_buffers(sp);
    REQUIRE(b.slot_of == std::vector<int32_t>({-1, 9, 8}));
    const Result r = run_on_device(b);
    INFO(r.error);
    REQUIRE(r.status == GDN_SUCCESS);
    CHECK(r.path.path == GDN_PATH_SEQUENTIAL);
    // The out bits of a plain run, and its final states where the last tokens name them.
    Spec plain_sp = sp;
    plain_sp.token_slots.clear();
    plain_sp.flags &= ~GDN_FLAG_BLOCK_STATES;
    const Result plain = run_on_device(make_buffers(plain_sp));
    REQUIRE(plain.status == GDN_SUCCESS);
    CHECK(r.out == plain.out);
    const size_t slot_floats = size_t(sp.Hv) * sp.K * sp.V;
    for (auto [own, last] : {std::pair<int32_t, int32_t>{9, 9}, {8, 3}}) {
        INFO("own slot " << own << ", last token's slot " << last);
        CHECK(std::memcmp(r.state.data() + size_t(last) * size_t(b.slot_stride),
                          plain.state.data() + size_t(own) * size_t(b.slot_stride), slot_floats * 4) == 0);
    }
    check_token_states_against_cpu(b, r, {1, 2, 9, 3});
}

// Sequence `seq` of `b`, its first `m` tokens, as a call of its own from the
// state it starts from (its slot's, or zero where it starts fresh).
Buffers prefix_of(const Buffers& b, int32_t seq, int64_t m) {
    Spec sp = b.spec;
    sp.T = m;
    sp.num_seqs = 1;
    sp.lens.clear();
    sp.padding_slot = sp.some_fresh = false;
    sp.extra_slots = 0;
    sp.token_slots.clear();
    sp.flags &= ~GDN_FLAG_BLOCK_STATES;
    Buffers pb = rows_of(b, sp, b.cu.empty() ? 0 : b.cu[size_t(seq)]);
    const int32_t own = b.slot_of.empty() ? seq : b.slot_of[size_t(seq)];
    const bool fresh = !b.fresh.empty() && b.fresh[size_t(seq)] != 0;
    const size_t slot_floats = size_t(sp.Hv) * sp.K * sp.V;
    for (size_t e = 0; e < slot_floats; ++e)
        pb.state[e] = fresh ? 0.0f : b.state[size_t(own) * size_t(b.slot_stride) + e];
    return pb;
}

TEST_CASE("hip: block states (GDN_FLAG_BLOCK_STATES) from the chunked path across super-blocks", "[hip]") {
    // 130 sequences: super-blocks of 8 chunks (128 tokens), so the long ones
    // cross two or more and carry their state through the workspace (their
    // own slots are only read). Sequence 0 is padding (it names slots 0 and 1
    // and writes neither); 1 (fresh) keeps every block end and its last
    // token; 2 skips its first block end and keeps its last in its own slot;
    // 3 ends on a block end; 4 skips its last; 5 has 2 tokens; the rest (0
    // to 2 tokens) keep nothing. Every entry that is not read holds 9999,
    // an error if it were (the slots are device arrays: not validated here).
    const bool fast = device().fast();
    for (gdn_state_layout_t layout : {GDN_STATE_KV, GDN_STATE_VK}) {
        Spec sp;
        sp.algo = GDN_ALGO_AUTO;
        sp.layout = layout;
        sp.flags |= GDN_FLAG_BLOCK_STATES;
        sp.num_seqs = 130;
        sp.padding_slot = true;
        sp.some_fresh = true;  // the odd sequences
        sp.seed = 79;
        std::mt19937 rng(5);
        sp.lens = {70, fast ? 1000 : 300, fast ? 700 : 200, 64, 129, 2};
        while (int32_t(sp.lens.size()) < sp.num_seqs) sp.lens.push_back(int32_t(rng() % 3));
        sp.T = 0;
        for (int32_t l : sp.lens) sp.T += l;
        sp.token_slots.assign(size_t(sp.T), 9999);
        struct Kept {
            int32_t seq;
            int64_t pos;  // in the sequence
            int32_t slot;
        };
        std::vector<Kept> kept;
        int32_t next_slot = 2;  // 0 and 1: the padding sequence's
        sp.token_slots[63] = 0;
        sp.token_slots[69] = 1;
        int64_t own_last = -1;  // sequence 2's last token, which names its own slot
        int64_t bos = sp.lens[0];
        for (int32_t seq = 1; seq <= 5; ++seq) {
            const int64_t len = sp.lens[size_t(seq)];
            for (int64_t i = 0; i < len; ++i) {
                if ((i + 1) % GDN_STATE_BLOCK != 0 && i != len - 1) continue;
                int32_t& entry = sp.token_slots[size_t(bos + i)];
                if ((seq == 2 && i == 63) || (seq == 4 && i == len - 1)) entry = -1;
                else if (seq == 2 && i == len - 1) own_last = bos + i;
                else kept.push_back({seq, i, entry = next_slot++});
            }
            bos += len;
        }
        for (int32_t seq = 6; seq < sp.num_seqs; bos += sp.lens[size_t(seq++)])
            if (sp.lens[size_t(seq)] > 0) sp.token_slots[size_t(bos + sp.lens[size_t(seq)] - 1)] = -1;
        sp.extra_slots = next_slot;
        // The pool: the kept slots, 2 of padding, the sequences' own slots
        // from the top down (make_buffers), so sequence 2's is this one.
        const int32_t own2 = sp.num_seqs + 2 + sp.extra_slots - 1 - 2;
        sp.token_slots[size_t(own_last)] = own2;
        kept.push_back({2, sp.lens[2] - 1, own2});
        const Buffers b = make_buffers(sp);
        REQUIRE(b.slot_of[2] == own2);
        REQUIRE(b.slot_of.back() >= next_slot);  // no own slot among the kept ones

        // The workspace holds a carried state for each sequence longer than a
        // super-block, at most num_tokens / 129 of them: here 6 places for
        // the 3 (sequences 1, 2 and 4), not one for each of the 130.
        {
            gdn::Shape shape;
            const gdn_problem_t problem = make_problem(b.spec);
            REQUIRE(gdn::read_problem(&problem, &shape) == GDN_SUCCESS);
            REQUIRE(gdn::hip::chunk_geometry(shape).chunks_per_seq == 8);
            CHECK(gdn::hip::carried_states(shape) == std::min<int64_t>(sp.T / 129, sp.num_seqs));
            CHECK(gdn::hip::carried_states(shape) < sp.num_seqs);
        }
        const Result r = run_on_device(b);
        INFO((layout == GDN_STATE_KV ? "[K][V]: " : "[V][K]: ") << r.error << " / " << r.path.reason);
        REQUIRE(r.status == GDN_SUCCESS);
        CHECK(r.path.path == GDN_PATH_CHUNKED_LOWP_C16);
        CHECK(std::string(r.path.reason).find("GDN_FLAG_BLOCK_STATES") != std::string::npos);

        // A plain run of the same call: the same out bits, and its final
        // states (in the own slots) where the last tokens keep them.
        Spec plain_sp = b.spec;
        plain_sp.token_slots.clear();
        plain_sp.flags &= ~GDN_FLAG_BLOCK_STATES;
        Buffers plain_b = b;
        plain_b.spec = plain_sp;
        const Result plain = run_on_device(plain_b);
        REQUIRE(plain.status == GDN_SUCCESS);
        REQUIRE(plain.path.path == GDN_PATH_CHUNKED_LOWP_C16);
        CHECK(r.out == plain.out);

        const size_t slot_floats = size_t(sp.Hv) * sp.K * sp.V;
        auto slot_at = [&](const std::vector<float>& pool, int32_t slot) {
            return pool.data() + size_t(slot) * size_t(b.slot_stride);
        };
        std::vector<int32_t> written;
        int prefix_runs = 0;
        for (const Kept& k : kept) {
            written.push_back(k.slot);
            const int64_t len = sp.lens[size_t(k.seq)];
            INFO("sequence " << k.seq << ", token " << k.pos << " of " << len << ", slot " << k.slot);
            if (k.pos == len - 1) {
                CHECK(std::memcmp(slot_at(r.state, k.slot), slot_at(plain.state, b.slot_of[size_t(k.seq)]),
                                  slot_floats * 4) == 0);
                continue;
            }
            // A block end: the final state of the sequence's first pos + 1
            // tokens as a call of their own (the same chunks, so the same bits).
            const Buffers pb = prefix_of(b, k.seq, k.pos + 1);
            const Result pr = run_on_device(pb);
            REQUIRE(pr.status == GDN_SUCCESS);
            REQUIRE(pr.path.path == GDN_PATH_CHUNKED_LOWP_C16);
            if (prefix_runs++ == 0) require_fp16_bounds(pb, pr, "chunked, a block's prefix");
            CHECK(std::memcmp(slot_at(r.state, k.slot), slot_at(pr.state, 0), slot_floats * 4) == 0);
        }
        std::printf("[hip] block states, chunked, %s: %zu slots kept, %d block ends against their prefixes\n",
                    layout == GDN_STATE_KV ? "[K][V]" : "[V][K]", kept.size(), prefix_runs);
        CHECK(prefix_runs >= 6);
        // Nothing else in the pool changed: the own slots (read, not
        // written), the padding sequence's slots 0 and 1, the gaps.
        check_pool_untouched(b, r, written);
    }
}

TEST_CASE("hip: the fallbacks are bit-identical to the sequential kernel", "[hip]") {
    struct Fallback {
        const char* label;
        Spec spec;
    };
    std::vector<Fallback> cases;
    {
        Spec sp;  // below 64 tokens
        sp.T = 63;
        sp.algo = GDN_ALGO_AUTO;
        cases.push_back({"auto, 63 tokens", sp});
    }
    {
        Spec sp;  // decode batch
        sp.T = 8;
        sp.num_seqs = 8;
        sp.algo = GDN_ALGO_AUTO;
        sp.flags |= GDN_FLAG_OUTPUT_NORM;
        cases.push_back({"auto, decode batch of 8", sp});
    }
    {
        Spec sp;  // a part without WMMA
        sp.T = 200;
        sp.algo = GDN_ALGO_AUTO;
        sp.wmma = false;
        cases.push_back({"auto, no gfx11 WMMA", sp});
    }
    {
        Spec sp;  // FP32 precision (the default) never takes the FP16 path
        sp.T = 200;
        sp.algo = GDN_ALGO_AUTO;
        sp.precision = GDN_PRECISION_FP32;
        cases.push_back({"auto, FP32 precision", sp});
    }
    {
        Spec sp;  // K = V = 64: the chunked path takes 128 only
        sp.T = 200;
        sp.K = sp.V = 64;
        sp.algo = GDN_ALGO_AUTO;
        cases.push_back({"auto, K = V = 64", sp});
    }
    for (Fallback& f : cases) {
        if (!device().fast()) f.spec.T = std::min<int64_t>(f.spec.T, 70);
        const Buffers b = make_buffers(f.spec);
        const Result r = run_on_device(b);
        INFO(f.label << ": " << r.error << " / " << r.path.reason);
        REQUIRE(r.status == GDN_SUCCESS);
        CHECK(r.path.path == GDN_PATH_SEQUENTIAL);
        const Result seq = run_on_device(make_buffers(sequential_of(f.spec)));
        REQUIRE(seq.status == GDN_SUCCESS);
        const std::string diff = first_bit_difference(r, seq);
        INFO(diff);
        CHECK(diff.empty());
    }
}

TEST_CASE("hip: the chunked path gives the same bits on reruns with the workspace filled with NaN", "[hip]") {
    Spec sp;
    sp.T = device().fast() ? 2100 : 70;  // two super-blocks when fast
    sp.Hk = 2;
    sp.Hv = 4;
    sp.flags |= GDN_FLAG_OUTPUT_NORM;
    const Buffers b = make_buffers(sp);
    const Result first = run_on_device(b);
    REQUIRE(first.status == GDN_SUCCESS);
    REQUIRE(first.path.path == GDN_PATH_CHUNKED_LOWP_C16);
    const int reruns = device().fast() ? 20 : 2;
    for (int i = 0; i < reruns; ++i) {
        const Result again = run_on_device(b);
        const std::string diff = first_bit_difference(first, again);
        INFO("rerun " << i << ": " << diff);
        REQUIRE(diff.empty());
    }
}

TEST_CASE("hip: the path query says why - WMMA and precision and head dims and length", "[hip]") {
    gdn::Shape s;
    auto reason = [&](const gdn_caps_t& caps, gdn_problem_t p) {
        REQUIRE(gdn::read_problem(&p, &s) == GDN_SUCCESS);
        gdn::PathChoice c;
        REQUIRE(gdn::choose_path(caps, s, nullptr, &c) == GDN_SUCCESS);
        return std::make_pair(c.path, std::string(c.reason));
    };
    const gdn_caps_t wmma = device().caps(true), plain = device().caps(false);
    gdn_problem_t p = make_problem(Spec{});
    p.algorithm = GDN_ALGO_AUTO;
    p.num_tokens = 4096;
    auto r = reason(wmma, p);
    CHECK(r.first == GDN_PATH_CHUNKED_LOWP_C16);
    r = reason(plain, p);
    CHECK(r.first == GDN_PATH_SEQUENTIAL);
    CHECK(r.second.find("gfx11 WMMA") != std::string::npos);
    p.precision = GDN_PRECISION_FP32;
    r = reason(wmma, p);
    CHECK(r.first == GDN_PATH_SEQUENTIAL);
    CHECK(r.second.find("GDN_PRECISION_FP16") != std::string::npos);
    p.precision = GDN_PRECISION_FP16;
    p.head_dim_k = 64;
    r = reason(wmma, p);
    CHECK(r.first == GDN_PATH_SEQUENTIAL);
    CHECK(r.second.find("K = V = 128") != std::string::npos);
    p.head_dim_k = 128;
    p.num_tokens = 63;
    r = reason(wmma, p);
    CHECK(r.first == GDN_PATH_SEQUENTIAL);
    CHECK(r.second.find("63 tokens") != std::string::npos);
    // Per-token states: the sequential kernel; block states: the chunked path
    // where it runs (gfx11), else the sequential kernel too.
    p.num_tokens = 4096;
    p.flags |= GDN_FLAG_TOKEN_STATES;
    r = reason(wmma, p);
    CHECK(r.first == GDN_PATH_SEQUENTIAL);
    CHECK(r.second.find("GDN_FLAG_TOKEN_STATES") != std::string::npos);
    p.flags |= GDN_FLAG_BLOCK_STATES;
    CHECK((wmma.features & GDN_FEATURE_BLOCK_STATES) != 0);
    CHECK((plain.features & GDN_FEATURE_BLOCK_STATES) == 0);
    r = reason(wmma, p);
    CHECK(r.first == GDN_PATH_CHUNKED_LOWP_C16);
    CHECK(r.second.find("GDN_FLAG_BLOCK_STATES") != std::string::npos);
    r = reason(plain, p);
    CHECK(r.first == GDN_PATH_SEQUENTIAL);
    CHECK(r.second.find("GDN_FLAG_BLOCK_STATES") != std::string::npos);
    p.algorithm = GDN_ALGO_CHUNKED;
    REQUIRE(gdn::read_problem(&p, &s) == GDN_SUCCESS);
    gdn::PathChoice c;
    CHECK(gdn::choose_path(plain, s, nullptr, &c) == GDN_ERROR_NOT_SUPPORTED);
    CHECK(std::string(gdn_last_error()).find("GDN_FEATURE_BLOCK_STATES") != std::string::npos);
}
