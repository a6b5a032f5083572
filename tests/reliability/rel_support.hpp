// Helpers of the reliability tests: a start barrier, deterministic inputs, a
// packed host problem that can be run again and again, and address-space
// reservations for tensors whose offsets pass 2^31 elements.
#pragma once

#include <sys/mman.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "gdn/gdn.h"

namespace rel {

// Releases every waiting thread at once, so their first calls collide.
class Barrier {
public:
    explicit Barrier(int count) : count_(count) {}
    void wait() {
        std::unique_lock<std::mutex> lock(m_);
        if (--count_ == 0) {
            cv_.notify_all();
        } else {
            cv_.wait(lock, [this] { return count_ <= 0; });
        }
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    int count_;
};

// A deterministic value in [lo, hi) for element i of stream `seed`, so a
// packed and a strided copy of one tensor hold the same numbers.
inline float value_at(uint64_t seed, uint64_t i, float lo, float hi) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 1;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * float(z >> 40) / float(1 << 24);
}

inline size_t dtype_bytes(gdn_dtype_t t) { return t == GDN_DTYPE_F32 ? 4 : 2; }

// A problem's shape and options, for HostCase.
struct Config {
    int64_t T = 64;
    int32_t seqs = 1, Hk = 1, Hv = 2, K = 16, V = 16;
    gdn_dtype_t in = GDN_DTYPE_F32, out = GDN_DTYPE_F32;
    uint32_t flags = 0;
    gdn_algorithm_t algorithm = GDN_ALGO_AUTO;
    gdn_precision_t precision = GDN_PRECISION_FP32;
    gdn_state_layout_t layout = GDN_STATE_KV;
    gdn_head_mapping_t mapping = GDN_HEADS_GROUPED;
    uint64_t seed = 1;
};

// A packed problem on host buffers it owns (CPU backend). run() restores
// the initial state first, so every run of one case must give the same bits.
struct HostCase {
    Config cfg;
    gdn_problem_t problem;
    gdn_tensors_t tensors;
    std::vector<unsigned char> q, k, v, z, out;
    std::vector<float> g, beta, state, state_init, A_log, dt_bias, norm_weight;
    std::vector<int32_t> cu_seqlens, state_indices;
    std::vector<uint8_t> start_from_zero;
    std::vector<unsigned char> workspace_storage;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;

    HostCase(const HostCase&) = delete;  // tensors points into the vectors
    HostCase& operator=(const HostCase&) = delete;

    explicit HostCase(const Config& c) : cfg(c) {
        gdn_problem_init(&problem);
        problem.num_seqs = c.seqs;
        problem.num_tokens = c.T;
        problem.num_k_heads = c.Hk;
        problem.num_v_heads = c.Hv;
        problem.head_dim_k = c.K;
        problem.head_dim_v = c.V;
        problem.input_dtype = c.in;
        problem.gate_dtype = GDN_DTYPE_F32;
        problem.output_dtype = c.out;
        problem.flags = c.flags;
        problem.algorithm = c.algorithm;
        problem.precision = c.precision;
        problem.state_layout = c.layout;
        problem.head_mapping = c.mapping;
        problem.num_state_slots = c.seqs + 1;  // one slot stays unused: it must stay untouched

        const size_t T = size_t(c.T);
        const float qk = 1.0f / float(c.K);  // small k·k: a stable recurrence
        fill(q, T * size_t(c.Hk) * size_t(c.K), c.in, c.seed * 16 + 0, -qk * 4, qk * 4);
        fill(k, T * size_t(c.Hk) * size_t(c.K), c.in, c.seed * 16 + 1, -qk * 4, qk * 4);
        fill(v, T * size_t(c.Hv) * size_t(c.V), c.in, c.seed * 16 + 2, -1.0f, 1.0f);
        fill(z, T * size_t(c.Hv) * size_t(c.V), c.in, c.seed * 16 + 3, -2.0f, 2.0f);
        out.assign(T * size_t(c.Hv) * size_t(c.V) * dtype_bytes(c.out), 0);
        const bool raw_gate = (c.flags & GDN_FLAG_GATE_FROM_RAW) != 0;
        const bool logits = (c.flags & GDN_FLAG_BETA_FROM_LOGITS) != 0;
        fillf(g, T * size_t(c.Hv), c.seed * 16 + 4, raw_gate ? -3.0f : -0.4f, raw_gate ? 3.0f : 0.0f);
        fillf(beta, T * size_t(c.Hv), c.seed * 16 + 5, logits ? -3.0f : 0.0f, logits ? 3.0f : 1.0f);
        const size_t slot = size_t(c.Hv) * size_t(c.K) * size_t(c.V);
        fillf(state_init, slot * size_t(c.seqs + 1), c.seed * 16 + 6, -0.5f, 0.5f);
        state = state_init;
        fillf(A_log, size_t(c.Hv), c.seed * 16 + 7, -1.0f, 0.5f);
        fillf(dt_bias, size_t(c.Hv), c.seed * 16 + 8, -0.5f, 0.5f);
        fillf(norm_weight, size_t(c.V), c.seed * 16 + 9, 0.5f, 1.5f);
        // Uneven sequences; slots in reverse order; the last sequence starts from zero.
        cu_seqlens.assign(size_t(c.seqs) + 1, 0);
        for (int32_t i = 1; i <= c.seqs; ++i)
            cu_seqlens[size_t(i)] = int32_t(c.T * (int64_t(i) * i) / (int64_t(c.seqs) * c.seqs));
        for (int32_t i = 0; i < c.seqs; ++i) state_indices.push_back(c.seqs - i);
        start_from_zero.assign(size_t(c.seqs), 0);
        if (c.seqs > 1) start_from_zero.back() = 1;

        gdn_tensors_init(&tensors);
        tensors.q = q.data();
        tensors.k = k.data();
        tensors.v = v.data();
        tensors.g = g.data();
        tensors.beta = beta.data();
        tensors.out = out.data();
        tensors.z = z.data();
        tensors.state = state.data();
        tensors.cu_seqlens = cu_seqlens.data();
        tensors.state_indices = state_indices.data();
        tensors.start_from_zero = start_from_zero.data();
        tensors.A_log = A_log.data();
        tensors.dt_bias = dt_bias.data();
        tensors.norm_weight = norm_weight.data();
    }

