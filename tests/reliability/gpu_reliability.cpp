// Reliability of the CUDA backend, on a device (issue 5):
//
//   concurrent-streams  8 host threads, each with its own stream, buffers and
//                       workspace, calling at once give the bits of serial calls
//   first-call-race     16 threads whose first gdn calls (probe, the per-device
//                       setup, a run) start at one moment; caps and bits agree
//   (no invalid-stream check: on an H200, 2026-11-29, a destroyed stream
//   crashed inside the CUDA runtime and a stream of another device was
//   accepted by the launch, so neither surfaces as a status; see
//   docs/reliability.md)
//   launch-failure      launches the runtime refuses (legacy stream during a
//                       blocking stream's capture; VALIDATE on a capturing
//                       stream) are GDN_ERROR_DEVICE with its message, nothing
//                       written, no error left pending, and later calls
//                       work with the same bits
//   validate-mode       GDN_FLAG_VALIDATE rejects each bad device-side array
//                       (cu_seqlens order / start / end / max_seqlen, a slot out
//                       of range, a slot named twice) with a message and writes
//                       nothing; good arrays give the bits of a run without it
//   offsets-past-2-31   T = 360000, Hk = 16, Hv = 48, K = V = 128, bf16: the
//                       element offsets of v and out pass 2^31; sampled heads
//                       (output and final state) against the FP64 reference
//
//   gdn_tests_reliability_gpu [CHECK...] [--device N]   (no CHECK: all of them)
//
// The device is GDN_TEST_DEVICE or --device (default 0): run it on a second
// GPU too, to show no hidden device-0 assumption. Exit 0: every check passed;
// 1: a check failed; 77: "skipped: no device". Plain C++ on the CUDA runtime.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/internal.hpp"
#include "common/numeric.hpp"
#include "common/reference.hpp"
#include "gdn/gdn.h"
#include "rel_support.hpp"

namespace {

int g_device = 0;

// A failed CUDA call or a violated expectation ends the check.
// A check that cannot run on this machine (e.g. it needs a second GPU).
struct Skipped : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct CheckFailed : std::runtime_error {
    using std::runtime_error::runtime_error;
};

void cuda_ok(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw CheckFailed(std::string(what) + ": " + cudaGetErrorString(e));
}
#define CUDA_OK(x) cuda_ok((x), #x)

void expect(bool ok, const std::string& what) {
    if (!ok) throw CheckFailed(what);
}

// Device memory with 256 guard bytes of a pattern on each side.
class DeviceBuffer {
public:
    static constexpr size_t kGuard = 256;
    static constexpr unsigned char kGuardByte = 0xC3;
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
        CUDA_OK(cudaMalloc(&base_, bytes + 2 * kGuard));
        CUDA_OK(cudaMemset(base_, kGuardByte, bytes + 2 * kGuard));
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept : base_(o.base_), bytes_(o.bytes_) { o.base_ = nullptr; }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        std::swap(base_, o.base_);
        std::swap(bytes_, o.bytes_);
        return *this;
    }
    ~DeviceBuffer() {
        if (base_) cudaFree(base_);
    }
    void* data() const { return base_ ? static_cast<char*>(base_) + kGuard : nullptr; }
    size_t bytes() const { return bytes_; }
    void upload(const void* src, size_t n) { CUDA_OK(cudaMemcpy(data(), src, n, cudaMemcpyHostToDevice)); }
    template <class T>
    void upload(const std::vector<T>& v) { upload(v.data(), v.size() * sizeof(T)); }
    std::vector<unsigned char> download() const {
        std::vector<unsigned char> b(bytes_);
        if (bytes_) CUDA_OK(cudaMemcpy(b.data(), data(), bytes_, cudaMemcpyDeviceToHost));
        return b;
    }
    bool guards_intact() const {
        std::vector<unsigned char> g(kGuard);
        for (int side = 0; side < 2; ++side) {
            const char* at = static_cast<const char*>(base_) + (side ? kGuard + bytes_ : 0);
            CUDA_OK(cudaMemcpy(g.data(), at, kGuard, cudaMemcpyDeviceToHost));
            for (unsigned char b : g)
                if (b != kGuardByte) return false;
        }
        return true;
    }

private:
    void* base_ = nullptr;
    size_t bytes_ = 0;
};

gdn_caps_t cuda_caps() {
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    const gdn_status_t st = gdn_probe(GDN_BACKEND_CUDA, g_device, &caps);
    expect(st == GDN_SUCCESS, std::string("gdn_probe(CUDA): ") + gdn_last_error());
    return caps;
}

// A host case (rel::HostCase) mirrored on the device, with its own workspace.
struct DeviceCase {
    rel::HostCase& h;
    DeviceBuffer q, k, v, z, out, g, beta, state, state_init, A_log, dt_bias, norm_weight, cu, idx, sfz, ws;
    gdn_tensors_t tensors;
    size_t ws_bytes = 0;

