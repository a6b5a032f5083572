// Test utilities shared by the test suites (CPU here; the GPU suites copy
// the same host problems to the device):
//   - Rng: a seeded generator (splitmix64), the same numbers on every machine;
//   - Bytes: a host buffer with guard bands before and after it;
//   - Spec / Problem: a random problem with every option of the API (varlen,
//     state pool with slots, padding, start-from-zero, layouts, head mapping,
//     strides, dtypes, feature flags), its tensors and its FP64 reference;
//   - Workspace: aligned scratch, refilled with NaN or a pattern on request;
//   - compare(): max|diff|/max|ref|, relative RMS, all-finite, and the first
//     element beyond the bound (index, got, want) for the failure message.
// Catch-free, so any test program can use it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/dispatch.hpp"
#include "common/internal.hpp"
#include "common/numeric.hpp"
#include "common/reference.hpp"
#include "common/validate.hpp"
#include "gdn/gdn.h"

namespace gdn_test {

// ------------------------------------------------------------------ random

class Rng {
public:
    explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
    uint64_t next() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
    double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
    double normal() {  // Box-Muller
        const double u1 = 1.0 - uniform(), u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }

private:
    uint64_t state_;
};

// ------------------------------------------------------------------ buffers

inline size_t dtype_bytes(gdn_dtype_t t) { return t == GDN_DTYPE_F32 ? 4 : 2; }

// The bit pattern of a quiet NaN in each dtype.
inline void fill_nan(void* p, size_t elements, gdn_dtype_t t) {
    if (t == GDN_DTYPE_F32) {
        const uint32_t nan = 0x7fc00000u;
        for (size_t i = 0; i < elements; ++i) std::memcpy(static_cast<char*>(p) + 4 * i, &nan, 4);
    } else {
        const uint16_t nan = t == GDN_DTYPE_F16 ? 0x7e00u : 0x7fc0u;
        for (size_t i = 0; i < elements; ++i) std::memcpy(static_cast<char*>(p) + 2 * i, &nan, 2);
    }
}

// A host buffer of `size` bytes aligned to 256, with guard bands of a known
// pattern before and after it.
class Bytes {
public:
    static constexpr size_t kGuard = 256;
    static constexpr unsigned char kGuardByte = 0xC3;

