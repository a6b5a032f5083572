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
// from logits), without and with the output norm (ONORM).
using Kernel = void (*)(fused64::Args);
template <bool NORM, bool GX, bool ONORM = false>
constexpr Kernel kFor[3] = {
    fused64::fused64_kernel<false, true, GDN_DTYPE_F32, NORM, GX, ONORM>,
    fused64::fused64_kernel<false, true, GDN_DTYPE_BF16, NORM, GX, ONORM>,
    fused64::fused64_kernel<false, true, GDN_DTYPE_F16, NORM, GX, ONORM>,
};
// (NORM and ONORM always with GX, the form measured on the H200, perf-notes
// v48; an earlier form's NORM instance of the cp.async g/β path spilled
// inside A's loop. make_args sets gate_xform with either norm.)
const Kernel* const kKernels[5] = {kFor<false, false>, kFor<false, true>, kFor<true, true>,
                                   kFor<false, true, true>, kFor<true, true, true>};
static_assert(size_t(fused64::kRSmem) == policy::kCudaFusedSmemBytes,
              "the dispatch's figure of the fused kernel's shared memory");

Kernel kernel_for(gdn_dtype_t out, bool norm, bool gx, bool onorm) {
    const Kernel* k = kKernels[onorm ? 3 + int(norm) : norm ? 2 : int(gx)];
    switch (out) {
        case GDN_DTYPE_F32: return k[0];
        case GDN_DTYPE_BF16: return k[1];
        case GDN_DTYPE_F16: return k[2];
        default: return nullptr;
    }
}

}  // namespace

cudaError_t launch_fused64(const Params& p, cudaStream_t stream) {
    fused64::Args a;
    if (const cudaError_t e = fused64::make_args(p, &a)) return e;
    const Kernel kern = kernel_for(p.out_dt, (p.flags & GDN_FLAG_QK_L2NORM) != 0, a.gate_xform != 0,
                                   (p.flags & GDN_FLAG_OUTPUT_NORM) != 0);
    if (!kern) return cudaErrorInvalidValue;
    return fused64::launch_args(kern, a, stream);
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
