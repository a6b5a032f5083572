// The fused BF16 path's instances and launch (the kernel: fused64.cuh). Its
// device code is sm_90a's (wgmma, setmaxnreg, TMA): CMake gives this file
// that code generation where the build targets sm_90; for other
// architectures the kernel's body is empty, and the dispatch never launches
// it there.
#include <atomic>

#include "common/dispatch.hpp"
#include "cuda/fused64.cuh"

namespace gdn::cuda {

namespace {

// The library's instances: BAL off (--balance gives the same bits, slower:
// perf-notes v44), the marks compiled in and switched off (Args.phases and
// .trace are 0: no spill in the prep's loop, fused64.cuh says why), one per
// output dtype, without and with the q/k L2 norm (NORM), without and with g
// and β through the load warps' registers (GX: 16-bit g/β, the raw gate, β
// from logits), each for pairs and for clusters of four (QUAD, where the heads
// leave SMs idle: perf-notes v98). The output norm is a kernel of its own
// after them (fused64_norm_kernel).
using Kernel = void (*)(fused64::Args);
template <bool NORM, bool GX, bool TS, bool QUAD = false>
constexpr Kernel kFor[3] = {
    fused64::fused64_kernel<false, true, GDN_DTYPE_F32, NORM, GX, TS, QUAD>,
    fused64::fused64_kernel<false, true, GDN_DTYPE_BF16, NORM, GX, TS, QUAD>,
    fused64::fused64_kernel<false, true, GDN_DTYPE_F16, NORM, GX, TS, QUAD>,
};
// (NORM always with GX, the form measured on the H200, perf-notes v48; an
// earlier form's NORM instance of the cp.async g/β path spilled inside A's
// loop. make_args sets gate_xform with the norm.) TS: GDN_FLAG_BLOCK_STATES.
// [quad][TS][kind]: QUAD, clusters of four (Args.quad).
const Kernel* const kKernels[2][2][3] = {
    {{kFor<false, false, false>, kFor<false, true, false>, kFor<true, true, false>},
     {kFor<false, false, true>, kFor<false, true, true>, kFor<true, true, true>}},
    {{kFor<false, false, false, true>, kFor<false, true, false, true>, kFor<true, true, false, true>},
     {kFor<false, false, true, true>, kFor<false, true, true, true>, kFor<true, true, true, true>}},
};
static_assert(size_t(fused64::kRSmem) == policy::kCudaFusedSmemBytes,
              "the dispatch's figure of the fused kernel's shared memory");

Kernel kernel_for(gdn_dtype_t out, bool norm, bool gx, bool ts, bool quad) {
    const Kernel* k = kKernels[int(quad)][int(ts)][norm ? 2 : int(gx)];
    switch (out) {
        case GDN_DTYPE_F32: return k[0];
        case GDN_DTYPE_BF16: return k[1];
        case GDN_DTYPE_F16: return k[2];
        default: return nullptr;
    }
}

// Per device, how many clusters of four fused CTAs it runs at once
// (cudaOccupancyMaxActiveClusters: the SMs of a GPC host whole clusters only),
// set with the kernels' attributes; 0 until then, and on devices past the
// table. The dispatch takes clusters of four (PathChoice::cluster, Args.quad,
// perf-notes v98) where every (sequence, value head) has one in a single wave:
// heads that would leave SMs idle with pairs.
constexpr int kQuadDevices = 64;
std::atomic<int> g_quad_fit[kQuadDevices];
// The same for pairs: where a batch's (sequence, value head) pairs outnumber it, the grid
// runs in several waves, and its rows go longest sequence first (fused64_order_kernel).
std::atomic<int> g_pair_fit[kQuadDevices];

// A batch's grid rows longest sequence first. The fused grid runs in several waves where its
// pairs outnumber what the device holds at once, and the hardware starts its clusters
// roughly in row order: a long sequence in the last rows would start when the rest are
// done and run alone after them (longest processing time first is the classic cure). This
// kernel gives row y the sequence of rank y and writes, in the caller's workspace, what the
// fused kernel reads per row (Args.cu with cu_end = N): rows[y] its first token, rows[N + y]
// its end, slots[y] its slot (state_indices, or its index), sfz[y] its zero-start flag
// (where the call has them): each row computes its sequence's bits. A sequence's key is
// its chunk count, exact up to kOrderExact chunks and in steps of 64 chunks above (the call
// is then long anyway); equal keys keep their index order, so the order depends on the
// lengths alone. One block: warp w counts the keys of its contiguous range of sequences,
// the counts become each (warp, key)'s first rank, and each warp then places its range in
// index order, 32 sequences a step (__match_any_sync ranks equal keys among the lanes).
// Padding entries and empty sequences (key 0) go last. A programmatic dependent of the
// caller's work under GDN_FLAG_PDL (it reads cu_seqlens, which that work may write), and
// the fused kernel one of it.
constexpr int kOrderThreads = 1024, kOrderKeys = 256, kOrderExact = 192;

__device__ __forceinline__ uint32_t order_key(const int32_t* cu, int32_t i) {
    const int64_t len = int64_t(cu[i + 1]) - int64_t(cu[i]);
    const int64_t c = len > 0 ? (len + fused64::C - 1) / fused64::C : 0;
    const int64_t above = (c - kOrderExact) >> 6;
    const int64_t k = c < kOrderExact ? c : kOrderExact + (above < kOrderKeys - 1 - kOrderExact ? above : kOrderKeys - 1 - kOrderExact);
    return uint32_t(kOrderKeys - 1 - k);  // ascending key, descending length
}

__global__ void __launch_bounds__(kOrderThreads)
    fused64_order_kernel(const int32_t* __restrict__ cu, const int32_t* __restrict__ state_indices,
                         const uint8_t* __restrict__ start_from_zero, int32_t N, int32_t* __restrict__ rows,
                         int32_t* __restrict__ slots, uint8_t* __restrict__ sfz) {
    grid_dependency_wait();
    allow_dependent_launch();
    constexpr int W = kOrderThreads / 32;
    __shared__ uint32_t cnt[W][kOrderKeys];  // counts, then first ranks
    __shared__ uint32_t total[kOrderKeys];
    const int lane = int(threadIdx.x) & 31, w = int(threadIdx.x) >> 5;
    const int32_t per = (N + W - 1) / W, lo = min(N, w * per), hi = min(N, lo + per);
    for (int i = int(threadIdx.x); i < W * kOrderKeys; i += kOrderThreads) (&cnt[0][0])[i] = 0u;
    __syncthreads();
    for (int32_t i = lo + lane; i < hi; i += 32) atomicAdd(&cnt[w][order_key(cu, i)], 1u);
    __syncthreads();
    // Key t's total, its first rank (an exclusive scan over the keys by one warp, eight keys
    // a lane), then (warp, key)'s.
    if (threadIdx.x < kOrderKeys) {
        uint32_t sum = 0;
        for (int v = 0; v < W; ++v) sum += cnt[v][threadIdx.x];
        total[threadIdx.x] = sum;
    }
    __syncthreads();
    if (w == 0) {
        constexpr int E = kOrderKeys / 32;
        uint32_t x[E], run = 0;
        for (int e = 0; e < E; ++e) x[e] = total[lane * E + e], run += x[e];
        uint32_t incl = run;
        for (int d = 1; d < 32; d *= 2) {
            const uint32_t y = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= d) incl += y;
        }
        uint32_t at = incl - run;
        for (int e = 0; e < E; ++e) total[lane * E + e] = at, at += x[e];
    }
    __syncthreads();
    if (threadIdx.x < kOrderKeys) {
        uint32_t at = total[threadIdx.x];
        for (int v = 0; v < W; ++v) {
            const uint32_t c = cnt[v][threadIdx.x];
            cnt[v][threadIdx.x] = at;
            at += c;
        }
    }
    __syncthreads();
    for (int32_t b = lo; b < hi; b += 32) {
        const int32_t i = b + lane;
        const uint32_t key = i < hi ? order_key(cu, i) : 0xffffffffu;
        const uint32_t same = __match_any_sync(0xffffffffu, key);
        const uint32_t below = same & ((1u << lane) - 1u);
        const uint32_t y = i < hi ? cnt[w][key] + uint32_t(__popc(below)) : 0u;
        __syncwarp();
        if (i < hi && below == 0u) cnt[w][key] += uint32_t(__popc(same));
        __syncwarp();
        if (i < hi) {
            rows[y] = cu[i], rows[N + y] = cu[i + 1];
            slots[y] = state_indices ? state_indices[i] : i;
            if (start_from_zero) sfz[y] = start_from_zero[i];
        }
    }
}

// GDN_FLAG_OUTPUT_NORM on the fused path: the gated RMSNorm of the rows the
// plain kernel left in out, in place (out overlaps no input, gdn.h). The raw
// rows are f32 where out is f32, else bf16 (RAW_F32 false): bf16's range for
// the raw values, whichever 16-bit type out holds in the end. V = 128 (the
// fused path's). A half-warp takes a (token, value head) row, lane l of it
// columns 8l..8l + 7; a warp takes four rows, every load issued before the
// first use and its bits converted only where they are used. VEC: out's and
// z's rows 16-byte aligned, so a lane's columns are one or two 16-byte
// accesses; else element by element. A programmatic dependent of the fused
// kernel: it may start on the SMs the fused grid leaves free, and waits
// there for the whole grid. Tokens of padding rows (negative slots) and of
// no sequence are left alone, as the fused kernel leaves them (their rows
// are read, not written). The formula is norm_out_row's (device_common.cuh)
// with the row's 1/rms and silu's exponential and quotient by the fast
// intrinsics (an element's relative error ~1e-6 where |z| <= 5, growing with
// |z| where silu's gate is ~0; the outputs are ~4e-3 from FP64):
// the kernel was bound by its instructions as much as by its bytes
// (perf-notes v66).
constexpr int kNormRowsPerWarp = 4;

// n / d for any 32-bit n by a multiply-high and shifts (Granlund and
// Montgomery), the constants from the host: v64's 64-bit division a row was
// among the instructions that bound the kernel (perf-notes v66).
struct RowDiv {
    uint32_t m, s1, s2;
};
RowDiv row_div(uint32_t d) {
    uint32_t l = 0;
    while (l < 32 && (uint64_t(1) << l) < d) ++l;  // ceil(log2 d)
    const uint64_t m = ((uint64_t(1) << 32) * ((uint64_t(1) << l) - d)) / d + 1;
    return {uint32_t(m), l < 1 ? 0u : 1u, l < 1 ? 0u : l - 1};
}
__device__ __forceinline__ uint32_t row_quotient(uint32_t n, RowDiv dv) {
    const uint32_t t = __umulhi(dv.m, n);
    return (t + ((n - t) >> dv.s1)) >> dv.s2;
}

__device__ __forceinline__ float silu_fast(float z) { return __fdividef(z, 1.0f + __expf(-z)); }

template <bool RAW_F32, bool VEC, bool Z_BF16>
__global__ void __launch_bounds__(256) fused64_norm_kernel(const Params p, const RowDiv dv) {
    allow_dependent_launch();
    grid_dependency_wait();
    constexpr int R = kNormRowsPerWarp / 2;  // a half-warp's rows
    constexpr int YW = RAW_F32 || !VEC ? 8 : 4, ZW = VEC ? 4 : 8;  // words of a lane's raw and z columns
    const int lane = threadIdx.x & 31, c = 8 * (lane & 15);
    const int64_t first = (int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5)) * kNormRowsPerWarp + (lane >> 4);
    const int64_t rows = p.num_tokens * p.Hv;
    uint32_t yb[R][YW], zb[R][ZW];
    int64_t tok[R], oi[R];
    bool live[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int64_t row = first + 2 * i;
        live[i] = row < rows;
        // (rows is the launch's: a uniform branch)
        tok[i] = rows < (int64_t(1) << 31) ? int64_t(row_quotient(uint32_t(row), dv)) : row / p.Hv;
        const int32_t h = int32_t(row - tok[i] * p.Hv);
        oi[i] = tok[i] * p.o_tok + int64_t(h) * p.o_head + c;
        const int64_t zi = tok[i] * p.z_tok + int64_t(h) * p.z_head + c;
#pragma unroll
        for (int e = 0; e < YW; ++e) yb[i][e] = 0u;
#pragma unroll
        for (int e = 0; e < ZW; ++e) zb[i][e] = 0u;
        if (!live[i]) continue;
        if constexpr (VEC) {
            const uint4* o4 =
                reinterpret_cast<const uint4*>(static_cast<const char*>(p.out) + oi[i] * (RAW_F32 ? 4 : 2));
#pragma unroll
            for (int k = 0; k < YW / 4; ++k) {
                const uint4 r = o4[k];
                yb[i][4 * k] = r.x, yb[i][4 * k + 1] = r.y, yb[i][4 * k + 2] = r.z, yb[i][4 * k + 3] = r.w;
            }
            const uint4 r = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.z) + zi));
            zb[i][0] = r.x, zb[i][1] = r.y, zb[i][2] = r.z, zb[i][3] = r.w;
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                yb[i][e] = RAW_F32 ? static_cast<const uint32_t*>(p.out)[oi[i] + e]
                                   : uint32_t(static_cast<const uint16_t*>(p.out)[oi[i] + e]);
                zb[i][e] = load_bits(p.z, p.in_dt, zi + e);
            }
        }
    }
    // Which rows are written: looked up while the loads are in flight.
