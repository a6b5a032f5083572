// The CPU backend's worker threads (src/common/cpu_pool.cpp): helpers kept
// between calls give every call the bits of a one-thread run, when calls come
// from several host threads at once (the pool serves one, the others start
// threads of their own), and in a child process after fork().
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <catch2/catch.hpp>

#include "common/cpu_pool.hpp"
#include "support.hpp"

using namespace gdn_test;

namespace {

// A decode batch through a pool (slots out of order, a padding slot) and a
// varlen prompt batch on the chunked path: both spread over tasks.
Spec threads_spec(int which) {
    Spec s;
    if (which % 2 == 0) {
        s.seq_lens = std::vector<int32_t>(5, 1);
        s.state_indices = {4, 0, -1, 2, 1};
        s.num_state_slots = 5;
        s.algorithm = GDN_ALGO_SEQUENTIAL;
    } else {
        s.seq_lens = {70, 33, 1};
        s.algorithm = GDN_ALGO_CHUNKED;
    }
    s.hk = 2;
    s.hv = 6;
    s.k = s.v = 32;
    s.seed = uint64_t(101 + which);
    return s;
}

struct Bits {
    std::vector<unsigned char> out, state;
};

// One run of spec `which` on `threads` workers from the initial state.
Bits run_bits(int which, int32_t threads, gdn_status_t* status) {
    Problem p(threads_spec(which));
    *status = run(p, cpu_caps(threads));
    return Bits{p.out.snapshot(), p.state.snapshot()};
}

}  // namespace

TEST_CASE("the helper threads are kept between calls, and a one-thread call starts none", "[cpu][threads]") {
    gdn_status_t st = GDN_ERROR_INTERNAL;
    const Bits one = run_bits(1, 1, &st);
    REQUIRE(st == GDN_SUCCESS);
    const int32_t before = gdn::cpu::helper_threads();
    run_bits(1, 1, &st);
    REQUIRE(st == GDN_SUCCESS);
    CHECK(gdn::cpu::helper_threads() == before);  // one worker: the calling thread alone

    const Bits three = run_bits(1, 3, &st);
    REQUIRE(st == GDN_SUCCESS);
    const int32_t after = gdn::cpu::helper_threads();
    CHECK(after >= 2);
    CHECK(one.out == three.out);
    CHECK(one.state == three.state);
    for (int i = 0; i < 20; ++i) {  // reused, not started again
        const Bits again = run_bits(i % 2, 2 + i % 2, &st);
        REQUIRE(st == GDN_SUCCESS);
        CHECK(gdn::cpu::helper_threads() == after);
    }
}

TEST_CASE("calls from four host threads at once give each call's one-thread bits", "[cpu][threads]") {
    constexpr int kCallers = 4, kCalls = 25;
    Bits want[kCallers];
    for (int c = 0; c < kCallers; ++c) {
        gdn_status_t st = GDN_ERROR_INTERNAL;
        want[c] = run_bits(c, 1, &st);
        REQUIRE(st == GDN_SUCCESS);
    }
    // Catch2's macros are not for other threads: each caller counts its own failures.
    std::atomic<int> go{0};
    int failures[kCallers] = {};
    gdn_status_t last_status[kCallers] = {};
    std::vector<std::thread> callers;
    for (int c = 0; c < kCallers; ++c)
        callers.emplace_back([&, c] {
            ++go;
            while (go.load() < kCallers) std::this_thread::yield();  // start together
            for (int i = 0; i < kCalls; ++i) {
                gdn_status_t st = GDN_ERROR_INTERNAL;
                const Bits got = run_bits(c, 2 + (c + i) % 3, &st);
                last_status[c] = st;
                if (st != GDN_SUCCESS || got.out != want[c].out || got.state != want[c].state) ++failures[c];
            }
        });
    for (std::thread& t : callers) t.join();
    for (int c = 0; c < kCallers; ++c) {
        INFO("caller " << c << ", last status " << int(last_status[c]));
        CHECK(failures[c] == 0);
    }
}

TEST_CASE("a child process after fork() gets the parent's bits from helpers of its own", "[cpu][threads]") {
    gdn_status_t st = GDN_ERROR_INTERNAL;
    const Bits want = run_bits(1, 1, &st);
    REQUIRE(st == GDN_SUCCESS);
    run_bits(1, 3, &st);  // the parent's helpers exist now
    REQUIRE(st == GDN_SUCCESS);
    REQUIRE(gdn::cpu::helper_threads() >= 2);

    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        // The child: no Catch2 here, an exit status only.
        int code = 0;
        if (gdn::cpu::helper_threads() != 0) code |= 1;  // the parent's helpers are not here
        for (int i = 0; i < 5 && code == 0; ++i) {
            gdn_status_t s = GDN_ERROR_INTERNAL;
            const Bits got = run_bits(1, 3, &s);
            if (s != GDN_SUCCESS) code |= 2;
            if (got.out != want.out || got.state != want.state) code |= 4;
        }
        if (gdn::cpu::helper_threads() < 2) code |= 8;  // its own were started
        _exit(code);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    INFO("child exit code " << WEXITSTATUS(status)
                            << " (1: the parent's helpers counted, 2: a call failed, 4: other bits, "
                               "8: no helpers of its own)");
    CHECK(WEXITSTATUS(status) == 0);

    // The parent's pool still serves it.
    const Bits again = run_bits(1, 3, &st);
    REQUIRE(st == GDN_SUCCESS);
    CHECK(again.out == want.out);
    CHECK(again.state == want.state);
}
