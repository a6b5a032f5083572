// The FP64 reference: the recurrence of DESIGN.md §1 token by token in double
// precision, with every optional feature (q/k L2 norm, gate from raw inputs,
// β from logits, gated RMSNorm epilogue) also applied in double. Used by the
// tests and the benchmark as the ground truth; not part of the C ABI.
#pragma once

#include <vector>

#include "internal.hpp"

namespace gdn::ref {

// Host tensors as for the CPU backend. `out` is written packed
// [num_tokens][Hv][V] (rows of padding sequences are left as given); `state`
// holds the pool with the same element indexing as tensors.state (slot
// stride included) and is read and updated in place, following the same
// rules as the library (padding slots untouched, start_from_zero).
void run(const Shape& shape, const Tensors& tensors, double* out, double* state);

}  // namespace gdn::ref