    DeviceCase(rel::HostCase& host, const gdn_caps_t& caps)
        : h(host),
          q(host.q.size()), k(host.k.size()), v(host.v.size()), z(host.z.size()), out(host.out.size()),
          g(host.g.size() * 4), beta(host.beta.size() * 4), state(host.state_init.size() * 4),
          state_init(host.state_init.size() * 4), A_log(host.A_log.size() * 4), dt_bias(host.dt_bias.size() * 4),
          norm_weight(host.norm_weight.size() * 4), cu(host.cu_seqlens.size() * 4),
          idx(host.state_indices.size() * 4), sfz(host.start_from_zero.size()) {
        q.upload(h.q), k.upload(h.k), v.upload(h.v), z.upload(h.z), g.upload(h.g), beta.upload(h.beta);
        state_init.upload(h.state_init), A_log.upload(h.A_log), dt_bias.upload(h.dt_bias);
        norm_weight.upload(h.norm_weight), cu.upload(h.cu_seqlens), idx.upload(h.state_indices);
        sfz.upload(h.start_from_zero);
        gdn_tensors_init(&tensors);
        tensors.q = q.data(), tensors.k = k.data(), tensors.v = v.data(), tensors.z = z.data();
        tensors.g = g.data(), tensors.beta = beta.data(), tensors.out = out.data();
        tensors.state = static_cast<float*>(state.data());
        tensors.cu_seqlens = static_cast<const int32_t*>(cu.data());
        tensors.state_indices = static_cast<const int32_t*>(idx.data());
        tensors.start_from_zero = static_cast<const uint8_t*>(sfz.data());
        tensors.A_log = static_cast<const float*>(A_log.data());
        tensors.dt_bias = static_cast<const float*>(dt_bias.data());
        tensors.norm_weight = static_cast<const float*>(norm_weight.data());
        const gdn_status_t st = gdn_workspace_size(&caps, &h.problem, &ws_bytes);
        expect(st == GDN_SUCCESS, std::string("gdn_workspace_size: ") + gdn_last_error());
        ws = DeviceBuffer(std::max<size_t>(ws_bytes, 1));
    }

    // Restores the state, NaN into out (and the workspace when asked), runs:
    // all on `stream`, nothing synchronised.
    gdn_status_t run(const gdn_caps_t& caps, cudaStream_t stream, bool poison_workspace, uint32_t extra_flags = 0) {
        CUDA_OK(cudaMemcpyAsync(state.data(), state_init.data(), state.bytes(), cudaMemcpyDeviceToDevice, stream));
        CUDA_OK(cudaMemsetAsync(out.data(), 0xFF, out.bytes(), stream));
        if (poison_workspace) CUDA_OK(cudaMemsetAsync(ws.data(), 0xFF, ws.bytes(), stream));
        gdn_problem_t p = h.problem;
        p.flags |= extra_flags;
        return gdn_chunked_recurrence(&caps, &p, &tensors, ws.data(), ws_bytes, stream);
    }

    // out and state after the stream's work, as bytes.
    std::vector<unsigned char> bits(cudaStream_t stream) const {
        CUDA_OK(cudaStreamSynchronize(stream));
        std::vector<unsigned char> b = out.download(), s = state.download();
        b.insert(b.end(), s.begin(), s.end());
        return b;
    }
};

std::string first_difference(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want) {
    if (got.size() != want.size()) return "sizes differ";
    for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i]) return "byte " + std::to_string(i) + " differs";
    return "";
}

// Mixed problems: both paths and auto, f32/bf16/f16, every fused feature,
// both state layouts and head mappings, varlen batches, a decode batch.
std::vector<rel::Config> mixed_configs(int n) {
    std::vector<rel::Config> v;
    for (int i = 0; i < n; ++i) {
        rel::Config c;
        c.seed = uint64_t(500 + i);
        c.T = 1500 + 211 * i;
        c.seqs = 1 + i % 3;
        c.Hk = 4;
        c.Hv = 8;
        c.K = i % 3 == 2 ? 64 : 128;
        c.V = c.K;
        c.algorithm = i % 4 == 0 ? GDN_ALGO_SEQUENTIAL : i % 4 == 1 ? GDN_ALGO_CHUNKED : GDN_ALGO_AUTO;
        c.in = i % 3 == 0 ? GDN_DTYPE_F32 : i % 3 == 1 ? GDN_DTYPE_BF16 : GDN_DTYPE_F16;
        c.out = i % 2 ? GDN_DTYPE_F32 : GDN_DTYPE_BF16;
        if (i == 2 || i == 5)
            c.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS | GDN_FLAG_OUTPUT_NORM;
        if (i == 6) c.layout = GDN_STATE_VK;
        if (i == 4) c.mapping = GDN_HEADS_INTERLEAVED;
        if (i == 7) c.T = 64, c.seqs = 64;  // 64 sequences, many of them empty
        v.push_back(c);
    }
    return v;
}

