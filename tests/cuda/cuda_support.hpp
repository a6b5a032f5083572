// GPU test utilities: device buffers with guard bands, a device mirror of a
// host gdn_test::Problem (tests/support.hpp), the CUDA caps, runs through the
// public API, and an FP64 reference spread over host threads (one value head
// per task) for the long shapes.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../support.hpp"

namespace gdn_cuda_test {

using namespace gdn_test;

inline void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess)
        throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
#define GDN_CUDA_CHECK(x) ::gdn_cuda_test::check((x), #x)

// Device memory with kGuard bytes of a pattern before and after the buffer.
class DeviceBuffer {
public:
    static constexpr size_t kGuard = 256;
    static constexpr unsigned char kGuardByte = 0xC3;

    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t size) { resize(size); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() {
        if (base_) cudaFree(base_);
    }
    void resize(size_t size) {
        if (base_) cudaFree(base_);
        base_ = nullptr;
        size_ = size;
        GDN_CUDA_CHECK(cudaMalloc(&base_, size + 2 * kGuard));
        GDN_CUDA_CHECK(cudaMemset(base_, kGuardByte, size + 2 * kGuard));
    }
    void* data() const { return size_ ? static_cast<char*>(base_) + kGuard : nullptr; }
    template <class T>
    T* as() const { return static_cast<T*>(data()); }
    size_t size() const { return size_; }
    void upload(const void* src, size_t n) {
        if (n) GDN_CUDA_CHECK(cudaMemcpy(data(), src, n, cudaMemcpyHostToDevice));
    }
    void download(void* dst, size_t n) const {
        if (n) GDN_CUDA_CHECK(cudaMemcpy(dst, data(), n, cudaMemcpyDeviceToHost));
    }
    std::vector<unsigned char> bytes() const {
        std::vector<unsigned char> b(size_);
        download(b.data(), size_);
        return b;
    }
    void fill(unsigned char b, cudaStream_t s = nullptr) {
        if (size_) GDN_CUDA_CHECK(cudaMemsetAsync(data(), b, size_, s));
    }
    // "" when both guard bands still hold their pattern.
    std::string guard_damage(const char* name) const {
        if (!base_) return "";
        std::vector<unsigned char> g(kGuard);
        for (int side = 0; side < 2; ++side) {
            const char* at = static_cast<const char*>(base_) + (side ? kGuard + size_ : 0);
            GDN_CUDA_CHECK(cudaMemcpy(g.data(), at, kGuard, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < kGuard; ++i)
                if (g[i] != kGuardByte)
                    return std::string(name) + (side ? ": guard after, byte " : ": guard before, byte ") +
                           std::to_string(i) + " changed";
        }
        return "";
    }

private:
    void* base_ = nullptr;
    size_t size_ = 0;
};

// The device the tests run on: GDN_TEST_DEVICE (default 0), made current by
// main() before any test allocates, so the suite can run on a second GPU.
inline int test_device() {
    const char* env = std::getenv("GDN_TEST_DEVICE");
    return env ? std::atoi(env) : 0;
}

inline bool device_present() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) cudaGetLastError();
    return e == cudaSuccess && n > test_device();
}

inline gdn_caps_t cuda_caps() {
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    if (gdn_probe(GDN_BACKEND_CUDA, test_device(), &caps) != GDN_SUCCESS)
        throw std::runtime_error(std::string("gdn_probe(CUDA): ") + gdn_last_error());
    return caps;
}

// The device copy of a host problem: every tensor and array uploaded, out
// pre-filled with NaN (as the host's), state from state_initial.
class DeviceProblem {
public:
    Problem& host;
    DeviceBuffer q, k, v, g, beta, z, out, state, state_initial, cu, idx, sfz, A_log, dt_bias,
        norm_weight;

    explicit DeviceProblem(Problem& p) : host(p) {
        put(q, p.q);
        put(k, p.k);
        put(v, p.v);
        put(g, p.g);
        put(beta, p.beta);
        put(z, p.z);
        put(out, p.out);
        state_initial.resize(p.state_initial.size() * 4);
        state_initial.upload(p.state_initial.data(), state_initial.size());
        state.resize(state_initial.size());
        reset_state();
        put_vec(cu, p.cu_seqlens);
        put_vec(idx, p.state_indices);
        put_vec(sfz, p.start_from_zero);
        put_vec(A_log, p.A_log);
        put_vec(dt_bias, p.dt_bias);
        put_vec(norm_weight, p.norm_weight);
    }

    void reset_state(cudaStream_t s = nullptr) {
        GDN_CUDA_CHECK(cudaMemcpyAsync(state.data(), state_initial.data(), state.size(),
                                       cudaMemcpyDeviceToDevice, s));
    }
    void fill_out_nan(cudaStream_t s = nullptr) { out.fill(0xFF, s); }  // NaN in every dtype

    gdn_tensors_t tensors() const {
        gdn_tensors_t t = host.tensors();  // strides and which pointers are set
        auto dev = [](const void* set, const DeviceBuffer& b) -> const void* {
            return set ? b.data() : nullptr;
        };
        t.q = dev(t.q, q);
        t.k = dev(t.k, k);
        t.v = dev(t.v, v);
        t.g = dev(t.g, g);
        t.beta = dev(t.beta, beta);
        t.out = out.data();
        t.z = dev(t.z, z);
        t.state = state.as<float>();
        t.cu_seqlens = static_cast<const int32_t*>(dev(t.cu_seqlens, cu));
        t.state_indices = static_cast<const int32_t*>(dev(t.state_indices, idx));
        t.start_from_zero = static_cast<const uint8_t*>(dev(t.start_from_zero, sfz));
        t.A_log = static_cast<const float*>(dev(t.A_log, A_log));
        t.dt_bias = static_cast<const float*>(dev(t.dt_bias, dt_bias));
        t.norm_weight = static_cast<const float*>(dev(t.norm_weight, norm_weight));
        return t;
    }

