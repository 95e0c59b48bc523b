#include "backend/recorder.h"
#include "backend/functionalize_kernels.h"

#include "backend/aux_outputs.h"
#include "backend/detail/call_recorder.h"
#include "backend/device.h"
#include "backend/lax_meta.h"
#include "backend/lazy_tensor.h"
#include "backend/meta_templates.h"
#include "backend/op_traits.h"
#include "backend/random_draws.h"
#include "backend/step_boundaries.h"
#include "backend/write_checks.h"
#include "lazy_ir/check.h"
#include "lazy_ir/config.h"
#include "lazy_ir/metrics.h"

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

using detail::CallRecorder;

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
  // Note [Size-generic meta]: a call of new sizes may take its outputs from a template.
  const std::optional<CallShapes> shapes = callShapes(traits, args);
  std::shared_ptr<const AtenCallAttrs> attrs;
  if (shapes) attrs = fromMetaTemplate(*shapes, key, recorder);
  if (attrs != nullptr && config::verifyMeta()) {
    std::shared_ptr<const AtenCallAttrs> inferred = recorder.inferOnMeta(key);
    LF_INTERNAL_ASSERT(inferred->outputs == attrs->outputs && inferred->hash == attrs->hash,
                       traits.name, ": a meta template's outputs differ from the meta kernel's");
  }
  if (attrs != nullptr) {
    std::lock_guard<std::mutex> lock(cache.mutex);
    cache.entries.emplace(key, attrs);
    return attrs;
  }
  try {
    attrs = recorder.inferOnMeta(key);
  } catch (const c10::NotImplementedError&) {
    return nullptr;
  } catch (const std::exception&) {  // a c10::Error, or a Python meta kernel's exception
    refuseQuantizedCall(op, args, nullptr);
    checkLaxMetaOnCpu(op, traits, args);  // See Note [Lax meta kernels]
    raiseEagerErrorOnStandIns(op, args, /*one_per_dim=*/false);
    throw;
  }
  metrics::meta_cache_miss.add();
  refuseQuantizedCall(op, args, attrs.get());
  checkLaxMetaOnCpu(op, traits, args);
  if (traits.probes_stand_ins) raiseEagerErrorOnStandIns(op, args, /*one_per_dim=*/true);
  if (shapes) observeMeta(*shapes, attrs);
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
  const std::vector<at::Tensor> results = resultTensors(stack, num_results);
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
  if (redispatchThroughFunctionalize(op, stack)) return;
  const OpTraits& traits = traitsOf(op);
  const size_t num_args = op.schema().arguments().size();
  if (traits.eager) return runEagerly(op, traits, stack);
  if (traits.aux_outputs == AuxOutputs::kEagerOnCpu && hardwareDevice().is_cpu()) {
    return runEagerly(op, traits, stack);  // See Note [Aux outputs on the CPU]
  }
  beforeRecording();  // Note [Automatic step boundaries]
  torch::jit::Stack args(std::make_move_iterator(stack->end() - num_args),
                         std::make_move_iterator(stack->end()));
  if (hasBooleanIndex(traits, args)) {
    std::move(args.begin(), args.end(), stack->end() - num_args);
    return runEagerly(op, traits, stack);
  }
  CallRecorder recorder(op, traits, args);
  HashValue key = recorder.scan();
  std::shared_ptr<const AtenCallAttrs> attrs = lookupOrInfer(recorder, key, op, traits, args);
  if (attrs) checkScalarValuesOnStandIns(op, traits, key, args);
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
  afterRecording(key);
  torch::jit::drop(*stack, num_args);
  pushResults(*attrs, node, traits, args, /*factory=*/!recorder.anyLazy(), stack);
  const size_t num_returns = attrs->returns.size();
  if (c10::InferenceMode::is_enabled()) keepNormal(traits, write, args, *stack, num_returns);
  if (traits.view_op) return reportViewResults(*traits.view_op, key, args, *stack, num_returns);
  if (write) return keepWrittenGeometry(*write, *stack, num_returns);
  if (traits.scatters_into_self) {
    return reportGeometryOf(args[0].toTensor(), stack->back().toTensor());
  }
  if (!writesAnArgument(traits)) reportResultGeometry(op, traits, key, args, *stack, num_returns);
}

/// Quantized tensors have no lazy form: lazyfuse's values are dense tensors of the plain dtypes,
/// and PyTorch makes no quantized tensor of a lazy one (a sync failed on "empty_strided not
/// supported on quantized tensors yet"). A call that takes or makes one (a quantized input, dtype
/// argument or result) gets an error that says so, when its meta is inferred (once per call
/// shape) or its meta kernel fails: recording a cached call pays nothing.
void refuseQuantizedCall(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                         const AtenCallAttrs* attrs) {
  auto refuse = [&](at::ScalarType dtype) { refuseQuantizedDtype(dtype, op.schema().name()); };
  const auto& schema_args = op.schema().arguments();
  for (size_t i = 0; i < args.size() && i < schema_args.size(); ++i) {
    const c10::TypePtr& type = schema_args[i].real_type();  // type() says int for a dtype
    const bool dtype_arg = type->kind() == c10::TypeKind::ScalarTypeType ||
                           (type->kind() == c10::TypeKind::OptionalType &&
                            type->containedType(0)->kind() == c10::TypeKind::ScalarTypeType);
    if (args[i].isTensor() && args[i].toTensor().defined()) {
      refuse(args[i].toTensor().scalar_type());
    } else if (args[i].isInt() && dtype_arg) {
      refuse(static_cast<at::ScalarType>(args[i].toInt()));
    }
  }
  if (attrs == nullptr) return;
  for (const TensorMeta& out : attrs->outputs) refuse(out.dtype);
}

void refuseQuantizedDtype(c10::ScalarType dtype, std::string_view what) {
  TORCH_CHECK_NOT_IMPLEMENTED(!c10::isQIntType(dtype), what, ": quantized tensors (", dtype,
                              ") are not supported on the lazy device; quantize on the CPU");
}

size_t metaCacheSize() {
  std::lock_guard<std::mutex> lock(metaCache().mutex);
  return metaCache().entries.size();
}

}  // namespace lazyfuse
