// Host-side validation and normalisation of the ABI structs. Each function
// sets the thread-local error (naming the argument and its value) and returns
// the status; on failure the output struct is left unspecified and nothing of
// the caller's is touched.
#pragma once

#include "internal.hpp"

namespace gdn {

// Minimum struct_size accepted for each versioned struct: the fields up to
// here existed in the first release; later fields are defaulted when absent.
size_t min_struct_size_caps();
size_t min_struct_size_problem();
size_t min_struct_size_tensors();
size_t min_struct_size_path_info();

gdn_status_t read_caps(const gdn_caps_t* in, gdn_caps_t* out);
gdn_status_t read_problem(const gdn_problem_t* in, Shape* out);
gdn_status_t read_tensors(const Shape& shape, const gdn_tensors_t* in, Tensors* out);

// Checks the per-sequence arrays' contents, which must be readable from the
// host here (the CPU backend always calls it; GPU backends call it on host
// copies in GDN_FLAG_VALIDATE mode): cu_seqlens starts at 0, never decreases,
// ends at num_tokens, no sequence longer than max_seqlen; slot indices below
// num_state_slots, no slot named twice; with token_state_indices (not null
// only under GDN_FLAG_TOKEN_STATES), its entries below num_state_slots, no
// slot written twice, none another sequence's own slot (with
// GDN_FLAG_BLOCK_STATES: the entries it reads, at block ends and last tokens).
gdn_status_t check_sequence_arrays(const Shape& shape, const int32_t* cu_seqlens,
                                   const int32_t* state_indices,
                                   const int32_t* token_state_indices = nullptr);

// Bytes of one element.
inline size_t dtype_size(gdn_dtype_t t) { return t == GDN_DTYPE_F32 ? 4 : 2; }
const char* dtype_name(gdn_dtype_t t);
// "fp32", "tf32x3", "fp16", "bf16", "bf16x3", "fp16x3" ("?" for a value gdn.h does not name).
const char* precision_name(gdn_precision_t p);

}  // namespace gdn
