#pragma once

// Note [Aux outputs on the CPU]
// A few ops return auxiliary outputs (statistics saved for backward, embedding_bag bookkeeping)
// whose shape or dtype their meta kernel does not predict for the CPU kernel, which the
// recorder's Meta inference relies on. The meta kernels promise what the CUDA kernels return:
// batch norm's save_mean/save_invstd as [C] in the accumulation dtype, layer norm's mean/rstd in
// float32, and the functional batch norms' updated running stats in float32 too. The CPU kernels
// return [0] when batch norm does not train, statistics in the input dtype for bf16/f16 unless a
// parameter is float32, and running stats in the dtype of the running stats they were given.
// The batch norm backward meta kernels return grad_input even where output_mask leaves it out;
// the CPU and CUDA kernels both return an undefined tensor. A lazy tensor must claim what eager
// returns, so the recorder corrects these outputs after Meta inference: the statistics on a CPU
// hardware device, the masked-out gradients on every device; embedding_bag's CPU outputs depend
// on which kernel path it takes, so on the CPU it runs eagerly instead. log_sigmoid_forward's
// buffer is the other way round: its meta kernel promises the CPU kernel's, of the input's
// shape; the CUDA kernel returns an empty one. multilabel_margin_loss_forward's unreduced loss
// of a 1-D input is 0-dim in eager's kernels and [1] in its meta kernel. Pinned by the OpInfo
// sweep (native_batch_norm, native_layer_norm, nn.functional.embedding_bag,
// nn.functional.logsigmoid), the module sweep (nn.MultiLabelMarginLoss) and test_aux_outputs.py,
// on a GPU too (bench/gpu/run.sh).

#include "backend/op_traits.h"

#include <ATen/core/stack.h>

namespace lazyfuse {

/// How an op's outputs on the hardware device relate to its meta kernel's.
AuxOutputs auxOutputsOf(const std::string& op_name);

/// Replaces the outputs that a Meta redispatch of `traits`' op left in `returns` with what the
/// kernel of hardware device `device` returns for `args`: normalization statistics (on the CPU),
/// or undefined masked-out gradients (everywhere).
void correctAuxOutputs(const OpTraits& traits, const torch::jit::Stack& args,
                       torch::jit::Stack& returns, const c10::Device& device);

}  // namespace lazyfuse
