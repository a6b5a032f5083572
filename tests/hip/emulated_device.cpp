#include "emulated_device.hpp"

#include <cstdio>

#include "common/dispatch.hpp"
#include "common/error.hpp"
#include "common/validate.hpp"

namespace gdn::hiptest {

gdn_caps_t EmulatedDevice::caps(bool wmma) const {
    // What gdn_probe reports for these parts (numbers of a Radeon 8060S /
    // RX 6800; only the arch and the feature bits matter to the dispatch).
    gdn_caps_t c;
    gdn_caps_init(&c);
    c.backend = GDN_BACKEND_HIP;
    c.device = 0;
    std::snprintf(c.arch, sizeof c.arch, "%s", wmma ? "gfx1151" : "gfx1030");
    std::snprintf(c.name, sizeof c.name, "%s (emulated: %s)", wmma ? "gfx1151" : "gfx1030", name());
    c.multiprocessor_count = wmma ? 40 : 60;
    c.warp_size = 32;
    c.shared_mem_per_block_optin = 65536;
    c.shared_mem_per_multiprocessor = 65536;
    c.features = GDN_FEATURE_TOKEN_STATES |
                 (wmma ? (GDN_FEATURE_GFX11_WMMA | GDN_FEATURE_FP16_MMA | GDN_FEATURE_BLOCK_STATES) : 0);
    c.compute_major = wmma ? 11 : 10;
    c.compute_minor = wmma ? 5 : 3;
    return c;
}

EmulatedDevice::~EmulatedDevice() = default;  // the workspace is released with the process

gdn_status_t EmulatedDevice::run(const gdn_caps_t& caps_in, const gdn_problem_t& problem,
                                 const gdn_tensors_t& tensors, PathChoice* path) {
    gdn_caps_t caps;
    Shape s;
    Tensors t;
    if (gdn_status_t st = read_caps(&caps_in, &caps)) return st;
    if (gdn_status_t st = read_problem(&problem, &s)) return st;
    if (gdn_status_t st = read_tensors(s, &tensors, &t)) return st;
    if (gdn_status_t st = choose_path(caps, s, &t, path)) return st;
    if (s.validate())
        return fail(GDN_ERROR_NOT_SUPPORTED, "the emulations do not copy device arrays back (VALIDATE)");
    if (gdn_status_t st = hip::check_sequential_dims(s)) return st;
    const size_t bytes = hip::workspace_bytes(s, *path);
    if (bytes > workspace_bytes_) {
        if (workspace_) release(workspace_);
        workspace_ = alloc(bytes);
        workspace_bytes_ = bytes;
    }
    if (bytes) fill(workspace_, 0xff, bytes);  // NaN everywhere: nothing may read what prep did not write
    if (gdn_status_t st = hip::enqueue(s, t, *path, workspace_,
                                       [&](const hip::Launch& l, const hip::KernelParams& p) {
                                           return launch(l, p);
                                       }))
        return st;
    return synchronize();
}

}  // namespace gdn::hiptest
