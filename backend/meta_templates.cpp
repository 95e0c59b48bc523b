#include "backend/meta_templates.h"

#include "backend/detail/call_recorder.h"
#include "backend/lax_meta.h"
#include "backend/lazy_tensor.h"
#include "lazy_ir/check.h"
#include "lazy_ir/config.h"
#include "lazy_ir/metrics.h"

#include <ATen/core/Tensor.h>
#include <c10/util/strides.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

namespace lazyfuse {

// Note [Size-generic meta]
// A call's output dtypes and shapes come from its op's meta kernel, cached under the call's
// input metadata (Note [Meta cache]). A program whose sizes vary misses that cache at every new
// size, and many meta kernels are Python (torch._refs and torch._decomp: softmax's backward,
// pow, sum), at 0.1-0.5 ms a call: most of what a new size cost before its kernels were found
// (Note [Shape-generic kernels]). So for the ops whose outputs follow from their inputs' sizes by
// equalities (pointwise ops, reductions, softmax and matrix products:
// hasSizeGenericMeta), meta results are also kept as templates, under a generic key: the op, the
// dtypes and ranks of its inputs, which of their sizes are 1, its constants and parameter kinds,
// but not the other sizes. Only calls whose inputs are contiguous and have no size 0 take part,
// and only results that are contiguous.
// - A template learns from the calls it sees inferred on Meta (up to kMaxObservations): the
//   equalities between input sizes that held in every one, and for each output size the input
//   size it equalled in every one (or 1, where it was always 1). No source for an output size
//   ends the template: calls of that key are inferred on Meta from then on.
// - It serves calls once it has seen two different input sizes: a call whose sizes keep every
//   equality gets outputs of its sources' sizes, contiguous, without a meta kernel. A call that
//   breaks one (a square matrix seen twice, then a wide one; or a real size mismatch) is
//   inferred on Meta, which raises eager's error where there is one, and teaches the template.
// A generalization could only be wrong if an output size equalled an input size in two calls
// of different sizes by chance, which the ops taking part rule out. LAZYFUSE_VERIFY_META=1
// infers every served call on Meta too and fails on a difference; the test suites pass with it.
// Views, cat and LayerNorm, whose outputs follow from size arguments, take part through shape
// functions instead (Note [Shape functions]): their size arguments leave the generic key (but for
// their count and which are 1), and a call whose shape function gives its sizes takes its dtypes
// and returns from one call of its generic key inferred on Meta. Counted by MetaTemplateHits.

namespace {

constexpr size_t kMaxObservations = 8;

struct Observation {
  std::vector<std::vector<int64_t>> inputs;
  std::vector<std::vector<int64_t>> outputs;
};

struct InputDim {
  uint32_t input;
  uint32_t dim;
};

struct MetaTemplate {
  bool ended = false;
  std::shared_ptr<const AtenCallAttrs> first;  // the first call's attrs: slots, returns, dtypes
  std::vector<Observation> seen;
  std::vector<InputDim> dims;  // every input dim, flattened
  // Derived from `seen`; a template serves calls once it has seen two sizes and has not ended.
  std::vector<std::pair<int32_t, int32_t>> equal;  // flat dims equal in every call seen
  std::vector<std::vector<int32_t>> sources;       // per output, per dim: a flat dim, or -1 for 1
};

struct Templates {
  std::mutex mutex;
  std::unordered_map<HashValue, MetaTemplate> entries;
};

Templates& templates() {
  static Templates* instance = new Templates();
  return *instance;
}

bool isContiguous(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  return strides == c10::IntArrayRef(c10::contiguous_strides(sizes));
}

bool anyZero(c10::IntArrayRef sizes) {
  return std::find(sizes.begin(), sizes.end(), 0) != sizes.end();
}

int64_t sizeAt(const std::vector<std::vector<int64_t>>& inputs, const InputDim& d) {
  return inputs[d.input][d.dim];
}

/// Derives equalities and sources from every call seen; false when an output size has no source.
bool derive(MetaTemplate& t) {
  t.equal.clear();
  t.sources.clear();
  const auto n = static_cast<int32_t>(t.dims.size());
  auto equalEverywhere = [&](auto&& value_a, auto&& value_b) {
    for (const Observation& o : t.seen) {
      if (value_a(o) != value_b(o)) return false;
    }
    return true;
  };
  for (int32_t p = 0; p < n; ++p) {
    for (int32_t q = p + 1; q < n; ++q) {
      if (equalEverywhere([&](const Observation& o) { return sizeAt(o.inputs, t.dims[p]); },
                          [&](const Observation& o) { return sizeAt(o.inputs, t.dims[q]); })) {
        t.equal.emplace_back(p, q);
      }
    }
  }
  const Observation& first = t.seen.front();
  for (size_t out = 0; out < first.outputs.size(); ++out) {
    std::vector<int32_t> dims;
    for (size_t d = 0; d < first.outputs[out].size(); ++d) {
      auto output = [&](const Observation& o) { return o.outputs[out][d]; };
      int32_t source = -1;
      for (int32_t p = 0; p < n && source < 0; ++p) {
        if (equalEverywhere(output,
                            [&](const Observation& o) { return sizeAt(o.inputs, t.dims[p]); })) {
          source = p;
        }
      }
      if (source < 0 && !equalEverywhere(output, [](const Observation&) { return 1; })) {
        return false;
      }
      dims.push_back(source);
    }
    t.sources.push_back(std::move(dims));
  }
  return true;
}

bool keepsEqualities(const MetaTemplate& t, const std::vector<std::vector<int64_t>>& inputs) {
  for (const auto& [p, q] : t.equal) {
    if (sizeAt(inputs, t.dims[p]) != sizeAt(inputs, t.dims[q])) return false;
  }
  return true;
}

/// Whether `outputs` are contiguous tensors of these sizes.
bool contiguousOfSizes(const std::vector<TensorMeta>& outputs, const ShapeList& sizes) {
  if (outputs.size() != sizes.size()) return false;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k].sizes != sizes[k] || !isContiguous(outputs[k].sizes, outputs[k].strides)) {
      return false;
    }
  }
  return true;
}