    Bytes() { resize(0); }
    explicit Bytes(size_t size) { resize(size); }
    Bytes(const Bytes&) = delete;  // the alignment offset belongs to this storage
    Bytes& operator=(const Bytes&) = delete;
    void resize(size_t size) {
        size_ = size;
        storage_.assign(size + 2 * kGuard + 256, kGuardByte);
        const uintptr_t base = reinterpret_cast<uintptr_t>(storage_.data()) + kGuard;
        offset_ = size_t((base + 255) / 256 * 256 - reinterpret_cast<uintptr_t>(storage_.data()));
        std::fill(storage_.begin() + std::ptrdiff_t(offset_),
                  storage_.begin() + std::ptrdiff_t(offset_ + size), 0);
    }
    unsigned char* data() { return storage_.data() + offset_; }
    const unsigned char* data() const { return storage_.data() + offset_; }
    size_t size() const { return size_; }
    template <class T>
    T* as() { return reinterpret_cast<T*>(data()); }
    template <class T>
    const T* as() const { return reinterpret_cast<const T*>(data()); }
    std::vector<unsigned char> snapshot() const { return {data(), data() + size_}; }
    // "" when both guard bands hold their pattern, else where the first change is.
    std::string guard_damage() const {
        for (size_t i = 0; i < storage_.size(); ++i) {
            if (i >= offset_ && i < offset_ + size_) continue;
            if (storage_[i] != kGuardByte) {
                std::ostringstream m;
                if (i < offset_)
                    m << "guard byte " << (offset_ - i) << " before the buffer";
                else
                    m << "guard byte " << (i - offset_ - size_) << " after the buffer";
                m << " changed to 0x" << std::hex << int(storage_[i]);
                return m.str();
            }
        }
        return "";
    }

private:
    std::vector<unsigned char> storage_;
    size_t offset_ = 0, size_ = 0;
};

// Scratch for gdn_chunked_recurrence, aligned to GDN_WORKSPACE_ALIGNMENT.
struct Workspace {
    Bytes bytes;
    void size_for(const gdn_caps_t& caps, const gdn_problem_t& problem, size_t extra = 0) {
        size_t need = 0;
        if (gdn_workspace_size(&caps, &problem, &need) != GDN_SUCCESS) need = 0;
        bytes.resize(need + extra);
    }
    void fill_nan() { fill_nan_f32(); }
    void fill_nan_f32() { gdn_test::fill_nan(bytes.data(), bytes.size() / 4, GDN_DTYPE_F32); }
    void fill(unsigned char b) { std::memset(bytes.data(), b, bytes.size()); }
    void* data() { return bytes.size() ? bytes.data() : nullptr; }
    size_t size() const { return bytes.size(); }
};

// ------------------------------------------------------------------ problems

// Everything a random problem can vary. The defaults: one sequence of 64
// tokens, Hk = 1, Hv = 2, K = V = 64, f32, packed, [K][V] state, no flags.
struct Spec {
    std::vector<int32_t> seq_lens{64};   // one entry per sequence (0 allowed)
    bool null_cu_seqlens = false;        // pass cu_seqlens = NULL (lengths must be equal)
    int64_t max_seqlen = -1;             // problem.max_seqlen (-1: the longest sequence; 0: default)
    int32_t hk = 1, hv = 2, k = 64, v = 64;
    gdn_head_mapping_t mapping = GDN_HEADS_GROUPED;
    gdn_dtype_t input = GDN_DTYPE_F32, gate = GDN_DTYPE_F32, output = GDN_DTYPE_F32;
    gdn_state_layout_t layout = GDN_STATE_KV;
    gdn_algorithm_t algorithm = GDN_ALGO_AUTO;
    gdn_precision_t precision = GDN_PRECISION_FP32;
    uint32_t flags = 0;
    float scale = 0.0f, l2norm_eps = 0.0f, norm_eps = 0.0f;
    // State pool. state_indices empty: NULL (sequence i -> slot i).
    std::vector<int32_t> state_indices;
    int32_t num_state_slots = 0;          // 0: num_seqs, or 1 + the largest index
    std::vector<uint8_t> start_from_zero; // empty: NULL
    int64_t slot_pad = 0;                 // extra floats between slots (0: packed, stride 0)
    // Strides of every [token][head][dim] tensor: extra elements after each
    // head row and after each token; head_major puts a head's tokens together
    // (head stride > token stride). All zero: packed, strides passed as 0.
    int64_t head_pad = 0, row_pad = 0;
    bool head_major = false;
    int64_t out_row_pad = 0;  // extra elements after each output token row alone (added to row_pad)
    int64_t z_row_pad = 0;    // the same for z's rows (the output norm's gate)
    // Data.
    uint64_t seed = 1;
    double g_lo = -0.3, g_hi = -0.01;     // log decay ~ U(g_lo, g_hi)
    double beta_lo = 0.0, beta_hi = 1.0;  // β ~ U(beta_lo, beta_hi)
    double state_sigma = 0.5;             // initial state ~ N(0, σ²)
    double v_sigma = 1.0;                 // v ~ N(0, v_sigma²)
    bool unit_keys = true;                // k rows of unit length (when not L2-normalised by the flag)
    double key_log10_spread = 0.0;        // > 0: each k row (as above) times 10^U(−spread, spread)
    bool nan_in_padding = false;          // a padding sequence's rows (slot < 0) of q/k/v/g/β: NaN
};

inline int64_t total_tokens(const Spec& s) {
    int64_t n = 0;
    for (int32_t l : s.seq_lens) n += l;
    return n;
}

// The memory layout of one [token][head][dim] tensor.
struct TensorLayout {
    int64_t token_stride = 0, head_stride = 0;  // resolved
    int64_t pass_token = 0, pass_head = 0;      // what gdn_tensors_t gets (0: packed)
    size_t elements = 0;                        // buffer size
    int32_t heads = 0, dim = 0;
    gdn_dtype_t dtype = GDN_DTYPE_F32;
    int64_t offset(int64_t t, int32_t h) const { return t * token_stride + h * head_stride; }
};

inline TensorLayout layout_for(const Spec& s, int64_t T, int32_t heads, int32_t dim, gdn_dtype_t dt) {
    TensorLayout L;
    L.heads = heads;
    L.dim = dim;
    L.dtype = dt;
    if (s.head_major) {
        L.token_stride = dim + s.row_pad;
        L.head_stride = std::max<int64_t>(1, T) * L.token_stride + s.head_pad;
    } else {
        L.head_stride = dim + s.head_pad;
        L.token_stride = heads * L.head_stride + s.row_pad;
    }
    const bool packed = !s.head_major && s.head_pad == 0 && s.row_pad == 0;
    L.pass_token = packed ? 0 : L.token_stride;
    L.pass_head = packed ? 0 : L.head_stride;
    L.elements = size_t((T - 1) * L.token_stride + (heads - 1) * L.head_stride + dim);
    return L;
}

// A random problem on host buffers it owns (they never move: copy is
// deleted). The state pool is filled at construction and kept in
// state_initial; reset_state() puts it back.
class Problem {
public:
    Spec spec;
    int64_t T = 0;
    gdn_problem_t problem;
    TensorLayout q_l, k_l, v_l, g_l, beta_l, out_l, z_l;
    Bytes q, k, v, g, beta, z, out, state;
    std::vector<float> state_initial, A_log, dt_bias, norm_weight;
    std::vector<int32_t> cu_seqlens, state_indices;
    std::vector<uint8_t> start_from_zero;
    int64_t slot_stride = 0;  // resolved, floats
    int32_t slots = 0;

