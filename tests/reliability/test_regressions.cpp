// Regression tests for what the fuzz harness found in host-side validation
// (src/common/validate.cpp), each spelled out; the inputs themselves are also
// replayed from tests/reliability/regressions. Before the fixes: an
// out-of-bounds write (ASan), a write into an input, signed 64-bit overflows
// and enum loads of -1 (UBSan), and gdn_workspace_size looping for minutes.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gdn/gdn.h"
#include "rel_support.hpp"

namespace {

struct Small {
    rel::HostCase h;
    gdn_caps_t caps;
    Small() : h(config()) {
        gdn_caps_init(&caps);
        REQUIRE(gdn_probe(GDN_BACKEND_CPU, 0, &caps) == GDN_SUCCESS);
        REQUIRE(h.prepare(caps));
    }
    static rel::Config config() {
        rel::Config c;
        c.T = 40, c.seqs = 2, c.Hk = 1, c.Hv = 2, c.K = 16, c.V = 16;
        return c;
    }
    // Runs `t` and expects INVALID_ARGUMENT with `words`, nothing written.
    void expect_rejected(const gdn_tensors_t& t, const std::string& words) {
        const std::vector<unsigned char> out0 = h.out;
        const std::vector<float> state0 = h.state;
        const std::vector<int32_t> cu0 = h.cu_seqlens;
        const std::vector<unsigned char> z0 = h.z;
        const gdn_status_t st = gdn_chunked_recurrence(&caps, &h.problem, &t, h.workspace, h.workspace_bytes, nullptr);
        const std::string msg = gdn_last_error();
        INFO("status " << int(st) << ": " << msg);
        CHECK(st == GDN_ERROR_INVALID_ARGUMENT);
        CHECK(msg.find(words) != std::string::npos);
        CHECK(h.out == out0);
        CHECK(h.state == state0);
        CHECK(h.cu_seqlens == cu0);
        CHECK(h.z == z0);
    }
};

}  // namespace

TEST_CASE("regression: out over cu_seqlens is rejected (was an out-of-bounds write)", "[reliability][regression]") {
    Small s;
    // Enough room that a wrongly accepted call would not corrupt the heap here.
    std::vector<int32_t> room(s.h.out.size() / 4 + 16, 0);
    std::memcpy(room.data(), s.h.cu_seqlens.data(), s.h.cu_seqlens.size() * 4);
    gdn_tensors_t t = s.h.tensors;
    t.cu_seqlens = room.data();
    t.out = room.data();
    const std::vector<int32_t> before = room;
    s.expect_rejected(t, "tensors.out overlaps tensors.cu_seqlens");
    CHECK(room == before);
}

TEST_CASE("regression: out or state over the per-sequence and per-head arrays is rejected",
          "[reliability][regression]") {
    Small s;
    std::vector<float> room(s.h.out.size() / 4 + s.h.state.size() + 64, 0.0f);
    auto* bytes = reinterpret_cast<unsigned char*>(room.data());
    struct Case {
        const char* words;
        bool state;  // else out
        int array;   // 0 state_indices, 1 start_from_zero, 2 A_log, 3 dt_bias, 4 norm_weight
    };
    const Case cases[] = {
        {"tensors.out overlaps tensors.state_indices", false, 0},
        {"tensors.out overlaps tensors.start_from_zero", false, 1},
        {"tensors.state overlaps tensors.A_log", true, 2},
        {"tensors.state overlaps tensors.dt_bias", true, 3},
        {"tensors.out overlaps tensors.norm_weight", false, 4},
    };
    for (const Case& c : cases) {
        DYNAMIC_SECTION(c.words) {
            gdn_tensors_t t = s.h.tensors;
            s.h.problem.flags = GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_OUTPUT_NORM;
            const void* array = nullptr;
            switch (c.array) {
                case 0: std::memcpy(bytes, s.h.state_indices.data(), 8), t.state_indices = static_cast<const int32_t*>(array = room.data()); break;
                case 1: t.start_from_zero = static_cast<const uint8_t*>(array = room.data()); break;
                case 2: t.A_log = static_cast<const float*>(array = room.data()); break;
                case 3: t.dt_bias = static_cast<const float*>(array = room.data()); break;
                case 4: t.norm_weight = static_cast<const float*>(array = room.data()); break;
            }
            if (c.state) t.state = room.data();
            else t.out = room.data();
            const std::vector<float> before = room;
            s.expect_rejected(t, c.words);
            CHECK(room == before);
        }
    }
}

TEST_CASE("regression: state over z (output norm) is rejected (was a write into an input)",
          "[reliability][regression]") {
    Small s;
    s.h.problem.flags = GDN_FLAG_OUTPUT_NORM;
    // One buffer holding z and, from its start, the state pool (larger than
    // z: inside s.h.z it would reach whatever the heap put next to it).
    std::vector<float> room(s.h.z.size() / 4 + s.h.state.size(), 0.0f);
    std::memcpy(room.data(), s.h.z.data(), s.h.z.size());
    gdn_tensors_t t = s.h.tensors;
    t.z = room.data();
    t.state = room.data();
    const std::vector<float> before = room;
    s.expect_rejected(t, "tensors.state overlaps tensors.z");
    CHECK(room == before);
}

