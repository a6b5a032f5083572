// gdn_tests_hip_emu: the HIP kernels on an NVIDIA GPU through the WMMA
// emulation. Without a CUDA device: "skipped: no device", exit code 77.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "emu_cuda.hpp"
#include "emulated_device.hpp"

namespace gdn::hiptest {

namespace {

class CudaEmuDevice final : public EmulatedDevice {
public:
    const char* name() const override { return "nvcc WMMA emulation"; }
    // GDN_HIP_TEST_SMALL=1: the host fibers' sizes (for compute-sanitizer runs).
    bool fast() const override { return std::getenv("GDN_HIP_TEST_SMALL") == nullptr; }
    void* alloc(size_t bytes) override { return cuda_emu::alloc(bytes); }
    void release(void* p) override { cuda_emu::release(p); }
    void upload(void* dst, const void* src, size_t n) override { cuda_emu::upload(dst, src, n); }
    void download(void* dst, const void* src, size_t n) override { cuda_emu::download(dst, src, n); }
    gdn_status_t wmma_tile(const uint16_t* A, const uint16_t* B, const float* C, float* D) override {
        void* dA = alloc(512);
        void* dB = alloc(512);
        void* dC = alloc(1024);
        void* dD = alloc(1024);
        upload(dA, A, 512);
        upload(dB, B, 512);
        upload(dC, C, 1024);
        int e = cuda_emu::wmma_tile(static_cast<const uint16_t*>(dA), static_cast<const uint16_t*>(dB),
                                    static_cast<const float*>(dC), static_cast<float*>(dD));
        if (e == 0) e = cuda_emu::synchronize();
        if (e == 0) download(D, dD, 1024);
        release(dA);
        release(dB);
        release(dC);
        release(dD);
        return e == 0 ? GDN_SUCCESS : GDN_ERROR_DEVICE;
    }
    unsigned wmma_operand_faults() override { return cuda_emu::wmma_operand_faults(); }

protected:
    gdn_status_t launch(const hip::Launch& l, const hip::KernelParams& p) override {
        const int e = cuda_emu::launch(l.kernel, l.grid, l.block, p);
        if (e != 0) {
            std::fprintf(stderr, "launch of %s failed: %s\n", hip::kKernelNames[int(l.kernel)],
                         cuda_emu::error_string(e));
            return GDN_ERROR_DEVICE;
        }
        return GDN_SUCCESS;
    }
    void fill(void* dst, int byte, size_t n) override { cuda_emu::fill(dst, byte, n); }
    gdn_status_t synchronize() override {
        const int e = cuda_emu::synchronize();
        if (e != 0) {
            std::fprintf(stderr, "kernel failed: %s\n", cuda_emu::error_string(e));
            return GDN_ERROR_DEVICE;
        }
        return GDN_SUCCESS;
    }
};

}  // namespace

Device& device() {
    static CudaEmuDevice d;
    return d;
}

}  // namespace gdn::hiptest

int main(int argc, char** argv) {
    std::string why;
    if (!gdn::hiptest::cuda_emu::available(&why)) {
        std::printf("skipped: no device (%s)\n", why.c_str());
        return 77;
    }
    std::printf("[hip] emulating gfx11 WMMA on %s\n", gdn::hiptest::cuda_emu::device_name());
    return Catch::Session().run(argc, argv);
}
