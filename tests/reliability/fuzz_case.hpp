// The fuzz input format: one FuzzCase, its fields read in order from the
// fuzzer's bytes (missing bytes read as zero). The same transfer() function
// reads a case from bytes and writes one back, so the seed corpus is made from
// FuzzCase values (fuzz_replay --write-seeds) and can never drift from the
// decoder.
//
// Most fields have two meanings chosen by a bit of `raw_fields` (or a mode
// byte): "small" — a value picked from a short menu of plausible sizes, so
// that many inputs get past validation and run — or "raw", the bytes taken as
// they come, so absurd values (negative, 2^62, NaN) reach the validator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace gdn_fuzz {

// The tensors a pointer can name, in the order of FuzzCase::tensor.
enum TensorId : int { kQ, kK, kV, kG, kBeta, kOut, kZ, kNumStrided };
// Further buffers a pointer can alias (FuzzCase ptr_mode 6).
enum BufferId : int {
    kBufState = kNumStrided,
    kBufCuSeqlens,
    kBufStateIndices,
    kBufStartFromZero,
    kBufALog,
    kBufDtBias,
    kBufNormWeight,
    kBufTokenStates,  // token_state_indices (GDN_FLAG_TOKEN_STATES)
    kNumBuffers
};

// The head dims a "small" K or V is picked from (index % kNumDims).
constexpr int32_t kDims[] = {1, 2, 3, 4, 5, 7, 8, 12, 15, 16, 17, 31, 32, 33, 48, 64, 128};
constexpr uint32_t kNumDims = sizeof kDims / sizeof kDims[0];

// Bits of raw_fields: which problem fields are taken raw.
enum RawField : uint32_t {
    kRawNumSeqs = 1u << 0,
    kRawNumTokens = 1u << 1,
    kRawMaxSeqlen = 1u << 2,
    kRawHeads = 1u << 3,
    kRawHeadDims = 1u << 4,
    kRawEnums = 1u << 5,
    kRawSlots = 1u << 6,
    kRawFlags = 1u << 7,
    kRawFloats = 1u << 8,
};

struct TensorCase {
    uint8_t ptr_mode = 0;     // %8: 0-3 valid, 4 NULL, 5 +1 byte, 6 alias (target alias % kNumBuffers), 7 +2 bytes
    uint8_t alias = 0;
    uint8_t stride_mode = 0;  // %6: 0 packed, 1 padded rows, 2 head-major, 3 fused-projection row, 4 raw, 5 raw 16-bit
    int64_t token_stride = 0;
    int64_t head_stride = 0;
};

struct FuzzCase {
    // caps: bit0 NULL, bit1 struct_size raw, bit2 backend raw, bit3 device raw,
    // bit4 multiprocessor_count raw, bit5 warp_size raw
    uint8_t caps_ops = 0;
    uint64_t caps_struct_size = 0;
    int32_t caps_backend = 0, caps_device = 0, caps_mp = 0, caps_warp = 0;
    uint8_t threads = 0;  // caps.multiprocessor_count = 1 + threads % 4 unless raw

    // problem: bit0 NULL, bit1 struct_size raw
    uint8_t problem_ops = 0;
    uint64_t problem_struct_size = 0;
    uint32_t raw_fields = 0;
    int32_t num_seqs = 0;
    int64_t num_tokens = 0, max_seqlen = 0;
    int32_t num_k_heads = 0, num_v_heads = 0, head_dim_k = 0, head_dim_v = 0;
    int32_t head_mapping = 0, input_dtype = 0, gate_dtype = 0, output_dtype = 0, state_layout = 0;
    int32_t num_state_slots = 0, algorithm = 0, precision = 0;
    uint32_t flags = 0;
    uint32_t scale = 0, l2norm_eps = 0, norm_eps = 0;  // float bits when raw, a menu index otherwise

