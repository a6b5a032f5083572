// The fused BF16 path's instances and launch (the kernel: fused64.cuh). Its
// device code is sm_90a's (wgmma, setmaxnreg, TMA): CMake gives this file
// that code generation where the build targets sm_90; for other
// architectures the kernel's body is empty, and the dispatch never launches
// it there.
#include "common/dispatch.hpp"
#include "cuda/fused64.cuh"

namespace gdn::cuda {

namespace {

// The library's instances: BAL off (--balance gives the same bits, slower:
// perf-notes v44), the marks compiled in and switched off (Args.phases and
// .trace are 0: no spill in the prep's loop, fused64.cuh says why), one per
// output dtype, without and with the q/k L2 norm (NORM), without and with g
// and β through the load warps' registers (GX: 16-bit g/β, the raw gate, β
// from logits). The output norm is a kernel of its own after them
// (fused64_norm_kernel).
using Kernel = void (*)(fused64::Args);
template <bool NORM, bool GX>
constexpr Kernel kFor[3] = {
    fused64::fused64_kernel<false, true, GDN_DTYPE_F32, NORM, GX>,
    fused64::fused64_kernel<false, true, GDN_DTYPE_BF16, NORM, GX>,
    fused64::fused64_kernel<false, true, GDN_DTYPE_F16, NORM, GX>,
};
// (NORM always with GX, the form measured on the H200, perf-notes v48; an
// earlier form's NORM instance of the cp.async g/β path spilled inside A's
// loop. make_args sets gate_xform with the norm.)
const Kernel* const kKernels[3] = {kFor<false, false>, kFor<false, true>, kFor<true, true>};
static_assert(size_t(fused64::kRSmem) == policy::kCudaFusedSmemBytes,
              "the dispatch's figure of the fused kernel's shared memory");

Kernel kernel_for(gdn_dtype_t out, bool norm, bool gx) {
    const Kernel* k = kKernels[norm ? 2 : int(gx)];
    switch (out) {
        case GDN_DTYPE_F32: return k[0];
        case GDN_DTYPE_BF16: return k[1];
        case GDN_DTYPE_F16: return k[2];
        default: return nullptr;
    }
}

// GDN_FLAG_OUTPUT_NORM on the fused path: the gated RMSNorm of the rows the
// plain kernel left in out, in place (out overlaps no input, gdn.h). The raw
// rows are f32 where out is f32, else bf16 (RAW_F32 false): bf16's range for
// the raw values, whichever 16-bit type out holds in the end. V = 128 (the
// fused path's). A half-warp takes a (token, value head) row, lane l of it
// columns 8l..8l + 7; a warp takes four rows, every load issued before the
// first use (the bytes in flight bound the kernel in part: perf-notes v64).
// VEC: out's and z's rows 16-byte aligned, so a lane's columns are one or
// two 16-byte accesses; else element by element. A programmatic dependent of
// the fused kernel: it may start on the SMs the fused grid leaves free, and
// waits there for the whole grid. Tokens of padding rows (negative slots) and
// of no sequence are left alone, as the fused kernel leaves them (their rows
// are read, not written). The formula is norm_out_row's (device_common.cuh).
constexpr int kNormRowsPerWarp = 4;
template <bool RAW_F32, bool VEC>
__global__ void __launch_bounds__(256) fused64_norm_kernel(const Params p) {
    allow_dependent_launch();
    grid_dependency_wait();
    constexpr int R = kNormRowsPerWarp / 2;  // a half-warp's rows
    const int lane = threadIdx.x & 31, c = 8 * (lane & 15);
    const int64_t first = (int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5)) * kNormRowsPerWarp + (lane >> 4);
    const int64_t rows = p.num_tokens * p.Hv;
    float y[R][8], z[R][8];
    int64_t tok[R], oi[R];
    bool live[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int64_t row = first + 2 * i;
        live[i] = row < rows;
        tok[i] = row / p.Hv;
        const int32_t h = int32_t(row - tok[i] * p.Hv);
        oi[i] = tok[i] * p.o_tok + int64_t(h) * p.o_head + c;
        const int64_t zi = tok[i] * p.z_tok + int64_t(h) * p.z_head + c;
#pragma unroll
        for (int e = 0; e < 8; ++e) y[i][e] = z[i][e] = 0.0f;
        if (!live[i]) continue;
        uint32_t zb[8];
        if constexpr (VEC) {
            if constexpr (RAW_F32) {
                const float4* o4 = reinterpret_cast<const float4*>(static_cast<const float*>(p.out) + oi[i]);
                const float4 a = o4[0], b = o4[1];
                y[i][0] = a.x, y[i][1] = a.y, y[i][2] = a.z, y[i][3] = a.w;
                y[i][4] = b.x, y[i][5] = b.y, y[i][6] = b.z, y[i][7] = b.w;
            } else {
                const uint4 r = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.out) + oi[i]);
                const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    y[i][2 * e] = __uint_as_float(w[e] << 16), y[i][2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
            }
            const uint4 r = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.z) + zi));
            const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) zb[2 * e] = w[e] & 0xffffu, zb[2 * e + 1] = w[e] >> 16;
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                if constexpr (RAW_F32)
                    y[i][e] = static_cast<const float*>(p.out)[oi[i] + e];
                else
                    y[i][e] = __uint_as_float(uint32_t(static_cast<const uint16_t*>(p.out)[oi[i] + e]) << 16);
                zb[e] = load_bits(p.z, p.in_dt, zi + e);
            }
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) z[i][e] = bits_to_float(zb[e], p.in_dt);
    }
    // Which rows are written: looked up while the loads are in flight.
