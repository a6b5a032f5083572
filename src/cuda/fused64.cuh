// The fused BF16 recurrence (docs/perf-notes.md v40-v44): the whole chunked
// form in ONE kernel with chunks of C = 64, no scratch in global memory. A
// cluster of two CTAs per (sequence, value head), CTA r the value columns
// 64 r.., 512 threads each (QUAD: four, two such pairs, every CTA preparing
// every fourth chunk, perf-notes v98):
//  - warps 0-3 (the state warpgroup, setmaxnreg 216) carry Sᵀ (64 columns x
//    K = 128, FP32) in registers across the chunks: [S0ᵀkᵀ | Yqᵀ] = Sᵀ [k | q]ᵀ
//    (wgmma m64n128k16), Dᵀ = (vᵀ − e^γ ⊙ S0ᵀkᵀ) (T diag(β))ᵀ (T on the chain,
//    as FlashInfer's kernel has it), then Sᵀ = e^{γ_last} Sᵀ + D2ᵀ k and
//    Oᵀ = e^γ scale Yqᵀ + Dᵀ Pᵀ as one batch of wgmma (D's fragments as A);
//  - warps 4-11 (two prep warpgroups, 136 registers) prepare every other
//    chunk of the sequence (CTA r the chunks j = r mod 2), both warpgroups on
//    one chunk: γ, k·kᵀ and q·kᵀ on wgmma, A and P, T = (I + A)^{-1} by
//    16 -> 32 -> 64 blocks of its inverse (the merges on TF32 mma.sync),
//    T diag(β) and P as one 16-bit
//    term each in atom columns; the output slot goes to the peer CTA by a
//    bulk copy (thread 448, off the prep's path);
//  - warps 12-13 (24 registers) copy chunk j's k, q, v rows (TMA, five boxes
//    in 128-byte-swizzled atoms) and g, β (cp.async; GX: loaded, transformed
//    and stored as f32) into input slot j % 4.
// Two rings: four input slots (k, q, v, g, β; chunk j in slot j % 4) and two
// output slots (T diag(β), P, F; slot j % 2, the preparing CTA's rank), so a
// prep waits for a free output slot only before its last stores. mbarriers
// between the roles (in_loaded, in_empty, out_full, out_empty); no cluster
// barrier per chunk.
//
// BAL (bench/fused64_probe.cu --balance): warpgroup 1 forms Pᵀ = k·qᵀ (stored
// as P by stmatrix.trans), so that A's and Pᵀ's live tiles balance the four
// schedulers; the exponentials without the denormal guard; T's diagonal
// blocks from 16-byte row loads (perf-notes v44; same bits, slower).
// PROF: the clock64 marks (the probe's --phases) and per-chunk events
// (--trace), each behind a run-time flag of Args (off in the library). The
// library takes the PROF instances too: with the marks compiled out, ptxas
// spills 56 bytes inside the 136-register prep's A/P loop (with them, 20
// bytes of the marks' own cold state), and the kernel is ~20% slower at long
// single sequences (1.87 against 1.52 ms at 32K on the H200,
// docs/perf-notes.md v47); the flags are off and the same bits come out.
//
// The kernel runs on what Params describes, for the problems the dispatch
// gives it: BF16 q/k/v with K = V = 128, 16-byte aligned bases and strides
// that are multiples of 8 elements (TMA), g and β in f32 or bf16/f16 with
// the raw gate and β from logits (applied by the load warps, Args.gate_xform),
// the q/k L2 norm (NORM: per-token factors, perf-notes v48), an f32/bf16/f16
// output (OUT, a template parameter: a run-time branch around a wgmma makes
// ptxas serialize every wgmma of the kernel, C7520), a [K][V] or [V][K] state
// pool with slot indices and zero starts. The gated RMSNorm of the output
// (GDN_FLAG_OUTPUT_NORM) is a kernel of its own after this one (fused64.cu,
// perf-notes v64).
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <type_traits>

#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/mma.cuh"

#ifndef GDN_FUSED64_REG_STATE
#define GDN_FUSED64_REG_STATE 216
#endif
#ifndef GDN_FUSED64_REG_LOAD
#define GDN_FUSED64_REG_LOAD 24
#endif
#ifndef GDN_FUSED64_REG_PREP
#define GDN_FUSED64_REG_PREP 136
#endif
// The solve's merges (level 2, Z, level 3 of T's blocks) on TF32 everywhere (0, the
// default), on FP16 operands in the instances with the q/k L2 norm (1), or in every instance
// (2, perf-notes v113). The norm bounds A's entries by β (|k̂_t·k̂_i| <= 1), so T's stay in
// FP16's range; with the caller's keys T_ti scales by |k_i| / |k_t|, which nothing bounds, so
// 2 is an experiment only. 1 passed the GPU tests (docs/cuda.md, runs 304-305) and is faster
// in most processes, but its time varied from process to process (1.48-1.77 ms at 32K against
// TF32's steady 1.58-1.60, H100): off until that is understood (perf-notes v114).
#ifndef GDN_FUSED64_F16_SOLVE
#define GDN_FUSED64_F16_SOLVE 0
#endif

namespace gdn::cuda::fused64 {
// The probe's build (GDN_FUSED64_PROFILE) gets its own symbols: its kernels
// and Args would otherwise share names with the library's instances it also
// links, with other bodies.
#ifdef GDN_FUSED64_PROFILE
inline namespace profiled {
#endif

constexpr ScanMode M = ScanMode::kBf16;
constexpr int C = 64, K = 128, NC = 64;

struct Args {
    // k and q as [tokens][Hk][128], v as [tokens][Hv][128] (bf16, the caller's strides),
    // boxes of 64 values x 1 head x 64 tokens with the 128-byte swizzle of the atoms.
    CUtensorMap tk, tq, tv;
    // The same rows for a sequence's last, partial chunk (cp.async); element strides.
    const __nv_bfloat16 *q, *k, *v;
    int64_t q_tok, q_head, k_tok, k_head, v_tok, v_head;
    const void *g, *beta;  // gate_dt elements
    int64_t g_tok, g_head, b_tok, b_head;
    // gate_xform 0: f32 g and β as stored (cp.async). 1 (the GX instances): the load warps
    // read g and β of gate_dt, g = −e^{A_log} softplus(a + dt_bias) where gate_raw,
    // β = sigmoid(b) where beta_logits, and store them as f32.
    int32_t gate_xform, gate_dt, gate_raw, beta_logits;
    const float *A_log, *dt_bias;
    float l2eps;  // NORM: q̂ = q / sqrt(q·q + l2eps), k̂ alike
    void* out;  // OUT elements
    int64_t o_tok, o_head;
    // 16-bit OUT: the base 8-byte aligned and both strides multiples of 4 elements, so the
    // chain writes a token's four columns as one 8-byte store (otherwise one element each).
    int32_t out_vec;
    float* state;
    int64_t slot_stride;
    // Grid row n's tokens: [cu[n], cu[n + cu_end]); null cu: [n equal_len, (n + 1) equal_len).
    // cu_end is 1 with the caller's cu_seqlens, N with fused64_order_kernel's arrays (a batch
    // whose grid takes several waves, its rows longest sequence first: cu the rows' starts,
    // then their ends, and state_indices and start_from_zero permuted alike), whose rows
    // compute the bits of the sequences they run.
    const int32_t* cu;
    int32_t cu_end;
    int64_t equal_len;
    const int32_t* state_indices;
    const uint8_t* start_from_zero;
    // GDN_FLAG_TOKEN_STATES with GDN_FLAG_BLOCK_STATES (null otherwise): per token, the slot
    // that receives the state after it, read at each chunk's last token (every chunk of
    // C = GDN_STATE_BLOCK ends a block or the sequence); the sequence's own slot is then
    // only read.
    const int32_t* token_states;
    int32_t N, Hk, Hv, G, grouped, state_kv;
    // 1: launched as the QUAD instances, a cluster of four CTAs per (sequence, value head):
    // two pairs that each carry the whole state (the same bits), every CTA preparing every
    // fourth chunk, so twice the preps in flight where the heads leave SMs idle (perf-notes
    // v98). The pair q = rank / 2 writes the output rows of the chunks j with j % 2 == q,
    // pair 0 the final state. (The kernel reads QUAD; launch_args reads this.)
    int32_t quad;
    float scale;
    int32_t phases;  // PROF: clock64 marks in CTA 0
    int32_t trace;   // PROF: per-chunk event times in CTAs 0 and 1 of sequence 0 (clock64)
};

// Input slot (bytes from a 1024-aligned slot start): the k and q atoms (2 kc x 16 atoms:
// 0..7 the k tokens, 8..15 the q tokens), v's atom column (this CTA's 64 columns), g and β.
constexpr int kWQ = 0;
constexpr int kWQkc = 16 * 1024;
constexpr int kK = kWQ, kKc = kWQkc;
constexpr int kV = 2 * kWQkc;
constexpr int kG = kV + 8192, kB = kG + 64 * 4;
// NORM: the k and q factors, kf_t = 1 / sqrt(k_t·k_t + eps) at kN, qf_t (the same of q,
// without the scale) at kN + 256, formed by the prep from the slot's rows.
constexpr int kN = kB + 64 * 4;
constexpr int kRIn = (kN + 2 * 64 * 4 + 1023) / 1024 * 1024;
static_assert(kRIn == 41 * 1024, "the norms fit the slot's tail");
// Output slot (what the chain reads of a prep's work, one block for the bulk copy):
// T diag(β)'s atoms (8 KB), P as an atom column (rows t, columns i, 8 KB), F (float4 [64]).
constexpr int kOTB = 0, kOP = 8192, kOF = 16384;
constexpr int kROut = kOF + 64 * 16;
constexpr int kROut0 = 4 * kRIn;
// The prep's scratch: A (then T in f32 over it), Z; then the mbarriers in_loaded[4],
// in_empty[4], out_full[2], out_empty[2].
constexpr int kLDA = 68;
static_assert(kLDA % 4 == 0, "BAL reads A's rows by 16-byte loads");
constexpr int kRAs = kROut0 + 2 * kROut;
constexpr int kLDZ = 36;
constexpr int kRZs = kRAs + 64 * kLDA * 4;
constexpr int kRBar = kRZs + 32 * kLDZ * 4;
constexpr int kRSmem = kRBar + 128 + 1024;
static_assert(kROut % 1024 == 0 && kROut0 % 1024 == 0, "the output slots' atoms are 1024-aligned");
static_assert(kRSmem <= 232448, "the rings fit the opt-in shared memory");

__device__ unsigned long long g_dbg[12][16];
// --trace: for CTAs 0 and 1 of sequence 0 and chunks < 256, the cycles since the CTA's start
// at six events: 0 the load warps pass `in_empty`, 1 their copies issued, 2 the prep starts
// (its copies landed), 3 the bulk copy to the peer issued, 4 the state warps pass `out_full`
// and `in_loaded`, 5 they release the slots.
constexpr int kTraceChunks = 256;
// The probe's build with GDN_FUSED64_CHAIN_MARKS traces three more events of the chain (6 its
// first wgmma stage done, 7 its second, 8 the chunk's end) and takes marks 8-10 (below).
#if defined(GDN_FUSED64_PROFILE) && defined(GDN_FUSED64_CHAIN_MARKS)
constexpr int kTraceEvents = 9;
#else
constexpr int kTraceEvents = 6;
#endif
__device__ long long g_trace[2][kTraceEvents][kTraceChunks];

__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
}
// e^x as __expf computes it (x · log2 e, then ex2.approx) but flushing denormal results to
// zero: no guard around MUFU.EX2, and volatile, so that it runs unconditionally and a select
// masks it, not a branch (BAL, perf-notes v44).
__device__ __forceinline__ float exp_ftz(float x) {
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x * 1.44269504088896341f));
    return y;
}
// A named barrier of 128 threads, in the unaligned form: `bar.sync` is
// `barrier.sync.aligned`, which PTX allows only where every thread of the CTA
// executes the same barrier instruction (block_barrier's comment,
// src/cuda/device_common.cuh); the other roles never reach this one.
__device__ __forceinline__ void wg_bar(int id) { asm volatile("barrier.sync %0, 128;\n" ::"r"(id) : "memory"); }