// Note [Shape functions]: a call inferred on Meta shows the attrs of the calls of its generic key,
// once its outputs are what the shape function gave.
void observeShapeFunction(const ShapeList& computed, HashValue generic,
                          std::shared_ptr<const AtenCallAttrs> attrs) {
  const bool agrees = contiguousOfSizes(attrs->outputs, computed);
  LF_INTERNAL_ASSERT(agrees || !config::verifyMeta(), attrs->name,
                     ": the shape function's sizes differ from the meta kernel's");
  Templates& all = templates();
  std::lock_guard<std::mutex> lock(all.mutex);
  MetaTemplate& t = all.entries[generic];
  if (!agrees) t.ended = true;
  if (!t.ended && t.first == nullptr) t.first = std::move(attrs);
}

/// The attrs of a call whose outputs have the sizes `computed`, from the attrs of an earlier call
/// of its generic key; nullptr when there is none.
std::shared_ptr<AtenCallAttrs> fromShapeFunction(const ShapeList& computed, HashValue generic,
                                                 const detail::CallRecorder& recorder) {
  std::shared_ptr<const AtenCallAttrs> first;
  {
    Templates& all = templates();
    std::lock_guard<std::mutex> lock(all.mutex);
    auto it = all.entries.find(generic);
    if (it == all.entries.end() || it->second.ended) return nullptr;
    first = it->second.first;
  }
  if (first == nullptr || first->outputs.empty()) return nullptr;
  auto attrs = std::make_shared<AtenCallAttrs>(first->op);
  attrs->name = first->name;
  attrs->args = recorder.slots();
  attrs->returns = first->returns;
  // A tensor list's length follows the sizes (split, unbind); any other count is fixed.
  const bool one_list =
      attrs->returns.size() == 1 && attrs->returns[0].kind == ReturnKind::kTensorList;
  if (one_list) {
    attrs->returns[0].count = static_cast<uint32_t>(computed.size());
  } else if (computed.size() != first->outputs.size()) {
    return nullptr;
  }
  for (size_t k = 0; k < computed.size(); ++k) {
    TensorMeta meta;
    meta.dtype = first->outputs[std::min(k, first->outputs.size() - 1)].dtype;
    meta.sizes = computed[k];
    const c10::DimVector strides = c10::contiguous_strides(meta.sizes);
    meta.strides.assign(strides.begin(), strides.end());
    attrs->outputs.push_back(std::move(meta));
  }
  return attrs;
}

}  // namespace

