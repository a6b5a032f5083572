// gdn-bench: per-launch times and accuracy tables for the engine shapes.
//
// For every T in the list and every algorithm asked for, on one backend:
// times gdn_chunked_recurrence (median of --reps after --warmup; CUDA events
// on the GPU, wall clock on the CPU), the host time of one call, and the error
// against the FP64 recurrence on a few value heads (max|diff|/max|ref| of the
// output and the final state). Prints a table (each row's time the median of --reps timings, and
// a spread line with their min and max); --json / --csv write the rows.
// --precision takes a list (fp32,tf32x3,bf16,fp16,bf16x3,fp16x3): each chunked/auto
// case runs once per precision, and the table names the path that ran
// (gdn_select_path: chunked-fp32, chunked-tc, ...; with the precision it ran
// in where that is not the one asked for, e.g. "chunked-tc (tf32x3)" for
// bf16x3 or fp16x3 where their scan does not fit the device; fp16x3 keeps
// FP16's range: entries beyond 65504 overflow, and f16 and bf16 inputs are
// exact operands for it). --seqs N runs N sequences of T tokens each;
// --varlen passes them through cu_seqlens (the varlen path) instead of NULL; --lens runs one
// varlen batch of the lengths given, in that order (T is then its longest).
// It is a benchmark, not a test: it never fails on a time.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "common/reference.hpp"
#include "common/validate.hpp"
#include "gdn/gdn.h"

#if defined(GDN_BENCH_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace {

struct Options {
    gdn_backend_t backend = GDN_BACKEND_CPU;
    bool backend_given = false;
    std::vector<int64_t> tokens = {128, 512, 2048};
    std::vector<int32_t> decode;  // decode batch sizes (one token each)
    std::vector<int64_t> lens;    // --lens: one varlen batch of these lengths (else T x seqs)
    int32_t hk = 16, hv = 48, dk = 128, dv = 128, seqs = 1;
    gdn_dtype_t dtype = GDN_DTYPE_F32;
    gdn_dtype_t out_dtype = GDN_DTYPE_F32;
    std::vector<gdn_precision_t> precisions = {GDN_PRECISION_FP32};
    bool varlen = false;
    bool l2norm = false;       // GDN_FLAG_QK_L2NORM (eps 1e-6)
    bool out_norm = false;     // GDN_FLAG_OUTPUT_NORM (z in the input dtype, eps 1e-6)
    bool typed_gates = false;  // g and beta in the input dtype (else f32)
    int32_t out_row_pad = 0;   // elements after each output token row (0: packed)
    int32_t in_row_pad = 0;    // elements after each q/k/v/z token row (0: packed)
    std::vector<gdn_algorithm_t> algos = {GDN_ALGO_SEQUENTIAL, GDN_ALGO_CHUNKED};
    int reps = 5, warmup = 1, check_heads = 2, threads = 0;
    int workspace_x = 1;  // workspace passed: gdn_workspace_size() times this
    bool pdl = false;     // GDN_FLAG_PDL
    int burst = 1;        // calls timed back to back between two events (CUDA)
    bool graph = false;   // the burst captured once in a CUDA graph, the graph launches timed
    bool slots = false;   // state_indices: sequence i in slot seqs - 1 - i (an engine's pool)
    bool state_vk = false;  // --state-vk: the pool in the [V][K] layout (GDN_STATE_VK)
    bool token_states = false;  // --token-states: GDN_FLAG_TOKEN_STATES, every token's state kept
    bool block_states = false;  // --block-states: with GDN_FLAG_BLOCK_STATES, every block end's state kept
    double max_err = 0;   // > 0: exit 1 when a checked row's error is above it (or not finite)
    bool hash = false;    // --hash: FNV-1a of the accuracy run's outputs and state pool, per row
    int cold_mb = 0;      // > 0: the timed calls rotate over state pools of this many MB in all
    std::string json, csv;
};

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "%s\nusage: gdn-bench [--backend cpu|cuda|hip] [--T 128,512,2048] [--decode 1,8,64]\n"
                 "                 [--hk 16] [--hv 48] [--dk 128] [--dv 128]\n"
                 "                 [--seqs 1 (sequences of T tokens each)] [--varlen (pass cu_seqlens)]\n"
                 "                 [--lens 512x15,8192 (one varlen batch of these lengths in this order,\n"
                 "                  LxN: N sequences of L tokens; instead of --T and --seqs)]\n"
                 "                 [--dtype f32|f16|bf16] [--out-dtype f32|f16|bf16]\n"
                 "                 [--l2norm (q/k L2-normalized in the call)]\n"
                 "                 [--out-norm (the gated RMSNorm of the outputs in the call)]\n"
                 "                 [--typed-gates (g and beta in the input dtype, not f32)]\n"
                 "                 [--out-row-pad 0 (elements after each output token row)]\n"
                 "                 [--in-row-pad 0 (elements after each q/k/v/z token row, as views\n"
                 "                  of a fused projection; not a multiple of 8: no fused BF16 path)]\n"
                 "                 [--precision fp32,tf32x3,bf16,fp16,bf16x3,fp16x3 (one or a list)]\n"
                 "                 [--algos sequential,chunked,auto]\n"
                 "                 [--reps 5 (the row's time is their median; a spread line gives\n"
                 "                  their min and max)] [--warmup 1] [--check-heads 2 (0: no FP64 check)]\n"
                 "                 [--threads N (CPU)] [--json FILE] [--csv FILE]\n"
                 "                 [--workspace-x 1 (pass N times gdn_workspace_size(): CUDA takes\n"
                 "                  longer windows on long prompts with it, the same bits)]\n"
                 "                 [--pdl (GDN_FLAG_PDL: each call a programmatic dependent of the one\n"
                 "                  before; CUDA sm_90)] [--burst 1 (CUDA: calls timed back to back\n"
                 "                  between two events, the time per call reported)]\n"
                 "                 [--graph (CUDA: the burst is captured once in a CUDA graph and\n"
                 "                  the graph's launches are timed, as an engine replays its decode\n"
                 "                  steps: no host time between the calls)]\n"
                 "                 [--state-indices (pass state_indices, sequence i in slot N - 1 - i,\n"
                 "                  as an engine's pool is addressed)]\n"
                 "                 [--state-vk (the state pool in the [V][K] layout, GDN_STATE_VK)]\n"
                 "                 [--token-states (GDN_FLAG_TOKEN_STATES: the state after every token\n"
                 "                  kept in a slot of its own after the sequences' slots, as a\n"
                 "                  speculative decoder's verify step; the state checked is the last\n"
                 "                  token's)]\n"
                 "                 [--block-states (GDN_FLAG_TOKEN_STATES | GDN_FLAG_BLOCK_STATES: the\n"
                 "                  state after every 64-token block and the last token kept, as an\n"
                 "                  engine's prefix cache)]\n"
                 "                 [--max-err E (exit 1 if a checked row's error against FP64 is\n"
                 "                  above E or not a number: the bench as a smoke test)]\n"
                 "                 [--hash (print a 64-bit FNV-1a hash of each row's outputs and\n"
                 "                  state pool after its first call, from state0: two builds or two\n"
                 "                  forms of a kernel compared bit for bit)]\n"
                 "                 [--cold-state MB (GPU: the timed calls rotate over copies of the\n"
                 "                  state pool, about MB megabytes in all, so that a call reads its\n"
                 "                  state from DRAM as in an engine of many layers; 0: one pool)]\n",
                 why);
    std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> r;
    size_t a = 0;
    while (a <= s.size()) {
        size_t b = s.find(',', a);
        if (b == std::string::npos) b = s.size();
        if (b > a) r.push_back(s.substr(a, b - a));
        a = b + 1;
    }
    return r;
}

