// Note [Derivatives of ops recorded whole]
// Where autograd records a call of matmul or linear (a training step's forward), the composite
// decomposed it into views around an mm, bmm or addmm, and autograd's derivatives of those parts
// recorded their own views: a Linear of a training step recorded 3 ops forward (detach, t,
// addmm) and about 9 backward (t of the gradient, mm, two t that undo each other for the
// weight's layout, t t mm for the input's gradient, sum and view for the bias), each op a
// recording and an autograd node, where eager's dispatch of those views is nearly free. Here the
// call is recorded below autograd as one node, as Note [Composite ops recorded whole] does without
// autograd, and its output gets a grad_fn of ours whose derivative is a few ops:
//   linear(x, W, b) = x W^T + b:  dx = g W (one matmul); dW = g2^T x2 with g and x flattened to
//     2-d (a t and an mm; reshapes only for inputs of more than 2 dims); db = g summed over all
//     dims but the last.
//   matmul(a, b), both of 2 or more dims:  da = sum_to(g b^T, a's sizes),
//     db = sum_to(a^T g, b's sizes) (a transpose and a matmul each; sum_to only where a batch
//     dim was broadcast).
// The derivative calls ATen ops, so in backward they are recorded as any op is (matmul whole,
// with grad mode off), and under create_graph they record their own grad_fns: double backward
// works. The saved inputs are SavedVariables (version checks, saved-tensor hooks, released
// after a backward without retain_graph). Calls this does not take run the composite as before:
// a forward-mode tangent on an input, an active functorch transform (its layers see the
// composite's parts), a 1-d argument of matmul or an input of linear under 2 dims, complex or
// integer dtypes, mixed dtypes, symbolic sizes, a Python subclass, or a tensor that is not lazy.
// The graph of the step is smaller, the values are eager's (the extern runs ATen's matmul and
// linear; the derivatives' products are the ones eager's AddmmBackward and MmBackward compute,
// summed in the same order up to the BLAS's blocking). Pinned by test_whole_composites.py.
#include "backend/whole_composite_grads.h"

#include "backend/device.h"

#include <ATen/ExpandUtils.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>

#include <memory>
#include <string>
#include <vector>

namespace lazyfuse {
namespace {

using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

/// A tensor argument the derivatives here take: lazy, of a real floating dtype and concrete
/// sizes, with no forward-mode tangent, and no Python subclass (or fake tensor) whose dispatch
/// would see the composite's parts.
bool takes(const at::Tensor& t) {
  return isLazy(t) && at::isFloatingType(t.scalar_type()) && !t._fw_grad(/*level=*/0).defined() &&
         !t.key_set().has(c10::DispatchKey::Python) &&
         !t.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
}

/// The dims but the last of a tensor of `dim` dims.
std::vector<int64_t> leadingDims(int64_t dim) {
  std::vector<int64_t> dims(static_cast<size_t>(dim - 1));
  for (int64_t d = 0; d + 1 < dim; ++d) dims[static_cast<size_t>(d)] = d;
  return dims;
}

/// `t` as a matrix of its last dim's columns (itself when it has 2 dims).
at::Tensor asMatrix(const at::Tensor& t) { return t.dim() == 2 ? t : t.reshape({-1, t.size(-1)}); }

class LinearBackward final : public Node {
 public:
  std::string name() const override { return "LazyLinearBackward"; }

  variable_list apply(variable_list&& grads) override {
    variable_list out(3);
    const at::Tensor& grad = grads[0];
    if (!grad.defined()) return out;
    if (task_should_compute_output(0)) out[0] = at::matmul(grad, weight_.unpack());
    if (task_should_compute_output(1)) {
      out[1] = at::mm(asMatrix(grad).t(), asMatrix(input_.unpack()));
    }
    if (task_should_compute_output(2)) out[2] = grad.sum(leadingDims(grad.dim()));
    return out;
  }

