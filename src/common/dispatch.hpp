// The one place that decides which path runs, for every backend, and says why.
// Pure: a function of the caps and the shape; no device query.
#pragma once

#include <string>

#include "internal.hpp"

namespace gdn {

// Facts about the kernels that the policy needs. The backends static_assert
// their kernels against these, so the policy cannot drift from the code.
namespace policy {
// CUDA chunk-32 FP32 path (src/cuda/chunk_prep.cu, chunk_scan.cu).
constexpr int32_t kCudaChunk = 32;
// Below this many tokens (longest sequence) auto takes the sequential kernel:
// the two chunked launches cost more than they save. H100, 0.6.2-0.6.3
// (gdn-bench, Hk 16, Hv 48, K = V = 128, FP32, bf16 / f32 inputs; docs/cuda.md
// runs 290 and 293), chunked vs sequential per launch, one sequence: 0.92x /
// 0.91x at 32 tokens, 0.93x at 48, 1.18x / 1.13x at 64, 1.15x / 1.11x at 80,
// 1.35x / 1.28x at 96, 1.51x / 1.41x at 128; batches of 16 sequences: 1.01x /
// 0.95x at 64 tokens each, 1.13x / 1.07x at 96 (64 x 64: 0.99x / 0.94x). 96 is
// the first length that gains on every shape measured (on the H200 of
// 2026-11-29, with older kernels on both paths, chunked had 1.07x / 1.02x at
// 96; the threshold was 128 until 0.6.3; the sequential path is also ~3x
// closer to FP64).
constexpr int64_t kCudaChunkedMinTokens = 96;
// Chunk starts per prep/scan window: the workspace holds one window's T, P
// and γ, so it is bounded by this, whatever the prompt length.
// gdn_workspace_size() sizes for kCudaWindowTokens. A call given more
// workspace takes longer windows (doubling, up to kCudaMaxWindowTokens) while
// their scratch fits it and the prompt still makes kCudaMinWindows of them:
// each seam between windows costs a scan's start and what of the next
// window's prep the scan does not hide, but the first window's prep runs
// alone, and it grows with the window. The bits do not change (a chunk
// belongs to the window its first token is in, wherever windows end).
// H200, Hk 16, Hv 48, bf16 inputs, windows of 2048 / 4096 / 8192 tokens
// (run 63): T = 32768 BF16 1.869 / 1.788 / 1.771 ms, FP16 1.994 / 1.904 /
// 1.892, BF16X3 3.299 / 3.234 / 3.294, FP32 10.71 / 10.59 / 10.56; T = 8192
// BF16 0.486 / 0.505 / 0.505 (two windows of 4096 lose), FP32 2.692 / 2.701.
// A cost model of the first prep against the seams (b·W + s·T/W, b the
// prep's time per token, s a seam's) puts the best window near sqrt(s T / b):
// ~4.5K tokens at 32K for BF16, ~3.6K for BF16X3, i.e. about T / 8
// (docs/perf-notes.md v25).
constexpr int64_t kCudaWindowTokens = 2048;
constexpr int64_t kCudaMaxWindowTokens = 8192;
constexpr int64_t kCudaMinWindows = 8;
// Threads of a prep block (one block per (32-token tile, key head)).
constexpr int32_t kCudaPrepThreads = 256;
// Shared memory of the kernels, in floats, as they lay it out.
constexpr size_t kCudaScanPrepFloats = 2 * 2 * 32 * 36 + 2 * 2 * 32 + 2 * 32;  // T, P (rows of 36), γβ (2 heads), q/k factors
// The prep's rows are FP32 rows of K + 4 (FP32, TF32X3 modes) or four sets of
// 16-bit rows of K + 8 (BF16/FP16: k, q and their remainders); then k·k, q·k,
// each warp's A and the q/k factors.
constexpr size_t cuda_prep_smem_bytes(int32_t K) {
    return 4 * 32 * size_t(K + 8) * 2 + sizeof(float) * (2 * 32 * 33 + 8 * 32 * 32 + 64);
}
// The state's row stride in the scan's shared memory: the tensor-core scan
// pads rows by 4 floats so its fragment loads hit distinct banks.
constexpr int32_t kCudaScanStatePadTc = 4;
constexpr int32_t kCudaScanDPadTc = 8;  // the D, D2 rows' padding (tensor-core scan)
constexpr int32_t cuda_scan_state_ld(int32_t ncol, bool tc) { return ncol + (tc ? kCudaScanStatePadTc : 0); }
constexpr size_t cuda_scan_smem_bytes(int32_t K, int32_t ncol, bool tc = false) {
    return sizeof(float) * (2 * size_t(K) * 68 + 2 * 32 * size_t(ncol) + 2 * kCudaScanPrepFloats +
                            size_t(K) * cuda_scan_state_ld(ncol, tc) + 2 * 64 * size_t(ncol) +
                            2 * 32 * size_t(ncol + (tc ? kCudaScanDPadTc : 0)));
}
// The register-state scan of the BF16/FP16/BF16X3/FP16X3 modes
// (chunk_scan_mma.cuh): three or four stages of the loaded rows (the chunk's
// k and q rows and −W as 16-bit values in rows of K + 8; Tβ and P as 16-bit
// values and remainders in rows of 40; four floats of per-token factors; v in
// its own type, room for 32 rows of ncol + 4 four-byte values), and in the
// split modes some of these rows' remainders (ScanMmaRows).
// What a stage holds beyond BF16's / FP16's rows: `split` −W's remainders
// (BF16X3, FP16X3), `kq` the k/q rows' remainders (BF16X3, whose instance for
// 16-bit inputs also serves f16, not exact in BF16; FP16X3 for f32 inputs
// only, its 16-bit ones being exact: src/cuda/kernels.hpp,
// exact_16bit_input), `second` Tβ's and P's second remainders (BF16X3).
struct ScanMmaRows {
    bool split = false, kq = false, second = false;
};
constexpr ScanMmaRows cuda_scan_mma_rows(gdn_precision_t precision, int32_t input_bytes) {
    const bool bf16x3 = precision == GDN_PRECISION_BF16X3, fp16x3 = precision == GDN_PRECISION_FP16X3;
    return ScanMmaRows{bf16x3 || fp16x3, bf16x3 || (fp16x3 && input_bytes == 4), bf16x3};
}
constexpr size_t cuda_scan_mma_stage_bytes(int32_t K, int32_t ncol, ScanMmaRows rows = {}) {
    return size_t(96 + (rows.split ? 32 : 0) + (rows.kq ? 64 : 0)) * size_t(K + 8) * 2 +
           size_t(4 + (rows.second ? 2 : 0)) * 32 * 40 * 2 + sizeof(float) * (4 * 32 + 32 * size_t(ncol + 4));
}
// With four stages, each compute warp (16 columns) also has 1 KB to turn its
// 16-bit outputs into 16-byte rows (sm_90's stmatrix; chunk_scan_mma.cuh).
constexpr size_t cuda_scan_mma_out_bytes(int32_t ncol) { return size_t(ncol / 16) * 1024; }
constexpr size_t cuda_scan_mma_smem_bytes(int32_t K, int32_t ncol, int32_t stages, ScanMmaRows rows = {}) {
    return size_t(stages) * cuda_scan_mma_stage_bytes(K, ncol, rows) +
           (stages == 4 ? cuda_scan_mma_out_bytes(ncol) : 0);
}
// The path needs three stages (136704 bytes at K = 128, 99840 at K = 64);
// a fourth, where it fits the device's opt-in shared memory per block, gives
// each chunk's loads two chunk steps instead of one (H100/H200: 186368
// bytes at K = 128 of 232448, the output rows included; not the A100's
// 166912, which takes four at K = 64 only, 137216 bytes).
// BF16X3 needs 230400 bytes for three stages at K = 128 (H100/H200 only;
// elsewhere its requests take the TF32X3 scan where that fits), 156672 at
// K = 64; FP16X3 215040 with f32 inputs (three stages), and with 16-bit
// inputs, whose stage holds no k/q remainders, 221184 for four (H100/H200).
constexpr int32_t kCudaScanMmaMinStages = 3;
constexpr int32_t cuda_scan_mma_stages(int32_t K, int32_t ncol, size_t smem_per_block_optin,
                                       ScanMmaRows rows = {}) {
    return cuda_scan_mma_smem_bytes(K, ncol, 4, rows) <= smem_per_block_optin ? 4 : kCudaScanMmaMinStages;
}
// A scan block walks the chunks of a window for `ncol` value columns of one
// key head's value heads; every block walks every chunk (of its lane's
// sequences where the grid has lanes: cuda_scan_lanes below), so the
// grid (Hk * G * V / ncol blocks) must fit one wave of one block per SM (a second
// wave would double the time: the seed's rule, not re-measured here); 0: none
// fits. Measured on the H200 (Hk 16, Hv 48, T = 32K, bf16 inputs,
// 2026-11-30; docs/perf-notes.md "Scan columns"), 48 columns (128 blocks)
// against 64 (96 blocks):
// - the shared-memory scan (FP32, TF32X3; 8 * ncol threads): 11.1 / 10.3 ms
//   against 15.7 / 12.6 ms: it takes the fewest columns that fit, the most
//   parallel grid;
// - the register-state scan (BF16, FP16; a warp per 16 columns): 5.60 / 5.65
//   ms against 4.90 / 5.04 ms: it takes 64, so that a block holds one value
//   head (V is 64 or 128). With fewer columns its grid only grows, so 64 is
//   the one width it is built for.
constexpr int32_t kCudaScanMmaColumns = 64;
inline int32_t cuda_scan_columns(int32_t Hk, int32_t G, int32_t V, int32_t sms, bool reg_state) {
    auto fits = [&](int32_t ncol) {
        return (int64_t(G) * V) % ncol == 0 && int64_t(Hk) * G * V / ncol <= sms;
    };
    if (reg_state) return fits(kCudaScanMmaColumns) ? kCudaScanMmaColumns : 0;
    constexpr int32_t kColumns[] = {32, 48, 64};
    for (int32_t ncol : kColumns)
        if (fits(ncol)) return ncol;
    return 0;
}
// Sequence lanes of a scan of `ncol` columns a block (its grid's third
// dimension): copies of the heads' blocks, as many as one wave of one block
// per SM holds beside the first, at most one per sequence. Lane z walks a
// window's sequences z, z + lanes, ... (the first counted from the one that
// reaches into the window), so that a varlen batch's sequences run side by
// side where few heads leave SMs free, instead of one after another (a
// window's chain of chunk steps is its time there). The heads' blocks alone
// fill the wave at Hk * G * V / ncol > sms / 2 (H_v 48 and 64 at K = V = 128
// on 132 SMs: one lane, the grid as before); a lane holds no state of
// another, so the bits do not depend on the lanes.
inline int32_t cuda_scan_lanes(int32_t Hk, int32_t G, int32_t V, int32_t ncol, int32_t sms,
                               int32_t num_seqs) {
    if (ncol <= 0) return 1;
    const int64_t blocks = int64_t(Hk) * G * V / ncol;
    if (blocks <= 0 || num_seqs <= 1) return 1;
    int64_t lanes = sms / blocks;
    if (lanes > num_seqs) lanes = num_seqs;
    if (lanes > 65535) lanes = 65535;  // gridDim.z
    return lanes < 1 ? 1 : int32_t(lanes);
}
// Time-sliced windows (src/cuda/kernels.hpp, Window) for a varlen batch of
// long sequences of alike lengths. A window of `window` tokens of the batch
// holds few such sequences (one where they are as long as the window), so
// the scan's lanes have little to run side by side and a window's time is
// its sequences' chains one after another. A time-sliced window takes the
// same `slice` tokens of every sequence instead (slice · num_seqs <= window,
// a multiple of the chunk), ceil(max_seqlen / slice) of them in turn.
//
// Whether that is faster depends on the prep as much as on the chain: a
// window takes about max(its scan's chain, its prep on the SMs the scan
// leaves free), and where the scan's lanes leave fewer than a quarter of the
// SMs, the prep runs alone between the scans instead. The model below, in
// chunk steps of the scan (BF16 ~1.4 µs; FP32 ~8.6 µs), with a prep block
// (32 tokens of a key head, two a SM) and a window's start costing
// CudaScanCosts' steps, fitted to the H200's times of run 110
// (docs/perf-notes.md v39; H_k 4, H_v 8 and H_k 16, H_v 32):
// - windows of the batch's tokens: ceil(T / window) windows, each of
//   ceil(window / 32) / min(lanes, sequences a window holds) steps;
// - time-sliced: ceil(max_seqlen / slice) windows of ceil(num_seqs / lanes)
//   · slice / 32 steps, every lane busy;
// and takes the time-sliced windows where they save at least a fifth. With
// one lane (H_v 48 and 64 at K = V = 128 on 132 SMs) they never do, nor
// where max_seqlen is left at num_tokens; a sequence longer than max_seqlen
// is the caller's bug (gdn.h; GDN_FLAG_VALIDATE checks it). Returns the
// slice, or 0 for windows of the batch's tokens. The bits do not depend on
// it (a chunk's arithmetic is the same in either window). Run 115, H_k 4,
// H_v 8, BF16 / FP32: 8 x 4096 1.42 -> 0.56 ms / 8.87 -> 2.70 ms; 16 x 1024
// 0.41 -> 0.31 / 2.29 -> 1.50; the shapes the model leaves alone as before.
struct CudaScanCosts {
    double prep_block_steps;  // a prep block's time, in scan steps
    double seam_steps;        // a window's start, in scan steps
};
// The register-state scan (BF16, FP16, BF16X3) and the shared-memory one
// (FP32, TF32X3), whose steps are ~6x longer.
constexpr CudaScanCosts kCudaRegStateCosts{9.0, 8.0};
constexpr CudaScanCosts kCudaSmemScanCosts{1.5, 2.0};
// One window's time in scan steps: `chain` steps of a scan on `scan_sms`
// SMs beside `prep_blocks` blocks of the next window's prep.
inline double cuda_window_steps(double chain, int64_t prep_blocks, int64_t scan_sms, int32_t sms,
                                const CudaScanCosts& c) {
    const int64_t free_sms = sms - scan_sms;
    if (4 * free_sms < sms)  // the prep runs alone
        return chain + double(prep_blocks) * c.prep_block_steps / (2.0 * sms) + c.seam_steps;
    const double prep = double(prep_blocks) * c.prep_block_steps / (2.0 * double(free_sms));
    return (chain > prep ? chain : prep) + c.seam_steps;
}
// `blocks`: the scan's blocks of one lane (Hk · G · V / ncol); `lanes`:
// policy::cuda_scan_lanes.
inline int64_t cuda_scan_slice(int64_t window, int32_t num_seqs, int64_t max_seqlen,
                               int64_t num_tokens, int32_t Hk, int64_t blocks, int32_t lanes,
                               int32_t sms, const CudaScanCosts& costs) {
    if (num_seqs < 2 || lanes < 2 || window <= 0 || max_seqlen <= 0 || num_tokens <= 0 ||
        blocks <= 0 || sms <= 0 || Hk <= 0)
        return 0;
    const int64_t slice = window / num_seqs / kCudaChunk * kCudaChunk;
    if (slice < kCudaChunk) return 0;
    auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
    const int64_t w = window < num_tokens ? window : num_tokens;
    int64_t per_window = w * num_seqs / num_tokens;  // sequences a window holds
    if (per_window < 1) per_window = 1;
    const int64_t used = per_window < lanes ? per_window : lanes;
    const double token_total =
        double(ceil_div(num_tokens, w)) *
        cuda_window_steps(double(ceil_div(ceil_div(w, kCudaChunk), used)),
                          ceil_div(w, kCudaChunk) * Hk, blocks * used, sms, costs);
    const double sliced_total =
        double(ceil_div(max_seqlen, slice)) *
        cuda_window_steps(double(ceil_div(num_seqs, lanes) * (slice / kCudaChunk)),
                          int64_t(num_seqs) * (slice / kCudaChunk) * Hk, blocks * lanes, sms, costs);
    return 5.0 * sliced_total <= 4.0 * token_total ? slice : 0;
}
// The slice the CUDA backend takes for a scan of `ncol` columns a block
// (reg_state: the register-state scan's costs), windows of `window` tokens
// (at most the prompt rounded up to a chunk) and its sequence lanes; 0 where
// the windows overlap in one scratch half (`two_halves` false: a prompt of
// one window on sm_90, where the next window's prep would write what the
// scan reads).
inline int64_t cuda_scan_slice_for(int64_t window, bool two_halves, int32_t num_seqs,
                                   int64_t max_seqlen, int64_t num_tokens, int32_t Hk, int32_t G,
                                   int32_t V, int32_t ncol, int32_t sms, bool reg_state) {
    if (!two_halves || ncol <= 0) return 0;
    return cuda_scan_slice(window, num_seqs, max_seqlen, num_tokens, Hk, int64_t(Hk) * G * V / ncol,
                           cuda_scan_lanes(Hk, G, V, ncol, sms, num_seqs), sms,
                           reg_state ? kCudaRegStateCosts : kCudaSmemScanCosts);
}
// HIP gfx11 WMMA path (src/hip/kernels.hpp): 16-token chunks, K = V = 128.
constexpr int32_t kHipChunk = 16;
constexpr int32_t kHipChunkHeadDim = 128;
// Below 64 tokens (longest sequence) auto takes the sequential kernel (seed:
// gfx1151, where the chunked path was 1.8x faster at 64 tokens; untested on
// other gfx11 parts).
constexpr int64_t kHipChunkedMinTokens = 64;
// The chunked kernels load q, k, v and z rows as 16-byte vectors: every row
// (token and head strides) must start 16-byte aligned, so strides are a
// multiple of 8 elements and base pointers 16-byte aligned; and 15 token
// strides + 128 must fit the kernels' 32-bit per-lane offsets.
constexpr int64_t kHipRowStrideMultiple = 8;
constexpr int64_t kHipMaxTokenStride = int64_t(1) << 27;
// Super-blocks: the prep's output for up to 128 chunks (2048 tokens) of every
// sequence, at most 1024 chunks of all sequences together (at least 8 per
// sequence): the workspace does not grow with the prompt's length.
constexpr int32_t kHipSuperBlockChunks = 128;
constexpr int32_t kHipSuperBlockChunkBudget = 1024;
constexpr int32_t kHipMinSuperBlockChunks = 8;
// The CUDA fused BF16 path (src/cuda/fused64.cu, sm_90a code): the whole
// recurrence in one kernel with chunks of 64, a cluster of two CTAs of 512
// threads per (sequence, value head), no scratch. Taken for BF16 precision
// where cuda_fused64_problem() accepts the problem; the C = 32 two-kernel
// path serves the rest. H200 (docs/perf-notes.md v47, run 166; gdn-bench,
// bf16 q/k/v, f32 outputs, Hk 16, Hv 48; the two-kernel path from the build
// before): T = 32768 1.53 ms against 1.83, 65536 3.02 / 3.62, 8 x 4096 1.31
// / 1.88, 16 x 1024 0.70 / 1.00, T = 2048 0.111 / 0.137, T = 512 0.039 /
// 0.048; at Hv 64 32K 1.55 / 2.27, 8 x 4096 1.70 / 2.34: faster at every
// shape measured. With the q/k L2 norm (v48, run 170) 32K 1.64 ms against
// the two-kernel path's 1.90, 8 x 4096 1.44 / 1.96. With the output norm
// (a kernel of its own after the fused one, v64 and v66, run 212; bf16 out)
// 32K 1.82 against the two-kernel path's 3.68 (v62), 8 x 4096 1.51 / 3.79.
constexpr int32_t kCudaFusedChunk = 64;
constexpr int32_t kCudaFusedHeadDim = 128;            // K = V = 128 only
constexpr size_t kCudaFusedSmemBytes = 225920;        // the kernel's dynamic shared memory
constexpr int32_t kCudaFusedMaxSeqs = 65535;          // the grid's y dimension
constexpr int64_t kCudaFusedRowAlign = 16;            // q/k/v pointers and strides (bytes): TMA
constexpr int64_t kCudaFusedMaxStrideBytes = int64_t(1) << 39;  // TMA's global strides
// CPU chunked paths. Auto's length rule, for a call's longest sequence and,
// inside a chunked call, for each sequence (docs/cpu.md, measured 2026-12-04
// on 2 cores, AVX-512F build). A call alone: at K = V = 128 the FP32 chunked
// path is even with the sequential one at 16 tokens and 1.4-1.7x faster from
// 20 (H_k 16, H_v 48: 1.35 / 1.37 ms at 16, 1.03-1.16 / 1.48-1.58 at 20); at
// K = V = 64 (H_k 4, H_v 8) 12% slower at 16 and faster from 24 (0.066-0.069
// against 0.087-0.092 ms); at K = V = 32 (H_k 2, H_v 4) even or slower up to
// ~48 tokens, faster at 63-64. A short sequence beside a 256-token one: the
// sequential kernel is faster up to ~10 tokens at K = V = 128 and up to ~16
// at 64.
constexpr int32_t kCpuChunk = 32;
constexpr int32_t kCpuLowpChunk = 16;
constexpr int64_t kCpuChunkedMinTokensHd128 = 16;      // K and V >= 128
constexpr int64_t kCpuChunkedMinTokensHd64 = 24;       // K and V >= 64
constexpr int64_t kCpuChunkedMinTokensSmallHeads = 64;  // below
}  // namespace policy

// Why the CUDA fused BF16 path cannot take this problem ("" if it can):
// precision BF16, sm_90 with the library's sm_90a code (GDN_FEATURE_WGMMA)
// and its shared memory, bf16 q/k/v (g and β in any gate dtype, the q/k L2
// norm, the raw gate, β from logits and the output norm taken), K = V = 128;
// with tensors, q/k/v 16-byte aligned with strides of 16-byte multiples (TMA).
std::string cuda_fused64_problem(const gdn_caps_t& caps, const Shape& s, const Tensors* t);

// How many clusters of four fused CTAs CUDA device `device` runs at once, as its
// one-time setup found (cudaOccupancyMaxActiveClusters; the SMs of a GPC host
// whole clusters only): 0 before that setup, on a device without the fused path
// and in a build without it. The fused path takes clusters of four where
// num_seqs x Hv is at most this (PathChoice::cluster).
int32_t cuda_fused_cluster4_fit(int32_t device);

// `tensors` may be null (gdn_select_path without tensors): then the policy
// assumes tensors every path accepts. On failure sets the last error.
gdn_status_t choose_path(const gdn_caps_t& caps, const Shape& shape, const Tensors* tensors,
                         PathChoice* out);

}  // namespace gdn
