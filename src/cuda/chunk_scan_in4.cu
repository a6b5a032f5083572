// The FP32 scan kernels for 4-byte inputs (f32); see chunk_scan.cuh.
#include "cuda/chunk_scan.cuh"

namespace gdn::cuda::scan {
GDN_SCAN_INSTANCES(, 4, ScanMode::kFp32)
}  // namespace gdn::cuda::scan
