// Host fibers (ucontext) for simt_host.hpp.
#include "simt_host.hpp"

#include <ucontext.h>

#include <cstdio>
#include <memory>
#include <vector>

namespace gdn::hip::simt {

namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr unsigned kMaxThreads = 1024;

struct Fiber {
    ucontext_t ctx;
    std::unique_ptr<char[]> stack;
    Dim3 tid;
    bool done = false;
};

struct Block {
    std::vector<Fiber> fibers;
    unsigned nthreads = 0;
    unsigned current = 0;
    ucontext_t main_ctx;
    void (*body)(const void*) = nullptr;
    const void* arg = nullptr;
    // block barrier
    unsigned live = 0, arrived = 0;
    uint64_t generation = 0;
    // warp barriers
    unsigned warp_live[kMaxThreads / 32] = {}, warp_arrived[kMaxThreads / 32] = {};
    uint64_t warp_generation[kMaxThreads / 32] = {};
    WarpScratch scratch[kMaxThreads / 32];
    // deadlock detection: yields since the last barrier released
    uint64_t idle_yields = 0;
};

Block g_block;
Dim3 g_block_idx, g_block_dim, g_grid_dim;
unsigned g_warp = 32;  // lanes per warp (32, or 64 for the sequential kernel's wave64 runs)

// Switches to the next fiber that has not finished (round robin).
void yield() {
    Block& b = g_block;
    if (++b.idle_yields > uint64_t(b.nthreads) * 1000000u) {
        std::fprintf(stderr, "simt: deadlock: threads of block %u wait at different barriers\n",
                     g_block_idx.x);
        std::abort();
    }
    const unsigned me = b.current;
    for (unsigned i = 1; i <= b.nthreads; ++i) {
        const unsigned j = (me + i) % b.nthreads;
        if (b.fibers[j].done) continue;
        if (j == me) return;
        b.current = j;
        swapcontext(&b.fibers[me].ctx, &b.fibers[j].ctx);
        return;
    }
}

void release_if_complete() {
    Block& b = g_block;
    if (b.arrived > 0 && b.arrived == b.live) {
        b.arrived = 0;
        ++b.generation;
        b.idle_yields = 0;
    }
    for (unsigned w = 0; w < b.nthreads / g_warp; ++w)
        if (b.warp_arrived[w] > 0 && b.warp_arrived[w] == b.warp_live[w]) {
            b.warp_arrived[w] = 0;
            ++b.warp_generation[w];
            b.idle_yields = 0;
        }
}

void fiber_main() {
    Block& b = g_block;
    const unsigned me = b.current;
    b.body(b.arg);
    b.fibers[me].done = true;
    --b.live;
    --b.warp_live[me / g_warp];
    release_if_complete();  // exited threads no longer hold a barrier back
    for (unsigned i = 1; i < b.nthreads; ++i) {
        const unsigned j = (me + i) % b.nthreads;
        if (!b.fibers[j].done) {
            b.current = j;
            setcontext(&b.fibers[j].ctx);
        }
    }
    setcontext(&b.main_ctx);
}

}  // namespace

const Dim3& thread_idx() { return g_block.fibers[g_block.current].tid; }
const Dim3& block_idx() { return g_block_idx; }
const Dim3& block_dim() { return g_block_dim; }
const Dim3& grid_dim() { return g_grid_dim; }
WarpScratch& warp_scratch() { return g_block.scratch[g_block.current / g_warp]; }
unsigned warp_size() { return g_warp; }
void set_warp_size(unsigned lanes) {
    if (lanes != 32 && lanes != 64) std::abort();
    g_warp = lanes;
}

void block_barrier() {
    Block& b = g_block;
    const uint64_t gen = b.generation;
    ++b.arrived;
    release_if_complete();
    while (b.generation == gen) yield();
}

void warp_barrier() {
    Block& b = g_block;
    const unsigned w = b.current / g_warp;
    const uint64_t gen = b.warp_generation[w];
    ++b.warp_arrived[w];
    release_if_complete();
    while (b.warp_generation[w] == gen) yield();
}

uint32_t shfl_xor_u32(uint32_t v, int mask) {
    Block& b = g_block;
    const unsigned me = b.current;
    WarpScratch& s = b.scratch[me / g_warp];
    s.x[me % g_warp] = v;
    warp_barrier();
    const uint32_t r = s.x[(me % g_warp) ^ unsigned(mask)];
    warp_barrier();
    return r;
}

void launch(unsigned grid, unsigned block, void (*body)(const void*), const void* arg) {
    if (block == 0 || block % g_warp != 0 || block > kMaxThreads) {
        std::fprintf(stderr, "simt: block of %u threads (need a multiple of %u, at most %u)\n", block,
                     g_warp, kMaxThreads);
        std::abort();
    }
    Block& b = g_block;
    if (b.fibers.size() < block) {
        b.fibers.resize(block);
        for (Fiber& f : b.fibers)
            if (!f.stack) f.stack.reset(new char[kStackBytes]);
    }
    g_grid_dim = Dim3{grid, 1, 1};
    g_block_dim = Dim3{block, 1, 1};
    b.nthreads = block;
    b.body = body;
    b.arg = arg;
    for (unsigned blk = 0; blk < grid; ++blk) {
        g_block_idx = Dim3{blk, 0, 0};
        b.live = block;
        b.arrived = 0;
        b.idle_yields = 0;
        for (unsigned w = 0; w < block / g_warp; ++w) {
            b.warp_live[w] = g_warp;
            b.warp_arrived[w] = 0;
        }
        for (unsigned t = 0; t < block; ++t) {
            Fiber& f = b.fibers[t];
            f.tid = Dim3{t, 0, 0};
            f.done = false;
            getcontext(&f.ctx);
            f.ctx.uc_stack.ss_sp = f.stack.get();
            f.ctx.uc_stack.ss_size = kStackBytes;
            f.ctx.uc_link = nullptr;
            makecontext(&f.ctx, fiber_main, 0);
        }
        b.current = 0;
        swapcontext(&b.main_ctx, &b.fibers[0].ctx);
    }
}

}  // namespace gdn::hip::simt
