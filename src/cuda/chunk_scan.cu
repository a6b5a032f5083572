// Launch code of the chunked path's scan (the kernels are in chunk_scan.cuh and
// chunk_scan_mma.cuh,
// compiled per mode and input element size: chunk_scan_in2.cu, chunk_scan_in4.cu,
// chunk_scan_bf16.cu, chunk_scan_fp16.cu, chunk_scan_bf16x3.cu, chunk_scan_fp16x3.cu, chunk_scan_tf32x3.cu)
// and the output-norm pass that follows it when GDN_FLAG_OUTPUT_NORM is set.
#include "cuda/chunk_scan.cuh"
#include "cuda/chunk_scan_mma.cuh"

namespace gdn::cuda {

namespace {

// The gated RMSNorm of the chunked path: the scan left the raw outputs of the
// window's tokens in w.O; one warp per (token, value head).
__global__ void __launch_bounds__(256) chunk_epilogue_kernel(const Params p, const ChunkScratch w,
                                                             const Window win) {
    // The next window's scan may be launched once every block of this grid
    // has started (as the prep does, chunk_prep.cu); it waits for this grid.
    allow_dependent_launch();
    grid_dependency_wait();  // the scan's raw outputs (backend.cpp: the kernel ahead is the next prep)
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t row = int64_t(blockIdx.x) * 8 + warp;
    const int32_t h = blockIdx.y;
    if (row >= w.rows) return;
    int32_t n;
    int64_t tok;
    if (win.slice) {  // row n · slice + j: offset begin + j of sequence n
        n = int32_t(row / win.slice);
        if (n >= p.num_seqs) return;
        tok = seq_begin(p, n) + win.begin + row % win.slice;
        if (tok >= seq_end(p, n) || seq_slot(p, n) < 0) return;
    } else {
        tok = win.begin + row;
        if (tok >= p.num_tokens) return;
        n = first_seq_ending_after(p, tok);
        if (n >= p.num_seqs || seq_slot(p, n) < 0) return;
        const int64_t bos = seq_begin(p, n);
        const int64_t cs = bos + (tok - bos) / scan::kChunk * scan::kChunk;
        if (cs < win.begin || cs >= win.end) return;  // its chunk belongs to another window
    }
    norm_out_row(p, w.O + (row * p.Hv + h) * p.V, tok, h, lane);
}

}  // namespace

ScanMode scan_mode_for(gdn_path_t path, gdn_precision_t precision) {
    if (path != GDN_PATH_CHUNKED_TC) return ScanMode::kFp32;
    switch (precision) {
        case GDN_PRECISION_BF16: return ScanMode::kBf16;
        case GDN_PRECISION_BF16X3: return ScanMode::kBf16x3;
        case GDN_PRECISION_FP16X3: return ScanMode::kFp16x3;
        case GDN_PRECISION_FP16: return ScanMode::kFp16;
        default: return ScanMode::kTf32x3;
    }
}

namespace {
template <ScanMode MODE>
cudaError_t launch_mode(const Params& p, const ChunkScratch& w, const Window& win, int ncol,
                        int stages, int lanes, bool zero_empty, cudaStream_t stream, bool overlap) {
    if constexpr (kRegStateScan<MODE>) {
        // The register-state scan, on the 16-bit k/q rows the prep wrote.
        if (!w.kq16 || (kSplitOperands<MODE> && !w.W16lo)) return cudaErrorInvalidValue;
        if (p.in_dt == GDN_DTYPE_F32)
            return scan_mma::launch_in<4, MODE>(p, w, win, ncol, stages, lanes, zero_empty,
                                                 stream, overlap);
        return scan_mma::launch_in<2, MODE>(p, w, win, ncol, stages, lanes, zero_empty,
                                             stream, overlap);
    } else {
        (void)stages;  // one layout
        if (p.in_dt == GDN_DTYPE_F32)
            return scan::launch_in<4, MODE>(p, w, win, ncol, lanes, zero_empty, stream, overlap);
        return scan::launch_in<2, MODE>(p, w, win, ncol, lanes, zero_empty, stream, overlap);
    }
}
}  // namespace

cudaError_t launch_chunk_scan(const Params& p, const ChunkScratch& w, const Window& win, int ncol,
                              int stages, int lanes, ScanMode mode, bool zero_empty_sequences,
                              cudaStream_t stream, bool overlap) {
    switch (mode) {
        case ScanMode::kFp32:
            return launch_mode<ScanMode::kFp32>(p, w, win, ncol, stages, lanes, zero_empty_sequences,
                                                stream, overlap);
        case ScanMode::kBf16:
            return launch_mode<ScanMode::kBf16>(p, w, win, ncol, stages, lanes, zero_empty_sequences,
                                                stream, overlap);
        case ScanMode::kFp16:
            return launch_mode<ScanMode::kFp16>(p, w, win, ncol, stages, lanes, zero_empty_sequences,
                                                stream, overlap);
        case ScanMode::kBf16x3:
            return launch_mode<ScanMode::kBf16x3>(p, w, win, ncol, stages, lanes, zero_empty_sequences,
                                                stream, overlap);
        case ScanMode::kFp16x3:
            return launch_mode<ScanMode::kFp16x3>(p, w, win, ncol, stages, lanes, zero_empty_sequences,
                                                stream, overlap);
        case ScanMode::kTf32x3:
            return launch_mode<ScanMode::kTf32x3>(p, w, win, ncol, stages, lanes, zero_empty_sequences,
                                                stream, overlap);
    }
    return cudaErrorInvalidValue;
}

cudaError_t launch_chunk_epilogue(const Params& p, const ChunkScratch& w, const Window& win,
                                  cudaStream_t stream, bool overlap) {
    const dim3 grid(unsigned((w.rows + 7) / 8), unsigned(p.Hv));
    return launch_kernel(chunk_epilogue_kernel, grid, dim3(256), 0, stream, overlap, p, w, win);
}

cudaError_t set_chunk_scan_attributes(size_t smem_limit) {
    using F = cudaError_t (*)(size_t);
    const F setters[] = {
        scan::set_attributes_in<2, ScanMode::kFp32>,   scan::set_attributes_in<4, ScanMode::kFp32>,
        scan::set_attributes_in<2, ScanMode::kTf32x3>, scan::set_attributes_in<4, ScanMode::kTf32x3>,
        scan_mma::set_attributes_in<2, ScanMode::kBf16>, scan_mma::set_attributes_in<4, ScanMode::kBf16>,
        scan_mma::set_attributes_in<2, ScanMode::kFp16>, scan_mma::set_attributes_in<4, ScanMode::kFp16>,
        scan_mma::set_attributes_in<2, ScanMode::kBf16x3>, scan_mma::set_attributes_in<4, ScanMode::kBf16x3>,
        scan_mma::set_attributes_in<2, ScanMode::kFp16x3>, scan_mma::set_attributes_in<4, ScanMode::kFp16x3>,
    };
    for (F set : setters)
        if (const cudaError_t e = set(smem_limit)) return e;
    return cudaSuccess;
}

}  // namespace gdn::cuda
