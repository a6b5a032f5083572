// gdn_fused64_probe: what a fused chunked kernel would gain (docs/perf-notes.md v40), measured
// on its own before the library takes it. The BF16 recurrence in ONE kernel with chunks of
// C = 64: a CTA per (sequence, value head, 64 value columns), 256 threads:
//  - warps 0-3 (one warpgroup) carry the state Sᵀ (64 columns x K = 128, FP32) in registers
//    across the sequence's chunks, as the library's register-state scan does at C = 32:
//    [Dᵀ | Yqᵀ] = Sᵀ [−W | q]ᵀ and Sᵀ = e^{γ_last} Sᵀ + D2ᵀ k on wgmma (m64n128k16, B from
//    128-byte-swizzled atoms), Oᵀ = e^γ Yqᵀ + Dᵀ Pᵀ on mma.sync (Dᵀ, P as value + remainder);
//  - warps 4-7 do the prep of the next chunk in the same CTA (what chunk_prep.cu does in its
//    own kernel, through global scratch): γ, k·kᵀ and q·kᵀ as 16 wgmma with both operands in
//    the atoms, A and P, the four diagonal 16 x 16 blocks of T = (I + A)^{-1}, then a blocked
//    solve X = T [diag(β e^γ) k | diag(β) v] by 16-token blocks, each warp 48 of the 192
//    right-hand columns (no warp waits for another), −W into the wgmma atoms (stmatrix) and
//    Ũᵀ for the state warps;
//  - two stages, one barrier per chunk: the state warps work on chunk j while the prep warps
//    prepare chunk j + 1; the raw rows of chunk j + 2 (cp.async) go into chunk j's stage as
//    soon as the state warps' last wgmma of chunk j has read its k/q atoms (barrier 2).
// Plain features only (bf16 q/k/v, f32 g/β, K = V = 128, grouped heads, state [N][Hv][K][V]
// of slots 0..N−1, f32 outputs); it checks itself against the project's FP64 reference
// (gdn::ref::run, as the tests do), reruns for identical bits, prints a hash of the bits to
// compare two builds by, and times itself.
// Options:
//  --role chain|prep   time one role alone (the other only meets the barriers; the results
//                      are then garbage); --noload 1 leaves the copies out too;
//  --phases 1          the cycles per chunk of each warp's phases in CTA 0 (clock64);
//  --cluster 1         a head's two column halves as a cluster of two CTAs whose step barrier
//                      is the cluster's (what splitting the prep between them would cost);
//  --tchain 1          T on the chain, as FlashInfer's kernel has it: the prep makes T's
//                      columns (the solve with R = I) and stores T diag(β) as a value and
//                      remainder; the state warps form Dᵀ = (vᵀ − e^γ ⊙ S0ᵀkᵀ)(T diag(β))ᵀ
//                      with 12 more wgmma (m64n64k16); no −W, no Ũᵀ.
//  --two 1             T on the chain with two preps in flight (512 threads): the state
//                      warpgroup (setmaxnreg 216), two prep warpgroups on alternate chunks
//                      (136 each) and a load warpgroup (24) that copies chunk j into stage
//                      j % 3 once chunk j − 3 is read; three compact stages (T diag(β) and P
//                      one 16-bit term each, P as an atom column), mbarriers full / empty /
//                      loaded per stage; the state update and the output product are one
//                      batch of wgmma (D's fragments as A, P's atoms as B);
//  --pair 1            --two with a head's two column halves as a cluster of two CTAs that
//                      prepare alternate chunks and bulk-copy T diag(β), P and the factors
//                      into the peer's stage (remote mbarrier arrivals, no cluster barrier
//                      per chunk);
//  --trace 1           (with --two or --pair) each chunk's event times in CTAs 0 and 1 and the
//                      mean time of each step on the path load -> prep -> chain;
//  --tma 1             (with --two or --pair) k, q and v copied by TMA (one thread, five boxes);
//  --split 1           (with --pair 1 --tma 1) both prep warpgroups of a CTA on one chunk (the
//                      CTA's every other chunk), T by 16 -> 32 -> 64 blocks of its inverse;
//  --early 1           (with --split 1) the state warps' first product of a chunk before its
//                      `full` wait, and the stage released before the outputs' stores;
//  --rings 1           (with --split 1) two rings instead of the three stages: four input
//                      slots (k, q, v, g, β; chunk j in slot j % 4) and two output slots
//                      (T diag(β), P, F; slot j % 2, the preparing CTA's rank), so a prep
//                      waits for a free output slot only before its last stores;
//  --balance 1         (with --rings 1) warpgroup 1 forms Pᵀ = k·qᵀ (stored as P by
//                      stmatrix.trans), so that A's and Pᵀ's live tiles balance the four
//                      schedulers; the exponentials without the denormal guard; T's
//                      diagonal blocks from 16-byte row loads (perf-notes v44).
//
// Built by CMake where CUDA is on (sm_90a: wgmma); runs on an sm_90 device, says "skipped"
// elsewhere. Results on the H200: docs/perf-notes.md v40-v44 and docs/cuda.md (nineteenth
// to twenty-second runs). Built with -DGDN_PROBE_HANG_REPORT, a wait that times out records
// where and returns (the results are then garbage) instead of trapping.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/error.hpp"
#include "common/reference.hpp"
#include "common/validate.hpp"
#include "cuda/device_common.cuh"
#include "cuda/mma.cuh"
#include "gdn/gdn.h"

using namespace gdn::cuda;
constexpr ScanMode M = ScanMode::kBf16;

#ifndef GDN_PROBE_REG_STATE
#define GDN_PROBE_REG_STATE 216
#endif
#ifndef GDN_PROBE_REG_LOAD
#define GDN_PROBE_REG_LOAD 24
#endif
#ifndef GDN_PROBE_REG_PREP
#define GDN_PROBE_REG_PREP 136
#endif