#pragma unroll
    for (int i = 0; i < R; ++i)
        if (live[i]) {
            const int32_t n = first_seq_ending_after(p, tok[i]);
            live[i] = n < p.num_seqs && tok[i] >= seq_begin(p, n) && seq_slot(p, n) >= 0;
        }
    float w[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) w[e] = __ldg(p.norm_weight + c + e);
#pragma unroll
    for (int i = 0; i < R; ++i) {
        float y[8], z[8];
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
            if constexpr (RAW_F32)
                y[e] = __uint_as_float(yb[i][e]), y[e + 1] = __uint_as_float(yb[i][e + 1]);
            else if constexpr (VEC)
                mma::unpack2<ScanMode::kBf16>(yb[i][e / 2], y[e], y[e + 1]);
            else
                y[e] = __uint_as_float(yb[i][e] << 16), y[e + 1] = __uint_as_float(yb[i][e + 1] << 16);
            if constexpr (VEC) {  // (VEC: 16-bit z, Z_BF16 its type)
                if constexpr (Z_BF16)
                    mma::unpack2<ScanMode::kBf16>(zb[i][e / 2], z[e], z[e + 1]);
                else
                    mma::unpack2<ScanMode::kFp16>(zb[i][e / 2], z[e], z[e + 1]);
            } else {
                z[e] = bits_to_float(zb[i][e], p.in_dt), z[e + 1] = bits_to_float(zb[i][e + 1], p.in_dt);
            }
        }
        float oo = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) oo = fmaf(y[e], y[e], oo);