gdn_dtype_t parse_dtype(const std::string& s) {
    if (s == "f32") return GDN_DTYPE_F32;
    if (s == "f16") return GDN_DTYPE_F16;
    if (s == "bf16") return GDN_DTYPE_BF16;
    usage(("unknown dtype " + s).c_str());
}

Options parse(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) usage(("missing value after " + a).c_str());
            return argv[++i];
        };
        if (a == "--backend") {
            std::string b = next();
            o.backend_given = true;
            if (b == "cpu") o.backend = GDN_BACKEND_CPU;
            else if (b == "cuda") o.backend = GDN_BACKEND_CUDA;
            else if (b == "hip") o.backend = GDN_BACKEND_HIP;
            else usage(("unknown backend " + b).c_str());
        } else if (a == "--T") {
            o.tokens.clear();
            for (auto& s : split(next())) o.tokens.push_back(std::stoll(s));
        } else if (a == "--lens") {
            o.lens.clear();
            for (auto& s : split(next())) {
                const size_t x = s.find('x');
                const int64_t len = std::stoll(s.substr(0, x));
                const int64_t times = x == std::string::npos ? 1 : std::stoll(s.substr(x + 1));
                if (len < 0 || times < 1 || times > 65535) usage("--lens takes L or LxN, L >= 0, 1 <= N <= 65535");
                o.lens.insert(o.lens.end(), size_t(times), len);
            }
            if (o.lens.empty() || o.lens.size() > 65535) usage("--lens takes 1 to 65535 sequences");
        } else if (a == "--decode") {
            o.decode.clear();
            for (auto& s : split(next())) o.decode.push_back(std::stoi(s));
        } else if (a == "--hk") o.hk = std::stoi(next());
        else if (a == "--hv") o.hv = std::stoi(next());
        else if (a == "--dk") o.dk = std::stoi(next());
        else if (a == "--dv") o.dv = std::stoi(next());
        else if (a == "--seqs") o.seqs = std::max(1, std::stoi(next()));
        else if (a == "--varlen") o.varlen = true;
        else if (a == "--l2norm") o.l2norm = true;
        else if (a == "--out-norm") o.out_norm = true;
        else if (a == "--typed-gates") o.typed_gates = true;
        else if (a == "--out-row-pad") {
            o.out_row_pad = std::stoi(next());
            if (o.out_row_pad < 0 || o.out_row_pad > 1024) usage("--out-row-pad takes 0..1024");
        } else if (a == "--in-row-pad") {
            o.in_row_pad = std::stoi(next());
            if (o.in_row_pad < 0 || o.in_row_pad > 1024) usage("--in-row-pad takes 0..1024");
        }
        else if (a == "--dtype") o.dtype = parse_dtype(next());
        else if (a == "--out-dtype") o.out_dtype = parse_dtype(next());
        else if (a == "--precision") {
            o.precisions.clear();
            for (auto& p : split(next())) {
                if (p == "fp32") o.precisions.push_back(GDN_PRECISION_FP32);
                else if (p == "tf32x3") o.precisions.push_back(GDN_PRECISION_TF32X3);
                else if (p == "fp16") o.precisions.push_back(GDN_PRECISION_FP16);
                else if (p == "bf16") o.precisions.push_back(GDN_PRECISION_BF16);
                else if (p == "bf16x3") o.precisions.push_back(GDN_PRECISION_BF16X3);
                else if (p == "fp16x3") o.precisions.push_back(GDN_PRECISION_FP16X3);
                else usage(("unknown precision " + p).c_str());
            }
            if (o.precisions.empty()) usage("--precision needs a value");
        } else if (a == "--algos") {
            o.algos.clear();
            for (auto& s : split(next())) {
                if (s == "sequential") o.algos.push_back(GDN_ALGO_SEQUENTIAL);
                else if (s == "chunked") o.algos.push_back(GDN_ALGO_CHUNKED);
                else if (s == "auto") o.algos.push_back(GDN_ALGO_AUTO);
                else usage(("unknown algorithm " + s).c_str());
            }
        } else if (a == "--reps") o.reps = std::max(1, std::stoi(next()));
        else if (a == "--warmup") o.warmup = std::max(0, std::stoi(next()));
        else if (a == "--check-heads") o.check_heads = std::max(0, std::stoi(next()));
        else if (a == "--threads") o.threads = std::stoi(next());
        else if (a == "--workspace-x") {
            o.workspace_x = std::stoi(next());
            if (o.workspace_x < 1 || o.workspace_x > 64) usage("--workspace-x takes 1..64");
        }
        else if (a == "--pdl") o.pdl = true;
        else if (a == "--hash") o.hash = true;
        else if (a == "--graph") o.graph = true;
        else if (a == "--state-indices") o.slots = true;
        else if (a == "--state-vk") o.state_vk = true;
        else if (a == "--token-states") o.token_states = true;
        else if (a == "--block-states") o.token_states = o.block_states = true;
        else if (a == "--max-err") {
            o.max_err = std::stod(next());
            if (!(o.max_err > 0)) usage("--max-err takes a positive bound");
        }
        else if (a == "--burst") {
            o.burst = std::stoi(next());
            if (o.burst < 1 || o.burst > 10000) usage("--burst takes 1..10000");
        }
        else if (a == "--cold-state") {
            o.cold_mb = std::stoi(next());
            if (o.cold_mb < 0 || o.cold_mb > 65536) usage("--cold-state takes 0..65536 (MB)");
        }
        else if (a == "--json") o.json = next();
        else if (a == "--csv") o.csv = next();
        else if (a == "--help" || a == "-h") usage("gdn-bench: times and errors of the gated delta rule");
        else usage(("unknown option " + a).c_str());
    }
    if (!o.lens.empty() && o.token_states) usage("--lens does not take --token-states or --block-states");
    return o;
}

