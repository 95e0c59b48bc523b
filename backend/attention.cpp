// Note [Fused attention]
// scaled_dot_product_attention is CompositeImplicitAutograd: eager asks the device's
// _fused_sdp_choice_stub which kernel to run (flash, memory-efficient, cuDNN, or the math
// composite), and that stub has no entry for the Lazy device. So on lazy tensors the op always
// decomposed into the math composite: two matmuls, a softmax and the masks, which materializes
// the [L, S] attention matrix of every head, and the same again in backward.
// The kernel below, on AutogradLazy and, for InferenceMode, on Functionalize (Note [Decomposing
// on Functionalize]), asks the hardware device's own choice instead, with stand-ins of the
// inputs' sizes, strides and dtypes (uninitialized memory that nothing reads). Where eager runs
// CPU flash attention, it records _scaled_dot_product_flash_attention_for_cpu with the boolean
// mask turned into an additive one, as eager does: one node, run by ATen's kernel as an extern
// step, and one node for its backward. Everything else runs the composite as before: the math
// choice, dropout (a random op: the composite records it like any other), key and value with
// fewer heads than the query, double (whose logsumexp the kernel returns as double where its
// meta kernel says float), and a CUDA target. On CUDA the fused kernels return values the
// recorder does not model yet (the integer results of the flash and cuDNN kernels, and the
// generator state the memory-efficient kernel returns on the CPU); that waits for a GPU to test
// it on. Pinned by test_ops.py::test_attention_*.
#include "backend/attention.h"

#include "backend/device.h"
#include "backend/functionalize_kernels.h"

#include <ATen/SDPBackend.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/masked_fill.h>
#include <ATen/ops/zeros_like.h>
#include <torch/csrc/jit/runtime/operator.h>

#include <limits>
#include <optional>

namespace lazyfuse {
namespace {

// scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None,
//     float dropout_p=0.0, bool is_causal=False, *, float? scale=None, bool enable_gqa=False)
constexpr size_t kNumArgs = 8;

struct AttentionArgs {
  at::Tensor query, key, value;
  std::optional<at::Tensor> mask;
  double dropout_p = 0.0;
  bool is_causal = false;
  std::optional<double> scale;
  bool enable_gqa = false;
};

AttentionArgs readArgs(const torch::jit::Stack& stack) {
  auto args = torch::jit::last(stack, kNumArgs);
  AttentionArgs a;
  a.query = args[0].toTensor();
  a.key = args[1].toTensor();
  a.value = args[2].toTensor();
  if (args[3].isTensor() && args[3].toTensor().defined()) a.mask = args[3].toTensor();
  a.dropout_p = args[4].toDouble();
  a.is_causal = args[5].toBool();
  if (!args[6].isNone()) a.scale = args[6].toDouble();
  a.enable_gqa = args[7].toBool();
  return a;
}

/// A tensor on `device` with the sizes, strides and dtype of `t`, its memory never read.
at::Tensor standIn(const at::Tensor& t, c10::Device device) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(device));
}

/// Whether eager, given tensors like these on the hardware device, would run CPU flash attention,
/// and the recorded flash node computes what it would.
bool runsFlashOnCpu(const AttentionArgs& a) {
  const c10::Device device = hardwareDevice();
  if (!device.is_cpu() || a.dropout_p != 0.0) return false;
  if (!isLazy(a.query) || !isLazy(a.key) || !isLazy(a.value)) return false;
  if (a.mask && !isLazy(*a.mask)) return false;
  if (a.query.is_nested() || a.query.dim() != 4 || a.key.dim() != 4 || a.value.dim() != 4) {
    return false;
  }
  if (a.key.size(1) != a.query.size(1) || a.value.size(1) != a.query.size(1)) return false;
  const c10::ScalarType dtype = a.query.scalar_type();
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf) return false;
  std::optional<at::Tensor> mask;
  if (a.mask) mask = standIn(*a.mask, device);
  const int64_t choice = at::_fused_sdp_choice(standIn(a.query, device), standIn(a.key, device),
                                               standIn(a.value, device), mask, a.dropout_p,
                                               a.is_causal, a.scale, a.enable_gqa);
  return choice == static_cast<int64_t>(at::SDPBackend::flash_attention);
}

/// A boolean mask (true: attend) as the additive mask of `dtype` that the fused kernels take.
std::optional<at::Tensor> additiveMask(const std::optional<at::Tensor>& mask,
                                       c10::ScalarType dtype) {
  if (!mask || mask->scalar_type() != at::kBool) return mask;
  return at::masked_fill(at::zeros_like(*mask, mask->options().dtype(dtype)),
                         at::logical_not(*mask), -std::numeric_limits<double>::infinity());
}

void attentionKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const AttentionArgs a = readArgs(*stack);
  if (!runsFlashOnCpu(a)) {
    return op.callBoxedForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd, *stack);
  }
  at::Tensor out = std::get<0>(at::_scaled_dot_product_flash_attention_for_cpu(
      a.query, a.key, a.value, a.dropout_p, a.is_causal,
      additiveMask(a.mask, a.query.scalar_type()), a.scale));
  torch::jit::drop(*stack, kNumArgs);
  torch::jit::push(*stack, std::move(out));
}

}  // namespace

bool isFusedAttentionOp(const c10::OperatorName& name) {
  return name.name == "aten::scaled_dot_product_attention" && name.overload_name.empty();
}

void registerAttentionKernels(torch::Library& autograd_lib, torch::Library& functionalize_lib) {
  const char* name = "scaled_dot_product_attention";
  autograd_lib.impl(name, torch::CppFunction::makeFromBoxedFunction<&attentionKernel>());
  implLazyOnFunctionalize(
      functionalize_lib,
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::scaled_dot_product_attention", ""),
      c10::KernelFunction::makeFromBoxedFunction<&attentionKernel>());
}

}  // namespace lazyfuse