// Every out element written (no 0xFF..FF NaN fill left) and finite.
void expect_written_and_finite(const rel::HostCase& h, const std::vector<unsigned char>& bits, const std::string& who) {
    const gdn_dtype_t t = h.cfg.out;
    const size_t n = h.out.size() / rel::dtype_bytes(t);
    for (size_t i = 0; i < n; ++i) {
        const float x = gdn::load_element(bits.data(), t, int64_t(i));
        expect(std::isfinite(x), who + ": out element " + std::to_string(i) + " is " + std::to_string(x));
    }
}

// ------------------------------------------------------------------ checks

void concurrent_streams() {
    constexpr int kThreads = 8, kRepeats = 20;
    CUDA_OK(cudaSetDevice(g_device));
    const gdn_caps_t caps = cuda_caps();
    const std::vector<rel::Config> configs = mixed_configs(kThreads);
    std::vector<std::unique_ptr<rel::HostCase>> hosts;
    std::vector<std::unique_ptr<DeviceCase>> cases;
    std::vector<std::vector<unsigned char>> serial;
    for (const rel::Config& c : configs) {
        hosts.push_back(std::make_unique<rel::HostCase>(c));
        cases.push_back(std::make_unique<DeviceCase>(*hosts.back(), caps));
    }
    // Serial bits: one call at a time on the default stream.
    for (size_t i = 0; i < cases.size(); ++i) {
        const gdn_status_t st = cases[i]->run(caps, nullptr, true);
        expect(st == GDN_SUCCESS, std::string("serial run: ") + gdn_last_error());
        serial.push_back(cases[i]->bits(nullptr));
        expect_written_and_finite(*hosts[i], serial.back(), "config " + std::to_string(i));
    }
    std::vector<std::string> failure(kThreads);
    rel::Barrier start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            cudaStream_t stream = nullptr;
            bool ready = cudaSetDevice(g_device) == cudaSuccess &&
                         cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess;
            start.wait();  // every thread arrives, ready or not: no deadlock
            try {
                expect(ready, "cudaSetDevice / cudaStreamCreateWithFlags failed");
                for (int r = 0; r < kRepeats; ++r) {
                    DeviceCase& d = *cases[size_t(t)];
                    const gdn_status_t st = d.run(caps, stream, r % 2 == 1);
                    expect(st == GDN_SUCCESS, std::string("run: ") + gdn_last_error());
                    const std::string diff = first_difference(d.bits(stream), serial[size_t(t)]);
                    expect(diff.empty(), "repeat " + std::to_string(r) + ": " + diff);
                }
            } catch (const std::exception& e) {
                failure[size_t(t)] = e.what();
            }
            if (stream) cudaStreamDestroy(stream);
        });
    }
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t)
        expect(failure[size_t(t)].empty(), "thread " + std::to_string(t) + ": " + failure[size_t(t)]);
    std::printf("  %d threads x %d runs, each on its own stream, = serial bits\n", kThreads, kRepeats);
}

void first_call_race() {
    // Must be the process's first gdn call: ctest runs each check alone.
    constexpr int kThreads = 16;
    const std::vector<rel::Config> configs = mixed_configs(kThreads / 2);
    std::vector<std::unique_ptr<rel::HostCase>> hosts;
    for (int t = 0; t < kThreads; ++t) hosts.push_back(std::make_unique<rel::HostCase>(configs[size_t(t % 8)]));
    // Device buffers need no gdn call: made before the race (the workspace is
    // sized inside it).
    std::vector<gdn_caps_t> caps(kThreads);
    std::vector<std::vector<unsigned char>> bits(kThreads);
    std::vector<std::string> failure(kThreads);
    rel::Barrier start(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            cudaStream_t stream = nullptr;
            bool ready = cudaSetDevice(g_device) == cudaSuccess &&
                         cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess;
            start.wait();  // every thread arrives, ready or not: no deadlock
            try {
                expect(ready, "cudaSetDevice / cudaStreamCreateWithFlags failed");
                gdn_caps_init(&caps[size_t(t)]);
                const gdn_status_t st = gdn_probe(GDN_BACKEND_CUDA, g_device, &caps[size_t(t)]);
                expect(st == GDN_SUCCESS, std::string("gdn_probe: ") + gdn_last_error());
                DeviceCase d(*hosts[size_t(t)], caps[size_t(t)]);
                expect(d.run(caps[size_t(t)], stream, true) == GDN_SUCCESS, std::string("run: ") + gdn_last_error());
                bits[size_t(t)] = d.bits(stream);
            } catch (const std::exception& e) {
                failure[size_t(t)] = e.what();
            }
            if (stream) cudaStreamDestroy(stream);
        });
    }
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t)
        expect(failure[size_t(t)].empty(), "thread " + std::to_string(t) + ": " + failure[size_t(t)]);
    CUDA_OK(cudaSetDevice(g_device));
    const gdn_caps_t serial_caps = cuda_caps();
    for (int t = 0; t < kThreads; ++t) {
        expect(std::memcmp(&caps[size_t(t)], &serial_caps, sizeof serial_caps) == 0,
               "thread " + std::to_string(t) + ": caps differ from a later serial probe");
        // Same problem, after the race, one call at a time: same bits.
        DeviceCase d(*hosts[size_t(t)], serial_caps);
        expect(d.run(serial_caps, nullptr, true) == GDN_SUCCESS, std::string("serial run: ") + gdn_last_error());
        expect(first_difference(bits[size_t(t)], d.bits(nullptr)).empty(),
               "thread " + std::to_string(t) + ": raced bits differ from serial ones");
    }
    std::printf("  %d threads: first probe + setup + run at once; caps and bits = serial (%s, %d SMs)\n", kThreads,
                serial_caps.arch, serial_caps.multiprocessor_count);
}

