// Bad input on the CUDA backend: the exact status, a message naming what is
// wrong, and nothing written (out, state and workspace keep their bytes).
// GDN_FLAG_VALIDATE catches bad device-side arrays.
#include <catch2/catch.hpp>

#include <functional>

#include "cuda_support.hpp"

using namespace gdn_cuda_test;

namespace {

struct Fixture {
    gdn_caps_t caps = cuda_caps();
    Spec spec;
    std::unique_ptr<Problem> p;
    std::unique_ptr<DeviceProblem> d;
    DeviceWorkspace ws;

    explicit Fixture(Spec s) : spec(std::move(s)) {
        p = std::make_unique<Problem>(spec);
        d = std::make_unique<DeviceProblem>(*p);
        gdn_problem_t chunked = with_algorithm(p->problem, GDN_ALGO_CHUNKED);
        size_t need = 0;
        if (gdn_workspace_size(&caps, &chunked, &need) != GDN_SUCCESS) need = 0;
        ws.buf.resize(std::max<size_t>(need, 4096));
        ws.buf.fill(0x5A);
        GDN_CUDA_CHECK(cudaDeviceSynchronize());
    }

    // Calls `call`, expects `want` and a message containing `words`, and
    // that nothing on the device changed.
    void expect(gdn_status_t want, const std::string& words,
                const std::function<gdn_status_t()>& call) {
        const auto out0 = d->out.bytes(), state0 = d->state.bytes(), ws0 = ws.buf.bytes();
        const gdn_status_t st = call();
        GDN_CUDA_CHECK(cudaDeviceSynchronize());
        const std::string msg = gdn_last_error();
        INFO("status " << int(st) << ": " << msg);
        CHECK(st == want);
        CHECK(msg.find(words) != std::string::npos);
        CHECK(same_bits(d->out.bytes(), out0, "out") == "");
        CHECK(same_bits(d->state.bytes(), state0, "state") == "");
        CHECK(same_bits(ws.buf.bytes(), ws0, "workspace") == "");
    }
    gdn_status_t call(const gdn_problem_t& prob, gdn_tensors_t t, size_t ws_bytes) {
        return gdn_chunked_recurrence(&caps, &prob, &t, ws.data(), ws_bytes, nullptr);
    }
};

Spec small_spec() {
    Spec s;
    s.seq_lens = {200, 57, 0, 300};
    s.hk = 2, s.hv = 4, s.k = s.v = 64;
    s.state_indices = {0, 2, 1, 3};
    s.num_state_slots = 5;
    return s;
}

}  // namespace

TEST_CASE("CUDA bad input: exact status, a message, nothing written", "[cuda][errors]") {
    Fixture f(small_spec());
    const gdn_problem_t prob = f.p->problem;
    const gdn_tensors_t good = f.d->tensors();

    f.expect(GDN_ERROR_INVALID_ARGUMENT, "tensors.q", [&] {
        gdn_tensors_t t = good;
        t.q = nullptr;
        return f.call(prob, t, f.ws.size());
    });
    f.expect(GDN_ERROR_WORKSPACE_TOO_SMALL, "workspace_bytes", [&] {
        gdn_problem_t c = with_algorithm(prob, GDN_ALGO_CHUNKED);
        return f.call(c, good, 16);
    });
    f.expect(GDN_ERROR_INVALID_ARGUMENT, "v.head_stride", [&] {
        gdn_tensors_t t = good;
        t.v_head_stride = 10;
        return f.call(prob, t, f.ws.size());
    });
    f.expect(GDN_ERROR_NOT_SUPPORTED, "chunked", [&] {
        Spec s = small_spec();
        s.k = 96;
        Problem other(s);
        gdn_problem_t c = with_algorithm(other.problem, GDN_ALGO_CHUNKED);
        return f.call(c, good, f.ws.size());
    });
    f.expect(GDN_ERROR_NOT_SUPPORTED, "wave", [&] {
        gdn_caps_t small = f.caps;
        small.multiprocessor_count = 2;
        gdn_problem_t c = with_algorithm(prob, GDN_ALGO_CHUNKED);
        gdn_tensors_t t = good;
        return gdn_chunked_recurrence(&small, &c, &t, f.ws.data(), f.ws.size(), nullptr);
    });
    f.expect(GDN_ERROR_NOT_SUPPORTED, "head_dim_k", [&] {
        gdn_problem_t c = with_algorithm(prob, GDN_ALGO_SEQUENTIAL);
        c.head_dim_k = 256;  // the sequential kernel holds at most 128 rows
        return f.call(c, good, f.ws.size());
    });
    f.expect(GDN_ERROR_INVALID_ARGUMENT, "caps->device", [&] {
        gdn_caps_t other = f.caps;
        other.device = 7;  // not the current device
        gdn_tensors_t t = good;
        return gdn_chunked_recurrence(&other, &prob, &t, f.ws.data(), f.ws.size(), nullptr);
    });
}

TEST_CASE("GDN_FLAG_VALIDATE checks the device-side arrays before writing anything",
          "[cuda][errors][validate]") {
    Fixture f(small_spec());
    gdn_problem_t prob = f.p->problem;
    prob.flags |= GDN_FLAG_VALIDATE;
    const gdn_tensors_t good = f.d->tensors();
    DeviceBuffer bad_cu(5 * 4), bad_idx(4 * 4);
    const int32_t cu_decreasing[5] = {0, 200, 100, 257, 557};
    const int32_t idx_twice[4] = {0, 2, 2, 3};
    const int32_t idx_range[4] = {0, 2, 1, 5};
    for (gdn_algorithm_t algo : {GDN_ALGO_SEQUENTIAL, GDN_ALGO_CHUNKED}) {
        prob.algorithm = algo;
        bad_cu.upload(cu_decreasing, sizeof cu_decreasing);
        f.expect(GDN_ERROR_INVALID_ARGUMENT, "cu_seqlens[2]", [&] {
            gdn_tensors_t t = good;
            t.cu_seqlens = bad_cu.as<int32_t>();
            return f.call(prob, t, f.ws.size());
        });
        bad_idx.upload(idx_twice, sizeof idx_twice);
        f.expect(GDN_ERROR_INVALID_ARGUMENT, "slot 2 twice", [&] {
            gdn_tensors_t t = good;
            t.state_indices = bad_idx.as<int32_t>();
            return f.call(prob, t, f.ws.size());
        });
        bad_idx.upload(idx_range, sizeof idx_range);
        f.expect(GDN_ERROR_INVALID_ARGUMENT, "num_state_slots", [&] {
            gdn_tensors_t t = good;
            t.state_indices = bad_idx.as<int32_t>();
            return f.call(prob, t, f.ws.size());
        });
        // Good arrays: the same bits as without the flag.
        gdn_problem_t plain = prob;
        plain.flags &= ~GDN_FLAG_VALIDATE;
        f.d->reset_state();
        REQUIRE(f.call(plain, good, f.ws.size()) == GDN_SUCCESS);
        const auto out_plain = f.d->out.bytes(), state_plain = f.d->state.bytes();
        f.d->reset_state();
        f.d->fill_out_nan();
        REQUIRE(f.call(prob, good, f.ws.size()) == GDN_SUCCESS);
        CHECK(same_bits(f.d->out.bytes(), out_plain, "out") == "");
        CHECK(same_bits(f.d->state.bytes(), state_plain, "state") == "");
        f.d->reset_state();
        f.d->fill_out_nan();
        GDN_CUDA_CHECK(cudaDeviceSynchronize());
    }
}
