// The scan kernels for 4-byte inputs (f32); see chunk_scan.cuh.
#include "cuda/chunk_scan.cuh"

namespace gdn::cuda::scan {
template cudaError_t launch_in<4>(const Params&, const ChunkScratch&, int64_t, int64_t, int, bool,
                                  cudaStream_t);
template cudaError_t set_attributes_in<4>(size_t);
}  // namespace gdn::cuda::scan