bool hasSizeGenericMeta(const c10::OperatorHandle& op, const OpTraits& traits) {
  static const std::set<std::string> by_name = {"aten::_softmax",
                                                "aten::_log_softmax",
                                                "aten::_softmax_backward_data",
                                                "aten::_log_softmax_backward_data",
                                                "aten::mm",
                                                "aten::bmm",
                                                "aten::addmm",
                                                "aten::matmul",
                                                "aten::linear"};
  const bool by_function = traits.shape_function != nullptr;  // Note [Shape functions]
  if (traits.eager || (traits.probes_stand_ins && by_function)) return false;
  if (!by_function && (traits.view_op || traits.scatters_into_self)) return false;
  // native_layer_norm's statistics are corrected after Meta (Note [Aux outputs on the CPU]) in
  // their dtype alone: its shape function gives their sizes, the call inferred on Meta the dtypes.
  const bool layer_norm = op.schema().name() == "aten::native_layer_norm";
  if (traits.aux_outputs != AuxOutputs::kSameAsMeta && !layer_norm) return false;
  if (op.hasTag(at::Tag::nondeterministic_seeded) || isLaxMeta(op)) return false;
  for (uint8_t generator : traits.generator_arg) {
    if (generator) return false;
  }
  return by_function || op.hasTag(at::Tag::pointwise) || op.hasTag(at::Tag::reduction) ||
         by_name.count(op.schema().name()) > 0;
}

std::optional<CallShapes> callShapes(const OpTraits& traits, const torch::jit::Stack& args) {
  if (!traits.generic_meta) return std::nullopt;
  CallShapes shapes;
  HashValue g = traits.name_hash;
  const bool by_function = traits.shape_function != nullptr;
  // A lazy tensor's dtype, rank, and which of its sizes are 1; false when it takes no part.
  auto addTensor = [&](const at::Tensor& t) {
    const LazyTensorImpl* impl = lazyImpl(t);
    if (impl == nullptr) return false;
    const c10::IntArrayRef sizes = impl->sizes();
    if (anyZero(sizes) || !isContiguous(sizes, impl->traceStrides())) return false;
    g = hashCombine(hashCombine(g, static_cast<HashValue>(t.scalar_type())), sizes.size());
    for (int64_t s : sizes) g = hashCombine(g, s == 1);
    shapes.inputs.push_back(sizes.vec());
    return true;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = args[i];
    g = hashCombine(g, i);
    if (by_function && v.isTensorList()) {  // cat's operands
      const c10::List<at::Tensor> list = v.toTensorList();
      g = hashCombine(g, list.size());
      for (const at::Tensor& t : list) {
        if (!addTensor(t)) return std::nullopt;
      }
      continue;
    }
    if (by_function && traits.size_arg[i]) {  // its value is left to the shape function
      if (v.isNone()) g = hashCombine(g, 0x0defULL);
      if (v.isIntList()) {
        g = hashCombine(g, v.toIntList().size());
        for (int64_t s : v.toIntList()) g = hashCombine(g, s == 1);
      }
      continue;
    }
    // Tensor lists and optional tensor lists (int and float lists are constants, below).
    if (v.isTensorList() || v.isGenerator() ||
        (v.isList() && !traits.scalar_arg[i] && !v.isIntList() && !v.isDoubleList() &&
         !v.isBoolList())) {
      return std::nullopt;
    }
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) {
        g = hashCombine(g, 0x0defULL);
        continue;
      }
      if (lazyImpl(t) == nullptr) {  // a 0-dim CPU tensor parameter, as CallRecorder::scanTensor
        g = detail::hashCpuScalarParam(g, t);
        continue;
      }
      if (!addTensor(t)) return std::nullopt;
      continue;
    }
    if (traits.scalar_arg[i] && !traits.scalars_are_constants) {
      g = detail::hashParamKind(g, v);
      continue;
    }
    g = hashIValue(g, v);
  }
  if (shapes.inputs.empty()) return std::nullopt;
  if (by_function) {
    shapes.computed = traits.shape_function(args);
    if (!shapes.computed) return std::nullopt;
  }
  shapes.generic = g;
  return shapes;
}