    Problem(const Problem&) = delete;
    Problem& operator=(const Problem&) = delete;

    explicit Problem(const Spec& s) : spec(s) {
        T = total_tokens(s);
        const int32_t n_seqs = int32_t(s.seq_lens.size());
        gdn_problem_init(&problem);
        problem.num_seqs = n_seqs;
        problem.num_tokens = T;
        int64_t longest = 0;
        for (int32_t l : s.seq_lens) longest = std::max<int64_t>(longest, l);
        problem.max_seqlen = s.max_seqlen < 0 ? longest : s.max_seqlen;
        problem.num_k_heads = s.hk;
        problem.num_v_heads = s.hv;
        problem.head_dim_k = s.k;
        problem.head_dim_v = s.v;
        problem.head_mapping = s.mapping;
        problem.input_dtype = s.input;
        problem.gate_dtype = s.gate;
        problem.output_dtype = s.output;
        problem.state_layout = s.layout;
        problem.algorithm = s.algorithm;
        problem.precision = s.precision;
        problem.flags = s.flags;
        problem.scale = s.scale;
        problem.l2norm_eps = s.l2norm_eps;
        problem.norm_eps = s.norm_eps;

        cu_seqlens.assign(1, 0);
        for (int32_t l : s.seq_lens) cu_seqlens.push_back(cu_seqlens.back() + l);
        state_indices = s.state_indices;
        start_from_zero = s.start_from_zero;
        slots = s.num_state_slots;
        if (slots == 0) {
            slots = n_seqs;
            for (int32_t i : state_indices) slots = std::max(slots, i + 1);
        }
        problem.num_state_slots = s.num_state_slots == 0 && state_indices.empty() ? 0 : slots;

        q_l = layout_for(s, T, s.hk, s.k, s.input);
        k_l = layout_for(s, T, s.hk, s.k, s.input);
        v_l = layout_for(s, T, s.hv, s.v, s.input);
        {
            Spec sz = s;  // z's own row padding
            sz.row_pad += s.z_row_pad;
            z_l = layout_for(sz, T, s.hv, s.v, s.input);
        }
        g_l = layout_for(s, T, s.hv, 1, s.gate);
        beta_l = layout_for(s, T, s.hv, 1, s.gate);
        {
            Spec so = s;  // the output's own row padding
            so.row_pad += s.out_row_pad;
            out_l = layout_for(so, T, s.hv, s.v, s.output);
        }
        q.resize(q_l.elements * dtype_bytes(s.input));
        k.resize(k_l.elements * dtype_bytes(s.input));
        v.resize(v_l.elements * dtype_bytes(s.input));
        z.resize(z_l.elements * dtype_bytes(s.input));
        g.resize(g_l.elements * dtype_bytes(s.gate));
        beta.resize(beta_l.elements * dtype_bytes(s.gate));
        out.resize(out_l.elements * dtype_bytes(s.output));
        fill_nan(out.data(), out_l.elements, s.output);

        Rng rng(s.seed);
        const bool l2 = (s.flags & GDN_FLAG_QK_L2NORM) != 0;
        // Gaps between rows hold a pattern the kernels must never read as data.
        fill_nan(q.data(), q_l.elements, s.input);
        fill_nan(k.data(), k_l.elements, s.input);
        fill_nan(v.data(), v_l.elements, s.input);
        fill_nan(z.data(), z_l.elements, s.input);
        fill_nan(g.data(), g_l.elements, s.gate);
        fill_nan(beta.data(), beta_l.elements, s.gate);
        std::vector<double> row(size_t(std::max(s.k, s.v)));
        for (int64_t t = 0; t < T; ++t) {
            for (int32_t h = 0; h < s.hk; ++h) {
                for (int32_t i = 0; i < s.k; ++i) row[size_t(i)] = rng.normal();
                put(q, q_l, t, h, row);
                double n2 = 0.0;
                for (int32_t i = 0; i < s.k; ++i) {
                    row[size_t(i)] = rng.normal() * (l2 ? 3.0 : 1.0);
                    n2 += row[size_t(i)] * row[size_t(i)];
                }
                if (!l2 && s.unit_keys)
                    for (int32_t i = 0; i < s.k; ++i) row[size_t(i)] /= std::sqrt(n2);
                if (s.key_log10_spread > 0.0) {  // (no draw otherwise: other specs keep their data)
                    const double f = std::pow(10.0, rng.uniform(-s.key_log10_spread, s.key_log10_spread));
                    for (int32_t i = 0; i < s.k; ++i) row[size_t(i)] *= f;
                }
                put(k, k_l, t, h, row);
            }
            for (int32_t h = 0; h < s.hv; ++h) {
                for (int32_t i = 0; i < s.v; ++i) row[size_t(i)] = s.v_sigma * rng.normal();
                put(v, v_l, t, h, row);
                for (int32_t i = 0; i < s.v; ++i) row[size_t(i)] = rng.normal();
                put(z, z_l, t, h, row);
                // Raw gates: a ~ N(0, 2²), every 17th one above softplus' linear cut (20).
                row[0] = (s.flags & GDN_FLAG_GATE_FROM_RAW)
                             ? ((t + h) % 17 == 5 ? 20.5 + rng.uniform() : 2.0 * rng.normal())
                             : rng.uniform(s.g_lo, s.g_hi);
                put(g, g_l, t, h, row);
                row[0] = (s.flags & GDN_FLAG_BETA_FROM_LOGITS) ? 2.0 * rng.normal()
                                                               : rng.uniform(s.beta_lo, s.beta_hi);
                put(beta, beta_l, t, h, row);
            }
        }
        // A padding sequence reads nothing: its rows may hold anything, NaN
        // included, and no other sequence may see them (a kernel that loads a
        // chunk's rows past its sequence's end must not take them as data).
        if (s.nan_in_padding) {
            const std::vector<double> nan_row(row.size(), std::numeric_limits<double>::quiet_NaN());
            for (int64_t t = 0; t < T; ++t) {
                if (live_token(t)) continue;
                for (int32_t h = 0; h < s.hk; ++h) put(q, q_l, t, h, nan_row), put(k, k_l, t, h, nan_row);
                for (int32_t h = 0; h < s.hv; ++h)
                    put(v, v_l, t, h, nan_row), put(g, g_l, t, h, nan_row), put(beta, beta_l, t, h, nan_row);
            }
        }
        for (int32_t h = 0; h < s.hv; ++h) {
            A_log.push_back(float(rng.uniform(-2.0, 1.0)));
            dt_bias.push_back(float(rng.uniform(-1.0, 1.0)));
        }
        for (int32_t i = 0; i < s.v; ++i) norm_weight.push_back(float(rng.uniform(0.5, 1.5)));

        const int64_t slot_elems = int64_t(s.hv) * s.k * s.v;
        slot_stride = slot_elems + s.slot_pad;
        state.resize(size_t((slots - 1) * slot_stride + slot_elems) * 4);
        state_initial.resize(state.size() / 4);
        for (float& x : state_initial) x = float(s.state_sigma * rng.normal());
        reset_state();
    }

