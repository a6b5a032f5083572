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
// output dtype.
using Kernel = void (*)(fused64::Args);
const Kernel kKernels[] = {
    fused64::fused64_kernel<false, true, GDN_DTYPE_F32>,
    fused64::fused64_kernel<false, true, GDN_DTYPE_BF16>,
    fused64::fused64_kernel<false, true, GDN_DTYPE_F16>,
};
static_assert(size_t(fused64::kRSmem) == policy::kCudaFusedSmemBytes,
              "the dispatch's figure of the fused kernel's shared memory");

Kernel kernel_for(gdn_dtype_t out) {
    switch (out) {
        case GDN_DTYPE_F32: return kKernels[0];
        case GDN_DTYPE_BF16: return kKernels[1];
        case GDN_DTYPE_F16: return kKernels[2];
        default: return nullptr;
    }
}

}  // namespace

cudaError_t launch_fused64(const Params& p, cudaStream_t stream) {
    const Kernel kern = kernel_for(p.out_dt);
    if (!kern) return cudaErrorInvalidValue;
    fused64::Args a;
    if (const cudaError_t e = fused64::make_args(p, &a)) return e;
    return fused64::launch_args(kern, a, stream);
}

cudaError_t set_fused64_attributes(size_t smem_limit) {
    if (size_t(fused64::kRSmem) > smem_limit) return cudaSuccess;
    for (Kernel k : kKernels)
        if (const cudaError_t e =
                cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, fused64::kRSmem))
            return e;
    return cudaSuccess;
}

}  // namespace gdn::cuda
