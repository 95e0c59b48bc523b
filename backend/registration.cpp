// Registers lazyfuse's kernels with the dispatcher when the library loads.
#include "backend/logging.h"
#include "backend/op_traits.h"
#include "backend/recorder.h"
#include "backend/transfers.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <memory>

namespace lazyfuse {
namespace {

TORCH_LIBRARY_IMPL(_, Lazy, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&recordOp>());
}

TORCH_LIBRARY_IMPL(aten, Lazy, m) {
  m.impl("_to_copy", torch::CppFunction::makeFromBoxedFunction<&toCopyKernel>());
  m.impl("copy", torch::CppFunction::makeFromBoxedFunction<&copyKernel>());
  m.impl("copy_", torch::CppFunction::makeFromBoxedFunction<&copyKernel>());
  m.impl("lift_fresh", TORCH_FN(liftFresh));
  m.impl("native_batch_norm", torch::CppFunction::makeFromBoxedFunction<&nativeBatchNormKernel>());
}

class SilentWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

bool hasAlias(const c10::FunctionSchema& schema) {
  for (const auto& arg : schema.arguments()) {
    if (arg.alias_info() != nullptr) return true;
  }
  for (const auto& ret : schema.returns()) {
    if (ret.alias_info() != nullptr) return true;
  }
  return false;
}

// Note [Recording composite ops]
// A backend fallback only sees ops that have no kernel for the Lazy key. Ops with a
// CompositeExplicitAutograd(NonFunctional) kernel would instead run that kernel on lazy tensors:
// a *_copy view would call the view op and clone, a *_scatter would write into a view. So every
// functional (alias-free) aten op with such a kernel gets the recorder registered directly on
// Lazy: it becomes one node, and its composite kernel runs on real tensors at execution.
bool recordsDirectly(const c10::OperatorHandle& op) {
  if (op.hasKernelForDispatchKey(c10::DispatchKey::Lazy)) return false;
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
      !op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional)) {
    return false;
  }
  const c10::FunctionSchema& schema = op.schema();
  if (schema.returns().empty() || hasAlias(schema)) return false;
  return !traitsOf(op).eager;
}

// See Note [In-place result casts]. Only where AutogradLazy runs autograd's kernel, which ours
// hands the op on to: an op with a CompositeImplicitAutograd kernel runs that one there instead
// (matmul.out decomposes into mm.out, which is checked), even when it has an Autograd kernel.
bool checksWrittenCasts(const c10::OperatorHandle& op) {
  if (traitsOf(op).functional_name.empty()) return false;
  if (op.hasKernelForDispatchKey(c10::DispatchKey::AutogradLazy)) return false;
  if (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) return false;
  return op.hasKernelForDispatchKey(c10::DispatchKey::Autograd);
}

std::string qualifiedName(const c10::OperatorName& name) {
  std::string qualified = name.name.substr(6);
  if (!name.overload_name.empty()) qualified += "." + name.overload_name;
  return qualified;
}

void registerDynamicKernels() {
  static auto lazy_lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::Lazy, __FILE__, __LINE__);
  static auto autograd_lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::AutogradLazy, __FILE__, __LINE__);
  int count = 0;
  int checked = 0;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op) continue;
    if (recordsDirectly(*op)) {
      lazy_lib->impl(qualifiedName(name).c_str(),
                     torch::CppFunction::makeFromBoxedFunction<&recordOp>());
      ++count;
    }
    if (checksWrittenCasts(*op)) {
      autograd_lib->impl(qualifiedName(name).c_str(),
                         torch::CppFunction::makeFromBoxedFunction<&writtenCastKernel>());
      ++checked;
    }
  }
  LF_LOG_DEBUG("recorder registered directly for ", count, " composite ops, cast checks for ",
               checked, " in-place and out= ops");

  // See Note [Functionalizing copy_ across devices]. Replacing a kernel warns; this one is meant.
  SilentWarnings silent;
  c10::WarningUtils::WarningHandlerGuard guard(&silent);
  static auto functionalize_lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::Functionalize, __FILE__, __LINE__);
  functionalize_lib->impl("copy_", TORCH_FN(functionalizeCopy));
}

const bool registered = (registerDynamicKernels(), true);

}  // namespace
}  // namespace lazyfuse