// A launch the runtime refuses, without a dangling handle: while a blocking
// stream is being captured, work on the legacy default stream would depend on
// it implicitly, and the runtime refuses the launch
// (cudaErrorStreamCaptureImplicit). And GDN_FLAG_VALIDATE on a capturing
// stream (its copy to the host and its synchronisation cannot be captured).
// Both must be GDN_ERROR_DEVICE with the runtime's message, write nothing,
// and later calls must work with the same bits. The refused kernel launch
// (the first) and the refused copy or synchronisation (the second, before
// any launch) must also leave no error pending: gdn reports the error and
// consumes it, so neither the caller's next CUDA call nor its next gdn call
// ("a CUDA error was pending before the call") sees it again.
void launch_failure() {
    CUDA_OK(cudaSetDevice(g_device));
    const gdn_caps_t caps = cuda_caps();
    for (gdn_algorithm_t algo : {GDN_ALGO_SEQUENTIAL, GDN_ALGO_CHUNKED}) {
        const char* path = algo == GDN_ALGO_SEQUENTIAL ? "sequential" : "chunked";
        rel::Config c;
        c.T = 600, c.seqs = 2, c.Hk = 2, c.Hv = 4, c.K = c.V = 128, c.algorithm = algo;
        rel::HostCase h(c);
        DeviceCase d(h, caps);
        expect(d.run(caps, nullptr, false) == GDN_SUCCESS, std::string("healthy run: ") + gdn_last_error());
        const std::vector<unsigned char> good = d.bits(nullptr);

        for (int variant = 0; variant < 2; ++variant) {
            const char* what = variant == 0 ? "legacy stream while a blocking stream captures"
                                            : "GDN_FLAG_VALIDATE on a capturing stream";
            CUDA_OK(cudaMemcpy(d.state.data(), d.state_init.data(), d.state.bytes(), cudaMemcpyDeviceToDevice));
            CUDA_OK(cudaMemset(d.out.data(), 0x7F, d.out.bytes()));
            CUDA_OK(cudaDeviceSynchronize());
            const std::vector<unsigned char> out0 = d.out.download(), state0 = d.state.download();
            cudaStream_t capturing = nullptr;
            CUDA_OK(cudaStreamCreate(&capturing));  // blocking: syncs with the legacy stream
            CUDA_OK(cudaStreamBeginCapture(capturing, cudaStreamCaptureModeRelaxed));
            gdn_problem_t p = h.problem;
            if (variant == 1) p.flags |= GDN_FLAG_VALIDATE;
            const gdn_status_t st = gdn_chunked_recurrence(&caps, &p, &d.tensors, d.ws.data(), d.ws_bytes,
                                                           variant == 0 ? nullptr : capturing);
            const std::string msg = gdn_last_error();
            // Read before ending the capture, which may set an error of its
            // own (the refusal invalidated the capture). Neither refusal is a
            // sticky error: the last error is the call's to clear, and peeking
            // at it says whether it did.
            const cudaError_t pending = cudaPeekAtLastError();
            cudaGraph_t graph = nullptr;
            const cudaError_t end = cudaStreamEndCapture(capturing, &graph);
            if (graph) cudaGraphDestroy(graph);
            const cudaError_t left = cudaGetLastError();  // the capture's own error, if any
            CUDA_OK(cudaStreamDestroy(capturing));
            std::printf("  %s, %s: status %d, \"%s\" (pending after the call: %s; end of capture: %s; "
                        "then pending: %s)\n",
                        path, what, int(st), msg.c_str(), cudaGetErrorName(pending), cudaGetErrorName(end),
                        cudaGetErrorName(left));
            const std::string who = std::string(path) + ", " + what;
            expect(st == GDN_ERROR_DEVICE, who + ": status " + std::to_string(int(st)) + ": " + msg);
            expect(msg.find("cudaError") != std::string::npos, who + ": the message lacks the runtime's error: " + msg);
            expect(pending == cudaSuccess, who + ": the refusal's error was left pending: " +
                                               cudaGetErrorName(pending) + " (" + cudaGetErrorString(pending) + ")");
            CUDA_OK(cudaDeviceSynchronize());
            expect(d.out.download() == out0, who + ": out written by a call that failed");
            expect(d.state.download() == state0, who + ": state written by a call that failed");

            // Later calls on a new stream and on the default stream work.
            cudaStream_t healthy = nullptr;
            CUDA_OK(cudaStreamCreate(&healthy));
            gdn_status_t again = d.run(caps, healthy, true);
            expect(again == GDN_SUCCESS, who + ": the next call failed: " + gdn_last_error());
            expect(first_difference(d.bits(healthy), good).empty(), who + ": bits after the fault differ");
            CUDA_OK(cudaStreamDestroy(healthy));
            again = d.run(caps, nullptr, false);
            expect(again == GDN_SUCCESS, who + ": the default stream failed after: " + gdn_last_error());
            expect(first_difference(d.bits(nullptr), good).empty(), who + ": default-stream bits differ");
        }
        expect(d.out.guards_intact() && d.state.guards_intact(), "a guard band was written");
    }
}

