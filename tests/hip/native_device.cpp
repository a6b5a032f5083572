// gdn_tests_hip: the tests of test_hip.cpp on an AMD GPU, through the
// library's C ABI (gdn_probe, gdn_select_path, gdn_workspace_size,
// gdn_chunked_recurrence). Without a HIP device: "skipped: no device", 77.
// gdn_tests_hip --bench [T,T,...]: one layer's time, chunked vs sequential.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <hip/hip_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "device.hpp"
#include "hip/backend_internal.hpp"

namespace gdn::hiptest {

void check(hipError_t e, const char* what) {
    if (e != hipSuccess) {
        std::fprintf(stderr, "gdn_tests_hip: %s: %s\n", what, hipGetErrorString(e));
        std::abort();
    }
}

namespace {

class NativeDevice final : public Device {
public:
    explicit NativeDevice(const gdn_caps_t& caps) : caps_(caps) {}
    const char* name() const override { return caps_.name; }
    bool fast() const override { return true; }
    gdn_caps_t caps(bool wmma) const override {
        gdn_caps_t c = caps_;
        if (!wmma) c.features &= ~uint64_t(GDN_FEATURE_GFX11_WMMA);
        return c;
    }
    void* alloc(size_t bytes) override {
        void* p = nullptr;
        check(hipMalloc(&p, bytes ? bytes : 1), "hipMalloc");
        return p;
    }
    void release(void* p) override { check(hipFree(p), "hipFree"); }
    void upload(void* dst, const void* src, size_t n) override {
        check(hipMemcpy(dst, src, n, hipMemcpyHostToDevice), "upload");
    }
    void download(void* dst, const void* src, size_t n) override {
        check(hipMemcpy(dst, src, n, hipMemcpyDeviceToHost), "download");
    }
    gdn_status_t run(const gdn_caps_t& caps, const gdn_problem_t& problem, const gdn_tensors_t& tensors,
                     PathChoice* path) override {
        gdn_path_info_t info;
        gdn_path_info_init(&info);
        if (gdn_status_t st = gdn_select_path(&caps, &problem, &tensors, &info)) return st;
        path->path = info.path;
        path->chunk_size = info.chunk_size;
        path->precision = info.precision;
        std::memcpy(path->reason, info.reason, sizeof path->reason);
        size_t bytes = 0;
        if (gdn_status_t st = gdn_workspace_size(&caps, &problem, &bytes)) return st;
        if (bytes > workspace_bytes_) {
            if (workspace_) release(workspace_);
            workspace_ = alloc(bytes);
            workspace_bytes_ = bytes;
        }
        if (bytes) check(hipMemset(workspace_, 0xff, bytes), "hipMemset");  // NaN
        const gdn_status_t st = gdn_chunked_recurrence(&caps, &problem, &tensors, workspace_, bytes, nullptr);
        check(hipDeviceSynchronize(), "hipDeviceSynchronize");
        return st;
    }
    gdn_status_t wmma_tile(const uint16_t* A, const uint16_t* B, const float* C, float* D) override {
        void* dA = alloc(512);
        void* dB = alloc(512);
        void* dC = alloc(1024);
        void* dD = alloc(1024);
        upload(dA, A, 512);
        upload(dB, B, 512);
        upload(dC, C, 1024);
        const gdn_status_t st = hip::run_wmma_tile(caps_.device, dA, dB, dC, dD, nullptr);
        check(hipDeviceSynchronize(), "hipDeviceSynchronize");
        if (st == GDN_SUCCESS) download(D, dD, 1024);
        release(dA);
        release(dB);
        release(dC);
        release(dD);
        return st;
    }
    unsigned wmma_operand_faults() override { return 0; }

private:
    gdn_caps_t caps_;
    void* workspace_ = nullptr;
    size_t workspace_bytes_ = 0;
};

NativeDevice* g_device = nullptr;

}  // namespace

Device& device() { return *g_device; }

}  // namespace gdn::hiptest