#pragma unroll
        for (int m = 8; m >= 1; m /= 2) oo += __shfl_xor_sync(0xffffffffu, oo, m);  // the half-warp's
        if (!live[i]) continue;
        const float ir = rsqrtf(fmaf(oo, 1.0f / 128.0f, p.norm_eps));  // inv_rms at V = 128
        float r[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) r[e] = y[e] * ir * w[e] * silu_fast(z[e]);
        if (VEC && RAW_F32) {
            float4* o4 = reinterpret_cast<float4*>(static_cast<float*>(p.out) + oi[i]);
            o4[0] = make_float4(r[0], r[1], r[2], r[3]), o4[1] = make_float4(r[4], r[5], r[6], r[7]);
        } else if (VEC) {
            uint32_t b[4];
#pragma unroll
            for (int e = 0; e < 4; ++e)
                b[e] = p.out_dt == GDN_DTYPE_BF16 ? mma::pack2<ScanMode::kBf16>(r[2 * e], r[2 * e + 1])
                                                  : mma::pack2<ScanMode::kFp16>(r[2 * e], r[2 * e + 1]);
            *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.out) + oi[i]) = make_uint4(b[0], b[1], b[2], b[3]);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) store_float(p.out, p.out_dt, oi[i] + e, r[e]);
        }
    }
}

}  // namespace