// mbarriers: mbar_init, mbar_arrive, mbar_arrive_tx, mbar_wait (src/cuda/device_common.cuh).
// A head's two column halves as a cluster of two CTAs. This CTA's shared address as the
// peer's (mapa), a remote arrive, `count` remote arrivals that also expect `bytes` of a bulk
// copy, and the bulk copy from this CTA's shared memory into the peer's, which completes
// them on the peer's mbarrier.
__device__ __forceinline__ uint32_t peer_addr(uint32_t a, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}
// A remote arrive with the default semantics (release at CTA scope), as CUTLASS's
// ClusterBarrier::arrive(cta_id) has it: the release at cluster scope waited for the chunk's
// output stores to reach global memory (ERRBAR, 8% of the state warps' time, run 153).
__device__ __forceinline__ void mbar_arrive_peer_cta(uint32_t b) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(b) : "memory");
}
__device__ __forceinline__ void mbar_arrive_tx_peer(uint32_t b, uint32_t bytes, uint32_t count) {
    asm volatile(
        "mbarrier.expect_tx.relaxed.cluster.shared::cluster.b64 [%0], %1;\n"
        "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0], %2;\n" ::"r"(b),
        "r"(bytes), "r"(count)
        : "memory");
}
__device__ __forceinline__ void bulk_to_peer(uint32_t dst, uint32_t src, uint32_t bytes, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
        "cp.async.bulk.commit_group;\n" ::"r"(dst),
        "r"(src), "r"(bytes), "r"(bar)
        : "memory");
}
// TMA: a box of the tensor map at (x, head, token) into shared memory, completing on bar.
__device__ __forceinline__ void tma_3d(void* dst, const CUtensorMap* map, int x, int hd, int t, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
            smem_addr(dst)),
        "l"(map), "r"(x), "r"(hd), "r"(t), "r"(smem_addr(bar))
        : "memory");
}
__device__ __forceinline__ void tma_prefetch_3d(const CUtensorMap* map, int x, int hd, int t) {
    asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global [%0, {%1, %2, %3}];\n" ::"l"(map), "r"(x), "r"(hd), "r"(t)
                 : "memory");
}
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The probe built with -DGDN_PROBE_HANG_REPORT replaces device_common.cuh's mbar_wait.
#if defined(GDN_FUSED64_PROFILE) && defined(GDN_PROBE_HANG_REPORT)
// Debugging (the probe built with -DGDN_PROBE_HANG_REPORT): a wait that times out records
// where (the first one) and returns; the results are then garbage.
__device__ unsigned int g_hang[6];
__device__ __forceinline__ void mbar_wait(uint64_t* b, int parity) {
    for (unsigned n = 0;; ++n) {
        uint32_t ok;
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(ok) : "r"(smem_addr(b)), "r"(parity) : "memory");
        if (ok) return;
        if (n > (1u << 21)) {
            if (atomicAdd(&g_hang[0], 1u) == 0) {
                g_hang[1] = blockIdx.x, g_hang[2] = blockIdx.y, g_hang[3] = threadIdx.x;
                g_hang[4] = (smem_addr(b) & 0xff) / 8, g_hang[5] = parity;
            }
            return;
        }
    }
}
#endif

// x (64 x 64, warp w: rows 16 w.., tiles of 8 columns) += A · Bᵀ, both from shared memory
// (K-major atoms, 128-byte swizzle): wgmma m64n64k16 with A by descriptor.
__device__ __forceinline__ void wgmma_ss_n64(float (&x)[8][4], uint64_t da, uint64_t db) {
#if defined(GDN_HAVE_WGMMA)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"
        "%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(x[0][0]), "+f"(x[0][1]), "+f"(x[0][2]), "+f"(x[0][3]), "+f"(x[1][0]), "+f"(x[1][1]),
          "+f"(x[1][2]), "+f"(x[1][3]), "+f"(x[2][0]), "+f"(x[2][1]), "+f"(x[2][2]), "+f"(x[2][3]),
          "+f"(x[3][0]), "+f"(x[3][1]), "+f"(x[3][2]), "+f"(x[3][3]), "+f"(x[4][0]), "+f"(x[4][1]),
          "+f"(x[4][2]), "+f"(x[4][3]), "+f"(x[5][0]), "+f"(x[5][1]), "+f"(x[5][2]), "+f"(x[5][3]),
          "+f"(x[6][0]), "+f"(x[6][1]), "+f"(x[6][2]), "+f"(x[6][3]), "+f"(x[7][0]), "+f"(x[7][1]),
          "+f"(x[7][2]), "+f"(x[7][3])
        : "l"(da), "l"(db));
#else
    (void)x, (void)da, (void)db;
#endif
}

// Byte offset of (token t, column x) in atoms of 8 token rows x 64 16-bit
// columns, 128-byte swizzle, atoms along t contiguous (1024 B), kc stride kcs:
// what a TMA box of 64 columns x 64 tokens with CU_TENSOR_MAP_SWIZZLE_128B
// writes at a 1024-aligned address (row t at 128 t, 16-byte piece p at p ^ (t & 7)).
__device__ __forceinline__ int atom_at(int t, int x, int kcs) {
    return (x >> 6) * kcs + (t >> 3) * 1024 + (t & 7) * 128 + ((((x & 63) >> 3) ^ (t & 7)) << 4) + (x & 7) * 2;
}

// An output element, rounded to nearest (even) from the FP32 value.
template <gdn_dtype_t OUT>
__device__ __forceinline__ void store_out_elem(void* base, int64_t i, float x) {
    if constexpr (OUT == GDN_DTYPE_F32)
        static_cast<float*>(base)[i] = x;
    else if constexpr (OUT == GDN_DTYPE_BF16)
        static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x);
    else
        static_cast<__half*>(base)[i] = __float2half_rn(x);
}

// NORM: q and k L2-normalized in the kernel (GDN_FLAG_QK_L2NORM) as per-token factors
// (perf-notes v48, v96): the prep takes kf_t = 1 / sqrt(k_t·k_t + eps) from its k·kᵀ's
// diagonal (warpgroup 0) and qf_t from the diagonal of each warp's 16 x 16 block of q·qᵀ on
// mma.sync (warpgroup 1, before its q·kᵀ product), and folds
// them into A (β_t kf_t kf_i), P (scale qf_t), the output slot's diag(kf) T diag(β) (so the
// chain's D is kf ⊙ D) and F (e^γ scale qf_t, e^γ kf_t): the chain and every wgmma operand
// are those of the raw rows, the chain's code unchanged.
// GX: g and β through the load warps' registers (Args.gate_xform; its own instances, so
// that the others keep the measured code of the plain cp.async path).
// TS: GDN_FLAG_BLOCK_STATES (Args.token_states): the state after each chunk to the slot its
// last token names. Its own instances: with a run-time branch instead, ptxas spilled 16-60
// bytes more in every instance of the plain call (perf-notes v93).
// The probe's build may split the chain's work at its three wgmma waits (marks 8, 9, 10) and
// trace its stages (events 6, 7, 8; bench/fused64_probe.cu built with GDN_FUSED64_CHAIN_MARKS,
// perf-notes v115); the library's instances never have these (the macros expand to nothing).
#if defined(GDN_FUSED64_PROFILE) && defined(GDN_FUSED64_CHAIN_MARKS)
#define GDN_FUSED64_CHAIN_MARK(n) mark(n)
#define GDN_FUSED64_CHAIN_EV(e, j) \
    if (tid == 0) ev(e, j)
#else
#define GDN_FUSED64_CHAIN_MARK(n)
#define GDN_FUSED64_CHAIN_EV(e, j)
#endif
template <bool BAL, bool PROF, gdn_dtype_t OUT, bool NORM = false, bool GX = false, bool TS = false,
          bool QUAD = false>
