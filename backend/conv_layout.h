#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <vector>

namespace lazyfuse {

/// Lays out the Meta `results` of the convolution op `op`, called with the Meta arguments
/// `meta_args`, as eager's kernel on the hardware device lays out its results. See Note
/// [Convolution layout].
void applyConvolutionLayout(const c10::OperatorHandle& op, const torch::jit::Stack& meta_args,
                            std::vector<at::Tensor>& results);

}  // namespace lazyfuse