    void reset_state() { std::memcpy(state.data(), state_initial.data(), state.size()); }
    void fill_out_nan() { fill_nan(out.data(), out_l.elements, spec.output); }

    gdn_tensors_t tensors() {
        gdn_tensors_t t;
        gdn_tensors_init(&t);
        t.q = q.data(); t.q_token_stride = q_l.pass_token; t.q_head_stride = q_l.pass_head;
        t.k = k.data(); t.k_token_stride = k_l.pass_token; t.k_head_stride = k_l.pass_head;
        t.v = v.data(); t.v_token_stride = v_l.pass_token; t.v_head_stride = v_l.pass_head;
        t.g = g.data(); t.g_token_stride = g_l.pass_token; t.g_head_stride = g_l.pass_head;
        t.beta = beta.data(); t.beta_token_stride = beta_l.pass_token; t.beta_head_stride = beta_l.pass_head;
        t.out = out.data(); t.out_token_stride = out_l.pass_token; t.out_head_stride = out_l.pass_head;
        if (spec.flags & GDN_FLAG_OUTPUT_NORM) {
            t.z = z.data(); t.z_token_stride = z_l.pass_token; t.z_head_stride = z_l.pass_head;
        }
        t.state = state.as<float>();
        t.state_slot_stride = spec.slot_pad ? slot_stride : 0;
        t.cu_seqlens = spec.null_cu_seqlens ? nullptr : cu_seqlens.data();
        t.state_indices = state_indices.empty() ? nullptr : state_indices.data();
        t.start_from_zero = start_from_zero.empty() ? nullptr : start_from_zero.data();
        if (spec.flags & GDN_FLAG_GATE_FROM_RAW) {
            t.A_log = A_log.data();
            t.dt_bias = dt_bias.data();
        }
        if (spec.flags & GDN_FLAG_OUTPUT_NORM) t.norm_weight = norm_weight.data();
        return t;
    }

