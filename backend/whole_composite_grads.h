#pragma once
// matmul and linear of lazy tensors recorded as one node where autograd records them too, with a
// derivative of ours: see Note [Derivatives of ops recorded whole] in
// backend/whole_composite_grads.cpp.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace lazyfuse {

/// Records `op` (aten::matmul or aten::linear, its arguments on `stack`) below autograd as one
/// node and gives its result a grad_fn of ours. False, with the stack untouched, where the call
/// is not one it takes (the composite runs then).
bool recordWholeWithGrad(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                         torch::jit::Stack* stack);

}  // namespace lazyfuse
