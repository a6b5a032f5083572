// Device helpers shared by the CUDA kernels: typed element loads and stores,
// the optional features' formulas (the CPU backend's, src/common/cpu_kernels.hpp),
// and the sequence bookkeeping (cu_seqlens, pool slots, zero-start flags).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "cuda/kernels.hpp"

namespace gdn::cuda {

// ------------------------------------------------------------------ elements

// The raw bits of element i: f32 as its 32 bits, f16/bf16 in the low 16. The
// inputs are read-only for the whole call (out overlaps none of them), so
// they go through the read-only path; the conversion is a separate step, so
// a prefetch can keep the load in flight while other work runs.
__device__ __forceinline__ uint32_t load_bits(const void* base, gdn_dtype_t t, int64_t i) {
    // One address for both widths: fewer live registers where many loads wait.
    const char* at = static_cast<const char*>(base) + (i << (t == GDN_DTYPE_F32 ? 2 : 1));
    if (t == GDN_DTYPE_F32) return __ldg(reinterpret_cast<const unsigned int*>(at));
    return __ldg(reinterpret_cast<const unsigned short*>(at));
}

__device__ __forceinline__ float bits_to_float(uint32_t b, gdn_dtype_t t) {
    if (t == GDN_DTYPE_F32) return __uint_as_float(b);
    if (t == GDN_DTYPE_BF16) return __uint_as_float(b << 16);
    return __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
}

__device__ __forceinline__ float load_float(const void* base, gdn_dtype_t t, int64_t i) {
    return bits_to_float(load_bits(base, t, i), t);
}

// Raw input elements of IN_BYTES bytes, for kernels built per input width
// (loads at constant offsets, no dtype switch): f32 as its bits, or bf16 /
// f16 told apart at conversion.
template <int IN_BYTES>
struct Raw;
template <>
struct Raw<4> {
    using type = unsigned int;
    __device__ static float to_float(uint32_t b, bool) { return __uint_as_float(b); }
};
template <>
struct Raw<2> {
    using type = unsigned short;
    __device__ static float to_float(uint32_t b, bool bf16) {
        const float as_bf16 = __uint_as_float(b << 16);
        const float as_f16 = __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
        return bf16 ? as_bf16 : as_f16;
    }
};

// Round to nearest even, as src/common/numeric.hpp does on the host.
__device__ __forceinline__ void store_float(void* base, gdn_dtype_t t, int64_t i, float x) {
    if (t == GDN_DTYPE_F32)
        static_cast<float*>(base)[i] = x;
    else if (t == GDN_DTYPE_BF16)
        static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x);
    else
        static_cast<__half*>(base)[i] = __float2half_rn(x);
}

// ------------------------------------------------------------------ features

__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// g from the raw a of value head h: −e^{A_log[h]} softplus(a + dt_bias[h]).
__device__ __forceinline__ float gate_from_raw(float a, float A_log_h, float dt_bias_h) {
    return -expf(A_log_h) * softplus(a + dt_bias_h);
}

// g of value head h from the stored value (a with GDN_FLAG_GATE_FROM_RAW).
__device__ __forceinline__ float gate_of(const Params& p, float stored, int32_t h) {
    if (!(p.flags & GDN_FLAG_GATE_FROM_RAW)) return stored;
    return gate_from_raw(stored, p.A_log[h], p.dt_bias[h]);
}

__device__ __forceinline__ float beta_of(const Params& p, float stored) {
    return (p.flags & GDN_FLAG_BETA_FROM_LOGITS) ? sigmoid(stored) : stored;
}

// The factors that make q̂ = qf·q and k̂ = kf·k from sums of squares.
__device__ __forceinline__ float q_factor(const Params& p, float qq) {
    return (p.flags & GDN_FLAG_QK_L2NORM) ? p.scale / sqrtf(qq + p.l2norm_eps) : p.scale;
}
__device__ __forceinline__ float k_factor(const Params& p, float kk) {
    return (p.flags & GDN_FLAG_QK_L2NORM) ? 1.0f / sqrtf(kk + p.l2norm_eps) : 1.0f;
}