__global__ void __launch_bounds__(512, 1) fused64_kernel(const __grid_constant__ Args a) {
#if defined(GDN_HAVE_WGMMA)
    static_assert(OUT == GDN_DTYPE_F32 || OUT == GDN_DTYPE_BF16 || OUT == GDN_DTYPE_F16, "the output dtypes");
    static_assert(!(BAL && NORM), "the balanced prep (the probe's --balance) takes no norm");
    // The output norm's kernel (fused64.cu), launched as this grid's programmatic
    // dependent, may take the SMs this grid leaves free and wait there.
    allow_dependent_launch();
    // GDN_FLAG_PDL: this grid is a programmatic dependent of the caller's
    // work ahead; nothing is read or written before it is complete (a no-op
    // in an ordinary launch).
    grid_dependency_wait();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* const sm =
        smem_raw + ((0u - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw))) & 1023u);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tq = lane & 3;
    const bool prof = PROF && a.phases && blockIdx.x == 0 && blockIdx.y == 0 && lane == 0;
    long long last = PROF ? clock64() : 0;
    const long long t_start = last;
    const bool tracing = PROF && a.trace && blockIdx.x < 2 && blockIdx.y == 0;
    auto ev = [&](int e, int j) {
        if constexpr (PROF)
            if (tracing && j < kTraceChunks) g_trace[blockIdx.x][e][j] = clock64() - t_start;
        (void)e, (void)j, (void)tracing, (void)t_start;
    };
    auto mark = [&](int ph) {
        if constexpr (PROF)
            if (prof) {
                const long long c = clock64();
                atomicAdd(&g_dbg[warp][ph], (unsigned long long)(c - last));
                last = c;
            }
        (void)ph, (void)prof, (void)last;
    };
    // P CTAs a cluster (2, or 4 with quad), rank r the columns 64 (r % 2).. of head h.
    constexpr uint32_t P = QUAD ? 4u : 2u;
    constexpr bool F16S = GDN_FUSED64_F16_SOLVE == 2 || (GDN_FUSED64_F16_SOLVE == 1 && NORM);
    const uint32_t rank = blockIdx.x & (P - 1);
    const int h = int(blockIdx.x >> (QUAD ? 2 : 1)), c0 = int(rank & 1) * NC, n = blockIdx.y;
    const int kh = a.grouped ? h / a.G : h % a.Hk;
    const int64_t bos = a.cu ? int64_t(a.cu[n]) : int64_t(n) * a.equal_len;
    const int64_t eos = a.cu ? int64_t(a.cu[n + a.cu_end]) : int64_t(n + 1) * a.equal_len;
    const int nch = int((eos - bos + C - 1) / C);
    // A padding row (negative slot): nothing read or written. An empty sequence: nothing
    // either, unless it starts from zero; then it goes the whole way with no chunk, and the
    // chain writes its zero state. Both CTAs of the cluster return here or neither, before
    // the init's cluster barrier (the same slot, the same nch). (The chain reads the slot
    // again where it needs it; a loop of its own here for the zeros made ptxas spill in
    // every role.)
    // With token states an empty sequence has no token to name a slot, and its own slot is
    // only read: nothing at all.
    if ((a.state_indices ? a.state_indices[n] : n) < 0) return;
    if (nch == 0 && (TS || !(a.start_from_zero && a.start_from_zero[n] != 0))) return;
    // Chunk j's input slot (k, q, v, g, β) and output slot (the prep's T diag(β), P, F).
    auto stage = [&](int j) { return sm + (j & 3) * kRIn; };
    auto ostage = [&](int j) { return sm + kROut0 + (j & 1) * kROut; };
    // in_loaded[4], in_empty[4], out_full[2], out_empty[2].
    uint64_t* const bars = reinterpret_cast<uint64_t*>(sm + kRBar);
    auto bar_full = [&](int j) { return bars + 8 + (j & 1); };
    auto bar_loaded = [&](int j) { return bars + (j & 3); };
    auto par_full = [&](int j) { return (j >> 1) & 1; };
    auto par_loaded = [&](int j) { return (j >> 2) & 1; };
    {
        // in_loaded[s]: the load warps' threads (two warps: their copies' completion,
        // cp.async.mbarrier.arrive.noinc) and thread 0's expect_tx (or, for a partial chunk,
        // its plain arrival), and with gate_xform each load thread once more after its stores
        // of g and β; in_empty[s]: this CTA's state threads (the prep of chunk j has read the
        // slot before they pass out_full); out_full[o]: the preparing CTA's 256 prep threads
        // (a peer's: one arrive of count 256 with the bulk copy's bytes); out_empty[o]: for
        // chunk j + 2's prep, in the CTA that prepares it, once chunk j (in output slot
        // o = j % 2) is read: its state threads and a lane of each of the peers' state warps.
        constexpr int n_loaded = GX ? 64 + 1 + 64 : 64 + 1;
        if (tid == 0)
            for (int i = 0; i < 12; ++i) mbar_init(bars + i, i < 4 ? n_loaded : i < 8 ? 128 : i < 10 ? 256 : 128 + 4 * int(P - 1));
        // T diag(β)'s blocks above the diagonal are never written: zero them in both output
        // slots (the peer's copies carry its zeros) before the peer may copy into them.
        for (int i = tid; i < 2 * 8192 / 4; i += 512)
            reinterpret_cast<uint32_t*>(sm + kROut0 + (i / 2048) * kROut + kOTB)[i % 2048] = 0u;
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        cluster_sync_all();
    }
    // The state warpgroup takes the registers the prep warpgroups give back, each role's
    // first instruction (ptxas allocates a role's registers to the limit that dominates its
    // code).
    constexpr int kRegState = GDN_FUSED64_REG_STATE, kRegPrep = GDN_FUSED64_REG_PREP;
    constexpr int kRegLoad = GDN_FUSED64_REG_LOAD;
    // The CTA launches with 128 registers a thread (512 threads): the split must fit the
    // 512 x 128 the launch holds, or setmaxnreg.inc waits forever (run 130, at 384 threads
    // and 224 + 2 x 144). setmaxnreg is a whole warpgroup's: the load warps are four.
    static_assert(kRegState + 2 * kRegPrep + kRegLoad <= 4 * 128 && kRegState % 8 == 0 &&
                      kRegPrep % 8 == 0 && kRegLoad % 8 == 0 && kRegPrep > 128,
                  "setmaxnreg split");

    // Chunk j's rows into its input slot, from the load warps' 64 threads (lt their index).
    // A full chunk's k, q and v rows by TMA (thread 0, five boxes; v then in a swizzled
    // 64 x 64 atom column, read by atom_at). A sequence's last, partial chunk (L < 64) by
    // cp.async with zero fill instead, into the layout the boxes give: a box would bring the
    // rows past the sequence's end, the next sequence's (the tensor map's bound is the
    // batch's), which may be anything, NaN in a padding sequence, and a NaN times the
    // β = 0 or F.x = 0 that meets those rows is NaN. Zero rows keep every such product
    // zero. Thread 0 then arrives without the expect_tx (the count stays 64 + 1). g and β
    // always by cp.async, zero past the end.
    auto load = [&](int j, int lt) {
        unsigned char* st = stage(j);
        const int64_t cs = bos + int64_t(j) * C;
        const int L = int(eos - cs < C ? eos - cs : C);
        uint64_t* bar = bar_loaded(j);
        if (L == C) {
            if (lt == 0) {
                mbar_arrive_tx(bar, 5 * 8192);
                const int t0 = int(cs);
                tma_3d(st + kK, &a.tk, 0, kh, t0, bar);
                tma_3d(st + kK + kKc, &a.tk, 64, kh, t0, bar);
                tma_3d(st + kWQ + 8 * 1024, &a.tq, 0, kh, t0, bar);
                tma_3d(st + kWQ + 8 * 1024 + kWQkc, &a.tq, 64, kh, t0, bar);
                tma_3d(st + kV, &a.tv, c0, h, t0, bar);
                // The chunk after it into L2.
                if (cs + C < eos) {
                    tma_prefetch_3d(&a.tk, 0, kh, t0 + C), tma_prefetch_3d(&a.tk, 64, kh, t0 + C);
                    tma_prefetch_3d(&a.tq, 0, kh, t0 + C), tma_prefetch_3d(&a.tq, 64, kh, t0 + C);
                    tma_prefetch_3d(&a.tv, c0, h, t0 + C);
                }
            }
        } else {
            if (lt == 0) mbar_arrive(bar);
            // (Not unrolled: the load warps have 24 registers, and this is once a sequence.)
#pragma unroll 1
            for (int i = 0; i < 16; ++i) {
                const int id = lt + 64 * i, t = id >> 4, p = id & 15;
                const bool ok = t < L;
                const int64_t row = cs + t;
                cp_async16(st + kK + atom_at(t, 8 * p, kKc), ok ? a.k + row * a.k_tok + kh * a.k_head + 8 * p : a.k,
                           ok ? 16 : 0);
                cp_async16(st + kWQ + 8 * 1024 + atom_at(t, 8 * p, kWQkc),
                           ok ? a.q + row * a.q_tok + kh * a.q_head + 8 * p : a.q, ok ? 16 : 0);
            }
#pragma unroll 1
            for (int i = 0; i < 8; ++i) {
                const int id = lt + 64 * i, t = id >> 3, p = id & 7;
                const bool ok = t < L;
                cp_async16(st + kV + atom_at(t, 8 * p, 0), ok ? a.v + (cs + t) * a.v_tok + h * a.v_head + c0 + 8 * p : a.v,
                           ok ? 16 : 0);
            }
        }
        // (Two warps: a token's g and β each.)
        const int t = lt & 63;
        const bool ok = t < L;
        const int64_t gi = (cs + t) * a.g_tok + int64_t(h) * a.g_head, bi = (cs + t) * a.b_tok + int64_t(h) * a.b_head;
        if constexpr (!GX) {
            const float* g32 = static_cast<const float*>(a.g);
            const float* b32 = static_cast<const float*>(a.beta);
            cp_async4(st + kG + 4 * t, ok ? g32 + gi : g32, ok ? 4 : 0);
            cp_async4(st + kB + 4 * t, ok ? b32 + bi : b32, ok ? 4 : 0);
        } else {
            // Past the end: g = β = 0, as the zero fill (a raw gate of 0 is not a g of 0).
            float gv = 0.0f, bv = 0.0f;
            if (ok) {
                // (Plain loads, not load_float's __ldg: with those ptxas rescheduled this
                // instance's prep and chain, which run 170 measured without them.)
                const gdn_dtype_t dt = static_cast<gdn_dtype_t>(a.gate_dt);
                auto raw = [&](const void* b, int64_t i) {
                    return dt == GDN_DTYPE_F32 ? static_cast<const uint32_t*>(b)[i]
                                               : uint32_t(static_cast<const unsigned short*>(b)[i]);
                };
                gv = bits_to_float(raw(a.g, gi), dt), bv = bits_to_float(raw(a.beta, bi), dt);
                if (a.gate_raw) gv = gate_from_raw(gv, a.A_log[h], a.dt_bias[h]);
                if (a.beta_logits) bv = sigmoid(bv);
            }
            reinterpret_cast<float*>(st + kG)[t] = gv;
            reinterpret_cast<float*>(st + kB)[t] = bv;
        }
        cp_async_commit();
    };

    if (warp >= 12) {
        // ------------------------------------------------------------ load
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegLoad) : "memory");
        if (warp >= 14) {
            // One thread hands this CTA's prepared chunks to the peers (the bulk copy of the
            // output slot and each peer's out_full arrivals), off the prep's path: issued from
            // a prep thread, it held the prep warpgroups at their next barrier (~0.25 µs a
            // chunk, run 151). It passes every phase of its output slot's out_full in order
            // (quad: the slot's chunks j + 2 between two of this CTA's come from a peer; a
            // parity wait only tells adjacent phases apart), and chunk j + 2's phase needs
            // every CTA's chain to have read chunk j, so each wait is unambiguous.
            if (tid == 448) {
                for (int j = int(rank & 1); j < nch; j += 2) {
                    mbar_wait(bar_full(j), par_full(j));
                    if constexpr (QUAD) {
                        if (uint32_t(j) % P != rank) continue;
                        const uint32_t fb = smem_addr(bar_full(j)), src = smem_addr(ostage(j));
#pragma unroll
                        for (uint32_t d = 1; d < P; ++d) {
                            const uint32_t pb = peer_addr(fb, rank ^ d);
                            mbar_arrive_tx_peer(pb, kROut, 256);
                            bulk_to_peer(peer_addr(src, rank ^ d), src, kROut, pb);
                        }
                    } else {
                        const uint32_t pb = peer_addr(smem_addr(bar_full(j)), rank ^ 1u);
                        const uint32_t src = smem_addr(ostage(j));
                        mbar_arrive_tx_peer(pb, kROut, 256);
                        bulk_to_peer(peer_addr(src, rank ^ 1u), src, kROut, pb);
                    }
                    ev(3, j);
                }
                asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
            }
            return;
        }
        // Chunk j into input slot j % 4 once chunk j − 4 is read by this CTA's state warps;
        // in_loaded completes when every thread's copies have landed
        // (cp.async.mbarrier.arrive.noinc) and, for a full chunk, the TMA's bytes.
        // (Warps 12 and 13.)
        for (int j = 0; j < nch; ++j) {
            mbar_wait(bars + 4 + (j & 3), ((j >> 2) & 1) ^ 1);
            if (tid == 384) ev(0, j);
            const int lt = tid - 384;
            load(j, lt);
            if (tid == 384) ev(1, j);
            asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar_loaded(j)))
                         : "memory");
            if constexpr (GX) mbar_arrive(bar_loaded(j));  // (after this thread's g and β stores)
        }
        cp_async_wait_all();
        return;
    }
    if (warp >= 4) {
        // ------------------------------------------------------------ prep
        // (From the launch's 128: .dec may only lower the count, .inc only raise it.)
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegPrep) : "memory");
        const int wq = (warp - 4) & 3;
        // γ (the running sum of g) of tokens lane and lane + 32 into x0, x1, in registers;
        // any warp.
        auto scan_gamma = [&](const unsigned char* st, float& x0, float& x1) {
            const float* G = reinterpret_cast<const float*>(st + kG);
            x0 = G[lane], x1 = G[lane + 32];
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float y0 = __shfl_up_sync(0xffffffffu, x0, o), y1 = __shfl_up_sync(0xffffffffu, x1, o);
                if (lane >= o) x0 += y0, x1 += y1;
            }
            x1 += __shfl_sync(0xffffffffu, x0, 31);
        };
        // The state warps' per-token factors F from γ into the output slot so: one warp.
        // NORM: with kf and qf (the slot's kN): e^{γ_last−γ_t} (the chain's D' carries kf),
        // e^γ scale qf_t, e^{γ_last}, e^γ kf_t.
        auto store_f = [&](unsigned char* so, const unsigned char* st, int L, float x0, float x1) {
            float4* F = reinterpret_cast<float4*>(so + kOF);
            const float gl = __shfl_sync(0xffffffffu, (L - 1) < 32 ? x0 : x1, (L - 1) & 31);
            const float el = __expf(gl);
            if constexpr (NORM) {
                const float* Nf = reinterpret_cast<const float*>(st + kN);
                const float k0 = Nf[lane], k1 = Nf[lane + 32], q0 = Nf[64 + lane] * a.scale,
                            q1 = Nf[96 + lane] * a.scale;
                F[lane] = make_float4(lane < L ? __expf(gl - x0) : 0.0f, __expf(x0) * q0, el, __expf(x0) * k0);
                F[lane + 32] =
                    make_float4(lane + 32 < L ? __expf(gl - x1) : 0.0f, __expf(x1) * q1, el, __expf(x1) * k1);
            } else {
                (void)st;
                F[lane] = make_float4(lane < L ? __expf(gl - x0) : 0.0f, __expf(x0) * a.scale, el, __expf(x0));
                F[lane + 32] =
                    make_float4(lane + 32 < L ? __expf(gl - x1) : 0.0f, __expf(x1) * a.scale, el, __expf(x1));
            }
        };
        // k·kᵀ (qk false) or q·kᵀ (true), 64 x 64, as 8 wgmma m64n64k16 with both operands
        // from the input slot's atoms: a warpgroup's; warp wq holds rows 16 wq...
        auto product = [&](float(&x)[8][4], unsigned char* st, bool qk, auto&& meanwhile) {
            const uint32_t ka = smem_addr(st + kK), at = qk ? smem_addr(st + kWQ + 8 * 1024) : ka;
            const int kcs = qk ? kWQkc : kKc;
            auto desc = [](uint32_t b, int s, int c) {
                return mma::wgmma_desc_sw128(b + (s >> 2) * c + (s & 3) * 32, 16, 1024);
            };
            mma::fence_operand(x);
            mma::wgmma_fence();
            // BAL: k·qᵀ instead of q·kᵀ (warpgroup 1's Pᵀ, rows the keys), chosen at compile
            // time: a run-time branch around the wgmma made ptxas serialize every wgmma of the
            // kernel, the chain's too (C7520, run 162).
            if constexpr (BAL) {
#pragma unroll
                for (int s = 0; s < 8; ++s) wgmma_ss_n64(x, desc(ka, s, kKc), desc(at, s, kcs));
            } else {
#pragma unroll
                for (int s = 0; s < 8; ++s) wgmma_ss_n64(x, desc(at, s, kcs), desc(ka, s, kKc));
            }
            mma::wgmma_commit();
            meanwhile();
            mma::wgmma_wait_all();
            mma::fence_operand(x);
        };
        // The solve's products, acc += x · B with x given as the C layout of two 8-token tiles
        // and B from 16 rows (of A or T, block (i, j); B[k][n] = rows[n ld + k]); b[n2][s][r]
        // is B's register r of 8-column tile n2 and k-step s, on TF32 (perf-notes v54): one
        // m16n8k8 product per k-step s and tile, operands rounded by cvt.rna. x's C layout holds
        // columns 2 tq and 2 tq + 1 of each 8-column tile where TF32's A layout wants tq and
        // tq + 4, so a k-step sums its eight k in the order (0, 2, 4, 6, 1, 3, 5, 7): a0/a2 and
        // b0/b1 name the same k. (The NORM instances had 16-bit values and remainders here
        // until their qf left the q·kᵀ wgmma's wait: with TF32 they lost 6% at 32K then, run
        // 180, and gained with qf on mma.sync, run 271, perf-notes v96.)
        // x's operands in k-step order.
        // F16S (GDN_FUSED64_F16_SOLVE, perf-notes v113, v114): FP16 operands instead, one m16n8k16
        // product per tile, whose A layout is x's C layout (a[0] only) and whose B registers are
        // the k pairs (2 tq, 2 tq + 1) and (2 tq + 8, 2 tq + 9) (b[s][0] only): half the mma and
        // the operand registers; T's blocks stay FP32 in As.
        auto a_of = [&](const float(&x)[2][4], uint32_t(&a)[2][4]) {
            if constexpr (F16S) {
                a[0][0] = mma::pack2<ScanMode::kFp16>(x[0][0], x[0][1]);
                a[0][1] = mma::pack2<ScanMode::kFp16>(x[0][2], x[0][3]);
                a[0][2] = mma::pack2<ScanMode::kFp16>(x[1][0], x[1][1]);
                a[0][3] = mma::pack2<ScanMode::kFp16>(x[1][2], x[1][3]);
            } else {
#pragma unroll
                for (int s = 0; s < 2; ++s) {
                    a[s][0] = mma::to_tf32(x[s][0]), a[s][1] = mma::to_tf32(x[s][2]);
                    a[s][2] = mma::to_tf32(x[s][1]), a[s][3] = mma::to_tf32(x[s][3]);
                }
            }
        };
        // acc (one m16n8 tile) += x · B from x's operands a (a_of) and one tile's b.
        auto mma_a = [&](float(&acc)[4], const uint32_t(&a)[2][4], const uint32_t(&b)[2][2]) {
            if constexpr (F16S) {
                const uint32_t bh[2] = {b[0][0], b[1][0]};
                mma::mma16<ScanMode::kFp16>(acc, a[0], bh);
            } else {
#pragma unroll
                for (int s = 0; s < 2; ++s) mma::mma_tf32(acc, a[s][0], a[s][1], a[s][2], a[s][3], b[s][0], b[s][1]);
            }
        };
        // One 8-column tile n2 of B, and acc (one m16n8 tile) += x · B.
        auto b_of1 = [&](const float* rows, int ld, float sign, int n2, uint32_t(&b)[2][2]) {
#pragma unroll
            for (int s = 0; s < 2; ++s) {
                const float2 v = *reinterpret_cast<const float2*>(rows + (8 * n2 + g) * ld + 8 * s + 2 * tq);
                if constexpr (F16S)
                    b[s][0] = mma::pack2<ScanMode::kFp16>(sign * v.x, sign * v.y);
                else
                    b[s][0] = mma::to_tf32(sign * v.x), b[s][1] = mma::to_tf32(sign * v.y);
            }
        };
        auto mma_t1 = [&](float(&acc)[4], const float(&x)[2][4], const uint32_t(&b)[2][2]) {
            uint32_t a[2][4];
            a_of(x, a);
            mma_a(acc, a, b);
        };
        // Both tiles: B's 16 columns, and acc += x · B (x's operands formed once).
        auto b_of = [&](const float* rows, int ld, float sign, uint32_t(&b)[2][2][2]) {
#pragma unroll
            for (int n2 = 0; n2 < 2; ++n2) b_of1(rows, ld, sign, n2, b[n2]);
        };
        auto mma_t = [&](float(&acc)[2][4], const float(&x)[2][4], const uint32_t(&b)[2][2][2]) {
            uint32_t a[2][4];
            a_of(x, a);
#pragma unroll
            for (int n2 = 0; n2 < 2; ++n2) mma_a(acc[n2], a, b[n2]);
        };
        // T_ww = (I + A_ww)^{-1}, the diagonal 16 x 16 block of warp wq (lane c a column), from
        // A (rows of ldA) into dst: rows 16 wq.., columns col0.. (dst may be A's block itself:
        // the warp's reads are done before its stores).
        auto t_diag = [&](const float* A, float* dst, int ld, int col0) {
            const int cc = lane & 15, b0 = 16 * wq;
            float Tc[16];
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                // Four partial sums: a quarter of the dependent chain; the row by 16-byte
                // loads (kLDA and b0 keep them aligned): a quarter of the shared-memory
                // loads of 4-byte ones, the same sums (perf-notes v116: −4% at 32K, run 312).
                float x[4] = {r == cc ? 1.0f : 0.0f, 0.0f, 0.0f, 0.0f};
                const float* Ar = A + (b0 + r) * kLDA + b0;
#pragma unroll
                for (int m4 = 0; 4 * m4 < r; ++m4) {
                    const float4 a4 = reinterpret_cast<const float4*>(Ar)[m4];
                    const float av[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
                    for (int u = 0; u < 4; ++u)
                        if (4 * m4 + u < r) x[u] -= av[u] * Tc[4 * m4 + u];
                }
                Tc[r] = (x[0] + x[1]) + (x[2] + x[3]);
            }
            __syncwarp();
            // Every lane holds its column's 16 rows (lanes c and c + 16 alike): rows 0-7 from
            // lanes 0-15, rows 8-15 from lanes 16-31, eight stores instead of sixteen.
            const int hr = 8 * (lane >> 4);
#pragma unroll
            for (int r = 0; r < 8; ++r) dst[(b0 + hr + r) * ld + col0 + cc] = lane < 16 ? Tc[r] : Tc[r + 8];
        };
        // Both prep warpgroups (warps w8 = 0..7) on one chunk, every other chunk of the
        // sequence (the peer CTA takes the others), to cut a chunk's prep latency
        // (perf-notes v42):
        //  - warpgroup 0 forms k·kᵀ, A and T's diagonal blocks while warpgroup 1 forms q·kᵀ
        //    and P;
        //  - T = (I + A)^{-1} by blocks, transposed (U = Tᵀ, the C layout rows c, columns t,
        //    products on TF32, or FP16 where F16S, mma_t):
        //    level 2: U_ab = −U_aa A_baᵀ U_bb for (a, b) = (0, 1), (2, 3), four warps (one per
        //    8-column half); meanwhile warpgroup 1 starts Z = U_0 A_10ᵀ (the 32 x 32 halves);
        //    level 3: U_01 (32 x 32) = −Z U_1, eight warps of one m16n8 tile each;
        //  - T diag(β) into the atom column by all 256 threads.
        // No separate T: its f32 blocks are written over A's (As), each after its last read:
        // the diagonal ones by their warp, the level-2 ones (1, 0) and (3, 2) after warpgroup
        // 0's barrier; the blocks Z reads, (2, 0), (2, 1), (3, 0), (3, 1), stay A's.
        const int w8 = warp - 4, wg = w8 >> 2;
        float* const Asp = reinterpret_cast<float*>(sm + kRAs);
        float* const Tf = Asp;
        float* const Zs = reinterpret_cast<float*>(sm + kRZs);
        auto bar_all = [] { asm volatile("barrier.sync 1, 256;\n" ::: "memory"); };
        // Warpgroup 1's own barrier, where warpgroup 0 passes a wg_bar(3) between two of
        // bar_all's. Nothing needs it but compute-sanitizer's racecheck (2025.3): where the two
        // warpgroups pass different numbers of barriers between two bar_all, it reports each
        // write before the next bar_all and read after it as a RAW hazard (thousands a launch
        // here, T's blocks by t_diag and u_store against u_tile), as it does in a race-free
        // kernel of a few lines (bench/racecheck_barriers.cu); with the counts equal it
        // reports none. Costs nothing measurable: warpgroup 1 waits at bar_all anyway
        // (docs/perf-notes.md v59).
        auto pair_bar = [] { wg_bar(4); };
        // A 16 x 16 tile of U (rows c0.., columns t0..) in the C layout, from Tf.
        auto u_tile = [&](float(&x)[2][4], int c0, int t0) {
#pragma unroll
            for (int n2 = 0; n2 < 2; ++n2)
#pragma unroll
                for (int e = 0; e < 4; ++e) x[n2][e] = Tf[(t0 + 8 * n2 + 2 * tq + (e & 1)) * kLDA + c0 + g + 8 * (e >> 1)];
        };
        // An m16n8 tile of U (rows c0.., columns t0..) into Tf.
        auto u_store = [&](const float(&o)[4], int c0, int t0) {
#pragma unroll
            for (int e = 0; e < 4; ++e) Tf[(t0 + 2 * tq + (e & 1)) * kLDA + c0 + g + 8 * (e >> 1)] = o[e];
        };
        // Z's tiles (rows c, columns t − 32): a 16 x 16 one in the C layout, an m16n8 one stored.
        auto z_tile = [&](float(&x)[2][4], int r0, int t0) {
#pragma unroll
            for (int n2 = 0; n2 < 2; ++n2)
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const float2 v = *reinterpret_cast<const float2*>(Zs + (r0 + g + 8 * hh) * kLDZ + t0 + 8 * n2 + 2 * tq);
                    x[n2][2 * hh] = v.x, x[n2][2 * hh + 1] = v.y;
                }
        };
        auto z_store = [&](const float(&o)[4], int r0, int t0) {
            *reinterpret_cast<float2*>(Zs + (r0 + g) * kLDZ + t0 + 2 * tq) = make_float2(o[0], o[1]);
            *reinterpret_cast<float2*>(Zs + (r0 + g + 8) * kLDZ + t0 + 2 * tq) = make_float2(o[2], o[3]);
        };
        auto prep_split = [&](int j, int L) {
            unsigned char* st = stage(j);
            unsigned char* so = ostage(j);
            const float* Bt = reinterpret_cast<const float*>(st + kB);
            // T diag(β)'s element (t, c) into the atom column (rows t, columns c), one 16-bit
            // term (the blocks above the diagonal hold the zeros written at the start).
            // NORM: diag(kf) T diag(β) (row t times kf_t), so that the chain's D' = kf ⊙ D serves
            // both its products unchanged (Sᵀ += D2ᵀ K̂ = (e^{γ_last−γ} ⊙ D')ᵀ K, O += P D with P
            // without kf_i = P⁰ D').
            float* const Nw = reinterpret_cast<float*>(st + kN);
            auto tb_store = [&](int t, int c, float v) {
                float y = v * Bt[c];
                if constexpr (NORM) y *= Nw[t];
                *reinterpret_cast<__nv_bfloat16*>(so + kOTB + atom_at(t, c, 0)) = __float2bfloat16_rn(y);
            };
            // The product (k·kᵀ for warpgroup 0, q·kᵀ for 1) runs while every warp scans γ
            // itself (no barrier for it); warp 0 stores the state warps' factors F at the end,
            // with the other outputs.
            float x[8][4] = {};
            float y0, y1;
            if constexpr (NORM) {
                // (qf first, before warpgroup 1's product: warpgroup 0's path, A and T's
                // diagonal blocks, is the prep's longer one, and the product's accumulators are
                // not live yet.)
                if (wg == 1) {
                    // qf of this warp's 16 q rows (P's rows) as the
                    // diagonal of their 16 x 16 Gram block on mma.sync (perf-notes v96): 8
                    // k-steps of ldmatrix from the atoms, whose A fragment is also both
                    // 8-row tiles' B (a0/a2 rows 0-7, a1/a3 rows 8-15); a_or_p reads them
                    // after a __syncwarp, store_f after the barriers to come.
                    const unsigned char* qa = st + kWQ + 8 * 1024;
                    const int r0 = 16 * wq, lr = r0 + (lane & 7) + 8 * ((lane >> 3) & 1);
                    float d0[4] = {}, d1[4] = {};
#pragma unroll
                    for (int s = 0; s < 8; ++s) {
                        uint32_t af[4];
                        mma::ldmatrix_x4<false>(af, qa + atom_at(lr, 16 * s + 8 * (lane >> 4), kWQkc));
                        const uint32_t b0[2] = {af[0], af[2]}, b1[2] = {af[1], af[3]};
                        mma::mma16<M>(d0, af, b0);
                        mma::mma16<M>(d1, af, b1);
                    }
                    // (r0 + g, r0 + g) is tile 0's element g & 1, (r0 + 8 + g, r0 + 8 + g)
                    // tile 1's 2 + (g & 1), in the lane with tq = g / 2.
                    if (tq == (g >> 1)) {
                        Nw[64 + r0 + g] = 1.0f / sqrtf(((g & 1) ? d0[1] : d0[0]) + a.l2eps);
                        Nw[64 + r0 + 8 + g] = 1.0f / sqrtf(((g & 1) ? d1[3] : d1[2]) + a.l2eps);
                    }
                }
            }
            product(x, st, wg == 1, [&] { scan_gamma(st, y0, y1); });
            uint32_t pk[2][8];  // P's (BAL: Pᵀ's) 16-bit pairs (warpgroup 1) until the output slot is free
            if constexpr (NORM) {
                if (wg == 0) {
                    // kf from k·kᵀ's diagonal: (t, t) of row t = 16 wq + g (+ 8) sits in tile
                    // 2 wq (+ 1), element g & 1 (+ 2), of the lane with tq = g / 2.
                    float d0 = 0.0f, d1 = 0.0f;
#pragma unroll
                    for (int nt = 0; nt < 8; ++nt)
                        if ((nt >> 1) == wq) {
                            if ((nt & 1) == 0)
                                d0 = (g & 1) ? x[nt][1] : x[nt][0];
                            else
                                d1 = (g & 1) ? x[nt][3] : x[nt][2];
                        }
                    if (tq == (g >> 1)) {
                        Nw[16 * wq + g] = 1.0f / sqrtf(d0 + a.l2eps);
                        Nw[16 * wq + 8 + g] = 1.0f / sqrtf(d1 + a.l2eps);
                    }
                    wg_bar(3);
                    // A's columns' γ_i − ln kf_i, so that e^{y_t − y_i} carries kf_i / kf_t; its
                    // rows make up the rest (a_or_p). γ itself comes back for F by a second scan.
                    y0 -= __logf(Nw[lane]), y1 -= __logf(Nw[lane + 32]);
                } else {
                    __syncwarp();  // (this warp's qf)
                }
            }
            mark(2);
            // A (warpgroup 0, strictly lower, f32) or P (1, lower, one 16-bit term) of rows
            // 16 wq..; γ by shuffles, each column's once for both row halves. (One loop per
            // warpgroup: a branch inside the unrolled loop kept the compiler from overlapping
            // its iterations, run 153.)
            auto a_or_p = [&](auto is_a) {
                constexpr bool kIsA = decltype(is_a)::value;
                float gt[2], bt[2];
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int t = 16 * wq + g + 8 * hf;
                    gt[hf] = __shfl_sync(0xffffffffu, wq < 2 ? y0 : y1, t & 31), bt[hf] = Bt[t];
                    if constexpr (NORM) {
                        // A: β_t kf_t² e^{y_t − y_i} = β_t kf_t kf_i e^{γ_t − γ_i}; P⁰: scale qf_t
                        // e^{γ_t − γ_i} (kf_i is in D', the chain's D).
                        if constexpr (kIsA)
                            bt[hf] *= Nw[t] * Nw[t];
                        else
                            gt[hf] += __logf(Nw[64 + t]);
                    }
                }
                // Elements (t, i) and (t, i + 1) of A (f32, strictly lower) or P (a 16-bit pair,
                // lower) from the product's tile nt and their decays e0, e1.
                auto put = [&](int nt, int hf, int t, int i, float e0, float e1) {
                    if constexpr (kIsA) {
                        *reinterpret_cast<float2*>(Asp + t * kLDA + i) =
                            make_float2(i < t ? bt[hf] * e0 * x[nt][2 * hf] : 0.0f,
                                        i + 1 < t ? bt[hf] * e1 * x[nt][2 * hf + 1] : 0.0f);
                    } else {
                        const float p0 = i <= t ? a.scale * e0 * x[nt][2 * hf] : 0.0f;
                        const float p1 = i + 1 <= t ? a.scale * e1 * x[nt][2 * hf + 1] : 0.0f;
                        pk[hf][nt] = mma::pack2<M>(p0, p1);
                    }
                };
                // Only the live 16-column blocks u <= wq (perf-notes v52; A's blocks above the
                // diagonal are never read, P's are zeros, as their packed pairs), the
                // exponentials without the denormal guard (exp_ftz: unconditional, masked by a
                // select; a decay below 2^-126 is 0): 1-8% (25% with 16-bit g and β) over v43's
                // loop of every tile, the same bits. (The NORM instances kept v43's loop until
                // their qf left the q·kᵀ wgmma's wait, perf-notes v96.)
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    if (u > wq) {
                        if constexpr (!kIsA) pk[0][2 * u] = pk[1][2 * u] = pk[0][2 * u + 1] = pk[1][2 * u + 1] = 0u;
                        continue;
                    }
#pragma unroll
                    for (int n2 = 0; n2 < 2; ++n2) {
                        const int nt = 2 * u + n2, i = 8 * nt + 2 * tq;
                        const float gi0 = __shfl_sync(0xffffffffu, u < 2 ? y0 : y1, i & 31);
                        const float gi1 = __shfl_sync(0xffffffffu, u < 2 ? y0 : y1, (i + 1) & 31);
#pragma unroll
                        for (int hf = 0; hf < 2; ++hf) {
                            const int t = 16 * wq + g + 8 * hf;
                            put(nt, hf, t, i, exp_ftz(gt[hf] - gi0), exp_ftz(gt[hf] - gi1));
                        }
                    }
                }
            };
            // BAL (perf-notes v44): warp wq of both warpgroups shares a scheduler (warps 4 + wq
            // and 8 + wq), and A and P are both lower triangular, so their live tiles were 4
            // (wq = 0) to 16 (wq = 3) between the two. Warpgroup 1 forms Pᵀ = k·qᵀ (rows the
            // keys) instead: 8 − 2 wq live tiles, 10 a scheduler with A's 2 wq + 2. Dead tiles
            // are skipped by one branch per 16-column block (per warp, no divergence: A's
            // above the diagonal blocks are never read, Pᵀ's are zeros), the exponentials are
            // unconditional inside a live block and masked by a select. The same values in
            // the same order as a_or_p's.
            if constexpr (BAL) {
                auto a_or_pt = [&](auto is_a) {
                    constexpr bool kIsA = decltype(is_a)::value;
                    float gr[2], br[2] = {};
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf) {
                        const int r = 16 * wq + g + 8 * hf;
                        gr[hf] = __shfl_sync(0xffffffffu, wq < 2 ? y0 : y1, r & 31);
                        if constexpr (kIsA) br[hf] = Bt[r];
                    }
#pragma unroll
                    for (int u = 0; u < 4; ++u) {
                        if (kIsA ? u > wq : u < wq) {
                            if constexpr (!kIsA) pk[0][2 * u] = pk[1][2 * u] = pk[0][2 * u + 1] = pk[1][2 * u + 1] = 0u;
                            continue;
                        }
                        float gc[2][2];
#pragma unroll
                        for (int n2 = 0; n2 < 2; ++n2) {
                            const int c = 16 * u + 8 * n2 + 2 * tq;
                            gc[n2][0] = __shfl_sync(0xffffffffu, u < 2 ? y0 : y1, c & 31);
                            gc[n2][1] = __shfl_sync(0xffffffffu, u < 2 ? y0 : y1, (c + 1) & 31);
                        }
#pragma unroll
                        for (int n2 = 0; n2 < 2; ++n2)
#pragma unroll
                            for (int hf = 0; hf < 2; ++hf) {
                                const int nt = 2 * u + n2, c = 8 * nt + 2 * tq, r = 16 * wq + g + 8 * hf;
                                if constexpr (kIsA) {
                                    // A[t = r][i = c] = β_t e^{γ_t − γ_i} k_t·k_i, i < t.
                                    const float e0 = exp_ftz(gr[hf] - gc[n2][0]), e1 = exp_ftz(gr[hf] - gc[n2][1]);
                                    *reinterpret_cast<float2*>(Asp + r * kLDA + c) =
                                        make_float2(c < r ? br[hf] * e0 * x[nt][2 * hf] : 0.0f,
                                                    c + 1 < r ? br[hf] * e1 * x[nt][2 * hf + 1] : 0.0f);
                                } else {
                                    // Pᵀ[i = r][t = c] = scale e^{γ_t − γ_i} q_t·k_i, i <= t.
                                    const float e0 = exp_ftz(gc[n2][0] - gr[hf]), e1 = exp_ftz(gc[n2][1] - gr[hf]);
                                    const float p0 = r <= c ? a.scale * e0 * x[nt][2 * hf] : 0.0f;
                                    const float p1 = r <= c + 1 ? a.scale * e1 * x[nt][2 * hf + 1] : 0.0f;
                                    pk[hf][nt] = mma::pack2<M>(p0, p1);
                                }
                            }
                    }
                };
                if (wg == 0)
                    a_or_pt(std::true_type{});
                else
                    a_or_pt(std::false_type{});
            } else {
                if (wg == 0)
                    a_or_p(std::true_type{});
                else
                    a_or_p(std::false_type{});
            }
            mark(11);
            if (wg == 0) {
                // A (warpgroup 0's). BAL: a warp's diagonal block reads only its own rows.
                if constexpr (BAL)
                    __syncwarp();
                else
                    wg_bar(3);
                t_diag(Asp, Tf, kLDA, 16 * wq);
            } else {
                // As many barriers as warpgroup 0 passes before the next bar_all (wg_bar(3)
                // above; NORM: kf's too), for racecheck (pair_bar).
                if constexpr (!BAL) pair_bar();
                if constexpr (NORM) pair_bar();
            }
            mark(5);
            bar_all();  // T's diagonal blocks
            // Level 2 (warpgroup 0) and Z's first terms (1); each phase ends at a barrier
            // that both warpgroups reach at the same instruction.
            uint32_t bz1[2][2];  // B of Z's second term, held across the barrier
            float z0[4] = {};
            const int nb = wq >> 1, hz = wq & 1, zc = 16 * nb + 8 * hz;
            if (wg == 0) {
                // U_ab = −(U_aa A_baᵀ) U_bb, a = 2h, b = 2h + 1; this warp's 8 columns nh.
                const int a0 = 32 * (wq >> 1), b0 = a0 + 16, nh = wq & 1;
                float u[2][4], y[2][4] = {}, o[4] = {};
                u_tile(u, a0, a0);
                uint32_t bb[2][2][2], cb[2][2];
                b_of(Asp + b0 * kLDA + a0, kLDA, 1.0f, bb);
                mma_t(y, u, bb);
                b_of1(Tf + b0 * kLDA + b0, kLDA, -1.0f, nh, cb);
                mma_t1(o, y, cb);
                wg_bar(3);  // both warps of the block have read A_ba: T_ba over it
                u_store(o, a0, b0 + 8 * nh);
            } else {
                // Z = U_0 A_10ᵀ, this warp's 8 columns (tokens 32 + 16 nb + 8 hz..): Z's row block
                // 1 is U_11 A_{2+nb,1}ᵀ; its row block 0 is U_00 A_{2+nb,0}ᵀ + U_01 A_{2+nb,1}ᵀ,
                // whose U_01 is level 2's (the next phase).
                uint32_t bz0[2][2];
                b_of1(Asp + (32 + 16 * nb) * kLDA, kLDA, 1.0f, hz, bz0);
                b_of1(Asp + (32 + 16 * nb) * kLDA + 16, kLDA, 1.0f, hz, bz1);
                float u[2][4], z1[4] = {};
                u_tile(u, 0, 0);
                mma_t1(z0, u, bz0);
                u_tile(u, 16, 16);
                mma_t1(z1, u, bz1);
                z_store(z1, 16, zc);
                pair_bar();  // warpgroup 0's wg_bar(3) before u_store
            }
            mark(6);
            bar_all();  // U_01, U_23
            if (wg == 1) {
                float u[2][4];
                u_tile(u, 0, 16);
                mma_t1(z0, u, bz1);
                z_store(z0, 0, zc);
            }
            mark(12);
            bar_all();  // Z
            // Level 3: U_01 (rows 0..31, columns 32..63) = −Z U_1; this warp's m16n8 tile
            // (rows 16 r.., columns 32 + 16 nb' + 8 hf..) sums over Z's column blocks nb <= nb'.
            {
                const int r = w8 >> 2, nbp = (w8 >> 1) & 1, hf = w8 & 1;
                float o[4] = {};
#pragma unroll
                for (int nb = 0; nb < 2; ++nb) {
                    if (nb > nbp) continue;
                    float z[2][4];
                    uint32_t bb[2][2];
                    z_tile(z, 16 * r, 16 * nb);
                    b_of1(Tf + (32 + 16 * nbp) * kLDA + 32 + 16 * nb, kLDA, -1.0f, hf, bb);
                    mma_t1(o, z, bb);
                }
                // The output slot is free once every CTA's state warps have read chunk j − 2
                // from it (this CTA's and the peers' copies): only now. This CTA's out_empty
                // completes once for each of its chunks from 2 on, so the wait for chunk j is
                // for its ((j − j0) / P)-th phase, j0 this CTA's first such chunk. (Waiting in warpgroup 1
                // right after P, while warpgroup 0 forms T's diagonal blocks, and storing P and
                // F then lost 17%, run 154.)
                mark(13);
                if constexpr (QUAD) {
                    if (j >= 2) mbar_wait(bars + 10 + (j & 1), ((j - (int(rank) >= 2 ? int(rank) : int(rank) + 4)) >> 2) & 1);
                } else {
                    // (j0 = rank + 2; a chunk j < 2 waits for the phase before the first, done.)
                    mbar_wait(bars + 10 + (j & 1), ((j >> 1) & 1) ^ 1);
                }
                mark(14);
                if (w8 == 0) {
                    if constexpr (NORM) scan_gamma(st, y0, y1);
                    store_f(so, st, L, y0, y1);
                }
                if (wg == 1) {
                    if constexpr (BAL) {
                        // P from Pᵀ's fragments: stmatrix.trans writes the 8 x 8 tile of Pᵀ
                        // rows i0.., columns t0.. as P's rows t0 + r8 (8 keys from i0 each).
                        const int mi = lane >> 3, r8 = lane & 7;
#pragma unroll
                        for (int u = 0; u < 4; ++u)
                            mma::stmatrix_x4_trans(
                                so + kOP + atom_at(16 * u + 8 * (mi >> 1) + r8, 16 * wq + 8 * (mi & 1), 0),
                                pk[0][2 * u], pk[1][2 * u], pk[0][2 * u + 1], pk[1][2 * u + 1]);
                    } else {
                        // NORM: the lane's row and column from a fresh read of %laneid, so that
                        // ptxas computes the sixteen addresses here instead of holding them
                        // from the prologue (spilled there, reloaded every chunk: perf-notes v56).
                        int gs = g, tqs = tq;
                        if constexpr (NORM) {
                            uint32_t ln;
                            asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(ln));
                            gs = int(ln >> 2), tqs = int(ln & 3);
                        }
#pragma unroll
                        for (int hf2 = 0; hf2 < 2; ++hf2)
#pragma unroll
                            for (int nt = 0; nt < 8; ++nt)
                                *reinterpret_cast<uint32_t*>(
                                    so + kOP + atom_at(16 * wq + gs + 8 * hf2, 8 * nt + 2 * tqs, 0)) = pk[hf2][nt];
                    }
                }
                // T diag(β)'s blocks from T's f32 ones in As: the four diagonal ones, (1, 0)
                // and (3, 2), as 16-bit pairs (768 of them, three a thread).
