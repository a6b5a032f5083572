// The tensor-core scan kernels with BF16 operands; see chunk_scan_mma.cuh.
#include "cuda/chunk_scan_mma.cuh"

namespace gdn::cuda::scan_mma {
GDN_SCAN_MMA_INSTANCES(, 2, ScanMode::kBf16)
GDN_SCAN_MMA_INSTANCES(, 4, ScanMode::kBf16)
}  // namespace gdn::cuda::scan_mma
