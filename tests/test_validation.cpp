// Bad input: every rejected argument gets its exact status, a message that
// names the argument, and nothing is written — out, state and workspace are
// byte-for-byte what they were (each filled with a pattern first).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "common/dispatch.hpp"
#include "common/validate.hpp"
#include "gdn/gdn.h"

namespace {

constexpr unsigned char kPattern = 0xA5;

// A small valid problem on the CPU backend, with every buffer owned here.
struct Fixture {
    int32_t T = 40, Hk = 2, Hv = 4, K = 16, V = 16, slots = 3;
    gdn_caps_t caps;
    gdn_problem_t problem;
    gdn_tensors_t tensors;
    std::vector<float> q, k, v, g, beta, z, norm_weight, A_log, dt_bias;
    std::vector<float> out, state;
    std::vector<int32_t> cu_seqlens, state_indices;
    std::vector<unsigned char> workspace_storage;
    unsigned char* workspace = nullptr;
    size_t workspace_bytes = 0;

    Fixture() {
        gdn_caps_init(&caps);
        REQUIRE(gdn_probe(GDN_BACKEND_CPU, 0, &caps) == GDN_SUCCESS);
        gdn_problem_init(&problem);
        problem.num_seqs = 2;
        problem.num_tokens = T;
        problem.num_k_heads = Hk;
        problem.num_v_heads = Hv;
        problem.head_dim_k = K;
        problem.head_dim_v = V;
        problem.num_state_slots = slots;
        auto fill = [](std::vector<float>& x, size_t n, float base) {
            x.resize(n);
            for (size_t i = 0; i < n; ++i) x[i] = base + 0.01f * float(i % 37);
        };
        fill(q, size_t(T) * Hk * K, -0.1f);
        fill(k, size_t(T) * Hk * K, -0.15f);
        fill(v, size_t(T) * Hv * V, -0.2f);
        fill(g, size_t(T) * Hv, -0.3f);
        fill(beta, size_t(T) * Hv, 0.2f);
        fill(z, size_t(T) * Hv * V, -0.1f);
        fill(norm_weight, size_t(V), 0.9f);
        fill(A_log, size_t(Hv), -1.0f);
        fill(dt_bias, size_t(Hv), 0.1f);
        out.assign(size_t(T) * Hv * V, 0.0f);
        state.assign(size_t(slots) * Hv * K * V, 0.0f);
        cu_seqlens = {0, 15, T};
        state_indices = {2, 0};
        gdn_tensors_init(&tensors);
        tensors.q = q.data();
        tensors.k = k.data();
        tensors.v = v.data();
        tensors.g = g.data();
        tensors.beta = beta.data();
        tensors.out = out.data();
        tensors.z = z.data();
        tensors.state = state.data();
        tensors.cu_seqlens = cu_seqlens.data();
        tensors.state_indices = state_indices.data();
        tensors.norm_weight = norm_weight.data();
        tensors.A_log = A_log.data();
        tensors.dt_bias = dt_bias.data();
        size_t need = 0;
        REQUIRE(gdn_workspace_size(&caps, &problem, &need) == GDN_SUCCESS);
        allocate_workspace(need);
    }

    void allocate_workspace(size_t bytes) {
        workspace_storage.assign(bytes + 2 * GDN_WORKSPACE_ALIGNMENT, kPattern);
        uintptr_t p = reinterpret_cast<uintptr_t>(workspace_storage.data());
        p = (p + GDN_WORKSPACE_ALIGNMENT - 1) / GDN_WORKSPACE_ALIGNMENT * GDN_WORKSPACE_ALIGNMENT;
        workspace = reinterpret_cast<unsigned char*>(p);
        workspace_bytes = bytes;
    }

    void poison() {
        std::memset(out.data(), kPattern, out.size() * sizeof(float));
        std::memset(state.data(), kPattern, state.size() * sizeof(float));
        std::memset(workspace_storage.data(), kPattern, workspace_storage.size());
    }

    // The index of the first byte that differs from the pattern, or -1.
    static long first_written(const void* p, size_t bytes) {
        const unsigned char* b = static_cast<const unsigned char*>(p);
        for (size_t i = 0; i < bytes; ++i)
            if (b[i] != kPattern) return long(i);
        return -1;
    }

    gdn_status_t run() {
        return gdn_chunked_recurrence(&caps, &problem, &tensors, workspace, workspace_bytes, nullptr);
    }
};

// Runs `call` on a poisoned fixture and checks status, message and that
// nothing was written.
void expect_rejected(Fixture& f, gdn_status_t want, const std::string& needle,
                     const std::function<gdn_status_t(Fixture&)>& call) {
    f.poison();
    const gdn_status_t got = call(f);
    const std::string msg = gdn_last_error();
    INFO("status " << gdn_status_string(got) << ", message: " << msg);
    CHECK(got == want);
    CHECK(msg.find(needle) != std::string::npos);
    CHECK(Fixture::first_written(f.out.data(), f.out.size() * sizeof(float)) == -1);
    CHECK(Fixture::first_written(f.state.data(), f.state.size() * sizeof(float)) == -1);
    CHECK(Fixture::first_written(f.workspace_storage.data(), f.workspace_storage.size()) == -1);
}

void expect_run_rejected(Fixture& f, gdn_status_t want, const std::string& needle) {
    expect_rejected(f, want, needle, [](Fixture& x) { return x.run(); });
}

}  // namespace

TEST_CASE("the fixture itself runs (so every rejection below is caused by its one change)",
          "[validation]") {
    Fixture f;
    f.poison();
    REQUIRE(f.run() == GDN_SUCCESS);
    CHECK(std::string(gdn_last_error()).empty());
    CHECK(Fixture::first_written(f.out.data(), f.out.size() * sizeof(float)) == 0);
}