  void release_variables() override {
    input_.reset_data();
    weight_.reset_data();
  }

  SavedVariable input_;   // for the weight's gradient
  SavedVariable weight_;  // for the input's gradient
};

class MatmulBackward final : public Node {
 public:
  std::string name() const override { return "LazyMatmulBackward"; }

  variable_list apply(variable_list&& grads) override {
    variable_list out(2);
    const at::Tensor& grad = grads[0];
    if (!grad.defined()) return out;
    if (task_should_compute_output(0)) {
      out[0] = at::sum_to(at::matmul(grad, other_.unpack().transpose(-1, -2)), self_sizes_);
    }
    if (task_should_compute_output(1)) {
      out[1] = at::sum_to(at::matmul(self_.unpack().transpose(-1, -2), grad), other_sizes_);
    }
    return out;
  }

  void release_variables() override {
    self_.reset_data();
    other_.reset_data();
  }

  SavedVariable self_;   // for other's gradient
  SavedVariable other_;  // for self's gradient
  std::vector<int64_t> self_sizes_, other_sizes_;
};

/// Runs the call below autograd, where it is recorded as one node, and returns its result.
at::Tensor recordBelowAutograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                               torch::jit::Stack* stack) {
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  return stack->back().toTensor();
}

bool linearWithGrad(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                    torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 3);
  if (!args[0].isTensor() || !args[1].isTensor()) return false;
  const at::Tensor input = args[0].toTensor();
  const at::Tensor weight = args[1].toTensor();
  const at::Tensor bias = args[2].isTensor() ? args[2].toTensor() : at::Tensor();
  if (!takes(input) || !takes(weight) || input.dim() < 2 || weight.dim() != 2 ||
      weight.scalar_type() != input.scalar_type()) {
    return false;
  }
  if (bias.defined() &&
      (!takes(bias) || bias.dim() != 1 || bias.scalar_type() != input.scalar_type())) {
    return false;
  }
  const at::Tensor out = recordBelowAutograd(op, keys, stack);
  std::shared_ptr<LinearBackward> node(new LinearBackward(), torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(input, weight, bias));
  if (weight.requires_grad()) node->input_ = SavedVariable(input, /*is_output=*/false);
  if (input.requires_grad()) node->weight_ = SavedVariable(weight, /*is_output=*/false);
  torch::autograd::set_history(out, node);
  return true;
}

bool matmulWithGrad(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                    torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, 2);
  if (!args[0].isTensor() || !args[1].isTensor()) return false;
  const at::Tensor self = args[0].toTensor();
  const at::Tensor other = args[1].toTensor();
  if (!takes(self) || !takes(other) || self.dim() < 2 || other.dim() < 2 ||
      self.scalar_type() != other.scalar_type()) {
    return false;
  }
  const at::Tensor out = recordBelowAutograd(op, keys, stack);
  std::shared_ptr<MatmulBackward> node(new MatmulBackward(), torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(self, other));
  if (other.requires_grad()) node->self_ = SavedVariable(self, /*is_output=*/false);
  if (self.requires_grad()) node->other_ = SavedVariable(other, /*is_output=*/false);
  node->self_sizes_ = self.sizes().vec();
  node->other_sizes_ = other.sizes().vec();
  torch::autograd::set_history(out, node);
  return true;
}

}  // namespace

bool recordWholeWithGrad(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                         torch::jit::Stack* stack) {
  // Under a functorch transform (its layers include these keys) the layers must see the
  // composite's parts.
  if (!at::GradMode::is_enabled() ||
      c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::FuncTorchDynamicLayerFrontMode) ||
      c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::FuncTorchDynamicLayerBackMode)) {
    return false;
  }
  const c10::OperatorName& name = op.operator_name();
  if (name.name == "aten::linear") return linearWithGrad(op, keys, stack);
  if (name.name == "aten::matmul") return matmulWithGrad(op, keys, stack);
  return false;
}

}  // namespace lazyfuse
