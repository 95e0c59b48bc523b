// The functionalization entry and exit points besides factories: moving data into and out of the
// lazy device. See Note [Lazy data].
#include "backend/transfers.h"

#include "backend/device.h"
#include "backend/functionalize_kernels.h"
#include "backend/graph_executor.h"
#include "backend/lazy_tensor.h"
#include "backend/recorder.h"
#include "lazy_ir/check.h"
#include "lazy_ir/metrics.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/ops/_to_copy.h>
#include <ATen/ops/copy.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <string>
#include <unordered_set>

namespace lazyfuse {
namespace {

namespace F = at::functionalization::impl;

/// A raw lazy tensor holding a copy of `tensor` (any device) on the hardware device.
at::Tensor uploadRaw(const at::Tensor& tensor) {
  metrics::transfers_in.add();
  return makeMaterializedTensor(tensor.to(hardwareDevice(), /*non_blocking=*/false, /*copy=*/true));
}

at::Tensor meta(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

/// Lazy `self` moved to another device by _to_copy with `args`, with the strides eager's _to_copy
/// gives self's reported geometry: its buffer has the trace's strides, which can differ.
/// See Note [View geometry].
at::Tensor transferOut(const at::Tensor& self, c10::ArrayRef<c10::IValue> args) {
  at::Tensor buffer = materialize(self);
  metrics::transfers_out.add();
  const LazyTensorImpl* impl = lazyImpl(self);
  if (!impl->reportsOtherGeometry()) {
    return at::_to_copy(buffer, args[1].toOptional<c10::ScalarType>(),
                        args[2].toOptional<c10::Layout>(), args[3].toDevice(),
                        args[4].toOptional<bool>(), args[5].toBool(),
                        args[6].toOptional<c10::MemoryFormat>());
  }
  at::Tensor like = at::_to_copy(metaWithGeometry(*impl), args[1].toOptional<c10::ScalarType>(),
                                 args[2].toOptional<c10::Layout>(), c10::Device(c10::kMeta),
                                 /*pin_memory=*/std::nullopt, /*non_blocking=*/false,
                                 args[6].toOptional<c10::MemoryFormat>());
  at::TensorOptions options = like.options().device(args[3].toDevice());
  if (args[4].toOptional<bool>().value_or(false)) options = options.pinned_memory(true);
  at::Tensor out = at::empty_strided(like.sizes(), like.strides(), options);
  out.copy_(buffer, args[5].toBool());
  return out;
}

}  // namespace

void toCopyKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (redispatchThroughFunctionalize(op, stack)) return;
  // _to_copy(Tensor self, *, ScalarType? dtype, Layout? layout, Device? device, bool? pin_memory,
  //          bool non_blocking, MemoryFormat? memory_format)
  auto args = torch::jit::last(*stack, 7);
  const at::Tensor self = args[0].toTensor();
  const c10::IValue device = args[3];
  const bool to_lazy = device.isNone() || isLazyDevice(device.toDevice());
  if (!isLazy(self) && to_lazy) {
    // The entry point: another device's tensor becomes a materialized lazy tensor.
    metrics::transfers_in.add();
    at::Tensor buffer =
        at::_to_copy(self, args[1].toOptional<c10::ScalarType>(), args[2].toOptional<c10::Layout>(),
                     hardwareDevice(), args[4].toOptional<bool>(), args[5].toBool(),
                     args[6].toOptional<c10::MemoryFormat>());
    torch::jit::drop(*stack, 7);
    stack->push_back(wrapIfFactory(makeMaterializedTensor(buffer)));
    return;
  }
  if (to_lazy) return recordOp(op, stack);  // a dtype or layout change stays in the trace
  at::Tensor out = transferOut(self, args);
  torch::jit::drop(*stack, 7);
  stack->push_back(out);
}

void copyKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (redispatchThroughFunctionalize(op, stack)) return;
  // copy(Tensor self, Tensor src, bool non_blocking) and copy_(Tensor(a!) self, Tensor src, ...)
  auto args = torch::jit::last(*stack, 3);
  const at::Tensor self = args[0].toTensor();
  const at::Tensor src = args[1].toTensor();
  if (!isLazy(self)) {
    // cpu_tensor.copy_(lazy_tensor): the exit point for in-place copies.
    at::Tensor buffer = materialize(src);
    metrics::transfers_out.add();
    at::Tensor dst = self;
    dst.copy_(buffer, args[2].toBool());
    torch::jit::drop(*stack, 3);
    stack->push_back(dst);
    return;
  }
  if (!isLazy(src)) (*stack)[stack->size() - 2] = uploadRaw(src);  // the entry point
  recordOp(op, stack);
}

