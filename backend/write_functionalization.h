#pragma once

// Kernels of ours that make in-place and out= ops on lazy tensors write what eager writes, where
// PyTorch's functionalization (or a composite kernel under it) does not.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

namespace lazyfuse {

/// Runs `op`'s CompositeImplicitAutograd kernel; an out= argument it did not write, because the
/// kernel returned another tensor in its place, then gets that tensor's value, and is returned.
/// See Note [Composite out= kernels under functionalization].
void decomposeKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

/// Registers decomposeKernel on `autograd_lib` (aten, AutogradLazy) for an out= op that
/// decomposes there (it has a CompositeImplicitAutograd kernel and no autograd one). Returns
/// whether it registered one. See Note [Composite out= kernels under functionalization].
bool registerOutDecomposition(const c10::OperatorHandle& op, torch::Library& autograd_lib);

/// Registers a kernel on `functionalize_lib` (aten, Functionalize) for an out= op that also writes
/// arguments that are not out=, which hands each written argument its own result. Returns whether
/// it registered one. See Note [Out= ops that write other arguments too].
bool registerOutFunctionalization(const c10::OperatorHandle& op, torch::Library& functionalize_lib);

/// Functionalize kernel of polygamma_. See Note [Functionalizing polygamma_].
at::Tensor& functionalizePolygamma(at::Tensor& self, int64_t n);

/// Kernel of _has_compatible_shallow_copy_type (the check of `x.data = t`) on AutogradLazy and
/// Functionalize. See Note [set_data across InferenceMode].
bool hasCompatibleShallowCopyType(const at::Tensor& self, const at::Tensor& from);

}  // namespace lazyfuse
