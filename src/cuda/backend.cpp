// The CUDA backend: probe, workspace, run (host code; the kernels are in
// sequential.cu, chunk_prep.cu and chunk_scan.cu).
//
// run() allocates nothing, never synchronises (except in GDN_FLAG_VALIDATE
// mode, which copies cu_seqlens and state_indices to the host), queries no
// device property, and launches everything on the caller's stream, so a call
// can be captured in a CUDA graph. Every launch is checked; a failed one is
// GDN_ERROR_DEVICE with the runtime's message.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <vector>

#include "common/backend.hpp"
#include "common/dispatch.hpp"
#include "common/error.hpp"
#include "common/validate.hpp"
#include "cuda/kernels.hpp"

namespace gdn::cuda {

namespace {

// Largest shapes of the sequential kernel (its register tiles).
constexpr int32_t kSeqMaxK = 128;
constexpr int32_t kSeqMaxNormV = 128;

gdn_status_t device_error(const char* what, cudaError_t e) {
    return fail(GDN_ERROR_DEVICE, "{}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

// ---------------------------------------------------------- one-time setup

constexpr int kFastDevices = 64;
std::atomic<bool> g_ready[kFastDevices];
std::mutex g_setup_mutex;
std::vector<int> g_ready_slow;  // devices >= kFastDevices that are set up (under the mutex)

// The kernels' shared-memory attributes on `device`: at most once per device
// (a failure is retried by the next call), thread-safe; the caller's current
// device is left as it was.
gdn_status_t ensure_device_setup(int device) {
    if (device < kFastDevices && g_ready[device].load(std::memory_order_acquire))
        return GDN_SUCCESS;
    std::lock_guard<std::mutex> lock(g_setup_mutex);
    if (device < kFastDevices ? g_ready[device].load(std::memory_order_relaxed)
                              : std::find(g_ready_slow.begin(), g_ready_slow.end(), device) !=
                                    g_ready_slow.end())
        return GDN_SUCCESS;
    int previous = -1;
    cudaError_t e = cudaGetDevice(&previous);
    if (e == cudaSuccess && previous != device) e = cudaSetDevice(device);
    int optin = 0;
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (e == cudaSuccess) e = set_chunk_prep_attributes(size_t(optin));
    if (e == cudaSuccess) e = set_chunk_scan_attributes(size_t(optin));
    if (e == cudaSuccess) e = set_decode_attributes(size_t(optin));
#if defined(GDN_CUDA_FUSED64)
    if (e == cudaSuccess) e = set_fused64_attributes(size_t(optin));
#endif
    if (previous >= 0 && previous != device) {
        const cudaError_t back = cudaSetDevice(previous);
        if (e == cudaSuccess) e = back;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();  // not sticky: leave no error behind for the caller
        return device_error(fmt::format("setting up CUDA device {}", device).c_str(), e);
    }
    if (device < kFastDevices)
        g_ready[device].store(true, std::memory_order_release);
    else
        g_ready_slow.push_back(device);
    return GDN_SUCCESS;
}

// ------------------------------------------------------------------ shapes

gdn_status_t check_sequential_shape(const Shape& s) {
    if (s.head_dim_k > kSeqMaxK)
        return fail(GDN_ERROR_NOT_SUPPORTED,
                    "problem.head_dim_k ({}) > {}: the CUDA sequential kernel holds at most {} "
                    "state rows per column",
                    s.head_dim_k, kSeqMaxK, kSeqMaxK);
    if (s.output_norm() && s.head_dim_v > kSeqMaxNormV)
        return fail(GDN_ERROR_NOT_SUPPORTED,
                    "problem.head_dim_v ({}) > {} with GDN_FLAG_OUTPUT_NORM: the CUDA sequential "
                    "kernel normalises a row inside one block",
                    s.head_dim_v, kSeqMaxNormV);
    return GDN_SUCCESS;
}

// The decode step (max_seqlen == 1) takes the decode kernel, which gives the
// sequential kernel's bits (the same sums in the same order), so this is a
// speed choice only. K in {64, 128}. On a [K][V] state its accesses are
// 4-byte, so any V the sequential kernel takes and any slot alignment and
// stride (offsets inside a head are 32-bit: K V < 2^31); on a [V][K] state
// they are 16-byte, and it needs a 16-byte-aligned pool and slot stride and
// no output norm (decode_takes_vk; otherwise the sequential kernel).
// kDecodeBlocksPerSm: the batches below (sequences x value heads) <
// kDecodeBlocksPerSm x SMs keep the sequential kernel. v2's decode kernel (4
// warps and 128 state values per thread) needed 8 (H200, 2026-11-29, Hv 48: at
// N = 8 the sequential kernel took 22.3 µs, that kernel 27.3 µs); v3's (a
// thread per column and part: the sequential kernel's work per thread, with
// line-wide accesses) measured as fast at N = 1 (6.71 µs; the sequential
// kernel 6.6-6.8) and faster at N = 8 (20.05 µs), H200, so 0; v4 (persistent,
// pipelined, the same work per thread) keeps it. Re-measure N = 1 and 8 before raising it.
constexpr int64_t kDecodeBlocksPerSm = 0;
bool use_decode_kernel(const gdn_caps_t& caps, const Shape& s, const Params& p) {
    return s.max_seqlen == 1 && (s.state_layout == GDN_STATE_KV || decode_takes_vk(p)) &&
           (s.head_dim_k == 64 || s.head_dim_k == 128) &&
           (!s.output_norm() || s.head_dim_v <= kSeqMaxNormV) &&
           int64_t(s.head_dim_k) * s.head_dim_v < (int64_t(1) << 31) &&
           int64_t(s.num_seqs) * s.num_v_heads >= kDecodeBlocksPerSm * caps.multiprocessor_count;
}

// Whether the chunked path's kernels overlap across windows: the next
// window's prep, launched as a programmatic dependent of this window's scan
// (device_common.cuh), runs on the SMs the scan leaves free and fills them
// as its blocks end. Programmatic dependent launch is sm_90's.
bool overlap_windows(const gdn_caps_t& caps) { return caps.compute_major >= 9; }

// The chunked path's scratch for windows of `window` tokens (at most: the
// prompt's length rounded up to a chunk): the prep's output for one window
// (for two, used in turn, where windows overlap and there is more than one),
// and the raw outputs when the output norm runs as a separate pass. Sizes
// (base == nullptr) and carves with the same code.
struct ChunkLayout {
    int64_t window;  // chunk starts per window
    ChunkScratch scratch[2];
    int halves;      // 2: windows alternate between two scratch halves
    float* carry[2]; // GDN_FLAG_TOKEN_STATES over windows: ChunkScratch::carry_in/out, by window
    size_t bytes;
};

// The BF16/FP16/BF16X3/FP16X3 modes run the register-state scan (chunk_scan_mma.cuh:
// blocks of 64 columns of one value head, which the chunked path's V, 64 or
// 128, allows; dispatch's reg_state is the same test); it reads the prep's
// 16-bit k/q rows.
bool use_scan_mma(ScanMode mode) {
    return mode == ScanMode::kBf16 || mode == ScanMode::kFp16 || is_split_mode(mode);
}

ChunkLayout carve_chunk_scratch(const gdn_caps_t& caps, const Shape& s, ScanMode mode,
                                int64_t window, void* base) {
    ChunkLayout l;
    const int64_t chunk = policy::kCudaChunk;
    const int64_t tokens = (s.num_tokens + chunk - 1) / chunk * chunk;
    l.window = std::min<int64_t>(window, tokens);
    const int64_t rows = l.window + chunk;
    WorkspaceCarver c(base);
    float* O = s.output_norm() ? c.take<float>(size_t(rows) * s.num_v_heads * s.head_dim_v)
                               : nullptr;
    const int halves = overlap_windows(caps) && tokens > l.window ? 2 : 1;
    for (int i = 0; i < halves; ++i) {
        ChunkScratch& w = l.scratch[i];
        w = ChunkScratch{};
        const size_t hv_rows = size_t(s.num_v_heads) * rows;
        if (use_scan_mma(mode)) {
            w.kq16 = c.take<uint16_t>(size_t(s.num_k_heads) * rows * 2 * s.head_dim_k);
            w.W16 = c.take<uint16_t>(hv_rows * s.head_dim_k);
            w.TP16 = c.take<uint16_t>(hv_rows * tp16_row(mode));
            w.F4 = c.take<float>(hv_rows * 4);
            if (is_split_mode(mode)) {
                // Exact k/q rows (the mode's 16-bit type; bf16 in FP16X3): no remainders.
                w.W16lo = c.take<uint16_t>(hv_rows * s.head_dim_k);
                if (!exact_16bit_input(mode, s.input_dtype))
                    w.kq16lo = c.take<uint16_t>(size_t(s.num_k_heads) * rows * 2 * s.head_dim_k);
            }
        } else {
            w.TP = c.take<float>(hv_rows * 64);
            w.gb = c.take<float>(hv_rows * 2);
            w.qkf = c.take<float>(size_t(s.num_k_heads) * rows * 2);
        }
        w.O = O;
        w.kq16_fp16 = mode == ScanMode::kFp16 || mode == ScanMode::kFp16x3 ? 1 : 0;
        w.rows = rows;
    }
    if (halves == 1) l.scratch[1] = l.scratch[0];
    l.halves = halves;
    // A sequence that crosses windows carries its state through the
    // workspace when its own slot is only read (two arrays: window i writes
    // carry[i % 2] and reads the other; lanes of one scan may write one
    // while others read the other).
    const bool carry = s.token_states() && tokens > l.window;
    for (float*& a : l.carry)
        a = carry ? c.take<float>(size_t(s.num_v_heads) * s.head_dim_k * s.head_dim_v) : nullptr;
    l.bytes = c.bytes();
    return l;
}

// Device-side contents, in GDN_FLAG_VALIDATE mode only: copies the arrays to
// the host (synchronising the stream) and checks them. A refused copy or
// synchronisation (e.g. on a capturing stream) is reported and its error
// consumed, as a refused launch's is (launch_kernel), so that the caller's
// next call does not find it pending.
gdn_status_t validate_sequence_arrays(const Shape& s, const Tensors& t, cudaStream_t stream) {
    auto refused = [](const char* what, cudaError_t e) {
        cudaGetLastError();
        return device_error(what, e);
    };
    std::vector<int32_t> cu, idx, tsi;
    if (t.cu_seqlens) {
        cu.resize(size_t(s.num_seqs) + 1);
        if (cudaError_t e = cudaMemcpyAsync(cu.data(), t.cu_seqlens, cu.size() * 4,
                                            cudaMemcpyDeviceToHost, stream))
            return refused("GDN_FLAG_VALIDATE: copying tensors.cu_seqlens", e);
    }
    if (t.state_indices) {
        idx.resize(size_t(s.num_seqs));
        if (cudaError_t e = cudaMemcpyAsync(idx.data(), t.state_indices, idx.size() * 4,
                                            cudaMemcpyDeviceToHost, stream))
            return refused("GDN_FLAG_VALIDATE: copying tensors.state_indices", e);
    }
    if (t.token_state_indices) {
        tsi.resize(size_t(s.num_tokens));
        if (cudaError_t e = cudaMemcpyAsync(tsi.data(), t.token_state_indices, tsi.size() * 4,
                                            cudaMemcpyDeviceToHost, stream))
            return refused("GDN_FLAG_VALIDATE: copying tensors.token_state_indices", e);
    }
    if (cudaError_t e = cudaStreamSynchronize(stream))
        return refused("GDN_FLAG_VALIDATE: synchronising the stream", e);
    return check_sequence_arrays(s, t.cu_seqlens ? cu.data() : nullptr,
                                 t.state_indices ? idx.data() : nullptr,
                                 t.token_state_indices ? tsi.data() : nullptr);
}

}  // namespace

Params make_params(const Shape& s, const Tensors& t) {
    Params p{};
    p.num_seqs = s.num_seqs;
    p.num_tokens = s.num_tokens;
    p.equal_len = s.num_tokens / s.num_seqs;
    p.Hk = s.num_k_heads;
    p.Hv = s.num_v_heads;
    p.G = s.group;
    p.K = s.head_dim_k;
    p.V = s.head_dim_v;
    p.grouped = s.head_mapping == GDN_HEADS_GROUPED ? 1 : 0;
    p.state_kv = s.state_layout == GDN_STATE_KV ? 1 : 0;
    p.in_dt = s.input_dtype;
    p.gate_dt = s.gate_dtype;
    p.out_dt = s.output_dtype;
    p.flags = s.flags;
    p.scale = s.scale;
    p.l2norm_eps = s.l2norm_eps;
    p.norm_eps = s.norm_eps;
    p.q = t.q, p.q_tok = t.q_stride.token, p.q_head = t.q_stride.head;
    p.k = t.k, p.k_tok = t.k_stride.token, p.k_head = t.k_stride.head;
    p.v = t.v, p.v_tok = t.v_stride.token, p.v_head = t.v_stride.head;
    p.g = t.g, p.g_tok = t.g_stride.token, p.g_head = t.g_stride.head;
    p.beta = t.beta, p.b_tok = t.beta_stride.token, p.b_head = t.beta_stride.head;
    p.out = t.out, p.o_tok = t.out_stride.token, p.o_head = t.out_stride.head;
    p.z = t.z, p.z_tok = t.z_stride.token, p.z_head = t.z_stride.head;
    p.state = t.state;
    p.slot_stride = t.state_slot_stride;
    p.num_slots = s.num_state_slots;
    p.cu_seqlens = t.cu_seqlens;
    p.state_indices = t.state_indices;
    p.start_from_zero = t.start_from_zero;
    p.A_log = t.A_log;
    p.dt_bias = t.dt_bias;
    p.norm_weight = t.norm_weight;
    p.token_state_indices = t.token_state_indices;
    return p;
}

gdn_status_t probe(int32_t device, gdn_caps_t* caps) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        return fail(GDN_ERROR_BACKEND_UNAVAILABLE, "no CUDA device: {}",
                    e != cudaSuccess ? cudaGetErrorString(e) : "the runtime reports 0 devices");
    }
    if (device >= count)
        return fail(GDN_ERROR_BACKEND_UNAVAILABLE, "device ({}) >= the {} CUDA device(s) present",
                    device, count);
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
        return device_error("cudaGetDeviceProperties", e);
    caps->backend = GDN_BACKEND_CUDA;
    caps->device = device;
    std::snprintf(caps->arch, sizeof caps->arch, "sm_%d%d", prop.major, prop.minor);
    std::snprintf(caps->name, sizeof caps->name, "%.95s", prop.name);
    caps->multiprocessor_count = prop.multiProcessorCount;
    caps->warp_size = prop.warpSize;
    caps->shared_mem_per_block_optin = prop.sharedMemPerBlockOptin;
    caps->shared_mem_per_multiprocessor = prop.sharedMemPerMultiprocessor;
    uint64_t f = GDN_FEATURE_TOKEN_STATES;  // the sequential kernel (recurrent_kernel)
    // sm_80+: the chunked paths, which keep GDN_FLAG_BLOCK_STATES' states.
    if (prop.major >= 8) f |= GDN_FEATURE_ASYNC_COPY | GDN_FEATURE_TF32_MMA | GDN_FEATURE_BLOCK_STATES;
    if (prop.major >= 7) f |= GDN_FEATURE_FP16_MMA;
    // wgmma where the library holds sm_90a code for it (the fused BF16 path's
    // kernel and the register-state scan's wgmma form: src/cuda/CMakeLists.txt).
#if defined(GDN_CUDA_FUSED64)
    if (prop.major == 9) f |= GDN_FEATURE_WGMMA;
#endif
    caps->features = f;
    caps->compute_major = prop.major;
    caps->compute_minor = prop.minor;
    return ensure_device_setup(device);
}

namespace {
// The fused path's grid rows in their order (launch_fused64): a sequence's first token,
// end and slot (int32) and its zero-start flag.
size_t fused_order_bytes(const Shape& s) { return (size_t(s.num_seqs) * 13 + 255) & ~size_t(255); }
}  // namespace

gdn_status_t workspace_size(const gdn_caps_t& caps, const Shape& shape, const PathChoice& path,
                            size_t* bytes) {
    if (path.path == GDN_PATH_SEQUENTIAL) {
        if (gdn_status_t st = check_sequential_shape(shape)) return st;
        *bytes = 0;
        return GDN_SUCCESS;
    }
    if (path.path != GDN_PATH_CHUNKED_FP32 && path.path != GDN_PATH_CHUNKED_TC)
        return fail(GDN_ERROR_INTERNAL, "the CUDA backend has no path {}", int(path.path));
    // The fused C = 64 path needs no scratch, but gdn_workspace_size() sees no
    // tensors: its bound is the C = 32 path's, which serves the tensors the
    // fused one does not take (dispatch.cpp), so one workspace fits both.
    // (At least the fused path's row order, for a batch of many short sequences.)
    *bytes = std::max(carve_chunk_scratch(caps, shape, scan_mode_for(path.path, path.precision),
                                          policy::kCudaWindowTokens, nullptr)
                          .bytes,
                      fused_order_bytes(shape));
    return GDN_SUCCESS;
}

// The sequential kernel's token tile (a speed choice only: the bits do not
// depend on it). One-token tiles for decode, for 2-token calls, and for up to
// kOneTokenTilesMaxLen tokens a sequence where there are kOneTokenTilesMinRows
// (sequence, value head) rows or more; 16-token tiles above. A 16-token tile
// stages 16 rows in shared memory, which caps the blocks an SM holds when
// most of it is empty. H200, H_v 48, K = V = 128, states cold (perf-notes
// v91): one-token tiles 13-48% faster at 2-8 tokens for 64 sequences, 10-44%
// for 8 (384 rows), 20% at 2 tokens for one sequence; 16-token tiles faster
// from 12 tokens at 64 sequences, 16 at 8, and 4 at one.
namespace {
constexpr int64_t kOneTokenTilesMaxLen = 8;
constexpr int64_t kOneTokenTilesMinRows = 384;

int sequential_tile_tokens(const Shape& s) {
    if (s.max_seqlen <= 2) return 1;
    const int64_t rows = int64_t(s.num_seqs) * s.num_v_heads;
    return s.max_seqlen <= kOneTokenTilesMaxLen && rows >= kOneTokenTilesMinRows ? 1 : 16;
}
}  // namespace

gdn_status_t run(const gdn_caps_t& caps, const Shape& shape, const Tensors& tensors,
                 const PathChoice& path, void* workspace, size_t workspace_bytes, void* stream_ptr) {
    // workspace_bytes is checked by the caller against workspace_size(); the
    // chunked path takes longer windows where it holds their scratch.
    const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
    if (path.path != GDN_PATH_SEQUENTIAL && path.path != GDN_PATH_CHUNKED_FP32 &&
        path.path != GDN_PATH_CHUNKED_TC)
        return fail(GDN_ERROR_INTERNAL, "the CUDA backend got path {}", int(path.path));
    if (path.path == GDN_PATH_SEQUENTIAL)
        if (gdn_status_t st = check_sequential_shape(shape)) return st;
    int current = -1;
    if (cudaError_t e = cudaGetDevice(&current)) return device_error("cudaGetDevice", e);
    if (current != caps.device)
        return fail(GDN_ERROR_INVALID_ARGUMENT,
                    "caps->device ({}) is not the current CUDA device ({}): call cudaSetDevice({}) "
                    "first",
                    caps.device, current, caps.device);
    if (gdn_status_t st = ensure_device_setup(caps.device)) return st;
    // An error left by earlier work would be reported as ours after a launch.
    if (cudaError_t e = cudaPeekAtLastError())
        return device_error("a CUDA error was pending before the call", e);
    if (shape.validate())
        if (gdn_status_t st = validate_sequence_arrays(shape, tensors, stream)) return st;

    Params p = make_params(shape, tensors);
    // GDN_FLAG_PDL: the call's first kernel a programmatic dependent of the
    // caller's work ahead, which it waits for first. Programmatic dependent
    // launch is sm_90's (the kernels' waits are no-ops below it).
    if (caps.compute_major < 9) p.flags &= ~uint32_t(GDN_FLAG_PDL);
    if (path.path == GDN_PATH_SEQUENTIAL) {
        const int k_tile = shape.head_dim_k <= 64 ? 64 : 128;
        int block_cols = 32;
        if (shape.output_norm())
            block_cols = shape.head_dim_v <= 32 ? 32 : shape.head_dim_v <= 64 ? 64 : 128;
        const int tile_tokens = sequential_tile_tokens(shape);
        // Per-token states: the sequential kernel writes them (the decode
        // kernels keep only the final state).
        if (!tensors.token_state_indices && use_decode_kernel(caps, shape, p)) {
            if (cudaError_t e = launch_decode(p, stream))
                return device_error("launching the CUDA decode kernel", e);
        } else if (cudaError_t e = launch_sequential(p, k_tile, block_cols, tile_tokens, stream)) {
            return device_error("launching the CUDA sequential kernel", e);
        }
        return GDN_SUCCESS;
    }

    // The fused BF16 path (C = 64): chosen by the dispatch with the tensors.
    if (path.chunk_size == policy::kCudaFusedChunk) {
#if defined(GDN_CUDA_FUSED64)
        // A batch of sequences of different lengths whose pairs take more than one wave:
        // its grid rows longest first, their order in the workspace (which holds it:
        // workspace_size), the same bits (perf-notes v99). Not where max_seqlen says every
        // sequence has the same length (num_tokens = num_seqs x max_seqlen): the order kernel
        // costs ~5 µs.
        const bool waves = int64_t(shape.num_seqs) * shape.num_v_heads > int64_t(fused64_pair_fit(caps.device));
        const bool equal = int64_t(shape.num_seqs) * shape.max_seqlen == shape.num_tokens;
        int32_t* const order = path.cluster == 2 && tensors.cu_seqlens && shape.num_seqs > 1 && !equal &&
                                       shape.max_seqlen > policy::kCudaFusedChunk && waves &&
                                       workspace_bytes >= fused_order_bytes(shape)
                                   ? static_cast<int32_t*>(workspace)
                                   : nullptr;
        if (cudaError_t e = launch_fused64(p, path.cluster == 4, order, stream))
            return device_error("launching the CUDA fused BF16 kernel", e);
        return GDN_SUCCESS;
#else  // (the dispatch offers it only with GDN_FEATURE_WGMMA, which this build never sets)
        return fail(GDN_ERROR_INTERNAL, "the fused CUDA path was chosen in a build without it");
#endif
    }

    const ScanMode mode = scan_mode_for(path.path, path.precision);
    const int32_t ncol =
        policy::cuda_scan_columns(shape.num_k_heads, shape.group, shape.head_dim_v,
                                  caps.multiprocessor_count, use_scan_mma(mode));
    if (ncol == 0)
        return fail(GDN_ERROR_INTERNAL, "the CUDA chunked path was chosen but no scan grid fits");
    // The register-state scan's stages of loaded rows: four where they fit
    // the device's opt-in shared memory per block (ensure_device_setup raised
    // the kernels' limits to what fits it), else three.
    const int stages = policy::cuda_scan_mma_stages(
        shape.head_dim_k, ncol, caps.shared_mem_per_block_optin,
        policy::cuda_scan_mma_rows(path.precision, int32_t(dtype_size(shape.input_dtype))));
    // The scan's sequence lanes: a batch's sequences side by side where the
    // heads leave SMs free (dispatch.hpp).
    const int lanes = policy::cuda_scan_lanes(shape.num_k_heads, shape.group, shape.head_dim_v, ncol,
                                              caps.multiprocessor_count, shape.num_seqs);
    // Windows of kCudaWindowTokens (what workspace_size() sized), or longer
    // where the workspace holds their scratch and the prompt makes at least
    // kCudaMinWindows of them (dispatch.hpp); the windows do not change the
    // bits.
    int64_t window = policy::kCudaWindowTokens;
    while (2 * window <= policy::kCudaMaxWindowTokens &&
           policy::kCudaMinWindows * 2 * window <= shape.num_tokens &&
           carve_chunk_scratch(caps, shape, mode, 2 * window, nullptr).bytes <= workspace_bytes)
        window *= 2;
    const ChunkLayout l = carve_chunk_scratch(caps, shape, mode, window, workspace);
    // Time-sliced windows for a batch of long sequences of alike lengths,
    // where they make the call faster (dispatch.hpp); they need the two
    // scratch halves wherever windows overlap, which a batch of more than
    // one window's tokens has.
    const bool overlap = overlap_windows(caps);
    // (Not with GDN_FLAG_TOKEN_STATES: every sequence of a time-sliced window
    // but the first would carry its state through the workspace.)
    const int64_t slice = shape.token_states() ? 0 : policy::cuda_scan_slice_for(
        l.window, !overlap || l.halves == 2, shape.num_seqs, shape.max_seqlen, shape.num_tokens,
        shape.num_k_heads, shape.group, shape.head_dim_v, ncol, caps.multiprocessor_count,
        use_scan_mma(mode));
    // The windows: tokens [a, a + l.window) of the batch, or offsets
    // [a, a + slice) of every sequence up to max_seqlen (a sequence longer
    // than that is the caller's bug, as gdn.h says: GDN_FLAG_VALIDATE checks it).
    const int64_t span = slice ? shape.max_seqlen : shape.num_tokens;
    const int64_t step = slice ? slice : l.window;
    const auto window_at = [&](int64_t a) {
        return slice ? Window{a, kNoTokenBound, slice}
                     : Window{a, std::min(a + l.window, shape.num_tokens), 0};
    };
    // Window i's prep writes scratch half i % 2. In stream order: prep 0,
    // then per window i its scan, the prep of window i + 1, and the output
    // norm of window i. Where windows overlap, every kernel but the first is
    // a programmatic dependent of the one before it:
    // - the scan waits for the prep (and transitively everything before);
    //   the prep lets it launch once all the prep's blocks have started, so
    //   its blocks take the SMs the prep's last blocks leave and wait there
    //   (the output norm does the same for the next scan); once it runs,
    //   the next prep starts beside it on the free SMs;
    // - that prep reads only the call's inputs and writes the half the
    //   previous scan read, which had ended before this scan started; one of
    //   its threads waits for this scan, so that its completion implies the
    //   scan's (the next scan reads the state; the output norm the raw
    //   outputs);
    // - the output norm waits for that prep, the next scan for the norm.
    // The first kernel is an ordinary launch (it starts after all earlier
    // work in the caller's stream) or, with GDN_FLAG_PDL, a programmatic
    // dependent of that work which waits for it at its start (chunk_prep.cu);
    // the later preps, which must start beside the scan, get the flag cleared.
    const bool pdl = (p.flags & GDN_FLAG_PDL) != 0;
    Params p_later = p;
    p_later.flags &= ~uint32_t(GDN_FLAG_PDL);
    const auto prep = [&](int64_t a, bool dependent) {
        const ChunkScratch& w = l.scratch[(a / step) % 2];
        if (cudaError_t e = launch_chunk_prep(a == 0 ? p : p_later, w, window_at(a), stream, dependent))
            return device_error("launching the CUDA chunk prep kernel", e);
        return GDN_SUCCESS;
    };
    if (gdn_status_t st = prep(0, pdl)) return st;
    for (int64_t a = 0; a < span; a += step) {
        ChunkScratch w = l.scratch[(a / step) % 2];
        w.carry_out = l.carry[(a / step) % 2];
        w.carry_in = l.carry[(a / step + 1) % 2];
        const Window win = window_at(a);
        if (cudaError_t e = launch_chunk_scan(p, w, win, ncol, stages, lanes, mode, a == 0, stream,
                                              overlap))
            return device_error("launching the CUDA chunk scan kernel", e);
        if (a + step < span)
            if (gdn_status_t st = prep(a + step, overlap)) return st;
        if (shape.output_norm())
            if (cudaError_t e = launch_chunk_epilogue(p, w, win, stream, overlap))
                return device_error("launching the CUDA output-norm kernel", e);
    }
    return GDN_SUCCESS;
}

}  // namespace gdn::cuda

#if !defined(GDN_CUDA_FUSED64)
namespace gdn {
int32_t cuda_fused_cluster4_fit(int32_t) { return 0; }  // (no fused path in this build)
}  // namespace gdn
#endif