// With GDN_FLAG_OUTPUT_NORM: the plain kernel (the instance of the call
// without the flag) writes the raw rows into out, then fused64_norm_kernel
// normalises them (perf-notes v64).
cudaError_t launch_fused64(const Params& p, bool quad, int32_t* order, cudaStream_t stream) {
    const bool onorm = (p.flags & GDN_FLAG_OUTPUT_NORM) != 0;
    Params raw = p;
    if (onorm) {
        raw.flags &= ~uint32_t(GDN_FLAG_OUTPUT_NORM);
        raw.out_dt = p.out_dt == GDN_DTYPE_F32 ? GDN_DTYPE_F32 : GDN_DTYPE_BF16;
    }
    fused64::Args a;
    if (const cudaError_t e = fused64::make_args(raw, &a)) return e;
    a.quad = quad ? 1 : 0;
    const Kernel kern = kernel_for(raw.out_dt, (raw.flags & GDN_FLAG_QK_L2NORM) != 0, a.gate_xform != 0,
                                   a.token_states != nullptr, a.quad != 0);
    if (!kern) return cudaErrorInvalidValue;
    const bool pdl = (p.flags & GDN_FLAG_PDL) != 0;
    const bool ordered = order && p.cu_seqlens;
    if (ordered) {
        // The rows' order first; the fused kernel its programmatic dependent (it waits at its
        // start, before any access, so its completion implies the order kernel's and, under
        // GDN_FLAG_PDL, the caller's work ahead of that).
        const int32_t N = p.num_seqs;
        int32_t* const rows = order;
        int32_t* const slots = order + 2 * int64_t(N);
        uint8_t* const sfz = reinterpret_cast<uint8_t*>(order + 3 * int64_t(N));
        if (const cudaError_t e = launch_kernel(fused64_order_kernel, dim3(1), dim3(kOrderThreads), 0, stream, pdl,
                                                p.cu_seqlens, p.state_indices, p.start_from_zero, N, rows, slots, sfz))
            return e;
        a.cu = rows, a.cu_end = N, a.state_indices = slots;
        if (p.start_from_zero) a.start_from_zero = sfz;
    }
    if (const cudaError_t e = fused64::launch_args(kern, a, stream, pdl || ordered)) return e;
    const int64_t rows = p.num_tokens * p.Hv;
    if (!onorm || rows == 0) return cudaSuccess;
    // 16-byte accesses where every row of out and z starts 16-byte aligned.
    const uint64_t ob = p.out_dt == GDN_DTYPE_F32 ? 4 : 2;
    const bool vec = p.in_dt != GDN_DTYPE_F32 &&
                     (reinterpret_cast<uintptr_t>(p.out) | uint64_t(p.o_tok) * ob | uint64_t(p.o_head) * ob |
                      reinterpret_cast<uintptr_t>(p.z) | uint64_t(p.z_tok) * 2 | uint64_t(p.z_head) * 2) % 16 == 0;
    const dim3 grid(unsigned((rows + 8 * kNormRowsPerWarp - 1) / (8 * kNormRowsPerWarp)));
    const bool zbf = p.in_dt == GDN_DTYPE_BF16;
    void (*const norm)(Params, RowDiv) =
        p.out_dt == GDN_DTYPE_F32
            ? (!vec ? fused64_norm_kernel<true, false, false>
                    : zbf ? fused64_norm_kernel<true, true, true> : fused64_norm_kernel<true, true, false>)
            : (!vec ? fused64_norm_kernel<false, false, false>
                    : zbf ? fused64_norm_kernel<false, true, true> : fused64_norm_kernel<false, true, false>);
    return launch_kernel(norm, grid, dim3(256), 0, stream, true, p, row_div(uint32_t(p.Hv)));
}