// ------------------------------------------------------------ device memory
struct Memory {
    gdn_backend_t backend;
    void* alloc(size_t bytes) const {
#if defined(GDN_BENCH_WITH_CUDA)
        if (backend == GDN_BACKEND_CUDA) {
            void* p = nullptr;
            if (cudaMalloc(&p, std::max<size_t>(bytes, 1)) != cudaSuccess) {
                std::fprintf(stderr, "cudaMalloc(%zu) failed\n", bytes);
                std::exit(1);
            }
            return p;
        }
#endif
        return std::aligned_alloc(GDN_WORKSPACE_ALIGNMENT,
                                  (std::max<size_t>(bytes, 1) + GDN_WORKSPACE_ALIGNMENT - 1) /
                                      GDN_WORKSPACE_ALIGNMENT * GDN_WORKSPACE_ALIGNMENT);
    }
    void free(void* p) const {
#if defined(GDN_BENCH_WITH_CUDA)
        if (backend == GDN_BACKEND_CUDA) { cudaFree(p); return; }
#endif
        std::free(p);
    }
    void upload(void* dst, const void* src, size_t bytes) const {
#if defined(GDN_BENCH_WITH_CUDA)
        if (backend == GDN_BACKEND_CUDA) { cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice); return; }
#endif
        std::memcpy(dst, src, bytes);
    }
    void download(void* dst, const void* src, size_t bytes) const {
#if defined(GDN_BENCH_WITH_CUDA)
        if (backend == GDN_BACKEND_CUDA) { cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost); return; }
#endif
        std::memcpy(dst, src, bytes);
    }
    void sync() const {
#if defined(GDN_BENCH_WITH_CUDA)
        if (backend == GDN_BACKEND_CUDA) cudaDeviceSynchronize();
#endif
    }
};

struct Row {
    std::string case_name, backend, algo, precision, path, dtype;
    int64_t tokens;
    int32_t seqs;
    double device_ms, host_us, err_out, err_state;
    // The spread of the timed calls (--reps of them; --burst: of the bursts' per-call times):
    // a median can hide a share of slower calls (docs/perf-notes.md v115).
    double device_ms_min = NAN, device_ms_max = NAN;
    int timed = 0;
    uint64_t hash_out = 0, hash_state = 0;  // --hash
};

