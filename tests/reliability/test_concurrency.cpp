// Concurrency on the CPU backend: calls from many host threads at once are
// safe and deterministic, the probe can be raced, and gdn_last_error() is
// per thread. Each TEST_CASE is its own process under ctest, so a test that
// starts with a barrier races the process's first gdn call.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gdn/gdn.h"
#include "rel_support.hpp"

namespace {

constexpr int kThreads = 8;

gdn_caps_t cpu_caps(int32_t workers) {
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    REQUIRE(gdn_probe(GDN_BACKEND_CPU, 0, &caps) == GDN_SUCCESS);
    caps.multiprocessor_count = workers;
    return caps;
}

// Eight different problems: every path, dtypes, features, layouts, sizes
// large enough that the backend also spreads each call over its own workers.
std::vector<rel::Config> eight_configs() {
    std::vector<rel::Config> v;
    for (int i = 0; i < kThreads; ++i) {
        rel::Config c;
        c.seed = uint64_t(100 + i);
        c.T = 300 + 37 * i;
        c.seqs = 1 + i % 3;
        c.Hk = 2;
        c.Hv = 4;
        c.K = i % 2 ? 64 : 32;
        c.V = 64;
        c.algorithm = i % 4 == 0 ? GDN_ALGO_SEQUENTIAL : i % 4 == 1 ? GDN_ALGO_CHUNKED : GDN_ALGO_AUTO;
        if (i == 3) c.precision = GDN_PRECISION_FP16;  // the low-precision emulation
        if (i == 7) c.precision = GDN_PRECISION_BF16;
        if (i == 5) c.precision = GDN_PRECISION_BF16X3;  // the FP32 chunked path serves it on the CPU
        if (i == 2) c.precision = GDN_PRECISION_FP16X3;  // likewise (f16 inputs)
        c.in = i % 3 == 0 ? GDN_DTYPE_F32 : i % 3 == 1 ? GDN_DTYPE_BF16 : GDN_DTYPE_F16;
        c.out = i % 2 ? GDN_DTYPE_F32 : GDN_DTYPE_BF16;
        if (i == 2 || i == 5)
            c.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS | GDN_FLAG_OUTPUT_NORM;
        if (i == 6) c.layout = GDN_STATE_VK;
        if (i == 4) c.mapping = GDN_HEADS_INTERLEAVED;
        v.push_back(c);
    }
    return v;
}

std::string first_difference(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want) {
    if (got.size() != want.size()) return "sizes differ";
    for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i]) {
            char s[96];
            std::snprintf(s, sizeof s, "byte %zu: got 0x%02x, serial 0x%02x", i, got[i], want[i]);
            return s;
        }
    return "";
}

}  // namespace

TEST_CASE("8 host threads calling at once give the bits of serial calls", "[reliability][concurrency]") {
    const std::vector<rel::Config> configs = eight_configs();
    std::vector<std::unique_ptr<rel::HostCase>> cases;
    std::vector<std::vector<unsigned char>> serial;

    // Serial bits, one worker per call.
    const gdn_caps_t one = cpu_caps(1);
    for (const rel::Config& c : configs) {
        cases.push_back(std::make_unique<rel::HostCase>(c));
        REQUIRE(cases.back()->prepare(one));
        REQUIRE(cases.back()->run(one, true) == GDN_SUCCESS);
        serial.push_back(cases.back()->bits());
        // Every output row was written (nothing left at the NaN fill).
        const rel::HostCase& h = *cases.back();
        const size_t ob = rel::dtype_bytes(c.out);
        for (size_t i = 0; i < h.out.size(); i += ob) {
            bool all_ff = true;
            for (size_t b = 0; b < ob; ++b) all_ff = all_ff && h.out[i + b] == 0xFF;
            INFO("config " << (&c - configs.data()) << ", out element " << i / ob);
            REQUIRE_FALSE(all_ff);
        }
    }

    // Concurrent: each thread its own case, its own workspace, 1 to 4
    // workers per call (the bits must not depend on that either), NaN in the
    // workspace every other run.
    constexpr int kRepeats = 12;
    std::vector<std::string> failure(kThreads);
    std::vector<int> runs(kThreads, 0);
    rel::Barrier start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            rel::HostCase& h = *cases[size_t(t)];
            gdn_caps_t caps = one;
            caps.multiprocessor_count = 1 + t % 4;
            if (!h.prepare(caps)) {
                failure[size_t(t)] = std::string("gdn_workspace_size: ") + gdn_last_error();
                start.wait();
                return;
            }
            start.wait();
            for (int r = 0; r < kRepeats && failure[size_t(t)].empty(); ++r) {
                const gdn_status_t st = h.run(caps, r % 2 == 1);
                if (st != GDN_SUCCESS) {
                    failure[size_t(t)] = std::string("run failed: ") + gdn_last_error();
                    break;
                }
                const std::string diff = first_difference(h.bits(), serial[size_t(t)]);
                if (!diff.empty()) failure[size_t(t)] = "repeat " + std::to_string(r) + ": " + diff;
                ++runs[size_t(t)];
            }
        });
    }
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
        INFO("thread " << t << " (" << runs[size_t(t)] << " runs)");
        CHECK(failure[size_t(t)] == "");
        CHECK(runs[size_t(t)] == kRepeats);
    }
}

