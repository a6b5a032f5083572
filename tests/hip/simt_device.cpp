// gdn_tests_hip_simt: the HIP kernels' source on host fibers (CPU only, so CI
// runs the kernels' logic, the WMMA emulation included, without a GPU).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>

#include "emulated_device.hpp"

#define GDN_HIP_HOST_SIMT 1
#include "hip/kernels.hpp"

namespace gdn::hiptest {

namespace {

template <void (*K)(const hip::KernelParams)>
void body(const void* arg) {
    K(*static_cast<const hip::KernelParams*>(arg));
}

struct TileArgs {
    const uint16_t* A;
    const uint16_t* B;
    const float* C;
    float* D;
};
void tile_body(const void* arg) {
    const TileArgs* a = static_cast<const TileArgs*>(arg);
    gdn_hip_wmma_tile(a->A, a->B, a->C, a->D);
}

class SimtDevice final : public EmulatedDevice {
public:
    const char* name() const override { return "host fibers"; }
    bool fast() const override { return false; }
    void* alloc(size_t bytes) override { return std::malloc(bytes ? bytes : 1); }
    void release(void* p) override { std::free(p); }
    void upload(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
    void download(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
    gdn_status_t wmma_tile(const uint16_t* A, const uint16_t* B, const float* C, float* D) override {
        const TileArgs args{A, B, C, D};
        hip::simt::launch(1, 32, tile_body, &args);
        return GDN_SUCCESS;
    }
    unsigned wmma_operand_faults() override { return hip::arch::g_wmma_operand_mismatch; }
    void set_wave64(bool on) override { hip::simt::set_warp_size(on ? 64 : 32); }

protected:
    gdn_status_t launch(const hip::Launch& l, const hip::KernelParams& p) override {
        static void (*const bodies[])(const void*) = {
            body<gdn_hip_sequential_k64_v64>,  body<gdn_hip_sequential_k64_v128>,
            body<gdn_hip_sequential_k128_v64>, body<gdn_hip_sequential_k128_v128>,
            body<gdn_hip_chunk_prep>,          body<gdn_hip_chunk_scan>,
            body<gdn_hip_chunk_scan_f32>,
        };
        static_assert(sizeof bodies / sizeof bodies[0] == int(hip::Kernel::count), "kernels");
        hip::simt::launch(l.grid, l.block, bodies[int(l.kernel)], &p);
        return GDN_SUCCESS;
    }
    void fill(void* dst, int byte, size_t n) override { std::memset(dst, byte, n); }
    gdn_status_t synchronize() override { return GDN_SUCCESS; }
};

}  // namespace

Device& device() {
    static SimtDevice d;
    return d;
}

}  // namespace gdn::hiptest

int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }
