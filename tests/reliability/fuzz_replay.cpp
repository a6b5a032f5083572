// Runs the fuzz target's checks over files without libFuzzer: the committed
// seed corpus and every regression input (a ctest test in every build, the
// sanitizer build included). A violated invariant aborts, so the test fails.
//
//   gdn_fuzz_replay PATH...             files, or directories of files
//   gdn_fuzz_replay --write-seeds DIR   writes the seed corpus (the cases below)
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fuzz_case.hpp"
#include "gdn/gdn.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using gdn_fuzz::FuzzCase;

// The "small" encodings of fuzz_harness.cpp, inverted.
int32_t dim(int32_t d) {
    for (uint32_t i = 0; i < gdn_fuzz::kNumDims; ++i)
        if (gdn_fuzz::kDims[i] == d) return int32_t(i);
    std::fprintf(stderr, "no head dim %d in the menu\n", d);
    std::exit(2);
}

FuzzCase shape(int64_t T, int32_t seqs, int32_t Hk, int32_t group, int32_t K, int32_t V) {
    FuzzCase c;
    c.num_tokens = T - 1;
    c.num_seqs = seqs - 1;
    c.num_k_heads = Hk - 1;
    c.num_v_heads = group - 1;
    c.head_dim_k = dim(K);
    c.head_dim_v = dim(V);
    return c;
}

struct Seed {
    const char* name;
    std::function<FuzzCase()> make;
};

