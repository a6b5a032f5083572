// The CPU backend: probe, workspace, and run. run() spreads tasks (one
// sequence, up to kMaxTaskHeads value heads of one key head) over
// caps.multiprocessor_count threads; each task is computed by one thread
// from start to end (cpu_kernels.cpp), so the bits do not depend on how many
// threads there are or which one takes a task.
#include <sys/utsname.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

#include "backend.hpp"
#include "cpu_kernels.hpp"
#include "cpu_pool.hpp"
#include "error.hpp"
#include "validate.hpp"

namespace gdn::cpu {

namespace {

void copy_string(char* dst, size_t size, const char* src) {
    std::snprintf(dst, size, "%.*s", int(size ? size - 1 : 0), src);
}

// "model name : AMD EPYC ..." from /proc/cpuinfo where there is one.
bool cpu_model_name(char* dst, size_t size) {
    std::FILE* f = std::fopen("/proc/cpuinfo", "r");
    if (!f) return false;
    char line[512];
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) {
        if (std::strncmp(line, "model name", 10) != 0) continue;
        const char* colon = std::strchr(line, ':');
        if (!colon) continue;
        const char* begin = colon + 1;
        while (*begin == ' ' || *begin == '\t') ++begin;
        size_t n = std::strcspn(begin, "\r\n");
        if (n == 0) continue;
        if (n >= size) n = size - 1;
        std::memcpy(dst, begin, n);
        dst[n] = '\0';
        found = true;
    }
    std::fclose(f);
    return found;
}

int32_t worker_count(const gdn_caps_t& caps) { return std::max<int32_t>(1, caps.multiprocessor_count); }

// One worker's scratch, in bytes.
size_t worker_bytes(const Dims& dims, gdn_path_t path) {
    WorkspaceCarver carver(nullptr);
    carve_worker_scratch(carver, dims, path);
    return carver.bytes();
}

// Worker w's scratch starts at w x the stride: every worker's pieces lie the
// same way from a GDN_WORKSPACE_ALIGNMENT boundary.
size_t worker_stride(size_t one_worker) {
    return (one_worker + GDN_WORKSPACE_ALIGNMENT - 1) / GDN_WORKSPACE_ALIGNMENT * GDN_WORKSPACE_ALIGNMENT;
}

WorkerScratch carve_worker(void* workspace, size_t stride, int32_t w, const Dims& dims, gdn_path_t path) {
    WorkspaceCarver carver(static_cast<char*>(workspace) + size_t(w) * stride);
    return carve_worker_scratch(carver, dims, path);
}

}  // namespace

gdn_status_t probe(int32_t device, gdn_caps_t* caps) {
    if (device != 0)
        return fail(GDN_ERROR_BACKEND_UNAVAILABLE,
                    "device ({}): the CPU backend has one device, 0", device);
    caps->backend = GDN_BACKEND_CPU;
    caps->device = 0;
    struct utsname u;
    if (uname(&u) == 0)
        copy_string(caps->arch, sizeof caps->arch, u.machine);
    else
        copy_string(caps->arch, sizeof caps->arch, "cpu");
    if (!cpu_model_name(caps->name, sizeof caps->name))
        copy_string(caps->name, sizeof caps->name, "cpu");
    const unsigned threads = std::thread::hardware_concurrency();
    caps->multiprocessor_count = threads > 0 ? int32_t(std::min(threads, 1024u)) : 1;
    caps->warp_size = 1;
    caps->shared_mem_per_block_optin = 0;
    caps->shared_mem_per_multiprocessor = 0;
    caps->features = GDN_FEATURE_TOKEN_STATES | GDN_FEATURE_BLOCK_STATES |
                     (caps->multiprocessor_count > 1 ? GDN_FEATURE_CPU_THREADS : 0);
    caps->compute_major = 0;
    caps->compute_minor = 0;
    return GDN_SUCCESS;
}

// One worker scratch (state, chunk rows, products) per thread the caps allow;
// independent of the number of tokens.
gdn_status_t workspace_size(const gdn_caps_t& caps, const Shape& shape, const PathChoice& path,
                            size_t* bytes) {
    if (path.path != GDN_PATH_SEQUENTIAL && !chunk_size_supported(path.chunk_size))
        return fail(GDN_ERROR_INTERNAL, "the CPU chunked kernels got chunk size {}",
                    path.chunk_size);
    const Dims dims = dims_of(shape, path);
    const size_t one = worker_bytes(dims, path.path);
    *bytes = size_t(worker_count(caps) - 1) * worker_stride(one) + one;
    return GDN_SUCCESS;
}