    // The tensors of tokens [first, first + count) of a one-sequence problem,
    // as a problem of their own (the state pool is shared): a request split
    // into parts.
    void part(int64_t first, int64_t count, gdn_problem_t* p, gdn_tensors_t* t) {
        *p = problem;
        p->num_tokens = count;
        p->max_seqlen = 0;
        *t = tensors();
        t->cu_seqlens = nullptr;
        auto shift = [first](const void* base, const TensorLayout& L) {
            return static_cast<const void*>(static_cast<const unsigned char*>(base) +
                                            size_t(first * L.token_stride) * dtype_bytes(L.dtype));
        };
        t->q = shift(t->q, q_l);
        t->k = shift(t->k, k_l);
        t->v = shift(t->v, v_l);
        t->g = shift(t->g, g_l);
        t->beta = shift(t->beta, beta_l);
        t->out = const_cast<void*>(shift(t->out, out_l));
        if (t->z) t->z = shift(t->z, z_l);
        // Strides stay those of the whole tensor (explicit, since head_major
        // strides depend on T).
        t->q_token_stride = q_l.token_stride; t->q_head_stride = q_l.head_stride;
        t->k_token_stride = k_l.token_stride; t->k_head_stride = k_l.head_stride;
        t->v_token_stride = v_l.token_stride; t->v_head_stride = v_l.head_stride;
        t->g_token_stride = g_l.token_stride; t->g_head_stride = g_l.head_stride;
        t->beta_token_stride = beta_l.token_stride; t->beta_head_stride = beta_l.head_stride;
        t->out_token_stride = out_l.token_stride; t->out_head_stride = out_l.head_stride;
        if (t->z) { t->z_token_stride = z_l.token_stride; t->z_head_stride = z_l.head_stride; }
    }