cudaError_t set_fused64_attributes(size_t smem_limit) {
    if (size_t(fused64::kRSmem) > smem_limit) return cudaSuccess;
    for (const auto& quad : kKernels)
        for (const auto& sets : quad)
            for (const Kernel* ks : sets)
                for (int i = 0; i < 3; ++i)
                    if (const cudaError_t e = cudaFuncSetAttribute(ks[i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                                   fused64::kRSmem))
                        return e;
    // Clusters of four at once (every instance has the same threads, shared memory and launch
    // registers). A device without clusters, or a failed query: 0, pairs only.
    int dev = -1, fit = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kQuadDevices) {
        cudaGetLastError();
        return cudaSuccess;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(4), cfg.blockDim = dim3(512), cfg.dynamicSmemBytes = fused64::kRSmem;
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 4, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cfg.attrs = &attr, cfg.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&fit, reinterpret_cast<const void*>(kKernels[1][0][0][1]), &cfg) != cudaSuccess) {
        cudaGetLastError();  // (not sticky; no error left for the caller)
        fit = 0;
    }
    g_quad_fit[dev].store(fit, std::memory_order_relaxed);
    int pairs = 0;
    cfg.gridDim = dim3(2), attr.val.clusterDim.x = 2;
    if (cudaOccupancyMaxActiveClusters(&pairs, reinterpret_cast<const void*>(kKernels[0][0][0][1]), &cfg) != cudaSuccess) {
        cudaGetLastError();
        pairs = 0;
    }
    g_pair_fit[dev].store(pairs, std::memory_order_relaxed);
    return cudaSuccess;
}

int32_t fused64_pair_fit(int device) {
    return device >= 0 && device < kQuadDevices ? g_pair_fit[device].load(std::memory_order_relaxed) : 0;
}

}  // namespace gdn::cuda

namespace gdn {
int32_t cuda_fused_cluster4_fit(int32_t device) {
    return device >= 0 && device < cuda::kQuadDevices ? cuda::g_quad_fit[device].load(std::memory_order_relaxed) : 0;
}
}  // namespace gdn
