#pragma once
// matmul and linear of lazy tensors recorded as one node where autograd records nothing: see
// Note [Composite ops recorded whole] in backend/whole_composites.cpp.

#include <ATen/core/operator_name.h>
#include <torch/library.h>

namespace lazyfuse {

/// Whether `name` is an op registerWholeCompositeKernels gives kernels of ours.
bool isWholeCompositeOp(const c10::OperatorName& name);

/// Registers, for each such op, the kernel on AutogradLazy, the lazy-only one on Functionalize
/// and recordOp on Lazy.
void registerWholeCompositeKernels(torch::Library& lazy_lib, torch::Library& autograd_lib,
                                   torch::Library& functionalize_lib);

}  // namespace lazyfuse