    // Sequence of token t, and whether it is a padding sequence (slot < 0).
    int32_t seq_of(int64_t t) const {
        return int32_t(std::upper_bound(cu_seqlens.begin(), cu_seqlens.end(), int32_t(t)) -
                       cu_seqlens.begin()) - 1;
    }
    bool padding_seq(int32_t seq) const {
        return !state_indices.empty() && state_indices[size_t(seq)] < 0;
    }
    bool live_token(int64_t t) const { return !padding_seq(seq_of(t)); }

    // out as FP32, packed [T][Hv][V].
    std::vector<float> out_f32() const {
        std::vector<float> r(size_t(T) * spec.hv * spec.v);
        for (int64_t t = 0; t < T; ++t)
            for (int32_t h = 0; h < spec.hv; ++h)
                for (int32_t i = 0; i < spec.v; ++i)
                    r[size_t((t * spec.hv + h) * spec.v + i)] =
                        gdn::load_element(out.data(), spec.output, out_l.offset(t, h) + i);
        return r;
    }
    // Mask of the out elements (packed [T][Hv][V]) of live sequences.
    std::vector<char> out_live() const {
        std::vector<char> m(size_t(T) * spec.hv * spec.v);
        for (int64_t t = 0; t < T; ++t)
            std::fill_n(m.begin() + std::ptrdiff_t(t * spec.hv * spec.v), spec.hv * spec.v,
                        char(live_token(t)));
        return m;
    }
    std::vector<float> state_f32() const {
        return std::vector<float>(state.as<float>(), state.as<float>() + state.size() / 4);
    }
    // Mask of the state elements written: the K*V*Hv block of every slot a
    // live sequence names.
    std::vector<char> state_live() const {
        std::vector<char> m(state.size() / 4, 0);
        const int64_t slot_elems = int64_t(spec.hv) * spec.k * spec.v;
        for (int32_t seq = 0; seq < problem.num_seqs; ++seq) {
            const int32_t slot = state_indices.empty() ? seq : state_indices[size_t(seq)];
            if (slot < 0) continue;
            std::fill_n(m.begin() + std::ptrdiff_t(slot * slot_stride), slot_elems, char(1));
        }
        return m;
    }

    std::string out_index(size_t i) const {
        std::ostringstream m;
        const size_t hv = size_t(spec.hv), V = size_t(spec.v);
        m << "out[token " << i / (hv * V) << "][head " << (i / V) % hv << "][" << i % V << "]";
        return m.str();
    }
    std::string state_index(size_t i) const {
        std::ostringstream m;
        const size_t kv = size_t(spec.k) * size_t(spec.v);
        m << "state[slot " << i / size_t(slot_stride) << "][head " << (i % size_t(slot_stride)) / kv
          << "][element " << i % kv << "]";
        return m.str();
    }