#pragma unroll
                for (int i3 = 0; i3 < 3; ++i3) {
                    const int id = tid - 128 + 256 * i3, blk = id >> 7, rr = (id >> 3) & 15, cp = 2 * (id & 7);
                    const int rb = blk < 4 ? blk : blk == 4 ? 1 : 3, cb = blk < 4 ? blk : rb - 1;
                    const int t = 16 * rb + rr, c = 16 * cb + cp;
                    const float2 v = *reinterpret_cast<const float2*>(Tf + t * kLDA + c);
                    float2 w = make_float2(v.x * Bt[c], v.y * Bt[c + 1]);
                    if constexpr (NORM) w.x *= Nw[t], w.y *= Nw[t];
                    *reinterpret_cast<__nv_bfloat162*>(so + kOTB + atom_at(t, c, 0)) = __floats2bfloat162_rn(w.x, w.y);
                }
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    tb_store(32 + 16 * nbp + 8 * hf + 2 * tq + (e & 1), 16 * r + g + 8 * (e >> 1), o[e]);
            }
            mma::fence_proxy_async_shared();
            mark(7);
        };
        auto chunk_len = [&](int j) {
            const int64_t cs = bos + int64_t(j) * C;
            return int(eos - cs < C ? eos - cs : C);
        };
        // Chunks rank, rank + P, ... by both warpgroups. Between two of this CTA's chunks to
        // prepare (j, j + P, P ≤ 4) input slot j % 4 is loaded at most once more, and chunk
        // j + 4's copies need chain(j), which needs this prep, so `in_loaded`'s parity is
        // unambiguous. The output slot's wait is in prep_split, before its first store.
        for (int j = int(rank); j < nch; j += int(P)) {
            mbar_wait(bar_loaded(j), par_loaded(j));
            mma::fence_proxy_async_shared();
            bar_all();  // (and the previous chunk's reads of the scratch are done)
            mark(0);
            if (tid == 128) ev(2, j);
            prep_split(j, chunk_len(j));
            mbar_arrive(bar_full(j));  // (the load warpgroup's thread 448 copies it to the peer)
            mark(1);
        }
        return;
    }

    // ---------------------------------------------------------------- chain
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegState) : "memory");
    const int cw = c0 + 16 * warp + g;  // this thread's columns: cw, cw + 8
    float S[16][4];
    // The state (k, v) of this head's slot at k sk + v sv.
    const int32_t slot = a.state_indices ? a.state_indices[n] : n;
    const bool from_zero = a.start_from_zero && a.start_from_zero[n] != 0;
    float* const st0 = a.state + int64_t(slot) * a.slot_stride + int64_t(h) * K * 128;
    const int sk = a.state_kv ? 128 : 1, sv = a.state_kv ? 1 : 128;
    // Register (j, e) holds Sᵀ's element (v = cw + 8 (e >> 1), k = 8 j + 2 tq + (e & 1)).
    auto sidx = [&](int j, int e) { return (8 * j + 2 * tq + (e & 1)) * sk + (cw + 8 * (e >> 1)) * sv; };
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) S[j][e] = from_zero ? 0.0f : st0[sidx(j, e)];
    // Yqᵀ's token columns times e^γ scale, Sᵀ times e^{γ_last}, and a chunk's output rows
    // (tokens < L).
    auto scale_yq = [&](float(&y)[8][4], const float4* F) {
#pragma unroll
        for (int jt = 0; jt < 8; ++jt) {
            const float f0 = F[8 * jt + 2 * tq].y, f1 = F[8 * jt + 2 * tq + 1].y;
            y[jt][0] *= f0, y[jt][1] *= f1, y[jt][2] *= f0, y[jt][3] *= f1;
        }
    };
    auto decay_state = [&](const float4* F) {
        const float decay = F[0].z;
#pragma unroll
        for (int jj = 0; jj < 16; ++jj)
#pragma unroll
            for (int e = 0; e < 4; ++e) S[jj][e] *= decay;
    };
    auto store_out = [&](const float(&y)[8][4], int64_t cs, int L) {
        const int64_t ld = a.o_tok, o = cs * a.o_tok + int64_t(h) * a.o_head + cw;
        if constexpr (OUT != GDN_DTYPE_F32) {
            if (a.out_vec) {
                // y[jt] holds (column cw, cw + 8) x (token t, t + 1). Two exchanges give each
                // thread four adjacent columns of one token, so that a warp's store writes
                // 8 tokens x 32 bytes (whole sectors) instead of 4 x 16 with 2-byte stores
                // (perf-notes v50). 1: lanes g, g ^ 1 (columns cw, cw ± 1): an even g keeps
                // token t, an odd g token t + 1, each as the pairs lo = (c, c + 1) and
                // hi = (c + 8, c + 9), c = c0 + 16 warp + (g & 6). 2: lanes g, g ^ 2: g & 2 == 0
                // keeps columns c .. c + 3, else c + 8 .. c + 11, c = c0 + 16 warp + (g & 4).
                // (g from the thread's index here: held across the kernel it was spilled.)
                const int gg = (threadIdx.x >> 2) & 7;
                const bool odd = (gg & 1) != 0, up = (gg & 2) != 0;
                uint16_t* ob = static_cast<uint16_t*>(a.out) + cs * ld + int64_t(h) * a.o_head +
                               (c0 + 16 * warp + (gg & 4) + (up ? 8 : 0)) + int64_t(2 * tq + int(odd)) * ld;
                const int64_t step = 8 * ld;
                // (mma::pack2: the pair rounded to nearest, the first value at the lower address.)
                constexpr ScanMode kOut = OUT == GDN_DTYPE_BF16 ? ScanMode::kBf16 : ScanMode::kFp16;
#pragma unroll
                for (int jt = 0; jt < 8; ++jt, ob += step) {
                    const uint32_t p02 = mma::pack2<kOut>(y[jt][0], y[jt][2]);  // token t: cw, cw + 8
                    const uint32_t p13 = mma::pack2<kOut>(y[jt][1], y[jt][3]);  // token t + 1
                    const uint32_t r1 = __shfl_xor_sync(0xffffffffu, odd ? p02 : p13, 4);
                    const uint32_t keep = odd ? p13 : p02;
                    const uint32_t l1 = odd ? r1 : keep, h1 = odd ? keep : r1;
                    const uint32_t lo = __byte_perm(l1, h1, 0x5410), hi = __byte_perm(l1, h1, 0x7632);
                    const uint32_t r2 = __shfl_xor_sync(0xffffffffu, up ? lo : hi, 8);
                    const int t = 8 * jt + 2 * tq + int(odd);
                    if (t < L) *reinterpret_cast<uint2*>(ob) = up ? make_uint2(r2, hi) : make_uint2(lo, r2);
                }
                return;
            }
        }
#pragma unroll
        for (int jt = 0; jt < 8; ++jt) {
            const int t = 8 * jt + 2 * tq;
            if (t < L) {
                store_out_elem<OUT>(a.out, o + t * ld, y[jt][0]);
                store_out_elem<OUT>(a.out, o + t * ld + 8, y[jt][2]);
            }
            if (t + 1 < L) {
                store_out_elem<OUT>(a.out, o + (t + 1) * ld, y[jt][1]);
                store_out_elem<OUT>(a.out, o + (t + 1) * ld + 8, y[jt][3]);
            }
        }
    };
    for (int j = 0; j < nch; ++j) {
        // (At CTA scope, as CUTLASS waits for a cluster's barriers: the cluster-scope acquire
        // invalidated L1 each chunk, CCTL.IVALL, run 153.)
        mbar_wait(bar_full(j), par_full(j));
        // A peer may have prepared the chunk, which says nothing of this CTA's own copies
        // of its k, q and v rows.
        mbar_wait(bar_loaded(j), par_loaded(j));
        if (tid == 0) ev(4, j);
        mma::fence_proxy_async_shared();
        mark(3);
        const unsigned char* st = stage(j);
        const unsigned char* so = ostage(j);
        const int64_t cs = bos + int64_t(j) * C;
        const int L = int(eos - cs < C ? eos - cs : C);
        if constexpr (TS) {
            // The slot index read after this chunk's update, into L1 now, and the next
            // chunk's into L2: read cold there, its DRAM latency would stand on the chain's
            // path every chunk (v94).
            prefetch_l1(a.token_states + cs + L - 1);
            if (j + 1 < nch) prefetch_l2(a.token_states + (eos - cs - C < C ? eos - 1 : cs + 2 * C - 1));
        }
        const uint32_t wq_s = smem_addr(st + kWQ), ka_s = smem_addr(st + kK);
        const float4* F = reinterpret_cast<const float4*>(so + kOF);
        float x[16][4] = {};
        {
            uint32_t sa[8][4];
#pragma unroll
            for (int s = 0; s < 8; ++s) {
                sa[s][0] = mma::pack2<M>(S[2 * s][0], S[2 * s][1]);
                sa[s][1] = mma::pack2<M>(S[2 * s][2], S[2 * s][3]);
                sa[s][2] = mma::pack2<M>(S[2 * s + 1][0], S[2 * s + 1][1]);
                sa[s][3] = mma::pack2<M>(S[2 * s + 1][2], S[2 * s + 1][3]);
            }
            mma::fence_operand(sa);
            mma::fence_operand(x);
            mma::wgmma_fence();
#pragma unroll
            for (int s = 0; s < 8; ++s)
                mma::wgmma_n128<M, 0>(x, sa[s], mma::wgmma_desc_sw128(wq_s + (s >> 2) * kWQkc + (s & 3) * 32, 16, 1024));
            mma::wgmma_commit();
            mma::wgmma_wait_all();
            mma::fence_operand(x);
        }
        GDN_FUSED64_CHAIN_MARK(8);
        GDN_FUSED64_CHAIN_EV(6, j);
        {
            // Dᵀ = (vᵀ − e^γ ⊙ S0ᵀkᵀ) (T diag(β))ᵀ: vᵀ from v's atom column (ldmatrix.trans
            // gives the C layout), A as value and remainder, B = T diag(β)'s atom column.
            float vt[8][4];
            const int mi = lane >> 3, r8 = lane & 7;
#pragma unroll
            for (int s2 = 0; s2 < 4; ++s2) {
                uint32_t r[4];
                const int t = 16 * s2 + 8 * (mi >> 1) + r8, c = 16 * warp + 8 * (mi & 1);
                mma::ldmatrix_x4<true>(r, st + kV + atom_at(t, c, 0));
#pragma unroll
                for (int h2 = 0; h2 < 2; ++h2) {
                    mma::unpack2<M>(r[2 * h2], vt[2 * s2 + h2][0], vt[2 * s2 + h2][1]);
                    mma::unpack2<M>(r[2 * h2 + 1], vt[2 * s2 + h2][2], vt[2 * s2 + h2][3]);
                }
            }
#pragma unroll
            for (int jt = 0; jt < 8; ++jt) {
                const float f0 = F[8 * jt + 2 * tq].w, f1 = F[8 * jt + 2 * tq + 1].w;
                vt[jt][0] -= f0 * x[jt][0], vt[jt][1] -= f1 * x[jt][1];
                vt[jt][2] -= f0 * x[jt][2], vt[jt][3] -= f1 * x[jt][3];
            }
            uint32_t ah[4][4], al[4][4];
#pragma unroll
            for (int s2 = 0; s2 < 4; ++s2) {
                ah[s2][0] = mma::pack_split<M>(vt[2 * s2][0], vt[2 * s2][1], &al[s2][0]);
                ah[s2][1] = mma::pack_split<M>(vt[2 * s2][2], vt[2 * s2][3], &al[s2][1]);
                ah[s2][2] = mma::pack_split<M>(vt[2 * s2 + 1][0], vt[2 * s2 + 1][1], &al[s2][2]);
                ah[s2][3] = mma::pack_split<M>(vt[2 * s2 + 1][2], vt[2 * s2 + 1][3], &al[s2][3]);
            }
            float (&dlo)[4][4] = *reinterpret_cast<float(*)[4][4]>(&x[0][0]);
            float (&dhi)[4][4] = *reinterpret_cast<float(*)[4][4]>(&x[4][0]);
#pragma unroll
            for (int jt = 0; jt < 8; ++jt)
#pragma unroll
                for (int e = 0; e < 4; ++e) x[jt][e] = 0.0f;
            const uint32_t tb = smem_addr(so + kOTB);
            mma::fence_operand(ah);
            mma::fence_operand(al);
            mma::fence_operand(dlo);
            mma::fence_operand(dhi);
            mma::wgmma_fence();
#pragma unroll
            for (int s2 = 0; s2 < 4; ++s2) {
                mma::wgmma_n64<M, 0>(dlo, dhi, al[s2], mma::wgmma_desc_sw128(tb + s2 * 32, 16, 1024));
                mma::wgmma_n64<M, 0>(dlo, dhi, ah[s2], mma::wgmma_desc_sw128(tb + s2 * 32, 16, 1024));
            }
            mma::wgmma_commit();
            mma::wgmma_wait_all();
            mma::fence_operand(dlo);
            mma::fence_operand(dhi);
        }
        GDN_FUSED64_CHAIN_MARK(9);
        GDN_FUSED64_CHAIN_EV(7, j);
        uint32_t da[4][4], dl[4][4], d2[4][4];
#pragma unroll
        for (int s = 0; s < 4; ++s) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int jt = 2 * s + (r >> 1), e = 2 * (r & 1);
                da[s][r] = mma::pack_split<M>(x[jt][e], x[jt][e + 1], &dl[s][r]);
                const float f0 = F[8 * jt + 2 * tq].x, f1 = F[8 * jt + 2 * tq + 1].x;
                d2[s][r] = mma::pack2<M>(f0 * x[jt][e], f1 * x[jt][e + 1]);
            }
        }
        // Sᵀ = e^{γ_last} Sᵀ + D2ᵀ k and Oᵀ = e^γ scale Yqᵀ + Dᵀ Pᵀ as one batch of wgmma:
        // D's fragments (value and remainder) are A, P's atom column is B.
        float (&y)[8][4] = *reinterpret_cast<float(*)[8][4]>(&x[8][0]);
        float (&ylo)[4][4] = *reinterpret_cast<float(*)[4][4]>(&x[8][0]);
        float (&yhi)[4][4] = *reinterpret_cast<float(*)[4][4]>(&x[12][0]);
        scale_yq(y, F);
        decay_state(F);
        const uint32_t pb = smem_addr(so + kOP);
        mma::fence_operand(S);
        mma::fence_operand(y);
        mma::fence_operand(d2);
        mma::fence_operand(da);
        mma::fence_operand(dl);
        mma::wgmma_fence();
