// The FP32 scan kernels for 2-byte inputs (f16, bf16); see chunk_scan.cuh.
#include "cuda/chunk_scan.cuh"

namespace gdn::cuda::scan {
GDN_SCAN_INSTANCES(, 2, ScanMode::kFp32)
}  // namespace gdn::cuda::scan
