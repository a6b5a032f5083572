// The register-state scan of the BF16/FP16 modes (GDN_PATH_CHUNKED_TC). The
// chunk step of chunk_scan.cuh (T, P, γ, β from the prep),
//     D   = T · β ⊙ (v − e^{γ} ⊙ S0ᵀk̂)
//     o_t = e^{γ_t} S0ᵀq̂_t + Σ_{i<=t} P[t][i] D_i
//     S_C = e^{γ_{L−1}} S0 + Σ_i e^{γ_{L−1}−γ_i} k̂_i D_iᵀ
// in its WY form, with T moved onto the chunk's own rows, which do not
// depend on the state:
//     Ũ = T diag(β) v,   W = T diag(β e^{γ} kf) k,   D = Ũ − W S0,
// and written transposed, so that every product is an mma.sync whose A
// operand is the previous product's accumulator:
//     Dᵀ  = Ũᵀ + Sᵀ (−W)ᵀ,   Yqᵀ = Sᵀ qᵀ           (one pass over K)
//     Oᵀ  = e^{γ} qf Yqᵀ + Dᵀ Pᵀ
//     Sᵀ  = e^{γ_last} Sᵀ + D2ᵀ k,   D2ᵀ = e^{γ_last−γ} kf Dᵀ
// The state's chain per chunk is two products over 16-bit operands (Sᵀ·Wᵀ,
// D2ᵀ·k); Ũᵀ and the outputs hang off it.
//
// A compute warp owns 16 value columns of one value head and holds their
// state transposed (16 x K, FP32) in the accumulator registers of the
// update; the accumulator layout of two adjacent 8-wide tiles is the
// A-operand layout of one 16-deep step (mma.cuh), so Sᵀ, Dᵀ and D2ᵀ become A
// operands by rounding pairs to 16 bits, with no shared-memory round trip.
// The state never leaves the registers between a sequence's chunks.
//
// Warp specialisation, a block of NCOL / 16 compute warps and one loading
// warp, STAGES (3 or 4) stages of loaded rows: while the compute warps work
// on chunk i, the loading warp fills the stage of chunk i + STAGES − 1; they
// meet at one barrier per chunk. With three stages a chunk's copies must
// land within the chunk step that issues them; with four they get two chunk
// steps, chunk i + 3's copies staying in flight across the barrier (one
// cp.async commit group per chunk). The fourth stage costs 45 KB of shared
// memory at K = 128, and comes with 1 KB per compute warp for its outputs
// as 16-byte rows (store_tile_rows, sm_90): both are taken where they fit
// the device's opt-in limit (policy::cuda_scan_mma_stages; three stages are
// the path's minimum).
// - The prep (chunk_prep.cu) builds a chunk's operands beside the scan: −W
//   (mma: A = −T diag(β e^γ kf) rounded to 16 bits, B = the raw k rows,
//   exact; W rounded to 16 bits), Tβ and P as 16-bit values and
//   remainders, and the per-token factors; the compute warps take no
//   exponentials and split no T/P rows.
// - The loading warp copies a chunk's k/q rows, −W, Tβ/P rows and factors
//   (16-bit rows and floats written by the prep, w.kq16, W16, TP16, F4) and v
//   (cp.async; v through registers, a chunk ahead, where its rows are not
//   16-byte aligned).
//
// Rounded to 16 bits: k, q (exact for 16-bit inputs of the mode's type, and
// for bf16 in the FP16 modes: exact_16bit_input), Sᵀ and W in Dᵀ (and
// −T diag(β e^γ kf) in W's product), D2ᵀ in the update, v where it is not
// exact;
// Tβ, P and Dᵀ are split into a 16-bit value and its 16-bit remainder.
// BF16X3 (ScanMode::kBf16x3) splits the rounded ones as well: Sᵀ, −W (and
// the A operand of its product in the prep), D2ᵀ, and k, q, v where they are
// not BF16 (the prep writes the k/q rows' remainders, w.kq16lo, and −W's,
// w.W16lo; the stage holds them too), and the operands that set its error
// (Tβ, P, Dᵀ, D2ᵀ, v; docs/perf-notes.md v17, v18) take a second remainder:
// three BF16 terms, exact for an FP32 value. A product keeps the term pairs
// i + j <= 2 (hi·hi + hi·lo + lo·hi for two-term operands).
// FP16X3 (ScanMode::kFp16x3) is the same scan on FP16 terms: the remainders
// FP16 (11 bits a term, so value + remainder hold ~22 of an FP32 value's 24
// bits, against BF16's ~16), exact for f16 and bf16 k/q/v (no remainders
// copied or multiplied for them, v107); FP32-class products
// (docs/perf-notes.md v100). Its operands run at power-of-two scales
// (kValueScale, kTbScale, kPScale in kernels.hpp; v103), so that the
// remainders of small entries stay out of FP16's subnormal range: the state
// and v (and so D, D2 and the outputs before their last factor) at
// kValueScale, Tβ and −W at kTbScale (D divided by it before its split), P at
// kPScale. Entries beyond 65504 over their scale overflow.
// Accumulation and the state are FP32.
#pragma once

#include <type_traits>

#include "cuda/chunk_scan.cuh"

namespace gdn::cuda {
namespace scan_mma {

using scan::Chunk;
using scan::kChunk;

// Row stride of the staged k/q rows in 16-bit elements: K + 8 puts the 8 rows
// of an ldmatrix 8x8 matrix in distinct banks.
template <int K>
constexpr int kLd16 = K + 8;

// The state's two products on wgmma (docs/perf-notes.md v26): in the sm_90a
// build of the BF16/FP16 scan (chunk_scan_bf16.cu and chunk_scan_fp16.cu
// are also compiled for sm_90a, whose code an sm_90 device runs), the four
// compute warps of a block are one warpgroup, M = its 64 columns:
//     Dᵀ | Yqᵀ  += Sᵀ · [−W | q]ᵀ   K / 16 x m64n64k16, B = [−W; q] rows, K-major
//     Sᵀ        += D2ᵀ · k          2 x m64n{K}k16,     B = k rows, MN-major
// Their A operands and accumulators are the registers the mma.sync form
// uses (the layouts are the same per warp). The loading warp stages −W, q
// and k in wgmma's 128-byte-swizzled atoms instead of rows of K + 8 (Stage::kWQKAtoms);
// the rest of the step stays on mma.sync. BF16X3 (chunk_scan_bf16x3.cu, also
// built for sm_90a) runs the term pairs of its split operands as more wgmma
// on the same shapes: the remainders' rows in a second set of atoms.
#if defined(GDN_HAVE_WGMMA)
template <ScanMode MODE>
constexpr bool kWgmma = kRegStateScan<MODE>;
#else
template <ScanMode MODE>
constexpr bool kWgmma = false;
#endif

// The in-chunk products (Ũᵀ = vᵀ Tβᵀ, Dᵀ Pᵀ) take each operand as a 16-bit
// value and its 16-bit remainder, three products (hi·hi, hi·lo, lo·hi):
// their operands lose ~2^-16 instead of ~2^-8 (BF16). H200, T = 32K, bf16
// inputs, with the earlier form of this scan: 2.0e-3 / 2.7e-3 from FP64 (out
// / state) with the split, 4.8e-3 / 3.8e-3 without it (docs/perf-notes.md v5).

// The A operand of 16-deep step s from the accumulators of the 8-wide tiles
// 2s and 2s + 1 (mma.cuh: the layouts match), and with lo the remainders.
template <ScanMode MODE, int N>
__device__ __forceinline__ void acc_to_a(const float (&x)[N][4], int s, uint32_t (&a)[4],
                                         uint32_t (*lo)[4] = nullptr) {
    a[0] = mma::pack_split<MODE>(x[2 * s][0], x[2 * s][1], lo ? &(*lo)[0] : nullptr);
    a[1] = mma::pack_split<MODE>(x[2 * s][2], x[2 * s][3], lo ? &(*lo)[1] : nullptr);
    a[2] = mma::pack_split<MODE>(x[2 * s + 1][0], x[2 * s + 1][1], lo ? &(*lo)[2] : nullptr);
    a[3] = mma::pack_split<MODE>(x[2 * s + 1][2], x[2 * s + 1][3], lo ? &(*lo)[3] : nullptr);
}

// The same as three terms a[0] + a[1] + a[2] (BF16X3's D, D2 and v).
template <ScanMode MODE, int N>
__device__ __forceinline__ void acc_to_a3(const float (&x)[N][4], int s, uint32_t (&a)[3][4]) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const float* t = x[2 * s + (r >> 1)] + 2 * (r & 1);
        a[0][r] = mma::pack_split3<MODE>(t[0], t[1], a[1][r], a[2][r]);
    }
}

// Element type of the output.
template <typename T>
__device__ __forceinline__ T out_cast(float x);
template <>
__device__ __forceinline__ float out_cast<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 out_cast<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half out_cast<__half>(float x) { return __float2half_rn(x); }