#pragma unroll
        for (int s = 0; s < 4; ++s)
            mma::wgmma_n128<M, 1>(S, d2[s], mma::wgmma_desc_sw128(ka_s + 2 * s * 1024, kKc, 1024));
#pragma unroll
        for (int s = 0; s < 4; ++s) {
            mma::wgmma_n64<M, 0>(ylo, yhi, dl[s], mma::wgmma_desc_sw128(pb + s * 32, 16, 1024));
            mma::wgmma_n64<M, 0>(ylo, yhi, da[s], mma::wgmma_desc_sw128(pb + s * 32, 16, 1024));
        }
        mma::wgmma_commit();
        mma::wgmma_wait_all();
        mma::fence_operand(S);
        mma::fence_operand(y);
        GDN_FUSED64_CHAIN_MARK(10);
        // The slots are read: the input slot (this CTA's) for chunk j + 4, the output slot
        // (o = j % 2) for chunk j + 2, whose preparing CTA waits on its out_empty[o] before it
        // writes the slot and copies into the peers' ones.
        if (j + 4 < nch) mbar_arrive(bars + 4 + (j & 3));
        if (j + 2 < nch) {
            // (QUAD: the ranks from the block's index here, not held across the chunk.)
            const uint32_t rk = QUAD ? blockIdx.x & 3u : rank;
            const uint32_t q = QUAD ? uint32_t(j + 2) & 3u : rank ^ 1u;
            if (QUAD ? q == rk : uint32_t(j & 1) == rank) {
                mbar_arrive(bars + 10 + (j & 1));
            } else {
                __syncwarp();
                if (lane == 0) mbar_arrive_peer_cta(peer_addr(smem_addr(bars + 10 + (j & 1)), q));
            }
        }
        if (tid == 0) ev(5, j);
        // (quad: the two pairs hold the same values; pair j % 2 writes chunk j's rows.)
        const bool mine = !QUAD || (uint32_t(j & 1) == ((blockIdx.x >> 1) & 1u));
        if (mine) store_out(y, cs, L);  // (from registers: after the release)
        // GDN_FLAG_BLOCK_STATES: the chunk ends a block (C = GDN_STATE_BLOCK) or the
        // sequence; its last token names the slot of the state after it (-1: none).
        if constexpr (TS) {
            static_assert(C == GDN_STATE_BLOCK, "every chunk end is a block end or the sequence's");
            int32_t ts;
            if constexpr (QUAD)
                ts = mine ? a.token_states[cs + L - 1] : -1;
            else
                ts = a.token_states[cs + L - 1];
            if (ts >= 0) {
                // (The thread's columns, the head and the layout from the thread's and the
                // block's index and the parameters here, as store_out's g: held across the
                // chunk they were spilled.)
                const int tx = int(threadIdx.x), col = int(blockIdx.x & 1) * NC + 16 * (tx >> 5) + ((tx >> 2) & 7);
                const int ks = a.state_kv ? 128 : 1, vs = a.state_kv ? 1 : 128;
                float* const dst = a.state + int64_t(ts) * a.slot_stride + int64_t(blockIdx.x >> (QUAD ? 2 : 1)) * K * 128 +
                                   (2 * (tx & 3)) * ks + col * vs;
#pragma unroll
                for (int jj = 0; jj < 16; ++jj)
#pragma unroll
                    for (int e = 0; e < 4; ++e) dst[(8 * jj + (e & 1)) * ks + 8 * (e >> 1) * vs] = S[jj][e];
            }
        }
        GDN_FUSED64_CHAIN_EV(8, j);
        mark(4);
    }
    if constexpr (!TS) {  // (TS: the own slot is only read; the last chunk kept its state)
        if (!QUAD || (blockIdx.x & 2u) == 0)  // (QUAD: pair 0's)
#pragma unroll
            for (int j = 0; j < 16; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) st0[sidx(j, e)] = S[j][e];
    }