// 64-bit FNV-1a of n bytes.
uint64_t fnv1a(const void* data, size_t n) {
    const auto* b = static_cast<const unsigned char*>(data);
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

void check(gdn_status_t st, const char* what) {
    if (st != GDN_SUCCESS) {
        std::fprintf(stderr, "%s: %s: %s\n", what, gdn_status_string(st), gdn_last_error());
        std::exit(1);
    }
}

const char* path_name(gdn_path_t p) {
    switch (p) {
        case GDN_PATH_SEQUENTIAL: return "sequential";
        case GDN_PATH_CHUNKED_FP32: return "chunked-fp32";
        case GDN_PATH_CHUNKED_LOWP_C16: return "chunked-lowp-c16";
        case GDN_PATH_CHUNKED_TC: return "chunked-tc";
        default: return "none";
    }
}

// Runs one (T, seqs, algo) case; returns its row. With --lens, the batch of o.lens
// (T its longest, seqs its count).
Row run_case(const Options& o, const gdn_caps_t& caps, int64_t T, int32_t seqs, gdn_algorithm_t algo,
             gdn_precision_t precision, const char* case_name) {
    const Memory mem{caps.backend};
    // Sequence sq: tokens [first[sq], first[sq + 1]).
    const bool lens = !o.lens.empty() && std::string(case_name) == "prompt";
    std::vector<int64_t> first(size_t(seqs) + 1, 0);
    for (int32_t sq = 0; sq < seqs; ++sq) first[size_t(sq) + 1] = first[size_t(sq)] + (lens ? o.lens[size_t(sq)] : T);
    const int64_t total = first[size_t(seqs)];
    // --token-states: the pool holds the sequences' own slots, then one slot a token (token row r
    // in slot seqs + r); --block-states: one slot a block of GDN_STATE_BLOCK tokens (the last one
    // may be partial: its last token's state).
    const int64_t blocks = (T + GDN_STATE_BLOCK - 1) / GDN_STATE_BLOCK;
    const int64_t pool_slots = o.block_states ? seqs + seqs * blocks : o.token_states ? seqs + total : seqs;
    const size_t nq = size_t(total) * o.hk * o.dk, nv = size_t(total) * o.hv * o.dv,
                 ng = size_t(total) * o.hv, nstate = size_t(pool_slots) * o.hv * o.dk * o.dv;
    const size_t in_es = gdn::dtype_size(o.dtype), out_es = gdn::dtype_size(o.out_dtype);
    // The output's token stride (elements) and size: --out-row-pad after each token row.
    const int64_t out_tok = int64_t(o.hv) * o.dv + o.out_row_pad;
    const size_t nout = size_t(total) * size_t(out_tok);

    // Inputs as the model makes them: unit-norm keys, decays in (0.37, 0.99).
    std::mt19937 rng(1234u + uint32_t(T));
    std::uniform_real_distribution<float> U(-0.5f, 0.5f);
    std::vector<float> q(nq), k(nq), v(nv), g(ng), beta(ng), state0(nstate);
    for (auto& x : q) x = U(rng);
    for (auto& x : k) x = U(rng);
    for (size_t r = 0; r < nq / o.dk; ++r) {
        float n = 0.0f;
        for (int i = 0; i < o.dk; ++i) n += k[r * o.dk + i] * k[r * o.dk + i];
        for (int i = 0; i < o.dk; ++i) k[r * o.dk + i] /= std::sqrt(n);
    }
    for (auto& x : v) x = U(rng);
    for (auto& x : g) x = -0.01f - (U(rng) + 0.5f);
    for (auto& x : beta) x = U(rng) + 0.5f;
    for (auto& x : state0) x = 0.05f * U(rng);
    // Stored in the input dtype; the reference sees the rounded values.
    auto typed = [&](std::vector<float>& x) {
        std::vector<uint8_t> bytes(x.size() * in_es);
        for (size_t i = 0; i < x.size(); ++i) {
            gdn::store_element(bytes.data(), o.dtype, int64_t(i), x[i]);
            x[i] = gdn::load_element(bytes.data(), o.dtype, int64_t(i));
        }
        return bytes;
    };
    auto bq = typed(q), bk = typed(k), bv = typed(v);
    // g and beta: f32, or (--typed-gates) the input dtype, rounded alike.
    const gdn_dtype_t gate_dt = o.typed_gates ? o.dtype : GDN_DTYPE_F32;
    const size_t gate_es = gdn::dtype_size(gate_dt);
    std::vector<uint8_t> bg(ng * 4), bb(ng * 4);
    if (o.typed_gates) {
        bg = typed(g), bb = typed(beta);
    } else {
        std::memcpy(bg.data(), g.data(), ng * 4);
        std::memcpy(bb.data(), beta.data(), ng * 4);
    }

    // --out-norm: z (shaped like v, the input dtype) and the norm's weight, from a generator of
    // their own (the other inputs stay those of a run without it).
    std::vector<float> z, nw;
    std::vector<uint8_t> bz;
    if (o.out_norm) {
        std::mt19937 zr(777u + uint32_t(T));
        std::uniform_real_distribution<float> Z(-3.0f, 3.0f);
        z.resize(nv), nw.resize(size_t(o.dv));
        for (auto& x : z) x = Z(zr);
        for (auto& x : nw) x = 0.5f + 0.25f * Z(zr);
        bz = typed(z);
    }
    // --in-row-pad: each token row of q/k (Hk K elements), v/z (Hv V) followed by pad elements
    // (zero bytes).
    auto pad_rows = [&](std::vector<uint8_t>& b, int64_t row_elems) {
        if (!o.in_row_pad || b.empty()) return;
        const size_t row = size_t(row_elems) * in_es, stride = size_t(row_elems + o.in_row_pad) * in_es;
        std::vector<uint8_t> out(size_t(total) * stride, 0);
        for (int64_t r = 0; r < total; ++r) std::memcpy(&out[size_t(r) * stride], &b[size_t(r) * row], row);
        b.swap(out);
    };
    pad_rows(bq, int64_t(o.hk) * o.dk), pad_rows(bk, int64_t(o.hk) * o.dk);
    pad_rows(bv, int64_t(o.hv) * o.dv), pad_rows(bz, int64_t(o.hv) * o.dv);
    // Several copies of the inputs so a rerun does not time the L2 (60 MB on an H200).
    const size_t set_bytes = bq.size() + bk.size() + bv.size() + 2 * ng * gate_es + nout * out_es + bz.size();
    const int sets = caps.backend == GDN_BACKEND_CPU ? 1 : int(std::min<size_t>(8, 1 + (150u << 20) / set_bytes));
    struct Set { void *q, *k, *v, *g, *beta, *out, *z; };
    std::vector<Set> S(sets);
    for (auto& s : S) {
        s.q = mem.alloc(bq.size()); s.k = mem.alloc(bk.size()); s.v = mem.alloc(bv.size());
        s.g = mem.alloc(ng * gate_es); s.beta = mem.alloc(ng * gate_es); s.out = mem.alloc(nout * out_es);
        mem.upload(s.q, bq.data(), bq.size()); mem.upload(s.k, bk.data(), bk.size());
        mem.upload(s.v, bv.data(), bv.size()); mem.upload(s.g, bg.data(), ng * gate_es);
        mem.upload(s.beta, bb.data(), ng * gate_es);
        s.z = nullptr;
        if (o.out_norm) {
            s.z = mem.alloc(bz.size());
            mem.upload(s.z, bz.data(), bz.size());
        }
    }
    void* d_nw = nullptr;
    if (o.out_norm) {
        d_nw = mem.alloc(nw.size() * 4);
        mem.upload(d_nw, nw.data(), nw.size() * 4);
    }
    void* d_state = mem.alloc(nstate * 4);
    // --cold-state: more pools for the timed calls, each starting from state0.
    std::vector<void*> cold;
    if (o.cold_mb > 0 && caps.backend != GDN_BACKEND_CPU) {
        const size_t pools = std::min<size_t>(4096, ((size_t(o.cold_mb) << 20) + nstate * 4 - 1) / (nstate * 4));
        for (size_t i = 1; i < pools; ++i) {
            cold.push_back(mem.alloc(nstate * 4));
            mem.upload(cold.back(), state0.data(), nstate * 4);
        }
    }
    // --varlen: the same equal-length sequences, described by cu_seqlens (device memory on a GPU);
    // --lens: its sequences.
    void* d_cu = nullptr;
    if (o.varlen || lens) {
        std::vector<int32_t> cu(size_t(seqs) + 1);
        for (int32_t i = 0; i <= seqs; ++i) cu[size_t(i)] = int32_t(first[size_t(i)]);
        d_cu = mem.alloc(cu.size() * sizeof(int32_t));
        mem.upload(d_cu, cu.data(), cu.size() * sizeof(int32_t));
    }
    // --state-indices: sequence i in slot seqs - 1 - i.
    void* d_idx = nullptr;
    auto slot_of = [&](int32_t sq) { return o.slots ? seqs - 1 - sq : sq; };
    if (o.slots) {
        std::vector<int32_t> idx(static_cast<size_t>(seqs));
        for (int32_t i = 0; i < seqs; ++i) idx[size_t(i)] = slot_of(i);
        d_idx = mem.alloc(idx.size() * sizeof(int32_t));
        mem.upload(d_idx, idx.data(), idx.size() * sizeof(int32_t));
    }
    void* d_tok = nullptr;
    if (o.token_states) {
        std::vector<int32_t> tok(static_cast<size_t>(total));
        for (int64_t r = 0; r < total; ++r) {
            const int64_t sq = r / T, pos = r % T;
            tok[size_t(r)] = !o.block_states ? int32_t(seqs + r)
                             : (pos + 1) % GDN_STATE_BLOCK == 0 || pos == T - 1
                                 ? int32_t(seqs + sq * blocks + pos / GDN_STATE_BLOCK)
                                 : -1;
        }
        d_tok = mem.alloc(tok.size() * sizeof(int32_t));
        mem.upload(d_tok, tok.data(), tok.size() * sizeof(int32_t));
    }
    // The slot holding sequence sq's state after its last token.
    auto final_slot_of = [&](int32_t sq) -> int64_t {
        return o.block_states   ? seqs + int64_t(sq) * blocks + blocks - 1
               : o.token_states ? seqs + int64_t(sq) * T + T - 1
                                : slot_of(sq);
    };
    auto free_all = [&] {
        for (auto& s : S) {
            mem.free(s.q); mem.free(s.k); mem.free(s.v); mem.free(s.g); mem.free(s.beta); mem.free(s.out);
            if (s.z) mem.free(s.z);
        }
        if (d_nw) mem.free(d_nw);
        mem.free(d_state);
        for (void* c : cold) mem.free(c);
        if (d_cu) mem.free(d_cu);
        if (d_idx) mem.free(d_idx);
        if (d_tok) mem.free(d_tok);
    };

    gdn_problem_t p;
    gdn_problem_init(&p);
    p.num_seqs = seqs;
    p.num_tokens = total;
    p.max_seqlen = T;
    p.num_k_heads = o.hk;
    p.num_v_heads = o.hv;
    p.head_dim_k = o.dk;
    p.head_dim_v = o.dv;
    p.input_dtype = o.dtype;
    p.gate_dtype = gate_dt;
    p.output_dtype = o.out_dtype;
    p.algorithm = algo;
    p.precision = precision;
    p.state_layout = o.state_vk ? GDN_STATE_VK : GDN_STATE_KV;
    p.flags = (o.l2norm ? GDN_FLAG_QK_L2NORM : 0u) | (o.out_norm ? GDN_FLAG_OUTPUT_NORM : 0u) |
              (o.pdl ? GDN_FLAG_PDL : 0u) | (o.token_states ? GDN_FLAG_TOKEN_STATES : 0u) |
              (o.block_states ? GDN_FLAG_BLOCK_STATES : 0u);
    if (o.token_states) p.num_state_slots = int32_t(pool_slots);
    p.l2norm_eps = 1e-6f;
    p.norm_eps = 1e-6f;
    gdn_tensors_t t;
    gdn_tensors_init(&t);
    t.state = static_cast<float*>(d_state);
    t.cu_seqlens = static_cast<const int32_t*>(d_cu);
    t.state_indices = static_cast<const int32_t*>(d_idx);
    t.token_state_indices = static_cast<const int32_t*>(d_tok);
    if (o.out_row_pad) t.out_token_stride = out_tok, t.out_head_stride = o.dv;
    if (o.in_row_pad) {
        t.q_token_stride = t.k_token_stride = int64_t(o.hk) * o.dk + o.in_row_pad;
        t.q_head_stride = t.k_head_stride = o.dk;
        t.v_token_stride = t.z_token_stride = int64_t(o.hv) * o.dv + o.in_row_pad;
        t.v_head_stride = t.z_head_stride = o.dv;
    }
    auto bind = [&](const Set& s) {
        t.q = s.q; t.k = s.k; t.v = s.v; t.g = s.g; t.beta = s.beta; t.out = s.out;
        t.z = s.z;
    };
    t.norm_weight = static_cast<const float*>(d_nw);
    bind(S[0]);
    gdn_path_info_t info;
    gdn_path_info_init(&info);
    Row row{case_name, caps.backend == GDN_BACKEND_CPU ? "cpu" : caps.backend == GDN_BACKEND_CUDA ? "cuda" : "hip",
            algo == GDN_ALGO_SEQUENTIAL ? "sequential" : algo == GDN_ALGO_CHUNKED ? "chunked" : "auto",
            gdn::precision_name(precision), "", gdn::dtype_name(o.dtype), T, seqs, NAN, NAN, NAN, NAN};
    gdn_status_t st = gdn_select_path(&caps, &p, &t, &info);
    if (st != GDN_SUCCESS) {
        row.path = std::string("n/a: ") + gdn_last_error();
        free_all();
        return row;
    }
    row.path = path_name(info.path);
    if (info.path == GDN_PATH_CHUNKED_TC && info.precision != precision)
        row.path += std::string(" (") + gdn::precision_name(info.precision) + ")";
    size_t ws_bytes = 0;
    check(gdn_workspace_size(&caps, &p, &ws_bytes), "gdn_workspace_size");
    ws_bytes *= size_t(o.workspace_x);
    void* ws = ws_bytes ? mem.alloc(ws_bytes) : nullptr;

    // Accuracy: one run from state0, compared against FP64 on a few heads.
    mem.upload(d_state, state0.data(), nstate * 4);
    if (o.hash) {  // (padding between output rows: zeros, not what the allocation held)
        const std::vector<uint8_t> zero(nout * out_es);
        mem.upload(S[0].out, zero.data(), zero.size());
    }
    check(gdn_chunked_recurrence(&caps, &p, &t, ws, ws_bytes, nullptr), "gdn_chunked_recurrence");
    mem.sync();
    if (o.hash) {
        std::vector<uint8_t> out_b(nout * out_es), st_b(nstate * 4);
        mem.download(out_b.data(), S[0].out, out_b.size());
        mem.download(st_b.data(), d_state, st_b.size());
        row.hash_out = fnv1a(out_b.data(), out_b.size());
        row.hash_state = fnv1a(st_b.data(), st_b.size());
    }
    if (o.check_heads > 0) {
        std::vector<uint8_t> out_b(nout * out_es);
        std::vector<float> st_f(nstate);
        mem.download(out_b.data(), S[0].out, out_b.size());
        mem.download(st_f.data(), d_state, nstate * 4);
        double eo = 0, es = 0;
        for (int c = 0; c < std::min(o.check_heads, o.hv); ++c) {
            const int h = c == 0 ? 0 : (o.hv - 1) * c / std::max(1, o.check_heads - 1);
            const int kh = h / (o.hv / o.hk);
            for (int32_t sq = 0; sq < seqs; ++sq) {
                // The head alone, as a problem of one key and one value head.
                const int64_t Tq = first[size_t(sq) + 1] - first[size_t(sq)];
                gdn::Shape sh{};
                sh.num_seqs = 1; sh.num_tokens = Tq; sh.max_seqlen = Tq;
                sh.num_k_heads = 1; sh.num_v_heads = 1; sh.group = 1;
                sh.head_dim_k = o.dk; sh.head_dim_v = o.dv;
                sh.input_dtype = sh.gate_dtype = sh.output_dtype = GDN_DTYPE_F32;
                sh.num_state_slots = 1;
                sh.state_layout = p.state_layout;  // the initial and final states both in it
                sh.scale = 1.0f / std::sqrt(float(o.dk));
                sh.l2norm_eps = sh.norm_eps = 1e-6f;
                sh.flags = p.flags;
                std::vector<float> hq(size_t(Tq) * o.dk), hk(size_t(Tq) * o.dk), hv(size_t(Tq) * o.dv), hg(Tq), hb(Tq);
                std::vector<float> hz(o.out_norm ? size_t(Tq) * o.dv : 0);
                for (int64_t tt = 0; tt < Tq; ++tt) {
                    const int64_t row_t = first[size_t(sq)] + tt;
                    std::copy_n(&q[(size_t(row_t) * o.hk + kh) * o.dk], o.dk, &hq[size_t(tt) * o.dk]);
                    std::copy_n(&k[(size_t(row_t) * o.hk + kh) * o.dk], o.dk, &hk[size_t(tt) * o.dk]);
                    std::copy_n(&v[(size_t(row_t) * o.hv + h) * o.dv], o.dv, &hv[size_t(tt) * o.dv]);
                    if (o.out_norm) std::copy_n(&z[(size_t(row_t) * o.hv + h) * o.dv], o.dv, &hz[size_t(tt) * o.dv]);
                    hg[tt] = g[size_t(row_t) * o.hv + h];
                    hb[tt] = beta[size_t(row_t) * o.hv + h];
                }
                gdn::Tensors ht{};
                ht.q = hq.data(); ht.q_stride = {o.dk, o.dk};
                ht.k = hk.data(); ht.k_stride = {o.dk, o.dk};
                ht.v = hv.data(); ht.v_stride = {o.dv, o.dv};
                ht.g = hg.data(); ht.g_stride = {1, 1};
                ht.beta = hb.data(); ht.beta_stride = {1, 1};
                if (o.out_norm) {
                    ht.z = hz.data(); ht.z_stride = {o.dv, o.dv};
                    ht.norm_weight = nw.data();
                }
                ht.state_slot_stride = int64_t(o.dk) * o.dv;
                std::vector<double> ro(size_t(Tq) * o.dv), rs(size_t(o.dk) * o.dv);
                const float* s0 = &state0[(size_t(slot_of(sq)) * o.hv + h) * o.dk * o.dv];
                std::copy_n(s0, rs.size(), rs.begin());
                gdn::ref::run(sh, ht, ro.data(), rs.data());
                double mo = 0, dmo = 0, ms = 0, dms = 0;
                for (int64_t tt = 0; tt < Tq; ++tt)
                    for (int j = 0; j < o.dv; ++j) {
                        const double want = ro[size_t(tt) * o.dv + j];
                        const double got = gdn::load_element(out_b.data(), o.out_dtype,
                                                             (first[size_t(sq)] + tt) * out_tok + h * int64_t(o.dv) + j);
                        mo = std::max(mo, std::abs(want));
                        dmo = std::isnan(got) ? INFINITY : std::max(dmo, std::abs(got - want));
                    }
                const float* sf = &st_f[(size_t(final_slot_of(sq)) * o.hv + h) * o.dk * o.dv];
                for (size_t i = 0; i < rs.size(); ++i) {
                    ms = std::max(ms, std::abs(rs[i]));
                    dms = std::isnan(sf[i]) ? INFINITY : std::max(dms, std::abs(double(sf[i]) - rs[i]));
                }
                if (mo > 0) eo = std::max(eo, dmo / mo);  // (an empty sequence has no output)
                es = std::max(es, dms / ms);
            }
        }
        row.err_out = eo;
        row.err_state = es;
    }

    // Timing: warm-up, then --reps launches; median.
    size_t calls = 0;  // --cold-state: pool 0, then the copies, in turn, warm-up included
    auto launch = [&](int i, void* stream = nullptr) {
        bind(S[size_t(i) % S.size()]);
        if (!cold.empty()) {
            const size_t c = calls++ % (cold.size() + 1);
            t.state = static_cast<float*>(c == 0 ? d_state : cold[c - 1]);
        }
        check(gdn_chunked_recurrence(&caps, &p, &t, ws, ws_bytes, stream), "gdn_chunked_recurrence");
    };
    for (int i = 0; i < o.warmup; ++i) launch(i);
    mem.sync();
    std::vector<double> dev_ms, host_us;
#if defined(GDN_BENCH_WITH_CUDA)
    cudaEvent_t e0, e1;
    if (caps.backend == GDN_BACKEND_CUDA) { cudaEventCreate(&e0); cudaEventCreate(&e1); }
    if (o.graph && caps.backend == GDN_BACKEND_CUDA) {
        // --graph: one burst captured (its calls' pools and input sets fixed in the nodes),
        // then the graph launched --reps times between two events on its stream.
        cudaStream_t gs = nullptr;
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        auto cuda_ok = [](cudaError_t e, const char* what) {
            if (e != cudaSuccess) {
                std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
                std::exit(1);
            }
        };
        cuda_ok(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
        cuda_ok(cudaStreamBeginCapture(gs, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        for (int b = 0; b < o.burst; ++b) launch(b, gs);
        cuda_ok(cudaStreamEndCapture(gs, &graph), "cudaStreamEndCapture");
        cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
        for (int w = 0; w < 2; ++w) cuda_ok(cudaGraphLaunch(exec, gs), "cudaGraphLaunch");
        cuda_ok(cudaStreamSynchronize(gs), "cudaStreamSynchronize");
        for (int r = 0; r < o.reps; ++r) {
            cudaEventRecord(e0, gs);
            const auto c0 = std::chrono::steady_clock::now();
            cuda_ok(cudaGraphLaunch(exec, gs), "cudaGraphLaunch");
            const auto c1 = std::chrono::steady_clock::now();
            cudaEventRecord(e1, gs);
            cuda_ok(cudaEventSynchronize(e1), "cudaEventSynchronize");
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            dev_ms.push_back(double(ms) / o.burst);
            host_us.push_back(std::chrono::duration<double, std::micro>(c1 - c0).count() / o.burst);
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(gs);
    }
#endif
    for (int r = 0; r < o.reps && !(o.graph && caps.backend == GDN_BACKEND_CUDA); ++r) {
        const auto h0 = std::chrono::steady_clock::now();
#if defined(GDN_BENCH_WITH_CUDA)
        if (caps.backend == GDN_BACKEND_CUDA) {
            cudaEventRecord(e0, nullptr);
            const auto c0 = std::chrono::steady_clock::now();
            for (int b = 0; b < o.burst; ++b) launch(r * o.burst + b);
            const auto c1 = std::chrono::steady_clock::now();
            cudaEventRecord(e1, nullptr);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            dev_ms.push_back(double(ms) / o.burst);
            host_us.push_back(std::chrono::duration<double, std::micro>(c1 - c0).count() / o.burst);
            continue;
        }
#endif
        launch(r);
        const auto h1 = std::chrono::steady_clock::now();
        dev_ms.push_back(std::chrono::duration<double, std::milli>(h1 - h0).count());
        host_us.push_back(std::chrono::duration<double, std::micro>(h1 - h0).count());
    }
    auto median = [](std::vector<double> x) {
        std::sort(x.begin(), x.end());
        return x[x.size() / 2];
    };
#if defined(GDN_BENCH_WITH_CUDA)
    if (caps.backend == GDN_BACKEND_CUDA) { cudaEventDestroy(e0); cudaEventDestroy(e1); }
#endif
    row.device_ms = median(dev_ms);
    row.device_ms_min = *std::min_element(dev_ms.begin(), dev_ms.end());
    row.device_ms_max = *std::max_element(dev_ms.begin(), dev_ms.end());
    row.timed = int(dev_ms.size());
    row.host_us = median(host_us);
    if (ws) mem.free(ws);
    free_all();
    return row;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    gdn_caps_t caps;
    gdn_caps_init(&caps);
    if (o.backend_given) {
        check(gdn_probe(o.backend, 0, &caps), "gdn_probe");
    } else {
        const gdn_backend_t order[] = {GDN_BACKEND_CUDA, GDN_BACKEND_HIP, GDN_BACKEND_CPU};
        for (gdn_backend_t b : order)
            if (gdn_probe(b, 0, &caps) == GDN_SUCCESS) break;
    }
#if !defined(GDN_BENCH_WITH_CUDA)
    if (caps.backend == GDN_BACKEND_CUDA) {
        std::fprintf(stderr, "this gdn-bench was built without the CUDA runtime\n");
        return 1;
    }
#endif
    if (caps.backend == GDN_BACKEND_HIP) {
        std::fprintf(stderr, "gdn-bench does not allocate HIP memory yet; see docs/hip.md\n");
        return 1;
    }
    if (caps.backend == GDN_BACKEND_CPU && o.threads > 0) caps.multiprocessor_count = o.threads;
    std::string precs;
    for (gdn_precision_t pr : o.precisions) precs += std::string(precs.empty() ? "" : ",") + gdn::precision_name(pr);
    std::printf("gdn-bench %u.%u.%u on %s %s (%s, %d %s), Hk=%d Hv=%d K=%d V=%d, %s in, %s out, "
                "precision %s, %d sequence(s) of T%s\n",
                GDN_VERSION_MAJOR, GDN_VERSION_MINOR, GDN_VERSION_PATCH,
                caps.backend == GDN_BACKEND_CPU ? "CPU" : "CUDA", caps.name, caps.arch,
                caps.multiprocessor_count, caps.backend == GDN_BACKEND_CPU ? "threads" : "SMs", o.hk,
                o.hv, o.dk, o.dv, gdn::dtype_name(o.dtype), gdn::dtype_name(o.out_dtype), precs.c_str(),
                o.seqs, o.varlen ? " (cu_seqlens)" : "");
    if (!o.lens.empty()) {
        int64_t sum = 0;
        for (int64_t l : o.lens) sum += l;
        std::printf("prompt: one batch of %zu sequences (--lens, cu_seqlens), %lld tokens; T below is the longest\n",
                    o.lens.size(), (long long)sum);
    }
    if (o.workspace_x > 1) std::printf("workspace: %d x gdn_workspace_size()\n", o.workspace_x);
    if (o.pdl || o.burst > 1 || o.graph)
        std::printf("timing: %d call(s) back to back per event pair%s%s\n", o.burst,
                    o.graph ? ", captured once in a CUDA graph and replayed" : "",
                    o.pdl ? ", GDN_FLAG_PDL (programmatic dependent launch)" : "");
    if (o.cold_mb > 0 && caps.backend != GDN_BACKEND_CPU)
        std::printf("state: the timed calls rotate over copies of the pool, ~%d MB in all (--cold-state)\n",
                    o.cold_mb);
    if (o.slots) std::printf("state: sequence i in pool slot N - 1 - i (--state-indices)\n");
    if (o.state_vk) std::printf("state: [V][K] layout (--state-vk)\n");
    if (o.block_states)
        std::printf("state: every 64-token block end's state kept (GDN_FLAG_BLOCK_STATES, --block-states)\n");
    else if (o.token_states)
        std::printf("state: every token's state kept (GDN_FLAG_TOKEN_STATES, --token-states)\n");
    if (o.out_row_pad) std::printf("output rows padded by %d elements\n", o.out_row_pad);
    if (o.in_row_pad) std::printf("q/k/v/z rows padded by %d elements\n", o.in_row_pad);
    if (o.l2norm || o.out_norm)
        std::printf("in the call:%s%s\n", o.l2norm ? " q/k L2 norm" : "", o.out_norm ? " output norm (z, w)" : "");

    std::vector<Row> rows;
    struct Job { int64_t T; int32_t seqs; gdn_algorithm_t algo; gdn_precision_t precision; const char* name; };
    std::vector<Job> jobs;
    // The sequential path is FP32 under every precision: it runs once, with the first one.
    const std::vector<int64_t> prompts =
        o.lens.empty() ? o.tokens : std::vector<int64_t>{*std::max_element(o.lens.begin(), o.lens.end())};
    const int32_t prompt_seqs = o.lens.empty() ? o.seqs : int32_t(o.lens.size());
    for (int64_t T : prompts)
        for (gdn_algorithm_t a : o.algos)
            for (size_t i = 0; i < (a == GDN_ALGO_SEQUENTIAL ? 1 : o.precisions.size()); ++i)
                jobs.push_back({T, prompt_seqs, a, o.precisions[i], "prompt"});
    for (int32_t n : o.decode) jobs.push_back({1, n, GDN_ALGO_AUTO, o.precisions[0], "decode"});
    for (size_t j = 0; j < jobs.size(); ++j) {
        std::fprintf(stderr, "\r[%zu/%zu] %s T=%lld seqs=%d ...        ", j + 1, jobs.size(), jobs[j].name,
                     (long long)jobs[j].T, jobs[j].seqs);
        std::fflush(stderr);
        rows.push_back(run_case(o, caps, jobs[j].T, jobs[j].seqs, jobs[j].algo, jobs[j].precision, jobs[j].name));
    }
    std::fprintf(stderr, "\r%60s\r", "");

    std::printf("\n%-7s %7s %5s %-11s %-9s %-17s %12s %10s %11s %11s\n", "case", "T", "seqs", "algorithm",
                "precision", "path", "device ms", "host us", "err out", "err state");
    for (const Row& r : rows)
        std::printf("%-7s %7lld %5d %-11s %-9s %-17s %12.4f %10.1f %11.2e %11.2e\n", r.case_name.c_str(),
                    (long long)r.tokens, r.seqs, r.algo.c_str(), r.precision.c_str(),
                    r.path.substr(0, 17).c_str(), r.device_ms, r.host_us, r.err_out, r.err_state);
    for (const Row& r : rows)  // the spread behind each median (a row that could not run has none)
        if (r.timed > 1)
            std::printf("spread %s T=%lld seqs=%d %s %s: device ms min %.4f median %.4f max %.4f over %d timings\n",
                        r.case_name.c_str(), (long long)r.tokens, r.seqs, r.algo.c_str(), r.precision.c_str(),
                        r.device_ms_min, r.device_ms, r.device_ms_max, r.timed);
    if (o.hash)
        for (const Row& r : rows)
            if (r.path.rfind("n/a", 0) != 0)  // (a row that could not run has no hash)
                std::printf("hash %s T=%lld seqs=%d %s %s %s: out %016llx state %016llx\n", r.case_name.c_str(),
                            (long long)r.tokens, r.seqs, r.algo.c_str(), r.precision.c_str(), r.dtype.c_str(),
                            (unsigned long long)r.hash_out, (unsigned long long)r.hash_state);
    for (const Row& r : rows)  // a path that could not run: its whole reason
        if (r.path.rfind("n/a", 0) == 0)
            std::printf("T=%lld %s %s: %s\n", (long long)r.tokens, r.algo.c_str(), r.precision.c_str(),
                        r.path.c_str());
    // Speed-up of chunked (each precision) over sequential at each T.
    for (int64_t T : o.tokens) {
        double seq = NAN;
        for (const Row& r : rows)
            if (r.tokens == T && r.case_name == "prompt" && r.algo == "sequential") seq = r.device_ms;
        for (const Row& r : rows)
            if (r.tokens == T && r.case_name == "prompt" && r.algo == "chunked" && std::isfinite(seq) &&
                std::isfinite(r.device_ms))
                std::printf("T=%lld: chunked (%s, %s): %.2fx the speed of sequential\n", (long long)T,
                            r.precision.c_str(), r.path.c_str(), seq / r.device_ms);
    }
    if (!o.csv.empty()) {
        FILE* f = std::fopen(o.csv.c_str(), "w");
        if (!f) { std::perror(o.csv.c_str()); return 1; }
        std::fprintf(f, "case,backend,tokens,seqs,algorithm,precision,path,dtype,device_ms,host_us,err_out,"
                        "err_state,device_ms_min,device_ms_max\n");
        for (const Row& r : rows)
            std::fprintf(f, "%s,%s,%lld,%d,%s,%s,\"%s\",%s,%.6f,%.3f,%.3e,%.3e,%.6f,%.6f\n", r.case_name.c_str(),
                         r.backend.c_str(), (long long)r.tokens, r.seqs, r.algo.c_str(), r.precision.c_str(),
                         r.path.c_str(), r.dtype.c_str(), r.device_ms, r.host_us, r.err_out, r.err_state,
                         r.device_ms_min, r.device_ms_max);
        std::fclose(f);
    }
    if (!o.json.empty()) {
        FILE* f = std::fopen(o.json.c_str(), "w");
        if (!f) { std::perror(o.json.c_str()); return 1; }
        std::fprintf(f, "{\"device\": \"%s\", \"arch\": \"%s\", \"rows\": [\n", caps.name, caps.arch);
        for (size_t i = 0; i < rows.size(); ++i) {
            const Row& r = rows[i];
            auto num = [](double x) { return std::isfinite(x) ? fmt::format("{:.6g}", x) : std::string("null"); };
            std::fprintf(f,
                         "  {\"case\": \"%s\", \"backend\": \"%s\", \"tokens\": %lld, \"seqs\": %d, "
                         "\"algorithm\": \"%s\", \"precision\": \"%s\", \"path\": \"%s\", \"dtype\": \"%s\", "
                         "\"device_ms\": %s, \"host_us\": %s, \"err_out\": %s, \"err_state\": %s, "
                         "\"device_ms_min\": %s, \"device_ms_max\": %s}%s\n",
                         r.case_name.c_str(), r.backend.c_str(), (long long)r.tokens, r.seqs,
                         r.algo.c_str(), r.precision.c_str(), r.path.c_str(), r.dtype.c_str(), num(r.device_ms).c_str(),
                         num(r.host_us).c_str(), num(r.err_out).c_str(), num(r.err_state).c_str(),
                         num(r.device_ms_min).c_str(), num(r.device_ms_max).c_str(), i + 1 < rows.size() ? "," : "");
        }
        std::fprintf(f, "]}\n");
        std::fclose(f);
    }
    if (o.max_err > 0) {
        if (o.check_heads < 1) {
            std::fprintf(stderr, "--max-err needs --check-heads 1 or more\n");
            return 1;
        }
        int bad = 0;
        for (const Row& r : rows) {
            if (r.path.rfind("n/a", 0) == 0) continue;  // not run here (its reason is printed above)
            if (!(r.err_out <= o.max_err) || !(r.err_state <= o.max_err)) {
                std::printf("above --max-err %.1e: %s T=%lld seqs=%d %s %s: out %.2e, state %.2e\n", o.max_err,
                            r.case_name.c_str(), (long long)r.tokens, r.seqs, r.algo.c_str(),
                            r.precision.c_str(), r.err_out, r.err_state);
                ++bad;
            }
        }
        if (bad) return 1;
        std::printf("every checked row within %.1e of FP64\n", o.max_err);
    }
    return 0;
}
