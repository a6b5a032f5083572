// Kernels of the GPU tests themselves (not the library's): work that a test
// puts in the stream ahead of a call, as an engine's own kernels would be.
#include "test_kernels.hpp"

namespace gdn_cuda_test {
namespace {

// One block: lets the kernels after it launch at once (they are then
// resident beside it, in their griddepcontrol.wait if they were launched
// with programmatic stream serialization), spins for `cycles`, then copies
// n int32 from src to dst.
__global__ void spin_then_copy_kernel(int32_t* dst, const int32_t* src, int n, long long cycles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) dst[i] = src[i];
}

}  // namespace

cudaError_t spin_then_copy(int32_t* dst, const int32_t* src, int n, long long cycles, cudaStream_t stream) {
    spin_then_copy_kernel<<<1, 256, 0, stream>>>(dst, src, n, cycles);
    return cudaGetLastError();
}

}  // namespace gdn_cuda_test
