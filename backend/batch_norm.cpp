// Note [native_batch_norm writes its running stats]
// native_batch_norm updates running_mean and running_var in place when it trains, but its schema
// has no alias annotation saying so: functionalization and the recorder took it for a functional
// op, so the lazy running stats kept their old value, while the CPU kernel wrote the graph's
// input buffers in place each time a graph holding the node ran (again when another sync re-ran
// the node for one of its other outputs). When it trains with running stats, the Lazy kernel
// below records _native_batch_norm_legit_functional instead, which returns the updated running
// stats, and points the running stats' data at them, the way an op below functionalization
// writes a tensor (see Note [Lazy data]). Pinned by test_aux_outputs.py::
// test_norm_running_stats_like_eager and test_batch_norm_running_stats_with_a_sync_mid_step.
#include "backend/functionalize_kernels.h"
#include "backend/lazy_tensor.h"
#include "backend/recorder.h"
#include "lazy_ir/check.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace lazyfuse {
namespace {

// native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean,
//                   Tensor? running_var, bool training, float momentum, float eps)
constexpr size_t kNumArgs = 8;
constexpr size_t kRunningMean = 3;
constexpr size_t kTraining = 5;

bool isDefinedTensor(const c10::IValue& v) { return v.isTensor() && v.toTensor().defined(); }

/// Points the data of `target` at the pending value of `value`, a tensor just recorded.
void assignPending(const at::Tensor& target, const at::Tensor& value) {
  LazyTensorImpl* target_impl = lazyImpl(target);
  LazyTensorImpl* value_impl = lazyImpl(value);
  LF_INTERNAL_ASSERT(
      target_impl != nullptr && value_impl != nullptr && value_impl->data().isPending(),
      "native_batch_norm: running stats must be lazy, their update pending");
  target_impl->data().setPending(value_impl->data().pendingValue());
}

}  // namespace

void nativeBatchNormKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (redispatchThroughFunctionalize(op, stack)) return;
  auto args = torch::jit::last(*stack, kNumArgs);
  const bool updates_stats = args[kTraining].toBool() && isDefinedTensor(args[kRunningMean]) &&
                             isDefinedTensor(args[kRunningMean + 1]);
  if (!updates_stats) return recordOp(op, stack);
  static const c10::OperatorHandle functional = c10::Dispatcher::singleton().findSchemaOrThrow(
      "aten::_native_batch_norm_legit_functional", "");
  const at::Tensor running_mean = args[kRunningMean].toTensor();
  const at::Tensor running_var = args[kRunningMean + 1].toTensor();
  // The functional op takes the same arguments, running stats as plain Tensor.
  recordOp(functional, stack);
  // (out, save_mean, save_invstd, running_mean_out, running_var_out)
  assignPending(running_mean, (*stack)[stack->size() - 2].toTensor());
  assignPending(running_var, (*stack)[stack->size() - 1].toTensor());
  torch::jit::drop(*stack, 2);
}

}  // namespace lazyfuse
