// The walk over a recorded call's arguments: its meta-cache key, its node's inputs and
// parameters, and on a cache miss its recipe and outputs inferred on Meta. See Note [Meta cache]
// in backend/recorder.cpp.

#include "backend/detail/call_recorder.h"

#include "backend/aux_outputs.h"
#include "backend/detail/stand_ins.h"
#include "backend/device.h"
#include "backend/lazy_tensor.h"
#include "backend/meta_layout.h"
#include "backend/random_draws.h"
#include "lazy_ir/check.h"
#include "lazy_ir/metrics.h"
#include "lowering/lowerings.h"

#include <ATen/core/List.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <optional>

namespace lazyfuse::detail {
namespace {

[[noreturn]] void deviceError(const at::Tensor& tensor, const OpTraits& traits, size_t arg) {
  TORCH_CHECK(false,
              "Expected all tensors to be on the same device, but found at least two "
              "devices, lazy:0 and ",
              tensor.device().str(), "! (when checking argument ", arg, " of ", traits.name,
              "; move the tensor with .to('lazy') first)");
}

bool isCpuScalar(const at::Tensor& tensor) {
  return tensor.defined() && !isLazy(tensor) && tensor.dim() == 0 && tensor.device().is_cpu();
}

HashValue hashImplMeta(HashValue h, const LazyTensorImpl& impl) {
  h = hashCombine(h, static_cast<HashValue>(c10::typeMetaToScalarType(impl.dtype())));
  h = hashInts(h, impl.sizes());
  return hashInts(h, impl.traceStrides());  // See Note [View geometry]
}

/// A Meta stand-in for `tensor`; a lazy one's strides are those of its value in the trace.
at::Tensor toMeta(const at::Tensor& tensor) {
  const LazyTensorImpl* impl = lazyImpl(tensor);
  c10::IntArrayRef strides = impl != nullptr ? impl->traceStrides() : tensor.strides();
  return at::empty_strided(tensor.sizes(), strides, tensor.options().device(c10::kMeta));
}

/// A Meta stand-in for a 0-dim CPU tensor parameter, a wrapped number if it was one.
at::Tensor metaScalar(const at::Tensor& scalar) {
  at::Tensor meta = toMeta(scalar);
  meta.unsafeGetTensorImpl()->set_wrapped_number(scalar.unsafeGetTensorImpl()->is_wrapped_number());
  return meta;
}

/// A raw lazy tensor holding a copy of `tensor` on the hardware device.
at::Tensor upload(const at::Tensor& tensor) {
  metrics::transfers_in.add();
  return makeMaterializedTensor(tensor.to(hardwareDevice(), /*non_blocking=*/false, /*copy=*/true));
}

}  // namespace

HashValue hashCpuScalarParam(HashValue h, const at::Tensor& scalar) {
  return hashCombine(hashCombine(h, static_cast<HashValue>(scalar.scalar_type()) + 0x5ca1a),
                     scalar.unsafeGetTensorImpl()->is_wrapped_number());
}

HashValue hashParamKind(HashValue h, const c10::IValue& param) {
  h = hashCombine(h, hashString(param.tagKind()));
  if (!param.isList()) return h;
  h = hashCombine(h, param.toListRef().size());
  for (const c10::IValue& entry : param.toListRef())
    h = hashCombine(h, hashString(entry.tagKind()));
  return h;
}

HashValue CallRecorder::scan() {
  key_ = traits_.name_hash;
  positions_.clear();
  for (size_t i = 0; i < args_.size(); ++i) scanArg(i);
  // Position values come last, so that the key without them is a key of its own.
  blind_key_ = key_;
  for (int64_t position : positions_) key_ = hashCombine(key_, static_cast<HashValue>(position));
  return key_;
}

namespace {

/// Whether `op` is the functional op of a fused optimizer step that has no Meta kernel
/// (`_fused_sgd`, `_fused_adagrad`): its outputs mirror its first tensor-list arguments, one
/// list each (Note [Fused optimizer steps] in backend/write_functionalization.cpp).
bool mirrorsListArguments(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  if (!isFusedOptimizerOp(schema.name()) || schema.name().back() == '_' ||
      op.hasKernelForDispatchKey(c10::DispatchKey::Meta) ||
      schema.returns().size() > schema.arguments().size()) {
    return false;
  }
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    if (schema.returns()[r].type()->kind() != c10::TypeKind::ListType ||
        schema.arguments()[r].type()->kind() != c10::TypeKind::ListType) {
      return false;
    }
  }
  return true;
}

/// The Meta results of a `mirrorsListArguments` op called with `stack`, in its place.
void mirrorListArguments(const c10::FunctionSchema& schema, torch::jit::Stack& stack) {
  torch::jit::Stack results;
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : stack[r].toTensorList()) {
      list.push_back(at::empty_strided(t.sizes(), t.strides(), t.options()));
    }
    results.emplace_back(std::move(list));
  }
  stack = std::move(results);
}

}  // namespace