std::vector<Seed> seeds() {
    using namespace gdn_fuzz;
    std::vector<Seed> s;
    s.push_back({"tiny", [] { return FuzzCase(); }});
    s.push_back({"prefill-f32-packed", [] { return shape(40, 1, 1, 2, 16, 16); }});
    s.push_back({"chunked-forced-three-seqs", [] {
                     FuzzCase c = shape(70, 3, 2, 2, 16, 16);
                     c.algorithm = GDN_ALGO_CHUNKED;
                     c.cu_mode = 1;
                     c.cu_bytes[0] = 10, c.cu_bytes[1] = 200, c.cu_bytes[2] = 40;
                     c.threads = 1;
                     return c;
                 }});
    s.push_back({"auto-chunked-lowp-fp16", [] {
                     FuzzCase c = shape(80, 1, 1, 2, 16, 16);
                     c.precision = GDN_PRECISION_FP16;
                     return c;
                 }});
    s.push_back({"auto-chunked-lowp-bf16-two-seqs", [] {
                     FuzzCase c = shape(96, 2, 1, 1, 32, 16);
                     c.precision = GDN_PRECISION_BF16;
                     c.algorithm = GDN_ALGO_CHUNKED;
                     return c;
                 }});
    s.push_back({"bf16-strided-views", [] {
                     FuzzCase c = shape(33, 1, 2, 3, 17, 33);
                     c.input_dtype = GDN_DTYPE_BF16;
                     c.gate_dtype = 1;  // = input dtype
                     c.output_dtype = GDN_DTYPE_BF16;
                     c.tensor[kQ].stride_mode = 3, c.tensor[kQ].token_stride = 6145;
                     c.tensor[kK].stride_mode = 1, c.tensor[kK].token_stride = 3;
                     c.tensor[kV].stride_mode = 2, c.tensor[kV].token_stride = 1;
                     c.tensor[kOut].stride_mode = 1, c.tensor[kOut].head_stride = 5;
                     c.tensor[kG].stride_mode = 3, c.tensor[kG].token_stride = 7;
                     c.tensor[kBeta].stride_mode = 2;
                     c.algorithm = GDN_ALGO_CHUNKED;
                     return c;
                 }});
    s.push_back({"f16-in-f32-gate-f16-out-vk-state", [] {
                     FuzzCase c = shape(65, 1, 1, 3, 8, 12);
                     c.input_dtype = GDN_DTYPE_F16;
                     c.gate_dtype = 0;
                     c.output_dtype = GDN_DTYPE_F16;
                     c.state_layout = GDN_STATE_VK;
                     return c;
                 }});
    s.push_back({"decode-batch-with-padding", [] {
                     FuzzCase c = shape(4, 4, 1, 2, 16, 16);
                     c.num_state_slots = 5;
                     c.idx_mode = 2;
                     c.idx_bytes[0] = 3, c.idx_bytes[1] = 0x5;
                     c.sfz_mode = 1, c.sfz_bits = 0x2;
                     return c;
                 }});
    s.push_back({"all-features-interleaved", [] {
                     FuzzCase c = shape(48, 2, 2, 2, 16, 8);
                     c.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_GATE_FROM_RAW | GDN_FLAG_BETA_FROM_LOGITS |
                               GDN_FLAG_OUTPUT_NORM;
                     c.head_mapping = GDN_HEADS_INTERLEAVED;
                     c.cu_mode = 2;  // one sequence empty
                     c.tensor[kZ].stride_mode = 1;
                     c.l2norm_eps = 2, c.norm_eps = 1, c.scale = 1;
                     return c;
                 }});
    s.push_back({"slot-stride-padded-rotated", [] {
                     FuzzCase c = shape(24, 3, 1, 1, 32, 16);
                     c.num_state_slots = 4;
                     c.state.stride_mode = 1, c.state.token_stride = 17;
                     c.idx_mode = 1, c.idx_bytes[0] = 2;
                     c.workspace_mode = 1;
                     c.threads = 3;
                     return c;
                 }});
    // Faults, each of which must be rejected with nothing written.
    auto fault = [&](const char* name, std::function<void(FuzzCase&)> f) {
        s.push_back({name, [f] {
                         FuzzCase c = shape(40, 2, 1, 2, 16, 16);
                         c.cu_mode = 1;
                         c.cu_bytes[0] = 1, c.cu_bytes[1] = 3;
                         f(c);
                         return c;
                     }});
    };
    fault("fault-null-q", [](FuzzCase& c) { c.tensor[kQ].ptr_mode = 4; });
    fault("fault-misaligned-v", [](FuzzCase& c) { c.tensor[kV].ptr_mode = 5; });
    fault("fault-misaligned-state", [](FuzzCase& c) { c.state.ptr_mode = 7; });
    fault("fault-negative-k-stride", [](FuzzCase& c) {
        c.tensor[kK].stride_mode = 5;
        c.tensor[kK].token_stride = -16;
        c.tensor[kK].head_stride = 16;
    });
    fault("fault-short-head-stride", [](FuzzCase& c) {
        c.tensor[kV].stride_mode = 5;
        c.tensor[kV].token_stride = 32;
        c.tensor[kV].head_stride = 15;
    });
    fault("fault-out-rows-overlap", [](FuzzCase& c) {
        c.tensor[kOut].stride_mode = 5;
        c.tensor[kOut].token_stride = 16;
        c.tensor[kOut].head_stride = 16;
    });
    fault("fault-out-aliases-v", [](FuzzCase& c) { c.tensor[kOut].ptr_mode = 6, c.tensor[kOut].alias = kV; });
    fault("fault-state-aliases-k", [](FuzzCase& c) { c.state.ptr_mode = 6, c.state.alias = kK; });
    fault("fault-q-inside-out", [](FuzzCase& c) { c.tensor[kQ].ptr_mode = 6, c.tensor[kQ].alias = kOut; });
    fault("fault-out-aliases-cu-seqlens", [](FuzzCase& c) {
        c.tensor[kOut].ptr_mode = 6, c.tensor[kOut].alias = kBufCuSeqlens;
    });
    fault("fault-state-aliases-z", [](FuzzCase& c) {
        c.flags = GDN_FLAG_OUTPUT_NORM;
        c.state.ptr_mode = 6, c.state.alias = kZ;
    });
    fault("fault-workspace-short", [](FuzzCase& c) { c.workspace_mode = 2; });
    fault("fault-workspace-null", [](FuzzCase& c) { c.workspace_mode = 3; });
    fault("fault-workspace-misaligned", [](FuzzCase& c) { c.workspace_mode = 4; });
    fault("fault-cu-seqlens-off", [](FuzzCase& c) { c.cu_mode = 3, c.cu_bytes[1] = 1, c.cu_bytes[2] = 0x80; });
    fault("fault-cu-seqlens-raw", [](FuzzCase& c) { c.cu_mode = 4, c.cu_bytes[1] = 50; });
    fault("fault-slot-out-of-range", [](FuzzCase& c) { c.idx_mode = 3, c.idx_bytes[0] = 0, c.idx_bytes[1] = 2; });
    fault("fault-slot-twice", [](FuzzCase& c) {
        c.num_state_slots = 3;
        c.idx_mode = 3, c.idx_bytes[0] = 1, c.idx_bytes[1] = 1;
    });
    fault("fault-state-indices-misaligned", [](FuzzCase& c) { c.idx_mode = 4; });
    fault("fault-null-dt-bias-raw-gate", [](FuzzCase& c) {
        c.flags = GDN_FLAG_GATE_FROM_RAW;
        c.param_ptr_mode[1] = 4;
    });
    fault("fault-problem-struct-size-future", [](FuzzCase& c) {
        c.problem_ops = 2, c.problem_struct_size = sizeof(gdn_problem_t) + 8;
    });
    fault("old-tensors-struct-size", [](FuzzCase& c) {
        c.tensors_ops = 2, c.tensors_struct_size = offsetof(gdn_tensors_t, state_slot_stride);
        c.cu_mode = 0;
    });
    fault("fault-caps-null", [](FuzzCase& c) { c.caps_ops = 1; });
    fault("fault-caps-backend-hip", [](FuzzCase& c) { c.caps_ops = 4, c.caps_backend = GDN_BACKEND_HIP; });
    fault("fault-caps-backend-invalid", [](FuzzCase& c) { c.caps_ops = 4, c.caps_backend = 77; });
    fault("fault-tensors-null", [](FuzzCase& c) { c.tensors_ops = 1; });
    fault("fault-max-seqlen-short", [](FuzzCase& c) { c.max_seqlen = 4 * 5 + 1; });
    // Raw values: absurd sizes, strides and floats.
    s.push_back({"raw-huge-strides", [] {
                     FuzzCase c = shape(3, 1, 1, 2, 16, 16);
                     c.tensor[kV].stride_mode = 4;
                     c.tensor[kV].token_stride = int64_t(1) << 61;
                     c.tensor[kV].head_stride = int64_t(1) << 40;
                     c.state.stride_mode = 2, c.state.token_stride = int64_t(1) << 62;
                     c.num_state_slots = 3;
                     return c;
                 }});
    s.push_back({"raw-huge-head-stride-packed-token", [] {
                     FuzzCase c = shape(3, 1, 1, 3, 16, 16);
                     c.tensor[kOut].stride_mode = 4;
                     c.tensor[kOut].token_stride = 0;
                     c.tensor[kOut].head_stride = int64_t(1) << 62;
                     return c;
                 }});
    s.push_back({"raw-sizes", [] {
                     FuzzCase c;
                     c.raw_fields = kRawNumSeqs | kRawNumTokens | kRawHeads | kRawHeadDims | kRawSlots;
                     c.num_seqs = 1 << 20;
                     c.num_tokens = int64_t(1) << 30;
                     c.num_k_heads = 64, c.num_v_heads = 1 << 16;
                     c.head_dim_k = 128, c.head_dim_v = 128;
                     c.num_state_slots = 1 << 30;
                     return c;
                 }});
    s.push_back({"raw-tokens-2p31", [] {
                     FuzzCase c = shape(1, 1, 1, 1, 16, 16);
                     c.raw_fields = kRawNumTokens;
                     c.num_tokens = int64_t(1) << 31;
                     return c;
                 }});
    s.push_back({"raw-enums-and-flags", [] {
                     FuzzCase c = shape(8, 1, 1, 1, 16, 16);
                     c.raw_fields = kRawEnums | kRawFlags;
                     c.input_dtype = -1, c.flags = 1u << 20, c.algorithm = 9;
                     return c;
                 }});
    s.push_back({"raw-floats-nan-scale", [] {
                     FuzzCase c = shape(8, 1, 1, 1, 16, 16);
                     c.raw_fields = kRawFloats;
                     c.scale = 0x7fc00000u, c.l2norm_eps = 0xbf800000u;
                     return c;
                 }});
    s.push_back({"special-values", [] {
                     FuzzCase c = shape(70, 1, 1, 2, 16, 16);
                     c.value_mode = 3;
                     c.flags = GDN_FLAG_QK_L2NORM | GDN_FLAG_OUTPUT_NORM;
                     return c;
                 }});
    s.push_back({"probe-raw-backend-and-status", [] {
                     FuzzCase c = shape(16, 1, 1, 1, 16, 16);
                     c.caps_ops = 64 | 4;
                     c.caps_backend = -1, c.caps_warp = -7;
                     return c;
                 }});
    s.push_back({"probe-cpu-device-3", [] {
                     FuzzCase c = shape(16, 1, 1, 1, 16, 16);
                     c.caps_ops = 64;
                     c.caps_device = 3, c.caps_warp = 3;
                     return c;
                 }});
    s.push_back({"caps-threads-raw", [] {
                     FuzzCase c = shape(32, 2, 1, 2, 16, 16);
                     c.caps_ops = 16 | 32;
                     c.caps_mp = 3, c.caps_warp = 0;
                     return c;
                 }});
    // Appended, so that the seeds above keep their file names.
    s.push_back({"auto-chunked-bf16x3-bf16-in", [] {
                     FuzzCase c = shape(90, 2, 1, 2, 16, 16);
                     c.precision = GDN_PRECISION_BF16X3;  // the CPU serves it with its FP32 chunked path
                     c.input_dtype = GDN_DTYPE_BF16;
                     c.gate_dtype = 1;  // = input dtype
                     return c;
                 }});
    // GDN_FLAG_TOKEN_STATES (0.4): a speculative step of 3 sequences x 4
    // tokens in a pool of 16 slots, some tokens' states kept; each sequence's
    // own slot at its last token (a plain run's results) over a varlen batch
    // with padding; raw bytes as slots.
    s.push_back({"token-states-spec-step", [] {
                     FuzzCase c = shape(12, 3, 1, 2, 16, 16);
                     c.flags = GDN_FLAG_TOKEN_STATES;
                     c.raw_fields = kRawSlots;
                     c.num_state_slots = 16;
                     c.idx_mode = 1, c.idx_bytes[0] = 5;
                     c.tsi_mode = 1;
                     c.tsi_bytes[0] = 0x12, c.tsi_bytes[1] = 3, c.tsi_bytes[2] = 9;
                     return c;
                 }});
    s.push_back({"token-states-own-slot-last-varlen", [] {
                     FuzzCase c = shape(40, 3, 1, 2, 16, 8);
                     c.flags = GDN_FLAG_TOKEN_STATES;
                     c.num_state_slots = 5;
                     c.cu_mode = 1;
                     c.cu_bytes[0] = 10, c.cu_bytes[1] = 60, c.cu_bytes[2] = 30;
                     c.idx_mode = 2, c.idx_bytes[0] = 1, c.idx_bytes[1] = 0x2;
                     c.tsi_mode = 2;
                     return c;
                 }});
    s.push_back({"token-states-bytes-as-slots", [] {
                     FuzzCase c = shape(8, 2, 1, 1, 16, 16);
                     c.flags = GDN_FLAG_TOKEN_STATES;
                     c.num_state_slots = 5;
                     c.idx_mode = 1;
                     c.tsi_mode = 3;
                     c.tsi_bytes[0] = 2, c.tsi_bytes[1] = 0xFF, c.tsi_bytes[2] = 3, c.tsi_bytes[3] = 4;
                     return c;
                 }});
    // GDN_FLAG_BLOCK_STATES (0.5): a 96-token prefill on the CPU's chunked
    // path, some tokens' states named (those at token 63 and the last read);
    // 94 tokens whose raw bytes name slots past the pool at tokens the flag
    // does not read (token 63 reads byte 7: slot 2; token 93 byte 5: slot 3).
    s.push_back({"block-states-prefill-chunked", [] {
                     FuzzCase c = shape(96, 1, 1, 2, 16, 16);
                     c.flags = GDN_FLAG_TOKEN_STATES | GDN_FLAG_BLOCK_STATES;
                     c.raw_fields = kRawSlots;
                     c.num_state_slots = 16;
                     c.idx_mode = 1, c.idx_bytes[0] = 5;
                     c.tsi_mode = 1;
                     c.tsi_bytes[0] = 0x12, c.tsi_bytes[1] = 3, c.tsi_bytes[2] = 9;
                     return c;
                 }});
    s.push_back({"block-states-junk-ignored", [] {
                     FuzzCase c = shape(94, 1, 1, 1, 16, 16);
                     c.flags = GDN_FLAG_TOKEN_STATES | GDN_FLAG_BLOCK_STATES;
                     c.num_state_slots = 5;
                     c.tsi_mode = 3;
                     c.tsi_bytes[0] = 100, c.tsi_bytes[1] = 0, c.tsi_bytes[2] = 0x7F, c.tsi_bytes[3] = 0x80;
                     c.tsi_bytes[4] = 4, c.tsi_bytes[5] = 3, c.tsi_bytes[6] = 1, c.tsi_bytes[7] = 2;
                     return c;
                 }});
    // GDN_PRECISION_FP16X3 (0.6) on f16 inputs: the CPU serves it with its
    // FP32 chunked path. The value after it (6, the harness's draw past the
    // last valid precision) is rejected.
    s.push_back({"auto-chunked-fp16x3-f16-in", [] {
                     FuzzCase c = shape(90, 2, 1, 2, 16, 16);
                     c.precision = GDN_PRECISION_FP16X3;
                     c.input_dtype = GDN_DTYPE_F16;
                     c.gate_dtype = 1;  // = input dtype
                     c.output_dtype = GDN_DTYPE_F16;
                     return c;
                 }});
    s.push_back({"fault-precision-after-fp16x3", [] {
                     FuzzCase c = shape(40, 1, 1, 2, 16, 16);
                     c.precision = 6;
                     return c;
                 }});
    return s;
}

