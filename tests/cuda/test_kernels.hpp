// Kernels of the GPU tests themselves (tests/cuda/test_kernels.cu), for the
// work a test puts in the stream ahead of a library call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace gdn_cuda_test {

// A kernel of one block that lets its dependents launch at once (sm_90),
// spins for `cycles` clock cycles, then copies n int32 from src to dst.
cudaError_t spin_then_copy(int32_t* dst, const int32_t* src, int n, long long cycles, cudaStream_t stream);

}  // namespace gdn_cuda_test
