// The CPU backend's helper threads: kept between calls, so that a call does
// not start and join threads of its own (~45 µs a call on a 2-core VM, most
// of a one-token decode's time; docs/cpu.md).
//
// One call at a time owns the pool (`busy`). The owner writes the job, then
// opens it (`open = generation`) and publishes the generation; each helper
// counts itself in `active` and runs the job only while it is open. The owner
// runs worker 0, closes the job (`open = 0`) and waits for `active` to drop to
// zero: a helper either counted itself before the close and is waited for, or
// sees the job closed and leaves it alone. The atomics stay in the pool, which
// is never freed, so a helper that wakes late touches nothing of a call that
// has returned.
//
// fork(): the child has none of the helpers; a handler drops the pool there
// (its memory is left behind, reachable for leak checkers) and the child's
// first call starts a new one.
#include "cpu_pool.hpp"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

namespace gdn::cpu {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
}

// How long an idle helper polls for the next job before it sleeps (calls that
// follow each other closely then find it awake), and the owner for the
// helpers' last tasks (docs/cpu.md: 50 µs measured no faster than ~3).
constexpr auto kSpin = std::chrono::microseconds(10);
// Helpers kept at most (caps.multiprocessor_count is at most 1024 from gdn_probe).
constexpr int32_t kMaxHelpers = 1023;

struct Pool {
    std::atomic<bool> busy{false};
    std::atomic<uint64_t> generation{0};
    std::atomic<uint64_t> open{0};  // the generation helpers may still join; 0: none
    std::atomic<int32_t> active{0};
    std::atomic<bool> stop{false};
    // The job, written by the owner before it opens it.
    WorkerBody body = nullptr;
    void* ctx = nullptr;
    int32_t workers = 0;
    std::mutex m;  // the sleepers' wake-up, the owner's wait, and `threads`
    std::condition_variable wake, done;
    std::vector<std::thread> threads;
    Pool* dropped_before = nullptr;  // a forked child's: the pools it dropped, still reachable
};

std::atomic<Pool*> g_pool{nullptr};
Pool* g_dropped = nullptr;

// Polls `ready` for kSpin, then sleeps on `cv` until it holds (whoever makes
// it hold does so, or notifies, under p->m).
template <class Ready>
void wait_until(Pool* p, std::condition_variable& cv, Ready ready) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 1; !ready(); ++i) {
        cpu_relax();
        if (i % 64 == 0 && std::chrono::steady_clock::now() > until) {
            std::unique_lock<std::mutex> lock(p->m);
            cv.wait(lock, ready);
            return;
        }
    }
}

void helper_main(Pool* p, int32_t index, uint64_t seen) {
#if defined(__linux__)
    pthread_setname_np(pthread_self(), "gdn-cpu");  // what ps, top and gdb show
#endif
    for (;;) {
        wait_until(p, p->wake, [&] {
            return p->generation.load(std::memory_order_acquire) != seen || p->stop.load(std::memory_order_relaxed);
        });
        if (p->stop.load(std::memory_order_relaxed)) return;
        const uint64_t g = p->generation.load(std::memory_order_acquire);
        seen = g;
        p->active.fetch_add(1, std::memory_order_seq_cst);
        if (p->open.load(std::memory_order_seq_cst) == g && index < p->workers) p->body(p->ctx, index);
        if (p->active.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard<std::mutex> lock(p->m);  // the owner may be asleep on it
            p->done.notify_one();
        }
    }
}

void drop_pool_in_child() {
    Pool* p = g_pool.exchange(nullptr, std::memory_order_relaxed);
    if (p) {
        p->dropped_before = g_dropped;
        g_dropped = p;
    }
}

Pool* get_pool() noexcept {
    Pool* p = g_pool.load(std::memory_order_acquire);
    if (p) return p;
    Pool* fresh = new (std::nothrow) Pool;
    if (!fresh) return nullptr;
    if (!g_pool.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) {
        delete fresh;  // another thread's pool won (no thread of this one started)
        return p;
    }
    static std::atomic<bool> at_fork{false};
    if (!at_fork.exchange(true)) pthread_atfork(nullptr, nullptr, drop_pool_in_child);
    return fresh;
}

// The owner's: at least n helpers (fewer where threads cannot be started).
int32_t grow(Pool* p, int32_t n) noexcept {
    if (n > kMaxHelpers) n = kMaxHelpers;
    std::lock_guard<std::mutex> lock(p->m);
    while (int32_t(p->threads.size()) < n && !p->stop.load(std::memory_order_relaxed)) {
        const int32_t index = int32_t(p->threads.size()) + 1;
        try {
            p->threads.reserve(p->threads.size() + 1);
            p->threads.emplace_back(helper_main, p, index, p->generation.load(std::memory_order_relaxed));
        } catch (...) {
            break;
        }
    }
    return int32_t(p->threads.size());
}

// Threads of the call's own, joined before it returns.
int32_t run_spawned(int32_t workers, WorkerBody body, void* ctx) noexcept {
    std::vector<std::thread> threads;
    try {
        threads.reserve(size_t(workers - 1));
    } catch (...) {
        workers = 1;
    }
    int32_t started = 1;
    for (int32_t w = 1; w < workers; ++w) {
        try {
            threads.emplace_back(body, ctx, w);
            ++started;
        } catch (...) {
            break;  // fewer threads: the tasks left are taken by those running
        }
    }
    body(ctx, 0);
    for (std::thread& t : threads) t.join();
    return started;
}

// Joins the helpers when the library is unloaded or the process exits, so
// that none is left in code that is no longer mapped.
struct Reaper {
    ~Reaper() {
        Pool* p = g_pool.load(std::memory_order_acquire);
        if (!p) return;
        std::vector<std::thread> threads;
        {
            std::lock_guard<std::mutex> lock(p->m);
            p->stop.store(true, std::memory_order_relaxed);
            threads.swap(p->threads);
        }
        p->wake.notify_all();
        for (std::thread& t : threads)
            if (t.joinable()) t.join();
    }
} g_reaper;

}  // namespace

int32_t run_workers(int32_t workers, WorkerBody body, void* ctx) noexcept {
    if (workers <= 1) {
        body(ctx, 0);
        return 1;
    }
    Pool* p = get_pool();
    if (!p || p->busy.exchange(true, std::memory_order_acquire)) return run_spawned(workers, body, ctx);
    const int32_t helpers = grow(p, workers - 1);
    if (helpers == 0) {
        p->busy.store(false, std::memory_order_release);
        return run_spawned(workers, body, ctx);
    }
    const int32_t n = helpers + 1 < workers ? helpers + 1 : workers;
    p->body = body;
    p->ctx = ctx;
    p->workers = n;
    const uint64_t g = p->generation.load(std::memory_order_relaxed) + 1;
    p->open.store(g, std::memory_order_seq_cst);
    {
        std::lock_guard<std::mutex> lock(p->m);
        p->generation.store(g, std::memory_order_release);
    }
    p->wake.notify_all();
    body(ctx, 0);
    p->open.store(0, std::memory_order_seq_cst);
    // The helpers that joined finish their last tasks about when worker 0
    // does: poll for a while, then sleep until the last one leaves.
    wait_until(p, p->done, [&] { return p->active.load(std::memory_order_seq_cst) == 0; });
    p->busy.store(false, std::memory_order_release);
    return n;
}

int32_t helper_threads() noexcept {
    Pool* p = g_pool.load(std::memory_order_acquire);
    if (!p) return 0;
    std::lock_guard<std::mutex> lock(p->m);
    return int32_t(p->threads.size());
}

}  // namespace gdn::cpu
