#include "backend/functionalize_kernels.h"

#include "backend/device.h"
#include "backend/lazy_tensor.h"
#include "backend/op_traits.h"
#include "lazy_ir/check.h"

#include <memory>
#include <unordered_map>
#include <utility>

namespace lazyfuse {
namespace {

/// PyTorch's Functionalize kernel of each op lazyfuse registered one for; filled at load.
using PytorchKernels = std::unordered_map<const c10::FunctionSchema*, c10::SafeKernelFunction>;

PytorchKernels& pytorchKernels() {
  static auto* instance = new PytorchKernels();  // never destroyed: kernels outlive static dtors
  return *instance;
}

bool involvesLazy(const c10::IValue& value) {
  if (value.isDevice()) return isLazyDevice(value.toDevice());
  bool lazy = false;
  forEachTensor(value, [&](const at::Tensor& t) { lazy = lazy || isLazy(t); });
  return lazy;
}

/// Whether the call whose arguments are the last `num_args` entries of `stack` has a lazy
/// tensor (alone, in a list, or wrapped for functionalization) or the lazy device among them.
bool callInvolvesLazy(const torch::jit::Stack& stack, size_t num_args) {
  for (size_t k = stack.size() - num_args; k < stack.size(); ++k) {
    if (involvesLazy(stack[k])) return true;
  }
  return false;
}

class LazyOnly final : public c10::OperatorKernel {
 public:
  LazyOnly(c10::KernelFunction ours, const c10::SafeKernelFunction& pytorch, size_t num_args)
      : ours_(std::move(ours)), pytorch_(pytorch), num_args_(num_args) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    if (callInvolvesLazy(*stack, num_args_)) return ours_.callBoxed(op, keys, stack);
    pytorch_.callBoxed(op, keys, stack);
  }

 private:
  c10::KernelFunction ours_;
  const c10::SafeKernelFunction& pytorch_;  // in pytorchKernels(), whose nodes never move
  size_t num_args_;
};

}  // namespace

void implLazyOnFunctionalize(torch::Library& functionalize_lib, const c10::OperatorHandle& op,
                             c10::KernelFunction kernel) {
  // A second kernel of ours for the same op (writeKernel over functionalizeCopy) leaves the first
  // entry, PyTorch's own, in place: calls without lazy tensors go straight there.
  auto it = pytorchKernels()
                .emplace(&op.schema(),
                         op.getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize))
                .first;
  functionalize_lib.impl(implName(op.operator_name()).c_str(),
                         torch::CppFunction::makeFromBoxedFunctor(std::make_unique<LazyOnly>(
                             std::move(kernel), it->second, op.schema().arguments().size())));
}

bool hasLazyFunctionalizeKernel(const c10::OperatorHandle& op) {
  return pytorchKernels().count(&op.schema()) > 0;
}

const c10::SafeKernelFunction& pytorchFunctionalizeKernel(const c10::OperatorHandle& op) {
  auto it = pytorchKernels().find(&op.schema());
  LF_INTERNAL_ASSERT(it != pytorchKernels().end(), "no lazyfuse kernel on Functionalize for ",
                     op.schema().name());
  return it->second;
}

}  // namespace lazyfuse