    // Sizes (and allocates) the workspace for these caps; false on failure.
    bool prepare(const gdn_caps_t& caps) {
        size_t need = 0;
        if (gdn_workspace_size(&caps, &problem, &need) != GDN_SUCCESS) return false;
        workspace_storage.assign(need + GDN_WORKSPACE_ALIGNMENT, 0);
        uintptr_t p = reinterpret_cast<uintptr_t>(workspace_storage.data());
        p = (p + GDN_WORKSPACE_ALIGNMENT - 1) / GDN_WORKSPACE_ALIGNMENT * GDN_WORKSPACE_ALIGNMENT;
        workspace = reinterpret_cast<void*>(p);
        workspace_bytes = need;
        return true;
    }

    // Restores the state, fills out with NaN (and the workspace with NaN when
    // asked), runs.
    gdn_status_t run(const gdn_caps_t& caps, bool poison_workspace) {
        state = state_init;
        tensors.state = state.data();
        std::memset(out.data(), 0xFF, out.size());
        if (poison_workspace) std::memset(workspace_storage.data(), 0xFF, workspace_storage.size());
        return gdn_chunked_recurrence(&caps, &problem, &tensors, workspace, workspace_bytes, nullptr);
    }

    // out and state, as bytes.
    std::vector<unsigned char> bits() const {
        std::vector<unsigned char> b(out);
        const unsigned char* s = reinterpret_cast<const unsigned char*>(state.data());
        b.insert(b.end(), s, s + state.size() * sizeof(float));
        return b;
    }

private:
    static void fill(std::vector<unsigned char>& dst, size_t n, gdn_dtype_t t, uint64_t seed, float lo, float hi) {
        dst.assign(n * dtype_bytes(t), 0);
        for (size_t i = 0; i < n; ++i) gdn::store_element(dst.data(), t, int64_t(i), value_at(seed, i, lo, hi));
    }
    static void fillf(std::vector<float>& dst, size_t n, uint64_t seed, float lo, float hi) {
        dst.resize(n);
        for (size_t i = 0; i < n; ++i) dst[i] = value_at(seed, i, lo, hi);
    }
};

// An address-space reservation: pages cost memory only once touched, so a
// tensor can span tens of GB while only the rows used are ever written.
class Reservation {
public:
    Reservation() = default;
    explicit Reservation(size_t bytes) : bytes_(bytes) {
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        p_ = p == MAP_FAILED ? nullptr : p;
    }
    ~Reservation() {
        if (p_) munmap(p_, bytes_);
    }
    Reservation(Reservation&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
    Reservation& operator=(Reservation&& o) noexcept {
        std::swap(p_, o.p_);
        std::swap(bytes_, o.bytes_);
        return *this;
    }
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    void* data() const { return p_; }
    size_t bytes() const { return bytes_; }

private:
    void* p_ = nullptr;
    size_t bytes_ = 0;
};

}  // namespace rel
