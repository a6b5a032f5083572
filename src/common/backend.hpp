// The interface every backend implements. src/common/api.cpp validates,
// chooses the path (dispatch.cpp) and then calls exactly one backend through
// these functions (the path itself is chosen in dispatch.cpp, the one place); a backend that is not compiled in is answered by
// src/common/unavailable.cpp with GDN_ERROR_BACKEND_UNAVAILABLE.
//
// Contract for run(): the shape, tensors and path choice are already
// validated (host-side); workspace_bytes >= workspace_size(). The backend
// must not write anything before it knows it can run (device-side validation
// included), and must not throw.
#pragma once

#include "internal.hpp"

namespace gdn {

#define GDN_BACKEND_INTERFACE                                                              \
    gdn_status_t probe(int32_t device, gdn_caps_t* caps);                                   \
    gdn_status_t workspace_size(const gdn_caps_t& caps, const Shape& shape,                \
                                const PathChoice& path, size_t* bytes);                    \
    gdn_status_t run(const gdn_caps_t& caps, const Shape& shape, const Tensors& tensors,   \
                     const PathChoice& path, void* workspace, size_t workspace_bytes,      \
                     void* stream);

namespace cpu { GDN_BACKEND_INTERFACE }
namespace cuda { GDN_BACKEND_INTERFACE }
namespace hip { GDN_BACKEND_INTERFACE }

#undef GDN_BACKEND_INTERFACE

}  // namespace gdn