#pragma unroll
    for (int i = 0; i < R; ++i)
        if (live[i]) {
            const int32_t n = first_seq_ending_after(p, tok[i]);
            live[i] = n < p.num_seqs && tok[i] >= seq_begin(p, n) && seq_slot(p, n) >= 0;
        }
    float ir[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        float oo = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) oo = fmaf(y[i][e], y[i][e], oo);
#pragma unroll
        for (int m = 8; m >= 1; m /= 2) oo += __shfl_xor_sync(0xffffffffu, oo, m);  // the half-warp's
        ir[i] = inv_rms(p, oo);
    }
    float w[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) w[e] = __ldg(p.norm_weight + c + e);
#pragma unroll
    for (int i = 0; i < R; ++i) {
        if (!live[i]) continue;
        float r[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) r[e] = y[i][e] * ir[i] * w[e] * silu(z[i][e]);
        if (VEC && RAW_F32) {
            float4* o4 = reinterpret_cast<float4*>(static_cast<float*>(p.out) + oi[i]);
            o4[0] = make_float4(r[0], r[1], r[2], r[3]), o4[1] = make_float4(r[4], r[5], r[6], r[7]);
        } else if (VEC) {
            uint32_t b[8];
#pragma unroll
            for (int e = 0; e < 8; ++e)
                b[e] = p.out_dt == GDN_DTYPE_BF16 ? uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(r[e])))
                                                  : uint32_t(__half_as_ushort(__float2half_rn(r[e])));
            *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.out) + oi[i]) =
                make_uint4(b[0] | (b[1] << 16), b[2] | (b[3] << 16), b[4] | (b[5] << 16), b[6] | (b[7] << 16));
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
cudaError_t launch_fused64(const Params& p, cudaStream_t stream) {
    const bool onorm = (p.flags & GDN_FLAG_OUTPUT_NORM) != 0;
    Params raw = p;
    if (onorm) {
        raw.flags &= ~uint32_t(GDN_FLAG_OUTPUT_NORM);
        raw.out_dt = p.out_dt == GDN_DTYPE_F32 ? GDN_DTYPE_F32 : GDN_DTYPE_BF16;
    }
    fused64::Args a;
    if (const cudaError_t e = fused64::make_args(raw, &a)) return e;
    const Kernel kern = kernel_for(raw.out_dt, (raw.flags & GDN_FLAG_QK_L2NORM) != 0, a.gate_xform != 0);
    if (!kern) return cudaErrorInvalidValue;
    if (const cudaError_t e = fused64::launch_args(kern, a, stream)) return e;
    const int64_t rows = p.num_tokens * p.Hv;
    if (!onorm || rows == 0) return cudaSuccess;
    // 16-byte accesses where every row of out and z starts 16-byte aligned.
    const uint64_t ob = p.out_dt == GDN_DTYPE_F32 ? 4 : 2;
    const bool vec = p.in_dt != GDN_DTYPE_F32 &&
                     (reinterpret_cast<uintptr_t>(p.out) | uint64_t(p.o_tok) * ob | uint64_t(p.o_head) * ob |
                      reinterpret_cast<uintptr_t>(p.z) | uint64_t(p.z_tok) * 2 | uint64_t(p.z_head) * 2) % 16 == 0;
    const dim3 grid(unsigned((rows + 8 * kNormRowsPerWarp - 1) / (8 * kNormRowsPerWarp)));
    void (*const norm)(Params) =
        p.out_dt == GDN_DTYPE_F32 ? (vec ? fused64_norm_kernel<true, true> : fused64_norm_kernel<true, false>)
                                  : (vec ? fused64_norm_kernel<false, true> : fused64_norm_kernel<false, false>);
    return launch_kernel(norm, grid, dim3(256), 0, stream, true, p);
}

cudaError_t set_fused64_attributes(size_t smem_limit) {
    if (size_t(fused64::kRSmem) > smem_limit) return cudaSuccess;
    for (const Kernel* ks : kKernels)
        for (int i = 0; i < 3; ++i)
            if (const cudaError_t e =
                    cudaFuncSetAttribute(ks[i], cudaFuncAttributeMaxDynamicSharedMemorySize, fused64::kRSmem))
                return e;
    return cudaSuccess;
}

}  // namespace gdn::cuda
