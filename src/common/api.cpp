// The exported C functions. Each one: clears the last error, validates and
// normalises its structs, and calls one backend — all inside a try block, so
// no exception ever crosses the ABI.
#include <cstdio>
#include <cstring>
#include <new>

#include "backend.hpp"
#include "dispatch.hpp"
#include "error.hpp"
#include "validate.hpp"

using namespace gdn;

namespace {

template <class F>
gdn_status_t guarded(F&& body) {
    try {
        clear_last_error();
        return body();
    } catch (const std::bad_alloc&) {
        return fail(GDN_ERROR_INTERNAL, "out of host memory");
    } catch (const std::exception& e) {
        return fail(GDN_ERROR_INTERNAL, "internal error: {}", e.what());
    } catch (...) {
        return fail(GDN_ERROR_INTERNAL, "internal error: unknown exception");
    }
}

// Everything a call needs, validated: caps, shape, path (and tensors).
struct Prepared {
    gdn_caps_t caps;
    Shape shape;
    Tensors tensors;
    PathChoice path;
};

gdn_status_t prepare(const gdn_caps_t* caps, const gdn_problem_t* problem,
                     const gdn_tensors_t* tensors, Prepared* p) {
    if (gdn_status_t st = read_caps(caps, &p->caps)) return st;
    if (gdn_status_t st = read_problem(problem, &p->shape)) return st;
    if (tensors)
        if (gdn_status_t st = read_tensors(p->shape, tensors, &p->tensors)) return st;
    return choose_path(p->caps, p->shape, tensors ? &p->tensors : nullptr, &p->path);
}

gdn_status_t backend_workspace(const Prepared& p, size_t* bytes) {
    switch (p.caps.backend) {
        case GDN_BACKEND_CPU: return cpu::workspace_size(p.caps, p.shape, p.path, bytes);
        case GDN_BACKEND_CUDA: return cuda::workspace_size(p.caps, p.shape, p.path, bytes);
        case GDN_BACKEND_HIP: return hip::workspace_size(p.caps, p.shape, p.path, bytes);
        default: break;  // a value gdn.h does not name (rejected by validation)
    }
    return fail(GDN_ERROR_INTERNAL, "unknown backend {}", int(p.caps.backend));
}

// The workspace covers every path this problem can take with any tensors:
// the path without tensors (the eligible one) and the sequential fallback.
gdn_status_t workspace_bound(const Prepared& p, size_t* bytes) {
    size_t chosen = 0, sequential = 0;
    if (gdn_status_t st = backend_workspace(p, &chosen)) return st;
    Prepared seq = p;
    seq.path.path = GDN_PATH_SEQUENTIAL;
    seq.path.chunk_size = 0;
    if (gdn_status_t st = backend_workspace(seq, &sequential)) return st;
    *bytes = chosen > sequential ? chosen : sequential;
    return GDN_SUCCESS;
}

}  // namespace

