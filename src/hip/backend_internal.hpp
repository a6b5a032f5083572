// HIP backend internals the native tests (tests/hip) reach besides the
// backend interface of src/common/backend.hpp.
#pragma once

#include <cstdint>

#include "gdn/gdn.h"

namespace gdn::hip {

// Enqueues gdn_hip_wmma_tile on `stream` (device pointers: A, B 16x16 FP16
// bits row-major, C, D 16x16 FP32 row-major): D = A·B + C through the
// fragment layout. GDN_ERROR_NOT_SUPPORTED off gfx11.
gdn_status_t run_wmma_tile(int32_t device, const void* A, const void* B, const void* C, void* D,
                           void* stream);

}  // namespace gdn::hip
