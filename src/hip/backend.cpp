// The HIP backend: probe, per-device setup (load this device's code object
// once, thread-safe), workspace size and run. Plain C++ against the HIP
// runtime API (libamdhip64); the device code is in the embedded code objects
// (code_objects.hpp), launched with hipModuleLaunchKernel on the caller's
// stream. No allocation, no synchronisation (except GDN_FLAG_VALIDATE, which
// copies cu_seqlens and state_indices to the host to check them).
#include <hip/hip_runtime_api.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backend_internal.hpp"
#include "code_objects.hpp"
#include "common/backend.hpp"
#include "common/error.hpp"
#include "common/validate.hpp"
#include "launch.hpp"

namespace gdn::hip {

namespace {

// The gfx11 parts whose code object has the WMMA kernels (arch.hpp's list).
bool has_gfx11_wmma(const std::string& arch) {
    static const char* const kWmmaArchs[] = {"gfx1100", "gfx1101", "gfx1102",
                                             "gfx1103", "gfx1150", "gfx1151"};
    for (const char* a : kWmmaArchs)
        if (arch == a) return true;
    return false;
}

void copy_truncated(char* dst, size_t size, const char* src) {
    const size_t n = strnlen(src, size - 1);
    std::memcpy(dst, src, n);
    dst[n] = '\0';
}

// "gfx1151:sramecc-:xnack-" -> "gfx1151"
std::string base_arch(const char* gcn_arch_name) {
    std::string a(gcn_arch_name);
    const size_t colon = a.find(':');
    return colon == std::string::npos ? a : a.substr(0, colon);
}

std::string built_archs() {
    std::string list;
    for (size_t i = 0; i < kNumCodeObjects; ++i) {
        if (i) list += ", ";
        list += kCodeObjects[i].arch;
    }
    return list;
}

// Makes `device` current for the scope (launches and module loads act on the
// current device) and restores the caller's device.
class DeviceScope {
public:
    explicit DeviceScope(int device) {
        if (hipGetDevice(&previous_) != hipSuccess) previous_ = -1;
        if (previous_ != device) status_ = hipSetDevice(device);
    }
    ~DeviceScope() {
        if (previous_ >= 0 && status_ == hipSuccess) (void)hipSetDevice(previous_);
    }
    hipError_t status() const { return status_; }

private:
    int previous_ = -1;
    hipError_t status_ = hipSuccess;
};

// One device's loaded code object.
struct DeviceModule {
    gdn_status_t status = GDN_SUCCESS;
    std::string error;  // why setup failed
    gdn_caps_t caps{};
    hipModule_t module = nullptr;
    hipFunction_t functions[int(Kernel::count)] = {};
    hipFunction_t wmma_tile = nullptr;
};

constexpr int kMaxDevices = 64;
std::mutex g_setup_mutex;
std::array<std::atomic<DeviceModule*>, kMaxDevices> g_devices{};

gdn_status_t setup_failed(DeviceModule* m, gdn_status_t st, std::string message) {
    m->status = st;
    m->error = std::move(message);
    return st;
}

// Probes the device and loads its code object, once per device (thread-safe;
// a failure is remembered and reported again).
gdn_status_t setup_device(int device, const DeviceModule** out) {
    if (device < 0 || device >= kMaxDevices) {
        int count = 0;
        if (hipGetDeviceCount(&count) != hipSuccess) count = 0;
        if (device >= count)
            return fail(GDN_ERROR_BACKEND_UNAVAILABLE, "HIP device {} does not exist ({} devices)",
                        device, count);
        return fail(GDN_ERROR_BACKEND_UNAVAILABLE, "HIP device {} is beyond the {} gdn supports",
                    device, kMaxDevices);
    }
    DeviceModule* m = g_devices[size_t(device)].load(std::memory_order_acquire);
    if (m == nullptr) {
        std::lock_guard<std::mutex> lock(g_setup_mutex);
        m = g_devices[size_t(device)].load(std::memory_order_relaxed);
        if (m == nullptr) {
            m = new DeviceModule;  // lives as long as the process: modules stay loaded
            [&] {
                int count = 0;
                if (hipError_t e = hipGetDeviceCount(&count); e != hipSuccess || count == 0)
                    return setup_failed(m, GDN_ERROR_BACKEND_UNAVAILABLE,
                                        fmt::format("no HIP device (hipGetDeviceCount: {})",
                                                    hipGetErrorString(e)));
                if (device >= count)
                    return setup_failed(m, GDN_ERROR_BACKEND_UNAVAILABLE,
                                        fmt::format("HIP device {} does not exist ({} devices)",
                                                    device, count));
                hipDeviceProp_t prop;
                std::memset(&prop, 0, sizeof prop);
                if (hipError_t e = hipGetDeviceProperties(&prop, device); e != hipSuccess)
                    return setup_failed(m, GDN_ERROR_DEVICE,
                                        fmt::format("hipGetDeviceProperties({}): {}", device,
                                                    hipGetErrorString(e)));
                const std::string arch = base_arch(prop.gcnArchName);
                const CodeObject* co = nullptr;
                for (size_t i = 0; i < kNumCodeObjects; ++i)
                    if (arch == kCodeObjects[i].arch) co = &kCodeObjects[i];
                if (co == nullptr)
                    return setup_failed(m, GDN_ERROR_BACKEND_UNAVAILABLE,
                                        fmt::format("HIP device {} is {}, which this gdn has no "
                                                    "code for (built for {}; configure with "
                                                    "-DGDN_HIP_TARGETS=...)",
                                                    device, arch, built_archs()));
                DeviceScope scope(device);
                if (scope.status() != hipSuccess)
                    return setup_failed(m, GDN_ERROR_DEVICE,
                                        fmt::format("hipSetDevice({}): {}", device,
                                                    hipGetErrorString(scope.status())));
                if (hipError_t e = hipModuleLoadData(&m->module, co->begin); e != hipSuccess)
                    return setup_failed(m, GDN_ERROR_DEVICE,
                                        fmt::format("hipModuleLoadData ({} code object): {}", arch,
                                                    hipGetErrorString(e)));
                for (int k = 0; k < int(Kernel::count); ++k)
                    if (hipError_t e = hipModuleGetFunction(&m->functions[k], m->module, kKernelNames[k]);
                        e != hipSuccess)
                        return setup_failed(m, GDN_ERROR_DEVICE,
                                            fmt::format("hipModuleGetFunction({}): {}", kKernelNames[k],
                                                        hipGetErrorString(e)));
                if (hipModuleGetFunction(&m->wmma_tile, m->module, kWmmaTileKernelName) != hipSuccess)
                    m->wmma_tile = nullptr;

                gdn_caps_t& c = m->caps;
                gdn_caps_init(&c);
                c.backend = GDN_BACKEND_HIP;
                c.device = device;
                copy_truncated(c.arch, sizeof c.arch, arch.c_str());
                copy_truncated(c.name, sizeof c.name, prop.name);
                c.multiprocessor_count = prop.multiProcessorCount;
                c.warp_size = prop.warpSize;
                c.shared_mem_per_block_optin = prop.sharedMemPerBlock;
                c.shared_mem_per_multiprocessor = prop.maxSharedMemoryPerMultiProcessor;
                // Every gfx runs the sequential kernel, which writes per-token
                // states; the gfx11 chunked path keeps the block states.
                c.features = GDN_FEATURE_TOKEN_STATES |
                             (has_gfx11_wmma(arch) ? (GDN_FEATURE_GFX11_WMMA | GDN_FEATURE_FP16_MMA |
                                                      GDN_FEATURE_BLOCK_STATES)
                                                   : 0);
                c.compute_major = prop.major;
                c.compute_minor = prop.minor;
                return GDN_SUCCESS;
            }();
            g_devices[size_t(device)].store(m, std::memory_order_release);
        }
    }
    if (m->status != GDN_SUCCESS) return fail(m->status, "{}", m->error);
    *out = m;
    return GDN_SUCCESS;
}

// GDN_FLAG_VALIDATE: the device-side arrays, copied to the host and checked
// before anything is enqueued (a synchronising call, by design).
gdn_status_t validate_sequence_arrays(const Shape& s, const Tensors& t, hipStream_t stream) {
    std::vector<int32_t> cu, idx, tsi;
    if (t.cu_seqlens) {
        cu.resize(size_t(s.num_seqs) + 1);
        if (hipError_t e = hipMemcpyAsync(cu.data(), t.cu_seqlens, cu.size() * 4, hipMemcpyDeviceToHost, stream);
            e != hipSuccess)
            return fail(GDN_ERROR_DEVICE, "GDN_FLAG_VALIDATE: copying cu_seqlens: {}", hipGetErrorString(e));
    }
    if (t.state_indices) {
        idx.resize(size_t(s.num_seqs));
        if (hipError_t e = hipMemcpyAsync(idx.data(), t.state_indices, idx.size() * 4, hipMemcpyDeviceToHost,
                                          stream);
            e != hipSuccess)
            return fail(GDN_ERROR_DEVICE, "GDN_FLAG_VALIDATE: copying state_indices: {}",
                        hipGetErrorString(e));
    }
    if (t.token_state_indices) {
        tsi.resize(size_t(s.num_tokens));
        if (hipError_t e = hipMemcpyAsync(tsi.data(), t.token_state_indices, tsi.size() * 4,
                                          hipMemcpyDeviceToHost, stream);
            e != hipSuccess)
            return fail(GDN_ERROR_DEVICE, "GDN_FLAG_VALIDATE: copying token_state_indices: {}",
                        hipGetErrorString(e));
    }
    if (hipError_t e = hipStreamSynchronize(stream); e != hipSuccess)
        return fail(GDN_ERROR_DEVICE, "GDN_FLAG_VALIDATE: hipStreamSynchronize: {}", hipGetErrorString(e));
    return check_sequence_arrays(s, t.cu_seqlens ? cu.data() : nullptr,
                                 t.state_indices ? idx.data() : nullptr,
                                 t.token_state_indices ? tsi.data() : nullptr);
}

}  // namespace

gdn_status_t probe(int32_t device, gdn_caps_t* caps) {
    const DeviceModule* m = nullptr;
    if (gdn_status_t st = setup_device(device, &m)) return st;
    *caps = m->caps;
    return GDN_SUCCESS;
}

gdn_status_t workspace_size(const gdn_caps_t&, const Shape& shape, const PathChoice& path,
                            size_t* bytes) {
    if (gdn_status_t st = check_sequential_dims(shape)) return st;
    *bytes = workspace_bytes(shape, path);
    return GDN_SUCCESS;
}

gdn_status_t run(const gdn_caps_t& caps, const Shape& shape, const Tensors& tensors,
                 const PathChoice& path, void* workspace, size_t workspace_bytes_given, void* stream) {
    const DeviceModule* m = nullptr;
    if (gdn_status_t st = setup_device(caps.device, &m)) return st;
    if (gdn_status_t st = check_sequential_dims(shape)) return st;
    if (workspace_bytes_given < workspace_bytes(shape, path))
        return fail(GDN_ERROR_INTERNAL, "HIP workspace ({} bytes) below the path's {} bytes",
                    workspace_bytes_given, workspace_bytes(shape, path));
    const hipStream_t hs = static_cast<hipStream_t>(stream);
    DeviceScope scope(caps.device);
    if (scope.status() != hipSuccess)
        return fail(GDN_ERROR_DEVICE, "hipSetDevice({}): {}", caps.device,
                    hipGetErrorString(scope.status()));
    if (shape.validate())
        if (gdn_status_t st = validate_sequence_arrays(shape, tensors, hs)) return st;
    return enqueue(shape, tensors, path, workspace, [&](const Launch& l, const KernelParams& p) {
        void* args[] = {const_cast<KernelParams*>(&p)};
        const hipError_t e = hipModuleLaunchKernel(m->functions[int(l.kernel)], l.grid, 1, 1, l.block,
                                                   1, 1, 0, hs, args, nullptr);
        if (e != hipSuccess)
            return fail(GDN_ERROR_DEVICE, "hipModuleLaunchKernel({}, {} blocks): {}",
                        kKernelNames[int(l.kernel)], l.grid, hipGetErrorString(e));
        return GDN_SUCCESS;
    });
}

gdn_status_t run_wmma_tile(int32_t device, const void* A, const void* B, const void* C, void* D,
                           void* stream) {
    const DeviceModule* m = nullptr;
    if (gdn_status_t st = setup_device(device, &m)) return st;
    if (m->wmma_tile == nullptr || !(m->caps.features & GDN_FEATURE_GFX11_WMMA))
        return fail(GDN_ERROR_NOT_SUPPORTED, "{} has no gfx11 WMMA", m->caps.arch);
    DeviceScope scope(device);
    void* args[] = {&A, &B, &C, &D};
    const hipError_t e = hipModuleLaunchKernel(m->wmma_tile, 1, 1, 1, 32, 1, 1, 0,
                                               static_cast<hipStream_t>(stream), args, nullptr);
    if (e != hipSuccess)
        return fail(GDN_ERROR_DEVICE, "hipModuleLaunchKernel({}): {}", kWmmaTileKernelName,
                    hipGetErrorString(e));
    return GDN_SUCCESS;
}

}  // namespace gdn::hip