    // The shape and tensors as the library normalises them (for gdn::ref).
    bool normalised(gdn::Shape* shape, gdn::Tensors* x) {
        gdn_tensors_t t = tensors();
        return gdn::read_problem(&problem, shape) == GDN_SUCCESS &&
               gdn::read_tensors(*shape, &t, x) == GDN_SUCCESS;
    }

private:
    static void put(Bytes& b, const TensorLayout& L, int64_t t, int32_t h,
                    const std::vector<double>& row) {
        for (int32_t i = 0; i < L.dim; ++i)
            gdn::store_element(b.data(), L.dtype, L.offset(t, h) + i, float(row[size_t(i)]));
    }
};

// The FP64 reference of a problem from state_initial: out packed
// [T][Hv][V] (NaN for padding rows), state with the pool's indexing.
struct Reference {
    std::vector<double> out, state;
};

inline Reference reference(Problem& p) {
    Reference r;
    gdn::Shape shape;
    gdn::Tensors x;
    if (!p.normalised(&shape, &x)) return r;
    r.out.assign(size_t(p.T) * p.spec.hv * p.spec.v, std::numeric_limits<double>::quiet_NaN());
    r.state.assign(p.state_initial.begin(), p.state_initial.end());
    gdn::ref::run(shape, x, r.out.data(), r.state.data());
    return r;
}

// ---------------------------------------------------------------- running

inline gdn_caps_t cpu_caps(int32_t threads = 0) {
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    gdn_probe(GDN_BACKEND_CPU, 0, &caps);
    if (threads > 0) caps.multiprocessor_count = threads;
    return caps;
}

// Runs the problem (current state, current out) on `caps` with a workspace
// of exactly gdn_workspace_size() bytes, first filled with NaN.
inline gdn_status_t run(Problem& p, const gdn_caps_t& caps, Workspace* ws = nullptr) {
    Workspace local;
    Workspace& w = ws ? *ws : local;
    if (w.size() == 0) {
        w.size_for(caps, p.problem);
        w.fill_nan();
    }
    gdn_tensors_t t = p.tensors();
    return gdn_chunked_recurrence(&caps, &p.problem, &t, w.data(), w.size(), nullptr);
}

inline gdn_path_t selected_path(Problem& p, const gdn_caps_t& caps) {
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    gdn_tensors_t t = p.tensors();
    if (gdn_select_path(&caps, &p.problem, &t, &info) != GDN_SUCCESS) return GDN_PATH_NONE;
    return info.path;
}

// -------------------------------------------------------------- comparing

// The bound an element must meet: |got − want| <= rel_max · max|want| +
// half_ulp · |want| + abs.
struct Bound {
    double rel_max = 0.0;
    double half_ulp = 0.0;  // 2^-11 (f16), 2^-8 (bf16): the rounding of an f16/bf16 output
    double abs = 0.0;
};

inline double half_ulp_of(gdn_dtype_t t) {
    return t == GDN_DTYPE_F16 ? 1.0 / 2048.0 : t == GDN_DTYPE_BF16 ? 1.0 / 256.0 : 0.0;
}

struct Comparison {
    size_t count = 0;              // elements compared
    double max_abs_diff = 0.0, max_abs_ref = 0.0;
    double sum_sq_diff = 0.0, sum_sq_ref = 0.0;
    bool all_finite = true;
    size_t worst = 0;
    double worst_got = 0.0, worst_want = 0.0;
    size_t beyond = 0;             // elements outside the bound
    size_t first = 0;              // the first of them
    double first_got = 0.0, first_want = 0.0;
    std::string first_name;