// 1 / rms of the output row (sum of squares oo over V), for the epilogue.
__device__ __forceinline__ float inv_rms(const Params& p, float oo) {
    return 1.0f / sqrtf(oo / float(p.V) + p.norm_eps);
}
__device__ __forceinline__ float silu(float z) { return z * sigmoid(z); }

// ------------------------------------------------------------------- heads

__device__ __forceinline__ int32_t key_head_of(const Params& p, int32_t h) {
    return p.grouped ? h / p.G : h % p.Hk;
}
// The value head that is the gi-th of key head kh's group.
__device__ __forceinline__ int32_t value_head_of(const Params& p, int32_t kh, int32_t gi) {
    return p.grouped ? kh * p.G + gi : gi * p.Hk + kh;
}

// Element (k, v) of one head's state.
__device__ __forceinline__ int64_t state_offset(const Params& p, int32_t k, int32_t v) {
    return p.state_kv ? int64_t(k) * p.V + v : int64_t(v) * p.K + k;
}
// The state of value head h in slot `slot`.
__device__ __forceinline__ float* head_state(const Params& p, int32_t slot, int32_t h) {
    return p.state + int64_t(slot) * p.slot_stride + int64_t(h) * p.K * p.V;
}

// --------------------------------------------------------------- sequences

__device__ __forceinline__ int64_t seq_begin(const Params& p, int32_t n) {
    return p.cu_seqlens ? int64_t(p.cu_seqlens[n]) : int64_t(n) * p.equal_len;
}
__device__ __forceinline__ int64_t seq_end(const Params& p, int32_t n) {
    return p.cu_seqlens ? int64_t(p.cu_seqlens[n + 1]) : int64_t(n + 1) * p.equal_len;
}
__device__ __forceinline__ int32_t seq_slot(const Params& p, int32_t n) {
    return p.state_indices ? p.state_indices[n] : n;
}
__device__ __forceinline__ bool seq_from_zero(const Params& p, int32_t n) {
    return p.start_from_zero && p.start_from_zero[n] != 0;
}
// The first sequence that ends after token `pos` (num_seqs if none): the
// ends are non-decreasing (the caller's contract), so a binary search.
__device__ __forceinline__ int32_t first_seq_ending_after(const Params& p, int64_t pos) {
    int32_t lo = 0, hi = p.num_seqs;
    while (lo < hi) {
        const int32_t mid = (lo + hi) / 2;
        if (seq_end(p, mid) > pos)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

// ------------------------------------------------------------------- warps

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int m = 16; m >= 1; m /= 2) x += __shfl_xor_sync(0xffffffffu, x, m);
    return x;
}

// The gated RMSNorm's two halves: 1 / rms of a row o (V floats, shared or
// global memory; called by one warp) and one output column. A kernel that
// spreads a row's stores over its column threads (decode_stream_kernel)
// calls them as norm_out_row does: the same expressions, the same bits.
__device__ __forceinline__ float row_inv_rms(const Params& p, const float* o, int lane) {
    float oo = 0.0f;
    for (int c = lane; c < p.V; c += 32) oo = fmaf(o[c], o[c], oo);
    return inv_rms(p, warp_sum(oo));
}
__device__ __forceinline__ float gated_norm(float o, float ir, float w, float z) { return o * ir * w * silu(z); }
// The out row of token `tok`, value head h, from o through the gated
// RMSNorm; called by one warp. The sequential and decode kernels and the
// chunked path's epilogue share it.
__device__ __forceinline__ void norm_out_row(const Params& p, const float* o, int64_t tok,
                                             int32_t h, int lane) {
    const float ir = row_inv_rms(p, o, lane);
    for (int c = lane; c < p.V; c += 32) {
        const float z = load_float(p.z, p.in_dt, tok * p.z_tok + h * p.z_head + c);
        store_float(p.out, p.out_dt, tok * p.o_tok + h * p.o_head + c, gated_norm(o[c], ir, p.norm_weight[c], z));
    }
}