void validate_mode() {
    CUDA_OK(cudaSetDevice(g_device));
    const gdn_caps_t caps = cuda_caps();
    for (gdn_algorithm_t algo : {GDN_ALGO_SEQUENTIAL, GDN_ALGO_CHUNKED}) {
        rel::Config c;
        c.T = 400, c.seqs = 3, c.Hk = 2, c.Hv = 4, c.K = c.V = 64, c.algorithm = algo;
        rel::HostCase h(c);  // cu_seqlens {0, 44, 177, 400}, slots {3, 2, 1} of 4
        DeviceCase d(h, caps);
        expect(d.run(caps, nullptr, true) == GDN_SUCCESS, std::string("plain run: ") + gdn_last_error());
        const std::vector<unsigned char> plain = d.bits(nullptr);
        expect(d.run(caps, nullptr, true, GDN_FLAG_VALIDATE) == GDN_SUCCESS,
               std::string("good arrays with VALIDATE: ") + gdn_last_error());
        expect(first_difference(d.bits(nullptr), plain).empty(), "VALIDATE changed the bits of a good call");

        struct Violation {
            const char* what;
            std::vector<int32_t> cu, idx;
            int64_t max_seqlen;
            const char* words;
        };
        const std::vector<int32_t> cu = h.cu_seqlens, idx = h.state_indices;
        const int32_t T = int32_t(c.T);
        const Violation violations[] = {
            {"cu_seqlens not monotonic", {0, 200, 177, T}, idx, 0, "cu_seqlens[2]"},
            {"cu_seqlens[0] != 0", {5, 44, 177, T}, idx, 0, "cu_seqlens[0]"},
            {"cu_seqlens not ending at num_tokens", {0, 44, 177, T - 1}, idx, 0, "num_tokens"},
            {"a sequence longer than max_seqlen", cu, idx, 200, "max_seqlen"},
            {"a slot index out of range", cu, {3, 4, 1}, 0, "state_indices[1]"},
            {"two sequences writing one slot", cu, {2, 0, 2}, 0, "twice"},
        };
        for (const Violation& v : violations) {
            d.cu.upload(v.cu);
            d.idx.upload(v.idx);
            gdn_problem_t p = h.problem;
            p.flags |= GDN_FLAG_VALIDATE;
            p.max_seqlen = v.max_seqlen;
            CUDA_OK(cudaMemcpy(d.state.data(), d.state_init.data(), d.state.bytes(), cudaMemcpyDeviceToDevice));
            CUDA_OK(cudaMemset(d.out.data(), 0x7F, d.out.bytes()));
            CUDA_OK(cudaMemset(d.ws.data(), 0x5A, d.ws.bytes()));
            CUDA_OK(cudaDeviceSynchronize());
            const auto out0 = d.out.download(), state0 = d.state.download(), ws0 = d.ws.download();
            const gdn_status_t st = gdn_chunked_recurrence(&caps, &p, &d.tensors, d.ws.data(), d.ws_bytes, nullptr);
            const std::string msg = gdn_last_error();
            CUDA_OK(cudaDeviceSynchronize());
            const std::string who = std::string(v.what) + " (" + (algo == GDN_ALGO_SEQUENTIAL ? "sequential" : "chunked") + ")";
            std::printf("  %s: status %d, \"%s\"\n", who.c_str(), int(st), msg.c_str());
            expect(st == GDN_ERROR_INVALID_ARGUMENT, who + ": status " + std::to_string(int(st)));
            expect(msg.find(v.words) != std::string::npos, who + ": the message lacks \"" + v.words + "\"");
            expect(d.out.download() == out0, who + ": out written");
            expect(d.state.download() == state0, who + ": state written");
            expect(d.ws.download() == ws0, who + ": workspace written");
        }
        // Padding (a negative slot) is no violation.
        d.cu.upload(cu);
        d.idx.upload(std::vector<int32_t>{3, -1, 1});
        expect(d.run(caps, nullptr, true, GDN_FLAG_VALIDATE) == GDN_SUCCESS,
               std::string("padding slot with VALIDATE: ") + gdn_last_error());
        d.idx.upload(idx);
    }
}