TEST_CASE("the first gdn_probe calls of a process, raced, all agree", "[reliability][concurrency]") {
    // This TEST_CASE is a process of its own under ctest: these are the
    // process's first gdn calls (the backend's one-time setup included).
    constexpr int kProbers = 16;
    std::vector<gdn_caps_t> caps(kProbers);
    std::vector<gdn_status_t> status(kProbers, GDN_ERROR_INTERNAL);
    std::vector<gdn_status_t> gpu_status(kProbers, GDN_ERROR_INTERNAL);
    std::vector<std::string> gpu_message(kProbers);
    rel::Barrier start(kProbers);
    std::vector<std::thread> threads;
    for (int t = 0; t < kProbers; ++t) {
        threads.emplace_back([&, t] {
            gdn_caps_t c;
            gdn_caps_init(&c);
            start.wait();
            status[size_t(t)] = gdn_probe(GDN_BACKEND_CPU, 0, &c);
            caps[size_t(t)] = c;
            // A GPU ordinal no machine has: the same answer on every thread.
            gdn_caps_t g;
            gdn_caps_init(&g);
            gpu_status[size_t(t)] = gdn_probe(t % 2 ? GDN_BACKEND_CUDA : GDN_BACKEND_HIP, 4096, &g);
            gpu_message[size_t(t)] = gdn_last_error();
        });
    }
    for (std::thread& th : threads) th.join();
    gdn_caps_t serial;
    gdn_caps_init(&serial);
    REQUIRE(gdn_probe(GDN_BACKEND_CPU, 0, &serial) == GDN_SUCCESS);
    for (int t = 0; t < kProbers; ++t) {
        INFO("thread " << t);
        CHECK(status[size_t(t)] == GDN_SUCCESS);
        CHECK(std::memcmp(&caps[size_t(t)], &serial, sizeof serial) == 0);
        CHECK(gpu_status[size_t(t)] == GDN_ERROR_BACKEND_UNAVAILABLE);
        CHECK(gpu_message[size_t(t)] != "");
        CHECK(gpu_message[size_t(t)] == gpu_message[size_t(t % 2)]);
    }
    CHECK(serial.backend == GDN_BACKEND_CPU);
    CHECK(serial.multiprocessor_count >= 1);
}

