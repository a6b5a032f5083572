// gdn_tests_hip: the tests of test_hip.cpp on an AMD GPU, through the
// library's C ABI (gdn_probe, gdn_select_path, gdn_workspace_size,
// gdn_chunked_recurrence). Without a HIP device: "skipped: no device", 77.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <hip/hip_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "device.hpp"
#include "hip/backend_internal.hpp"

namespace gdn::hiptest {

namespace {

void check(hipError_t e, const char* what) {
    if (e != hipSuccess) {
        std::fprintf(stderr, "gdn_tests_hip: %s: %s\n", what, hipGetErrorString(e));
        std::abort();
    }
}

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
    static gdn::hiptest::NativeDevice device(caps);
    gdn::hiptest::g_device = &device;
    return Catch::Session().run(argc, argv);
}
