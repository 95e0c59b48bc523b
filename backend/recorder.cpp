#include "backend/recorder.h"

#include "backend/aux_outputs.h"
#include "backend/device.h"
#include "backend/lax_meta.h"
#include "backend/lazy_tensor.h"
#include "lazy_ir/metrics.h"
#include "backend/op_traits.h"
#include "backend/random_draws.h"
#include "backend/write_checks.h"
#include "lazy_ir/check.h"

#include <ATen/core/List.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

namespace lazyfuse {
namespace {

// Note [Meta cache]
// Output dtypes and shapes come from running the op on Meta. The result (an AtenCallAttrs) is
// cached under a key of the op and everything about its arguments that can change the outputs:
// tensor dtypes, sizes and strides, constants by value, and only the kind of each parameter.
// The same op on the same input metadata never redispatches to Meta twice.
struct MetaCache {
  std::mutex mutex;
  std::unordered_map<HashValue, std::shared_ptr<const AtenCallAttrs>> entries;
};

MetaCache& metaCache() {
  static MetaCache* instance = new MetaCache();
  return *instance;
}

[[noreturn]] void deviceError(const at::Tensor& tensor, const OpTraits& traits, size_t arg) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
              "devices, lazy:0 and ", tensor.device().str(), "! (when checking argument ", arg,
              " of ", traits.name, "; move the tensor with .to('lazy') first)");
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

// Walks the arguments of one call: computes the meta-cache key and collects the node's inputs
// and parameters. On a cache miss it also builds the recipe and the Meta stack.
class CallRecorder {
 public:
  CallRecorder(const c10::OperatorHandle& op, const OpTraits& traits, torch::jit::Stack& args)
      : op_(op), traits_(traits), args_(args) {}

  bool anyLazy() const { return any_lazy_; }

  HashValue scan() {
    key_ = traits_.name_hash;
    for (size_t i = 0; i < args_.size(); ++i) scanArg(i);
    return key_;
  }

  std::shared_ptr<const AtenCallAttrs> inferOnMeta(HashValue key) {
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
    {
      c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset_with_ADInplaceOrView);
      c10::impl::ExcludeDispatchKeyGuard no_functionalize(c10::DispatchKey::Functionalize);
      op_.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
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
    attrs->hash = hashCombine(attrs->hash, key);
    return attrs;
  }

  std::vector<Value> takeInputs() { return std::move(inputs_); }
  std::vector<c10::IValue> takeParams() { return std::move(params_); }