// Note [Sharing memory with the hardware device]
// The torch.compile backend (python/lazyfuse/_dynamo_backend.py) runs graphs whose inputs and
// outputs are tensors of the hardware device: moving each through `.to()` would copy every
// parameter and activation at every call. So an input on the hardware device becomes a lazy
// tensor whose device data is a detached alias of it (its own TensorImpl over the same storage),
// and an output whose buffer has the geometry it reports leaves as a detached alias of that
// buffer. Neither is written behind the other's back: a plan writes into device data only when
// nothing else holds its storage (Note [Donated buffers]), which the caller's tensor does, and
// a lazy value is never written in place once computed. Anything else (another device, a
// sparse tensor, a result reporting other strides than its buffer's) is copied as `.to()` does.
// Pinned by test_dynamo_backend.py.
at::Tensor shareIntoLazy(const at::Tensor& tensor) {
  TORCH_CHECK(!isLazy(tensor), "share_into_lazy: expected a tensor of the hardware device (",
              hardwareDevice(), "), got a lazy tensor");
  if (tensor.device() != hardwareDevice() || tensor.layout() != c10::kStrided) {
    return tensor.to(c10::Device(c10::DeviceType::Lazy));
  }
  metrics::transfers_in.add();
  return wrapIfFactory(makeMaterializedTensor(tensor.detach()));
}

at::Tensor shareOutOfLazy(const at::Tensor& tensor) {
  const LazyTensorImpl& impl = lazyImplOrRaise(tensor, "share_out_of_lazy: expected a lazy tensor");
  const at::Tensor buffer = materialize(tensor);
  if (impl.reportsOtherGeometry() || buffer.sizes() != tensor.sizes()) {
    return tensor.to(hardwareDevice());
  }
  metrics::transfers_out.add();
  return buffer.detach();
}

// Note [Lifting constructed tensors]
// torch.tensor, torch.as_tensor and Tensor.new_tensor build a CPU tensor, move it to the lazy
// device with Functionalize excluded (so _to_copy returns a raw lazy tensor), then call lift_fresh
// to wrap it. lift_fresh's default kernel returns its input, and a raw lazy tensor has no
// Functionalize key, so nothing would wrap it: mutation through a view, or in place with a
// wrapped operand, would go wrong. This kernel does the wrapping, as every other entry point does.
// Pinned by test_factories_transfers.py::test_constructed_tensor_mutates_through_view.
at::Tensor liftFresh(const at::Tensor& self) {
  if (F::isFunctionalTensor(self)) return self;
  return wrapIfFactory(self);
}