// Oᵀ tiles of a thread (tile j, [e]: token 8j + 2tq + (e & 1), column + 8 (e >> 1))
// to row-major rows of stride ld starting at base = (token 2tq, first column);
// only tokens < L.
// A full chunk (every chunk but a sequence's last) takes the stores without
// checks: straight-line code, no branch per store.
template <typename T>
__device__ __forceinline__ void store_tile(T* base, int64_t ld, const float (&o)[4][4], int tq, int L) {
    if (L == kChunk) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            T* r = base + 8 * j * ld;
            r[0] = out_cast<T>(o[j][0]);
            r[8] = out_cast<T>(o[j][2]);
            r[ld] = out_cast<T>(o[j][1]);
            r[ld + 8] = out_cast<T>(o[j][3]);
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        T* r = base + 8 * j * ld;
        const int t = 8 * j + 2 * tq;
        if (t < L) {
            r[0] = out_cast<T>(o[j][0]);
            r[8] = out_cast<T>(o[j][2]);
        }
        if (t + 1 < L) {
            r[ld] = out_cast<T>(o[j][1]);
            r[ld + 8] = out_cast<T>(o[j][3]);
        }
    }
}

// A full chunk's 16-bit outputs as 16-byte rows (sm_90): the thread's Oᵀ
// tiles packed in pairs (tile j, [e], [e + 1]: column c, tokens 8j + 2tq,
// + 1) are the fragments of 8x8 matrices (columns x tokens), which stmatrix
// stores transposed into the warp's 1 KB, ob: 32 token rows of 16 columns,
// 32 bytes, their two 16-byte halves swapped on rows 4..7 of every 8 (so
// that neither the matrix stores nor the row loads share a bank); then each
// lane copies two 16-byte pieces to base (token 0, the warp's column 0),
// rows of stride ld. Instead of sixteen 2-byte stores a lane, two.
template <typename T>
__device__ __forceinline__ void store_tile_rows(T* base, int64_t ld, const float (&o)[4][4],
                                                unsigned char* ob, int lane) {
    static_assert(sizeof(T) == 2, "16-bit outputs");
    auto pack = [](float lo, float hi) {
        if constexpr (std::is_same_v<T, __half>) {
            const __half2 h = __floats2half2_rn(lo, hi);
            return *reinterpret_cast<const uint32_t*>(&h);
        } else {
            const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
            return *reinterpret_cast<const uint32_t*>(&h);
        }
    };
    // Matrix m = lane / 8 of a store: tile 2x + m / 2, column half m % 2;
    // this lane gives the address of its stored row lane % 8.
    const int m = lane >> 3, i = lane & 7;
#pragma unroll
    for (int x = 0; x < 2; ++x) {
        const int row = 8 * (2 * x + (m >> 1)) + i;
        mma::stmatrix_x4_trans(ob + row * 32 + (((m & 1) ^ (i >> 2)) << 4),
                               pack(o[2 * x][0], o[2 * x][1]), pack(o[2 * x][2], o[2 * x][3]),
                               pack(o[2 * x + 1][0], o[2 * x + 1][1]), pack(o[2 * x + 1][2], o[2 * x + 1][3]));
    }
    __syncwarp();
    // Piece q = lane + 32 r: token row (q % 8) + 8 (q / 16), column half (q / 8) % 2.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int q = lane + 32 * r, half = (q >> 3) & 1, row = (q & 7) + 8 * (q >> 4);
        const uint4 v = *reinterpret_cast<const uint4*>(ob + row * 32 + ((half ^ ((row >> 2) & 1)) << 4));
        *reinterpret_cast<uint4*>(base + row * ld + 8 * half) = v;
    }
}

// Row stride (elements) of the staged v rows, kept in the input's type: the
// Vᵀ operand reads (tokens 2tq + e, columns g) hit distinct banks (or share
// a word) with NCOL + 4 (4-byte) and NCOL + 8 (2-byte) elements; rows are
// 16-byte aligned.
template <int NCOL, int IN_BYTES>
constexpr int kLdV = NCOL + (IN_BYTES == 4 ? 4 : 8);
// Row stride (16-bit elements) of the staged 32 x 32 operands (Tβ, P):
// the 8 rows of an ldmatrix 8x8 matrix in distinct banks.
constexpr int kLd32 = 40;

// One stage of the loaded rows (policy::cuda_scan_mma_stage_bytes; three or
// four of them): the chunk's k and q rows and the prep's operands as 16-bit
// values (−W; Tβ = T diag(β) and P, each a value and its remainder), the
// per-token factors, and v. With SPLIT (BF16X3, FP16X3) −W's remainders too,
// with KQ the k/q rows' remainders (BF16X3; FP16X3 for f32 inputs: its 16-bit
// inputs are exact, exact_16bit_input), with R2 Tβ's and P's second
// remainders (BF16X3). FP16X3 with 16-bit inputs thus fits four stages at
// K = 128 on the H100/H200 (docs/perf-notes.md v108).
template <int K, int NCOL, bool SPLIT, bool KQ, bool R2>
struct Stage {
    static_assert(SPLIT || !(KQ || R2), "remainders of the split modes");
    static constexpr int kKQ = 0;                                // uint16 [64][kLd16]: k rows 0..31, q rows 32..63
    // kWgmma: instead of kKQ and kW, the rows of −W, q and k (array a = 0, 1,
    // 2) in wgmma's 128-byte-swizzled atoms (mma.cuh), from the first
    // 1024-byte boundary at or after the stage's start (wqk_at): atom (a,
    // 8-token group tg, 64 K values kc) at (12 kc + 4 a + tg) · 1024, and in it
    // token t's 16-byte piece j at (t % 8) · 128 + (j ^ (t % 8)) · 16. The
    // 12 · K / 64 KB fit in kKQ's and kW's bytes with 1 KB to spare. SPLIT:
    // the remainders' rows in a second set of atoms, kWQKLo bytes on: with KQ
    // as the first (−W's, q's and k's, kWQKLoAtoms = 12 KB a kc column), else
    // −W's alone (4 KB a column: atom (tg, kc) at (4 kc + tg) · 1024).
    static constexpr int kWQKAtoms = 12 * 1024;                  // bytes of one kc column
    static constexpr int kWQKLo = K / 64 * kWQKAtoms;
    static constexpr int kWQKLoAtoms = KQ ? kWQKAtoms : 4 * 1024;
    static constexpr int kW = 64 * kLd16<K> * 2;                 // uint16 [32][kLd16]: −W
    static constexpr int kKQLo = kW + 32 * kLd16<K> * 2;         // KQ: uint16 [64][kLd16]: k/q remainders
    static constexpr int kWLo = kKQLo + (KQ ? 64 * kLd16<K> * 2 : 0);  // SPLIT: uint16 [32][kLd16]: −W's remainders
    static constexpr int kTb = SPLIT ? kWLo + 32 * kLd16<K> * 2  // uint16 [32][kLd32] each: Tβ,
                                     : kKQLo;
    static constexpr int kTbLo = kTb + 32 * kLd32 * 2;           //   its remainders,
    static constexpr int kP = kTbLo + 32 * kLd32 * 2;            //   P,
    static constexpr int kPLo = kP + 32 * kLd32 * 2;             //   its remainders,
    static constexpr int kTbLo2 = kPLo + 32 * kLd32 * 2;         //   R2: Tβ's second remainders,
    static constexpr int kPLo2 = kTbLo2 + 32 * kLd32 * 2;        //   R2: P's
    static constexpr int kF = (R2 ? kPLo2 : kPLo) + 32 * kLd32 * 2;  // float4 [32]: e^{γ_L−γ} kf, e^γ qf, e^{γ_L}, 0
    static constexpr int kV = kF + 32 * 16;                      // In [32][kLdV] (room for 4-byte)
    static constexpr int kBytes = kV + 4 * 32 * kLdV<NCOL, 4>;
    static_assert(kBytes == int(policy::cuda_scan_mma_stage_bytes(K, NCOL, policy::ScanMmaRows{SPLIT, KQ, R2})),
                  "stage layout");
    static_assert(kWQKLo + (SPLIT ? K / 64 * kWQKLoAtoms : 0) + 1023 <= kTb,
                  "the wgmma rows fit, however the stage is aligned");
};

// The stage rows of a mode's instance for IN_BYTES inputs (policy::cuda_scan_mma_rows).
template <ScanMode MODE, int IN_BYTES>
inline constexpr policy::ScanMmaRows kStageRows = policy::cuda_scan_mma_rows(
    MODE == ScanMode::kBf16x3   ? GDN_PRECISION_BF16X3
    : MODE == ScanMode::kFp16x3 ? GDN_PRECISION_FP16X3
                                : GDN_PRECISION_BF16,
    IN_BYTES);