// The FP64 reference for one value head h of a one-sequence problem held in
// host arrays: a sub-problem Hk = Hv = 1 whose pointers start at the head.
struct HostBig {
    int64_t T;
    int32_t Hk, Hv, K, V;
    std::vector<uint16_t> q, k, v;  // bf16
    std::vector<float> g, beta, state;
};

void reference_head(const HostBig& b, int32_t h, std::vector<double>& out, std::vector<double>& state) {
    gdn::Shape s{};
    s.num_seqs = 1;
    s.num_tokens = b.T;
    s.max_seqlen = b.T;
    s.num_k_heads = 1;
    s.num_v_heads = 1;
    s.group = 1;
    s.head_dim_k = b.K;
    s.head_dim_v = b.V;
    s.head_mapping = GDN_HEADS_GROUPED;
    s.input_dtype = GDN_DTYPE_BF16;
    s.gate_dtype = GDN_DTYPE_F32;
    s.output_dtype = GDN_DTYPE_F32;
    s.state_layout = GDN_STATE_KV;
    s.num_state_slots = 1;
    s.algorithm = GDN_ALGO_SEQUENTIAL;
    s.precision = GDN_PRECISION_FP32;
    s.flags = 0;
    s.scale = 1.0f / std::sqrt(float(b.K));
    s.l2norm_eps = 1e-6f;
    s.norm_eps = 1e-6f;
    const int32_t kh = h / (b.Hv / b.Hk);
    gdn::Tensors x{};
    x.q = b.q.data() + int64_t(kh) * b.K, x.q_stride = {int64_t(b.Hk) * b.K, b.K};
    x.k = b.k.data() + int64_t(kh) * b.K, x.k_stride = {int64_t(b.Hk) * b.K, b.K};
    x.v = b.v.data() + int64_t(h) * b.V, x.v_stride = {int64_t(b.Hv) * b.V, b.V};
    x.g = b.g.data() + h, x.g_stride = {b.Hv, 1};
    x.beta = b.beta.data() + h, x.beta_stride = {b.Hv, 1};
    x.state_slot_stride = int64_t(b.K) * b.V;
    out.assign(size_t(b.T) * size_t(b.V), 0.0);
    state.assign(b.state.begin() + ptrdiff_t(int64_t(h) * b.K * b.V), b.state.begin() + ptrdiff_t(int64_t(h + 1) * b.K * b.V));
    gdn::ref::run(s, x, out.data(), state.data());
}