 private:
  static void collectTensors(const c10::IValue& value, std::vector<at::Tensor>& out) {
    if (value.isTensor()) out.push_back(value.toTensor());
    if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList()) out.push_back(t);
    }
  }

  void addInput(const at::Tensor& tensor, size_t arg) {
    LazyTensorImpl* impl = lazyImpl(tensor);
    if (impl == nullptr) deviceError(tensor, traits_, arg);
    any_lazy_ = true;
    inputs_.push_back(impl->data().asInput());
    key_ = hashImplMeta(key_, *impl);
  }

  void scanTensor(const at::Tensor& t, size_t i) {
    if (!t.defined()) {
      key_ = hashCombine(key_, 0x0defULL);
      return;
    }
    if (isCpuScalar(t) && !traits_.written[i]) {
      params_.push_back(t);
      key_ = hashCombine(hashCombine(key_, static_cast<HashValue>(t.scalar_type()) + 0x5ca1a),
                         t.unsafeGetTensorImpl()->is_wrapped_number());
      return;
    }
    addInput(t, i);
  }

  void scanArg(size_t i) {
    c10::IValue& v = args_[i];
    key_ = hashCombine(key_, i);
    if (v.isTensor()) return scanTensor(v.toTensor(), i);
    if (v.isTensorList()) return scanTensorList(i);
    if (v.isList() && v.toListRef().size() > 0 && isOptionalTensorList(i)) return scanOptionalList(i);
    // See Note [Random ops draw when recorded].
    if (traits_.generator_arg[i]) v = recordedGenerator(v);
    if (traits_.generator_arg[i] || (traits_.scalar_arg[i] && !traits_.scalars_are_constants)) {
      params_.push_back(v);
      key_ = hashCombine(key_, hashString(v.tagKind()));
      // A Scalar[]'s entries are parameters too, but their kinds (int, float, bool, complex)
      // decide output dtypes and kernel code, as a Scalar's kind does.
      if (v.isList()) {
        key_ = hashCombine(key_, v.toListRef().size());
        for (const c10::IValue& entry : v.toListRef()) {
          key_ = hashCombine(key_, hashString(entry.tagKind()));
        }
      }
      return;
    }
    if (v.isDevice()) v = c10::IValue(toHardware(v.toDevice()));
    key_ = hashIValue(key_, v);
  }

  /// A Tensor[] argument. Eager's foreach kernels accept 0-dim CPU tensors in a list next to
  /// device tensors (optimizers pass a tensor lr that way); they are moved to lazy.
  void scanTensorList(size_t i) {
    auto list = args_[i].toTensorList();
    key_ = hashCombine(key_, list.size());
    c10::List<at::Tensor> moved;
    bool any_moved = false;
    for (at::Tensor t : list) {
      if (isCpuScalar(t) && !traits_.written[i]) {
        t = upload(t);
        any_moved = true;
      }
      addInput(t, i);
      moved.push_back(t);
    }
    if (any_moved) args_[i] = moved;
  }

  bool isOptionalTensorList(size_t i) const {
    auto list = op_.schema().arguments()[i].type()->cast<c10::ListType>();
    return list && list->getElementType()->kind() == c10::TypeKind::OptionalType;
  }

  void scanOptionalList(size_t i) {
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

  ArgSlot slotFor(size_t i) const {
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

  c10::IValue metaArg(size_t i, const ArgSlot& slot) const {
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

  void addReturn(AtenCallAttrs& attrs, size_t r, const c10::IValue& value) const {
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

  const c10::OperatorHandle& op_;
  const OpTraits& traits_;
  torch::jit::Stack& args_;
  HashValue key_ = 0;
  bool any_lazy_ = false;
  std::vector<Value> inputs_;
  std::vector<c10::IValue> params_;
};

/// The call's attrs from the meta cache, or inferred on Meta and checked on the CPU as eager
/// would (see Note [Eager's errors]), then cached; nullptr when the op has no meta kernel.
std::shared_ptr<const AtenCallAttrs> lookupOrInfer(CallRecorder& recorder, HashValue key,
                                                   const c10::OperatorHandle& op,
                                                   const OpTraits& traits,
                                                   const torch::jit::Stack& args) {
  MetaCache& cache = metaCache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.entries.find(key);
    if (it != cache.entries.end()) return it->second;
  }
  std::shared_ptr<const AtenCallAttrs> attrs;
  try {
    attrs = recorder.inferOnMeta(key);
  } catch (const c10::NotImplementedError&) {
    return nullptr;
  } catch (const std::exception&) {  // a c10::Error, or a Python meta kernel's exception
    checkLaxMetaOnCpu(op, traits, args);  // See Note [Lax meta kernels]
    raiseEagerErrorOnCpu(op, args, /*one_per_dim=*/false);
    throw;
  }
  metrics::meta_cache_miss.add();
  checkLaxMetaOnCpu(op, traits, args);
  if (traits.probes_on_cpu) raiseEagerErrorOnCpu(op, args, /*one_per_dim=*/true);
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.entries.emplace(key, attrs);
  return attrs;
}

bool hasBooleanIndex(const OpTraits& traits, const torch::jit::Stack& args) {
  // x[mask] = v reaches us as the functional aten::index_put (Functionalize rewrites index_put_);
  // _index_put_impl is what index_put_ decomposes into where nothing functionalizes it.
  const std::string& name = traits.counter_name;
  if (name != "aten::index" && name != "aten::index_put" && name != "aten::_index_put_impl") {
    return false;
  }
  for (const c10::IValue& v : args) {
    if (!v.isList()) continue;
    for (const c10::IValue& e : v.toListRef()) {
      if (!e.isTensor()) continue;
      auto dtype = e.toTensor().scalar_type();
      if (dtype == at::kBool || dtype == at::kByte) return true;
    }
  }
  return false;
}

bool isNormal(const at::Tensor& t) { return t.defined() && !t.is_inference(); }

/// In InferenceMode, the results of a view of a normal tensor, of a write into one and of a
/// *_scatter into one are normal tensors too. See Note [Values made in InferenceMode].
void keepNormal(const OpTraits& traits, const std::optional<PendingWrite>& write,
                const torch::jit::Stack& args, torch::jit::Stack& stack, size_t num_results) {
  std::vector<at::Tensor> results;
  for (size_t r = stack.size() - num_results; r < stack.size(); ++r) {
    if (stack[r].isTensor()) results.push_back(stack[r].toTensor());
    if (!stack[r].isTensorList()) continue;
    for (const at::Tensor& t : stack[r].toTensorList()) results.push_back(t);
  }
  auto leave = [](const at::Tensor& t) {
    if (auto* impl = dynamic_cast<LazyTensorImpl*>(t.unsafeGetTensorImpl())) impl->leaveInference();
  };
  const bool of_normal_self = !args.empty() && args[0].isTensor() && isNormal(args[0].toTensor());
  if ((traits.view_op || traits.scatters_into_self) && of_normal_self) {
    for (const at::Tensor& t : results) leave(t);
    return;
  }
  if (!write || write->written.size() > results.size()) return;
  const size_t first = results.size() - write->written.size();
  for (size_t k = 0; k < write->written.size(); ++k) {
    if (isNormal(write->written[k])) leave(results[first + k]);
  }
}

/// Points every written argument at its new value, and pushes the op's returns.
void pushResults(const AtenCallAttrs& attrs, const NodePtr& node, const OpTraits& traits,
                 torch::jit::Stack& args, bool factory, torch::jit::Stack* stack) {
  uint32_t out = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!traits.written[i]) continue;
    std::vector<at::Tensor> tensors;
    if (args[i].isTensor()) tensors.push_back(args[i].toTensor());
    if (args[i].isTensorList()) tensors = args[i].toTensorList().vec();
    for (const at::Tensor& t : tensors) {
      LazyTensorImpl* impl = lazyImpl(t);
      impl->data().setPending(Value{node, out});
      if (!(impl->meta() == attrs.outputs[out])) impl->setMeta(attrs.outputs[out]);
      ++out;
    }
  }
  for (const ReturnSlot& ret : attrs.returns) {
    switch (ret.kind) {
      case ReturnKind::kMutatedArg: stack->push_back(args[ret.arg]); break;
      case ReturnKind::kUndefinedTensor: stack->push_back(at::Tensor()); break;
      case ReturnKind::kTensor: {
        at::Tensor t = makeLazyTensor(Value{node, out++});
        stack->push_back(factory ? wrapIfFactory(t) : t);
        break;
      }
      case ReturnKind::kTensorList: {
        c10::List<at::Tensor> list;
        for (uint32_t k = 0; k < ret.count; ++k) list.push_back(makeLazyTensor(Value{node, out++}));
        stack->push_back(list);
        break;
      }
    }
  }
}