// TS: GDN_FLAG_BLOCK_STATES (p.token_state_indices): after a chunk that ends a
// 64-token block of its sequence or the sequence, the state to the slot its
// last token names; the own slot only read, so the sequence that crosses into
// the next window carries its state through the workspace (w.carry_out, then
// that window's w.carry_in). Its own instances, never time-sliced.
template <int K, int NCOL, int IN_BYTES, ScanMode MODE, int STAGES, bool SLICED, bool TS = false>
__global__ void __launch_bounds__(2 * NCOL + 32, 1)
    chunk_scan_mma_kernel(const Params p, const ChunkScratch w, int64_t win_begin, int64_t win_end,
                          int64_t win_slice, int zero_empty_sequences) {
    // The window, from scalar parameters (ptxas allocates registers differently
    // for a struct parameter: docs/perf-notes.md v39).
    const Window win{win_begin, win_end, win_slice};
    static_assert(kRegStateScan<MODE>, "16-bit operand modes");
    // BF16X3, FP16X3: every operand of the state's chain a value and its remainder.
    constexpr bool X3 = kSplitOperands<MODE>;
    // X3 with second remainders (BF16X3, kernels.hpp): without them (FP16X3)
    // the products of the three-term operands keep the pairs i + j <= 1
    // (term 2 is not used).
    constexpr bool R2 = kSecondRemainders<MODE>;
    constexpr bool WG = kWgmma<MODE>;
    static_assert(!WG || NCOL == 64, "wgmma: the compute warps are one warpgroup of 64 columns");
    static_assert(STAGES == 3 || STAGES == 4, "stages of loaded rows");
    static_assert(!(TS && SLICED), "no time-sliced windows with token states");
    static_assert(GDN_STATE_BLOCK % kChunk == 0, "block ends are chunk ends");
    static_assert(NCOL % 16 == 0 && NCOL <= 64 && K % 32 == 0, "tile shapes");
    // launch_in: V % NCOL == 0, so a block's columns are one value head's.
    using In = typename scan::Raw<IN_BYTES>::type;
    // The stage's rows (kStageRows): KQ where the instance's inputs may leave
    // k/q remainders.
    constexpr bool KQ = kStageRows<MODE, IN_BYTES>.kq;
    static_assert(kStageRows<MODE, IN_BYTES>.split == X3 && kStageRows<MODE, IN_BYTES>.second == R2,
                  "the stage holds the mode's remainders");
    // A split stage without k/q remainders is only for inputs that never
    // leave any (the backend allocates w.kq16lo by the same rule).
    static_assert(KQ || !X3 ||
                      (IN_BYTES == 2 && exact_16bit_input(MODE, GDN_DTYPE_BF16) &&
                       exact_16bit_input(MODE, GDN_DTYPE_F16)),
                  "no k/q remainder rows only where every input of this width is exact");
    using St = Stage<K, NCOL, X3, KQ, R2>;
    constexpr int NW = NCOL / 16;  // compute warps, 16 columns each; warp NW loads
    constexpr int LD = kLd16<K>;
    constexpr int LDV = kLdV<NCOL, IN_BYTES>;
    constexpr int NJ = K / 8;      // 8-wide tiles of Sᵀ's K columns

    // The prep's rows and the state are read after the kernels ahead in the
    // stream are done; the next window's prep may start now, on the SMs this
    // grid leaves free (backend.cpp).
    grid_dependency_wait();
    allow_dependent_launch();

    extern __shared__ __align__(16) float smem[];
    unsigned char* const base = reinterpret_cast<unsigned char*>(smem);
    auto stage = [&](int s) { return base + s * St::kBytes; };
    // WG: a stage's wgmma rows start at its first 1024-byte boundary (in the
    // shared address space) of the 128-byte swizzle.
    auto wqk_at = [](const unsigned char* sb) {
        const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(sb));
        return const_cast<unsigned char*>(sb) + ((0u - a) & 1023u);
    };

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tq = lane & 3;
    const int32_t kh = blockIdx.y;
    // Columns are numbered across the key head's value heads (G·V of them);
    // the block's NCOL are columns v0.. of value head h (V % NCOL == 0).
    const int32_t gc0 = int32_t(blockIdx.x) * NCOL;
    const int32_t h = value_head_of(p, kh, gc0 / p.V);
    const int32_t v0 = gc0 % p.V;

    // ldmatrix row addresses of this lane (elements from a matrix's start),
    // for rows of stride ld: the B operand of tiles 2nn, 2nn + 1 and a
    // 16-deep step from rows n (not transposed): matrix i = lane / 8 is rows
    // 8 (i / 2) + lane % 8 of the 16-row pair of tiles, columns 8 (i % 2) of
    // the step; from rows k (transposed): rows (k) 8 (i % 2) + lane % 8,
    // columns (n) 8 (i / 2).
    auto ld_n = [&](int ld) { return ((lane >> 4) * 8 + (lane & 7)) * ld + ((lane >> 3) & 1) * 8; };
    auto ld_k = [&](int ld) { return (((lane >> 3) & 1) * 8 + (lane & 7)) * ld + (lane >> 4) * 8; };

    // Sequence lanes (gridDim.z, policy::cuda_scan_lanes): lane z walks the window's
    // sequences z, z + lanes, ... (counted from the first that reaches into the
    // window), each from its state in the pool, so that a batch's sequences
    // run side by side where the heads leave SMs free. The bits of a sequence
    // do not depend on the lane that runs it.
    Chunk cur = scan::first_chunk_from<SLICED>(
        p, scan::first_seq_of<SLICED>(p, win) + int32_t(blockIdx.z), win, int32_t(gridDim.z));

    // STAGES stages of loaded rows. While the compute warps work on chunk i
    // (stage i % STAGES), the loading warp fills stage (i + STAGES − 1) %
    // STAGES; both meet at one barrier per chunk. Two barriers before the
    // first chunk (stages 0 and 1 loaded): the compute warps start on chunk i
    // after barrier i + 1, a chunk's stage complete one barrier before it is
    // needed. Barrier j (j = 0, 1, ...; the compute warps' chunk j − 2 done)
    // needs chunk j's stage complete; the chunks of the stages after it may
    // still be in flight.
    if (warp == NW) {
        // ------------------------------------------------------------------
        // The loading warp: a chunk's k/q rows, prep rows and v (cp.async; v
        // in its own type, the compute warps convert it). v is read from
        // memory (the rest was just written by the prep): its rows are
        // prefetched into L2 a chunk before they are copied, or, where they
        // are not 16-byte aligned, loaded through registers a chunk before
        // they are stored, so that the loads' latency spans a barrier.
        const In* v_in = static_cast<const In*>(p.v);
        // v by cp.async where every row of the block's columns is 16-byte
        // aligned; otherwise through registers, a chunk ahead.
        const bool v_async = ((reinterpret_cast<uintptr_t>(p.v) | uint64_t(p.v_tok * IN_BYTES) |
                               uint64_t(p.v_head * IN_BYTES)) & 15) == 0;
        // This lane's v columns: lane and lane + 32 of the block (< NCOL).
        int64_t v_off[2];
#pragma unroll
        for (int m = 0; m < 2; ++m)
            v_off[m] = int64_t(h) * p.v_head + v0 + (lane + 32 * m < NCOL ? lane + 32 * m : 0);
        // A chunk's rows, in 16-byte pieces; zeros past the chunk's end. Lane
        // l copies pieces l % P of tokens l / P + i·32 / P (P pieces per
        // token row): for a full chunk (every chunk but a sequence's last)
        // each array's copies are then at compile-time offsets from one
        // address per lane, which the copy instructions take as immediates
        // (~2 instructions per copy instead of ~19 with a predicate and an
        // address each); a short chunk takes each copy's predicate (the zero
        // fill). The lane's part of each address is set once; a chunk adds
        // its first row.
        constexpr int PKQ = K / 8, TKQ = 32 / PKQ;             // k/q: pieces per row, tokens per step
        constexpr int PV = NCOL * IN_BYTES / 16, TV = 32 / PV;  // v: likewise
        static_assert(32 % PKQ == 0 && 32 % PV == 0, "whole token rows per warp-wide step");
        const int r_kq = lane / PKQ, r_tp = lane >> 4, r_v = lane / PV;
        const uint16_t* const kq_lane = w.kq16 + (int64_t(kh) * w.rows + r_kq) * 2 * K + (lane % PKQ) * 8;
        const uint16_t* const w_lane = w.W16 + (int64_t(h) * w.rows + r_kq) * K + (lane % PKQ) * 8;
        // BF16X3: the remainders' rows, at the same offsets (k/q: not for
        // BF16 inputs); it addresses both arrays from one offset each (fewer
        // registers live than a pointer per array).
        const bool kq_lo = KQ && w.kq16lo != nullptr;
        const int64_t kq_off = kq_lane - w.kq16, w_off = w_lane - w.W16;
        // WG: lane l copies piece j = l % 8 of the 128 bytes (64 K values kc)
        // of tokens t = l / 8 + 4i of each of −W, q and k: 8 lanes read one
        // 128-byte line and fill one swizzled 128-byte row of an atom. Token
        // t's row in its atom is r = l / 8 + 4 (i % 2), its piece j ^ r.
        const int wg_tok = lane >> 3, wg_piece = lane & 7;
        const uint16_t* const kq_wg = w.kq16 + (int64_t(kh) * w.rows + wg_tok) * 2 * K + wg_piece * 8;
        const uint16_t* const w_wg = w.W16 + (int64_t(h) * w.rows + wg_tok) * K + wg_piece * 8;
        const int wg_dst[2] = {wg_tok * 128 + ((wg_piece ^ wg_tok) << 4),
                               (wg_tok + 4) * 128 + ((wg_piece ^ (wg_tok + 4)) << 4)};
        // X3: the remainders' arrays from the values' addresses (elements).
        const int64_t wg_lo_w = X3 ? w.W16lo - w.W16 : 0, wg_lo_kq = X3 && kq_lo ? w.kq16lo - w.kq16 : 0;
        // A TP16 row is 16 pieces: Tβ, its remainders, P, its remainders (4
        // each; the stage's arrays from kTb on, in this order); BF16X3 adds
        // 8: Tβ's and P's second remainders (the stage's next two arrays).
        constexpr int TPW = kTp16Row<MODE>;
        const int tp_piece = lane & 15;
        const uint16_t* const tp_lane = w.TP16 + (int64_t(h) * w.rows + r_tp) * TPW + tp_piece * 8;
        const int tp_dst = St::kTb / 2 + (tp_piece >> 2) * 32 * kLd32 + r_tp * kLd32 + (tp_piece & 3) * 8;
        const int tp2_piece = 16 + (lane & 7), r_tp2 = lane >> 3;  // X3: 4 rows a step
        const uint16_t* const tp2_lane = w.TP16 + (int64_t(h) * w.rows + r_tp2) * TPW + tp2_piece * 8;
        const int tp2_dst = St::kTb / 2 + (tp2_piece >> 2) * 32 * kLd32 + r_tp2 * kLd32 + (tp2_piece & 3) * 8;
        const float* const f_lane = w.F4 + (int64_t(h) * w.rows + lane) * 4;
        const unsigned char* const v_lane =
            reinterpret_cast<const unsigned char*>(v_in + r_v * p.v_tok + int64_t(h) * p.v_head + v0) +
            (lane % PV) * 16;
        const int64_t v_step = int64_t(TV) * p.v_tok * IN_BYTES;  // bytes between a lane's v copies
        auto copy_rows = [&](const Chunk& c, unsigned char* sb) {
            auto rows = [&](auto full) {
                constexpr bool FULL = decltype(full)::value;
                const int L = c.L();
                const int64_t row0 = c.row();
                // k/q rows: k rows 0..31, q rows 32..63 of the stage.
                auto kq_rows = [&](const uint16_t* rows16, int at) {
                    const uint16_t* src = (X3 ? rows16 + kq_off : kq_lane) + row0 * 2 * K;
                    uint16_t* dst = reinterpret_cast<uint16_t*>(sb + at) + r_kq * LD + (lane % PKQ) * 8;
#pragma unroll
                    for (int i = 0; i < PKQ; ++i) {
                        const bool ok = FULL || r_kq + TKQ * i < L;
                        cp_async16(dst + TKQ * i * LD, ok ? src + TKQ * i * 2 * K : rows16, ok ? 16 : 0);
                        cp_async16(dst + (32 + TKQ * i) * LD, ok ? src + (TKQ * i * 2 + 1) * K : rows16,
                                   ok ? 16 : 0);
                    }
                };
                // −W rows, as the k rows.
                auto w_rows = [&](const uint16_t* rows16, int at) {
                    const uint16_t* src = (X3 ? rows16 + w_off : w_lane) + row0 * K;
                    uint16_t* dst = reinterpret_cast<uint16_t*>(sb + at) + r_kq * LD + (lane % PKQ) * 8;
#pragma unroll
                    for (int i = 0; i < PKQ; ++i) {
                        const bool ok = FULL || r_kq + TKQ * i < L;
                        cp_async16(dst + TKQ * i * LD, ok ? src + TKQ * i * K : rows16, ok ? 16 : 0);
                    }
                };
                if constexpr (WG) {
                    const uint16_t* kq_src = kq_wg + row0 * 2 * K;
                    const uint16_t* w_src = w_wg + row0 * K;
                    unsigned char* const wqk = wqk_at(sb);
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        const bool ok = FULL || wg_tok + 4 * i < L;
                        unsigned char* const dst = wqk + (i >> 1) * 1024 + wg_dst[i & 1];
#pragma unroll
                        for (int kc = 0; kc < K / 64; ++kc) {
                            unsigned char* const at = dst + kc * St::kWQKAtoms;
                            const int64_t t = 4 * i, k0 = 64 * kc;
                            cp_async16(at, ok ? w_src + t * K + k0 : w.W16, ok ? 16 : 0);
                            cp_async16(at + 4096, ok ? kq_src + t * 2 * K + K + k0 : w.kq16, ok ? 16 : 0);
                            cp_async16(at + 8192, ok ? kq_src + t * 2 * K + k0 : w.kq16, ok ? 16 : 0);
                            if constexpr (X3) {  // the remainders' rows (KQ: at the same offsets)
                                unsigned char* const lo =
                                    KQ ? at + St::kWQKLo : dst + St::kWQKLo + kc * St::kWQKLoAtoms;
                                cp_async16(lo, ok ? w_src + wg_lo_w + t * K + k0 : w.W16, ok ? 16 : 0);
                                if (kq_lo) {
                                    cp_async16(lo + 4096, ok ? kq_src + wg_lo_kq + t * 2 * K + K + k0 : w.kq16,
                                               ok ? 16 : 0);
                                    cp_async16(lo + 8192, ok ? kq_src + wg_lo_kq + t * 2 * K + k0 : w.kq16,
                                               ok ? 16 : 0);
                                }
                            }
                        }
                    }
                } else {
                    kq_rows(w.kq16, St::kKQ);
                    w_rows(w.W16, St::kW);
                }
                if constexpr (X3 && !WG) {
                    if (kq_lo) kq_rows(w.kq16lo, St::kKQLo);
                    w_rows(w.W16lo, St::kWLo);
                }
                // Tβ and P rows: 16 pieces per token (BF16X3: and 8).
                {
                    const uint16_t* src = tp_lane + row0 * TPW;
                    uint16_t* dst = reinterpret_cast<uint16_t*>(sb) + tp_dst;
#pragma unroll
                    for (int i = 0; i < 16; ++i) {
                        const bool ok = FULL || r_tp + 2 * i < L;
                        cp_async16(dst + 2 * i * kLd32, ok ? src + 2 * i * TPW : w.TP16, ok ? 16 : 0);
                    }
                }
                if constexpr (R2) {  // the second remainders (kernels.hpp)
                    const uint16_t* src = tp2_lane + row0 * TPW;
                    uint16_t* dst = reinterpret_cast<uint16_t*>(sb) + tp2_dst;
#pragma unroll
                    for (int i = 0; i < 8; ++i) {
                        const bool ok = FULL || r_tp2 + 4 * i < L;
                        cp_async16(dst + 4 * i * kLd32, ok ? src + 4 * i * TPW : w.TP16, ok ? 16 : 0);
                    }
                }
                // The per-token factors.
                {
                    const bool ok = FULL || lane < L;
                    cp_async16(sb + St::kF + lane * 16, ok ? f_lane + row0 * 4 : w.F4, ok ? 16 : 0);
                }
                // v rows as they are, where they are 16-byte aligned (their
                // token stride is not a constant: one address add per copy).
                if (v_async) {
                    const unsigned char* src = v_lane + c.cs * p.v_tok * IN_BYTES;
                    unsigned char* dst = sb + St::kV + r_v * (LDV * IN_BYTES) + (lane % PV) * 16;
#pragma unroll
                    for (int i = 0; i < PV; ++i) {
                        const bool ok = FULL || r_v + TV * i < L;
                        cp_async16(dst + TV * i * (LDV * IN_BYTES), ok ? src : p.v, ok ? 16 : 0);
                        src += v_step;
                    }
                }
            };
            if (c.L() == kChunk)
                rows(std::true_type{});
            else
                rows(std::false_type{});
            cp_async_commit();
        };
        // v of a chunk: issued into vr, stored (converted) later.
        uint32_t vr[32][2];
        auto issue_v = [&](const Chunk& c) {
            const In* vt = v_in + c.cs * p.v_tok;
#pragma unroll
            for (int i = 0; i < 32; ++i) {
                const bool ok = i < c.L();
#pragma unroll
                for (int m = 0; m < 2; ++m)
                    vr[i][m] = ok && lane + 32 * m < NCOL ? uint32_t(__ldg(vt + v_off[m])) : 0u;
                vt += p.v_tok;
            }
        };
        auto store_v = [&](unsigned char* sb) {
            In* vb = reinterpret_cast<In*>(sb + St::kV);
#pragma unroll
            for (int i = 0; i < 32; ++i)
#pragma unroll
                for (int m = 0; m < 2; ++m)
                    if (lane + 32 * m < NCOL) vb[i * LDV + lane + 32 * m] = In(vr[i][m]);
        };
        auto next = [&](const Chunk& c) {
            return c.n < 0 ? c : scan::next_chunk<SLICED>(p, c, win, int32_t(gridDim.z));
        };
        // v rows (read from memory, unlike the rest) into L2 a chunk before
        // they are copied: lane t the lines of token t's NCOL values.
        auto prefetch_v = [&](const Chunk& c) {
            if (c.n < 0 || lane >= c.L()) return;
            const char* row =
                reinterpret_cast<const char*>(v_in + (c.cs + lane) * p.v_tok + int64_t(h) * p.v_head + v0);
#pragma unroll
            for (int b = 0; b < NCOL * IN_BYTES; b += 128) prefetch_l2(row + b);
            prefetch_l2(row + NCOL * IN_BYTES - 1);
        };
        if (cur.n < 0) return;
        // Before barrier j the loading warp copies chunk j + STAGES − 3 (one
        // commit group per chunk) and waits for every group but the newest
        // STAGES − 3: chunk j's copies are done, chunk j + 1's (four stages)
        // stay in flight across the barrier. With four stages a chunk past
        // the window's end commits an empty group, so that the newest group
        // is always chunk j + 1's (three wait for every group). A stage's v
        // through registers is stored with its copies, and the next chunk's
        // loads are issued behind them (or its rows prefetched into L2).
        //
        // Chunk c into stage s; its v through registers issued here with
        // issue (else already in vr).
        auto copy_chunk = [&](const Chunk& c, int s, bool issue) {
            if (c.n >= 0) {
                copy_rows(c, stage(s));
                if (!v_async) {
                    if (issue) issue_v(c);
                    store_v(stage(s));
                }
            } else if (STAGES > 3) {
                cp_async_commit();
            }
        };
        auto wait_loaded = [] {
            if constexpr (STAGES == 3)
                cp_async_wait_all();
            else
                cp_async_wait_group<STAGES - 3>();
#if defined(GDN_HAVE_WGMMA)
            // The rows wgmma reads (through the async proxy) were written by
            // cp.async (the generic proxy).
            if constexpr (WG) mma::fence_proxy_async_shared();
#endif
        };
        // Chunks 0 .. STAGES − 2 first, into stages 0 .. STAGES − 2, their v
        // loaded and stored at once; the last of them before barrier 1, the
        // others before barrier 0.
        Chunk ch[STAGES - 2], cn = cur;  // cn: the chunk copied now, then the next one
