// Shared by the CPU tests of GDN_FLAG_TOKEN_STATES and GDN_FLAG_BLOCK_STATES
// (tests/test_cpu_token_states.cpp, tests/test_cpu_block_states.cpp): the
// layouts they run, and the state pool's slots as bytes.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "support.hpp"

namespace gdn_test {

struct StateLayout {
    const char* name;
    int32_t k, v;
    gdn_state_layout_t state_layout;
    gdn_head_mapping_t mapping;
    gdn_dtype_t input;
    int64_t slot_pad, row_pad;
};

inline const StateLayout kStateLayouts[] = {
    {"K = V = 32, [K][V], grouped, f32", 32, 32, GDN_STATE_KV, GDN_HEADS_GROUPED, GDN_DTYPE_F32, 0, 0},
    {"K = 24, V = 40, [V][K], interleaved, bf16, padded slots and rows", 24, 40, GDN_STATE_VK,
     GDN_HEADS_INTERLEAVED, GDN_DTYPE_BF16, 5, 3},
    {"K = V = 64, [K][V], grouped, f16, padded slots", 64, 64, GDN_STATE_KV, GDN_HEADS_GROUPED,
     GDN_DTYPE_F16, 3, 0},
};

// The layout's fields of a Spec.
inline void apply_layout(Spec& s, const StateLayout& L) {
    s.k = L.k;
    s.v = L.v;
    s.layout = L.state_layout;
    s.mapping = L.mapping;
    s.input = L.input;
    s.slot_pad = L.slot_pad;
    s.row_pad = L.row_pad;
}

inline size_t slot_bytes(const Problem& p) { return size_t(p.spec.hv) * p.spec.k * p.spec.v * 4; }
inline const unsigned char* slot_at(const Problem& p, int32_t slot) {
    return p.state.data() + size_t(slot) * size_t(p.slot_stride) * 4;
}

// Every slot of the pool `after` outside `written`, and the gap after every
// slot's data, holds `before`'s bytes (pools as bytes, laid out as p's).
inline void check_untouched(const Problem& p, const std::vector<unsigned char>& before,
                            const std::vector<unsigned char>& after, const std::vector<char>& written) {
    for (int32_t slot = 0; slot < p.slots; ++slot) {
        const size_t from = size_t(slot) * size_t(p.slot_stride) * 4;
        const size_t to = std::min(after.size(), from + size_t(p.slot_stride) * 4);
        const size_t data_end = from + slot_bytes(p);
        INFO("slot " << slot);
        if (!written[size_t(slot)])
            CHECK(std::memcmp(after.data() + from, before.data() + from, to - from) == 0);
        else if (data_end < to)
            CHECK(std::memcmp(after.data() + data_end, before.data() + data_end, to - data_end) == 0);
    }
}
// The same for p's own pool.
inline void check_untouched(const Problem& p, const std::vector<unsigned char>& before,
                            const std::vector<char>& written) {
    check_untouched(p, before, p.state.snapshot(), written);
}

}  // namespace gdn_test