/// The op run eagerly; a write's result keeps the geometry of the tensor it is written into, as
/// a recorded write's does (Note [View geometry]): v[mask] = 1 into a transposed view stays
/// transposed.
void runEagerly(const c10::OperatorHandle& op, const OpTraits& traits, torch::jit::Stack* stack) {
  std::optional<PendingWrite> write = takePendingWrite(traits);
  eagerFallback(op, stack);
  if (write) keepWrittenGeometry(*write, *stack, op.schema().returns().size());
}

}  // namespace

void recordOp(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpTraits& traits = traitsOf(op);
  const size_t num_args = op.schema().arguments().size();
  if (traits.eager) return runEagerly(op, traits, stack);
  if (traits.aux_outputs == AuxOutputs::kEagerOnCpu && hardwareDevice().is_cpu()) {
    return runEagerly(op, traits, stack);  // See Note [Aux outputs on the CPU]
  }
  torch::jit::Stack args(std::make_move_iterator(stack->end() - num_args),
                         std::make_move_iterator(stack->end()));
  if (hasBooleanIndex(traits, args)) {
    std::move(args.begin(), args.end(), stack->end() - num_args);
    return runEagerly(op, traits, stack);
  }
  CallRecorder recorder(op, traits, args);
  HashValue key = recorder.scan();
  std::shared_ptr<const AtenCallAttrs> attrs = lookupOrInfer(recorder, key, op, traits, args);
  if (attrs) checkScalarValuesOnCpu(op, traits, key, args);
  if (!attrs) {
    // No meta kernel: this op runs eagerly from now on. See Note [Data-dependent ops].
    markEager(op);
    std::move(args.begin(), args.end(), stack->end() - num_args);
    return runEagerly(op, traits, stack);
  }
  std::optional<PendingWrite> write = takePendingWrite(traits);
  if (write) checkWrittenCasts(*write, *attrs);
  NodePtr node = Node::aten(attrs, recorder.takeInputs(), recorder.takeParams());
  metrics::ops_recorded.add();
  torch::jit::drop(*stack, num_args);
  pushResults(*attrs, node, traits, args, /*factory=*/!recorder.anyLazy(), stack);
  const size_t num_returns = attrs->returns.size();
  if (c10::InferenceMode::is_enabled()) keepNormal(traits, write, args, *stack, num_returns);
  if (traits.view_op) return reportViewResults(*traits.view_op, key, args, *stack, num_returns);
  if (write) return keepWrittenGeometry(*write, *stack, num_returns);
  if (traits.scatters_into_self) {
    return reportGeometryOf(args[0].toTensor(), stack->back().toTensor());
  }
  if (!writesAnArgument(traits)) reportResultGeometry(op, key, args, *stack, num_returns);
}

size_t metaCacheSize() {
  std::lock_guard<std::mutex> lock(metaCache().mutex);
  return metaCache().entries.size();
}

}  // namespace lazyfuse