#pragma unroll
        for (int i = 0; i < STAGES - 1; ++i) {
            if (i > 0) ch[i - 1] = cn = next(cn);
            copy_chunk(cn, i, true);
            if (i < STAGES - 3) continue;
            if (i == STAGES - 2) {
                cn = next(cn);  // chunk STAGES − 1, copied by the loop's first step
                if (cn.n >= 0 && !v_async) issue_v(cn);
                if (v_async) prefetch_v(cn);
            }
            wait_loaded();
            block_barrier();
        }
        // Barriers 2, 3, ...: before barrier j, ch[] holds chunks j − 1 (the
        // compute warps' next: without it the loading warp is done) .. j +
        // STAGES − 4, and cn is chunk j + STAGES − 3, copied into stage s.
#pragma unroll 1
        for (int s = STAGES - 1; ch[0].n >= 0; s = s == STAGES - 1 ? 0 : s + 1) {
            // Stage s was last read (by the compute warps) before the previous barrier.
            copy_chunk(cn, s, false);
            const Chunk cf = next(cn);
            if (cf.n >= 0 && !v_async) issue_v(cf);
            if (v_async) prefetch_v(cf);
            wait_loaded();
            block_barrier();
#pragma unroll
            for (int i = 0; i < STAGES - 3; ++i) ch[i] = ch[i + 1];
            ch[STAGES - 3] = cn;
            cn = cf;
        }
        return;
    }

    // ----------------------------------------------------------------------
    // The compute warps.
    const int32_t c0 = v0 + 16 * warp + g;  // this thread's columns: c0 and c0 + 8

    // Sᵀ tile j: [0], [1] = (column c0, K rows 8j + 2tq, + 1); [2], [3] = column c0 + 8.
    float S[NJ][4];
    // Element (K row 8j + 2tq + (e & 1), column c0 + 8 (e >> 1)) of a head's
    // state is at st_at + j·st_j + (e & 1)·st_1 + (e >> 1)·st_8 (32-bit: a
    // head's K·V is checked to fit). Unsigned, so that an address needs no
    // sign extension: the compiler keeps these offsets in registers across
    // the chunk loop, where K = 128 is at the register limit.
    const int32_t st_at = p.state_kv ? 2 * tq * p.V + c0 : c0 * p.K + 2 * tq;
    const int32_t st_j = p.state_kv ? 8 * p.V : 8, st_1 = p.state_kv ? p.V : 1;
    const int32_t st_8 = p.state_kv ? 8 : 8 * p.K;
    auto state_at = [&](int j, int e) {
        return uint32_t(st_at + j * st_j + (e & 1) * st_1 + (e >> 1) * st_8);
    };
    // A head's state at `heads` (a pool slot, or TS: the workspace's carry).
    // A mode with a value scale (FP16X3) holds the state (and v, D, D2) at it
    // (kernels.hpp).
    constexpr bool kScaled = kValueScale<MODE> != 1.0f;
    constexpr float kVs = kValueScale<MODE>;
    auto load_from = [&](const float* heads, bool zero) {
        const float* st = heads + int64_t(h) * p.K * p.V;
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                S[j][e] = zero ? 0.0f : st[state_at(j, e)];
                if constexpr (kScaled) S[j][e] *= kVs;
            }
    };
    auto store_to = [&](float* heads, bool zero) {
        float* st = heads + int64_t(h) * p.K * p.V;
#pragma unroll
        for (int j = 0; j < NJ; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                st[state_at(j, e)] = zero ? 0.0f : kScaled ? S[j][e] * (1.0f / kVs) : S[j][e];
    };
    auto slot_heads = [&](int32_t slot) { return p.state + int64_t(slot) * p.slot_stride; };
    auto load_state = [&](const Chunk& c) {
        // A sequence's first chunk may start from zero; later windows read
        // back what the previous one wrote: to the slot, or (TS) the carry.
        const bool first = c.cs == seq_begin(p, c.n);
        load_from(TS && !first ? w.carry_in : slot_heads(seq_slot(p, c.n)), seq_from_zero(p, c.n) && first);
    };
    auto store_state = [&](int32_t n, bool zero) { store_to(slot_heads(seq_slot(p, n)), zero); };

    // Sequences without tokens that start from zero still get a zero state
    // (the sequential path writes one too); window 0 takes care of them.
    // (TS: they have no token to name a slot, and write nothing.)
    if (!TS && zero_empty_sequences && p.start_from_zero && blockIdx.z == 0)
        for (int32_t n = 0; n < p.num_seqs; ++n)
            if (seq_end(p, n) == seq_begin(p, n) && seq_slot(p, n) >= 0 && seq_from_zero(p, n))
                store_state(n, true);
    if (cur.n < 0) return;
    load_state(cur);
    int64_t cur_end = scan::seq_end_in<SLICED>(p, cur.n, win);
    block_barrier();
    block_barrier();

    const int ld_y = ld_n(LD), ld_y32 = ld_n(kLd32), ld_u = ld_k(LD);
    // v rows in the mode's 16-bit type are the operands as they are; bf16 v
    // in the FP16 modes is converted, but its FP16 remainder is zero
    // (exact_16bit_input): neither takes a remainder product.
    const bool bf16_in = p.in_dt == GDN_DTYPE_BF16;
    const bool v_exact = IN_BYTES == 2 && (p.in_dt == GDN_DTYPE_BF16) == kBf16Operands<MODE>;
    // Whether v takes a remainder (!exact_16bit_input): f32 always (known at
    // compile time: a runtime test there cost f32 inputs 1-5%, perf-notes
    // v108); 16-bit inputs in the BF16 modes where they are f16.
    const bool v_lo = IN_BYTES == 4 || !exact_16bit_input(MODE, p.in_dt);
    // BF16X3, FP16X3: the k/q rows' remainders (none for exact inputs).
    const bool kq_lo = KQ && w.kq16lo != nullptr;
    // The outputs: row stride and the element of (token 2tq, column c0).
    const bool norm_pass = (p.flags & GDN_FLAG_OUTPUT_NORM) != 0;
    const int64_t o_ld = norm_pass ? int64_t(p.Hv) * p.V : p.o_tok;
    const int64_t o_col = norm_pass ? int64_t(h) * p.V + c0 : int64_t(h) * p.o_head + c0;
    // 16-bit outputs as 16-byte rows (store_tile_rows) where the device has
    // stmatrix, the block has its warps' 1 KB each (four stages), and every
    // output row of the block's columns is 16-byte aligned; the rest, and a
    // sequence's last chunk, take store_tile.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr bool kRows = STAGES == 4;
#else
    constexpr bool kRows = false;
#endif
    const bool out_rows = kRows && !norm_pass && p.out_dt != GDN_DTYPE_F32 &&
                          ((reinterpret_cast<uintptr_t>(p.out) | uint64_t(p.o_tok * 2) |
                            uint64_t(p.o_head * 2)) & 15) == 0;
    unsigned char* const ob = base + STAGES * St::kBytes + warp * 1024;
    const int v_at = (2 * tq) * LDV + 16 * warp + g;  // v of (token 2tq, column c0) in a stage
    // This lane's row of the transposed ldmatrix of vᵀ (matrix lane / 8:
    // tokens 8 (i / 2) + lane % 8, the warp's columns 8 (i % 2)..).
    const int v_ldm = (8 * (lane >> 4) + (lane & 7)) * LDV + 16 * warp + 8 * ((lane >> 3) & 1);

    // acc (tiles 2nn, 2nn + 1) += A Mᵀ for step s of a 32 x 32 operand M
    // given as 16-bit values m_hi and remainders m_lo (B from M's rows):
    // a·m_lo + a·m_hi, and a_lo·m_hi when with_lo.
    auto small_product = [&](float(&acc)[4][4], const uint32_t(&a)[4], const uint32_t(&a_lo)[4],
                             bool with_lo, const unsigned char* m_hi, const unsigned char* m_lo,
                             int nn, int s) {
        uint32_t rh[4], rl[4];
        const int at = ld_y32 + 16 * nn * kLd32 + 16 * s;
        mma::ldmatrix_x4<false>(rh, reinterpret_cast<const uint16_t*>(m_hi) + at);
        mma::ldmatrix_x4<false>(rl, reinterpret_cast<const uint16_t*>(m_lo) + at);
#pragma unroll
        for (int x = 0; x < 2; ++x) {
            if (with_lo) mma::mma16<MODE>(acc[2 * nn + x], a_lo, {rh[2 * x], rh[2 * x + 1]});
            mma::mma16<MODE>(acc[2 * nn + x], a, {rl[2 * x], rl[2 * x + 1]});
            mma::mma16<MODE>(acc[2 * nn + x], a, {rh[2 * x], rh[2 * x + 1]});
        }
    };

    // BF16X3: the same with A as na (1: exact, or 3) terms and M as three
    // (value m0, remainders m1, m2): the term pairs i + j <= 2, the smallest
    // first (what is left out is ~2^-24 of the product). FP16X3 (no R2): the
    // pairs i + j <= 1 (m2 and A's term 2 unused; ~2^-22 left out).
    auto small_product3 = [&](float(&acc)[4][4], const uint32_t(&a)[3][4], int na,
                              const unsigned char* m0, const unsigned char* m1,
                              const unsigned char* m2, int nn, int s) {
        uint32_t r0[4], r1[4], r2[4] = {};
        const int at = ld_y32 + 16 * nn * kLd32 + 16 * s;
        mma::ldmatrix_x4<false>(r0, reinterpret_cast<const uint16_t*>(m0) + at);
        mma::ldmatrix_x4<false>(r1, reinterpret_cast<const uint16_t*>(m1) + at);
        if constexpr (R2) mma::ldmatrix_x4<false>(r2, reinterpret_cast<const uint16_t*>(m2) + at);
#pragma unroll
        for (int x = 0; x < 2; ++x) {
            float(&c)[4] = acc[2 * nn + x];
            const uint32_t b0[2] = {r0[2 * x], r0[2 * x + 1]}, b1[2] = {r1[2 * x], r1[2 * x + 1]},
                           b2[2] = {r2[2 * x], r2[2 * x + 1]};
            if (R2 && na == 3) {
                mma::mma16<MODE>(c, a[2], b0);
                mma::mma16<MODE>(c, a[1], b1);
            }
            if constexpr (R2) mma::mma16<MODE>(c, a[0], b2);
            if (na == 3) mma::mma16<MODE>(c, a[1], b0);
            mma::mma16<MODE>(c, a[0], b1);
            mma::mma16<MODE>(c, a[0], b0);
        }
    };
    // D2ᵀ = e^{γ_last−γ_t} kf_t Dᵀ (zero past the chunk's end).
    auto d2_of = [&](const float(&dd)[4][4], float(&d2)[4][4], const float4* F) {
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float f = F[8 * j + 2 * tq + e].x;
                d2[j][e] = f * dd[j][e];
                d2[j][2 + e] = f * dd[j][2 + e];
            }
    };

