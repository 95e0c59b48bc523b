#pragma once
// scaled_dot_product_attention on lazy tensors: the hardware device's fused kernel where eager
// would run it. See Note [Fused attention] in backend/attention.cpp.

#include <ATen/core/operator_name.h>
#include <torch/library.h>

namespace lazyfuse {

/// Whether `name` is the op registerAttentionKernels gives kernels of ours.
bool isFusedAttentionOp(const c10::OperatorName& name);

/// Registers the attention kernel on AutogradLazy and on Functionalize (InferenceMode).
void registerAttentionKernels(torch::Library& autograd_lib, torch::Library& functionalize_lib);

}  // namespace lazyfuse