    // Device out and state -> the host problem's buffers (for its compare helpers).
    void download() {
        out.download(host.out.data(), host.out.size());
        state.download(host.state.data(), host.state.size());
    }

    std::string guard_damage() const {
        std::string d;
        for (auto [b, name] : {std::pair<const DeviceBuffer*, const char*>{&out, "out"},
                               {&state, "state"}, {&q, "q"}, {&k, "k"}, {&v, "v"}})
            if (d.empty()) d = b->guard_damage(name);
        return d;
    }

private:
    static void put(DeviceBuffer& d, const Bytes& h) {
        d.resize(h.size());
        d.upload(h.data(), h.size());
    }
    template <class T>
    static void put_vec(DeviceBuffer& d, const std::vector<T>& h) {
        d.resize(h.size() * sizeof(T));
        d.upload(h.data(), d.size());
    }
};

// A device workspace of gdn_workspace_size() bytes.
struct DeviceWorkspace {
    DeviceBuffer buf;
    gdn_status_t size_for(const gdn_caps_t& caps, const gdn_problem_t& problem) {
        size_t need = 0;
        const gdn_status_t st = gdn_workspace_size(&caps, &problem, &need);
        if (st == GDN_SUCCESS) buf.resize(need);
        return st;
    }
    void fill_nan(cudaStream_t s = nullptr) { buf.fill(0xFF, s); }
    void* data() const { return buf.data(); }
    size_t size() const { return buf.size(); }
};

// One call through the public API on `stream`.
inline gdn_status_t run(const gdn_tensors_t& t, const gdn_problem_t& problem, const gdn_caps_t& caps,
                        const DeviceWorkspace& ws, cudaStream_t stream = nullptr) {
    return gdn_chunked_recurrence(&caps, &problem, &t, ws.data(), ws.size(), stream);
}
inline gdn_status_t run(const DeviceProblem& d, const gdn_problem_t& problem, const gdn_caps_t& caps,
                        const DeviceWorkspace& ws, cudaStream_t stream = nullptr) {
    return run(d.tensors(), problem, caps, ws, stream);
}

// One call captured into *graph on `stream` (not run); the call's status.
inline gdn_status_t capture(const DeviceProblem& d, const gdn_problem_t& problem, const gdn_caps_t& caps,
                            const DeviceWorkspace& ws, cudaStream_t stream, cudaGraph_t* graph) {
    GDN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const gdn_status_t st = run(d, problem, caps, ws, stream);
    GDN_CUDA_CHECK(cudaStreamEndCapture(stream, graph));
    return st;
}

inline gdn_problem_t with_algorithm(gdn_problem_t p, gdn_algorithm_t a) {
    p.algorithm = a;
    return p;
}

// The FP64 reference of a problem from state_initial, one value head per
// task over `threads` host threads (gdn::ref::run on a one-head view).
inline Reference reference_parallel(Problem& p, unsigned threads = 0) {
    Reference r;
    gdn::Shape shape;
    gdn::Tensors x;
    if (!p.normalised(&shape, &x)) throw std::runtime_error("reference: bad problem");
    const int32_t Hv = shape.num_v_heads, K = shape.head_dim_k, V = shape.head_dim_v;
    r.out.assign(size_t(p.T) * Hv * V, std::numeric_limits<double>::quiet_NaN());
    r.state.assign(p.state_initial.begin(), p.state_initial.end());
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> pool;
    std::atomic<int32_t> next{0};
    auto shift = [](const void* base, int64_t elems, gdn_dtype_t dt) -> const void* {
        return base ? static_cast<const char*>(base) + elems * int64_t(gdn::dtype_size(dt)) : nullptr;
    };
    auto work = [&]() {
        std::vector<double> head_out;
        for (int32_t h = next.fetch_add(1); h < Hv; h = next.fetch_add(1)) {
            const int32_t kh = gdn::key_head_of(shape, h);
            gdn::Shape s1 = shape;
            s1.num_k_heads = 1;
            s1.num_v_heads = 1;
            s1.group = 1;
            gdn::Tensors x1 = x;
            x1.q = shift(x.q, kh * x.q_stride.head, shape.input_dtype);
            x1.k = shift(x.k, kh * x.k_stride.head, shape.input_dtype);
            x1.v = shift(x.v, h * x.v_stride.head, shape.input_dtype);
            x1.g = shift(x.g, h * x.g_stride.head, shape.gate_dtype);
            x1.beta = shift(x.beta, h * x.beta_stride.head, shape.gate_dtype);
            x1.z = shift(x.z, h * x.z_stride.head, shape.input_dtype);
            x1.A_log = x.A_log ? x.A_log + h : nullptr;
            x1.dt_bias = x.dt_bias ? x.dt_bias + h : nullptr;
            head_out.assign(size_t(p.T) * V, std::numeric_limits<double>::quiet_NaN());
            // The head's state block in the pool: the slot stride stays, the
            // head offset moves into the pointer.
            gdn::ref::run(s1, x1, head_out.data(), r.state.data() + int64_t(h) * K * V);
            for (int64_t t = 0; t < p.T; ++t)
                std::copy_n(head_out.begin() + t * V, V, r.out.begin() + (t * Hv + h) * V);
        }
    };
    for (unsigned i = 1; i < threads; ++i) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    return r;
}

// Bit-exact equality of two host byte vectors ("" when equal).
inline std::string same_bits(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b,
                             const char* what) {
    if (a.size() != b.size()) return std::string(what) + ": sizes differ";
    return first_byte_difference(a.data(), b.data(), a.size(), what);
}

}  // namespace gdn_cuda_test