#pragma unroll 1
    for (int si = 0;; si = si == STAGES - 1 ? 0 : si + 1) {
        // The next chunk, from the end of cur's sequence kept in a register
        // (no load of cu_seqlens on the chunk step's path).
        const Chunk nxt = scan::next_chunk<SLICED>(p, cur, cur_end, win, int32_t(gridDim.z));
        if constexpr (TS) {  // the slot indices read after this chunk and the next (v94)
            prefetch_l1(p.token_state_indices + cur.cs + cur.L() - 1);
            if (nxt.n >= 0) prefetch_l2(p.token_state_indices + nxt.cs + nxt.L() - 1);
        }
        const unsigned char* sb = stage(si);
        const uint16_t* kq = reinterpret_cast<const uint16_t*>(sb + St::kKQ);
        const uint16_t* kql = reinterpret_cast<const uint16_t*>(sb + St::kKQLo);  // X3, kq_lo
        const uint16_t* Wl = reinterpret_cast<const uint16_t*>(sb + St::kWLo);    // X3
        const In* vb = reinterpret_cast<const In*>(sb + St::kV) + v_at;
        const In* v16 = reinterpret_cast<const In*>(sb + St::kV) + v_ldm;  // v_exact
        const uint16_t* Wh = reinterpret_cast<const uint16_t*>(sb + St::kW);
        const float4* F = reinterpret_cast<const float4*>(sb + St::kF);  // .x f_d2, .y f_o, .z decay
                                                                         // (.w FP16X3: qf)
        const int L = cur.L();

        // Ũᵀ = vᵀ Tβᵀ (no state in it) into d: A = vᵀ (16 columns x 32
        // tokens, value and remainder), B = Tβ's rows (lower triangular: the
        // second step only reaches tokens 16..31).
        auto u_product = [&](float(&d)[4][4]) {
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                // vᵀ as a value and its remainder (BF16X3: three terms).
                uint32_t va[3][4] = {};
                if (v_exact) {
                    // 16-bit v of the mode's type is the operand as it is: one
                    // transposed ldmatrix (register r = tokens 16s + 8 (r / 2)..,
                    // columns 8 (r % 2).. of the warp's 16; rows of LDV elements,
                    // 16-byte aligned, their 8-row groups in distinct banks).
                    mma::ldmatrix_x4<true>(va[0], v16 + 16 * s * LDV);
                } else {
                    float x[4][4];  // tiles 2s, 2s + 1 of vᵀ in accumulator order
#pragma unroll
                    for (int j = 0; j < 2; ++j)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const In* vr = vb + (16 * s + 8 * j + e) * LDV;
                            x[2 * s + j][e] = scan::Raw<IN_BYTES>::to_float(vr[0], bf16_in);
                            x[2 * s + j][2 + e] = scan::Raw<IN_BYTES>::to_float(vr[8], bf16_in);
                            if constexpr (kScaled) {  // v at the state's scale, before its split
                                x[2 * s + j][e] *= kVs;
                                x[2 * s + j][2 + e] *= kVs;
                            }
                        }
                    if (!kBf16Operands<MODE> && !v_lo)  // bf16 in the FP16 modes
                        acc_to_a<MODE>(x, s, va[0]);
                    else if constexpr (X3)
                        acc_to_a3<MODE>(x, s, va);
                    else
                        acc_to_a<MODE>(x, s, va[0], &va[1]);
                }
#pragma unroll
                for (int nn = s; nn < 2; ++nn) {
                    if constexpr (X3)
                        small_product3(d, va, v_lo ? 3 : 1, sb + St::kTb, sb + St::kTbLo, sb + St::kTbLo2, nn, s);
                    else
                        small_product(d, va[0], va[1], v_lo, sb + St::kTb, sb + St::kTbLo, nn, s);
                }
            }
            // FP16X3, exact 16-bit v (unscaled operands): Ũᵀ to the state's scale.
            if (kScaled && v_exact) {
#pragma unroll
                for (int j = 0; j < 4; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) d[j][e] *= kVs;
            }
        };

        // Dᵀ = Ũᵀ + Sᵀ (−W)ᵀ and Yqᵀ = Sᵀ qᵀ, one pass over K. BF16X3: Sᵀ,
        // −W (and q where not exact) as values and remainders, the cross
        // products before the values' product.
        float d[4][4] = {}, yq[4][4] = {};
