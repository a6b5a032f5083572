// The one place that decides which path runs, for every backend, and says why.
// Pure: a function of the caps and the shape; no device query.
#pragma once

#include "internal.hpp"

namespace gdn {

// Facts about the kernels that the policy needs. The backends static_assert
// their kernels against these, so the policy cannot drift from the code.
namespace policy {
// CUDA chunk-32 FP32 path.
constexpr int32_t kCudaChunk = 32;
// Below this many tokens (longest sequence) auto takes the sequential kernel:
// the two chunked launches cost more than they save (seed: ~100 tokens on an
// RTX 5090; re-measured on the H200, see docs/perf-notes.md).
constexpr int64_t kCudaChunkedMinTokens = 128;
// HIP gfx11 WMMA path.
constexpr int32_t kHipChunk = 16;
constexpr int64_t kHipChunkedMinTokens = 64;
// CPU chunked paths.
constexpr int32_t kCpuChunk = 32;
constexpr int32_t kCpuLowpChunk = 16;
constexpr int64_t kCpuChunkedMinTokens = 64;
}  // namespace policy

// `tensors` may be null (gdn_select_path without tensors): then the policy
// assumes tensors every path accepts. On failure sets the last error.
gdn_status_t choose_path(const gdn_caps_t& caps, const Shape& shape, const Tensors* tensors,
                         PathChoice* out);

}  // namespace gdn