std::shared_ptr<const AtenCallAttrs> fromMetaTemplate(const CallShapes& shapes, HashValue key,
                                                      const detail::CallRecorder& recorder) {
  std::shared_ptr<AtenCallAttrs> attrs;
  if (shapes.computed) {
    attrs = fromShapeFunction(*shapes.computed, shapes.generic, recorder);
    if (attrs == nullptr) return nullptr;
  } else {
    Templates& all = templates();
    std::lock_guard<std::mutex> lock(all.mutex);
    auto it = all.entries.find(shapes.generic);
    if (it == all.entries.end()) return nullptr;
    const MetaTemplate& t = it->second;
    if (t.ended || t.seen.size() < 2 || !keepsEqualities(t, shapes.inputs)) return nullptr;
    attrs = std::make_shared<AtenCallAttrs>(*t.first);
    for (size_t out = 0; out < t.sources.size(); ++out) {
      TensorMeta& meta = attrs->outputs[out];
      for (size_t d = 0; d < t.sources[out].size(); ++d) {
        const int32_t source = t.sources[out][d];
        meta.sizes[d] = source < 0 ? 1 : sizeAt(shapes.inputs, t.dims[source]);
      }
      const c10::DimVector strides = c10::contiguous_strides(meta.sizes);
      meta.strides.assign(strides.begin(), strides.end());
    }
  }
  attrs->finalize();
  attrs->combineIntoHash(key, recorder.positionBlindKey());  // as CallRecorder::inferOnMeta
  metrics::meta_template_hits.add();
  return attrs;
}

void observeMeta(const CallShapes& shapes, std::shared_ptr<const AtenCallAttrs> attrs) {
  if (shapes.computed) {
    observeShapeFunction(*shapes.computed, shapes.generic, std::move(attrs));
    return;
  }
  Observation seen{shapes.inputs, {}};
  bool usable = true;
  for (const TensorMeta& meta : attrs->outputs) {
    usable = usable && !anyZero(meta.sizes) && isContiguous(meta.sizes, meta.strides);
    seen.outputs.push_back(meta.sizes);
  }
  Templates& all = templates();
  std::lock_guard<std::mutex> lock(all.mutex);
  MetaTemplate& t = all.entries[shapes.generic];
  if (t.ended || t.seen.size() >= kMaxObservations) return;
  if (!usable) {
    t.ended = true;
    return;
  }
  if (t.first == nullptr) {
    t.first = std::move(attrs);
    for (uint32_t i = 0; i < shapes.inputs.size(); ++i) {
      for (uint32_t d = 0; d < shapes.inputs[i].size(); ++d) t.dims.push_back({i, d});
    }
  } else {
    // The generic key fixes ranks and slots; dtypes and output ranks must agree too.
    bool same = attrs->outputs.size() == t.first->outputs.size();
    for (size_t k = 0; same && k < attrs->outputs.size(); ++k) {
      same = attrs->outputs[k].dtype == t.first->outputs[k].dtype &&
             attrs->outputs[k].sizes.size() == t.first->outputs[k].sizes.size();
    }
    if (!same) {
      t.ended = true;
      return;
    }
  }
  for (const Observation& o : t.seen) {
    if (o.inputs == seen.inputs) return;
  }
  t.seen.push_back(std::move(seen));
  if (t.seen.size() >= 2) t.ended = !derive(t);
}

}  // namespace lazyfuse
