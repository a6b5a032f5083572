// The scan kernels for 2-byte inputs (f16, bf16); see chunk_scan.cuh.
#include "cuda/chunk_scan.cuh"

namespace gdn::cuda::scan {
template cudaError_t launch_in<2>(const Params&, const ChunkScratch&, int64_t, int64_t, int, bool,
                                  cudaStream_t);
template cudaError_t set_attributes_in<2>(size_t);
}  // namespace gdn::cuda::scan