#if defined(GDN_HAVE_WGMMA)
        // WG: Sᵀ [−W | q]ᵀ in K / 16 wgmma, issued first; Ũᵀ on mma.sync
        // while they run, added after them.
        const uint32_t wqk = static_cast<uint32_t>(__cvta_generic_to_shared(wqk_at(sb)));
        if constexpr (WG) {
            // Step s's B: [−W; q] rows (lo: their remainders' atoms).
            auto b_wq = [&](int s, bool lo) {
                return mma::wgmma_desc_sw128(
                    wqk + (lo ? St::kWQKLo : 0) + (s / 4) * (lo ? St::kWQKLoAtoms : St::kWQKAtoms) + (s % 4) * 32,
                    16, 1024);
            };
            if constexpr (X3) {
                // BF16X3: Ũᵀ first, into d, and Sᵀ's values and remainders
                // converted 64 K values at a time (fewer registers live across
                // the wgmma); per step the cross products first: Sᵀ's remainder
                // · [−W | q], Sᵀ · [−W | q]'s remainders (−W's alone where q is
                // exact: N = 32), then the values' product.
                u_product(d);
#pragma unroll
                for (int kc = 0; kc < K / 64; ++kc) {
                    uint32_t sa[4][4], sl[4][4];
#pragma unroll
                    for (int s = 0; s < 4; ++s) acc_to_a<MODE>(S, 4 * kc + s, sa[s], &sl[s]);
                    mma::fence_operand(sa);
                    mma::fence_operand(sl);
                    mma::fence_operand(d);
                    mma::fence_operand(yq);
                    mma::wgmma_fence();
#pragma unroll
                    for (int s = 0; s < 4; ++s) {
                        mma::wgmma_n64<MODE, 0>(d, yq, sl[s], b_wq(4 * kc + s, false));
                        if (kq_lo)
                            mma::wgmma_n64<MODE, 0>(d, yq, sa[s], b_wq(4 * kc + s, true));
                        else
                            mma::wgmma_n32<MODE, 0>(d, sa[s], b_wq(4 * kc + s, true));
                        mma::wgmma_n64<MODE, 0>(d, yq, sa[s], b_wq(4 * kc + s, false));
                    }
                }
            } else {
                uint32_t sa[K / 16][4];
#pragma unroll
                for (int s = 0; s < K / 16; ++s) acc_to_a<MODE>(S, s, sa[s]);
                mma::fence_operand(sa);
                mma::fence_operand(d);
                mma::fence_operand(yq);
                mma::wgmma_fence();
#pragma unroll
                for (int s = 0; s < K / 16; ++s) mma::wgmma_n64<MODE, 0>(d, yq, sa[s], b_wq(s, false));
            }
            mma::wgmma_commit();
            if constexpr (X3) {
                mma::wgmma_wait_all();
                mma::fence_operand(d);
                mma::fence_operand(yq);
            } else {
                float u[4][4] = {};
                u_product(u);
                mma::wgmma_wait_all();
                mma::fence_operand(d);
                mma::fence_operand(yq);
#pragma unroll
                for (int j = 0; j < 4; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) d[j][e] += u[j][e];
            }
        }