namespace probe {

constexpr int C = 64, K = 128, NC = 64;
struct Args {
    // TMA (SKIP & 128): k and q as [tokens][Hk][128], v as [tokens][Hv][128] (bf16), boxes of
    // 64 values x 1 head x 64 tokens with the 128-byte swizzle of the atoms.
    CUtensorMap tk, tq, tv;
    const __nv_bfloat16 *q, *k, *v;
    const float *g, *beta;
    float* state;
    float* out;
    const int* cu;
    int N, Hk, Hv;
    float scale;
    int phases;  // clock64 marks in CTA 0
    int trace;   // TWO: per-chunk event times in CTAs 0 and 1 of sequence 0 (clock64)
};

// Stage layout (bytes from a 1024-aligned stage start). With T on the chain (SKIP & 16) the
// WQ atoms 0..7 hold the k tokens instead of −W (KA is unused), and U holds T diag(β) as two
// atom columns of 8 KB (value, remainder).
constexpr int kWQ = 0;                    // 2 kc x 16 atoms (0..7: −W tokens, 8..15: q tokens)
constexpr int kWQkc = 16 * 1024;
constexpr int kKA = kWQ + 2 * kWQkc;      // 2 kc x 8 atoms: k tokens
constexpr int kKAkc = 8 * 1024;
constexpr int kLDV = 72;                  // v rows: 64 bf16 + 8
constexpr int kV = kKA + 2 * kKAkc;       // [64][72] bf16
constexpr int kLDU = 68;
constexpr int kU = kV + 64 * kLDV * 2;    // Ũᵀ [64 cols][68] f32
constexpr int kLDP = 72;
constexpr int kP = kU + 64 * kLDU * 4;    // P hi [64][72] bf16
constexpr int kPl = kP + 64 * kLDP * 2;   // P lo
constexpr int kF = kPl + 64 * kLDP * 2;   // float4 [64]
constexpr int kG = kF + 64 * 16;          // g → γ [64]
constexpr int kB = kG + 64 * 4;           // β [64]
constexpr int kBE = kB + 64 * 4;          // β e^γ [64]
constexpr int kStageRaw = kBE + 64 * 4;
constexpr int kStage = (kStageRaw + 1023) / 1024 * 1024;
constexpr int kLDA = 68;
static_assert(kLDA % 4 == 0, "--balance reads A's rows by 16-byte loads");
constexpr int kAs = 2 * kStage;           // A [64][68] f32
constexpr int kLDT = 20;
constexpr int kTd = kAs + 64 * kLDA * 4;  // the diagonal blocks of T, [64][20] f32
constexpr int kSmem = kTd + 64 * kLDT * 4 + 1024;
// TWO (SKIP & 32, with T on the chain): two prep warpgroups on alternate chunks, three
// compact stages (T diag(β) and P as one 16-bit term each), mbarriers between the roles.
constexpr int k3V = 2 * kWQkc;                 // [64][72] bf16
constexpr int k3TB = k3V + 64 * kLDV * 2;      // T diag(β) atoms, 8 KB
constexpr int k3P = k3TB + 8192;               // P, an atom column (rows t, columns i), 8 KB
static_assert(k3TB % 1024 == 0 && k3P % 1024 == 0, "T diag(β)'s and P's atoms are 1024-aligned");
constexpr int k3F = k3P + 8192;                // float4 [64]
constexpr int k3G = k3F + 64 * 16;
constexpr int k3B = k3G + 64 * 4;
constexpr int k3BE = k3B + 64 * 4;
// PAIR: what the chain reads of a prep's work (T diag(β), P, the factors), one block.
constexpr int k3Out = k3TB, k3OutBytes = k3F + 64 * 16 - k3TB;
constexpr int k3Stage = (k3BE + 64 * 4 + 1023) / 1024 * 1024;
constexpr int k3Scratch = 64 * kLDA * 4 + 64 * kLDT * 4;  // A and T's diagonal blocks, per prep warpgroup
constexpr int k3As = 3 * k3Stage;
constexpr int k3Bar = k3As + 2 * k3Scratch;   // full[3], empty[3], loaded[3]
constexpr int k3Smem = k3Bar + 128 + 1024;
static_assert(k3Smem <= 232448, "TWO fits the opt-in shared memory");
// TWO's output block (T diag(β), P, F) as offsets from its start (k3Out in a stage, or
// RINGS' output slot).
constexpr int kOTB = 0, kOP = k3P - k3TB, kOF = k3F - k3TB;
static_assert(kOP == 8192 && kOF == 16384 && k3OutBytes == kOF + 64 * 16, "the output block's layout");
// RINGS (SKIP & 1024, with SPLIT): four input slots (the k and q atoms, v's atom column,
// g and β), two output slots (the output block), the scratch (A, then T in f32 over it;
// Z), mbarriers in_loaded[4], in_empty[4], out_full[2], out_empty[2].
constexpr int kRG = 2 * kWQkc + 8192, kRB = kRG + 64 * 4;
constexpr int kRIn = (kRB + 64 * 4 + 1023) / 1024 * 1024;
constexpr int kROut = k3OutBytes;
constexpr int kROut0 = 4 * kRIn;
constexpr int kRAs = kROut0 + 2 * kROut;
constexpr int kRZs = kRAs + 64 * kLDA * 4;
constexpr int kRBar = kRZs + 32 * 36 * 4;
constexpr int kRSmem = kRBar + 128 + 1024;
static_assert(kROut % 1024 == 0 && kROut0 % 1024 == 0, "the output slots' atoms are 1024-aligned");
static_assert(kRSmem <= 232448, "RINGS fits the opt-in shared memory");

__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
}
// The prep warps' own barrier (barrier 1, 128 threads), in the unaligned form:
// `bar.sync` is `barrier.sync.aligned`, which PTX allows only where every
// thread of the CTA executes the same barrier instruction (block_barrier's
// comment, src/cuda/device_common.cuh); the state warps never reach this one.
__device__ __forceinline__ void wg1_bar() { asm volatile("barrier.sync 1, 128;\n" ::: "memory"); }
// e^x as __expf computes it (x · log2 e, then ex2.approx) but flushing denormal results to
// zero: no guard around MUFU.EX2, and volatile, so that it runs unconditionally and a select
// masks it, not a branch (--balance, perf-notes v44).
__device__ __forceinline__ float exp_ftz(float x) {
    float y;
    asm volatile("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x * 1.44269504088896341f));
    return y;
}
__device__ __forceinline__ void wg_bar(int id) { asm volatile("barrier.sync %0, 128;\n" ::"r"(id) : "memory"); }

// mbarriers in shared memory (TWO): init, arrive, wait for the phase of the given parity.
__device__ __forceinline__ void mbar_init(uint64_t* b, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_addr(b)) : "memory");
}
// PAIR: a head's two column halves as a cluster of two CTAs. This CTA's shared address
// as the peer's (mapa), a remote arrive (release at cluster scope), `count` remote arrivals
// that also expect `bytes` of a bulk copy, and the bulk copy from this CTA's shared memory
// into the peer's, which completes them on the peer's mbarrier.
__device__ __forceinline__ uint32_t peer_addr(uint32_t a, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
    return r;
}
__device__ __forceinline__ void mbar_arrive_peer(uint32_t b) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(b) : "memory");
}
// RINGS: a remote arrive with the default semantics (release at CTA scope), as CUTLASS's
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
__device__ __forceinline__ void mbar_arrive_tx(uint64_t* b, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// A probe's wait traps after 2^26 polls (seconds) instead of hanging the device.
#ifdef GDN_PROBE_HANG_REPORT
// Debugging: a wait that times out records where (the first one) and returns.
__device__ unsigned int g_hang[6];
template <bool CLUSTER = false>
__device__ __forceinline__ void mbar_wait(uint64_t* b, int parity) {
    for (unsigned n = 0;; ++n) {
        uint32_t ok;
        if constexpr (CLUSTER)
            asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(ok) : "r"(smem_addr(b)), "r"(parity) : "memory");
        else
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
#else
template <bool CLUSTER = false>
__device__ __forceinline__ void mbar_wait(uint64_t* b, int parity) {
#define GDN_PROBE_WAIT(SEM)                                                          \
    asm volatile(                                                                    \
        "{\n.reg .pred p;\n.reg .u32 n;\nmov.u32 n, 0;\nWAIT_%=:\n"                  \
        "mbarrier.try_wait.parity" SEM ".shared::cta.b64 p, [%0], %1;\n"             \
        "@p bra DONE_%=;\n"                                                          \
        "add.u32 n, n, 1;\nsetp.gt.u32 p, n, 67108864;\n@p trap;\nbra WAIT_%=;\n"   \
        "DONE_%=:\n}\n" ::"r"(smem_addr(b)),                                         \
        "r"(parity)                                                                  \
        : "memory")
    if constexpr (CLUSTER)
        GDN_PROBE_WAIT(".acquire.cluster");
    else
        GDN_PROBE_WAIT("");
#undef GDN_PROBE_WAIT
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
#endif
}

// Byte offset of (token t, column x) in atoms of 8 token rows x 64 16-bit
// columns, 128-byte swizzle, atoms along t contiguous (1024 B), kc stride kcs.
__device__ __forceinline__ int atom_at(int t, int x, int kcs) {
    return (x >> 6) * kcs + (t >> 3) * 1024 + (t & 7) * 128 + ((((x & 63) >> 3) ^ (t & 7)) << 4) + (x & 7) * 2;
}

__device__ unsigned long long g_dbg[12][16];
// --trace (TWO): for CTAs 0 and 1 of sequence 0 and chunks < 256, the cycles since the
// CTA's start at six events: 0 the load warps pass `empty`, 1 their copies issued, 2 the
// prep starts (its copies landed), 3 the prep's arrivals (and PAIR's bulk copy) issued,
// 4 the state warps pass `full` (and `loaded`), 5 they release the stage.
constexpr int kTraceChunks = 256;
__device__ long long g_trace[2][6][kTraceChunks];

// The barrier between chunk steps: the CTA's, or with CLUSTER (SKIP & 8) the
// cluster's (a head's two column halves in one cluster of two CTAs: what a
// prep split between them would need each chunk).
template <int SKIP>
__device__ __forceinline__ void step_barrier() {
    if constexpr ((SKIP & 8) != 0)
        asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    else
        block_barrier();
}

// SKIP, the variant: 1 no prep (its copies only), 2 no chain (the state warps meet the
// barriers only), 4 no copies, 8 the step barrier as the cluster's, 16 T on the chain,
// 32 (with 16) two prep warpgroups and a load warpgroup, 64 (with 48) the cluster pair,
// 128 (with 48) k, q and v by TMA.
template <int SKIP>
__global__ void __launch_bounds__((SKIP & 32) ? 512 : 256, 1) fused64_kernel(const __grid_constant__ Args a) {
#if defined(GDN_HAVE_WGMMA)
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char* const sm =
        smem_raw + ((0u - static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw))) & 1023u);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tq = lane & 3;
    const bool prof = a.phases && blockIdx.x == 0 && blockIdx.y == 0 && lane == 0;
    long long last = clock64();
    const long long t_start = last;
    const bool tracing = a.trace && blockIdx.x < 2 && blockIdx.y == 0;
    auto ev = [&](int e, int j) {
        if (tracing && j < kTraceChunks) g_trace[blockIdx.x][e][j] = clock64() - t_start;
    };
    auto mark = [&](int ph) {
        if (prof) {
            const long long c = clock64();
            atomicAdd(&g_dbg[warp][ph], (unsigned long long)(c - last));
            last = c;
        }
    };
    const int h = blockIdx.x >> 1, c0 = (blockIdx.x & 1) * NC, n = blockIdx.y;
    const int kh = h / (a.Hv / a.Hk);
    const int64_t bos = a.cu[n], eos = a.cu[n + 1];
    const int nch = int((eos - bos + C - 1) / C);
    if (nch == 0) return;
    constexpr bool TWO = (SKIP & 32) != 0;
    static_assert(!TWO || (SKIP & ~(64 | 128 | 256 | 512 | 1024 | 2048)) == 48, "two prep warpgroups: with T on the chain, nothing else");
    constexpr bool SPLIT = (SKIP & 256) != 0;
    static_assert(!SPLIT || (SKIP & ~(512 | 1024 | 2048)) == 496, "both prep warpgroups on one chunk: with the pair and TMA");
    // EARLY (SKIP & 512, with SPLIT): the state warps start a chunk's first product once this
    // CTA's copies have landed and wait for `full` only before the step that reads the prep's
    // outputs; they release the stage before storing the chunk's outputs.
    constexpr bool EARLY = (SKIP & 512) != 0;
    static_assert(!EARLY || SPLIT, "the early chain start: with SPLIT");
    // RINGS (SKIP & 1024, with SPLIT, not EARLY): the input and output rings (kRIn above).
    constexpr bool RINGS = (SKIP & 1024) != 0;
    static_assert(!RINGS || (SKIP & ~2048) == 1520, "the two rings: with SPLIT (not EARLY)");
    // BAL (SKIP & 2048, with RINGS): the prep's tiles balanced over the schedulers (a_or_pt).
    constexpr bool BAL = (SKIP & 2048) != 0;
    static_assert(!BAL || RINGS, "--balance: with --rings");
    // TMA (SKIP & 128): the load warpgroup's thread 0 copies a chunk's k, q and v rows as five
    // boxes (V then in a swizzled 64 x 64 atom column, read by atom_at); g and β stay on
    // cp.async. Rows past the sequence's end are the next sequence's (or zero past the
    // tensor): finite, and every product that reads them is masked or multiplied by β = 0
    // or by F.x = 0 (g and β are zero there).
    constexpr bool TMA = (SKIP & 128) != 0;
    static_assert(!TMA || TWO, "TMA loads: with TWO");
    // PAIR (SKIP & 64, with TWO): a head's two column halves as a cluster of two CTAs that
    // take alternate chunks' preps (CTA r the chunks j = r mod 2, its prep warpgroup pw
    // those with (j >> 1) & 1 = pw) and copy T diag(β), P and the factors into the peer's
    // stage too; a stage is free once both CTAs' state warps have read it.
    constexpr bool PAIR = (SKIP & 64) != 0;
    const uint32_t rank = blockIdx.x & 1, peer = rank ^ 1;
    // TWO's compact stage (the names shadow the two-stage layout's). The prep's outputs
    // (kU, kP, kPl, kF) are offsets from ostage(j): the stage itself, or with TWO its output
    // block (RINGS: the output slot); the rest from stage(j) (RINGS: the input slot).
    constexpr int kU = TWO ? kOTB : probe::kU;
    constexpr int kV = TWO ? k3V : probe::kV;
    constexpr int kP = TWO ? kOP : probe::kP;
    constexpr int kPl = TWO ? kOP : probe::kPl;  // TWO: P has no remainder (never written or read)
    constexpr int kF = TWO ? kOF : probe::kF;
    constexpr int kG = RINGS ? kRG : TWO ? k3G : probe::kG;
    constexpr int kB = RINGS ? kRB : TWO ? k3B : probe::kB;
    constexpr int kBE = TWO ? k3BE : probe::kBE;  // (not RINGS: SPLIT never stores β e^γ)
    auto stage = [&](int j) {
        return RINGS ? sm + (j & 3) * kRIn : TWO ? sm + (j % 3) * k3Stage : sm + (j & 1) * kStage;
    };
    auto ostage = [&](int j) { return RINGS ? sm + kROut0 + (j & 1) * kROut : TWO ? stage(j) + k3Out : stage(j); };
    // TWO: full[3], empty[3], loaded[3]; RINGS: in_loaded[4], in_empty[4], out_full[2],
    // out_empty[2] (full and loaded by the chunk, whichever the layout).
    uint64_t* const bars = reinterpret_cast<uint64_t*>(sm + (RINGS ? kRBar : k3Bar));
    auto bar_full = [&](int j) { return RINGS ? bars + 8 + (j & 1) : bars + j % 3; };
    auto bar_loaded = [&](int j) { return RINGS ? bars + (j & 3) : bars + 6 + j % 3; };
    auto par_full = [&](int j) { return RINGS ? (j >> 1) & 1 : (j / 3) & 1; };
    auto par_loaded = [&](int j) { return RINGS ? (j >> 2) & 1 : (j / 3) & 1; };
    if constexpr (RINGS) {
        // in_loaded[s]: the load warps' threads (two warps) and thread 0's expect_tx; in_empty[s]:
        // this CTA's state threads (the prep of chunk j has read the slot before they pass
        // out_full); out_full[o]: the preparing CTA's 256 prep threads (the peer's: one
        // arrive of count 256 with the bulk copy's bytes); out_empty[o], in CTA o only: its
        // state threads and a lane of each of the peer's state warps.
        if (tid == 0)
            for (int i = 0; i < 12; ++i) mbar_init(bars + i, i < 4 ? 64 + 1 : i < 8 ? 128 : i < 10 ? 256 : 128 + 4);
        // T diag(β)'s blocks above the diagonal are never written: zero them in both output
        // slots (the peer's copies carry its zeros) before the peer may copy into them.
        for (int i = tid; i < 2 * 8192 / 4; i += 512)
            reinterpret_cast<uint32_t*>(sm + kROut0 + (i / 2048) * kROut + kOTB)[i % 2048] = 0u;
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        cluster_sync_all();
    } else if constexpr (TWO) {
        // full[s]: the producing warpgroup's threads (PAIR: from the peer as one arrive of
        // count 128, with the bulk copy's bytes); empty[s]: the state threads (PAIR: and a
        // lane of each of the peer's state warps); loaded[s]: the load warpgroup's threads.
        if (tid == 0)
            for (int i = 0; i < 9; ++i)
                mbar_init(bars + i, i < 3 ? (SPLIT ? 256 : 128) : i < 6 ? (PAIR ? 128 + 4 : 128) : (TMA ? 128 + 1 : 128));
        // SPLIT: T's blocks above the diagonal are never written, in the scratch Tf (f32) and
        // in each stage's T diag(β) (the peer's copies carry its zeros); zero both first, before
        // the peer may copy into this CTA's stages.
        if constexpr (SPLIT) {
            float* const Tf0 = reinterpret_cast<float*>(sm + k3As + k3Scratch);
            for (int i = tid; i < 64 * kLDA; i += 512) Tf0[i] = 0.0f;
            for (int i = tid; i < 3 * 8192 / 4; i += 512)
                reinterpret_cast<uint32_t*>(sm + (i / 2048) * k3Stage + k3TB)[i % 2048] = 0u;
        }
        if constexpr (PAIR) {
            asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
            cluster_sync_all();
        } else {
            __syncthreads();
        }
    }
    // TWO: the state warpgroup takes the registers the prep warpgroups give back, each
    // role's first instruction (ptxas allocates a role's registers to the limit that
    // dominates its code).
    constexpr int kRegState = GDN_PROBE_REG_STATE, kRegPrep = GDN_PROBE_REG_PREP;
    constexpr int kRegLoad = GDN_PROBE_REG_LOAD;
    // The CTA launches with 128 registers a thread (512 threads): the split must fit the
    // 512 x 128 the launch holds, or setmaxnreg.inc waits forever (run 130, at 384 threads
    // and 224 + 2 x 144). setmaxnreg is a whole warpgroup's: the load warps are four.
    static_assert(kRegState + 2 * kRegPrep + kRegLoad <= 4 * 128 && kRegState % 8 == 0 &&
                      kRegPrep % 8 == 0 && kRegLoad % 8 == 0,
                  "setmaxnreg split");
    // TC (SKIP & 16): T on the chain. The k atoms are the WQ region's first half (the
    // [k | q] operand of the first product and the update's B), T diag(β) as a 16-bit value
    // and remainder in two 8 KB atom columns where Ũᵀ is otherwise.
    constexpr bool TC = (SKIP & 16) != 0;
    constexpr int kK = TC ? kWQ : kKA, kKc = TC ? kWQkc : kKAkc;

    // A chunk's raw rows into its stage by cp.async (zero past the sequence's end), from a
    // warpgroup's 128 threads (lt their index): the prep's, or TWO's load warpgroup.
    constexpr int NTH = 128;
    auto load = [&](int j, int lt) {
        unsigned char* st = stage(j);
        const int64_t cs = bos + int64_t(j) * C;
        const int L = int(eos - cs < C ? eos - cs : C);
        if constexpr (TMA) {
            if (lt == 0) {
                uint64_t* bar = bar_loaded(j);
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
            if constexpr (RINGS) {
                // (Two warps: a token's g and β each.)
                const int t = lt & 63;
                const bool ok = t < L;
                cp_async4(st + kG + 4 * t, ok ? a.g + (cs + t) * a.Hv + h : a.g, ok ? 4 : 0);
                cp_async4(st + kB + 4 * t, ok ? a.beta + (cs + t) * a.Hv + h : a.beta, ok ? 4 : 0);
            } else if (lt < 128) {
                const int t = lt & 63;
                const bool ok = t < L;
                const float* src = lt < 64 ? a.g : a.beta;
                cp_async4(st + (lt < 64 ? kG : kB) + 4 * t, ok ? src + (cs + t) * a.Hv + h : src, ok ? 4 : 0);
            }
            cp_async_commit();
        } else {
#pragma unroll(TWO ? 2 : 1024 / NTH)
            for (int i = 0; i < 1024 / NTH; ++i) {
                const int id = lt + NTH * i, t = id >> 4, p = id & 15;
                const bool ok = t < L;
                const int64_t row = (cs + t) * a.Hk + kh;
                cp_async16(st + kK + atom_at(t, 8 * p, kKc), ok ? a.k + row * K + 8 * p : a.k, ok ? 16 : 0);
                cp_async16(st + kWQ + 8 * 1024 + atom_at(t, 8 * p, kWQkc), ok ? a.q + row * K + 8 * p : a.q,
                           ok ? 16 : 0);
            }
#pragma unroll(TWO ? 2 : 512 / NTH)
            for (int i = 0; i < 512 / NTH; ++i) {
                const int id = lt + NTH * i, t = id >> 3, p = id & 7;
                const bool ok = t < L;
                cp_async16(st + kV + t * kLDV * 2 + 16 * p,
                           ok ? a.v + ((cs + t) * a.Hv + h) * 128 + c0 + 8 * p : a.v, ok ? 16 : 0);
            }
#pragma unroll
            for (int i = 0; i < 128 / NTH; ++i) {
                const int id = lt + NTH * i, t = id & 63;
                const bool ok = t < L;
                const float* src = id < 64 ? a.g : a.beta;
                cp_async4(st + (id < 64 ? kG : kB) + 4 * t, ok ? src + (cs + t) * a.Hv + h : src, ok ? 4 : 0);
            }
            cp_async_commit();
            // The chunk after it into L2.
            const int64_t cn = cs + C;
            if (cn < eos) {
#pragma unroll
                for (int i = 0; i < 128 / NTH; ++i) {
                    const int id = lt + NTH * i, t = id & 63;
                    if (cn + t < eos) {
                        const int64_t row = (cn + t) * a.Hk + kh;
                        const __nv_bfloat16* src = id < 64 ? a.k : a.q;
                        prefetch_l2(src + row * K);
                        prefetch_l2(src + row * K + 64);
                        if (id < 64) prefetch_l2(a.v + ((cn + t) * a.Hv + h) * 128 + c0);
                    }
                }
            }
        }
        return L;
    };

    if (TWO && warp >= 12) {
        // ------------------------------------------------------------ load (TWO)
        if constexpr (TWO) {
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegLoad) : "memory");
            if (RINGS && warp >= 14) {
                // RINGS: one thread hands this CTA's prepared chunks to the peer (the bulk copy
                // of the output slot and the peer's out_full arrivals), off the prep's path:
                // issued from a prep thread, it held the prep warpgroups at their next barrier
                // (~0.25 µs a chunk, run 151). Chunk j + 2's phase of out_full needs the peer's
                // chain to have read chunk j's copy, so the parity wait is unambiguous.
                if (tid == 448) {
                    for (int j = int(rank); j < nch; j += 2) {
                        mbar_wait(bar_full(j), par_full(j));
                        const uint32_t pb = peer_addr(smem_addr(bar_full(j)), peer);
                        const uint32_t src = smem_addr(ostage(j));
                        mbar_arrive_tx_peer(pb, kROut, 256);
                        bulk_to_peer(peer_addr(src, peer), src, kROut, pb);
                        ev(3, j);
                    }
                    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
                }
                return;
            }
            // Chunk j into stage j % 3 once chunk j − 3 is read (RINGS: input slot j % 4 once
            // chunk j − 4 is, by this CTA's state warps alone); loaded completes when every
            // thread's copies have landed (cp.async.mbarrier.arrive.noinc).
            // (RINGS: warps 12 and 13.)
            for (int j = 0; j < nch; ++j) {
                if constexpr (RINGS)
                    mbar_wait(bars + 4 + (j & 3), ((j >> 2) & 1) ^ 1);
                else
                    mbar_wait<PAIR>(bars + 3 + j % 3, ((j / 3) & 1) ^ 1);
                if (tid == 384) ev(0, j);
                load(j, tid - 384);
                if (tid == 384) ev(1, j);
                asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar_loaded(j)))
                             : "memory");
            }
            cp_async_wait_all();
        }
        return;
    }
    if (warp >= 4) {
        // ------------------------------------------------------------ prep
        // (From the launch's 128: .dec may only lower the count, .inc only raise it.)
        if constexpr (TWO && kRegPrep > 128)
            asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegPrep) : "memory");
        else if constexpr (TWO && kRegPrep < 128)
            asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegPrep) : "memory");
        const int tw = (tid - 128) & 127, wq = (warp - 4) & 3;
        const int pw = TWO ? (warp - 4) >> 2 : 0;  // TWO: prep warpgroup 0 or 1
        float* const As = reinterpret_cast<float*>(sm + (TWO ? k3As + pw * k3Scratch : kAs));
        float* const Td = reinterpret_cast<float*>(sm + (TWO ? k3As + pw * k3Scratch + 64 * kLDA * 4 : kTd));
        auto wg1_bar = [&] { wg_bar(1 + 2 * pw); };  // barriers 1 and 3
        // A chunk's copies landed and visible to wgmma (the async proxy).
        auto wait_loaded = [&] {
            cp_async_wait_all();
            mma::fence_proxy_async_shared();
            wg1_bar();
        };
        // γ (the running sum of g) in place, β e^γ and the per-token factors F: one warp.
        // (scan_gamma: γ of tokens lane and lane + 32 into x0, x1, in registers; any warp.)
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
        // (store_f: F from γ into so's; with_g also γ into G and β e^γ into BE of st, for the
        // prep's later reads.)
        auto store_f = [&](unsigned char* st, unsigned char* so, int L, float x0, float x1, bool with_g) {
            float* G = reinterpret_cast<float*>(st + kG);
            const float* Bt = reinterpret_cast<const float*>(st + kB);
            float* BE = reinterpret_cast<float*>(st + kBE);
            float4* F = reinterpret_cast<float4*>(so + kF);
            const float gl = __shfl_sync(0xffffffffu, (L - 1) < 32 ? x0 : x1, (L - 1) & 31);
            if (with_g) {
                G[lane] = x0, G[lane + 32] = x1;
                BE[lane] = Bt[lane] * __expf(x0), BE[lane + 32] = Bt[lane + 32] * __expf(x1);
            }
            const float el = __expf(gl);
            F[lane] = make_float4(lane < L ? __expf(gl - x0) : 0.0f, __expf(x0) * a.scale, el, __expf(x0));
            F[lane + 32] = make_float4(lane + 32 < L ? __expf(gl - x1) : 0.0f, __expf(x1) * a.scale, el, __expf(x1));
        };
        auto factors = [&](unsigned char* st, unsigned char* so, int L) {
            float x0, x1;
            scan_gamma(st, x0, x1);
            store_f(st, so, L, x0, x1, true);
        };
        // k·kᵀ (qk false) or q·kᵀ (true), 64 x 64, as 8 wgmma m64n64k16 with both operands
        // from the stage's atoms: a warpgroup's; warp wq holds rows 16 wq...
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
        // The solve's 16 x 16 operands as 16-bit values and remainders: B from 16 rows
        // (of −A: As, block (i, j); of T_ii: Td) in the m16n8k16 "col" layout, and acc +=
        // x · B with x given as the C layout of two 8-token tiles (three products).
        auto b_of = [&](const float* rows, int ld, float sign, uint32_t(&bh)[2][2], uint32_t(&bl)[2][2]) {
#pragma unroll
            for (int n2 = 0; n2 < 2; ++n2) {
                const float* r = rows + (8 * n2 + g) * ld + 2 * tq;
                const float2 x0 = *reinterpret_cast<const float2*>(r);
                const float2 x1 = *reinterpret_cast<const float2*>(r + 8);
                bh[n2][0] = mma::pack_split<M>(sign * x0.x, sign * x0.y, &bl[n2][0]);
                bh[n2][1] = mma::pack_split<M>(sign * x1.x, sign * x1.y, &bl[n2][1]);
            }
        };
        auto mma3 = [&](float(&acc)[2][4], const float(&x)[2][4], const uint32_t(&bh)[2][2],
                        const uint32_t(&bl)[2][2]) {
            uint32_t ah[4], al[4];
            ah[0] = mma::pack_split<M>(x[0][0], x[0][1], &al[0]);
            ah[1] = mma::pack_split<M>(x[0][2], x[0][3], &al[1]);
            ah[2] = mma::pack_split<M>(x[1][0], x[1][1], &al[2]);
            ah[3] = mma::pack_split<M>(x[1][2], x[1][3], &al[3]);
#pragma unroll
            for (int n2 = 0; n2 < 2; ++n2) {
                mma::mma16<M>(acc[n2], al, bh[n2]);
                mma::mma16<M>(acc[n2], ah, bl[n2]);
                mma::mma16<M>(acc[n2], ah, bh[n2]);
            }
        };
        // The same for one 8-column tile n2 of B, and acc (one m16n8 tile) += x · B.
        auto b_of1 = [&](const float* rows, int ld, float sign, int n2, uint32_t(&bh)[2], uint32_t(&bl)[2]) {
            const float* r = rows + (8 * n2 + g) * ld + 2 * tq;
            const float2 x0 = *reinterpret_cast<const float2*>(r);
            const float2 x1 = *reinterpret_cast<const float2*>(r + 8);
            bh[0] = mma::pack_split<M>(sign * x0.x, sign * x0.y, &bl[0]);
            bh[1] = mma::pack_split<M>(sign * x1.x, sign * x1.y, &bl[1]);
        };
        auto mma3_1 = [&](float(&acc)[4], const float(&x)[2][4], const uint32_t(&bh)[2], const uint32_t(&bl)[2]) {
            uint32_t ah[4], al[4];
            ah[0] = mma::pack_split<M>(x[0][0], x[0][1], &al[0]);
            ah[1] = mma::pack_split<M>(x[0][2], x[0][3], &al[1]);
            ah[2] = mma::pack_split<M>(x[1][0], x[1][1], &al[2]);
            ah[3] = mma::pack_split<M>(x[1][2], x[1][3], &al[3]);
            mma::mma16<M>(acc, al, bh);
            mma::mma16<M>(acc, ah, bl);
            mma::mma16<M>(acc, ah, bh);
        };
        // T_ww = (I + A_ww)^{-1}, the diagonal 16 x 16 block of warp wq (lane c a column), from
        // A (rows of ldA) into dst: rows 16 wq.., columns col0.. (dst may be A's block itself:
        // the warp's reads are done before its stores).
        auto t_diag = [&](const float* A, float* dst, int ld, int col0) {
            const int cc = lane & 15, b0 = 16 * wq;
            float Tc[16];
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                // Four partial sums: a quarter of the dependent chain. (BAL: the row by
                // 16-byte loads, kLDA and b0 keep them aligned; each sum in the same order.)
                float x[4] = {r == cc ? 1.0f : 0.0f, 0.0f, 0.0f, 0.0f};
                const float* Ar = A + (b0 + r) * kLDA + b0;
                if constexpr (BAL) {
#pragma unroll
                    for (int m4 = 0; 4 * m4 < r; ++m4) {
                        const float4 a4 = reinterpret_cast<const float4*>(Ar)[m4];
                        const float av[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
                        for (int u = 0; u < 4; ++u)
                            if (4 * m4 + u < r) x[u] -= av[u] * Tc[4 * m4 + u];
                    }
                } else {
#pragma unroll
                    for (int m = 0; m < r; ++m) x[m & 3] -= Ar[m] * Tc[m];
                }
                Tc[r] = (x[0] + x[1]) + (x[2] + x[3]);
            }
            __syncwarp();
            if (lane < 16)
#pragma unroll
                for (int r = 0; r < 16; ++r) dst[(b0 + r) * ld + col0 + cc] = Tc[r];
        };
        // SPLIT (SKIP & 256, with PAIR and TMA): both prep warpgroups (warps w8 = 0..7) on
        // one chunk, every other chunk of the sequence (the peer CTA takes the others), to
        // cut a chunk's prep latency (perf-notes v42):
        //  - warpgroup 0 forms k·kᵀ, A and T's diagonal blocks while warpgroup 1 forms q·kᵀ
        //    and P;
        //  - T = (I + A)^{-1} by blocks, transposed (U = Tᵀ, the C layout rows c, columns t,
        //    products as 16-bit values and remainders, mma3):
        //    level 2: U_ab = −U_aa A_baᵀ U_bb for (a, b) = (0, 1), (2, 3), four warps (one per
        //    8-column half); meanwhile warpgroup 1 starts Z = U_0 A_10ᵀ (the 32 x 32 halves);
        //    level 3: U_01 (32 x 32) = −Z U_1, eight warps of one m16n8 tile each;
        //  - T (f32, rows t, in Tf) then T diag(β) into the atom column by all 256 threads.
        // Scratch: A in the first warpgroup's, Tf and Z in the second's; Tf's blocks above
        // the diagonal stay zero.
        // RINGS: no Tf; T's f32 blocks are written over A's (As), each after its last read:
        // the diagonal ones by their warp, the level-2 ones (1, 0) and (3, 2) after warpgroup
        // 0's barrier; the blocks Z reads, (2, 0), (2, 1), (3, 0), (3, 1), stay A's.
        const int w8 = warp - 4, wg = w8 >> 2;
        float* const Asp = reinterpret_cast<float*>(sm + (RINGS ? kRAs : k3As));
        float* const Tf = RINGS ? Asp : reinterpret_cast<float*>(sm + k3As + k3Scratch);
        float* const Zs = reinterpret_cast<float*>(sm + (RINGS ? kRZs : k3As + k3Scratch + 64 * kLDA * 4));
        constexpr int kLDZ = 36;
        static_assert(32 * kLDZ * 4 <= 64 * kLDT * 4, "Z fits the second warpgroup's T scratch");
        auto bar_all = [] { asm volatile("barrier.sync 1, 256;\n" ::: "memory"); };
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
            auto tb_store = [&](int t, int c, float v) {
                *reinterpret_cast<__nv_bfloat16*>(so + kU + atom_at(t, c, 0)) = __float2bfloat16_rn(v * Bt[c]);
            };
            // The product (k·kᵀ for warpgroup 0, q·kᵀ for 1) runs while every warp scans γ
            // itself (no barrier for it); warp 0 stores the state warps' factors F (RINGS:
            // at the end, with the other outputs).
            float x[8][4] = {};
            float y0, y1;
            product(x, st, wg == 1, [&] {
                scan_gamma(st, y0, y1);
                if (!RINGS && w8 == 0) store_f(st, so, L, y0, y1, false);
            });
            uint32_t pk[2][8];  // RINGS: P's (BAL: Pᵀ's) 16-bit pairs (warpgroup 1) until the output slot is free
            mark(2);
            // A (warpgroup 0, strictly lower, f32) or P (1, lower, one 16-bit term in an atom
            // column) of rows 16 wq..; γ by shuffles, each column's once for both row halves.
            // (One loop per warpgroup: a branch inside the unrolled loop kept the compiler
            // from overlapping its iterations, run 153.)
            auto a_or_p = [&](auto is_a) {
                constexpr bool kIsA = decltype(is_a)::value;
                float gt[2], bt[2];
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int t = 16 * wq + g + 8 * hf;
                    gt[hf] = __shfl_sync(0xffffffffu, wq < 2 ? y0 : y1, t & 31), bt[hf] = Bt[t];
                }