TEST_CASE("regression: a packed token stride that overflows 64 bits is rejected (was signed overflow)",
          "[reliability][regression]") {
    Small s;
    gdn_tensors_t t = s.h.tensors;
    t.out_token_stride = 0;
    t.out_head_stride = int64_t(1) << 62;  // 2 heads x 2^62 wraps int64
    s.expect_rejected(t, "out: the packed token stride (2 heads x head_stride 4611686018427387904) overflows 64 bits");
    size_t bytes = 0;
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    CHECK(gdn_select_path(&s.caps, &s.h.problem, &t, &info) == GDN_ERROR_INVALID_ARGUMENT);
    CHECK(gdn_workspace_size(&s.caps, &s.h.problem, &bytes) == GDN_SUCCESS);  // shapes only: fine
}

TEST_CASE("regression: a state pool spanning more than 2^63 elements is rejected (was signed overflow)",
          "[reliability][regression]") {
    Small s;
    gdn_tensors_t t = s.h.tensors;
    t.state_slot_stride = int64_t(1) << 62;  // 3 slots: 2 x 2^62 wraps int64
    s.expect_rejected(t, "state_slot_stride (4611686018427387904) span more than 2^63 elements");
}

TEST_CASE("regression: an absurd caps->multiprocessor_count is rejected at once (was minutes of looping)",
          "[reliability][regression]") {
    Small s;
    gdn_caps_t caps = s.caps;
    caps.multiprocessor_count = 0x7FFFFFFF;
    size_t bytes = 7;
    CHECK(gdn_workspace_size(&caps, &s.h.problem, &bytes) == GDN_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(gdn_last_error()).find("caps->multiprocessor_count (2147483647)") != std::string::npos);
    CHECK(bytes == 7);
    // The largest count accepted still sizes quickly.
    caps.multiprocessor_count = 1 << 16;
    CHECK(gdn_workspace_size(&caps, &s.h.problem, &bytes) == GDN_SUCCESS);
    CHECK(bytes > 0);
}

TEST_CASE("regression: enum fields and arguments holding -1 are rejected by name (was undefined behaviour)",
          "[reliability][regression]") {
    Small s;
    const int32_t minus_one = -1;
    gdn_problem_t p = s.h.problem;
    std::memcpy(&p.input_dtype, &minus_one, 4);  // as a C caller can store it
    size_t bytes = 0;
    CHECK(gdn_workspace_size(&s.caps, &p, &bytes) == GDN_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(gdn_last_error()).find("problem.input_dtype (-1)") != std::string::npos);
    p = s.h.problem;
    std::memcpy(&p.precision, &minus_one, 4);
    CHECK(gdn_workspace_size(&s.caps, &p, &bytes) == GDN_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(gdn_last_error()).find("problem.precision (-1)") != std::string::npos);
    gdn_caps_t caps = s.caps;
    std::memcpy(&caps.backend, &minus_one, 4);
    CHECK(gdn_workspace_size(&caps, &s.h.problem, &bytes) == GDN_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(gdn_last_error()).find("caps->backend (-1)") != std::string::npos);
}

TEST_CASE("regression: out strides spanning past 2^63 are rejected before the overlap test (was signed overflow)",
          "[reliability][regression]") {
    Small s;
    gdn_tensors_t t = s.h.tensors;
    t.out_token_stride = int64_t(1) << 62;  // the overlap test multiplied 2^62 x 2 heads
    t.out_head_stride = int64_t(1) << 62;
    s.expect_rejected(t, "out: strides (4611686018427387904, 4611686018427387904) span more than 2^63 elements");
}

TEST_CASE("regression: a tensors.struct_size that cuts a pointer in two reads whole fields only (was a wild read)",
          "[reliability][regression]") {
    Small s;
    // 202 bytes end 2 bytes into state_indices: the library must not use
    // those 2 bytes as a pointer. Read in whole 8-byte units, the struct ends
    // before state_indices, which then defaults to NULL (sequence i, slot i),
    // as do the fields after it.
    std::vector<int32_t> slots = {1, 0};
    gdn_tensors_t t = s.h.tensors;
    t.state_indices = slots.data();
    t.struct_size = offsetof(gdn_tensors_t, state_indices) + 2;
    REQUIRE(t.struct_size == 202);
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    CHECK(gdn_select_path(&s.caps, &s.h.problem, &t, &info) == GDN_SUCCESS);
    CHECK(gdn_chunked_recurrence(&s.caps, &s.h.problem, &t, s.h.workspace, s.h.workspace_bytes, nullptr) ==
          GDN_SUCCESS);
    // Same bits as the same call with the fields from state_indices on left
    // out (start_from_zero included).
    const std::vector<unsigned char> torn = s.h.out;
    const std::vector<float> torn_state = s.h.state;
    gdn_tensors_t u = s.h.tensors;
    u.state_indices = nullptr;
    u.start_from_zero = nullptr;
    s.h.state = s.h.state_init;
    u.state = s.h.state.data();
    REQUIRE(gdn_chunked_recurrence(&s.caps, &s.h.problem, &u, s.h.workspace, s.h.workspace_bytes, nullptr) ==
            GDN_SUCCESS);
    CHECK(torn == s.h.out);
    CHECK(torn_state == s.h.state);
}