#endif
        if constexpr (!WG) u_product(d);
#pragma unroll
        for (int s = 0; s < (WG ? 0 : K / 16); ++s) {  // WG: issued above
            uint32_t a[4], a_lo[4];
            acc_to_a<MODE>(S, s, a, X3 ? &a_lo : nullptr);
#pragma unroll
            for (int nn = 0; nn < 2; ++nn) {
                uint32_t r[4];
                const int at = ld_y + 16 * nn * LD + 16 * s;
                mma::ldmatrix_x4<false>(r, Wh + at);
                if constexpr (X3) {
                    uint32_t rl[4];
                    mma::ldmatrix_x4<false>(rl, Wl + at);
                    mma::mma16<MODE>(d[2 * nn], a_lo, {r[0], r[1]});
                    mma::mma16<MODE>(d[2 * nn + 1], a_lo, {r[2], r[3]});
                    mma::mma16<MODE>(d[2 * nn], a, {rl[0], rl[1]});
                    mma::mma16<MODE>(d[2 * nn + 1], a, {rl[2], rl[3]});
                }
                mma::mma16<MODE>(d[2 * nn], a, {r[0], r[1]});
                mma::mma16<MODE>(d[2 * nn + 1], a, {r[2], r[3]});
                mma::ldmatrix_x4<false>(r, kq + 32 * LD + at);
                if constexpr (X3) {
                    mma::mma16<MODE>(yq[2 * nn], a_lo, {r[0], r[1]});
                    mma::mma16<MODE>(yq[2 * nn + 1], a_lo, {r[2], r[3]});
                    if (kq_lo) {
                        uint32_t rl[4];
                        mma::ldmatrix_x4<false>(rl, kql + 32 * LD + at);
                        mma::mma16<MODE>(yq[2 * nn], a, {rl[0], rl[1]});
                        mma::mma16<MODE>(yq[2 * nn + 1], a, {rl[2], rl[3]});
                    }
                }
                mma::mma16<MODE>(yq[2 * nn], a, {r[0], r[1]});
                mma::mma16<MODE>(yq[2 * nn + 1], a, {r[2], r[3]});
            }
        }

        // FP16X3: Tβ and −W came at kTbScale: Dᵀ back to the state's scale.
        if constexpr (kScaled) {
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) d[j][e] *= 1.0f / kTbScale<MODE>;
        }

        // Dᵀ (value and remainder) and D2ᵀ as A operands. BF16X3: Dᵀ as three
        // terms, D2ᵀ built in the update, after the outputs (from d, fewer
        // registers live).
        uint32_t da[2][4], da_lo[2][4], d2a[2][4];  // not X3
        uint32_t da3[2][3][4];                      // X3
        if constexpr (X3) {
#pragma unroll
            for (int s = 0; s < 2; ++s) acc_to_a3<MODE>(d, s, da3[s]);
        } else {
            float d2[4][4];
            d2_of(d, d2, F);
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                acc_to_a<MODE>(d, s, da[s], &da_lo[s]);
                acc_to_a<MODE>(d2, s, d2a[s]);
            }
        }

        // Sᵀ = e^{γ_last} Sᵀ + D2ᵀ k (k raw: kf is in D2). BF16X3: D2ᵀ as three
        // terms, k (where not exact) as a value and its remainder: the term
        // pairs i + j <= 2, the smallest first.
        auto update = [&] {
            uint32_t d2a3[2][3][4];  // X3
            auto build_d2a3 = [&] {
                float d2[4][4];
                d2_of(d, d2, F);
#pragma unroll
                for (int s = 0; s < 2; ++s) acc_to_a3<MODE>(d2, s, d2a3[s]);
            };
            if constexpr (X3 && WG) build_d2a3();
            const float decay = F[0].z;
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) S[j][e] *= decay;
#if defined(GDN_HAVE_WGMMA)
            // WG: two wgmma, B = the k rows (MN-major: SBO = the stride between
            // 8-token atoms, LBO = between atoms of 64 K values); issued here,
            // waited for after the outputs (BF16X3: the term pairs i + j <= 2 of
            // D2ᵀ's three terms and k's two, the smallest first).
            if constexpr (WG) {
                auto upd = [&](const uint32_t(&a)[4], int s, bool lo) {
                    const uint64_t b = mma::wgmma_desc_sw128(wqk + (lo ? St::kWQKLo : 0) + (8 + 2 * s) * 1024,
                                                             St::kWQKAtoms, 1024);
                    if constexpr (K == 128)
                        mma::wgmma_n128<MODE, 1>(S, a, b);
                    else
                        mma::wgmma_n64<MODE, 1>(*reinterpret_cast<float(*)[4][4]>(&S[0]),
                                                *reinterpret_cast<float(*)[4][4]>(&S[4]), a, b);
                };
                mma::fence_operand(S);
                if constexpr (X3)
                    mma::fence_operand(*reinterpret_cast<uint32_t(*)[6][4]>(&d2a3[0][0][0]));
                else
                    mma::fence_operand(d2a);
                mma::wgmma_fence();
#pragma unroll
                for (int s = 0; s < 2; ++s) {
                    if constexpr (X3) {
                        if constexpr (R2) upd(d2a3[s][2], s, false);
                        if (kq_lo) {
                            if constexpr (R2) upd(d2a3[s][1], s, true);
                            upd(d2a3[s][0], s, true);
                        }
                        upd(d2a3[s][1], s, false);
                        upd(d2a3[s][0], s, false);
                    } else {
                        upd(d2a[s], s, false);
                    }
                }
                mma::wgmma_commit();
            }
#endif
            if constexpr (X3 && !WG) build_d2a3();
#pragma unroll
            for (int s = 0; s < (WG ? 0 : 2); ++s)  // WG: issued above
#pragma unroll
                for (int jj = 0; jj < NJ / 2; ++jj) {
                    uint32_t r[4];
                    const int at = ld_u + 16 * s * LD + 16 * jj;
                    mma::ldmatrix_x4<true>(r, kq + at);
                    if constexpr (X3) {
                        const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
                        if constexpr (R2) {
                            mma::mma16<MODE>(S[2 * jj], d2a3[s][2], b0);
                            mma::mma16<MODE>(S[2 * jj + 1], d2a3[s][2], b1);
                        }
                        if (kq_lo) {
                            uint32_t rl[4];
                            mma::ldmatrix_x4<true>(rl, kql + at);
                            const uint32_t l0[2] = {rl[0], rl[1]}, l1[2] = {rl[2], rl[3]};
                            if constexpr (R2) {
                                mma::mma16<MODE>(S[2 * jj], d2a3[s][1], l0);
                                mma::mma16<MODE>(S[2 * jj + 1], d2a3[s][1], l1);
                            }
                            mma::mma16<MODE>(S[2 * jj], d2a3[s][0], l0);
                            mma::mma16<MODE>(S[2 * jj + 1], d2a3[s][0], l1);
                        }
                        mma::mma16<MODE>(S[2 * jj], d2a3[s][1], b0);
                        mma::mma16<MODE>(S[2 * jj + 1], d2a3[s][1], b1);
                        mma::mma16<MODE>(S[2 * jj], d2a3[s][0], b0);
                        mma::mma16<MODE>(S[2 * jj + 1], d2a3[s][0], b1);
                    } else {
                        mma::mma16<MODE>(S[2 * jj], d2a[s], {r[0], r[1]});
                        mma::mma16<MODE>(S[2 * jj + 1], d2a[s], {r[2], r[3]});
                    }
                }
        };

        // Oᵀ = e^γ qf Yqᵀ + Dᵀ Pᵀ, then the outputs of the chunk's tokens.
        auto outputs = [&] {
            // Each token's column of Oᵀ times a per-token factor of F (f_of).
            auto scale_tokens = [&](auto f_of) {
#pragma unroll
                for (int j = 0; j < 4; ++j)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float f = f_of(F[8 * j + 2 * tq + e]);
                        yq[j][e] *= f;
                        yq[j][2 + e] *= f;
                    }
            };
            scale_tokens([](const float4& x) { return x.y; });
            // P is lower triangular (the prep writes the zeros): tokens 0..15
            // (tiles 0, 1) take only the first 16-token step.
#pragma unroll
            for (int s = 0; s < 2; ++s)
