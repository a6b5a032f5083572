// Answers for backends that are not compiled into this build.
#include "backend.hpp"
#include "dispatch.hpp"
#include "error.hpp"

namespace gdn {

#define GDN_UNAVAILABLE_BACKEND(ns, NAME, OPTION)                                               \
    namespace ns {                                                                              \
    gdn_status_t probe(int32_t, gdn_caps_t*) {                                                  \
        return fail(GDN_ERROR_BACKEND_UNAVAILABLE,                                              \
                    "the " NAME " backend is not compiled into this gdn (configure with " OPTION \
                    "=ON)");                                                                    \
    }                                                                                           \
    gdn_status_t workspace_size(const gdn_caps_t& c, const Shape&, const PathChoice&, size_t*) { \
        return probe(c.device, nullptr);                                                        \
    }                                                                                           \
    gdn_status_t run(const gdn_caps_t& c, const Shape&, const Tensors&, const PathChoice&,      \
                     void*, size_t, void*) {                                                    \
        return probe(c.device, nullptr);                                                        \
    }                                                                                           \
    }

#ifndef GDN_HAVE_CUDA
GDN_UNAVAILABLE_BACKEND(cuda, "CUDA", "GDN_ENABLE_CUDA")
int32_t cuda_fused_cluster4_fit(int32_t) { return 0; }  // (no fused path in this build)
#endif
#ifndef GDN_HAVE_HIP
GDN_UNAVAILABLE_BACKEND(hip, "HIP", "GDN_ENABLE_HIP")
#endif

}  // namespace gdn