extern "C" {

uint32_t gdn_version(void) { return GDN_VERSION; }

const char* gdn_status_string(gdn_status_t status) {
    int32_t value;  // any int32 a C caller passes (see gdn_probe)
    std::memcpy(&value, &status, sizeof value);
    switch (value) {
        case GDN_SUCCESS: return "success";
        case GDN_ERROR_INVALID_ARGUMENT: return "invalid argument";
        case GDN_ERROR_NOT_SUPPORTED: return "not supported";
        case GDN_ERROR_WORKSPACE_TOO_SMALL: return "workspace too small";
        case GDN_ERROR_BACKEND_UNAVAILABLE: return "backend unavailable";
        case GDN_ERROR_DEVICE: return "device error";
        case GDN_ERROR_INTERNAL: return "internal error";
        default: break;  // a value gdn.h does not name (rejected by validation)
    }
    return "unknown status";
}

const char* gdn_last_error(void) { return last_error_cstr(); }

gdn_status_t gdn_probe(gdn_backend_t backend, int32_t device, gdn_caps_t* caps) {
    return guarded([&]() -> gdn_status_t {
        if (caps == nullptr) return fail(GDN_ERROR_INVALID_ARGUMENT, "caps is NULL");
        const size_t size = caps->struct_size;
        if (size < min_struct_size_caps() || size > sizeof(gdn_caps_t))
            return fail(GDN_ERROR_INVALID_ARGUMENT,
                        "caps->struct_size ({}) is outside [{}, {}]: not initialised with "
                        "gdn_caps_init()?",
                        size, min_struct_size_caps(), sizeof(gdn_caps_t));
        if (device < 0) return fail(GDN_ERROR_INVALID_ARGUMENT, "device ({}) < 0", device);
        gdn_caps_t filled;
        gdn_caps_init(&filled);
        gdn_status_t st = GDN_SUCCESS;
        // As stored by the caller: loading an enum that holds a value outside
        // its enumerators' range is undefined in C++ (UBSan), so switch on
        // the int32.
        int32_t which;
        std::memcpy(&which, &backend, sizeof which);
        switch (which) {
            case GDN_BACKEND_CPU: st = cpu::probe(device, &filled); break;
            case GDN_BACKEND_CUDA: st = cuda::probe(device, &filled); break;
            case GDN_BACKEND_HIP: st = hip::probe(device, &filled); break;
            default:
                return fail(GDN_ERROR_INVALID_ARGUMENT, "backend ({}) is not a gdn_backend_t", which);
        }
        if (st != GDN_SUCCESS) return st;
        filled.struct_size = size;
        std::memcpy(static_cast<void*>(caps), &filled, size);
        return GDN_SUCCESS;
    });
}

gdn_status_t gdn_select_path(const gdn_caps_t* caps, const gdn_problem_t* problem,
                             const gdn_tensors_t* tensors, gdn_path_info_t* info) {
    return guarded([&]() -> gdn_status_t {
        if (info == nullptr) return fail(GDN_ERROR_INVALID_ARGUMENT, "info is NULL");
        const size_t size = info->struct_size;
        if (size < min_struct_size_path_info() || size > sizeof(gdn_path_info_t))
            return fail(GDN_ERROR_INVALID_ARGUMENT,
                        "info->struct_size ({}) is outside [{}, {}]: not initialised with "
                        "gdn_path_info_init()?",
                        size, min_struct_size_path_info(), sizeof(gdn_path_info_t));
        Prepared p;
        if (gdn_status_t st = prepare(caps, problem, tensors, &p)) return st;
        gdn_path_info_t r;
        gdn_path_info_init(&r);
        r.struct_size = size;
        r.path = p.path.path;
        r.chunk_size = p.path.chunk_size;
        r.precision = p.path.precision;
        std::snprintf(r.reason, sizeof r.reason, "%s", p.path.reason);
        std::memcpy(static_cast<void*>(info), &r, size);
        return GDN_SUCCESS;
    });
}

gdn_status_t gdn_workspace_size(const gdn_caps_t* caps, const gdn_problem_t* problem,
                                size_t* bytes) {
    return guarded([&]() -> gdn_status_t {
        if (bytes == nullptr) return fail(GDN_ERROR_INVALID_ARGUMENT, "bytes is NULL");
        Prepared p;
        if (gdn_status_t st = prepare(caps, problem, nullptr, &p)) return st;
        size_t need = 0;
        if (gdn_status_t st = workspace_bound(p, &need)) return st;
        *bytes = need;
        return GDN_SUCCESS;
    });
}

gdn_status_t gdn_chunked_recurrence(const gdn_caps_t* caps, const gdn_problem_t* problem,
                                    const gdn_tensors_t* tensors, void* workspace,
                                    size_t workspace_bytes, void* stream) {
    return guarded([&]() -> gdn_status_t {
        if (tensors == nullptr) return fail(GDN_ERROR_INVALID_ARGUMENT, "tensors is NULL");
        Prepared p;
        if (gdn_status_t st = prepare(caps, problem, tensors, &p)) return st;
        // The caller sized the workspace with gdn_workspace_size (no
        // tensors), which bounds every path; require that bound, so a
        // workspace that works for one call's strides works for all.
        size_t need = 0;
        if (gdn_status_t st = workspace_bound(p, &need)) return st;
        if (workspace_bytes < need)
            return fail(GDN_ERROR_WORKSPACE_TOO_SMALL,
                        "workspace_bytes ({}) < {} bytes gdn_workspace_size() requires", workspace_bytes,
                        need);
        if (need > 0 && workspace == nullptr)
            return fail(GDN_ERROR_INVALID_ARGUMENT, "workspace is NULL but {} bytes are required",
                        need);
        if (reinterpret_cast<uintptr_t>(workspace) % GDN_WORKSPACE_ALIGNMENT != 0)
            return fail(GDN_ERROR_INVALID_ARGUMENT, "workspace ({}) is not aligned to {} bytes",
                        workspace, GDN_WORKSPACE_ALIGNMENT);
        switch (p.caps.backend) {
            case GDN_BACKEND_CPU:
                return cpu::run(p.caps, p.shape, p.tensors, p.path, workspace, workspace_bytes,
                                stream);
            case GDN_BACKEND_CUDA:
                return cuda::run(p.caps, p.shape, p.tensors, p.path, workspace, workspace_bytes,
                                 stream);
            case GDN_BACKEND_HIP:
                return hip::run(p.caps, p.shape, p.tensors, p.path, workspace, workspace_bytes,
                                stream);
            default: break;  // a value gdn.h does not name (rejected by validation)
        }
        return fail(GDN_ERROR_INTERNAL, "unknown backend {}", int(p.caps.backend));
    });
}

}  // extern "C"