namespace {

using gdn::hiptest::check;

// gdn_tests_hip --bench [T,T,...]: one layer's time (Hk 16, Hv 48, K = V = 128,
// bf16 q/k/v/z, f32 gates and out, output norm, nonzero state) on the
// chunked path and on the sequential kernel; GPU-event median of 7 runs
// after 2 warm-ups, both on the same inputs.
int bench(const gdn_caps_t& caps, const std::vector<int64_t>& Ts) {
    const int32_t Hk = 16, Hv = 48, D = 128;
    std::printf("%8s %14s %14s %8s   (%s, %s)\n", "tokens", "sequential ms", "chunked ms", "speedup",
                caps.name, caps.arch);
    for (int64_t T : Ts) {
        const size_t in_elems = size_t(T) * (2 * Hk * D + 2 * Hv * D);
        void *in = nullptr, *g = nullptr, *beta = nullptr, *out = nullptr, *state = nullptr, *w = nullptr;
        check(hipMalloc(&in, in_elems * 2), "hipMalloc");
        check(hipMalloc(&g, size_t(T) * Hv * 4), "hipMalloc");
        check(hipMalloc(&beta, size_t(T) * Hv * 4), "hipMalloc");
        check(hipMalloc(&out, size_t(T) * Hv * D * 4), "hipMalloc");
        check(hipMalloc(&state, size_t(Hv) * D * D * 4), "hipMalloc");
        check(hipMalloc(&w, D * 4), "hipMalloc");
        {  // inputs: bf16 ~0.5 (bit pattern 0x3f00), g = -0.1, beta = 0.5, w = 1, state 0.01
            std::vector<uint16_t> hin(in_elems, 0x3f00);
            for (size_t i = 0; i < hin.size(); i += 7) hin[i] = 0xbf00;  // some -0.5
            check(hipMemcpy(in, hin.data(), hin.size() * 2, hipMemcpyHostToDevice), "upload");
            std::vector<float> hg(size_t(T) * Hv, -0.1f), hb(size_t(T) * Hv, 0.5f), hw(D, 1.0f),
                hs(size_t(Hv) * D * D, 0.01f);
            check(hipMemcpy(g, hg.data(), hg.size() * 4, hipMemcpyHostToDevice), "upload");
            check(hipMemcpy(beta, hb.data(), hb.size() * 4, hipMemcpyHostToDevice), "upload");
            check(hipMemcpy(w, hw.data(), hw.size() * 4, hipMemcpyHostToDevice), "upload");
            check(hipMemcpy(state, hs.data(), hs.size() * 4, hipMemcpyHostToDevice), "upload");
        }
        const int64_t row = 2 * Hk * D + 2 * Hv * D;
        const char* base = static_cast<const char*>(in);
        gdn_tensors_t t;
        gdn_tensors_init(&t);
        t.q = base; t.q_token_stride = row;
        t.k = base + Hk * D * 2; t.k_token_stride = row;
        t.v = base + 2 * Hk * D * 2; t.v_token_stride = row;
        t.z = base + (2 * Hk * D + Hv * D) * 2; t.z_token_stride = row;
        t.g = g;
        t.beta = beta;
        t.out = out;
        t.state = static_cast<float*>(state);
        t.norm_weight = static_cast<const float*>(w);
        double ms[2] = {0, 0};
        for (int a = 0; a < 2; ++a) {
            gdn_problem_t p;
            gdn_problem_init(&p);
            p.num_tokens = T;
            p.num_k_heads = Hk;
            p.num_v_heads = Hv;
            p.head_dim_k = p.head_dim_v = D;
            p.input_dtype = GDN_DTYPE_BF16;
            p.gate_dtype = GDN_DTYPE_F32;
            p.output_dtype = GDN_DTYPE_F32;
            p.precision = GDN_PRECISION_FP16;
            p.algorithm = a == 0 ? GDN_ALGO_SEQUENTIAL : GDN_ALGO_CHUNKED;
            p.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_OUTPUT_NORM;
            size_t bytes = 0;
            if (gdn_workspace_size(&caps, &p, &bytes) != GDN_SUCCESS) {
                std::printf("%8lld  %s\n", static_cast<long long>(T), gdn_last_error());
                ms[a] = -1;
                continue;
            }
            void* ws = nullptr;
            check(hipMalloc(&ws, bytes ? bytes : 1), "hipMalloc");
            hipEvent_t e0, e1;
            check(hipEventCreate(&e0), "hipEventCreate");
            check(hipEventCreate(&e1), "hipEventCreate");
            std::vector<float> times;
            for (int rep = 0; rep < 9; ++rep) {
                check(hipEventRecord(e0, nullptr), "hipEventRecord");
                if (gdn_chunked_recurrence(&caps, &p, &t, ws, bytes, nullptr) != GDN_SUCCESS) {
                    std::printf("%8lld  %s\n", static_cast<long long>(T), gdn_last_error());
                    break;
                }
                check(hipEventRecord(e1, nullptr), "hipEventRecord");
                check(hipEventSynchronize(e1), "hipEventSynchronize");
                float e = 0;
                check(hipEventElapsedTime(&e, e0, e1), "hipEventElapsedTime");
                if (rep >= 2) times.push_back(e);
            }
            std::sort(times.begin(), times.end());
            ms[a] = times.empty() ? -1 : times[times.size() / 2];
            check(hipEventDestroy(e0), "hipEventDestroy");
            check(hipEventDestroy(e1), "hipEventDestroy");
            check(hipFree(ws), "hipFree");
        }
        std::printf("%8lld %14.3f %14.3f %7.2fx\n", static_cast<long long>(T), ms[0], ms[1],
                    ms[1] > 0 ? ms[0] / ms[1] : 0.0);
        for (void* ptr : {in, g, beta, out, state, w}) check(hipFree(ptr), "hipFree");
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    const gdn_status_t st = gdn_probe(GDN_BACKEND_HIP, 0, &caps);
    if (st == GDN_ERROR_BACKEND_UNAVAILABLE) {
        std::printf("skipped: no device (%s)\n", gdn_last_error());
        return 77;
    }
    if (st != GDN_SUCCESS) {
        std::printf("gdn_probe(HIP, 0) failed: %s\n", gdn_last_error());
        return 1;
    }
    std::printf("[hip] native: %s (%s), %d CUs, wave%d, WMMA %s\n", caps.name, caps.arch,
                caps.multiprocessor_count, caps.warp_size,
                (caps.features & GDN_FEATURE_GFX11_WMMA) ? "yes" : "no");
    if (argc >= 2 && std::string(argv[1]) == "--bench") {
        std::vector<int64_t> Ts = {64, 256, 2048, 16384, 32768};
        if (argc >= 3) {
            Ts.clear();
            for (const char* p = argv[2]; *p;) {
                Ts.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
                if (*p == ',') ++p;
            }
        }
        return bench(caps, Ts);
    }
    static gdn::hiptest::NativeDevice device(caps);
    gdn::hiptest::g_device = &device;
    return Catch::Session().run(argc, argv);
}