#pragma unroll
                for (int nt = 0; nt < 8; ++nt) {
                    const int i = 8 * nt + 2 * tq;
                    const float gi0 = __shfl_sync(0xffffffffu, nt < 4 ? y0 : y1, i & 31);
                    const float gi1 = __shfl_sync(0xffffffffu, nt < 4 ? y0 : y1, (i + 1) & 31);
#pragma unroll
                    for (int hf = 0; hf < 2; ++hf) {
                        const int t = 16 * wq + g + 8 * hf;
                        const float e0 = __expf(gt[hf] - gi0), e1 = __expf(gt[hf] - gi1);
                        if constexpr (kIsA) {
                            *reinterpret_cast<float2*>(Asp + t * kLDA + i) =
                                make_float2(i < t ? bt[hf] * e0 * x[nt][2 * hf] : 0.0f,
                                            i + 1 < t ? bt[hf] * e1 * x[nt][2 * hf + 1] : 0.0f);
                        } else {
                            const float p0 = i <= t ? a.scale * e0 * x[nt][2 * hf] : 0.0f;
                            const float p1 = i + 1 <= t ? a.scale * e1 * x[nt][2 * hf + 1] : 0.0f;
                            if constexpr (RINGS)
                                pk[hf][nt] = mma::pack2<M>(p0, p1);
                            else
                                *reinterpret_cast<uint32_t*>(so + kP + atom_at(t, i, 0)) = mma::pack2<M>(p0, p1);
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
                // The diagonal block's T diag(β): lane c < 16 holds column 16 wq + c (Tf's row
                // of this warp, read back: its own stores). RINGS: at the end.
                __syncwarp();
                if (!RINGS && lane < 16)
#pragma unroll
                    for (int r = 0; r < 16; ++r)
                        tb_store(16 * wq + r, 16 * wq + lane, Tf[(16 * wq + r) * kLDA + 16 * wq + lane]);
            }
            mark(5);
            bar_all();  // T's diagonal blocks
            // Level 2 (warpgroup 0) and Z's first terms (1); each phase ends at a barrier
            // that both warpgroups reach at the same instruction.
            uint32_t b1h[2], b1l[2];
            float z0[4] = {};
            const int nb = wq >> 1, hz = wq & 1, zc = 16 * nb + 8 * hz;
            if (wg == 0) {
                // U_ab = −(U_aa A_baᵀ) U_bb, a = 2h, b = 2h + 1; this warp's 8 columns nh.
                const int a0 = 32 * (wq >> 1), b0 = a0 + 16, nh = wq & 1;
                float u[2][4], y[2][4] = {}, o[4] = {};
                u_tile(u, a0, a0);
                uint32_t bh[2][2], bl[2][2], ch[2], cl[2];
                b_of(Asp + b0 * kLDA + a0, kLDA, 1.0f, bh, bl);
                mma3(y, u, bh, bl);
                b_of1(Tf + b0 * kLDA + b0, kLDA, -1.0f, nh, ch, cl);
                mma3_1(o, y, ch, cl);
                if constexpr (RINGS) wg_bar(3);  // both warps of the block have read A_ba: T_ba over it
                u_store(o, a0, b0 + 8 * nh);
                if constexpr (!RINGS)
#pragma unroll
                    for (int e = 0; e < 4; ++e) tb_store(b0 + 8 * nh + 2 * tq + (e & 1), a0 + g + 8 * (e >> 1), o[e]);
            } else {
                // Z = U_0 A_10ᵀ, this warp's 8 columns (tokens 32 + 16 nb + 8 hz..): Z's row block
                // 1 is U_11 A_{2+nb,1}ᵀ; its row block 0 is U_00 A_{2+nb,0}ᵀ + U_01 A_{2+nb,1}ᵀ,
                // whose U_01 is level 2's (the next phase).
                uint32_t b0h[2], b0l[2];
                b_of1(Asp + (32 + 16 * nb) * kLDA, kLDA, 1.0f, hz, b0h, b0l);
                b_of1(Asp + (32 + 16 * nb) * kLDA + 16, kLDA, 1.0f, hz, b1h, b1l);
                float u[2][4], z1[4] = {};
                u_tile(u, 0, 0);
                mma3_1(z0, u, b0h, b0l);
                u_tile(u, 16, 16);
                mma3_1(z1, u, b1h, b1l);
                z_store(z1, 16, zc);
            }
            mark(6);
            bar_all();  // U_01, U_23
            if (wg == 1) {
                float u[2][4];
                u_tile(u, 0, 16);
                mma3_1(z0, u, b1h, b1l);
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
                    uint32_t bh[2], bl[2];
                    z_tile(z, 16 * r, 16 * nb);
                    b_of1(Tf + (32 + 16 * nbp) * kLDA + 32 + 16 * nb, kLDA, -1.0f, hf, bh, bl);
                    mma3_1(o, z, bh, bl);
                }
                if constexpr (RINGS) {
                    // The output slot is free once both CTAs' state warps have read chunk
                    // j − 2 from it (this CTA's and the peer's copy): only now. (Waiting in
                    // warpgroup 1 right after P, while warpgroup 0 forms T's diagonal blocks, and
                    // storing P and F then lost 17%, run 154.)
                    mark(13);
                    mbar_wait(bars + 10 + (j & 1), ((j >> 1) & 1) ^ 1);
                    mark(14);
                    if (w8 == 0) store_f(st, so, L, y0, y1, false);
                    if (wg == 1) {
                        if constexpr (BAL) {
                            // P from Pᵀ's fragments: stmatrix.trans writes the 8 x 8 tile of Pᵀ
                            // rows i0.., columns t0.. as P's rows t0 + r8 (8 keys from i0 each).
                            const int mi = lane >> 3, r8 = lane & 7;
#pragma unroll
                            for (int u = 0; u < 4; ++u)
                                mma::stmatrix_x4_trans(
                                    so + kP + atom_at(16 * u + 8 * (mi >> 1) + r8, 16 * wq + 8 * (mi & 1), 0),
                                    pk[0][2 * u], pk[1][2 * u], pk[0][2 * u + 1], pk[1][2 * u + 1]);
                        } else {
#pragma unroll
                            for (int hf2 = 0; hf2 < 2; ++hf2)
#pragma unroll
                                for (int nt = 0; nt < 8; ++nt)
                                    *reinterpret_cast<uint32_t*>(
                                        so + kP + atom_at(16 * wq + g + 8 * hf2, 8 * nt + 2 * tq, 0)) = pk[hf2][nt];
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
                        *reinterpret_cast<__nv_bfloat162*>(so + kU + atom_at(t, c, 0)) =
                            __floats2bfloat162_rn(v.x * Bt[c], v.y * Bt[c + 1]);
                    }
                }
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    tb_store(32 + 16 * nbp + 8 * hf + 2 * tq + (e & 1), 16 * r + g + 8 * (e >> 1), o[e]);
            }
            mma::fence_proxy_async_shared();
            mark(7);
        };
        auto prep = [&](int j, int L) {
            unsigned char* st = stage(j);
            unsigned char* so = ostage(j);
            float* G = reinterpret_cast<float*>(st + kG);
            const float* Bt = reinterpret_cast<const float*>(st + kB);
            float* BE = reinterpret_cast<float*>(st + kBE);
            // γ (running sum of g), and the per-token factors: warp 0.
            if (wq == 0) factors(st, so, L);
            // k·kᵀ and q·kᵀ (64 x 64 each) as 16 wgmma m64n64k16 with both operands
            // from the atoms; warp wq holds rows 16 wq.. of both.
            float kk[8][4] = {}, qk[8][4] = {};
            product(kk, st, false, [] {});
            product(qk, st, true, [] {});
            mark(2);
            wg1_bar();  // γ, βe^γ, F
            mark(3);
            // A (strictly lower, f32) and P (lower, 16-bit value and remainder) of
            // rows 16 wq..: one exponential for both (TWO: P as one term, in an atom column).
            {
                uint32_t* Ph = reinterpret_cast<uint32_t*>(so + kP);
                uint32_t* Pl = reinterpret_cast<uint32_t*>(so + kPl);
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int t = 16 * wq + g + 8 * hf;
                    const float gt = G[t], bt = Bt[t];
                    // Every tile, the masked ones too: straight-line code whose
                    // loads and exponentials overlap.
#pragma unroll
                    for (int nt = 0; nt < 8; ++nt) {
                        const int i = 8 * nt + 2 * tq;
                        const float2 gi = *reinterpret_cast<const float2*>(G + i);
                        const float e0 = __expf(gt - gi.x), e1 = __expf(gt - gi.y);
                        *reinterpret_cast<float2*>(As + t * kLDA + i) =
                            make_float2(i < t ? bt * e0 * kk[nt][2 * hf] : 0.0f,
                                        i + 1 < t ? bt * e1 * kk[nt][2 * hf + 1] : 0.0f);
                        const float p0 = i <= t ? a.scale * e0 * qk[nt][2 * hf] : 0.0f;
                        const float p1 = i + 1 <= t ? a.scale * e1 * qk[nt][2 * hf + 1] : 0.0f;
                        if constexpr (TWO) {
                            // One 16-bit term, in an atom column (rows t, columns i): the
                            // state warps' output wgmma reads it as B.
                            *reinterpret_cast<uint32_t*>(so + kP + atom_at(t, i, 0)) = mma::pack2<M>(p0, p1);
                        } else {
                            uint32_t lo;
                            const uint32_t hi = mma::pack_split<M>(p0, p1, &lo);
                            Ph[(t * kLDP + i) >> 1] = hi;
                            Pl[(t * kLDP + i) >> 1] = lo;
                        }
                    }
                }
            }
            mark(11);
            wg1_bar();
            mark(4);
            t_diag(As, Td, kLDT, 0);
            wg1_bar();
            mark(5);
            if constexpr (TC) {
                // T's columns 16 wq.. (Tᵀ's rows, C layout: rows c, columns t) by the solve
                // with R = I: block rows i >= wq (T is lower triangular); then T diag(β)
                // as a value and remainder into the two atom columns (rows t, columns c).
                float X[4][2][4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    if (i < wq) continue;
                    float Y[2][4];
#pragma unroll
                    for (int n2 = 0; n2 < 2; ++n2)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int c = 16 * wq + g + 8 * (e >> 1), t = 16 * i + 8 * n2 + 2 * tq + (e & 1);
                            Y[n2][e] = c == t ? 1.0f : 0.0f;
                        }
#pragma unroll
                    for (int j = 0; j < i; ++j) {
                        if (j < wq) continue;
                        uint32_t bh[2][2], bl[2][2];
                        b_of(As + 16 * i * kLDA + 16 * j, kLDA, -1.0f, bh, bl);
                        mma3(Y, X[j], bh, bl);
                    }
                    uint32_t bh[2][2], bl[2][2];
                    b_of(Td + 16 * i * kLDT, kLDT, 1.0f, bh, bl);
#pragma unroll
                    for (int n2 = 0; n2 < 2; ++n2)
#pragma unroll
                        for (int e = 0; e < 4; ++e) X[i][n2][e] = 0.0f;
                    mma3(X[i], Y, bh, bl);
                }
                mark(6);
                const float b0 = Bt[16 * wq + g], b1 = Bt[16 * wq + g + 8];
                const int mi = lane >> 3, r8 = lane & 7;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    float y[2][4];
#pragma unroll
                    for (int n2 = 0; n2 < 2; ++n2) {
                        y[n2][0] = i < wq ? 0.0f : X[i][n2][0] * b0;
                        y[n2][1] = i < wq ? 0.0f : X[i][n2][1] * b0;
                        y[n2][2] = i < wq ? 0.0f : X[i][n2][2] * b1;
                        y[n2][3] = i < wq ? 0.0f : X[i][n2][3] * b1;
                    }
                    uint32_t l[4];
                    const uint32_t h0 = mma::pack_split<M>(y[0][0], y[0][1], &l[0]);
                    const uint32_t h1 = mma::pack_split<M>(y[0][2], y[0][3], &l[1]);
                    const uint32_t h2 = mma::pack_split<M>(y[1][0], y[1][1], &l[2]);
                    const uint32_t h3 = mma::pack_split<M>(y[1][2], y[1][3], &l[3]);
                    const int t = 16 * i + 8 * (mi >> 1) + r8, c = 16 * wq + 8 * (mi & 1);
                    mma::stmatrix_x4_trans(so + kU + atom_at(t, c, 0), h0, h1, h2, h3);
                    if constexpr (!TWO) mma::stmatrix_x4_trans(so + kU + 8192 + atom_at(t, c, 0), l[0], l[1], l[2], l[3]);
                }
                mark(7);
            } else {
            // The solve X = (I + A)^{-1} R, R = [diag(β e^γ) k | diag(β) v] (64 x 192),
            // transposed and by 16-token blocks: X_iᵀ = (R_iᵀ − Σ_{j<i} X_jᵀ A_ijᵀ) T_iiᵀ.
            // Warp wq owns columns 48 wq .. 48 wq + 47 of R (three m-tiles); its
            // blocks need no other warp's. Products as 16-bit values and remainders.
            {
                float X[3][4][2][4];
                const int mi = lane >> 3, r8 = lane & 7;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    float Y[3][2][4];
                    // R_iᵀ: ldmatrix.trans of the token rows gives the C layout.
#pragma unroll
                    for (int mt = 0; mt < 3; ++mt) {
                        const int xb = 48 * wq + 16 * mt;
                        const int t = 16 * i + 8 * (mi >> 1) + r8, x = (xb & 127) + 8 * (mi & 1);
                        uint32_t r[4];
                        if (xb < 128)
                            mma::ldmatrix_x4<true>(r, st + kKA + atom_at(t, x, kKAkc));
                        else
                            mma::ldmatrix_x4<true>(r, st + kV + (t * kLDV + x) * 2);
                        const float* sc = xb < 128 ? BE : Bt;
#pragma unroll
                        for (int n2 = 0; n2 < 2; ++n2) {
                            const float2 f = *reinterpret_cast<const float2*>(sc + 16 * i + 8 * n2 + 2 * tq);
                            float u0, u1, w0, w1;
                            mma::unpack2<M>(r[2 * n2], u0, u1);
                            mma::unpack2<M>(r[2 * n2 + 1], w0, w1);
                            Y[mt][n2][0] = u0 * f.x, Y[mt][n2][1] = u1 * f.y;
                            Y[mt][n2][2] = w0 * f.x, Y[mt][n2][3] = w1 * f.y;
                        }
                    }
                    // − X_jᵀ A_ijᵀ (B shared by the three m-tiles).
#pragma unroll
                    for (int j = 0; j < i; ++j) {
                        uint32_t bh[2][2], bl[2][2];
                        b_of(As + 16 * i * kLDA + 16 * j, kLDA, -1.0f, bh, bl);
#pragma unroll
                        for (int mt = 0; mt < 3; ++mt) mma3(Y[mt], X[mt][j], bh, bl);
                    }
                    mark(12 + (i & 1) * 2);  // 12/14: R and the products of block rows 0, 2 / 1, 3
                    // X_iᵀ = Y_iᵀ T_iiᵀ.
                    {
                        uint32_t bh[2][2], bl[2][2];
                        b_of(Td + 16 * i * kLDT, kLDT, 1.0f, bh, bl);
#pragma unroll
                        for (int mt = 0; mt < 3; ++mt) {
#pragma unroll
                            for (int n2 = 0; n2 < 2; ++n2)
#pragma unroll
                                for (int e = 0; e < 4; ++e) X[mt][i][n2][e] = 0.0f;
                            mma3(X[mt][i], Y[mt], bh, bl);
                        }
                    }
                    mark(13 + (i & 1) * 2);  // 13/15: the T_ii products of block rows 0, 2 / 1, 3
                }
                mark(6);
                // −W (bf16) into the WQ atoms by stmatrix.trans; Ũᵀ (f32) into U.
                float* U = reinterpret_cast<float*>(so + kU);
#pragma unroll
                for (int mt = 0; mt < 3; ++mt) {
                    const int xb = 48 * wq + 16 * mt;
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        if (xb < 128) {
                            const int t = 16 * i + 8 * (mi >> 1) + r8, x = xb + 8 * (mi & 1);
                            const float(&x0)[4] = X[mt][i][0];
                            const float(&x1)[4] = X[mt][i][1];
                            mma::stmatrix_x4_trans(st + kWQ + atom_at(t, x, kWQkc), mma::pack2<M>(-x0[0], -x0[1]),
                                                   mma::pack2<M>(-x0[2], -x0[3]), mma::pack2<M>(-x1[0], -x1[1]),
                                                   mma::pack2<M>(-x1[2], -x1[3]));
                        } else {
                            const int c = xb - 128 + g;
#pragma unroll
                            for (int n2 = 0; n2 < 2; ++n2) {
                                const int t = 16 * i + 8 * n2 + 2 * tq;
                                *reinterpret_cast<float2*>(U + c * kLDU + t) =
                                    make_float2(X[mt][i][n2][0], X[mt][i][n2][1]);
                                *reinterpret_cast<float2*>(U + (c + 8) * kLDU + t) =
                                    make_float2(X[mt][i][n2][2], X[mt][i][n2][3]);
                            }
                        }
                    }
                }
                mark(7);
            }
            }
            mma::fence_proxy_async_shared();
            mark(8);
        };
        // Chunk j + 2's rows are copied into stage j while the state warps
        // finish chunk j: they release the stage's k/q atoms (barrier 2) once
        // their last wgmma has read them; V, g and β they never read.
        auto chunk_len = [&](int j) {
            const int64_t cs = bos + int64_t(j) * C;
            return int(eos - cs < C ? eos - cs : C);
        };
        if constexpr (RINGS) {
            // Chunks rank, rank + 2, ... by both warpgroups. Input slot j % 4 holds only this
            // CTA's chunks to prepare (j, j ± 4, ...), so `in_loaded`'s parity is unambiguous:
            // chunk j + 4's copies need chain(j), which needs this prep. The output slot's
            // wait is in prep_split, before its first store.
            for (int j = int(rank); j < nch; j += 2) {
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
        } else if constexpr (SPLIT) {
            // Chunks rank, rank + 2, ... by both warpgroups. A parity wait tells only adjacent
            // phases apart, and `loaded[s]` may be a phase behind (chunk j − 3, the peer's to
            // prepare, not landed) or already past chunk j's (its load can land while this CTA
            // still prepares chunk j − 2, which deadlocked the first version at T = 1000). So the
            // prep first waits for `empty[s]`'s phase of chunk j − 3 (both CTAs' state warps
            // done with it): that phase is the only one it can be in (chunk j − 6's is complete,
            // since prep(j − 2)'s copies needed chain(j − 5); chunk j's needs this prep), and
            // once it is complete so is `loaded[s]`'s of chunk j − 3 (the state warps waited
            // for it), while `loaded[s]`'s of chunk j + 3 cannot be. Chunk j's copies needed
            // that phase of `empty[s]` anyway, so the wait costs nothing.
            for (int j = int(rank); j < nch; j += 2) {
                const int s = j % 3, u = j / 3;
                if (u > 0) mbar_wait<true>(bars + 3 + s, (u - 1) & 1);
                mbar_wait(bars + 6 + s, u & 1);
                mma::fence_proxy_async_shared();
                bar_all();  // (and the previous chunk's reads of the scratch are done)
                mark(0);
                if (tid == 128) ev(2, j);
                prep_split(j, chunk_len(j));
                mbar_arrive(bars + s);
                bar_all();  // every thread's stores (fenced for the async proxy) are done
                if (tid == 128) {
                    const uint32_t pb = peer_addr(smem_addr(bars + s), peer);
                    const uint32_t src = smem_addr(ostage(j));
                    mbar_arrive_tx_peer(pb, k3OutBytes, 256);
                    bulk_to_peer(peer_addr(src, peer), src, k3OutBytes, pb);
                    ev(3, j);
                }
                mark(1);
            }
            if (tid == 128) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
            return;
        } else if constexpr (TWO) {
            // Chunks pw, pw + 2, ...: a chunk's stage was last used by chunk j − 3.
            for (int j = PAIR ? int(rank) + 2 * pw : pw; j < nch; j += PAIR ? 4 : 2) {
                const int s = j % 3, u = j / 3;
                // PAIR: this warpgroup's last chunk was j − 4, so the stage's previous load
                // (chunk j − 3, the peer's to prepare) may not have landed yet; a parity wait
                // tells only adjacent phases apart, so that one is waited for first. (Not
                // proven: had chunk j's copies landed too before this wait, it would wait for
                // chunk j + 3's, a deadlock; they need chain(j − 3), so chain(j − 4) and (j − 3)
                // would have to finish between this warpgroup's arrivals for chunk j − 4 and
                // this line. SPLIT waits on `empty` instead, where the window is real.)
                if (PAIR && u > 0) mbar_wait(bars + 6 + s, (u - 1) & 1);
                mbar_wait(bars + 6 + s, u & 1);  // the load warp's copies landed
                mma::fence_proxy_async_shared();
                wg1_bar();
                if (tw == 0) ev(2, j);
                prep(j, chunk_len(j));
                if constexpr (PAIR) {
                    mbar_arrive(bars + s);
                    wg1_bar();  // every thread's stores (fenced for the async proxy) are done
                    if (tw == 0) {
                        // The peer's full[s] takes the 128 arrivals at once, and the bytes.
                        const uint32_t pb = peer_addr(smem_addr(bars + s), peer);
                        const uint32_t src = smem_addr(ostage(j));
                        mbar_arrive_tx_peer(pb, k3OutBytes, 128);
                        bulk_to_peer(peer_addr(src, peer), src, k3OutBytes, pb);
                    }
                } else {
                    mbar_arrive(bars + s);
                }
                if (tw == 0) ev(3, j);
            }
            // PAIR: the bulk copies have read this CTA's shared memory before it may exit.
            if (PAIR && tw == 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
            return;
        }
        if (!(SKIP & 4)) {
            load(0, tw);
            if (nch > 1) {
                load(1, tw);
                cp_async_wait_group<1>();  // chunk 0's copies (chunk 1's in flight)
            } else {
                cp_async_wait_all();
            }
            mma::fence_proxy_async_shared();
            wg1_bar();
        }
        mark(1);
        if (!(SKIP & 1)) prep(0, chunk_len(0));
        step_barrier<SKIP>();
        for (int j = 0; j < nch; ++j) {
            if (j + 1 < nch) {
                mark(0);
                if (!(SKIP & 4)) wait_loaded();
                mark(1);
                if (!(SKIP & 1)) prep(j + 1, chunk_len(j + 1));
            }
            if (j + 2 < nch) {
                asm volatile("barrier.sync 2, 256;\n" ::: "memory");
                if (!(SKIP & 4)) load(j + 2, tw);
            }
            mark(9);
            step_barrier<SKIP>();
            mark(10);
        }
        return;
    }

    // ---------------------------------------------------------------- chain
    if constexpr (TWO) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegState) : "memory");
    const int cw = c0 + 16 * warp + g;  // this thread's columns: cw, cw + 8
    float S[16][4];
    float* const st0 = a.state + (int64_t(n) * a.Hv + h) * K * 128;
    auto sidx = [&](int j, int e) { return (8 * j + 2 * tq + (e & 1)) * 128 + cw + 8 * (e >> 1); };
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) S[j][e] = st0[sidx(j, e)];
    if constexpr (!TWO) step_barrier<SKIP>();
    const int ldn = ((lane >> 4) * 8 + (lane & 7)) * kLDP + ((lane >> 3) & 1) * 8;
    // Both output forms': Yqᵀ's token columns times e^γ scale, Sᵀ times e^{γ_last}, and a
    // chunk's output rows (tokens < L).
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
        const int64_t ld = int64_t(a.Hv) * 128;
        float* o = a.out + (cs * a.Hv + h) * 128 + cw;