TEST_CASE("the first runs of a process, raced, give the bits of serial runs", "[reliability][concurrency]") {
    // No probe before the barrier either: probe + workspace + run collide.
    std::vector<rel::Config> configs = eight_configs();
    std::vector<std::unique_ptr<rel::HostCase>> cases;
    for (rel::Config& c : configs) {
        c.T = 130;  // keep this one quick
        cases.push_back(std::make_unique<rel::HostCase>(c));
    }
    std::vector<std::string> failure(kThreads);
    std::vector<std::vector<unsigned char>> concurrent(kThreads);
    rel::Barrier start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            start.wait();
            gdn_caps_t caps;
            gdn_caps_init(&caps);
            rel::HostCase& h = *cases[size_t(t)];
            if (gdn_probe(GDN_BACKEND_CPU, 0, &caps) != GDN_SUCCESS || !h.prepare(caps) ||
                h.run(caps, true) != GDN_SUCCESS) {
                failure[size_t(t)] = gdn_last_error();
                return;
            }
            concurrent[size_t(t)] = h.bits();
        });
    }
    for (std::thread& th : threads) th.join();
    const gdn_caps_t caps = cpu_caps(1);
    for (int t = 0; t < kThreads; ++t) {
        INFO("thread " << t);
        REQUIRE(failure[size_t(t)] == "");
        rel::HostCase& h = *cases[size_t(t)];
        REQUIRE(h.prepare(caps));
        REQUIRE(h.run(caps, true) == GDN_SUCCESS);
        CHECK(first_difference(concurrent[size_t(t)], h.bits()) == "");
    }
}

TEST_CASE("gdn_last_error is per thread under concurrent failing and succeeding calls",
          "[reliability][concurrency][errors]") {
    constexpr int kIterations = 400;
    const gdn_caps_t caps = cpu_caps(1);
    std::vector<std::unique_ptr<rel::HostCase>> cases;
    for (int t = 0; t < kThreads; ++t) {
        rel::Config c;
        c.T = 8 + t;
        c.seed = uint64_t(t + 1);
        cases.push_back(std::make_unique<rel::HostCase>(c));
        REQUIRE(cases.back()->prepare(caps));
    }
    std::vector<std::string> failure(kThreads);
    rel::Barrier start(kThreads), everyone_failed(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            rel::HostCase& h = *cases[size_t(t)];
            auto fail_with = [&](std::string why) {
                if (failure[size_t(t)].empty()) failure[size_t(t)] = std::move(why);
            };
            // A message only this thread can produce.
            const int32_t bad_seqs = -(1000 + t);
            const std::string mine = "problem.num_seqs (" + std::to_string(bad_seqs) + ") < 1";
            gdn_problem_t bad = h.problem;
            bad.num_seqs = bad_seqs;

            start.wait();
            // The pointer from a failed call stays valid, and keeps this
            // thread's message, while every other thread fails differently.
            size_t bytes = 0;
            if (gdn_workspace_size(&caps, &bad, &bytes) != GDN_ERROR_INVALID_ARGUMENT)
                fail_with("the bad problem was accepted");
            const char* held = gdn_last_error();
            everyone_failed.wait();
            if (std::string(held).find(mine) == std::string::npos)
                fail_with("held message changed to \"" + std::string(held) + "\"");

            for (int i = 0; i < kIterations && failure[size_t(t)].empty(); ++i) {
                // Alternate, offset per thread so failures and successes overlap.
                const bool should_fail = (i + t) % 2 == 0;
                gdn_status_t st;
                if (should_fail) {
                    st = (i / 2) % 2 ? gdn_workspace_size(&caps, &bad, &bytes)
                                     : gdn_chunked_recurrence(&caps, &bad, &h.tensors, h.workspace,
                                                              h.workspace_bytes, nullptr);
                } else {
                    st = (i / 2) % 2 ? gdn_workspace_size(&caps, &h.problem, &bytes) : h.run(caps, false);
                }
                const std::string msg = gdn_last_error();
                if (should_fail && (st != GDN_ERROR_INVALID_ARGUMENT || msg.find(mine) == std::string::npos))
                    fail_with("iteration " + std::to_string(i) + ": expected \"" + mine + "\", got \"" + msg + "\"");
                if (!should_fail && (st != GDN_SUCCESS || !msg.empty()))
                    fail_with("iteration " + std::to_string(i) + ": success expected, got status " +
                              std::to_string(int(st)) + " and \"" + msg + "\"");
            }
        });
    }
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
        INFO("thread " << t);
        CHECK(failure[size_t(t)] == "");
    }
}
