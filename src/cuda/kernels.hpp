// The interface between the CUDA backend's host code (backend.cpp, compiled
// by the C++ compiler) and its kernels (*.cu). Params is the validated
// problem flattened into one POD that every kernel takes by value.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/internal.hpp"

namespace gdn::cuda {

struct Params {
    // Shape.
    int32_t num_seqs;
    int64_t num_tokens;
    int64_t equal_len;  // num_tokens / num_seqs (used when cu_seqlens is null)
    int32_t Hk, Hv, G;  // key heads, value heads, Hv / Hk
    int32_t K, V;
    int32_t grouped;    // 1: kh = h / G; 0: kh = h % Hk
    int32_t state_kv;   // 1: state[k][v]; 0: state[v][k]
    gdn_dtype_t in_dt, gate_dt, out_dt;
    uint32_t flags;
    float scale, l2norm_eps, norm_eps;
    // Tensors (element strides).
    const void* q;    int64_t q_tok, q_head;
    const void* k;    int64_t k_tok, k_head;
    const void* v;    int64_t v_tok, v_head;
    const void* g;    int64_t g_tok, g_head;
    const void* beta; int64_t b_tok, b_head;
    void* out;        int64_t o_tok, o_head;
    const void* z;    int64_t z_tok, z_head;
    float* state;     int64_t slot_stride;
    int32_t num_slots;  // slots in the pool (the decode's L2 hint stays inside it)
    const int32_t* cu_seqlens;
    const int32_t* state_indices;
    const uint8_t* start_from_zero;
    const float* A_log;
    const float* dt_bias;
    const float* norm_weight;
    const int32_t* token_state_indices;  // GDN_FLAG_TOKEN_STATES: per token, the slot of its state
};

Params make_params(const Shape& s, const Tensors& t);

// Scratch of the chunked path for one window of `rows` token positions
// (carved from the caller's workspace by backend.cpp).
struct ChunkScratch {
    // The FP32/TF32X3 modes (null in the others):
    float* TP;      // [Hv][rows][64]: row t of T = (I + A)^-1 (32 floats), then row t of P
    float* gb;      // [Hv][rows][2]: γ_t (running sum of g inside the chunk), β_t
    float* qkf;     // [Hk][rows][2]: the factors q̂ = qf·q and k̂ = kf·k
    float* O;       // [rows][Hv][V]: raw outputs before the output norm (OUTPUT_NORM only)
    // The register-state scan's operands, BF16/FP16/BF16X3/FP16X3 modes (null
    // in the others), as 16-bit values of the mode's type (kq16_fp16):
    uint16_t* kq16;  // [Hk][rows][2][K]: the raw k and q rows
    uint16_t* W16;   // [Hv][rows][K]: −W = −T diag(β e^γ kf) k
    // BF16X3 and FP16X3 only: the remainders of W16, and of kq16 where the
    // inputs are not exact operands (else null: exact_16bit_input, below).
    uint16_t* W16lo;   // [Hv][rows][K]
    uint16_t* kq16lo;  // [Hk][rows][2][K]
    uint16_t* TP16;  // [Hv][rows][kTp16Row]: Tβ = T diag(β) and P, each a value and its
                     // remainder (BF16X3: and a second remainder)
    float* F4;       // [Hv][rows][4]: e^{γ_last−γ_t} kf_t, e^{γ_t} qf_t, e^{γ_last}, 0
                     // (FP16X3: e^{γ_last−γ_t} kf_t, e^{γ_t} kPScale, e^{γ_last},
                     // qf_t / (kValueScale kPScale); its TP16 and W16 at
                     // kTbScale)
    int32_t kq16_fp16;  // 1: FP16 bits; 0: BF16 bits
    int64_t rows;   // window + one chunk
    // GDN_FLAG_TOKEN_STATES (with GDN_FLAG_BLOCK_STATES: the FP32 and TF32X3
    // scans) over more than one window: the state of the sequence that
    // crosses into this window (carry_in) and out of it (carry_out), [Hv][K·V]
    // in the pool's layout each, since a sequence's own slot is only read;
    // the host alternates two such arrays by window (null otherwise).
    const float* carry_in;
    float* carry_out;
};

// The chunks one prep/scan/output-norm launch works on (backend.cpp's window
// loop). A window of the batch's tokens (slice == 0): the chunks whose first
// token is in [begin, end), rows numbered from begin (row = token − begin).
// A time-sliced window (slice > 0, a multiple of the chunk; end ==
// kNoTokenBound): the chunks whose first token lies at offsets [begin, begin
// + slice) from its sequence's first token, in every sequence, sequence n's
// rows from n · slice (row = n · slice + offset − begin); the host takes it
// for a batch of long sequences of alike lengths, so that the scan's
// sequence lanes have sequences to run side by side (policy::cuda_scan_slice).
struct Window {
    int64_t begin, end;
    int64_t slice;
};
inline constexpr int64_t kNoTokenBound = INT64_MAX;

// The sequential kernel: k_tile in {64, 128} (>= K), block_cols in {32, 64,
// 128} (V columns per block; >= V with OUTPUT_NORM), tile_tokens in {1, 16}.
cudaError_t launch_sequential(const Params& p, int k_tile, int block_cols, int tile_tokens,
                              cudaStream_t stream);

// The decode step (max_seqlen == 1, K in {64, 128}; a [K][V] state of any V
// and slot stride, V <= 128 with the output norm; a [V][K] state where
// decode_takes_vk): a persistent grid walking (sequence, value head, column
// block) items with the next item's loads in flight, a block an item
// (decode_stream_kernel) or, for [K][V] batches of a few to a few dozen
// sequences, a warp an item (decode_warp_kernel), for larger ones at
// K = V = 128 on sm_90 a head an item by bulk copies (decode_tma_kernel); or
// one block per row with
// the output norm (decode_kernel, [K][V]). Gives the sequential kernel's bits
// (same sums in the same order).
cudaError_t launch_decode(const Params& p, cudaStream_t stream);
// Whether the decode step takes a [V][K] state: no output norm, the pool and
// its slot stride 16-byte aligned.
bool decode_takes_vk(const Params& p);

// The chunked path, one window (chunk starts; in a window of the batch's
// tokens a chunk may run up to 31 tokens past win.end). `overlap`
// (sm_90): launched as a programmatic dependent of the kernel ahead in the
// stream (device_common.cuh), which backend.cpp's window loop sets for every
// kernel of a call but its first: the next window's prep (into the other
// half of a two-window scratch) runs beside this window's scan.
cudaError_t launch_chunk_prep(const Params& p, const ChunkScratch& w, const Window& win,
                              cudaStream_t stream, bool overlap);
// How the scan computes its products. FP32 and TF32X3 (chunk_scan.cuh): the
// two state products ([S0ᵀk̂; S0ᵀq̂] and the update Σ k̂ D2ᵀ) in that
// arithmetic, the small in-chunk products in FP32. BF16, FP16 and BF16X3
// (chunk_scan_mma.cuh), and FP16X3: every product of the chunk step on those
// operands.
enum class ScanMode : int {
    kFp32 = 0,    // FP32 FMAs (GDN_PATH_CHUNKED_FP32)
    kBf16 = 1,    // mma.sync m16n8k16, BF16 operands, FP32 accumulation and state
    kFp16 = 2,    // mma.sync m16n8k16, FP16 operands, FP32 accumulation and state
    kTf32x3 = 3,  // mma.sync m16n8k8, operands split into TF32 hi + lo, three products
    kBf16x3 = 4,  // mma.sync m16n8k16, every operand a BF16 value + one BF16 remainder
                  // (Tβ, P, D, D2, v: two), the term pairs i + j <= 2; FP32 accumulation
                  // and state
    kFp16x3 = 5,  // BF16X3's scan on FP16 terms: a value and unscaled FP16 remainders
                  // (FP16's 11 bits a term: FP32-class products within FP16's range;
                  // docs/perf-notes.md v100)
};
// The modes whose 16-bit operands are BF16, and those of the register-state
// scan (variables, not functions: device code reads them too).
template <ScanMode M>
inline constexpr bool kBf16Operands = M == ScanMode::kBf16 || M == ScanMode::kBf16x3;
// The split modes (every operand a value and remainders) are BF16X3 and FP16X3.
template <ScanMode M>
inline constexpr bool kSplitOperands = M == ScanMode::kBf16x3 || M == ScanMode::kFp16x3;
constexpr bool is_split_mode(ScanMode m) { return m == ScanMode::kBf16x3 || m == ScanMode::kFp16x3; }
template <ScanMode M>
inline constexpr bool kRegStateScan =
    M == ScanMode::kBf16 || M == ScanMode::kFp16 || kSplitOperands<M>;
// The inputs whose k, q and v are the register-state scan's 16-bit operands
// with no remainder: the mode's own 16-bit type, and bf16 in the FP16 modes
// (FP16, FP16X3). A bf16 value times a power of two is an FP16 value where
// FP16 holds its 8 significant bits (2^-17 <= |x| <= 65504); below 2^-17 its
// FP16 remainder is at most half of FP16's subnormal step 2^-24 and rounds to
// zero; above 65504 it overflows FP16 with or without one (tests/
// test_lowp_emulation.cpp checks every bf16 value; docs/perf-notes.md v107).
// The prep writes no k/q remainders for them (w.kq16lo stays null) and the
// scan takes no product with a remainder of theirs. Host and device code.
__host__ __device__ constexpr bool exact_16bit_input(ScanMode m, gdn_dtype_t in) {
    return m == ScanMode::kBf16 || m == ScanMode::kBf16x3 ? in == GDN_DTYPE_BF16
                                                           : in == GDN_DTYPE_BF16 || in == GDN_DTYPE_F16;
}
// FP16X3 keeps q's factor qf (the q/k L2 norm's scale / ||q_t||, or the
// scale) out of P, whose entries it would otherwise shrink to ~|scale| / √K
// and below: an unscaled FP16 remainder of such an entry is subnormal, an
// absolute 2^-25 that the output norm's division by a row's RMS amplifies
// (docs/perf-notes.md v101). P = e^{γ_t−γ_i} q_t·k̂_i instead, F4 = (e^{γ_L−γ}
// kf, e^γ, e^{γ_L}, qf), and the scan multiplies each output by qf last (one
// FP32 rounding; since 0.6.2 with the scales below in F4's factors).
template <ScanMode M>
inline constexpr bool kFp16x3QfLate = M == ScanMode::kFp16x3;
// FP16X3's operands at power-of-two scales, which keep small entries' FP16
// remainders out of FP16's subnormal range (docs/perf-notes.md v103; 1 in
// the other modes): the scan holds the state and v at kValueScale (and so D,
// D2 and the outputs before their last factor), Tβ and −W come from the prep
// at kTbScale (the scan divides D by it), and P at kPScale (e^γ's factor in
// F4 times it, qf's divided by kValueScale · kPScale). Powers of two, so that
// scaling and unscaling in FP32 are exact. They narrow FP16X3's range by as
// much: |state|, |v| and |D| below 65504 / 64 = 1023 (above, the operands
// overflow: the results are not finite), |Tβ|, |T diag(β e^γ kf)| and |P|
// below 4095.
template <ScanMode M>
inline constexpr float kValueScale = M == ScanMode::kFp16x3 ? 64.0f : 1.0f;
template <ScanMode M>
inline constexpr float kTbScale = M == ScanMode::kFp16x3 ? 16.0f : 1.0f;
template <ScanMode M>
inline constexpr float kPScale = M == ScanMode::kFp16x3 ? 16.0f : 1.0f;
// Whether a split mode's operands that set its error (Tβ, P, Dᵀ, D2ᵀ, v) take
// a second remainder (three terms, the term pairs i + j <= 2 of a product) or
// not (two terms, the pairs i + j <= 1). BF16X3 needs it (BF16's 8 bits a
// term); FP16X3's two terms hold ~22 bits, and without the third it is 6-13%
// faster at the same error class (docs/perf-notes.md v104).
constexpr bool second_remainders(ScanMode m) { return m == ScanMode::kBf16x3; }
template <ScanMode M>
inline constexpr bool kSecondRemainders = second_remainders(M);
// 16-bit elements of a TP16 row: Tβ, its remainder, P, its remainder (32
// each); the modes with second remainders add Tβ's and P's.
constexpr int tp16_row(ScanMode m) { return second_remainders(m) ? 192 : 128; }
template <ScanMode M>
inline constexpr int kTp16Row = tp16_row(M);
ScanMode scan_mode_for(gdn_path_t path, gdn_precision_t precision);

// `stages`: the register-state scan's stages of loaded rows (BF16, FP16:
// policy::cuda_scan_mma_stages, 3 or 4); the other modes ignore it.
// `lanes`: the scan's sequence lanes (policy::cuda_scan_lanes, >= 1).
cudaError_t launch_chunk_scan(const Params& p, const ChunkScratch& w, const Window& win, int ncol,
                              int stages, int lanes, ScanMode mode, bool zero_empty_sequences,
                              cudaStream_t stream, bool overlap);
cudaError_t launch_chunk_epilogue(const Params& p, const ChunkScratch& w, const Window& win,
                                  cudaStream_t stream, bool overlap);

// The fused BF16 path (fused64.cu; sm_90a code, docs/perf-notes.md v40-v44): the
// whole chunked recurrence in one kernel with chunks of C = 64, no scratch. A
// cluster of two CTAs per (sequence, value head), each CTA 64 of the 128 value
// columns; each CTA prepares every other chunk for both. quad (the dispatch's
// PathChoice::cluster 4): clusters of four, two such pairs, each CTA preparing
// every fourth chunk (docs/perf-notes.md v98), the same bits. For the problems
// policy::cuda_fused64_problem() accepts (BF16 q/k/v with TMA-able rows,
// K = V = 128, f32 g and β, none of the input/output transforms). Gives the
// same bits for any strides, slot layout or batch composition. order (non-null:
// 13 num_seqs bytes of the caller's workspace, with cu_seqlens): the grid's rows
// go longest sequence first, ordered by a one-block kernel launched ahead of it
// (for a batch whose pairs take several waves; the same bits). Built only
// where the build has sm_90a code (GDN_CUDA_FUSED64, src/cuda/CMakeLists.txt).
cudaError_t launch_fused64(const Params& p, bool quad, int32_t* order, cudaStream_t stream);
cudaError_t set_fused64_attributes(size_t smem_limit);
// How many pairs of fused CTAs device `device` runs at once (its one-time setup's
// cudaOccupancyMaxActiveClusters); 0 before it.
int32_t fused64_pair_fit(int device);

// Raise the dynamic shared-memory limit of the chunked kernels on the current
// device (those that fit `smem_limit`, the device's opt-in maximum). Called
// once per device.
cudaError_t set_chunk_prep_attributes(size_t smem_limit);
// The same for the decode's warp kernel (sequential.cu).
cudaError_t set_decode_attributes(size_t smem_limit);
cudaError_t set_chunk_scan_attributes(size_t smem_limit);

}  // namespace gdn::cuda