    double rel() const { return max_abs_ref > 0 ? max_abs_diff / max_abs_ref : max_abs_diff; }
    double rel_rms() const {
        return sum_sq_ref > 0 ? std::sqrt(sum_sq_diff / sum_sq_ref) : std::sqrt(sum_sq_diff);
    }
    bool ok() const { return count > 0 && all_finite && beyond == 0; }
};

// Compares got with want where mask is set (all when mask is null).
// `name` turns an index into words for the message.
template <class Got, class Want, class Name>
Comparison compare(const std::vector<Got>& got, const std::vector<Want>& want,
                   const std::vector<char>* mask, const Bound& bound, Name name) {
    Comparison c;
    const size_t n = std::min(got.size(), want.size());
    for (size_t i = 0; i < n; ++i) {
        if (mask && !(*mask)[i]) continue;
        c.max_abs_ref = std::max(c.max_abs_ref, std::fabs(double(want[i])));
    }
    for (size_t i = 0; i < n; ++i) {
        if (mask && !(*mask)[i]) continue;
        const double g = double(got[i]), w = double(want[i]);
        ++c.count;
        const double d = std::fabs(g - w);
        const bool finite = std::isfinite(g);
        if (!finite) c.all_finite = false;
        if (!finite || d > c.max_abs_diff) {
            if (finite || c.max_abs_diff != std::numeric_limits<double>::infinity()) {
                c.worst = i;
                c.worst_got = g;
                c.worst_want = w;
            }
            c.max_abs_diff = finite ? d : std::numeric_limits<double>::infinity();
        }
        c.sum_sq_diff += finite ? d * d : 0.0;
        c.sum_sq_ref += w * w;
        const double limit = bound.rel_max * c.max_abs_ref + bound.half_ulp * std::fabs(w) + bound.abs;
        if (!finite || !(d <= limit)) {
            if (c.beyond++ == 0) {
                c.first = i;
                c.first_got = g;
                c.first_want = w;
                c.first_name = name(i);
            }
        }
    }
    if (got.size() != want.size()) c.all_finite = false;
    return c;
}

inline std::string describe(const Comparison& c, const char* what) {
    std::ostringstream m;
    m.precision(9);
    m << what << ": " << c.count << " elements, max|diff|/max|ref| = " << c.rel()
      << " (max|ref| = " << c.max_abs_ref << "), rel RMS = " << c.rel_rms()
      << (c.all_finite ? "" : ", NOT all finite");
    if (c.beyond)
        m << "; " << c.beyond << " beyond the bound, first " << c.first_name << ": got "
          << c.first_got << ", want " << c.first_want;
    return m.str();
}

// Compares the problem's out and state with a reference.
inline Comparison compare_out(const Problem& p, const std::vector<double>& want, const Bound& b) {
    const std::vector<char> mask = p.out_live();
    return compare(p.out_f32(), want, &mask, b, [&](size_t i) { return p.out_index(i); });
}
inline Comparison compare_state(const Problem& p, const std::vector<double>& want, const Bound& b) {
    const std::vector<char> mask = p.state_live();
    return compare(p.state_f32(), want, &mask, b, [&](size_t i) { return p.state_index(i); });
}

// "" when a and b are the same bytes, else the first differing byte.
inline std::string first_byte_difference(const unsigned char* a, const unsigned char* b, size_t n,
                                         const char* what) {
    for (size_t i = 0; i < n; ++i)
        if (a[i] != b[i]) {
            std::ostringstream m;
            m << what << ": byte " << i << " differs (0x" << std::hex << int(a[i]) << " vs 0x"
              << int(b[i]) << ")";
            return m.str();
        }
    return "";
}
inline std::string first_byte_difference(const Bytes& a, const Bytes& b, const char* what) {
    if (a.size() != b.size()) return std::string(what) + ": sizes differ";
    return first_byte_difference(a.data(), b.data(), a.size(), what);
}

}  // namespace gdn_test
