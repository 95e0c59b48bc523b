// Note [Composite ops recorded whole]
// matmul and linear are CompositeImplicitAutograd: on lazy tensors they decomposed into the
// reshapes, transposes and expands around one mm, bmm or addmm, each of them an op recorded
// through functionalization (`q @ k.transpose(-2, -1)` of 4-d tensors in a decoding step
// recorded 6 ops, a Linear of a 3-d input 4), where eager's dispatch of those views is nearly
// free. Where autograd records nothing (grad mode off, no input requiring grad nor carrying a
// forward-mode tangent, or InferenceMode, where calls reach Functionalize directly), the
// kernels below record the op as one node instead: on AutogradLazy they go below autograd; on
// Functionalize (lazy-only) they unwrap the inputs as PyTorch's functionalization does and
// record the op on Lazy (recordOp); the plan runs it as an extern step, ATen's own matmul or
// linear on the hardware device, the kernel eager runs (its output laid out as Meta infers it
// from the same composite). Where autograd records, the op is recorded whole too, with a
// derivative of ours (Note [Derivatives of ops recorded whole]), or the composite runs as
// before, so that each part gets its derivative. Pinned by test_whole_composites.py.
#include "backend/whole_composites.h"

#include "backend/device.h"
#include "backend/functionalize_kernels.h"
#include "backend/recorder.h"
#include "backend/whole_composite_grads.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <string_view>

namespace lazyfuse {
namespace {

constexpr std::string_view kWholeOps[] = {"aten::matmul", "aten::linear"};

/// Whether autograd would record anything for a call with these arguments.
bool autogradRecords(c10::ArrayRef<c10::IValue> args) {
  const bool grad_mode = at::GradMode::is_enabled();
  for (const c10::IValue& v : args) {
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) continue;
    if ((grad_mode && t.requires_grad()) || t._fw_grad(/*level=*/0).defined()) return true;
  }
  return false;
}

void autogradKernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                    torch::jit::Stack* stack) {
  if (autogradRecords(torch::jit::last(*stack, op.schema().arguments().size()))) {
    if (recordWholeWithGrad(op, keys, stack)) return;  // Note [Derivatives of ops recorded whole]
    return op.callBoxedForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd, *stack);
  }
  // On to the keys below autograd, as an autograd kernel with nothing to record goes.
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
}

/// Unwraps the functional tensors among the arguments (synced), records the op on their values
/// and wraps its result, as PyTorch's functionalization kernel of a functional op does.
void functionalizeKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  namespace F = at::functionalization::impl;
  const size_t n = op.schema().arguments().size();
  bool functional = false;
  for (size_t k = stack->size() - n; k < stack->size(); ++k) {
    c10::IValue& v = (*stack)[k];
    if (!v.isTensor() || !F::isFunctionalTensor(v.toTensor())) continue;
    F::sync(v.toTensor());
    v = F::from_functional_tensor(v.toTensor());
    functional = true;
  }
  {
    at::AutoDispatchSkipFunctionalize skip;
    op.callBoxed(stack);
  }
  if (functional) stack->back() = F::to_functional_tensor(stack->back().toTensor());
}

}  // namespace

bool isWholeCompositeOp(const c10::OperatorName& name) {
  if (!name.overload_name.empty()) return false;
  for (std::string_view op : kWholeOps) {
    if (name.name == op) return true;
  }
  return false;
}

void registerWholeCompositeKernels(torch::Library& lazy_lib, torch::Library& autograd_lib,
                                   torch::Library& functionalize_lib) {
  for (std::string_view name : kWholeOps) {
    const std::string op_name(name.substr(name.find("::") + 2));
    lazy_lib.impl(op_name.c_str(), torch::CppFunction::makeFromBoxedFunction<&recordOp>());
    autograd_lib.impl(op_name.c_str(),
                      torch::CppFunction::makeFromBoxedFunction<&autogradKernel>());
    implLazyOnFunctionalize(
        functionalize_lib,
        c10::Dispatcher::singleton().findSchemaOrThrow(std::string(name).c_str(), ""),
        c10::KernelFunction::makeFromBoxedFunction<&functionalizeKernel>());
  }
}

}  // namespace lazyfuse
