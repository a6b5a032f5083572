// The tensor-core scan kernels with BF16 operands; see chunk_scan.cuh.
#include "cuda/chunk_scan.cuh"

namespace gdn::cuda::scan {
GDN_SCAN_INSTANCES(, 2, ScanMode::kBf16)
GDN_SCAN_INSTANCES(, 4, ScanMode::kBf16)
}  // namespace gdn::cuda::scan