    // tensors: bit0 NULL, bit1 struct_size raw
    uint8_t tensors_ops = 0;
    uint64_t tensors_struct_size = 0;
    TensorCase tensor[kNumStrided];
    TensorCase state;          // token_stride: the slot stride (stride_mode %3: 0 packed, 1 padded, 2 raw)
    uint8_t cu_mode = 0;       // %5: 0 NULL, 1 lengths, 2 lengths with an empty sequence, 3 one entry off, 4 raw
    uint8_t cu_bytes[8] = {};
    uint8_t idx_mode = 0;      // %5: 0 NULL, 1 rotation, 2 rotation with padding, 3 bytes as slots, 4 ptr faults
    uint8_t idx_bytes[8] = {};
    uint8_t sfz_mode = 0;      // %3: 0 NULL, 1 bits, 2 ptr faults
    uint8_t sfz_bits = 0;
    uint8_t param_ptr_mode[3] = {};  // A_log, dt_bias, norm_weight: as TensorCase::ptr_mode
    uint8_t workspace_mode = 0;  // %6: exact, larger, one byte short, NULL, misaligned, NULL and 0 bytes
    uint8_t value_mode = 0;      // %4: 0-2 plain values, 3 with NaN/inf/huge/subnormal sprinkled in
    uint32_t value_seed = 0;
    // Since 0.4, read last (older inputs end before them and read 0: NULL).
    uint8_t tsi_mode = 0;      // %5: 0 NULL, 1 slots for some tokens, 2 each sequence's own slot at its
                               // last token, 3 bytes as slots, 4 as 1 but misaligned by 2 bytes
    uint8_t tsi_bytes[8] = {};
};

// Reads from bytes; past the end every field reads as zero.
class Reader {
public:
    Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
    template <class T>
    void io(T& x) {
        unsigned char buf[sizeof(T)] = {};
        const size_t n = pos_ < size_ ? (size_ - pos_ < sizeof(T) ? size_ - pos_ : sizeof(T)) : 0;
        if (n) std::memcpy(buf, data_ + pos_, n);
        pos_ += sizeof(T);
        std::memcpy(&x, buf, sizeof(T));
    }

private:
    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
};

class Writer {
public:
    template <class T>
    void io(T& x) {
        const unsigned char* p = reinterpret_cast<const unsigned char*>(&x);
        bytes.insert(bytes.end(), p, p + sizeof(T));
    }
    std::vector<uint8_t> bytes;
};

template <class IO>
void transfer(IO& io, TensorCase& t) {
    io.io(t.ptr_mode);
    io.io(t.alias);
    io.io(t.stride_mode);
    io.io(t.token_stride);
    io.io(t.head_stride);
}

template <class IO>
void transfer(IO& io, FuzzCase& c) {
    io.io(c.caps_ops);
    io.io(c.caps_struct_size);
    io.io(c.caps_backend);
    io.io(c.caps_device);
    io.io(c.caps_mp);
    io.io(c.caps_warp);
    io.io(c.threads);
    io.io(c.problem_ops);
    io.io(c.problem_struct_size);
    io.io(c.raw_fields);
    io.io(c.num_seqs);
    io.io(c.num_tokens);
    io.io(c.max_seqlen);
    io.io(c.num_k_heads);
    io.io(c.num_v_heads);
    io.io(c.head_dim_k);
    io.io(c.head_dim_v);
    io.io(c.head_mapping);
    io.io(c.input_dtype);
    io.io(c.gate_dtype);
    io.io(c.output_dtype);
    io.io(c.state_layout);
    io.io(c.num_state_slots);
    io.io(c.algorithm);
    io.io(c.precision);
    io.io(c.flags);
    io.io(c.scale);
    io.io(c.l2norm_eps);
    io.io(c.norm_eps);
    io.io(c.tensors_ops);
    io.io(c.tensors_struct_size);
    for (TensorCase& t : c.tensor) transfer(io, t);
    transfer(io, c.state);
    io.io(c.cu_mode);
    for (uint8_t& b : c.cu_bytes) io.io(b);
    io.io(c.idx_mode);
    for (uint8_t& b : c.idx_bytes) io.io(b);
    io.io(c.sfz_mode);
    io.io(c.sfz_bits);
    for (uint8_t& b : c.param_ptr_mode) io.io(b);
    io.io(c.workspace_mode);
    io.io(c.value_mode);
    io.io(c.value_seed);
    io.io(c.tsi_mode);
    for (uint8_t& b : c.tsi_bytes) io.io(b);
}

// The one entry point: decodes a FuzzCase and checks every invariant;
// on a violation prints what and aborts (libFuzzer's crash).
void run_case(const FuzzCase& c);

}  // namespace gdn_fuzz
