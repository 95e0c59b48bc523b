#include "backend/device.h"
#include "backend/graph_executor.h"
#include "backend/lazy_tensor.h"
#include "backend/logging.h"
#include "backend/metrics.h"
#include "backend/op_traits.h"
#include "backend/recorder.h"
#include "lazy_ir/check.h"

#include <ATen/core/List.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace lazyfuse {
namespace {

struct Written {
  LazyTensorImpl* impl;
  at::Tensor buffer;
};

at::Tensor writableCopy(const at::Tensor& buffer) {
  auto copy = at::empty_strided(buffer.sizes(), buffer.strides(), buffer.options());
  copy.copy_(buffer);
  return copy;
}

void collectData(const c10::IValue& v, std::vector<c10::intrusive_ptr<LazyData>>& out) {
  auto add = [&](const at::Tensor& t) {
    if (LazyTensorImpl* impl = lazyImpl(t)) out.push_back(impl->dataPtr());
  };
  if (v.isTensor()) add(v.toTensor());
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) add(t);
  }
  if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) add(e.toTensor());
    }
  }
}

/// The hardware tensor standing for `t` in the eager call.
at::Tensor realTensor(const at::Tensor& t, bool written, std::vector<Written>& writes) {
  LazyTensorImpl* impl = lazyImpl(t);
  if (impl == nullptr) return t;
  at::Tensor buffer = impl->data().buffer();
  if (!written) return buffer;
  writes.push_back({impl, writableCopy(buffer)});
  return writes.back().buffer;
}

c10::IValue realArg(const c10::IValue& v, bool written, std::vector<Written>& writes) {
  if (v.isTensor()) return realTensor(v.toTensor(), written, writes);
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorList()) list.push_back(realTensor(t, written, writes));
    return list;
  }
  if (v.isList() && v.toListRef().size() > 0 && v.toListRef()[0].isTensor()) {
    c10::List<std::optional<at::Tensor>> list;
    for (const c10::IValue& e : v.toListRef()) {
      list.push_back(e.isTensor() ? std::optional<at::Tensor>(realTensor(e.toTensor(), written, writes))
                                  : std::nullopt);
    }
    return list;
  }
  if (v.isDevice()) return c10::IValue(toHardware(v.toDevice()));
  return v;
}

c10::IValue lazyResult(const c10::IValue& v, bool factory) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || t.is_meta()) return v;
    at::Tensor lazy = makeMaterializedTensor(t);
    return factory ? wrapIfFactory(lazy) : lazy;
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorList()) list.push_back(makeMaterializedTensor(t));
    return list;
  }
  return v;
}

}  // namespace

void eagerFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpTraits& traits = traitsOf(op);
  counterNamed(traits.counter_name).add();
  metrics::eager_fallbacks.add();
  LF_LOG_DEBUG("running ", traits.name, " eagerly on ", hardwareDevice().str());
  const size_t num_args = op.schema().arguments().size();
  auto args = torch::jit::last(*stack, num_args).vec();
  std::vector<c10::intrusive_ptr<LazyData>> data;
  for (const c10::IValue& v : args) collectData(v, data);
  syncData(data);

  std::vector<Written> writes;
  torch::jit::Stack real;
  for (size_t i = 0; i < args.size(); ++i) real.push_back(realArg(args[i], traits.written[i], writes));
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    op.callBoxed(real);
  }
  for (Written& w : writes) {
    TensorMeta meta = TensorMeta::of(w.buffer);
    if (!(w.impl->meta() == meta)) w.impl->setMeta(meta);
    w.impl->data().setBuffer(std::move(w.buffer));
  }
  torch::jit::drop(*stack, num_args);
  const bool factory = data.empty();
  for (size_t r = 0; r < real.size(); ++r) {
    const int aliased = r < traits.returns_arg.size() ? traits.returns_arg[r] : -1;
    stack->push_back(aliased >= 0 ? args[aliased] : lazyResult(real[r], factory));
  }
}

}  // namespace lazyfuse