void offsets_past_2_31() {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    CUDA_OK(cudaSetDevice(g_device));
    const gdn_caps_t caps = cuda_caps();
    HostBig b;
    b.T = 360000, b.Hk = 16, b.Hv = 48, b.K = 128, b.V = 128;
    const int64_t out_elems = b.T * b.Hv * b.V;
    std::printf("  T %lld, Hv %d, V %d: out and v have %lld elements (2^31 = %lld)\n", (long long)b.T, b.Hv, b.V,
                (long long)out_elems, (long long)(int64_t(1) << 31));
    expect(out_elems > (int64_t(1) << 31), "the shape does not pass 2^31 elements");
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_OK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t need = size_t(out_elems) * 2 * 2 + size_t(b.T) * b.Hk * b.K * 2 * 2 + size_t(b.T) * b.Hv * 8;
    if (free_bytes < need + (size_t(1) << 30))
        throw CheckFailed("the device has " + std::to_string(free_bytes >> 20) + " MiB free, the shape needs " +
                          std::to_string(need >> 20) + " MiB");

    // Inputs, filled in parallel: small q/k (a stable recurrence), mild decay
    // (a long memory), a non-zero starting state.
    const unsigned workers = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    auto parallel_fill = [&](size_t n, const std::function<void(size_t, size_t)>& body) {
        std::vector<std::thread> th;
        for (unsigned w = 0; w < workers; ++w)
            th.emplace_back([&, w] { body(n * w / workers, n * (w + 1) / workers); });
        for (std::thread& x : th) x.join();
    };
    b.q.resize(size_t(b.T) * b.Hk * b.K);
    b.k.resize(b.q.size());
    b.v.resize(size_t(out_elems));
    b.g.resize(size_t(b.T) * b.Hv);
    b.beta.resize(b.g.size());
    b.state.resize(size_t(b.Hv) * b.K * b.V);
    parallel_fill(b.q.size(), [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) {
            b.q[i] = gdn::float_to_bf16(rel::value_at(1, i, -0.1f, 0.1f));
            b.k[i] = gdn::float_to_bf16(rel::value_at(2, i, -0.1f, 0.1f));
        }
    });
    parallel_fill(b.v.size(), [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) b.v[i] = gdn::float_to_bf16(rel::value_at(3, i, -1.0f, 1.0f));
    });
    for (size_t i = 0; i < b.g.size(); ++i) {
        b.g[i] = rel::value_at(4, i, -0.1f, 0.0f);
        b.beta[i] = rel::value_at(5, i, 0.0f, 1.0f);
    }
    for (size_t i = 0; i < b.state.size(); ++i) b.state[i] = rel::value_at(6, i, -0.5f, 0.5f);

    DeviceBuffer dq(b.q.size() * 2), dk(b.k.size() * 2), dv(b.v.size() * 2), dg(b.g.size() * 4),
        dbeta(b.beta.size() * 4), dout(size_t(out_elems) * 2), dstate(b.state.size() * 4);
    dq.upload(b.q), dk.upload(b.k), dv.upload(b.v), dg.upload(b.g), dbeta.upload(b.beta);

    gdn_problem_t p;
    gdn_problem_init(&p);
    p.num_tokens = b.T;
    p.num_k_heads = b.Hk, p.num_v_heads = b.Hv, p.head_dim_k = b.K, p.head_dim_v = b.V;
    p.input_dtype = GDN_DTYPE_BF16, p.gate_dtype = GDN_DTYPE_F32, p.output_dtype = GDN_DTYPE_BF16;
    gdn_tensors_t x;
    gdn_tensors_init(&x);
    x.q = dq.data(), x.k = dk.data(), x.v = dv.data(), x.g = dg.data(), x.beta = dbeta.data();
    x.out = dout.data(), x.state = static_cast<float*>(dstate.data());
    std::printf("  inputs ready in %.1f s\n", std::chrono::duration<double>(clock::now() - t0).count());

    // The reference for sampled heads (first, middle, last), on host threads
    // while the GPU runs.
    const int32_t heads[] = {0, 23, 47};
    std::vector<std::vector<double>> ref_out(3), ref_state(3);
    std::vector<std::thread> ref_threads;
    for (int i = 0; i < 3; ++i)
        ref_threads.emplace_back([&, i] { reference_head(b, heads[i], ref_out[size_t(i)], ref_state[size_t(i)]); });

    struct PathResult {
        const char* name;
        std::vector<std::vector<uint16_t>> out;  // per sampled head: [T][V] bf16
        std::vector<std::vector<float>> state;
        double ms;
    };
    std::vector<PathResult> results;
    for (gdn_algorithm_t algo : {GDN_ALGO_AUTO, GDN_ALGO_SEQUENTIAL}) {
        p.algorithm = algo;
        gdn_path_info_t info;
        gdn_path_info_init(&info);
        expect(gdn_select_path(&caps, &p, &x, &info) == GDN_SUCCESS, std::string("select_path: ") + gdn_last_error());
        size_t ws_bytes = 0;
        expect(gdn_workspace_size(&caps, &p, &ws_bytes) == GDN_SUCCESS, gdn_last_error());
        DeviceBuffer ws(std::max<size_t>(ws_bytes, 1));
        dstate.upload(b.state);
        CUDA_OK(cudaMemset(dout.data(), 0xFF, dout.bytes()));
        cudaEvent_t e0, e1;
        CUDA_OK(cudaEventCreate(&e0));
        CUDA_OK(cudaEventCreate(&e1));
        CUDA_OK(cudaEventRecord(e0, nullptr));
        const gdn_status_t st = gdn_chunked_recurrence(&caps, &p, &x, ws.data(), ws_bytes, nullptr);
        CUDA_OK(cudaEventRecord(e1, nullptr));
        expect(st == GDN_SUCCESS, std::string("run: ") + gdn_last_error());
        CUDA_OK(cudaDeviceSynchronize());
        float ms = 0;
        CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        expect(dout.guards_intact() && dstate.guards_intact(), "a guard band around out or state was written");
        PathResult r{info.path == GDN_PATH_SEQUENTIAL ? "sequential" : "chunked", {}, {}, ms};
        std::printf("  %s: %.1f ms on the device (%s)\n", r.name, ms, info.reason);
        for (int32_t h : heads) {
            std::vector<uint16_t> o(size_t(b.T) * b.V);
            CUDA_OK(cudaMemcpy2D(o.data(), size_t(b.V) * 2, static_cast<const char*>(dout.data()) + size_t(h) * b.V * 2,
                                 size_t(b.Hv) * b.V * 2, size_t(b.V) * 2, size_t(b.T), cudaMemcpyDeviceToHost));
            std::vector<float> sh(size_t(b.K) * b.V);
            CUDA_OK(cudaMemcpy(sh.data(), static_cast<const float*>(dstate.data()) + size_t(h) * b.K * b.V,
                               sh.size() * 4, cudaMemcpyDeviceToHost));
            r.out.push_back(std::move(o));
            r.state.push_back(std::move(sh));
        }
        results.push_back(std::move(r));
    }
    for (std::thread& t : ref_threads) t.join();
    std::printf("  reference for heads 0, 23, 47 done at %.1f s\n", std::chrono::duration<double>(clock::now() - t0).count());

    for (const PathResult& r : results) {
        for (int i = 0; i < 3; ++i) {
            double max_ref = 0, max_diff = 0, smax_ref = 0, smax_diff = 0;
            int64_t at = -1, past = 0;
            for (int64_t t = 0; t < b.T; ++t)
                for (int32_t j = 0; j < b.V; ++j) {
                    const double want = ref_out[size_t(i)][size_t(t * b.V + j)];
                    const double got = gdn::bf16_to_float(r.out[size_t(i)][size_t(t * b.V + j)]);
                    max_ref = std::max(max_ref, std::fabs(want));
                    if (!(std::fabs(got - want) <= max_diff)) max_diff = std::fabs(got - want), at = t;
                    if ((t * b.Hv + heads[i]) * int64_t(b.V) + j > (int64_t(1) << 31)) ++past;
                }
            for (size_t e = 0; e < r.state[size_t(i)].size(); ++e) {
                smax_ref = std::max(smax_ref, std::fabs(ref_state[size_t(i)][e]));
                smax_diff = std::max(smax_diff, std::fabs(double(r.state[size_t(i)][e]) - ref_state[size_t(i)][e]));
            }
            std::printf("  %s, head %d: out max|diff|/max|ref| %.3g (worst at token %lld; %lld of its elements "
                        "past 2^31), state %.3g\n",
                        r.name, heads[i], max_diff / max_ref, (long long)at, (long long)past, smax_diff / smax_ref);
            // bf16 out: the FP32 bound plus bf16's rounding (half an ulp: at
            // most 2^-8 of a value, so of max|ref|).
            expect(max_diff <= (1e-5 + 1.0 / 256) * max_ref,
                   std::string(r.name) + ", head " + std::to_string(heads[i]) + ": out differs from FP64");
            expect(smax_diff <= 1e-4 * smax_ref,
                   std::string(r.name) + ", head " + std::to_string(heads[i]) + ": state differs from FP64");
        }
    }
}

