// The HIP kernels' source (src/hip/kernels.hpp) compiled by nvcc: arch.hpp
// emulates the gfx11 wave32 WMMA lane by lane with warp shuffles.
#include "emu_cuda.hpp"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "hip/kernels.hpp"

namespace gdn::hiptest::cuda_emu {

namespace {
void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "gdn_tests_hip_emu: %s: %s\n", what, cudaGetErrorString(e));
        std::abort();
    }
}
}  // namespace

bool available(std::string* why) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
        return false;
    }
    return true;
}

const char* device_name() {
    static cudaDeviceProp prop;
    static bool done = false;
    if (!done) {
        check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
        done = true;
    }
    return prop.name;
}

void* alloc(size_t bytes) {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
    return p;
}
void release(void* p) { check(cudaFree(p), "cudaFree"); }
void upload(void* dst, const void* src, size_t n) { check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "upload"); }
void download(void* dst, const void* src, size_t n) {
    check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "download");
}
void fill(void* dst, int byte, size_t n) { check(cudaMemset(dst, byte, n), "cudaMemset"); }

int launch(hip::Kernel kernel, unsigned grid, unsigned block, const hip::KernelParams& p) {
    switch (kernel) {
        case hip::Kernel::sequential_k64_v64: gdn_hip_sequential_k64_v64<<<grid, block>>>(p); break;
        case hip::Kernel::sequential_k64_v128: gdn_hip_sequential_k64_v128<<<grid, block>>>(p); break;
        case hip::Kernel::sequential_k128_v64: gdn_hip_sequential_k128_v64<<<grid, block>>>(p); break;
        case hip::Kernel::sequential_k128_v128: gdn_hip_sequential_k128_v128<<<grid, block>>>(p); break;
        case hip::Kernel::chunk_prep: gdn_hip_chunk_prep<<<grid, block>>>(p); break;
        case hip::Kernel::chunk_scan: gdn_hip_chunk_scan<<<grid, block>>>(p); break;
        case hip::Kernel::chunk_scan_f32: gdn_hip_chunk_scan_f32<<<grid, block>>>(p); break;
        default: return int(cudaErrorInvalidValue);
    }
    return int(cudaGetLastError());
}

int wmma_tile(const uint16_t* A, const uint16_t* B, const float* C, float* D) {
    gdn_hip_wmma_tile<<<1, 32>>>(A, B, C, D);
    return int(cudaGetLastError());
}

int synchronize() { return int(cudaDeviceSynchronize()); }

const char* error_string(int code) { return cudaGetErrorString(cudaError_t(code)); }

unsigned wmma_operand_faults() {
    unsigned v = 0;
    check(cudaMemcpyFromSymbol(&v, hip::arch::g_wmma_operand_mismatch, sizeof v), "faults");
    return v;
}

}  // namespace gdn::hiptest::cuda_emu