gdn_status_t run(const gdn_caps_t& caps, const Shape& shape, const Tensors& tensors,
                 const PathChoice& path, void* workspace, size_t workspace_bytes, void* stream) {
    (void)stream;  // the CPU runs synchronously on the calling thread (and its helpers)
    (void)workspace_bytes;  // checked by the caller against workspace_size()
    if (path.path != GDN_PATH_SEQUENTIAL && path.path != GDN_PATH_CHUNKED_FP32 &&
        path.path != GDN_PATH_CHUNKED_LOWP_C16)
        return fail(GDN_ERROR_INTERNAL, "the CPU backend got path {}", int(path.path));
    if (path.path != GDN_PATH_SEQUENTIAL && !chunk_size_supported(path.chunk_size))
        return fail(GDN_ERROR_INTERNAL, "the CPU chunked kernels got chunk size {}",
                    path.chunk_size);
    // The per-sequence arrays are host memory here: check them before
    // anything is written.
    if (gdn_status_t st = check_sequence_arrays(shape, tensors.cu_seqlens, tensors.state_indices,
                                                tensors.token_state_indices))
        return st;
    if (tensors.token_state_indices && !shape.block_states() && path.path != GDN_PATH_SEQUENTIAL)
        return fail(GDN_ERROR_INTERNAL, "the CPU backend got per-token states on path {}",
                    int(path.path));

    const Dims dims = dims_of(shape, path);
    const size_t stride = worker_stride(worker_bytes(dims, path.path));
    PathChoice seq_path;
    seq_path.path = GDN_PATH_SEQUENTIAL;
    const Dims seq_dims = dims_of(shape, seq_path);

    // Task i: sequence i / (Hk * parts), key head (i / parts) % Hk, and part
    // i % parts of that key head's value heads (parts of at most
    // dims.task_heads heads, as even as they can be).
    const int32_t G = shape.group;
    const int32_t parts = (G + dims.task_heads - 1) / dims.task_heads;
    const int64_t num_tasks = int64_t(shape.num_seqs) * shape.num_k_heads * parts;
    const int64_t equal_len = shape.num_tokens / shape.num_seqs;
    auto run_task = [&](int64_t i, const WorkerScratch& w) {
        const int32_t seq = int32_t(i / (int64_t(shape.num_k_heads) * parts));
        const int32_t kh = int32_t((i / parts) % shape.num_k_heads);
        const int32_t part = int32_t(i % parts);
        const int32_t slot = tensors.state_indices ? tensors.state_indices[seq] : seq;
        if (slot < 0) return;  // padding: read nothing, write nothing
        HeadTask task;
        task.key_head = kh;
        task.bos = tensors.cu_seqlens ? tensors.cu_seqlens[seq] : int64_t(seq) * equal_len;
        task.len = tensors.cu_seqlens ? int64_t(tensors.cu_seqlens[seq + 1]) - task.bos : equal_len;
        task.from_zero = tensors.start_from_zero && tensors.start_from_zero[seq] != 0;
        if (tensors.token_state_indices) task.token_slots = tensors.token_state_indices + task.bos;
        float* slot_state = tensors.state + int64_t(slot) * tensors.state_slot_stride;
        const int32_t first = int32_t(int64_t(part) * G / parts);
        const int32_t last = int32_t(int64_t(part + 1) * G / parts);
        task.num_heads = last - first;
        for (int32_t j = 0; j < task.num_heads; ++j) {
            // The (first + j)-th value head served by key head kh.
            const int32_t h = shape.head_mapping == GDN_HEADS_GROUPED
                                  ? kh * G + first + j
                                  : kh + (first + j) * shape.num_k_heads;
            task.heads[j] = h;
            task.states[j] = slot_state + int64_t(h) * dims.K * dims.V;
        }
        if (task.len < path.sequential_below) {
            // Auto, a short sequence of a chunked call: the sequential kernel,
            // a head at a time, as auto runs the sequence alone (the worker's
            // scratch holds the sequential kernel's pieces at its start).
            for (int32_t j = 0; j < task.num_heads; ++j) {
                HeadTask one = task;
                one.num_heads = 1;
                one.heads[0] = task.heads[j];
                one.states[0] = task.states[j];
                run_head_task(shape, tensors, seq_path, seq_dims, one, w);
            }
            return;
        }
        run_head_task(shape, tensors, path, dims, task, w);
    };

    // Workers (the calling thread and helpers, cpu_pool.hpp) take tasks from
    // one counter, each with its own scratch; how many run changes no bit.
    std::atomic<int64_t> next{0};
    auto worker = [&](int32_t w) {
        const WorkerScratch scratch = carve_worker(workspace, stride, w, dims, path.path);
        for (int64_t i = next.fetch_add(1); i < num_tasks; i = next.fetch_add(1)) run_task(i, scratch);
    };
    using Worker = decltype(worker);
    const auto workers = int32_t(std::min<int64_t>(worker_count(caps), num_tasks));
    run_workers(workers, [](void* ctx, int32_t w) { (*static_cast<Worker*>(ctx))(w); }, &worker);
    return GDN_SUCCESS;
}

}  // namespace gdn::cpu