struct Check {
    const char* name;
    void (*run)();
};
const Check kChecks[] = {
    // The race first: with no argument it is then still the first gdn call.
    {"first-call-race", first_call_race},
    {"concurrent-streams", concurrent_streams},
    {"launch-failure", launch_failure},
    {"validate-mode", validate_mode},
    {"offsets-past-2-31", offsets_past_2_31},
};

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> wanted;
    if (const char* env = std::getenv("GDN_TEST_DEVICE")) g_device = std::atoi(env);
    for (int a = 1; a < argc; ++a) {
        const std::string arg = argv[a];
        if (arg == "--device" && a + 1 < argc) {
            g_device = std::atoi(argv[++a]);
        } else if (arg == "--list") {
            for (const Check& c : kChecks) std::printf("%s\n", c.name);
            return 0;
        } else {
            bool known = false;
            for (const Check& c : kChecks) known = known || arg == c.name;
            if (!known) {
                std::fprintf(stderr, "unknown check %s (--list)\n", arg.c_str());
                return 2;
            }
            wanted.push_back(arg);
        }
    }
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= g_device) {
        std::printf("skipped: no device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e)
                                                                 : ("device " + std::to_string(g_device) +
                                                                    " of " + std::to_string(count)).c_str());
        return 77;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, g_device) == cudaSuccess)
        std::printf("device %d: %s (sm_%d%d)\n", g_device, prop.name, prop.major, prop.minor);
    int failed = 0, ran = 0, skipped = 0;
    for (const Check& c : kChecks) {
        if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), c.name) == wanted.end()) continue;
        const auto t0 = std::chrono::steady_clock::now();
        std::printf("%s\n", c.name);
        std::fflush(stdout);
        std::string error;
        ++ran;
        try {
            c.run();
        } catch (const Skipped& ex) {
            std::printf("skipped: %s: %s\n", c.name, ex.what());
            ++skipped;
            continue;
        } catch (const std::exception& ex) {
            error = ex.what();
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (error.empty()) {
            std::printf("PASS %s (%.1f s)\n", c.name, s);
        } else {
            std::printf("FAIL %s (%.1f s): %s\n", c.name, s, error.c_str());
            ++failed;
        }
        std::fflush(stdout);
    }
    if (failed) return 1;
    return ran > 0 && skipped == ran ? 77 : 0;  // all skipped: not a pass
}