#pragma unroll
        for (int jt = 0; jt < 8; ++jt) {
            const int t = 8 * jt + 2 * tq;
            if (t < L) o[t * ld] = y[jt][0], o[t * ld + 8] = y[jt][2];
            if (t + 1 < L) o[(t + 1) * ld] = y[jt][1], o[(t + 1) * ld + 8] = y[jt][3];
        }
    };
    for (int j = 0; j < nch; ++j) {
        if (SKIP & 2) {
            if (j + 2 < nch) asm volatile("barrier.arrive 2, 256;\n" ::: "memory");
            step_barrier<SKIP>();
            continue;
        }
        if constexpr (TWO) {
            if constexpr (EARLY) {
                // Only this CTA's copies of chunk j's rows before the first product, which
                // reads no prep output; `full` below, before the step that does.
                mbar_wait(bar_loaded(j), par_loaded(j));
            } else {
                // (RINGS: at CTA scope, as CUTLASS waits for a cluster's barriers: the
                // cluster-scope acquire invalidated L1 each chunk, CCTL.IVALL, run 153.)
                mbar_wait<(PAIR && !RINGS)>(bar_full(j), par_full(j));
                // PAIR: the peer may have prepared the chunk, which says nothing of this CTA's
                // own copies of its k, q and v rows.
                if constexpr (PAIR) mbar_wait(bar_loaded(j), par_loaded(j));
                if (tid == 0) ev(4, j);
            }
            mma::fence_proxy_async_shared();
            mark(3);
        }
        const unsigned char* st = stage(j);
        const unsigned char* so = ostage(j);
        const int64_t cs = bos + int64_t(j) * C;
        const int L = int(eos - cs < C ? eos - cs : C);
        const uint32_t wq_s = smem_addr(st + kWQ), ka_s = smem_addr(st + kK);
        const float4* F = reinterpret_cast<const float4*>(so + kF);
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
        if constexpr (EARLY) {
            mbar_wait<PAIR>(bar_full(j), par_full(j));  // the prep's T diag(β), P and F
            mma::fence_proxy_async_shared();
            if (tid == 0) ev(4, j);
        }
        if constexpr (TC) {
            // Dᵀ = (vᵀ − e^γ ⊙ S0ᵀkᵀ) (T diag(β))ᵀ: vᵀ from the v rows (ldmatrix.trans gives
            // the C layout), A as value and remainder, B = T diag(β)'s two atom columns.
            float vt[8][4];
            const int mi = lane >> 3, r8 = lane & 7;
#pragma unroll
            for (int s2 = 0; s2 < 4; ++s2) {
                uint32_t r[4];
                const int t = 16 * s2 + 8 * (mi >> 1) + r8, c = 16 * warp + 8 * (mi & 1);
                mma::ldmatrix_x4<true>(r, st + kV + (TMA ? atom_at(t, c, 0) : (t * kLDV + c) * 2));
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
            const uint32_t tb = smem_addr(so + kU);
            mma::fence_operand(ah);
            mma::fence_operand(al);
            mma::fence_operand(dlo);
            mma::fence_operand(dhi);
            mma::wgmma_fence();
#pragma unroll
            for (int s2 = 0; s2 < 4; ++s2) {
                mma::wgmma_n64<M, 0>(dlo, dhi, al[s2], mma::wgmma_desc_sw128(tb + s2 * 32, 16, 1024));
                if constexpr (!TWO)
                    mma::wgmma_n64<M, 0>(dlo, dhi, ah[s2], mma::wgmma_desc_sw128(tb + 8192 + s2 * 32, 16, 1024));
                mma::wgmma_n64<M, 0>(dlo, dhi, ah[s2], mma::wgmma_desc_sw128(tb + s2 * 32, 16, 1024));
            }
            mma::wgmma_commit();
            mma::wgmma_wait_all();
            mma::fence_operand(dlo);
            mma::fence_operand(dhi);
        } else
        // Dᵀ += Ũᵀ.
        {
            const float* U = reinterpret_cast<const float*>(so + kU) + (16 * warp + g) * kLDU + 2 * tq;
#pragma unroll
            for (int jt = 0; jt < 8; ++jt) {
                const float2 u0 = *reinterpret_cast<const float2*>(U + 8 * jt);
                const float2 u1 = *reinterpret_cast<const float2*>(U + 8 * kLDU + 8 * jt);
                x[jt][0] += u0.x, x[jt][1] += u0.y, x[jt][2] += u1.x, x[jt][3] += u1.y;
            }
        }
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
        if constexpr (TWO) {
            // Sᵀ = e^{γ_last} Sᵀ + D2ᵀ k and Oᵀ = e^γ scale Yqᵀ + Dᵀ Pᵀ as one batch of
            // wgmma: D's fragments (value and remainder) are A, P's atom column is B.
            float (&y)[8][4] = *reinterpret_cast<float(*)[8][4]>(&x[8][0]);
            float (&ylo)[4][4] = *reinterpret_cast<float(*)[4][4]>(&x[8][0]);
            float (&yhi)[4][4] = *reinterpret_cast<float(*)[4][4]>(&x[12][0]);
            scale_yq(y, F);
            decay_state(F);
            const uint32_t pb = smem_addr(so + kP);
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
            if constexpr (!EARLY && !RINGS) store_out(y, cs, L);
            // The stage is read: chunk j + 3 may use it (PAIR: both CTAs' stages). RINGS: the
            // input slot (this CTA's) for chunk j + 4, the output slot (the preparing CTA's,
            // o = j % 2, whose copy the peer's bulk copy overwrites) for chunk j + 2.
            if constexpr (RINGS) {
                if (j + 4 < nch) mbar_arrive(bars + 4 + (j & 3));
                if (j + 2 < nch) {
                    if (uint32_t(j & 1) == rank) {
                        mbar_arrive(bars + 10 + (j & 1));
                    } else {
                        __syncwarp();
                        if (lane == 0) mbar_arrive_peer_cta(peer_addr(smem_addr(bars + 10 + (j & 1)), peer));
                    }
                }
            } else if constexpr (PAIR) {
                if (j + 3 < nch) {
                    mbar_arrive(bars + 3 + j % 3);
                    __syncwarp();
                    if (lane == 0) mbar_arrive_peer(peer_addr(smem_addr(bars + 3 + j % 3), peer));
                }
            } else {
                mbar_arrive(bars + 3 + j % 3);
            }
            if (tid == 0) ev(5, j);
            if constexpr (EARLY || RINGS) store_out(y, cs, L);  // (from registers: after the release)
            mark(4);
            continue;
        }
        // (TWO has gone on to the next chunk above.) Sᵀ = e^{γ_last} Sᵀ + D2ᵀ k.
        {
            decay_state(F);
            mma::fence_operand(S);
            mma::fence_operand(d2);
            mma::wgmma_fence();
#pragma unroll
            for (int s = 0; s < 4; ++s)
                mma::wgmma_n128<M, 1>(S, d2[s], mma::wgmma_desc_sw128(ka_s + 2 * s * 1024, kKc, 1024));
            mma::wgmma_commit();
            mma::wgmma_wait_all();
            mma::fence_operand(S);
        }
        // The stage's k/q atoms are read: chunk j + 2's may be copied into them.
        if (j + 2 < nch) asm volatile("barrier.arrive 2, 256;\n" ::: "memory");
        // Oᵀ = e^γ scale Yqᵀ + Dᵀ Pᵀ.
        {
            float (&y)[8][4] = *reinterpret_cast<float(*)[8][4]>(&x[8][0]);
            scale_yq(y, F);
            const uint16_t* Ph = reinterpret_cast<const uint16_t*>(so + kP);
            const uint16_t* Pl = reinterpret_cast<const uint16_t*>(so + kPl);
#pragma unroll
            for (int s = 0; s < 4; ++s)
#pragma unroll
                for (int nn = s; nn < 4; ++nn) {
                    uint32_t rh[4], rl[4];
                    const int at = ldn + 16 * nn * kLDP + 16 * s;
                    mma::ldmatrix_x4<false>(rh, Ph + at);
                    mma::ldmatrix_x4<false>(rl, Pl + at);
#pragma unroll
                    for (int xx = 0; xx < 2; ++xx) {
                        mma::mma16<M>(y[2 * nn + xx], dl[s], {rh[2 * xx], rh[2 * xx + 1]});
                        mma::mma16<M>(y[2 * nn + xx], da[s], {rl[2 * xx], rl[2 * xx + 1]});
                        mma::mma16<M>(y[2 * nn + xx], da[s], {rh[2 * xx], rh[2 * xx + 1]});
                    }
                }
            store_out(y, cs, L);
        }
        mma::wgmma_wait_all();
        mma::fence_operand(S);
        mark(0);
        step_barrier<SKIP>();
        mark(1);
    }
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) st0[sidx(j, e)] = S[j][e];
#endif
}

}  // namespace probe

