#include "backend/functionalize_kernels.h"

#include "backend/device.h"
#include "backend/lazy_tensor.h"
#include "backend/op_traits.h"
#include "lazy_ir/check.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

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

// Note [Lazy calls that skipped functionalization]
// A lazy tensor is a FunctionalTensorWrapper over lazy data (Note [Lazy data]), so each op on it
// passes Functionalize before it reaches the Lazy key, where lazyfuse records it on the unwrapped
// data. A call made with Functionalize excluded skips that: inside a __torch_dispatch__ (and
// PyTorch's own C++ one of DTensor), PyTorch excludes every key above Python, Functionalize
// among them, so a DTensor whose local tensor is lazy ran `add_` on the wrapper at the Lazy key.
// The wrapper's value changed, but no update reached its storage: its base and the other views
// of it kept the old values, and the next sync put them back (FSDP2's sharded parameters, local
// views of its padded buffer, lost every optimizer step). Lazy tensors have no meaning outside
// functionalization, so a call from a __torch_dispatch__ that reaches a Lazy kernel with a
// wrapper among its arguments is dispatched again with Functionalize no longer excluded (the
// other exclusions stay: autograd was done above), and runs as it would have without the
// exclusion. lazyfuse's own calls with Functionalize skipped are left as they are. Pinned by
// test_functionalization_skipped.py.
bool redispatchThroughFunctionalize(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // A __torch_dispatch__ runs with every key above Python excluded, PythonTLSSnapshot among them;
  // lazyfuse's own calls below functionalization (AutoDispatchSkipFunctionalize) exclude
  // Functionalize alone and mean to act on the wrappers' data as they are.
  if (!c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::PythonTLSSnapshot) ||
      !c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Functionalize)) {
    return false;
  }
  const size_t num_args = op.schema().arguments().size();
  bool wrapped = false;
  for (size_t k = stack->size() - num_args; k < stack->size() && !wrapped; ++k) {
    forEachTensor((*stack)[k], [&](const at::Tensor& t) {
      wrapped = wrapped || (t.defined() && at::functionalization::impl::isFunctionalTensor(t));
    });
  }
  if (!wrapped) return false;
  struct Unexclude {
    Unexclude() {
      c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey::Functionalize, false);
    }
    ~Unexclude() {
      c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey::Functionalize, true);
    }
  } unexclude;
  op.callBoxed(stack);
  return true;
}

}  // namespace lazyfuse