#pragma unroll
                for (int nn = s; nn < 2; ++nn) {
                    if constexpr (X3)
                        small_product3(yq, da3[s], 3, sb + St::kP, sb + St::kPLo, sb + St::kPLo2, nn, s);
                    else
                        small_product(yq, da[s], da_lo[s], true, sb + St::kP, sb + St::kPLo, nn, s);
                }
            if constexpr (kFp16x3QfLate<MODE>)  // q's factor, last (kernels.hpp)
                scale_tokens([](const float4& x) { return x.w; });
            const int64_t tok = cur.cs + 2 * tq;
            if (norm_pass) {
                store_tile(w.O + ((int64_t(cur.row()) + 2 * tq) * o_ld + o_col), o_ld, yq, tq, L);
            } else if (out_rows && L == kChunk) {
                const int64_t at = cur.cs * o_ld + (o_col - g);  // token 0, the warp's column 0
                if (p.out_dt == GDN_DTYPE_BF16)
                    store_tile_rows(static_cast<__nv_bfloat16*>(p.out) + at, o_ld, yq, ob, lane);
                else
                    store_tile_rows(static_cast<__half*>(p.out) + at, o_ld, yq, ob, lane);
            } else if (p.out_dt == GDN_DTYPE_BF16)
                store_tile(static_cast<__nv_bfloat16*>(p.out) + (tok * o_ld + o_col), o_ld, yq, tq, L);
            else if (p.out_dt == GDN_DTYPE_F16)
                store_tile(static_cast<__half*>(p.out) + (tok * o_ld + o_col), o_ld, yq, tq, L);
            else
                store_tile(static_cast<float*>(p.out) + (tok * o_ld + o_col), o_ld, yq, tq, L);
        };

        // The state's chain first, so that the outputs' products and stores
        // fill its latency; BF16X3 the other way round (at K = 128 the update
        // first keeps more registers live: 48-60 bytes spilled instead of 4).
        if constexpr (X3 && !WG) {
            outputs();
            update();
        } else {
            update();
            outputs();
#if defined(GDN_HAVE_WGMMA)
            if constexpr (WG) {  // the update's wgmma
                mma::wgmma_wait_all();
                mma::fence_operand(S);
            }
#endif
        }

        if constexpr (TS) {
            // A chunk that ends a block of its sequence or the sequence: the
            // state after it to the slot its last token names (-1: none).
            const int64_t end = cur.cs + L;
            if (end == cur_end || (end - seq_begin(p, cur.n)) % GDN_STATE_BLOCK == 0) {
                const int32_t ts = p.token_state_indices[end - 1];
                if (ts >= 0) store_to(slot_heads(ts), false);
            }
        }
        if (nxt.n != cur.n) {  // the sequence's last chunk in this window
            if constexpr (!TS)
                store_state(cur.n, false);
            else if (cur.cs + L < cur_end)  // on in the next window
                store_to(w.carry_out, false);
            if (nxt.n >= 0) {
                load_state(nxt);
                cur_end = scan::seq_end_in<SLICED>(p, nxt.n, win);
            }
        }
        if (nxt.n < 0) break;
        block_barrier();  // the next stage is loaded and its operands built
        cur = nxt;
    }
}

template <int K, int NCOL, int IN_BYTES, ScanMode MODE, int STAGES>
cudaError_t launch(const Params& p, const ChunkScratch& w, const Window& win, int lanes,
                   bool zero_empty, cudaStream_t stream, bool overlap) {
    const dim3 grid(unsigned(int64_t(p.G) * p.V / NCOL), unsigned(p.Hk), unsigned(lanes));
    const size_t smem = policy::cuda_scan_mma_smem_bytes(K, NCOL, STAGES, kStageRows<MODE, IN_BYTES>);
    if (p.token_state_indices) {
        if (win.slice) return cudaErrorInvalidValue;  // (the backend never slices them)
        return launch_kernel(chunk_scan_mma_kernel<K, NCOL, IN_BYTES, MODE, STAGES, false, true>, grid,
                             dim3(2 * NCOL + 32), smem, stream, overlap, p, w, win.begin, win.end, 0,
                             zero_empty ? 1 : 0);
    }
    if (win.slice)
        return launch_kernel(chunk_scan_mma_kernel<K, NCOL, IN_BYTES, MODE, STAGES, true>, grid,
                             dim3(2 * NCOL + 32), smem, stream, overlap, p, w, win.begin, win.end,
                             win.slice, zero_empty ? 1 : 0);
    return launch_kernel(chunk_scan_mma_kernel<K, NCOL, IN_BYTES, MODE, STAGES, false>, grid,
                         dim3(2 * NCOL + 32), smem, stream, overlap, p, w, win.begin, win.end, win.slice,
                         zero_empty ? 1 : 0);
}

// The register-state scan is built for policy::kCudaScanMmaColumns columns
// per block only (the width dispatch gives it), at K = 64 and 128, with 3 or
// 4 stages of loaded rows (policy::cuda_scan_mma_stages: the caller's choice
// for the device; set_attributes_in raised the limit of those that fit).
template <int IN_BYTES, ScanMode MODE>
cudaError_t launch_in(const Params& p, const ChunkScratch& w, const Window& win, int ncol,
                      int stages, int lanes, bool zero_empty, cudaStream_t stream, bool overlap) {
    constexpr int NCOL = policy::kCudaScanMmaColumns;
    if (ncol != NCOL || p.V % NCOL != 0 || (stages != 3 && stages != 4) || lanes < 1 ||
        lanes > 65535)
        return cudaErrorInvalidValue;
    if (p.K == 64)
        return stages == 4 ? launch<64, NCOL, IN_BYTES, MODE, 4>(p, w, win, lanes, zero_empty, stream, overlap)
                           : launch<64, NCOL, IN_BYTES, MODE, 3>(p, w, win, lanes, zero_empty, stream, overlap);
    if (p.K == 128)
        return stages == 4 ? launch<128, NCOL, IN_BYTES, MODE, 4>(p, w, win, lanes, zero_empty, stream, overlap)
                           : launch<128, NCOL, IN_BYTES, MODE, 3>(p, w, win, lanes, zero_empty, stream, overlap);
    return cudaErrorInvalidValue;
}

template <int IN_BYTES, ScanMode MODE>
cudaError_t set_attributes_in(size_t smem_limit) {
    constexpr int NCOL = policy::kCudaScanMmaColumns;
    auto entry = [](auto kernel, int K, int stages) {
        return std::pair<const void*, size_t>{reinterpret_cast<const void*>(kernel),
                                              policy::cuda_scan_mma_smem_bytes(K, NCOL, stages,
                                                                               kStageRows<MODE, IN_BYTES>)};
    };
    for (auto [kernel, bytes] : {entry(&chunk_scan_mma_kernel<64, NCOL, IN_BYTES, MODE, 3, false>, 64, 3),
                                 entry(&chunk_scan_mma_kernel<64, NCOL, IN_BYTES, MODE, 4, false>, 64, 4),
                                 entry(&chunk_scan_mma_kernel<128, NCOL, IN_BYTES, MODE, 3, false>, 128, 3),
                                 entry(&chunk_scan_mma_kernel<128, NCOL, IN_BYTES, MODE, 4, false>, 128, 4),
                                 entry(&chunk_scan_mma_kernel<64, NCOL, IN_BYTES, MODE, 3, true>, 64, 3),
                                 entry(&chunk_scan_mma_kernel<64, NCOL, IN_BYTES, MODE, 4, true>, 64, 4),
                                 entry(&chunk_scan_mma_kernel<128, NCOL, IN_BYTES, MODE, 3, true>, 128, 3),
                                 entry(&chunk_scan_mma_kernel<128, NCOL, IN_BYTES, MODE, 4, true>, 128, 4),
                                 entry(&chunk_scan_mma_kernel<64, NCOL, IN_BYTES, MODE, 3, false, true>, 64, 3),
                                 entry(&chunk_scan_mma_kernel<64, NCOL, IN_BYTES, MODE, 4, false, true>, 64, 4),
                                 entry(&chunk_scan_mma_kernel<128, NCOL, IN_BYTES, MODE, 3, false, true>, 128, 3),
                                 entry(&chunk_scan_mma_kernel<128, NCOL, IN_BYTES, MODE, 4, false, true>, 128, 4)})
        if (const cudaError_t e = scan::raise_smem_limit(kernel, bytes, smem_limit)) return e;
    return cudaSuccess;
}

// Instantiated in chunk_scan_bf16.cu, chunk_scan_fp16.cu, chunk_scan_bf16x3.cu
// and chunk_scan_fp16x3.cu (launch_in takes
// the stage count, which chunk_scan.cuh's GDN_SCAN_INSTANCES does not).
#define GDN_SCAN_MMA_INSTANCES(EXTERN, IN_BYTES, MODE)                                              \
    EXTERN template cudaError_t launch_in<IN_BYTES, MODE>(const Params&, const ChunkScratch&,      \
                                                          const Window&, int, int, int, bool,     \
                                                          cudaStream_t, bool);                     \
    EXTERN template cudaError_t set_attributes_in<IN_BYTES, MODE>(size_t);
GDN_SCAN_MMA_INSTANCES(extern, 2, ScanMode::kBf16)
GDN_SCAN_MMA_INSTANCES(extern, 4, ScanMode::kBf16)
GDN_SCAN_MMA_INSTANCES(extern, 2, ScanMode::kFp16)
GDN_SCAN_MMA_INSTANCES(extern, 4, ScanMode::kFp16)
GDN_SCAN_MMA_INSTANCES(extern, 2, ScanMode::kBf16x3)
GDN_SCAN_MMA_INSTANCES(extern, 4, ScanMode::kBf16x3)
GDN_SCAN_MMA_INSTANCES(extern, 2, ScanMode::kFp16x3)
GDN_SCAN_MMA_INSTANCES(extern, 4, ScanMode::kFp16x3)

}  // namespace scan_mma
}  // namespace gdn::cuda