// ---------------------------------------------------------------- harness
static double uni(std::mt19937_64& r) { return (r() >> 11) * (1.0 / 9007199254740992.0); }
static double nrm(std::mt19937_64& r) {
    const double u1 = 1.0 - uni(r), u2 = uni(r);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
static float bf(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

#define CK(x)                                                                               \
    do {                                                                                    \
        cudaError_t e_ = (x);                                                               \
        if (e_ != cudaSuccess) {                                                            \
            std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
            std::exit(1);                                                                   \
        }                                                                                   \
    } while (0)

int main(int argc, char** argv) {
    // Options come as "--name value" pairs; the last of a name counts.
    auto opt = [&](const char* name) -> const char* {
        const char* v = nullptr;
        for (int i = 1; i + 1 < argc; i += 2)
            if (!std::strcmp(argv[i], name)) v = argv[i + 1];
        return v;
    };
    auto iopt = [&](const char* name, int def) { const char* v = opt(name); return v ? std::atoi(v) : def; };
    const int Hk = iopt("--hk", 16), Hv = iopt("--hv", 48), N = iopt("--n", 1), T = iopt("--t", 4096);
    const int reps = iopt("--reps", 20), check = iopt("--check", 1);
    {
        int dev = 0;
        cudaDeviceProp prop;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
            std::printf("skipped: no device\n");
            return 0;
        }
        if (prop.major != 9) {
            std::printf("skipped: wgmma needs an sm_90 device (this is sm_%d%d)\n", prop.major, prop.minor);
            return 0;
        }
    }
    const int D = 128;
    const int64_t NT = int64_t(N) * T;
    std::mt19937_64 rng(12345);
    std::vector<float> q(NT * Hk * D), k(NT * Hk * D), v(NT * Hv * D), g(NT * Hv), b(NT * Hv),
        s0(size_t(N) * Hv * D * D);
    std::vector<double> pool(999983);
    for (auto& x : pool) x = nrm(rng);
    size_t pi = 0;
    auto pn = [&] { const double x = pool[pi]; pi = pi + 1 == pool.size() ? 0 : pi + 1; return x; };
    for (auto& x : q) x = bf(float(pn()));
    for (int64_t r = 0; r < NT * Hk; ++r) {
        double n2 = 0, row[128];
        for (auto& x : row) x = pn(), n2 += x * x;
        for (int i = 0; i < D; ++i) k[r * D + i] = bf(float(row[i] / std::sqrt(n2)));
    }
    for (auto& x : v) x = bf(float(pn()));
    for (auto& x : g) x = float(-0.3 + 0.29 * uni(rng));
    for (auto& x : b) x = float(uni(rng));
    for (auto& x : s0) x = float(0.5 * nrm(rng));
    std::vector<__nv_bfloat16> qb(q.size()), kb(k.size()), vb(v.size());
    for (size_t i = 0; i < q.size(); ++i) qb[i] = __float2bfloat16_rn(q[i]), kb[i] = __float2bfloat16_rn(k[i]);
    for (size_t i = 0; i < v.size(); ++i) vb[i] = __float2bfloat16_rn(v[i]);
    std::vector<int> cu(N + 1);
    for (int i = 0; i <= N; ++i) cu[i] = i * T;
    const float scale = 1.0f / std::sqrt(float(D));

    __nv_bfloat16 *dq, *dk, *dv;
    float *dg, *db, *ds, *dout;
    int* dcu;
    CK(cudaMalloc(&dq, qb.size() * 2));
    CK(cudaMalloc(&dk, kb.size() * 2));
    CK(cudaMalloc(&dv, vb.size() * 2));
    CK(cudaMalloc(&dg, g.size() * 4));
    CK(cudaMalloc(&db, b.size() * 4));
    CK(cudaMalloc(&ds, s0.size() * 4));
    CK(cudaMalloc(&dout, size_t(NT) * Hv * D * 4));
    CK(cudaMalloc(&dcu, (N + 1) * 4));
    CK(cudaMemcpy(dq, qb.data(), qb.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dk, kb.data(), kb.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv, vb.data(), vb.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dg, g.data(), g.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dcu, cu.data(), (N + 1) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0xff, size_t(NT) * Hv * D * 4));  // NaN

    probe::Args a{};
    a.q = dq, a.k = dk, a.v = dv, a.g = dg, a.beta = db, a.state = ds, a.out = dout, a.cu = dcu;
    a.N = N, a.Hk = Hk, a.Hv = Hv, a.scale = scale;
    const int tma = iopt("--tma", 0);
    if (tma) {
        // The driver's cuTensorMapEncodeTiled, through the runtime (no link to libcuda).
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult qr;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &qr) !=
                cudaSuccess ||
            qr != cudaDriverEntryPointSuccess || !fn) {
            std::printf("--tma: cuTensorMapEncodeTiled not found\n");
            return 1;
        }
        auto encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
        auto make = [&](CUtensorMap* m, void* base, int heads) {
            const cuuint64_t dims[3] = {128, cuuint64_t(heads), cuuint64_t(NT)};
            const cuuint64_t strides[2] = {128 * 2, cuuint64_t(heads) * 128 * 2};
            const cuuint32_t box[3] = {64, 1, 64}, es[3] = {1, 1, 1};
            if (encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides, box, es,
                       CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
                std::printf("--tma: cuTensorMapEncodeTiled failed\n");
                std::exit(1);
            }
        };
        make(&a.tk, dk, Hk), make(&a.tq, dq, Hk), make(&a.tv, dv, Hv);
    }
    // --role: all (0), chain (1: no prep), prep (2: no chain); --noload 1 adds 4 (no loads).
    const char* role = opt("--role");
    const int skip = (role && !std::strcmp(role, "chain") ? 1 : role && !std::strcmp(role, "prep") ? 2 : 0) |
                     (iopt("--noload", 0) ? 4 : 0);
    const int phases = iopt("--phases", 0), trace = iopt("--trace", 0);
    const int cluster = (iopt("--cluster", 0) ? 8 : 0) | (iopt("--tchain", 0) ? 16 : 0) | (iopt("--two", 0) ? 48 : 0) |
                        (iopt("--pair", 0) ? 112 : 0) | (tma ? 128 : 0) | (iopt("--split", 0) ? 256 : 0) |
                        (iopt("--early", 0) ? 512 : 0) | (iopt("--rings", 0) ? 1024 : 0) |
                        (iopt("--balance", 0) ? 2048 : 0);
    void (*kern)(probe::Args) = nullptr;
    switch (skip | cluster) {
        case 0: kern = probe::fused64_kernel<0>; break;
        case 1: kern = probe::fused64_kernel<1>; break;
        case 2: kern = probe::fused64_kernel<2>; break;
        case 4: kern = probe::fused64_kernel<4>; break;
        case 5: kern = probe::fused64_kernel<5>; break;
        case 6: kern = probe::fused64_kernel<6>; break;
        case 8: kern = probe::fused64_kernel<8>; break;
        case 9: kern = probe::fused64_kernel<9>; break;
        case 16: kern = probe::fused64_kernel<16>; break;
        case 17: kern = probe::fused64_kernel<17>; break;
        case 18: kern = probe::fused64_kernel<18>; break;
        case 48: kern = probe::fused64_kernel<48>; break;
        case 112: kern = probe::fused64_kernel<112>; break;
        case 176: kern = probe::fused64_kernel<176>; break;
        case 240: kern = probe::fused64_kernel<240>; break;
        case 496: kern = probe::fused64_kernel<496>; break;
        case 1008: kern = probe::fused64_kernel<1008>; break;
        case 1520: kern = probe::fused64_kernel<1520>; break;
        case 3568: kern = probe::fused64_kernel<3568>; break;
        default: std::printf("unsupported --role/--noload/--cluster combination\n"); return 1;
    }
    a.phases = phases;
    const bool two = (cluster & 32) != 0;
    if (trace && !two) {
        std::printf("--trace needs --two 1 or --pair 1\n");
        return 1;
    }
    const int smem = (cluster & 1024) ? probe::kRSmem : two ? probe::k3Smem : probe::kSmem;
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    const dim3 grid(2 * Hv, N);
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    cfg.gridDim = grid, cfg.blockDim = dim3(two ? 512 : 256), cfg.dynamicSmemBytes = smem;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr, cfg.numAttrs = (cluster & (8 | 64)) ? 1 : 0;
    auto launch = [&] { CK(cudaLaunchKernelEx(&cfg, kern, a)); };
    std::printf("fused64: Hk %d Hv %d, %d x %d tokens, smem %d B\n", Hk, Hv, N, T, smem);

    if (check) {
        CK(cudaMemcpy(ds, s0.data(), s0.size() * 4, cudaMemcpyHostToDevice));
        launch();
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        std::vector<float> out(size_t(NT) * Hv * D), sf(s0.size());
        CK(cudaMemcpy(out.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(sf.data(), ds, sf.size() * 4, cudaMemcpyDeviceToHost));
        // Rerun: same bits.
        CK(cudaMemcpy(ds, s0.data(), s0.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemset(dout, 0xff, size_t(NT) * Hv * D * 4));
        launch();
        CK(cudaDeviceSynchronize());
        std::vector<float> out2(out.size()), sf2(sf.size());
        CK(cudaMemcpy(out2.data(), dout, out.size() * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(sf2.data(), ds, sf.size() * 4, cudaMemcpyDeviceToHost));
        const bool same = !std::memcmp(out.data(), out2.data(), out.size() * 4) &&
                          !std::memcmp(sf.data(), sf2.data(), sf.size() * 4);
        // The FP64 reference (gdn::ref::run, src/common/reference.hpp), threads over views
        // of one (sequence, value head) each.
        std::vector<double> ro(out.size()), rs(s0.size());
        // The views' state (the library's checks want one; ref writes rs).
        const std::vector<float> state_view(size_t(D) * D);
        std::atomic<bool> ref_ok{true};
        auto work = [&](int id0, int step) {
            for (int id = id0; id < N * Hv; id += step) {
                const int nn = id / Hv, hh = id % Hv, kh = hh / (Hv / Hk), len = cu[nn + 1] - cu[nn];
                double* st = rs.data() + (size_t(nn) * Hv + hh) * D * D;
                for (int i = 0; i < D * D; ++i) st[i] = s0[(size_t(nn) * Hv + hh) * D * D + i];
                if (len == 0) continue;
                gdn_problem_t pr;
                gdn_problem_init(&pr);
                pr.num_seqs = 1, pr.num_tokens = len, pr.max_seqlen = len;
                pr.num_k_heads = 1, pr.num_v_heads = 1, pr.head_dim_k = D, pr.head_dim_v = D;
                pr.input_dtype = GDN_DTYPE_BF16, pr.gate_dtype = GDN_DTYPE_F32, pr.output_dtype = GDN_DTYPE_F32;
                pr.num_state_slots = 1, pr.scale = scale;
                const int32_t cu1[2] = {0, len};
                gdn_tensors_t tn;
                gdn_tensors_init(&tn);
                tn.q = qb.data() + (int64_t(cu[nn]) * Hk + kh) * D, tn.q_token_stride = int64_t(Hk) * D;
                tn.k = kb.data() + (int64_t(cu[nn]) * Hk + kh) * D, tn.k_token_stride = int64_t(Hk) * D;
                tn.v = vb.data() + (int64_t(cu[nn]) * Hv + hh) * D, tn.v_token_stride = int64_t(Hv) * D;
                tn.g = g.data() + int64_t(cu[nn]) * Hv + hh, tn.g_token_stride = Hv;
                tn.beta = b.data() + int64_t(cu[nn]) * Hv + hh, tn.beta_token_stride = Hv;
                tn.q_head_stride = tn.k_head_stride = tn.v_head_stride = tn.out_head_stride = D;
                tn.g_head_stride = tn.beta_head_stride = 1;
                std::vector<float> out_view(size_t(len) * D);  // likewise (ref writes ro)
                tn.out = out_view.data(), tn.out_token_stride = D;
                tn.state = const_cast<float*>(state_view.data()), tn.cu_seqlens = cu1;
                gdn::Shape shape;
                gdn::Tensors x;
                if (gdn::read_problem(&pr, &shape) != GDN_SUCCESS || gdn::read_tensors(shape, &tn, &x) != GDN_SUCCESS) {
                    // The last error is the calling thread's.
                    std::fprintf(stderr, "the reference's view of the problem was refused: %s\n", gdn::last_error_cstr());
                    ref_ok = false;
                    continue;
                }
                std::vector<double> o(size_t(len) * D);
                gdn::ref::run(shape, x, o.data(), st);
                for (int t = 0; t < len; ++t)
                    std::copy(o.begin() + int64_t(t) * D, o.begin() + int64_t(t + 1) * D,
                              ro.begin() + ((int64_t(cu[nn]) + t) * Hv + hh) * D);
            }
        };
        const int nth = std::max(1u, std::thread::hardware_concurrency());
        std::vector<std::thread> th;
        for (int i = 0; i < nth; ++i) th.emplace_back(work, i, nth);
        for (auto& x : th) x.join();
        if (!ref_ok) return 1;
        auto err = [](const std::vector<float>& x, const std::vector<double>& r) {
            double md = 0, mr = 0;
            size_t bad = 0;
            for (size_t i = 0; i < x.size(); ++i) {
                if (!std::isfinite(x[i])) ++bad;
                md = std::max(md, std::fabs(double(x[i]) - r[i]));
                mr = std::max(mr, std::fabs(r[i]));
            }
            if (bad) std::printf("  %zu non-finite values\n", bad);
            return bad ? INFINITY : md / mr;
        };
        // FNV-1a of the outputs' and the states' bits: two builds compare by it.
        uint64_t hash = 1469598103934665603ull;
        for (const auto* v : {&out, &sf}) {
            const unsigned char* b = reinterpret_cast<const unsigned char*>(v->data());
            for (size_t i = 0; i < v->size() * 4; ++i) hash = (hash ^ b[i]) * 1099511628211ull;
        }
        std::printf("error vs FP64: out %.3e  state %.3e  rerun %s  bits %016llx\n", err(out, ro), err(sf, rs),
                    same ? "bit-identical" : "DIFFERS", (unsigned long long)hash);
        // Phases (mark(n) ends phase n). State warps 0-3: 0 the chunk's step, 1 the step
        // barrier. Prep warps 4-7: 0 loop top, 1 waiting for the copies, 2 γ and the k·kᵀ /
        // q·kᵀ wgmma, 3 their barrier, 11 A and P, 4 their barrier, 5 T's diagonal blocks
        // (with the barrier), 12 / 14 the solve's block rows 0, 2 / 1, 3 (R and the products
        // with the earlier blocks), 13 / 15 their T_ii products, 6 (nothing), 7 the stores of
        // −W and Ũᵀ, 8 the proxy fence, 9 barrier 2 and the next chunk's copies issued, 10
        // the step barrier. SPLIT: prep warps 0 the `loaded` wait and barrier, 2 γ and the
        // product, 11 A and P, 5 T's diagonal blocks, 6 level 2 and Z's first terms, 12 Z's
        // last, 7 level 3 and the stores (RINGS: 13 level 3, 14 the `out_empty` wait, 7 the
        // stores), 1 the arrivals and the bulk copy; TWO's state warps: 3 the waits, 4 a
        // chunk's work.
        if (phases) {
        unsigned long long dbg[12][16];
        CK(cudaMemcpyFromSymbol(dbg, probe::g_dbg, sizeof dbg));
        const int nch = (T + 63) / 64;
        for (int w = 0; w < (two ? 12 : 8); ++w) {
            std::printf("warp %d cycles/chunk (two runs):", w);
            for (int p = 0; p < 16; ++p) std::printf(" %llu", dbg[w][p] / (2ull * nch));
            std::printf("\n");
        }
        }
    }
    if (trace) {
        // One launch with the events on, after a warm one.
        CK(cudaMemcpy(ds, s0.data(), s0.size() * 4, cudaMemcpyHostToDevice));
        launch();
        a.trace = 1;
        launch();
        CK(cudaDeviceSynchronize());
        a.trace = 0;
        static long long tr[2][6][probe::kTraceChunks];
        CK(cudaMemcpyFromSymbol(tr, probe::g_trace, sizeof tr));
        int khz = 0;
        CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
        const double us = 1e3 / khz;  // a cycle in µs (at the rated clock)
        const int nch = std::min((T + 63) / 64, probe::kTraceChunks);
        const int pairs = (cluster & 64) ? 2 : 1;
        // The prep's events are the CTA's that prepared the chunk (PAIR: CTA j % 2).
        auto prep_cta = [&](int j) { return pairs == 2 ? j % 2 : 0; };
        for (int c = 0; c < pairs; ++c) {
            std::printf("trace CTA %d (µs since its start): chunk  load:pass issued  prep:start end  "
                        "chain:pass released\n", c);
            for (int j = std::max(0, nch / 2 - 6); j < std::min(nch, nch / 2 + 6); ++j) {
                const bool own = prep_cta(j) == c;
                std::printf("  %4d  %8.2f %8.2f  %8s %8s  %8.2f %8.2f\n", j, tr[c][0][j] * us, tr[c][1][j] * us,
                            own ? std::to_string(tr[c][2][j] * us).substr(0, 8).c_str() : "-",
                            own ? std::to_string(tr[c][3][j] * us).substr(0, 8).c_str() : "-", tr[c][4][j] * us,
                            tr[c][5][j] * us);
            }
            // Means over the middle chunks: where a chunk's time goes on the path
            // chain(j − 3) released → load(j) → prep(j) → chain(j) (--rings: chain(j − 4)).
            const int ring = (cluster & 1024) ? 4 : 3;
            double n = 0, wait_empty = 0, issue = 0, wait_loaded = 0, prep = 0, handoff = 0, gap = 0, work = 0;
            for (int j = std::max(ring, nch / 8); j < nch - nch / 8; ++j) {
                if (prep_cta(j) != c) continue;
                n += 1;
                wait_empty += tr[c][0][j] - tr[c][5][j - ring];
                issue += tr[c][1][j] - tr[c][0][j];
                wait_loaded += tr[c][2][j] - tr[c][1][j];
                prep += tr[c][3][j] - tr[c][2][j];
                handoff += tr[c][4][j] - tr[c][3][j];
                gap += tr[c][4][j] - tr[c][5][j - 1];
                work += tr[c][5][j] - tr[c][4][j];
            }
            if (n > 0)
                std::printf("  means (µs, %d chunks): released(j-%d)->load pass %.2f, copies issued %.2f, "
                            "issued->prep start %.2f, prep %.2f, prep end->chain pass %.2f; chain: wait %.2f, "
                            "work %.2f\n",
                            int(n), ring, wait_empty / n * us, issue / n * us, wait_loaded / n * us, prep / n * us,
                            handoff / n * us, gap / n * us, work / n * us);
        }
    }
#ifdef GDN_PROBE_HANG_REPORT
    {
        unsigned hang[6];
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpyFromSymbol(hang, probe::g_hang, sizeof hang));
        std::printf("hang report: %u timeouts; first CTA (%u, %u) thread %u, barrier %u (the region's), parity %u\n", hang[0],
                    hang[1], hang[2], hang[3], hang[4], hang[5]);
        return 0;
    }
#endif
    // Timing.
    CK(cudaMemcpy(ds, s0.data(), s0.size() * 4, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; ++i) launch();
    std::vector<float> ms;
    for (int r = 0; r < 5; ++r) {
        CK(cudaEventRecord(e0));
        for (int i = 0; i < reps; ++i) launch();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        ms.push_back(t / reps);
    }
    CK(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    std::printf("time per launch: median %.4f ms (min %.4f, max %.4f)\n", ms[2], ms[0], ms[4]);
    return 0;
}
