#pragma once

// The foreach ops that take their scalars packed in a CPU tensor (_foreach_addcdiv.Tensor,
// _foreach_addcmul.Tensor and their in-place forms) on lazy tensors. See Note [Packed scalars].

#include <torch/library.h>

namespace lazyfuse {

/// Registers the packed-scalars kernels: the out-of-place ops on `lazy_lib` (aten, Lazy), the
/// in-place ones on `functionalize_lib` (aten, Functionalize).
void registerPackedScalarKernels(torch::Library& lazy_lib, torch::Library& functionalize_lib);

}  // namespace lazyfuse