// GDN_FLAG_PDL is a launch choice of the CUDA backend on sm_90: everywhere
// else it is accepted and changes nothing (the CPU here; on the GPU,
// tests/cuda/test_cuda_batch.cpp's "[pdl]" cases check the bits).
TEST_CASE("GDN_FLAG_PDL is accepted and changes no bit on the CPU", "[validation]") {
    Fixture f;
    f.poison();
    REQUIRE(f.run() == GDN_SUCCESS);
    const std::vector<float> out = f.out, state = f.state;
    f.poison();
    f.problem.flags |= GDN_FLAG_PDL;
    REQUIRE(f.run() == GDN_SUCCESS);
    CHECK(std::memcmp(f.out.data(), out.data(), out.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(f.state.data(), state.data(), state.size() * sizeof(float)) == 0);
}

TEST_CASE("every precision gdn.h names is accepted", "[validation]") {
    // FP16X3 (5) is the newest; the value after it is not a precision (the
    // table below).
    for (gdn_precision_t precision : {GDN_PRECISION_FP32, GDN_PRECISION_TF32X3, GDN_PRECISION_FP16,
                                      GDN_PRECISION_BF16, GDN_PRECISION_BF16X3, GDN_PRECISION_FP16X3}) {
        INFO("precision " << int(precision));
        Fixture f;
        f.problem.precision = precision;
        size_t need = 0;
        REQUIRE(gdn_workspace_size(&f.caps, &f.problem, &need) == GDN_SUCCESS);
        f.allocate_workspace(need);
        CHECK(f.run() == GDN_SUCCESS);
        CHECK(std::string(gdn_last_error()).empty());
    }
}

TEST_CASE("every precision gdn.h names has its name, and only those", "[validation]") {
    // The benchmarks' tables and the names they take (gdn-bench --precision).
    CHECK(std::string(gdn::precision_name(GDN_PRECISION_FP32)) == "fp32");
    CHECK(std::string(gdn::precision_name(GDN_PRECISION_TF32X3)) == "tf32x3");
    CHECK(std::string(gdn::precision_name(GDN_PRECISION_FP16)) == "fp16");
    CHECK(std::string(gdn::precision_name(GDN_PRECISION_BF16)) == "bf16");
    CHECK(std::string(gdn::precision_name(GDN_PRECISION_BF16X3)) == "bf16x3");
    CHECK(std::string(gdn::precision_name(GDN_PRECISION_FP16X3)) == "fp16x3");
    CHECK(std::string(gdn::precision_name(gdn_precision_t(6))) == "?");
    CHECK(std::string(gdn::precision_name(GDN_PRECISION_MAX_ENUM_)) == "?");
}

TEST_CASE("null structs are rejected by name", "[validation]") {
    Fixture f;
    expect_rejected(f, GDN_ERROR_INVALID_ARGUMENT, "caps", [](Fixture& x) {
        return gdn_chunked_recurrence(nullptr, &x.problem, &x.tensors, x.workspace, x.workspace_bytes, nullptr);
    });
    expect_rejected(f, GDN_ERROR_INVALID_ARGUMENT, "problem", [](Fixture& x) {
        return gdn_chunked_recurrence(&x.caps, nullptr, &x.tensors, x.workspace, x.workspace_bytes, nullptr);
    });
    expect_rejected(f, GDN_ERROR_INVALID_ARGUMENT, "tensors", [](Fixture& x) {
        return gdn_chunked_recurrence(&x.caps, &x.problem, nullptr, x.workspace, x.workspace_bytes, nullptr);
    });
}

TEST_CASE("bad problem sizes and enums name the field and value", "[validation]") {
    struct Case {
        const char* what;
        std::function<void(gdn_problem_t&)> apply;
        gdn_status_t want;
        const char* needle;
    };
    const Case cases[] = {
        {"num_seqs 0", [](gdn_problem_t& p) { p.num_seqs = 0; }, GDN_ERROR_INVALID_ARGUMENT, "problem.num_seqs (0)"},
        {"num_seqs -3", [](gdn_problem_t& p) { p.num_seqs = -3; }, GDN_ERROR_INVALID_ARGUMENT, "problem.num_seqs (-3)"},
        {"num_tokens 0", [](gdn_problem_t& p) { p.num_tokens = 0; }, GDN_ERROR_INVALID_ARGUMENT, "problem.num_tokens (0)"},
        {"num_tokens 2^31", [](gdn_problem_t& p) { p.num_tokens = int64_t(1) << 31; }, GDN_ERROR_INVALID_ARGUMENT, "problem.num_tokens (2147483648)"},
        {"max_seqlen > num_tokens", [](gdn_problem_t& p) { p.max_seqlen = 41; }, GDN_ERROR_INVALID_ARGUMENT, "problem.max_seqlen (41)"},
        {"max_seqlen < 0", [](gdn_problem_t& p) { p.max_seqlen = -1; }, GDN_ERROR_INVALID_ARGUMENT, "problem.max_seqlen (-1)"},
        {"num_k_heads 0", [](gdn_problem_t& p) { p.num_k_heads = 0; }, GDN_ERROR_INVALID_ARGUMENT, "problem.num_k_heads (0)"},
        {"num_v_heads 0", [](gdn_problem_t& p) { p.num_v_heads = 0; }, GDN_ERROR_INVALID_ARGUMENT, "problem.num_v_heads (0)"},
        {"Hv % Hk", [](gdn_problem_t& p) { p.num_v_heads = 3; }, GDN_ERROR_INVALID_ARGUMENT, "problem.num_v_heads (3) is not a multiple of num_k_heads (2)"},
        {"head_dim_k 0", [](gdn_problem_t& p) { p.head_dim_k = 0; }, GDN_ERROR_INVALID_ARGUMENT, "problem.head_dim_k (0)"},
        {"head_dim_v huge", [](gdn_problem_t& p) { p.head_dim_v = 5000; }, GDN_ERROR_NOT_SUPPORTED, "problem.head_dim_v (5000)"},
        {"head_mapping", [](gdn_problem_t& p) { p.head_mapping = gdn_head_mapping_t(7); }, GDN_ERROR_INVALID_ARGUMENT, "problem.head_mapping (7)"},
        {"input_dtype", [](gdn_problem_t& p) { p.input_dtype = gdn_dtype_t(9); }, GDN_ERROR_INVALID_ARGUMENT, "problem.input_dtype (9)"},
        {"output_dtype", [](gdn_problem_t& p) { p.output_dtype = gdn_dtype_t(3); }, GDN_ERROR_INVALID_ARGUMENT, "problem.output_dtype (3)"},
        {"gate_dtype mismatch", [](gdn_problem_t& p) { p.input_dtype = GDN_DTYPE_BF16; p.gate_dtype = GDN_DTYPE_F16; }, GDN_ERROR_NOT_SUPPORTED, "problem.gate_dtype (f16)"},
        {"state_layout", [](gdn_problem_t& p) { p.state_layout = gdn_state_layout_t(5); }, GDN_ERROR_INVALID_ARGUMENT, "problem.state_layout (5)"},
        {"num_state_slots", [](gdn_problem_t& p) { p.num_state_slots = -1; }, GDN_ERROR_INVALID_ARGUMENT, "problem.num_state_slots (-1)"},
        {"algorithm", [](gdn_problem_t& p) { p.algorithm = gdn_algorithm_t(9); }, GDN_ERROR_INVALID_ARGUMENT, "problem.algorithm (9)"},
        {"precision", [](gdn_problem_t& p) { p.precision = gdn_precision_t(9); }, GDN_ERROR_INVALID_ARGUMENT, "problem.precision (9)"},
        {"precision after FP16X3", [](gdn_problem_t& p) { p.precision = gdn_precision_t(6); }, GDN_ERROR_INVALID_ARGUMENT, "problem.precision (6)"},
        {"flags", [](gdn_problem_t& p) { p.flags = 1u << 20; }, GDN_ERROR_INVALID_ARGUMENT, "problem.flags (0x100000)"},
        {"flags, the lowest unknown bit", [](gdn_problem_t& p) { p.flags = 1u << 8; }, GDN_ERROR_INVALID_ARGUMENT, "problem.flags (0x100) has unknown bits 0x100"},
        {"scale NaN", [](gdn_problem_t& p) { p.scale = std::numeric_limits<float>::quiet_NaN(); }, GDN_ERROR_INVALID_ARGUMENT, "problem.scale (nan)"},
        {"l2norm_eps < 0", [](gdn_problem_t& p) { p.l2norm_eps = -1.0f; }, GDN_ERROR_INVALID_ARGUMENT, "problem.l2norm_eps (-1)"},
        {"norm_eps inf", [](gdn_problem_t& p) { p.norm_eps = std::numeric_limits<float>::infinity(); }, GDN_ERROR_INVALID_ARGUMENT, "problem.norm_eps (inf)"},
        {"struct_size 0", [](gdn_problem_t& p) { p.struct_size = 0; }, GDN_ERROR_INVALID_ARGUMENT, "problem->struct_size (0)"},
        {"struct_size future", [](gdn_problem_t& p) { p.struct_size = sizeof(gdn_problem_t) + 8; }, GDN_ERROR_INVALID_ARGUMENT, "newer gdn.h"},
    };
    for (const Case& c : cases) {
        DYNAMIC_SECTION(c.what) {
            Fixture f;
            c.apply(f.problem);
            expect_run_rejected(f, c.want, c.needle);
            // The shape-only calls reject it too, and leave their out-parameters alone.
            size_t bytes = 12345;
            CHECK(gdn_workspace_size(&f.caps, &f.problem, &bytes) == c.want);
            CHECK(bytes == 12345);
            gdn_path_info_t info;
            gdn_path_info_init(&info);
            info.path = gdn_path_t(99);
            CHECK(gdn_select_path(&f.caps, &f.problem, nullptr, &info) == c.want);
            CHECK(int(info.path) == 99);
        }
    }
}

TEST_CASE("missing tensors are rejected by name", "[validation]") {
    struct Case {
        const char* what;
        std::function<void(Fixture&)> apply;
        const char* needle;
    };
    const Case cases[] = {
        {"q", [](Fixture& f) { f.tensors.q = nullptr; }, "tensors.q is NULL"},
        {"k", [](Fixture& f) { f.tensors.k = nullptr; }, "tensors.k is NULL"},
        {"v", [](Fixture& f) { f.tensors.v = nullptr; }, "tensors.v is NULL"},
        {"g", [](Fixture& f) { f.tensors.g = nullptr; }, "tensors.g is NULL"},
        {"beta", [](Fixture& f) { f.tensors.beta = nullptr; }, "tensors.beta is NULL"},
        {"out", [](Fixture& f) { f.tensors.out = nullptr; }, "tensors.out is NULL"},
        {"state", [](Fixture& f) { f.tensors.state = nullptr; }, "tensors.state is NULL"},
        {"z with output norm", [](Fixture& f) { f.problem.flags = GDN_FLAG_OUTPUT_NORM; f.tensors.z = nullptr; }, "tensors.z is NULL"},
        {"norm_weight with output norm", [](Fixture& f) { f.problem.flags = GDN_FLAG_OUTPUT_NORM; f.tensors.norm_weight = nullptr; }, "tensors.norm_weight is NULL"},
        {"A_log with raw gate", [](Fixture& f) { f.problem.flags = GDN_FLAG_GATE_FROM_RAW; f.tensors.A_log = nullptr; }, "tensors.A_log is NULL"},
        {"dt_bias with raw gate", [](Fixture& f) { f.problem.flags = GDN_FLAG_GATE_FROM_RAW; f.tensors.dt_bias = nullptr; }, "tensors.dt_bias is NULL"},
    };
    for (const Case& c : cases) {
        DYNAMIC_SECTION(c.what) {
            Fixture f;
            c.apply(f);
            expect_run_rejected(f, GDN_ERROR_INVALID_ARGUMENT, c.needle);
        }
    }
}

TEST_CASE("bad strides, alignment and overlaps are rejected by name", "[validation]") {
    struct Case {
        const char* what;
        std::function<void(Fixture&)> apply;
        const char* needle;
    };
    const Case cases[] = {
        {"v.head_stride < V", [](Fixture& f) { f.tensors.v_head_stride = 10; }, "v.head_stride (10) < its row (16 elements)"},
        {"q.token_stride < K", [](Fixture& f) { f.tensors.q_token_stride = 8; f.tensors.q_head_stride = 16; }, "q.token_stride (8)"},
        {"k.token_stride < 0", [](Fixture& f) { f.tensors.k_token_stride = -32; }, "k.token_stride (-32) < 0"},
        {"g.head_stride < 0", [](Fixture& f) { f.tensors.g_head_stride = -1; }, "g.head_stride (-1) < 0"},
        {"out rows overlap", [](Fixture& f) { f.tensors.out_token_stride = 16; f.tensors.out_head_stride = 16; }, "out: token_stride (16) and head_stride (16) make rows overlap"},
        {"f16 q misaligned", [](Fixture& f) {
             f.problem.input_dtype = GDN_DTYPE_F16;
             f.problem.gate_dtype = GDN_DTYPE_F32;
             f.tensors.q = reinterpret_cast<const char*>(f.q.data()) + 1;
         }, "tensors.q"},
        {"state misaligned", [](Fixture& f) { f.tensors.state = reinterpret_cast<float*>(reinterpret_cast<char*>(f.state.data()) + 2); }, "tensors.state"},
        {"state slot stride", [](Fixture& f) { f.tensors.state_slot_stride = 100; }, "tensors.state_slot_stride (100) < one slot"},
        {"state slot stride < 0", [](Fixture& f) { f.tensors.state_slot_stride = -1; }, "tensors.state_slot_stride (-1)"},
        {"out overlaps v", [](Fixture& f) { f.tensors.out = f.v.data() + 8; }, "tensors.out overlaps tensors.v"},
        {"state overlaps k", [](Fixture& f) { f.tensors.k = f.state.data(); }, "tensors.state overlaps tensors.k"},
        {"cu_seqlens NULL, uneven", [](Fixture& f) { f.tensors.cu_seqlens = nullptr; f.problem.num_seqs = 3; f.tensors.state_indices = nullptr; }, "num_tokens (40) is not a multiple of num_seqs (3)"},
        {"too few slots without indices", [](Fixture& f) { f.tensors.state_indices = nullptr; f.problem.num_state_slots = 1; }, "problem.num_state_slots (1) < num_seqs (2)"},
    };
    for (const Case& c : cases) {
        DYNAMIC_SECTION(c.what) {
            Fixture f;
            c.apply(f);
            expect_run_rejected(f, GDN_ERROR_INVALID_ARGUMENT, c.needle);
        }
    }
}

TEST_CASE("bad per-sequence arrays are caught before anything is written (CPU)", "[validation]") {
    struct Case {
        const char* what;
        std::function<void(Fixture&)> apply;
        const char* needle;
    };
    const Case cases[] = {
        {"cu_seqlens[0] != 0", [](Fixture& f) { f.cu_seqlens = {1, 15, 40}; }, "cu_seqlens[0] (1) != 0"},
        {"decreasing", [](Fixture& f) { f.cu_seqlens = {0, 30, 20}; }, "cu_seqlens[2] (20) < cu_seqlens[1] (30)"},
        {"wrong end", [](Fixture& f) { f.cu_seqlens = {0, 15, 39}; }, "cu_seqlens[2] (39) != num_tokens (40)"},
        {"longer than max_seqlen", [](Fixture& f) { f.problem.max_seqlen = 20; }, "sequence 1 has 25 tokens > problem.max_seqlen (20)"},
        {"slot out of range", [](Fixture& f) { f.state_indices = {3, 0}; }, "state_indices[0] (3) >= num_state_slots (3)"},
        {"slot named twice", [](Fixture& f) { f.state_indices = {1, 1}; }, "state_indices name slot 1 twice"},
    };
    for (const Case& c : cases) {
        DYNAMIC_SECTION(c.what) {
            Fixture f;
            c.apply(f);
            f.tensors.cu_seqlens = f.cu_seqlens.data();
            f.tensors.state_indices = f.state_indices.data();
            expect_run_rejected(f, GDN_ERROR_INVALID_ARGUMENT, c.needle);
        }
    }
}

TEST_CASE("the workspace: one byte too small, NULL, misaligned", "[validation][workspace]") {
    Fixture f;
    for (gdn_algorithm_t algo : {GDN_ALGO_SEQUENTIAL, GDN_ALGO_CHUNKED, GDN_ALGO_AUTO}) {
        f.problem.algorithm = algo;
        size_t need = 0;
        REQUIRE(gdn_workspace_size(&f.caps, &f.problem, &need) == GDN_SUCCESS);
        f.allocate_workspace(need);
        if (need > 0) {
            f.workspace_bytes = need - 1;
            expect_run_rejected(f, GDN_ERROR_WORKSPACE_TOO_SMALL, "workspace_bytes");
            f.workspace_bytes = need;
            unsigned char* aligned = f.workspace;
            f.workspace = nullptr;
            expect_run_rejected(f, GDN_ERROR_INVALID_ARGUMENT, "workspace is NULL");
            f.workspace = aligned + 16;
            f.workspace_bytes = need;
            expect_run_rejected(f, GDN_ERROR_INVALID_ARGUMENT, "not aligned to 256 bytes");
            f.workspace = aligned;
        }
        f.poison();
        CHECK(f.run() == GDN_SUCCESS);
    }
}

TEST_CASE("a struct_size from an older header is accepted and the rest defaulted", "[validation][abi]") {
    // Reference run with full-size structs at their defaults.
    Fixture full;
    full.poison();
    std::fill(full.state.begin(), full.state.end(), 0.25f);
    REQUIRE(full.run() == GDN_SUCCESS);

    // The same problem through structs that end before the optional fields;
    // the bytes after struct_size hold garbage the library must not read.
    Fixture old;
    old.poison();
    std::fill(old.state.begin(), old.state.end(), 0.25f);
    gdn_problem_t p = old.problem;
    p.struct_size = offsetof(gdn_problem_t, head_mapping);
    std::memset(reinterpret_cast<char*>(&p) + p.struct_size, 0x7F, sizeof p - p.struct_size);
    // Old tensors: no slot stride, no cu_seqlens, no indices — so this run
    // is one of equal lengths; make the full run the same.
    gdn_tensors_t t = old.tensors;
    t.struct_size = offsetof(gdn_tensors_t, state_slot_stride);
    std::memset(reinterpret_cast<char*>(&t) + t.struct_size, 0x7F, sizeof t - t.struct_size);
    full.tensors.cu_seqlens = nullptr;
    full.tensors.state_indices = nullptr;
    full.poison();
    std::fill(full.state.begin(), full.state.end(), 0.25f);
    REQUIRE(full.run() == GDN_SUCCESS);
    p.num_state_slots = 0x7F7F7F7F;  // beyond struct_size: must be ignored
    REQUIRE(gdn_chunked_recurrence(&old.caps, &p, &t, old.workspace, old.workspace_bytes, nullptr) ==
            GDN_SUCCESS);
    CHECK(std::memcmp(full.out.data(), old.out.data(), full.out.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(full.state.data(), old.state.data(), full.state.size() * sizeof(float)) == 0);
}

TEST_CASE("a struct_size from a newer header is rejected", "[validation][abi]") {
    Fixture f;
    expect_rejected(f, GDN_ERROR_INVALID_ARGUMENT, "tensors->struct_size", [](Fixture& x) {
        gdn_tensors_t t = x.tensors;
        t.struct_size = sizeof t + 16;
        return gdn_chunked_recurrence(&x.caps, &x.problem, &t, x.workspace, x.workspace_bytes, nullptr);
    });
    expect_rejected(f, GDN_ERROR_INVALID_ARGUMENT, "caps->struct_size", [](Fixture& x) {
        gdn_caps_t c = x.caps;
        c.struct_size = sizeof c + 4;
        return gdn_chunked_recurrence(&c, &x.problem, &x.tensors, x.workspace, x.workspace_bytes, nullptr);
    });
    gdn_caps_t c;
    gdn_caps_init(&c);
    c.struct_size = sizeof c + 8;
    CHECK(gdn_probe(GDN_BACKEND_CPU, 0, &c) == GDN_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(gdn_last_error()).find("caps->struct_size") != std::string::npos);
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    info.struct_size = 4;
    CHECK(gdn_select_path(&f.caps, &f.problem, nullptr, &info) == GDN_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(gdn_last_error()).find("info->struct_size (4)") != std::string::npos);
}

TEST_CASE("bad caps and unavailable backends", "[validation][backend]") {
    Fixture f;
    expect_rejected(f, GDN_ERROR_INVALID_ARGUMENT, "caps->backend (7)", [](Fixture& x) {
        gdn_caps_t c = x.caps;
        c.backend = gdn_backend_t(7);
        return gdn_chunked_recurrence(&c, &x.problem, &x.tensors, x.workspace, x.workspace_bytes, nullptr);
    });
    expect_rejected(f, GDN_ERROR_INVALID_ARGUMENT, "caps->multiprocessor_count (0)", [](Fixture& x) {
        gdn_caps_t c = x.caps;
        c.multiprocessor_count = 0;
        return gdn_chunked_recurrence(&c, &x.problem, &x.tensors, x.workspace, x.workspace_bytes, nullptr);
    });
    gdn_caps_t c;
    gdn_caps_init(&c);
    c.arch[0] = 'x';
    // No machine has a GPU with ordinal 1000, compiled in or not.
    CHECK(gdn_probe(GDN_BACKEND_CUDA, 1000, &c) == GDN_ERROR_BACKEND_UNAVAILABLE);
    CHECK(std::string(gdn_last_error()).find("CUDA") != std::string::npos);
    CHECK(gdn_probe(GDN_BACKEND_HIP, 1000, &c) == GDN_ERROR_BACKEND_UNAVAILABLE);
    CHECK(std::string(gdn_last_error()).find("HIP") != std::string::npos);
    CHECK(c.arch[0] == 'x');  // untouched
    CHECK(gdn_probe(gdn_backend_t(5), 0, &c) == GDN_ERROR_INVALID_ARGUMENT);
    CHECK(gdn_probe(GDN_BACKEND_CPU, -1, &c) == GDN_ERROR_INVALID_ARGUMENT);
    CHECK(gdn_probe(GDN_BACKEND_CPU, 0, nullptr) == GDN_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("forced chunked where no chunked path runs is an error that says why", "[validation][dispatch]") {
    Fixture f;
    // Caps of a pre-Ampere CUDA card (made by hand: the policy is pure).
    gdn_caps_t c = f.caps;
    c.backend = GDN_BACKEND_CUDA;
    std::snprintf(c.arch, sizeof c.arch, "sm_75");
    c.compute_major = 7;
    c.compute_minor = 5;
    f.problem.algorithm = GDN_ALGO_CHUNKED;
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    CHECK(gdn_select_path(&c, &f.problem, nullptr, &info) == GDN_ERROR_NOT_SUPPORTED);
    CHECK(std::string(gdn_last_error()).find("sm_80") != std::string::npos);
    // auto on the same caps falls back and says so.
    f.problem.algorithm = GDN_ALGO_AUTO;
    REQUIRE(gdn_select_path(&c, &f.problem, nullptr, &info) == GDN_SUCCESS);
    CHECK(info.path == GDN_PATH_SEQUENTIAL);
    CHECK(std::string(info.reason).find("sm_80") != std::string::npos);
    // HIP without gfx11 WMMA.
    c.backend = GDN_BACKEND_HIP;
    std::snprintf(c.arch, sizeof c.arch, "gfx1030");
    c.features = 0;
    f.problem.algorithm = GDN_ALGO_CHUNKED;
    f.problem.precision = GDN_PRECISION_FP16;
    CHECK(gdn_select_path(&c, &f.problem, nullptr, &info) == GDN_ERROR_NOT_SUPPORTED);
    CHECK(std::string(gdn_last_error()).find("gfx1030") != std::string::npos);
}

// CUDA caps made by hand (the dispatch policy is pure: no device needed).
static gdn_caps_t cuda_card(const gdn_caps_t& base, const char* arch, int major, int minor, int32_t sms,
                            size_t optin, size_t per_sm) {
    gdn_caps_t c = base;
    c.backend = GDN_BACKEND_CUDA;
    std::snprintf(c.arch, sizeof c.arch, "%s", arch);
    c.compute_major = major;
    c.compute_minor = minor;
    c.multiprocessor_count = sms;
    c.shared_mem_per_block_optin = optin;
    c.shared_mem_per_multiprocessor = per_sm;
    return c;
}

// One 4096-token prompt of the engine shape (Hk 16, Hv 48, K = V = 128).
static gdn_problem_t engine_prompt(const gdn_problem_t& base) {
    gdn_problem_t p = base;
    p.num_seqs = 1;
    p.num_tokens = 4096;
    p.num_k_heads = 16;
    p.num_v_heads = 48;
    p.head_dim_k = p.head_dim_v = 128;
    p.num_state_slots = 1;
    return p;
}

TEST_CASE("CUDA: the tensor-core path runs only when the caller allows its precision",
          "[validation][dispatch]") {
    Fixture f;
    const gdn_caps_t c = cuda_card(f.caps, "sm_90", 9, 0, 132, 232448, 233472);  // an H200
    gdn_problem_t p = engine_prompt(f.problem);
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    // The default precision (FP32) never takes it.
    REQUIRE(gdn_select_path(&c, &p, nullptr, &info) == GDN_SUCCESS);
    CHECK(info.path == GDN_PATH_CHUNKED_FP32);
    CHECK(info.precision == GDN_PRECISION_FP32);
    const gdn_precision_t allowed[] = {GDN_PRECISION_TF32X3, GDN_PRECISION_BF16, GDN_PRECISION_FP16,
                                       GDN_PRECISION_BF16X3, GDN_PRECISION_FP16X3};
    for (gdn_precision_t precision : allowed) {
        p.precision = precision;
        p.algorithm = GDN_ALGO_AUTO;
        REQUIRE(gdn_select_path(&c, &p, nullptr, &info) == GDN_SUCCESS);
        INFO(info.reason);
        CHECK(info.path == GDN_PATH_CHUNKED_TC);
        CHECK(info.precision == precision);
        CHECK(info.chunk_size == 32);
        size_t tc_bytes = 0, fp32_bytes = 0;
        const gdn_status_t ws = gdn_workspace_size(&c, &p, &tc_bytes);
        if (ws != GDN_ERROR_BACKEND_UNAVAILABLE) {  // a build without the CUDA backend
            REQUIRE(ws == GDN_SUCCESS);
            gdn_problem_t fp32 = p;
            fp32.precision = GDN_PRECISION_FP32;
            REQUIRE(gdn_workspace_size(&c, &fp32, &fp32_bytes) == GDN_SUCCESS);
            // TF32X3: the FP32 path's prep scratch. BF16/FP16: their own, the
            // operands of the register-state scan per (2048 + 32)-row window:
            // the k and q rows (Hk x 2K halves a row), −W (Hv x K halves),
            // Tβ and P with remainders (Hv x 128 halves), four factors (Hv x
            // 4 floats); twice: 4096 tokens on sm_90 keep two windows' prep
            // output. Each piece is a multiple of the alignment. BF16X3 and
            // FP16X3: the same, the remainders of −W (Hv x K halves) and, for
            // inputs other than their own 16-bit type (these are f32), the k
            // and q rows' (Hk x 2K); BF16X3 also the second remainders of Tβ
            // and P (Hv x 64 halves; FP16X3 has none since 0.6.3).
            const size_t rows = 2048 + 32;
            const size_t mma = 2 * rows * (size_t(16) * 2 * 128 * 2 + size_t(48) * (128 * 2 + 128 * 2 + 4 * 4));
            const size_t split = 2 * rows * (size_t(48) * 128 * 2 + size_t(16) * 2 * 128 * 2);
            const size_t second = 2 * rows * size_t(48) * 64 * 2;
            const size_t expected = precision == GDN_PRECISION_TF32X3   ? fp32_bytes
                                    : precision == GDN_PRECISION_BF16X3 ? mma + split + second
                                    : precision == GDN_PRECISION_FP16X3 ? mma + split
                                                                        : mma;
            CHECK(tc_bytes == expected);
            CHECK(fp32_bytes > 0);
        }
        // Short prompts keep the sequential kernel (FP32: more accurate is allowed).
        gdn_problem_t short_p = p;
        short_p.num_tokens = 64;
        REQUIRE(gdn_select_path(&c, &short_p, nullptr, &info) == GDN_SUCCESS);
        CHECK(info.path == GDN_PATH_SEQUENTIAL);
        CHECK(info.precision == GDN_PRECISION_FP32);
        // Forced sequential stays sequential whatever the precision.
        gdn_problem_t seq = p;
        seq.algorithm = GDN_ALGO_SEQUENTIAL;
        REQUIRE(gdn_select_path(&c, &seq, nullptr, &info) == GDN_SUCCESS);
        CHECK(info.path == GDN_PATH_SEQUENTIAL);
        // Pre-Ampere: forced chunked is an error that says why.
        gdn_caps_t turing = c;
        std::snprintf(turing.arch, sizeof turing.arch, "sm_75");
        turing.compute_major = 7;
        turing.compute_minor = 5;
        gdn_problem_t forced = p;
        forced.algorithm = GDN_ALGO_CHUNKED;
        CHECK(gdn_select_path(&turing, &forced, nullptr, &info) == GDN_ERROR_NOT_SUPPORTED);
        CHECK(std::string(gdn_last_error()).find("sm_80") != std::string::npos);
    }
    // The CPU backend serves TF32X3, BF16X3 and FP16X3 with its FP32 path
    // (more accurate).
    for (gdn_precision_t precision : {GDN_PRECISION_TF32X3, GDN_PRECISION_BF16X3, GDN_PRECISION_FP16X3}) {
        gdn_problem_t cpu_p = p;
        cpu_p.precision = precision;
        cpu_p.algorithm = GDN_ALGO_CHUNKED;
        REQUIRE(gdn_select_path(&f.caps, &cpu_p, nullptr, &info) == GDN_SUCCESS);
        CHECK(info.path == GDN_PATH_CHUNKED_FP32);
        CHECK(info.precision == GDN_PRECISION_FP32);
    }
}

TEST_CASE("CUDA: BF16 takes the fused C = 64 path on sm_90 where it fits, else C = 32, and says why",
          "[validation][dispatch]") {
    Fixture f;
    gdn_caps_t h200 = cuda_card(f.caps, "sm_90", 9, 0, 132, 232448, 233472);
    h200.features |= GDN_FEATURE_WGMMA;  // the library's sm_90a code
    // A small prompt of the engine's head dims: bf16 q/k/v, f32 g and beta.
    const int64_t T = 256;
    const int32_t Hk = 2, Hv = 4, D = 128;
    gdn_problem_t p = f.problem;
    p.num_seqs = 1;
    p.num_tokens = T;
    p.max_seqlen = T;
    p.num_k_heads = Hk, p.num_v_heads = Hv;
    p.head_dim_k = p.head_dim_v = D;
    p.num_state_slots = 1;
    p.input_dtype = GDN_DTYPE_BF16;
    p.gate_dtype = GDN_DTYPE_F32;
    p.output_dtype = GDN_DTYPE_BF16;
    p.precision = GDN_PRECISION_BF16;
    p.flags = 0;
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    auto chunk = [&](const gdn_caps_t& c, const gdn_problem_t& prob, const gdn_tensors_t* t) {
        REQUIRE(gdn_select_path(&c, &prob, t, &info) == GDN_SUCCESS);
        INFO(info.reason);
        CHECK(info.path == GDN_PATH_CHUNKED_TC);
        CHECK(info.precision == GDN_PRECISION_BF16);
        return info.chunk_size;
    };
    CHECK(chunk(h200, p, nullptr) == 64);
    CHECK(std::string(info.reason).find("C = 64") != std::string::npos);
    // What the fused kernel does not take goes to the C = 32 path.
    gdn_caps_t no_sm90a = h200;
    no_sm90a.features &= ~uint64_t(GDN_FEATURE_WGMMA);
    CHECK(chunk(no_sm90a, p, nullptr) == 32);
    gdn_caps_t small_smem = h200;
    small_smem.shared_mem_per_block_optin = gdn::policy::kCudaFusedSmemBytes - 1;
    CHECK(chunk(small_smem, p, nullptr) == 32);
    const std::pair<const char*, std::function<void(gdn_problem_t&)>> misfits[] = {
        {"f32 inputs", [](gdn_problem_t& x) { x.input_dtype = GDN_DTYPE_F32; }},
        {"f16 inputs", [](gdn_problem_t& x) { x.input_dtype = GDN_DTYPE_F16; }},
        {"K = 64", [](gdn_problem_t& x) { x.head_dim_k = 64; }},
        {"V = 64", [](gdn_problem_t& x) { x.head_dim_v = 64; }},
    };
    for (const auto& m : misfits) {
        gdn_problem_t x = p;
        m.second(x);
        INFO(m.first);
        CHECK(chunk(h200, x, nullptr) == 32);
        CHECK(std::string(info.reason).find("C = 32") != std::string::npos);
    }
    // The input transforms and 16-bit gates it takes (the load warps apply the gates', the
    // prep the q/k norm's), and the output norm (the chain's epilogue).
    const std::pair<const char*, std::function<void(gdn_problem_t&)>> fits[] = {
        {"bf16 gates", [](gdn_problem_t& x) { x.gate_dtype = GDN_DTYPE_BF16; }},
        {"q/k L2 norm", [](gdn_problem_t& x) { x.flags = GDN_FLAG_QK_L2NORM; }},
        {"raw gate", [](gdn_problem_t& x) { x.flags = GDN_FLAG_GATE_FROM_RAW; }},
        {"beta logits", [](gdn_problem_t& x) { x.flags = GDN_FLAG_BETA_FROM_LOGITS; }},
        {"output norm", [](gdn_problem_t& x) { x.flags = GDN_FLAG_OUTPUT_NORM; }},
        {"output norm and q/k L2 norm",
         [](gdn_problem_t& x) { x.flags = GDN_FLAG_OUTPUT_NORM | GDN_FLAG_QK_L2NORM; }},
        {"all three, bf16 gates",
         [](gdn_problem_t& x) {
             x.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS;
             x.gate_dtype = GDN_DTYPE_BF16;
         }},
    };
    for (const auto& m : fits) {
        gdn_problem_t x = p;
        m.second(x);
        INFO(m.first);
        CHECK(chunk(h200, x, nullptr) == 64);
    }
    // Other precisions never take it.
    for (gdn_precision_t other :
         {GDN_PRECISION_FP16, GDN_PRECISION_BF16X3, GDN_PRECISION_FP16X3, GDN_PRECISION_TF32X3}) {
        gdn_problem_t x = p;
        x.precision = other;
        REQUIRE(gdn_select_path(&h200, &x, nullptr, &info) == GDN_SUCCESS);
        INFO("precision " << int(other) << ": " << info.reason);
        CHECK(info.path == GDN_PATH_CHUNKED_TC);
        CHECK(info.precision == other);
        CHECK(info.chunk_size == 32);
    }
    // With tensors: q/k/v rows by TMA need 16-byte aligned pointers and strides.
    std::vector<uint16_t> qk(size_t(T) * Hk * D * 2 + 64), vb(size_t(T) * Hv * D + 64), ob(size_t(T) * Hv * D);
    std::vector<float> gb(size_t(T) * Hv), bb(size_t(T) * Hv), st(size_t(Hv) * D * D);
    auto aligned = [](uint16_t* x) {
        return reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(x) + 15) & ~uintptr_t(15));
    };
    gdn_tensors_t t;
    gdn_tensors_init(&t);
    t.q = aligned(qk.data());
    t.k = aligned(qk.data()) + size_t(T) * Hk * D;
    t.v = aligned(vb.data());
    t.g = gb.data(), t.beta = bb.data(), t.out = ob.data(), t.state = st.data();
    CHECK(chunk(h200, p, &t) == 64);
    gdn_tensors_t odd = t;
    odd.k = static_cast<const uint16_t*>(t.k) + 1;  // 2-byte aligned
    CHECK(chunk(h200, p, &odd) == 32);
    CHECK(std::string(info.reason).find("C = 32") != std::string::npos);
    odd = t;
    odd.v_token_stride = int64_t(Hv) * D + 4;  // 8 bytes past a 16-byte multiple
    std::vector<uint16_t> vwide(size_t(T) * (Hv * D + 4) + 64);
    odd.v = aligned(vwide.data());
    CHECK(chunk(h200, p, &odd) == 32);
    odd.v_token_stride = int64_t(Hv) * D + 8;  // padded by 16 bytes: fine
    std::vector<uint16_t> vwide8(size_t(T) * (Hv * D + 8) + 64);
    odd.v = aligned(vwide8.data());
    CHECK(chunk(h200, p, &odd) == 64);
}

TEST_CASE("CUDA: the BF16/FP16 scan's shared memory decides which cards take it",
          "[validation][dispatch]") {
    Fixture f;
    gdn_problem_t p = engine_prompt(f.problem);
    p.precision = GDN_PRECISION_BF16;
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    // K = 128: three stages of loaded rows, 136704 bytes.
    const gdn_caps_t a100 = cuda_card(f.caps, "sm_80", 8, 0, 108, 166912, 167936);
    REQUIRE(gdn_select_path(&a100, &p, nullptr, &info) == GDN_SUCCESS);
    INFO(info.reason);
    CHECK(info.path == GDN_PATH_CHUNKED_TC);
    CHECK(info.precision == GDN_PRECISION_BF16);
    const gdn_caps_t ada = cuda_card(f.caps, "sm_89", 8, 9, 142, 101376, 102400);
    REQUIRE(gdn_select_path(&ada, &p, nullptr, &info) == GDN_SUCCESS);
    CHECK(info.path == GDN_PATH_SEQUENTIAL);
    gdn_problem_t forced = p;
    forced.algorithm = GDN_ALGO_CHUNKED;
    CHECK(gdn_select_path(&ada, &forced, nullptr, &info) == GDN_ERROR_NOT_SUPPORTED);
    const std::string why = gdn_last_error();
    INFO(why);
    CHECK(why.find("136704 bytes of shared memory") != std::string::npos);
    CHECK(why.find("sm_89 allows 101376") != std::string::npos);
}

TEST_CASE("CUDA: BF16X3 and FP16X3 take their split scan where it fits, else the TF32X3 scan",
          "[validation][dispatch]") {
    // FP16X3 is BF16X3 on FP16 terms: the same split scan, the same TF32X3
    // scan where it does not fit, named in the reason. Its stages are smaller
    // (no second remainders; with 16-bit inputs no k/q remainders either:
    // policy::cuda_scan_mma_rows): three need 215040 bytes at K = 128 with
    // these f32 inputs, BF16X3's 230400.
    for (gdn_precision_t x3 : {GDN_PRECISION_BF16X3, GDN_PRECISION_FP16X3}) {
        const bool fp16 = x3 == GDN_PRECISION_FP16X3;
        const size_t three128 = fp16 ? 215040 : 230400;
        const std::string served = fp16 ? "TF32X3 serves FP16X3 (whose scan does not fit)"
                                        : "TF32X3 serves BF16X3 (whose scan does not fit)";
        const std::string other = fp16 ? "BF16X3" : "FP16X3";
        INFO((fp16 ? "FP16X3" : "BF16X3"));
        Fixture f;
        gdn_path_info_t info;
        gdn_path_info_init(&info);
        auto select = [&](const gdn_caps_t& c, const gdn_problem_t& p) {
            const gdn_status_t st = gdn_select_path(&c, &p, nullptr, &info);
            INFO(c.arch << ", K = " << p.head_dim_k << ": " << info.reason << gdn_last_error());
            REQUIRE(st == GDN_SUCCESS);
        };
        // The tensor-core path in `precision`.
        auto expect_tc = [&](const gdn_caps_t& c, const gdn_problem_t& p, gdn_precision_t precision) {
            select(c, p);
            CHECK(info.path == GDN_PATH_CHUNKED_TC);
            CHECK(info.precision == precision);
        };
        const gdn_caps_t h200 = cuda_card(f.caps, "sm_90", 9, 0, 132, 232448, 233472);
        const gdn_caps_t a100 = cuda_card(f.caps, "sm_80", 8, 0, 108, 166912, 167936);
        gdn_problem_t p = engine_prompt(f.problem);
        p.precision = x3;
        REQUIRE((p.flags & GDN_FLAG_OUTPUT_NORM) == 0);
        // With the output norm each keeps its own scan (FP16X3 since 0.6.2:
        // 0.6.1 gave it the TF32X3 scan there), and its own workspace.
        {
            gdn_problem_t normed = p;
            normed.flags |= GDN_FLAG_OUTPUT_NORM;
            gdn_problem_t normed64 = normed;
            normed64.head_dim_k = 64;
            for (const auto& [c, q] : {std::pair{h200, normed}, {h200, normed64}, {a100, normed64}}) {
                expect_tc(c, q, x3);
                CHECK(std::string(info.reason).find("serves") == std::string::npos);
                // The workspace is the path's that runs, not TF32X3's.
                gdn_problem_t as_tf32x3 = q;
                as_tf32x3.precision = GDN_PRECISION_TF32X3;
                size_t bytes = 0, tf32x3_bytes = 0;
                const gdn_status_t ws = gdn_workspace_size(&c, &q, &bytes);
                if (ws != GDN_ERROR_BACKEND_UNAVAILABLE) {  // a build without the CUDA backend
                    REQUIRE(ws == GDN_SUCCESS);
                    REQUIRE(gdn_workspace_size(&c, &as_tf32x3, &tf32x3_bytes) == GDN_SUCCESS);
                    CHECK(bytes != tf32x3_bytes);
                }
            }
        }
        // K = 128: three split stages, three128 bytes; the H100/H200 have them.
        expect_tc(h200, p, x3);
        CHECK(info.chunk_size == 32);
        CHECK(std::string(info.reason).find("serves") == std::string::npos);
        // K = 64: 156672 bytes, which the A100 has too.
        gdn_problem_t k64 = p;
        k64.head_dim_k = 64;
        expect_tc(a100, k64, x3);
        expect_tc(h200, k64, x3);
        // The inputs' dtype does not change the path (only the workspace).
        for (gdn_dtype_t input : {GDN_DTYPE_F16, GDN_DTYPE_BF16}) {
            gdn_problem_t typed = p;
            typed.input_dtype = typed.gate_dtype = input;
            expect_tc(h200, typed, x3);
            CHECK(info.chunk_size == 32);
        }
        // K = 128 on the A100: the TF32X3 scan serves it (more accurate, not
        // BF16 or FP16, which would fit but are less so). With 8 value heads
        // its grid fits one wave with 32 columns, 161280 bytes.
        gdn_problem_t small = p;
        small.num_k_heads = 4;
        small.num_v_heads = 8;
        expect_tc(a100, small, GDN_PRECISION_TF32X3);
        CHECK(info.chunk_size == 32);
        CHECK(std::string(info.reason).find(served) != std::string::npos);
        CHECK(std::string(info.reason).find(other) == std::string::npos);
        gdn_problem_t forced = small;
        forced.algorithm = GDN_ALGO_CHUNKED;
        expect_tc(a100, forced, GDN_PRECISION_TF32X3);
        CHECK(std::string(info.reason).find(served) != std::string::npos);
        // The engine shape's TF32X3 scan needs 64 columns on 108 SMs (210432
        // bytes): neither fits the A100, so auto is sequential and forced
        // chunked says what the split scan needed.
        select(a100, p);
        CHECK(info.path == GDN_PATH_SEQUENTIAL);
        CHECK(info.precision == GDN_PRECISION_FP32);
        forced = p;
        forced.algorithm = GDN_ALGO_CHUNKED;
        CHECK(gdn_select_path(&a100, &forced, nullptr, &info) == GDN_ERROR_NOT_SUPPORTED);
        const std::string why = gdn_last_error();
        INFO(why);
        CHECK(why.find(std::to_string(three128) + " bytes of shared memory") != std::string::npos);
        CHECK(why.find("sm_80 allows 166912") != std::string::npos);
        // The edge, with the H200's SMs (the TF32X3 grid takes 48 columns,
        // 185856 bytes): three128 bytes take the split scan, one byte less the
        // TF32X3 one.
        const gdn_caps_t just = cuda_card(f.caps, "sm_90", 9, 0, 132, three128, 233472);
        expect_tc(just, forced, x3);
        CHECK(std::string(info.reason).find("serves") == std::string::npos);
        const gdn_caps_t short_by_one = cuda_card(f.caps, "sm_90", 9, 0, 132, three128 - 1, 233472);
        expect_tc(short_by_one, forced, GDN_PRECISION_TF32X3);
        CHECK(std::string(info.reason).find(served) != std::string::npos);
        CHECK(std::string(info.reason).find(other) == std::string::npos);
        // HIP's chunked path has FP16 operands only (GDN_PRECISION_FP16):
        // neither split mode takes it, FP16X3 included.
        gdn_caps_t gfx = f.caps;
        gfx.backend = GDN_BACKEND_HIP;
        std::snprintf(gfx.arch, sizeof gfx.arch, "gfx1100");
        gfx.features = GDN_FEATURE_GFX11_WMMA;
        select(gfx, p);
        CHECK(info.path == GDN_PATH_SEQUENTIAL);
        CHECK(info.precision == GDN_PRECISION_FP32);
        CHECK(gdn_select_path(&gfx, &forced, nullptr, &info) == GDN_ERROR_NOT_SUPPORTED);
        CHECK(std::string(gdn_last_error()).find("problem.precision = GDN_PRECISION_FP16") != std::string::npos);
        gdn_problem_t f16_in = forced;  // f16 inputs do not make FP16X3 HIP's FP16
        f16_in.input_dtype = f16_in.gate_dtype = GDN_DTYPE_F16;
        CHECK(gdn_select_path(&gfx, &f16_in, nullptr, &info) == GDN_ERROR_NOT_SUPPORTED);
    }
}

#if defined(GDN_TESTS_HAVE_CUDA)
TEST_CASE("CUDA: where windows overlap (sm_90) the workspace holds two windows of prep output",
          "[validation][dispatch]") {
    Fixture f;
    const gdn_caps_t h200 = cuda_card(f.caps, "sm_90", 9, 0, 132, 232448, 233472);
    // Below sm_90 (no programmatic dependent launch), with the H200's SMs
    // and shared memory so that the FP32 scan's grid fits as well.
    const gdn_caps_t sm80 = cuda_card(f.caps, "sm_80", 8, 0, 132, 232448, 233472);
    gdn_problem_t p = engine_prompt(f.problem);
    p.algorithm = GDN_ALGO_CHUNKED;
    auto bytes = [&](const gdn_caps_t& c, int64_t tokens) {
        gdn_problem_t q = p;
        q.num_tokens = tokens;
        size_t n = 0;
        const gdn_status_t st = gdn_workspace_size(&c, &q, &n);
        INFO(c.arch << ", " << tokens << " tokens: " << gdn_last_error());
        REQUIRE(st == GDN_SUCCESS);
        return n;
    };
    // One window's prep output for 2048 + 32 rows. FP32: T and P rows, γ/β
    // (per value head), the q/k factors (per key head). BF16: the k/q rows
    // (per key head), −W, Tβ and P (values and remainders) and four factors
    // (per value head) as the register-state scan reads them. BF16X3: BF16's,
    // the remainders of −W, the second remainders of Tβ and P, and (inputs
    // other than bf16; these are f32) the k/q rows' remainders. FP16X3:
    // BF16X3's without the second remainders (since 0.6.3), the k/q rows'
    // remainders left out for f16 and bf16 inputs instead (these are f32).
    // Each piece is a multiple of the alignment.
    const size_t rows = 2048 + 32;
    const size_t fp32 = 48 * rows * 64 * 4 + 48 * rows * 2 * 4 + 16 * rows * 2 * 4;
    const size_t bf16 = 16 * rows * 2 * 128 * 2 + 48 * rows * (128 * 2 + 128 * 2 + 4 * 4);
    const size_t kq_lo = 16 * rows * 2 * 128 * 2;
    const size_t bf16x3_bf16_in = bf16 + 48 * rows * (128 + 64) * 2;
    const size_t bf16x3 = bf16x3_bf16_in + kq_lo;
    const size_t fp16x3_f16_in = bf16 + 48 * rows * 128 * 2;
    const size_t fp16x3 = fp16x3_f16_in + kq_lo;
    for (gdn_precision_t precision :
         {GDN_PRECISION_FP32, GDN_PRECISION_BF16, GDN_PRECISION_BF16X3, GDN_PRECISION_FP16X3}) {
        p.precision = precision;
        const size_t one = precision == GDN_PRECISION_BF16     ? bf16
                           : precision == GDN_PRECISION_BF16X3 ? bf16x3
                           : precision == GDN_PRECISION_FP16X3 ? fp16x3
                                                               : fp32;
        INFO("precision " << int(precision));
        // One window: nothing to overlap, the same scratch on both cards.
        CHECK(bytes(h200, 2048) == one);
        CHECK(bytes(sm80, 2048) == one);
        // More: sm_90 keeps two windows' prep output (the next window's prep
        // runs beside this window's scan), sm_80 one; neither grows with
        // the prompt.
        CHECK(bytes(h200, 4096) == 2 * one);
        CHECK(bytes(h200, 32768) == 2 * one);
        CHECK(bytes(sm80, 4096) == one);
        CHECK(bytes(sm80, 32768) == one);
    }
    // BF16X3 with bf16 inputs: the k/q rows are exact in BF16, no remainders.
    // FP16X3 with f16 inputs: exact in FP16, none either; with bf16 inputs
    // none since 0.6.4 (a bf16 value's FP16 remainder is zero:
    // exact_16bit_input). f16 is not exact in BF16X3's BF16, nor f32 in
    // either: their remainders are kept.
    const struct {
        gdn_precision_t precision;
        gdn_dtype_t input;
        size_t one;
    } typed[] = {
        {GDN_PRECISION_BF16X3, GDN_DTYPE_BF16, bf16x3_bf16_in},
        {GDN_PRECISION_BF16X3, GDN_DTYPE_F16, bf16x3},
        {GDN_PRECISION_FP16X3, GDN_DTYPE_F16, fp16x3_f16_in},
        {GDN_PRECISION_FP16X3, GDN_DTYPE_BF16, fp16x3_f16_in},
        {GDN_PRECISION_FP16X3, GDN_DTYPE_F32, fp16x3},
    };
    for (const auto& x : typed) {
        INFO("precision " << int(x.precision) << ", input " << int(x.input));
        p.precision = x.precision;
        p.input_dtype = p.gate_dtype = x.input;
        CHECK(bytes(h200, 2048) == x.one);
        CHECK(bytes(h200, 32768) == 2 * x.one);
        CHECK(bytes(sm80, 32768) == x.one);
    }
}
#endif

TEST_CASE("CUDA: the BF16/FP16 scan takes a fourth stage of loaded rows where it fits",
          "[validation][dispatch]") {
    namespace policy = gdn::policy;
    // 64 columns: a stage of loaded rows (with the prep's operands) is 45568
    // bytes at K = 128, 33280 at K = 64; four stages add the compute warps'
    // output rows, 4 x 1 KB.
    CHECK(policy::cuda_scan_mma_smem_bytes(128, 64, 3) == 136704);
    CHECK(policy::cuda_scan_mma_smem_bytes(128, 64, 4) == 186368);
    CHECK(policy::cuda_scan_mma_smem_bytes(64, 64, 3) == 99840);
    CHECK(policy::cuda_scan_mma_smem_bytes(64, 64, 4) == 137216);
    // A100 (166912 bytes opt-in): three stages at K = 128, four at K = 64.
    CHECK(policy::cuda_scan_mma_stages(128, 64, 166912) == 3);
    CHECK(policy::cuda_scan_mma_stages(64, 64, 166912) == 4);
    // H100 / H200 (232448): four.
    CHECK(policy::cuda_scan_mma_stages(128, 64, 232448) == 4);
    CHECK(policy::cuda_scan_mma_stages(64, 64, 232448) == 4);
    // The edge: four exactly where they fit.
    CHECK(policy::cuda_scan_mma_stages(128, 64, 186368) == 4);
    CHECK(policy::cuda_scan_mma_stages(128, 64, 186367) == 3);
    // Three stages decide whether a card takes the path at all: 136704 bytes
    // at K = 128 is enough, one byte less is not.
    Fixture f;
    gdn_problem_t p = engine_prompt(f.problem);
    p.precision = GDN_PRECISION_BF16;
    p.algorithm = GDN_ALGO_CHUNKED;
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    const gdn_caps_t just = cuda_card(f.caps, "sm_90", 9, 0, 132, 136704, 233472);
    REQUIRE(gdn_select_path(&just, &p, nullptr, &info) == GDN_SUCCESS);
    CHECK(info.path == GDN_PATH_CHUNKED_TC);
    CHECK(policy::cuda_scan_mma_stages(128, 64, just.shared_mem_per_block_optin) == 3);
    const gdn_caps_t short_by_one = cuda_card(f.caps, "sm_90", 9, 0, 132, 136703, 233472);
    CHECK(gdn_select_path(&short_by_one, &p, nullptr, &info) == GDN_ERROR_NOT_SUPPORTED);
    CHECK(std::string(gdn_last_error()).find("136704 bytes of shared memory") != std::string::npos);
}

TEST_CASE("CUDA: the BF16X3 and FP16X3 scan's stages hold the remainders too", "[validation][dispatch]") {
    namespace policy = gdn::policy;
    // BF16X3's stage holds the k, q and −W rows twice (values and
    // remainders) and Tβ, P three times: 76800 bytes at K = 128, 52224 at
    // K = 64 (four stages: and the output rows, 4 x 1 KB).
    const policy::ScanMmaRows bf16x3 = policy::cuda_scan_mma_rows(GDN_PRECISION_BF16X3, 2);
    CHECK((bf16x3.split && bf16x3.kq && bf16x3.second));
    CHECK(policy::cuda_scan_mma_rows(GDN_PRECISION_BF16X3, 4).kq);
    CHECK(policy::cuda_scan_mma_smem_bytes(128, 64, 3, bf16x3) == 230400);
    CHECK(policy::cuda_scan_mma_smem_bytes(128, 64, 4, bf16x3) == 311296);
    CHECK(policy::cuda_scan_mma_smem_bytes(64, 64, 3, bf16x3) == 156672);
    CHECK(policy::cuda_scan_mma_smem_bytes(64, 64, 4, bf16x3) == 212992);
    // FP16X3 has no second remainders (since 0.6.3; the stage's two arrays
    // since 0.6.4), and k/q remainders for f32 inputs only (its 16-bit inputs
    // are exact, since 0.6.4): 71680 / 54272 bytes at K = 128, 47104 / 37888
    // at K = 64 (f32 / 16-bit inputs).
    const policy::ScanMmaRows fp16x3_f32 = policy::cuda_scan_mma_rows(GDN_PRECISION_FP16X3, 4);
    const policy::ScanMmaRows fp16x3_16 = policy::cuda_scan_mma_rows(GDN_PRECISION_FP16X3, 2);
    CHECK((fp16x3_f32.split && fp16x3_f32.kq && !fp16x3_f32.second));
    CHECK((fp16x3_16.split && !fp16x3_16.kq && !fp16x3_16.second));
    CHECK(policy::cuda_scan_mma_smem_bytes(128, 64, 3, fp16x3_f32) == 215040);
    CHECK(policy::cuda_scan_mma_smem_bytes(128, 64, 4, fp16x3_16) == 221184);
    CHECK(policy::cuda_scan_mma_smem_bytes(64, 64, 3, fp16x3_f32) == 141312);
    CHECK(policy::cuda_scan_mma_smem_bytes(64, 64, 3, fp16x3_16) == 113664);
    // H100 / H200 (232448 bytes opt-in): BF16X3 and FP16X3 with f32 inputs
    // three stages at K = 128, four at K = 64; FP16X3 with 16-bit inputs four
    // at K = 128 too. The A100 (166912): three at K = 64 for BF16X3 (K = 128
    // does not fit), four for FP16X3 with 16-bit inputs.
    CHECK(policy::cuda_scan_mma_stages(128, 64, 232448, bf16x3) == 3);
    CHECK(policy::cuda_scan_mma_stages(64, 64, 232448, bf16x3) == 4);
    CHECK(policy::cuda_scan_mma_stages(64, 64, 166912, bf16x3) == 3);
    CHECK(policy::cuda_scan_mma_stages(128, 64, 232448, fp16x3_f32) == 3);
    CHECK(policy::cuda_scan_mma_stages(128, 64, 232448, fp16x3_16) == 4);
    CHECK(policy::cuda_scan_mma_stages(64, 64, 166912, fp16x3_16) == 4);
    // The edge: four exactly where they fit.
    CHECK(policy::cuda_scan_mma_stages(64, 64, 212992, bf16x3) == 4);
    CHECK(policy::cuda_scan_mma_stages(64, 64, 212991, bf16x3) == 3);
    CHECK(policy::cuda_scan_mma_stages(128, 64, 221184, fp16x3_16) == 4);
    CHECK(policy::cuda_scan_mma_stages(128, 64, 221183, fp16x3_16) == 3);
    // Three stages of a mode's rows for the inputs decide: at K = 64, the
    // bytes above take the split scan in the precision asked for, one byte
    // less the TF32X3 scan where that fits, and says so; FP16X3's stages for
    // 16-bit inputs are smaller than TF32X3's scan: one byte less is no
    // chunked path, and the error names the bytes.
    Fixture f;
    gdn_problem_t p = engine_prompt(f.problem);
    p.head_dim_k = 64;
    p.algorithm = GDN_ALGO_CHUNKED;
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    const struct {
        gdn_precision_t precision;
        gdn_dtype_t input;
        size_t three;
        bool tf32x3_below;
    } modes[] = {{GDN_PRECISION_BF16X3, GDN_DTYPE_F32, 156672, true},
                 {GDN_PRECISION_BF16X3, GDN_DTYPE_BF16, 156672, true},
                 {GDN_PRECISION_FP16X3, GDN_DTYPE_F32, 141312, true},
                 {GDN_PRECISION_FP16X3, GDN_DTYPE_BF16, 113664, false}};
    for (const auto& m : modes) {
        p.precision = m.precision;
        p.input_dtype = m.input;
        INFO("precision " << int(m.precision) << ", input " << int(m.input));
        const gdn_caps_t just = cuda_card(f.caps, "sm_90", 9, 0, 132, m.three, 233472);
        const gdn_caps_t short_by_one = cuda_card(f.caps, "sm_90", 9, 0, 132, m.three - 1, 233472);
        REQUIRE(gdn_select_path(&just, &p, nullptr, &info) == GDN_SUCCESS);
        CHECK(info.path == GDN_PATH_CHUNKED_TC);
        CHECK(info.precision == m.precision);
        if (!m.tf32x3_below) {
            CHECK(gdn_select_path(&short_by_one, &p, nullptr, &info) == GDN_ERROR_NOT_SUPPORTED);
            CHECK(std::string(gdn_last_error()).find(std::to_string(m.three) + " bytes of shared memory") !=
                  std::string::npos);
            continue;
        }
        REQUIRE(gdn_select_path(&short_by_one, &p, nullptr, &info) == GDN_SUCCESS);
        INFO(info.reason);
        CHECK(info.path == GDN_PATH_CHUNKED_TC);
        CHECK(info.precision == GDN_PRECISION_TF32X3);
        CHECK(std::string(info.reason)
                  .find(m.precision == GDN_PRECISION_FP16X3 ? "TF32X3 serves FP16X3" : "TF32X3 serves BF16X3") !=
              std::string::npos);
    }
}

TEST_CASE("CUDA: the chunked scans' sequence lanes", "[validation][dispatch]") {
    namespace policy = gdn::policy;
    // The register-state scan (64 columns a block).
    // One lane where the heads' blocks (Hk * G * V / 64) fill more than half
    // of the SMs: H_v 48 and 64 at V = 128 on 132 SMs, the grid as before.
    CHECK(policy::cuda_scan_lanes(16, 3, 128, 64, 132, 8) == 1);
    CHECK(policy::cuda_scan_lanes(16, 4, 128, 64, 132, 8) == 1);
    // H_v 32: two lanes; H_k 4, H_v 8: 16 blocks a lane, 8 lanes, at most one
    // per sequence; H_k 2, H_v 4: 8 blocks, 16 lanes.
    CHECK(policy::cuda_scan_lanes(16, 2, 128, 64, 132, 8) == 2);
    CHECK(policy::cuda_scan_lanes(4, 2, 128, 64, 132, 37) == 8);
    CHECK(policy::cuda_scan_lanes(4, 2, 128, 64, 132, 5) == 5);
    CHECK(policy::cuda_scan_lanes(2, 2, 128, 64, 132, 37) == 16);
    // One sequence, or more blocks than SMs: one lane.
    CHECK(policy::cuda_scan_lanes(2, 2, 128, 64, 132, 1) == 1);
    CHECK(policy::cuda_scan_lanes(64, 4, 128, 64, 132, 100) == 1);
    // gridDim.z's limit.
    CHECK(policy::cuda_scan_lanes(1, 1, 64, 64, 1 << 20, 1 << 20) == 65535);
    // The shared-memory scan (FP32, TF32X3) at the widths cuda_scan_columns
    // gives: H_v 48 at 48 columns (128 blocks), one lane; H_k 4, H_v 8 at 32
    // (32 blocks), four.
    CHECK(policy::cuda_scan_lanes(16, 3, 128, 48, 132, 8) == 1);
    CHECK(policy::cuda_scan_lanes(4, 2, 128, 32, 132, 37) == 4);
    CHECK(policy::cuda_scan_lanes(4, 2, 128, 0, 132, 37) == 1);  // no width: no grid
}

TEST_CASE("CUDA: time-sliced windows for batches of long sequences", "[validation][dispatch]") {
    namespace policy = gdn::policy;
    const int64_t w = policy::kCudaWindowTokens;  // 2048
    // The slice for H_k key heads, H_v = G · H_k value heads, V = 128, 132 SMs,
    // windows of 2048 tokens in two halves; the register-state scan (BF16,
    // FP16, BF16X3, FP16X3: 64 columns a block) or the shared-memory one (FP32,
    // TF32X3: the widths cuda_scan_columns gives).
    auto slice = [&](int32_t n, int64_t max_seqlen, int64_t T, int32_t hk, int32_t g, bool reg) {
        const int32_t ncol = policy::cuda_scan_columns(hk, g, 128, 132, reg);
        return policy::cuda_scan_slice_for(w, true, n, max_seqlen, T, hk, g, 128, ncol, 132, reg);
    };
    for (bool reg : {true, false}) {
        INFO("register-state scan " << reg);
        // H_k 4, H_v 8 (8 lanes of 16 blocks; 4 of 32 in the shared-memory
        // scan): 8 x 4096 in windows of 2048 holds half a sequence a window,
        // 16 windows of a 64-step chain; sliced, 256 tokens of each sequence
        // a window, the lanes side by side (run 110: BF16 1.415 -> 0.572 ms).
        CHECK(slice(8, 4096, 8 * 4096, 4, 2, reg) == 256);
        // 16 x 1024: two sequences a window, against slices of 128 (run 110:
        // 0.408 -> 0.317 ms).
        CHECK(slice(16, 1024, 16 * 1024, 4, 2, reg) == 128);
        // 16 x 512: a window holds four, and the slices' preps would run
        // alone between the scans (run 110, sliced: 0.132 -> 0.163 ms).
        CHECK(slice(16, 512, 16 * 512, 4, 2, reg) == 0);
        CHECK(slice(8, 256, 8 * 256, 4, 2, reg) == 0);
        // H_v 32 (two lanes of the register-state scan): the window is the
        // prep's SM-time either way (run 110, sliced: 1.50 -> 1.71 ms).
        CHECK(slice(8, 4096, 8 * 4096, 16, 2, reg) == 0);
        // One lane (H_v 48 at K = V = 128 on 132 SMs): never.
        CHECK(slice(8, 4096, 8 * 4096, 16, 3, reg) == 0);
        // The GPU test's batch (test_cuda_batch.cpp): 7 sequences, 12901
        // tokens, the longest 2601 (or a max_seqlen of 2900 above it), H_k 2,
        // H_v 4: slices of 288 (2048 / 7 rounded down to a chunk).
        CHECK(slice(7, 2601, 12901, 2, 2, reg) == 288);
        CHECK(slice(7, 2900, 12901, 2, 2, reg) == 288);
        // One sequence; max_seqlen left at num_tokens (the default); one long
        // sequence among short ones (the slices would walk the long one alone).
        CHECK(slice(1, 32768, 32768, 4, 2, reg) == 0);
        CHECK(slice(8, 8 * 4096, 8 * 4096, 4, 2, reg) == 0);
        CHECK(slice(8, 16384, 16384 + 7 * 300, 4, 2, reg) == 0);
        // More sequences than a window has chunks for: no slice of a chunk.
        CHECK(slice(100, 4096, 100 * 4096, 4, 2, reg) == 0);
    }
    // One scratch half (a prompt of one window on sm_90), no scan width, or
    // degenerate arguments: windows of tokens.
    CHECK(policy::cuda_scan_slice_for(w, false, 8, 4096, 8 * 4096, 4, 2, 128, 64, 132, true) == 0);
    CHECK(policy::cuda_scan_slice_for(w, true, 8, 4096, 8 * 4096, 4, 2, 128, 0, 132, true) == 0);
    CHECK(policy::cuda_scan_slice(0, 8, 4096, 8 * 4096, 4, 16, 8, 132, policy::kCudaRegStateCosts) == 0);
    CHECK(policy::cuda_scan_slice(w, 8, 0, 8 * 4096, 4, 16, 8, 132, policy::kCudaRegStateCosts) == 0);
    CHECK(policy::cuda_scan_slice(w, 8, 4096, 8 * 4096, 4, 16, 1, 132, policy::kCudaRegStateCosts) == 0);
}

TEST_CASE("status strings are pinned and the last error is thread-local", "[validation][errors]") {
    CHECK(std::string(gdn_status_string(GDN_SUCCESS)) == "success");
    CHECK(std::string(gdn_status_string(GDN_ERROR_INVALID_ARGUMENT)) == "invalid argument");
    CHECK(std::string(gdn_status_string(GDN_ERROR_NOT_SUPPORTED)) == "not supported");
    CHECK(std::string(gdn_status_string(GDN_ERROR_WORKSPACE_TOO_SMALL)) == "workspace too small");
    CHECK(std::string(gdn_status_string(GDN_ERROR_BACKEND_UNAVAILABLE)) == "backend unavailable");
    CHECK(std::string(gdn_status_string(GDN_ERROR_DEVICE)) == "device error");
    CHECK(std::string(gdn_status_string(GDN_ERROR_INTERNAL)) == "internal error");
    CHECK(std::string(gdn_status_string(gdn_status_t(42))) == "unknown status");
    CHECK(int(GDN_SUCCESS) == 0);
    CHECK(int(GDN_ERROR_INVALID_ARGUMENT) == 1);
    CHECK(int(GDN_ERROR_NOT_SUPPORTED) == 2);
    CHECK(int(GDN_ERROR_WORKSPACE_TOO_SMALL) == 3);
    CHECK(int(GDN_ERROR_BACKEND_UNAVAILABLE) == 4);
    CHECK(int(GDN_ERROR_DEVICE) == 5);
    CHECK(int(GDN_ERROR_INTERNAL) == 6);
    CHECK(gdn_version() == GDN_VERSION);

    gdn_caps_t c;
    gdn_caps_init(&c);
    REQUIRE(gdn_probe(GDN_BACKEND_CPU, -5, &c) == GDN_ERROR_INVALID_ARGUMENT);
    const std::string here = gdn_last_error();
    std::string there = "unset";
    std::thread([&] { there = gdn_last_error(); }).join();
    CHECK(here.find("device (-5)") != std::string::npos);
    CHECK(there.empty());
    // A successful call clears it.
    REQUIRE(gdn_probe(GDN_BACKEND_CPU, 0, &c) == GDN_SUCCESS);
    CHECK(std::string(gdn_last_error()).empty());
}

TEST_CASE("every reason gdn_select_path gives fits gdn_path_info_t.reason whole", "[validation][dispatch]") {
    // The reason is copied into a 192-byte field and cut there without a
    // mark: a cut one would drop its last clause silently. Every backend the
    // policy knows (caps made by hand, as above), every precision, algorithm
    // and state flag, over shapes that reach each rule.
    Fixture f;
    std::vector<gdn_caps_t> cards = {f.caps};
    const uint64_t sm80 = GDN_FEATURE_TOKEN_STATES | GDN_FEATURE_ASYNC_COPY | GDN_FEATURE_TF32_MMA |
                          GDN_FEATURE_FP16_MMA;
    gdn_caps_t c = cuda_card(f.caps, "sm_75", 7, 5, 40, 65536, 65536);
    c.features = GDN_FEATURE_TOKEN_STATES | GDN_FEATURE_FP16_MMA;
    cards.push_back(c);
    c = cuda_card(f.caps, "sm_86", 8, 6, 84, 101376, 102400);
    c.features = sm80;
    cards.push_back(c);
    c = cuda_card(f.caps, "sm_80", 8, 0, 108, 166912, 167936);
    c.features = sm80;
    cards.push_back(c);
    c = cuda_card(f.caps, "sm_90", 9, 0, 132, 232448, 233472);
    c.features = sm80;  // a library without sm_90a code
    cards.push_back(c);
    c.features = sm80 | GDN_FEATURE_WGMMA;
    cards.push_back(c);
    c = f.caps;
    c.backend = GDN_BACKEND_HIP;
    c.multiprocessor_count = 40;
    std::snprintf(c.arch, sizeof c.arch, "gfx1151");
    c.features = GDN_FEATURE_TOKEN_STATES | GDN_FEATURE_BLOCK_STATES | GDN_FEATURE_GFX11_WMMA;
    cards.push_back(c);
    std::snprintf(c.arch, sizeof c.arch, "gfx1030");
    c.features = GDN_FEATURE_TOKEN_STATES;
    cards.push_back(c);

    struct Shape {
        int32_t seqs;
        int64_t tokens;
        int32_t hk, hv, k, v;
    };
    const Shape shapes[] = {
        {1, 1, 16, 48, 128, 128},     {1, 15, 2, 4, 64, 64},          {1, 300, 16, 48, 128, 128},
        {1, 32768, 16, 48, 128, 128}, {8, 8 * 4096, 32, 64, 128, 128}, {300, 300 * 2, 16, 48, 128, 128},
        {4, 4000, 2, 6, 96, 128},     {2, 4096, 64, 128, 128, 128},   {2, 2000000000, 16, 48, 128, 128},
        {1, 4096, 4, 8, 128, 128},  // the A100: TF32X3 serves BF16X3 / FP16X3
    };
    const uint32_t flag_sets[] = {0u, GDN_FLAG_TOKEN_STATES, GDN_FLAG_TOKEN_STATES | GDN_FLAG_BLOCK_STATES,
                                  GDN_FLAG_QK_L2NORM | GDN_FLAG_OUTPUT_NORM};
    size_t longest = 0, answered = 0, bf16x3_served = 0, fp16x3_served = 0;
    std::string longest_reason;
    for (const gdn_caps_t& card : cards)
        for (const Shape& sh : shapes)
            for (gdn_dtype_t input : {GDN_DTYPE_F32, GDN_DTYPE_F16, GDN_DTYPE_BF16})
                for (int precision = 0; precision <= int(GDN_PRECISION_FP16X3); ++precision)
                    for (int algorithm = 0; algorithm <= int(GDN_ALGO_CHUNKED); ++algorithm)
                        for (uint32_t flags : flag_sets) {
                            gdn_problem_t p = f.problem;
                            p.num_seqs = sh.seqs;
                            p.num_tokens = sh.tokens;
                            p.max_seqlen = 0;
                            p.num_k_heads = sh.hk;
                            p.num_v_heads = sh.hv;
                            p.head_dim_k = sh.k;
                            p.head_dim_v = sh.v;
                            p.num_state_slots = sh.seqs;
                            p.input_dtype = input;
                            p.gate_dtype = GDN_DTYPE_F32;
                            p.precision = gdn_precision_t(precision);
                            p.algorithm = gdn_algorithm_t(algorithm);
                            p.flags = flags;
                            gdn_path_info_t info;
                            gdn_path_info_init(&info);
                            if (gdn_select_path(&card, &p, nullptr, &info) != GDN_SUCCESS) continue;
                            ++answered;
                            bf16x3_served += std::strstr(info.reason, "TF32X3 serves BF16X3") != nullptr;
                            fp16x3_served += std::strstr(info.reason, "TF32X3 serves FP16X3") != nullptr;
                            const size_t n = std::strlen(info.reason);
                            if (n > longest) longest = n, longest_reason = info.reason;
                        }
    INFO("the longest of " << answered << " reasons (" << longest << " bytes): " << longest_reason);
    CHECK(answered > 1000);
    // The cases include the longest clause's: a split mode served by TF32X3.
    CHECK(bf16x3_served > 0);
    // FP16X3's stages are no larger than BF16X3's (and smaller with 16-bit
    // inputs): TF32X3 serves it at most where it serves BF16X3.
    CHECK(fp16x3_served > 0);
    CHECK(fp16x3_served <= bf16x3_served);
    // Cut, it would fill the field: sizeof - 1 bytes.
    CHECK(longest < sizeof(gdn_path_info_t::reason) - 1);
}
