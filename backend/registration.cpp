// Registers lazyfuse's kernels with the dispatcher when the library loads.
#include "backend/attention.h"
#include "backend/functionalize_kernels.h"
#include "backend/host_scalars.h"
#include "backend/logging.h"
#include "backend/op_traits.h"
#include "backend/random_draws.h"
#include "backend/recorder.h"
#include "backend/storage_addresses.h"
#include "backend/transfers.h"
#include "backend/view_kernels.h"
#include "backend/whole_composites.h"
#include "backend/write_checks.h"
#include "backend/write_functionalization.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <memory>

namespace lazyfuse {
namespace {

TORCH_LIBRARY_IMPL(_, Lazy, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&recordOp>());
}

// Quantized tensors have no lazy form (refuseQuantized in recorder.cpp): an op that would make
// one on the lazy device (a factory of a quantized dtype: torch._empty_affine_quantized,
// torch.empty(dtype=torch.quint8)) dispatches to QuantizedLazy, lazy's own key.
void refuseQuantizedLazy(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  refuseQuantizedCall(op, torch::jit::last(*stack, op.schema().arguments().size()).vec(), nullptr);
  TORCH_CHECK_NOT_IMPLEMENTED(false, op.schema().name(),
                              ": no kernel of lazyfuse's for QuantizedLazy");
}

TORCH_LIBRARY_IMPL(_, QuantizedLazy, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuseQuantizedLazy>());
}

TORCH_LIBRARY_IMPL(aten, Lazy, m) {
  m.impl("_to_copy", torch::CppFunction::makeFromBoxedFunction<&toCopyKernel>());
  m.impl("copy", torch::CppFunction::makeFromBoxedFunction<&copyKernel>());
  m.impl("copy_", torch::CppFunction::makeFromBoxedFunction<&copyKernel>());
  m.impl("lift_fresh", TORCH_FN(liftFresh));
  m.impl("native_batch_norm", torch::CppFunction::makeFromBoxedFunction<&nativeBatchNormKernel>());
  m.impl("native_dropout", torch::CppFunction::makeFromBoxedFunction<&nativeDropoutKernel>());
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

// Note [Decomposing on Functionalize]
// Outside InferenceMode, an op with a CompositeImplicitAutograd kernel decomposes on the autograd
// key, above functionalization, so its ops are functionalized one by one. InferenceMode skips the
// autograd keys: such an op reaches Functionalize, whose fallback refuses in-place and out= ops
// ("Found a custom (non-ATen) operator whose output has alias annotations": x.square_()) and
// hands the others down unwrapped, so their decompositions take views of raw lazy values
// (F.linear's weight.t()), which ADInplaceOrView refuses for a normal tensor ("Cannot set
// version_counter for inference tensor"). So every aten op with a CompositeImplicitAutograd kernel
// and none for Functionalize gets one that runs the decomposition there, as PyTorch's Python
// functionalization does. Pinned by test_inference_mode.py::
// test_inference_mode_on_tensors_made_outside_it and test_errors.py::test_write_checks_*.
// The kernel is decomposeKernel, which also makes an out= decomposition write its `out` (see
// Note [Composite out= kernels under functionalization]).

bool decomposesOnFunctionalize(const c10::OperatorHandle& op) {
  return op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::Functionalize);
}

void registerDynamicKernels() {
  static auto lazy_lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::Lazy, __FILE__, __LINE__);
  static auto functionalize_lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::Functionalize, __FILE__, __LINE__);
  static auto autograd_lib = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::AutogradLazy, __FILE__, __LINE__);
  // Replacing a kernel warns; on Functionalize, ours are meant to (see Note [In-place result
  // casts], Note [Decomposing on Functionalize] and Note [Functionalizing copy_ across devices]).
  SilentWarnings silent;
  c10::WarningUtils::WarningHandlerGuard guard(&silent);
  // Before they are wrapped below: see Note [Functionalizing copy_ across devices] and Note
  // [Functionalizing polygamma_].
  // Every kernel on Functionalize acts on lazy calls only: Note [Lazy-only kernels on
  // Functionalize].
  auto& dispatcher = c10::Dispatcher::singleton();
  implLazyOnFunctionalize(
      *functionalize_lib, dispatcher.findSchemaOrThrow("aten::copy_", ""),
      c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(functionalizeCopy)));
  implLazyOnFunctionalize(
      *functionalize_lib, dispatcher.findSchemaOrThrow("aten::polygamma_", ""),
      c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(functionalizePolygamma)));
  registerHostScalarKernels(*lazy_lib, *functionalize_lib);
  registerAttentionKernels(*autograd_lib, *functionalize_lib);  // Note [Fused attention]
  // Note [Composite ops recorded whole]
  registerWholeCompositeKernels(*lazy_lib, *autograd_lib, *functionalize_lib);
  // See Note [set_data across InferenceMode]; on Functionalize before the loop below would give
  // it decomposeKernel there.
  implLazyOnFunctionalize(
      *functionalize_lib,
      dispatcher.findSchemaOrThrow("aten::_has_compatible_shallow_copy_type", ""),
      c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(hasCompatibleShallowCopyType)));
  autograd_lib->impl("_has_compatible_shallow_copy_type", TORCH_FN(hasCompatibleShallowCopyType));
  int count = 0;
  int checked = 0;
  int decomposed = 0;
  int outs = 0;
  int views = 0;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op) continue;
    if (recordsDirectly(*op)) {
      lazy_lib->impl(implName(name).c_str(),
                     torch::CppFunction::makeFromBoxedFunction<&recordOp>());
      ++count;
    }
    if (registerOutFunctionalization(*op, *functionalize_lib)) ++outs;
    if (registerOutDecomposition(*op, *autograd_lib)) ++outs;
    if (registerWriteKernel(*op, *functionalize_lib)) ++checked;
    if (decomposesOnFunctionalize(*op) && !isFusedAttentionOp(name) && !isWholeCompositeOp(name)) {
      implLazyOnFunctionalize(*functionalize_lib, *op,
                              c10::KernelFunction::makeFromBoxedFunction<&decomposeKernel>());
      ++decomposed;
    }
    // Last for the op: over its write kernel (Note [Addresses of lazy storages]).
    if (registerViewAddressKernel(*op, *functionalize_lib)) ++views;
  }
  registerRandomTwinKernels(*lazy_lib);  // after the loop: Note [Random ops draw when recorded]
  registerStorageKernels(*functionalize_lib);          // over the write checks
  registerAsStridedScatterKernel(*functionalize_lib);  // Note [as_strided_scatter of a view]
  registerLikeOnDeviceKernels(*functionalize_lib);
  LF_LOG_DEBUG("recorder registered directly for ", count, " composite ops, write checks for ",
               checked, " in-place and out= ops, decompositions on Functionalize for ", decomposed,
               ", out= kernels of ours for ", outs, ", view address kernels for ", views);
}

const bool registered = (registerDynamicKernels(), true);

}  // namespace
}  // namespace lazyfuse