bool is_dir(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

int write_seeds(const std::string& dir) {
    if (!is_dir(dir)) {
        std::fprintf(stderr, "%s is not a directory\n", dir.c_str());
        return 2;
    }
    int i = 0;
    for (const Seed& seed : seeds()) {
        FuzzCase c = seed.make();
        gdn_fuzz::Writer w;
        gdn_fuzz::transfer(w, c);
        char name[256];
        std::snprintf(name, sizeof name, "%s/seed-%02d-%s", dir.c_str(), i++, seed.name);
        std::FILE* f = std::fopen(name, "wb");
        if (!f || std::fwrite(w.bytes.data(), 1, w.bytes.size(), f) != w.bytes.size()) {
            std::fprintf(stderr, "cannot write %s\n", name);
            return 2;
        }
        std::fclose(f);
    }
    std::printf("wrote %d seeds into %s\n", i, dir.c_str());
    return 0;
}

bool run_file(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) {
        std::fprintf(stderr, "cannot read %s\n", path.c_str());
        return false;
    }
    std::vector<uint8_t> data;
    unsigned char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.insert(data.end(), buf, buf + n);
    std::fclose(f);
    std::fprintf(stderr, "%s (%zu bytes)\n", path.c_str(), data.size());
    LLVMFuzzerTestOneInput(data.data(), data.size());
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 3 && std::strcmp(argv[1], "--write-seeds") == 0) return write_seeds(argv[2]);
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s PATH... | --write-seeds DIR\n", argv[0]);
        return 2;
    }
    int inputs = 0;
    for (int a = 1; a < argc; ++a) {
        const std::string path = argv[a];
        if (!is_dir(path)) {
            if (!run_file(path)) return 1;
            ++inputs;
            continue;
        }
        std::vector<std::string> files;
        if (DIR* d = opendir(path.c_str())) {
            while (dirent* e = readdir(d))
                if (e->d_name[0] != '.') files.push_back(path + "/" + e->d_name);
            closedir(d);
        }
        std::sort(files.begin(), files.end());
        for (const std::string& file : files) {
            if (!run_file(file)) return 1;
            ++inputs;
        }
    }
    // A replay of nothing proves nothing.
    if (inputs == 0) {
        std::fprintf(stderr, "no inputs found\n");
        return 1;
    }
    std::printf("%d inputs replayed, every invariant held\n", inputs);
    return 0;
}
