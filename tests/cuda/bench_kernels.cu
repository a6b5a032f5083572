// Reference kernels for gdn_bench_cuda: what the memory system gives a plain
// in-place update, the floor of the decode step (which reads and rewrites
// every state it touches in place).
#include <cuda_runtime.h>

#include <cstdint>

namespace {

// x = a·x over n4 float4s, four loads in flight per thread.
__global__ void __launch_bounds__(512) scale_in_place_kernel(float4* x, int64_t n4, float a) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        float4 v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = x[i + k * stride];
#pragma unroll
        for (int k = 0; k < 4; ++k)
            x[i + k * stride] = make_float4(a * v[k].x, a * v[k].y, a * v[k].z, a * v[k].w);
    }
    for (; i < n4; i += stride) {
        const float4 v = x[i];
        x[i] = make_float4(a * v.x, a * v.y, a * v.z, a * v.w);
    }
}

}  // namespace

// bytes: a multiple of 16.
cudaError_t bench_scale_in_place(void* x, size_t bytes, int sms, cudaStream_t stream) {
    scale_in_place_kernel<<<unsigned(4 * sms), 512, 0, stream>>>(static_cast<float4*>(x),
                                                                int64_t(bytes / 16), 1.0f);
    return cudaGetLastError();
}