std::shared_ptr<const AtenCallAttrs> CallRecorder::inferOnMeta(HashValue key) {
  auto attrs = std::make_shared<AtenCallAttrs>(op_);
  attrs->name = traits_.name;
  torch::jit::Stack meta_stack;
  std::vector<std::vector<at::Tensor>> written_meta;
  for (size_t i = 0; i < args_.size(); ++i) {
    attrs->args.push_back(slotFor(i));
    meta_stack.push_back(metaArg(i, attrs->args.back()));
    if (!traits_.written[i]) continue;
    written_meta.emplace_back();
    collectTensors(meta_stack.back(), written_meta.back());
  }
  auto runOnMeta = [&](torch::jit::Stack& stack) {
    if (mirrorsListArguments(op_)) return mirrorListArguments(op_.schema(), stack);
    c10::impl::ExcludeDispatchKeyGuard no_autograd(
        c10::autograd_dispatch_keyset_with_ADInplaceOrView);
    c10::impl::ExcludeDispatchKeyGuard no_functionalize(c10::DispatchKey::Functionalize);
    op_.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
  };
  // See Note [Meta layout corrections]: they take the Meta arguments, which the run consumes.
  const std::optional<size_t> alpha = layoutChangingAlpha(traits_.meta_layout, args_);
  const MetaLayout layout = traits_.meta_layout;
  torch::jit::Stack meta_args;
  if (alpha || layout == MetaLayout::kIterator || layout == MetaLayout::kLdexp) {
    meta_args = meta_stack;
  }
  runOnMeta(meta_stack);
  if (alpha) {
    // add and sub write no argument, so only the returns change.
    meta_args[*alpha] = c10::IValue(c10::Scalar(int64_t{1}));
    meta_stack = meta_args;
    runOnMeta(meta_stack);
  }
  if (traits_.meta_layout != MetaLayout::kAsMeta && meta_stack.size() == 1 &&
      meta_stack[0].isTensor()) {
    std::vector<at::Tensor> results{meta_stack[0].toTensor()};
    correctMetaLayout(traits_.meta_layout, meta_args, results);
    meta_stack[0] = results[0];
  }
  if (traits_.aux_outputs != AuxOutputs::kSameAsMeta) {  // See Note [Aux outputs on the CPU]
    correctAuxOutputs(traits_, args_, meta_stack, hardwareDevice());
  }
  for (const auto& tensors : written_meta) {
    for (const at::Tensor& t : tensors) attrs->outputs.push_back(TensorMeta::of(t));
  }
  for (size_t r = 0; r < meta_stack.size(); ++r) addReturn(*attrs, r, meta_stack[r]);
  attrs->finalize();
  // The meta-cache key also covers input metadata and parameter kinds (an int or a float
  // Scalar): everything that can change code generated for this node.
  attrs->combineIntoHash(key, blind_key_);
  return attrs;
}

void CallRecorder::collectTensors(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) out.push_back(value.toTensor());
  if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList()) out.push_back(t);
  }
}

void CallRecorder::addInput(const at::Tensor& tensor, size_t arg) {
  LazyTensorImpl* impl = lazyImpl(tensor);
  if (impl == nullptr) deviceError(tensor, traits_, arg);
  any_lazy_ = true;
  inputs_.push_back(impl->data().asInput());
  key_ = hashImplMeta(key_, *impl);
}

void CallRecorder::scanTensor(const at::Tensor& t, size_t i) {
  if (!t.defined()) {
    key_ = hashCombine(key_, 0x0defULL);
    return;
  }
  if (isCpuScalar(t) && !traits_.written[i]) {
    params_.push_back(t);
    key_ = hashCpuScalarParam(key_, t);
    return;
  }
  addInput(t, i);
}

void CallRecorder::scanArg(size_t i) {
  c10::IValue& v = args_[i];
  key_ = hashCombine(key_, i);
  if (v.isTensor()) return scanTensor(v.toTensor(), i);
  if (v.isTensorList()) return scanTensorList(i);
  if (v.isList() && v.toListRef().size() > 0 && isOptionalTensorList(i)) return scanOptionalList(i);
  // See Note [Random ops draw when recorded].
  if (traits_.generator_arg[i]) v = recordedGenerator(v);
  if (traits_.generator_arg[i] || (traits_.scalar_arg[i] && !traits_.scalars_are_constants)) {
    params_.push_back(v);
    // A Scalar[]'s entries are parameters too, but their kinds (int, float, bool, complex)
    // decide output dtypes and kernel code, as a Scalar's kind does.
    key_ = hashParamKind(key_, v);
    return;
  }
  if (v.isDevice()) v = c10::IValue(toHardware(v.toDevice()));
  if (v.isInt() && !traits_.position_args.empty() &&
      std::find(traits_.position_args.begin(), traits_.position_args.end(), i) !=
          traits_.position_args.end()) {
    static const HashValue kPosition = hashString("position");
    key_ = hashCombine(key_, kPosition);
    positions_.push_back(v.toInt());
    return;
  }
  key_ = hashIValue(key_, v);
}

