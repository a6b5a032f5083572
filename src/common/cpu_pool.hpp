// The CPU backend's worker threads (docs/cpu.md, "Threads").
#pragma once

#include <cstdint>

namespace gdn::cpu {

// A worker's part of a call: body(ctx, w) for worker w.
using WorkerBody = void (*)(void* ctx, int32_t worker);

// Runs body(ctx, w) for w = 0 .. workers - 1 at once and returns when every
// one has returned: worker 0 on the calling thread, the others on helper
// threads the library keeps between calls (started by the first call that
// needs them, asleep while idle, joined when the library is unloaded or the
// process exits). A call that finds the helpers serving another call starts
// threads of its own for its workers, as a call did before there were
// helpers. Where a thread cannot be had, fewer workers run: body must give the
// same result for any number of workers from 1 (the CPU backend's workers
// take their tasks from a shared counter). A worker joins only while worker 0
// is still running, so a helper slow to wake adds nothing to a short call.
// Returns the number of workers that may have run (those that joined are
// among 0 .. that number − 1). Throws nothing.
int32_t run_workers(int32_t workers, WorkerBody body, void* ctx) noexcept;

// The helper threads the library holds now (for tests and docs).
int32_t helper_threads() noexcept;

}  // namespace gdn::cpu
