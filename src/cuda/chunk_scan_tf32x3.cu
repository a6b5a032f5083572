// The tensor-core scan kernels with 3xTF32 split operands; see chunk_scan.cuh.
#include "cuda/chunk_scan.cuh"

namespace gdn::cuda::scan {
GDN_SCAN_INSTANCES(, 2, ScanMode::kTf32x3)
GDN_SCAN_INSTANCES(, 4, ScanMode::kTf32x3)
}  // namespace gdn::cuda::scan