#else
    (void)a;
#endif
}

// ---------------------------------------------------------------- host

// The driver's cuTensorMapEncodeTiled through the runtime (no link to libcuda), looked up
// once (a function-local static: thread-safe); null where the driver lacks it.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult qr;
#if CUDART_VERSION >= 12050
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &qr) !=
                cudaSuccess ||
            qr != cudaDriverEntryPointSuccess)
            f = nullptr;
#else  // (toolkits 12.0-12.4: the by-version lookup is 12.5's)
        if (cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &qr) != cudaSuccess ||
            qr != cudaDriverEntryPointSuccess)
            f = nullptr;
#endif
        cudaGetLastError();  // (a failed lookup leaves no error for the caller's next call)
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    }();
    return fn;
}

// A tensor map of [tokens][heads][128] bf16 rows (element strides), boxes of 64 values x
// 1 head x 64 tokens in the atoms' 128-byte swizzle.
inline bool encode_rows(CUtensorMap* m, const void* base, int64_t tokens, int32_t heads, int64_t head_stride,
                        int64_t token_stride) {
    const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    if (!encode) return false;
    // (One head: its stride is never used; any valid one.)
    const int64_t hs = heads == 1 ? 128 : head_stride;
    const cuuint64_t dims[3] = {128, cuuint64_t(heads), cuuint64_t(tokens > 0 ? tokens : 1)};
    const cuuint64_t strides[2] = {cuuint64_t(hs) * 2, cuuint64_t(token_stride) * 2};
    const cuuint32_t box[3] = {64, 1, 64}, es[3] = {1, 1, 1};
    return encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides, box, es,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The kernel's arguments from Params (phases and trace off; the caller picks the NORM
// instance from p.flags); cudaErrorInvalidValue where a tensor map cannot be encoded.
inline cudaError_t make_args(const Params& p, Args* a) {
    *a = Args{};
    if (!encode_rows(&a->tk, p.k, p.num_tokens, p.Hk, p.k_head, p.k_tok) ||
        !encode_rows(&a->tq, p.q, p.num_tokens, p.Hk, p.q_head, p.q_tok) ||
        !encode_rows(&a->tv, p.v, p.num_tokens, p.Hv, p.v_head, p.v_tok))
        return cudaErrorInvalidValue;
    a->q = static_cast<const __nv_bfloat16*>(p.q);
    a->k = static_cast<const __nv_bfloat16*>(p.k);
    a->v = static_cast<const __nv_bfloat16*>(p.v);
    a->q_tok = p.q_tok, a->q_head = p.q_head;
    a->k_tok = p.k_tok, a->k_head = p.k_head;
    a->v_tok = p.v_tok, a->v_head = p.v_head;
    a->g = p.g, a->g_tok = p.g_tok, a->g_head = p.g_head;
    a->beta = p.beta, a->b_tok = p.b_tok, a->b_head = p.b_head;
    a->gate_dt = int32_t(p.gate_dt);
    a->gate_raw = (p.flags & GDN_FLAG_GATE_FROM_RAW) != 0;
    a->beta_logits = (p.flags & GDN_FLAG_BETA_FROM_LOGITS) != 0;
    // (With the q/k L2 norm always: the library's NORM instances are GX ones, fused64.cu.)
    a->gate_xform = p.gate_dt != GDN_DTYPE_F32 || a->gate_raw || a->beta_logits || (p.flags & GDN_FLAG_QK_L2NORM);
    a->A_log = p.A_log, a->dt_bias = p.dt_bias;
    a->l2eps = p.l2norm_eps;
    a->out = p.out, a->o_tok = p.o_tok, a->o_head = p.o_head;
    a->out_vec = p.out_dt != GDN_DTYPE_F32 && reinterpret_cast<uintptr_t>(p.out) % 8 == 0 && p.o_tok % 4 == 0 &&
                 p.o_head % 4 == 0;
    a->state = p.state, a->slot_stride = p.slot_stride;
    a->cu = p.cu_seqlens, a->cu_end = 1, a->equal_len = p.equal_len;
    a->state_indices = p.state_indices, a->start_from_zero = p.start_from_zero;
    a->token_states = p.token_state_indices;
    a->N = p.num_seqs, a->Hk = p.Hk, a->Hv = p.Hv, a->G = p.G;
    a->grouped = p.grouped, a->state_kv = p.state_kv;
    a->scale = p.scale;
    return cudaSuccess;
}

// A cluster of 2 CTAs (4 with a.quad, a QUAD instance) per value head in x, a sequence per y; 512 threads,
// kRSmem bytes of dynamic shared memory (the kernel's attribute raised first).
// pdl (GDN_FLAG_PDL): a programmatic dependent of the caller's work ahead,
// which the kernel waits for before its first access.
inline cudaError_t launch_args(void (*kern)(Args), const Args& a, cudaStream_t stream, bool pdl = false) {
    cudaLaunchConfig_t cfg = {};
    const unsigned P = a.quad ? 4 : 2;
    cfg.gridDim = dim3(P * unsigned(a.Hv), unsigned(a.N));
    cfg.blockDim = dim3(512);
    cfg.dynamicSmemBytes = kRSmem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[2] = {};
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = P, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr, cfg.numAttrs = pdl ? 2 : 1;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kern, a);
    // Consumed, as launch_kernel (device_common.cuh) does: the failure is this call's.
    const cudaError_t last = cudaGetLastError();
    return e != cudaSuccess ? e : last;
}

#ifdef GDN_FUSED64_PROFILE
}  // inline namespace profiled
#endif
}  // namespace gdn::cuda::fused64
