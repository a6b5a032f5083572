// The tensor-core scan kernels with split BF16 operands (BF16X3); see chunk_scan_mma.cuh.
#include "cuda/chunk_scan_mma.cuh"

namespace gdn::cuda::scan_mma {
GDN_SCAN_MMA_INSTANCES(, 2, ScanMode::kBf16x3)
GDN_SCAN_MMA_INSTANCES(, 4, ScanMode::kBf16x3)
}  // namespace gdn::cuda::scan_mma