// ------------------------------------------------------------- async copy

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared; src_bytes = 0 fills zeros and reads nothing.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)),
                 "l"(src), "r"(src_bytes));
#else
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (src_bytes) v = *static_cast<const float4*>(src);
    *static_cast<float4*>(dst) = v;
#endif
}
// 8 bytes global -> shared, likewise.
__device__ __forceinline__ void cp_async8(void* dst, const void* src, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
#else
    float2 v = make_float2(0.f, 0.f);
    if (src_bytes) v = *static_cast<const float2*>(src);
    *static_cast<float2*>(dst) = v;
#endif
}
// The 128-byte line holding p, fetched into L2 (no register, no wait).
__device__ __forceinline__ void prefetch_l2(const void* p) {
#if defined(__CUDA_ARCH__)
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
#endif
}
// The same line into L1 as well (a later load of it is then an L1 hit, unless
// the line was evicted or L1 invalidated in between: an L2 hit then).
__device__ __forceinline__ void prefetch_l1(const void* p) {
#if defined(__CUDA_ARCH__)
    asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}
// Waits until at most N of this thread's latest commit groups are pending
// (every older group's copies are done): a pipeline keeps its newest N
// groups in flight across the barrier that follows.
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// A barrier of the whole block for warp-specialised kernels, whose warp
// roles reach it from different places in the code. __syncthreads() is the
// aligned form (`barrier.sync.aligned 0`), which PTX allows only where every
// thread of the block executes the same barrier instruction; this is the
// unaligned form, for which each warp may arrive from its own code path
// (sm_70 and later). Same memory ordering among the block's threads.
__device__ __forceinline__ void block_barrier() {
#if defined(__CUDA_ARCH__)
    asm volatile("barrier.sync 0;\n" ::: "memory");
#endif
}

// ------------------------------------------- programmatic dependent launch
//
// The chunked path's kernels overlap across windows (backend.cpp): the next
// window's prep runs on the SMs the scan leaves free. On sm_90 a kernel
// launched with launch_kernel(..., overlap = true) may start before the
// kernel ahead of it in the stream has finished; it must call
// grid_dependency_wait() before it reads what that kernel wrote, and its
// grid's completion implies the earlier one's only where one of its threads
// has waited. allow_dependent_launch() lets the next kernel start before
// this one ends. Below sm_90 both are no-ops and launches are ordinary.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// mbarriers in shared memory (sm_90; the fused BF16 kernel and the bulk-copy
// decode kernel): init, arrive, arrive expecting a bulk copy's bytes, and wait
// for the phase of the given parity. A wait traps after 2^26 polls (seconds)
// instead of hanging the device.
__device__ __forceinline__ void mbar_init(uint64_t* b, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_tx(uint64_t* b, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, int parity) {
    asm volatile(
        "{\n.reg .pred p;\n.reg .u32 n;\nmov.u32 n, 0;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@p bra DONE_%=;\n"
        "add.u32 n, n, 1;\nsetp.gt.u32 p, n, 67108864;\n@p trap;\nbra WAIT_%=;\n"
        "DONE_%=:\n}\n" ::"r"(smem_addr(b)),
        "r"(parity)
        : "memory");
}

template <typename... KernelArgs, typename... Args>
cudaError_t launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, bool overlap, Args&&... args) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attribute[1] = {};
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = overlap ? 1 : 0;
    const cudaError_t e = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
    // Consumed, as `kernel<<<...>>>(); cudaGetLastError()` did: the failure is
    // this call's, reported once, not left pending for the caller's next call.
    const cudaError_t last = cudaGetLastError();
    return e != cudaSuccess ? e : last;
}

}  // namespace gdn::cuda