// Note [Functionalizing copy_ across devices]
// PyTorch's generated functionalization kernel for copy_ refuses `cpu_tensor.copy_(lazy_tensor)`
// ("mutating a non-functional tensor with a functional tensor") except for XLA. We replace it
// with this kernel, which does what the generated one does in every other case: run the in-place
// op on Meta to raise eager's errors, call the functional `copy` below functionalization, and
// propagate the new value to the wrapper and its views.
at::Tensor& functionalizeCopy(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  if (!F::isFunctionalTensor(self)) {
    if (isLazy(src)) {
      at::Tensor buffer = materialize(src);
      metrics::transfers_out.add();
      at::AutoDispatchSkipFunctionalize guard;
      self.copy_(buffer, non_blocking);
      return self;
    }
    TORCH_INTERNAL_ASSERT(
        !F::isFunctionalTensor(src),
        "mutating a non-functional tensor with a functional tensor is not allowed.",
        " Please ensure that all of your inputs are wrapped inside of a functionalize() call.");
    at::AutoDispatchSkipFunctionalize guard;
    self.copy_(src, non_blocking);
    return self;
  }
  {
    at::Tensor self_meta = meta(self);
    at::Tensor src_meta = meta(src);
    at::AutoDispatchSkipFunctionalize guard;
    c10::impl::ExcludeDispatchKeyGuard no_autograd(
        c10::autograd_dispatch_keyset_with_ADInplaceOrView);
    self_meta.copy_(src_meta, non_blocking);
  }
  F::sync(self);
  at::Tensor self_inner = F::from_functional_tensor(self);
  at::Tensor src_inner = src;
  if (F::isFunctionalTensor(src)) {
    F::sync(src);
    src_inner = F::from_functional_tensor(src);
  }
  at::Tensor result;
  {
    at::AutoDispatchSkipFunctionalize guard;
    result = at::copy(self_inner, src_inner, non_blocking);
  }
  F::replace_(self, result);
  F::commit_update(self);
  F::sync(self);
  return self;
}

// Note [Tensors made like a lazy tensor on another device]
// torch.zeros_like(x, device="cpu") and x.new_zeros(3, device="cpu") make a tensor on the device
// they name, taking from the lazy x only its sizes, strides, dtype and layout. Such a call
// reached the Lazy key (its tensor argument is lazy), whose recorder made a lazy tensor of it,
// and Functionalize's fallback wraps whatever comes back. So on Functionalize (lazy calls only,
// Note [Lazy-only kernels on Functionalize]; torch.zeros_like skips the autograd keys), a call
// naming another device runs there on a stand-in of that device's (empty, same geometry):
// eager's kernel, eager's result (a *_like random op draws from that device's generator). A
// call without one, or naming lazy, takes PyTorch's path. Pinned by test_factories_transfers.py::
// test_like_and_new_on_another_device.
namespace {

/// The device a *_like or new_* call names, when it is not lazy.
std::optional<c10::Device> namedOtherDevice(const c10::OperatorHandle& op,
                                            const torch::jit::Stack& stack) {
  const auto& args = op.schema().arguments();
  auto values = torch::jit::last(stack, args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = values[i];
    if (args[i].name() == "device" && v.isDevice() && !isLazyDevice(v.toDevice())) {
      return v.toDevice();
    }
  }
  return std::nullopt;
}

void likeOnDeviceKernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                        torch::jit::Stack* stack) {
  const std::optional<c10::Device> device = namedOtherDevice(op, *stack);
  if (!device) return pytorchFunctionalizeKernel(op).callBoxed(op, keys, stack);
  const size_t num_args = op.schema().arguments().size();
  for (size_t i = stack->size() - num_args; i < stack->size(); ++i) {
    if (!(*stack)[i].isTensor() || !isLazy((*stack)[i].toTensor())) continue;
    const at::Tensor& t = (*stack)[i].toTensor();
    (*stack)[i] = at::empty_strided(t.sizes(), t.strides(), t.options().device(*device));
  }
  op.callBoxed(stack);
}

}  // namespace

void registerLikeOnDeviceKernels(torch::Library& functionalize_lib) {
  static const std::unordered_set<std::string> kOps = {
      "aten::empty_like", "aten::zeros_like", "aten::ones_like",    "aten::full_like",
      "aten::rand_like",  "aten::randn_like", "aten::randint_like", "aten::new_empty",
      "aten::new_zeros",  "aten::new_ones",   "aten::new_full",     "aten::new_empty_strided"};
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (!kOps.count(name.name)) continue;  // every overload of these ops
    implLazyOnFunctionalize(functionalize_lib, *c10::Dispatcher::singleton().findOp(name),
                            c10::KernelFunction::makeFromBoxedFunction<&likeOnDeviceKernel>());
  }
}

}  // namespace lazyfuse
