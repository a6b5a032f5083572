// The tensor-core scan kernels with split FP16 operands (FP16X3); see chunk_scan_mma.cuh.
#include "cuda/chunk_scan_mma.cuh"

namespace gdn::cuda::scan_mma {
GDN_SCAN_MMA_INSTANCES(, 2, ScanMode::kFp16x3)
GDN_SCAN_MMA_INSTANCES(, 4, ScanMode::kFp16x3)
}  // namespace gdn::cuda::scan_mma