void CallRecorder::scanTensorList(size_t i) {
  auto list = args_[i].toTensorList();
  key_ = hashCombine(key_, list.size());
  // A copy of the list is made only once an element moves (most lists hold no CPU scalar).
  std::optional<c10::List<at::Tensor>> moved;
  for (size_t k = 0; k < list.size(); ++k) {
    at::Tensor t = list.get(k);
    if (isCpuScalar(t) && !traits_.written[i]) {
      t = upload(t);
      if (!moved) moved = list.copy();
      moved->set(k, t);
    }
    addInput(t, i);
  }
  if (moved) args_[i] = std::move(*moved);
}

bool CallRecorder::isOptionalTensorList(size_t i) const {
  auto list = op_.schema().arguments()[i].type()->cast<c10::ListType>();
  return list && list->getElementType()->kind() == c10::TypeKind::OptionalType;
}

void CallRecorder::scanOptionalList(size_t i) {
  auto list = args_[i].toOptionalTensorList();
  c10::List<std::optional<at::Tensor>> uploaded;
  for (std::optional<at::Tensor> t : list) {
    // Eager accepts CPU index tensors next to device tensors; so do we, by moving them.
    if (t && t->defined() && !isLazy(*t)) t = upload(*t);
    uploaded.push_back(t);
    key_ = hashCombine(key_, t.has_value() && t->defined());
    if (t && t->defined()) addInput(*t, i);
  }
  args_[i] = uploaded;
}

std::vector<ArgSlot> CallRecorder::slots() const {
  std::vector<ArgSlot> slots;
  for (size_t i = 0; i < args_.size(); ++i) slots.push_back(slotFor(i));
  return slots;
}

ArgSlot CallRecorder::slotFor(size_t i) const {
  const c10::IValue& v = args_[i];
  ArgSlot slot;
  slot.mutated = traits_.written[i];
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      slot.constant = v;
    } else if (isCpuScalar(t) && !slot.mutated) {
      slot.kind = ArgKind::kParam;
    } else {
      slot.kind = ArgKind::kTensor;
    }
    return slot;
  }
  if (v.isTensorList()) {
    slot.kind = ArgKind::kTensorList;
    slot.present.assign(v.toTensorList().size(), 1);
    return slot;
  }
  if (v.isList() && v.toListRef().size() > 0 && isOptionalTensorList(i)) {
    slot.kind = ArgKind::kOptionalTensorList;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
      slot.present.push_back(t.has_value() && t->defined());
    }
    return slot;
  }
  if (traits_.generator_arg[i] || (traits_.scalar_arg[i] && !traits_.scalars_are_constants)) {
    slot.kind = ArgKind::kParam;
    return slot;
  }
  slot.constant = v;
  return slot;
}

c10::IValue CallRecorder::metaArg(size_t i, const ArgSlot& slot) const {
  const c10::IValue& v = args_[i];
  switch (slot.kind) {
    case ArgKind::kTensor: return toMeta(v.toTensor());
    case ArgKind::kParam:
      // CPU scalar tensors mix with any device, Meta too, unless the meta kernel checks.
      if (v.isTensor() && traits_.meta_scalars_on_meta) return metaScalar(v.toTensor());
      // A node's own generator (Note [Random ops draw when recorded]) is for its runs; meta
      // kernels draw nothing, and some (torch._refs') refuse a generator.
      if (v.isGenerator()) return c10::IValue();
      return v;
    case ArgKind::kTensorList: {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : v.toTensorList()) list.push_back(toMeta(t));
      return list;
    }
    case ArgKind::kOptionalTensorList: {
      c10::List<std::optional<at::Tensor>> list;
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
        list.push_back(t && t->defined() ? std::optional<at::Tensor>(toMeta(*t)) : std::nullopt);
      }
      return list;
    }
    case ArgKind::kConstant:
      if (v.isDevice()) return c10::IValue(c10::Device(c10::kMeta));
      return v;
    case ArgKind::kOptionalTensor: break;
  }
  return v;
}

void CallRecorder::addReturn(AtenCallAttrs& attrs, size_t r, const c10::IValue& value) const {
  ReturnSlot ret;
  if (r < traits_.returns_arg.size() && traits_.returns_arg[r] >= 0) {
    ret.kind = ReturnKind::kMutatedArg;
    ret.arg = static_cast<uint32_t>(traits_.returns_arg[r]);
  } else if (value.isTensor() && !value.toTensor().defined()) {
    ret.kind = ReturnKind::kUndefinedTensor;
    ret.count = 0;
  } else if (value.isTensor()) {
    attrs.outputs.push_back(TensorMeta::of(value.toTensor()));
  } else {
    LF_INTERNAL_ASSERT(value.isTensorList(), traits_.name, " returned a ", value.tagKind());
    ret.kind = ReturnKind::kTensorList;
    ret.count = static_cast<uint32_t>(value.toTensorList().size());
    for (const at::Tensor& t : value.toTensorList()) attrs.outputs.push_back(TensorMeta::of(t));
  }
  attrs.returns.push_back(ret);
}

}  // namespace lazyfuse::detail
