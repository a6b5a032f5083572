// Which named-barrier patterns compute-sanitizer's racecheck follows, in the shape of the
// fused kernel's prep (src/cuda/fused64.cuh): eight warps, two warpgroups, a 256-thread
// named barrier between them (bar_all), and a 128-thread barrier of one warpgroup (wg_bar).
// Every pattern below is race-free by the PTX memory model: warpgroup 0 writes shared memory,
// both pass the 256-thread barrier, warpgroup 1 reads, both pass it again; the output is
// checked. Run each under racecheck:
//
//   compute-sanitizer --tool racecheck --racecheck-report all gdn_racecheck_barriers PATTERN
//
// What compute-sanitizer 2025.3.1 reported on the H200 (docs/cuda.md, thirtieth run, runs 193-194;
// errors with `--racecheck-report all`, the default report's grouped hazards in brackets):
//   plain      no barrier between two bar_all but bar_all itself                    0
//   alive      plain, with the other eight warps alive on a barrier of their own    0
//   aligned    plain with `bar.sync` (the aligned form)                             0
//   one-sided  warpgroup 0 passes a wg_bar before its writes, warpgroup 1 none      5384 (7-8)
//   paired     one-sided, and warpgroup 1 passes a wg_bar of its own in the same
//              interval between two bar_all                                         0
//   later      one-sided, warpgroup 1's wg_bar in the next interval instead         5512 (8)
//   uneven     warpgroup 0 passes two wg_bar there, warpgroup 1 one                 3976 (8)
// Every pattern's sums were right. So racecheck reports a race wherever the two warpgroups
// pass different numbers of barriers between two instances of the barrier they share; the
// fused kernel's prep keeps the counts equal (pair_bar) and racecheck reports nothing on it.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

namespace {

__device__ __forceinline__ void bar_n(int id, int n) {
    asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_all_aligned() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

enum Pattern { kPlain, kAlive, kAligned, kOneSided, kPaired, kLater, kUneven, kPatterns };
const char* const kNames[kPatterns] = {"plain", "alive", "aligned", "one-sided", "paired", "later", "uneven"};

constexpr int kIters = 4;

// Warps 4..11 take part (warpgroups 0 and 1, as the fused kernel's prep warps).
__global__ void __launch_bounds__(512) pattern_kernel(int pat, float* out) {
    __shared__ float s[256];
    const int tid = threadIdx.x, warp = tid >> 5;
    if (warp < 4 || warp >= 12) {
        if (pat == kAlive)
            for (int i = 0; i < kIters; ++i) {
                bar_n(2, 256);
                out[512 + tid] = float(i);
            }
        return;
    }
    const int t = tid - 128, wg = t >> 7;
    auto bar_all = [&] {
        if (pat == kAligned)
            bar_all_aligned();
        else
            bar_n(1, 256);
    };
    float acc = 0.0f;
    for (int it = 0; it < kIters; ++it) {
        bar_all();
        if (wg == 0) {
            if (pat >= kOneSided) bar_n(3, 128);
            if (pat == kUneven) bar_n(3, 128);
            s[t] = float(it * 1000 + t);
            s[t + 128] = float(it * 1000 + t + 128);
        } else if (pat == kPaired || pat == kUneven) {
            bar_n(4, 128);
        }
        bar_all();
        if (wg == 1) {
            acc += s[(t - 128) ^ 5] + s[t];
            if (pat == kLater) bar_n(4, 128);
        }
        bar_all();
    }
    out[tid] = acc;
}

}  // namespace

int main(int argc, char** argv) {
    int pat = -1;
    for (int i = 0; i < kPatterns; ++i)
        if (argc > 1 && std::strcmp(argv[1], kNames[i]) == 0) pat = i;
    if (pat < 0) {
        std::printf("usage: gdn_racecheck_barriers PATTERN (run it under compute-sanitizer --tool racecheck)\n"
                    "patterns:");
        for (const char* n : kNames) std::printf(" %s", n);
        std::printf("\n");
        return 2;
    }
    float* d = nullptr;
    if (cudaMalloc(&d, 1024 * sizeof(float)) != cudaSuccess) {
        std::printf("skipped: no device\n");
        return 0;
    }
    pattern_kernel<<<4, 512>>>(pat, d);
    const cudaError_t e = cudaDeviceSynchronize();
    float h[512];
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    cudaFree(d);
    // Thread 256 + r (t = 128 + r) sums s[r ^ 5] + s[128 + r] of every iteration.
    int wrong = 0;
    for (int r = 0; r < 128; ++r) {
        double want = 0;
        for (int it = 0; it < kIters; ++it) want += double(it * 1000 + (r ^ 5)) + double(it * 1000 + 128 + r);
        wrong += double(h[256 + r]) != want;
    }
    std::printf("%s: %s, %d of 128 sums wrong\n", kNames[pat], cudaGetErrorString(e), wrong);
    return e == cudaSuccess && wrong == 0 ? 0 : 1;
}
