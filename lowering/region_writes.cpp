// Note [Region writes]
// A decoding step writes one row into each layer's slab of a KV cache:
// `cache[i, 0].index_copy_(2, pos, k)`. Functionalization records that as a new cache,
//   select_scatter(cache, select_scatter(select(cache, 0, i), index_copy(select(select(cache,
//                  0, i), 0, 0), 2, pos, k), 0, 0), 0, i)
// and a plan of kernels computed it as such: a copy of the slab (or a view of it), index_copy
// writing a new slab, and a kernel writing the whole cache again around it, twice per layer. Eager
// writes the rows alone, in place. So a chain of that form, found here on the graph, runs as one
// kRegionWrite step instead: the base's memory (or a copy of it), with index_copy_ into the
// region the view chain selects, which ATen computes on a meta tensor of the base's layout.
//
// The form, from the outermost scatter S inwards (or, with no view at all, an index_copy of a
// whole tensor: `cache.index_copy_(0, pos, row)` on a tensor the program holds or has just
// created, which can then write the rows alone where an extern call copied the whole tensor
// first; an index_copy of a view op's value stays an extern call, which reads that slab of its
// buffer through its strides where a region write would copy it first): S = select_scatter or
// slice_scatter (base, src, args), whose src is either another scatter whose self is the view of
// base that S scatters into (select_copy.int / slice_copy.Tensor with S's arguments after self:
// same dim, index, start, end, step), and so on, or, innermost, index_copy(self, dim, index,
// source) or copy(self, src) (a slice assignment, `cache[:, t] = k`) whose self is that chain of
// views of base: the step runs index_copy_ or copy_ (which broadcasts and converts src as copy
// does). The inner scatters and the index_copy or copy must have no other reader and be no graph
// output (their values are never computed), every argument of the chain must be a constant of the
// graph, and base must have the layout S's meta gives (what it becomes). Views in the chain may be
// separate nodes of the same op, source and arguments, as functionalization records a view once per
// use.
//
// The step writes in place (RegionWrite::may_donate, decided by planDonations) only when base is
// no graph output and no step after this one reads it or a view of it (device data sharing its
// storage with other device data, as functionalization's base does, only when those are done
// before it, as for a kernel's donation); at run time, only when nothing but the plan holds
// base's tensor and storage. Otherwise it copies base first, which costs what the scatter kernel
// did. index_copy_ raises eager's errors (an index out of range) when the step runs. For a copy,
// the copy of base costs what the scatter kernel did; written in place, only the region is.
//
// Base is most often device data: the cache the program holds, synced at every token. Copying
// it made each token cost the whole cache (a 64 MB cache: 16 ms a token against eager's 5 us),
// so device data is written in place too, at run time only when also (kernels/plan_runner.cpp,
// writesInPlace)
//   - nothing outside the graph and its sync targets reaches its node (DonationState::free_data),
//     so that no other lazy tensor still reads the old cache;
//   - the write cannot fail halfway: a copy_, or on the CPU an index_copy_ whose indices were
//     checked in range first (ATen checks them one by one as it writes). An index out of range
//     then takes the copying path and raises eager's error with the cache untouched. On a GPU
//     an index out of range is a device-side assert, which nothing survives;
//   - under a CUDA graph capture, the capture records the write (DonationState::regions_taken)
//     and each replay checks these conditions again before it writes (backend/plan_replay.cpp).
// A later step of the same plan that fails (an extern call raising on its data) then finds
// device data already written, and every target of the graph is broken (Note [Failed syncs]), as
// for a kernel that took device data; the counter BuffersDonated counts these writes too.

#include "lowering/detail/region_writes.h"

#include "lazy_ir/check.h"
#include "lowering/lowerings.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace lazyfuse::detail {
namespace {

enum class ViewKind { kNone, kSelect, kSlice };

/// Which view op a node is, as a select or slice view (`copy`) or as its scatter (`!copy`).
ViewKind viewKind(const Node& node, bool copy) {
  if (node.kind() != OpKind::kAten) return ViewKind::kNone;
  const std::string& name = node.aten().name;
  if (name == (copy ? "aten::select_copy.int" : "aten::select_scatter")) return ViewKind::kSelect;
  if (name == (copy ? "aten::slice_copy.Tensor" : "aten::slice_scatter")) return ViewKind::kSlice;
  return ViewKind::kNone;
}

/// A view's arguments after its tensor(s): (dim, index) or (dim, start, end, step).
struct ViewStep {
  ViewKind kind = ViewKind::kNone;
  std::vector<c10::IValue> args;
};

/// The constant arguments of `node` from schema position `first` on, or nullopt when one is not
/// a constant int or None.
std::optional<std::vector<c10::IValue>> constantArgs(const Node& node, size_t first) {
  std::vector<c10::IValue> args;
  const std::vector<ArgSlot>& slots = node.aten().args;
  for (size_t i = first; i < slots.size(); ++i) {
    if (slots[i].kind != ArgKind::kConstant) return std::nullopt;
    const c10::IValue& v = slots[i].constant;
    if (!v.isInt() && !v.isNone()) return std::nullopt;
    args.push_back(v);
  }
  return args;
}

/// Whether `node` is a view op as functionalization records it (select_copy.int, t_copy, ...):
/// an index_copy of such a value reads a slab of another buffer, which the extern call reads
/// through its strides (Note [Strided views of buffers]) and a region write would copy first.
bool isViewCopy(const Node& node) {
  if (node.kind() != OpKind::kAten) return false;
  const std::string& name = node.aten().name;
  const std::string op = name.substr(0, name.find('.'));
  const std::string suffix = "_copy";
  return op != "aten::index_copy" && op.size() > suffix.size() &&
         op.compare(op.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool sameRef(const NodeRef& a, const NodeRef& b) {
  return a.position == b.position && a.index == b.index;
}

class Finder {
 public:
  explicit Finder(const Graph& graph) : graph_(graph), users_(graph.nodes().size(), 0) {
    for (uint32_t pos = 0; pos < graph.nodes().size(); ++pos) {
      for (const NodeRef& ref : graph.inputsOf(pos)) ++users_[ref.position];
    }
    for (const NodeRef& out : graph.outputs()) ++users_[out.position];
  }

  /// The region write whose outermost scatter is at `position`, with the positions of the nodes
  /// it takes the place of.
  std::optional<RegionWrite> find(uint32_t position, std::vector<uint32_t>& absorbed) const {
    const Node& outer = *graph_.nodes()[position];
    const bool index_copy = outer.kind() == OpKind::kAten &&
                            outer.aten().name == "aten::index_copy" &&
                            !graph_.inputsOf(position).empty();
    if (!index_copy && viewKind(outer, /*copy=*/false) == ViewKind::kNone) return std::nullopt;
    const NodeRef base = graph_.inputsOf(position)[0];
    if (index_copy && isViewCopy(*graph_.nodes()[base.position])) return std::nullopt;
    const TensorMeta& base_meta = graph_.nodes()[base.position]->outputMeta(base.index);
    const TensorMeta& meta = outer.outputMeta(0);
    if (base_meta.dtype != meta.dtype || base_meta.sizes != meta.sizes ||
        base_meta.strides != meta.strides) {
      return std::nullopt;
    }
    // `cache.index_copy_(dim, pos, row)` on the whole tensor: its region is all of base.
    if (index_copy) return writeInto(position, base, position, {});
    std::vector<ViewStep> steps;
    uint32_t scatter = position;
    while (true) {
      const Node& node = *graph_.nodes()[scatter];
      std::optional<std::vector<c10::IValue>> args = constantArgs(node, 2);
      if (!args || !isView(graph_.inputsOf(scatter)[0], base, steps)) return std::nullopt;
      steps.push_back({viewKind(node, false), std::move(*args)});
      const NodeRef src = graph_.inputsOf(scatter)[1];
      if (!onlyFeeds(src)) return std::nullopt;
      const Node& inner = *graph_.nodes()[src.position];
      absorbed.push_back(src.position);
      if (viewKind(inner, /*copy=*/false) != ViewKind::kNone) {
        scatter = src.position;
        continue;
      }
      if (inner.kind() != OpKind::kAten ||
          (inner.aten().name != "aten::index_copy" && inner.aten().name != "aten::copy")) {
        return std::nullopt;
      }
      return writeInto(position, base, src.position, steps);
    }
  }

 private:
  /// Whether `ref` is an output that only one reader uses, once, and no graph output.
  bool onlyFeeds(const NodeRef& ref) const {
    const Node& node = *graph_.nodes()[ref.position];
    return ref.index == 0 && node.numOutputs() == 1 && users_[ref.position] == 1;
  }

  /// Whether `ref` is `base` viewed by `steps`, in order.
  bool isView(NodeRef ref, const NodeRef& base, const std::vector<ViewStep>& steps) const {
    for (auto step = steps.rbegin(); step != steps.rend(); ++step) {
      const Node& node = *graph_.nodes()[ref.position];
      if (ref.index != 0 || viewKind(node, /*copy=*/true) != step->kind) return false;
      std::optional<std::vector<c10::IValue>> args = constantArgs(node, 1);
      if (!args || args->size() != step->args.size()) return false;
      for (size_t i = 0; i < args->size(); ++i) {
        if (!c10::_fastEqualsForContainer((*args)[i], step->args[i])) return false;
      }
      ref = graph_.inputsOf(ref.position)[0];
    }
    return sameRef(ref, base);
  }

  /// The write of `op`, an index_copy(self, dim, index, source) or a copy(self, src,
  /// non_blocking) whose self is `base` viewed by `steps`.
  std::optional<RegionWrite> writeInto(uint32_t position, const NodeRef& base, uint32_t op,
                                       const std::vector<ViewStep>& steps) const {
    const Node& node = *graph_.nodes()[op];
    const c10::ArrayRef<NodeRef> inputs = graph_.inputsOf(op);
    const std::vector<ArgSlot>& slots = node.aten().args;
    const bool index_copy = node.aten().name == "aten::index_copy";
    if (index_copy ? (inputs.size() != 3 || slots.size() != 4 ||
                      slots[1].kind != ArgKind::kConstant || !slots[1].constant.isInt())
                   : inputs.size() != 2) {
      return std::nullopt;
    }
    if (!isView(inputs[0], base, steps)) return std::nullopt;
    const TensorMeta& meta = graph_.nodes()[base.position]->outputMeta(base.index);
    at::Tensor region = at::empty_strided(meta.sizes, meta.strides,
                                          at::TensorOptions().dtype(meta.dtype).device(at::kMeta));
    for (const ViewStep& step : steps) {
      const bool select = step.kind == ViewKind::kSelect;
      if (step.args[0].isNone() || step.args[select ? 1 : 3].isNone()) return std::nullopt;
      const int64_t dim = step.args[0].toInt();
      if (step.kind == ViewKind::kSelect) {
        region = region.select(dim, step.args[1].toInt());
        continue;
      }
      auto optional = [](const c10::IValue& v) {
        return v.isNone() ? std::nullopt : std::optional<int64_t>(v.toInt());
      };
      region =
          region.slice(dim, optional(step.args[1]), optional(step.args[2]), step.args[3].toInt());
    }
    if (region.sizes() != c10::IntArrayRef(node.outputMeta(0).sizes)) return std::nullopt;
    RegionWrite write;
    write.value = {position, 0};
    write.base = base;
    write.sizes = region.sizes().vec();
    write.strides = region.strides().vec();
    write.offset = region.storage_offset();
    write.index_copy = index_copy;
    if (index_copy) {
      write.dim = slots[1].constant.toInt();
      write.index = inputs[1];
    }
    write.source = inputs.back();
    write.op = op;
    return write;
  }

  const Graph& graph_;
  std::vector<int32_t> users_;  // per node: how many inputs and graph outputs refer to it
};

}  // namespace

void regionWriteNodes(const Graph& graph, const RegionWrite& write, std::vector<uint32_t>& written,
                      std::vector<uint32_t>& views) {
  // The views from base to `ref` (functionalization records a view per use).
  auto chain = [&](NodeRef ref) {
    while (!sameRef(ref, write.base)) {
      views.push_back(ref.position);
      ref = graph.inputsOf(ref.position)[0];
    }
  };
  uint32_t scatter = write.value.position;
  while (scatter != write.op) {
    written.push_back(scatter);
    chain(graph.inputsOf(scatter)[0]);
    scatter = graph.inputsOf(scatter)[1].position;
  }
  written.push_back(write.op);
  chain(graph.inputsOf(write.op)[0]);
}

std::vector<RegionWrite> findRegionWrites(const Graph& graph, std::vector<int32_t>& region_of,
                                          std::vector<bool>& absorbed) {
  std::vector<RegionWrite> writes;
  region_of.assign(graph.nodes().size(), -1);
  absorbed.assign(graph.nodes().size(), false);
  const Finder finder(graph);
  // From the last node back: an outer scatter is seen before the scatters it takes in.
  for (uint32_t pos = static_cast<uint32_t>(graph.nodes().size()); pos-- > 0;) {
    if (absorbed[pos]) continue;
    std::vector<uint32_t> inner;
    std::optional<RegionWrite> write = finder.find(pos, inner);
    if (!write) continue;
    region_of[pos] = static_cast<int32_t>(writes.size());
    for (uint32_t p : inner) absorbed[p] = true;
    writes.push_back(std::move(*write));
  }
  return writes;
}

}  // namespace lazyfuse::detail

namespace lazyfuse {

int64_t viewStart(const Graph& graph, uint32_t position, int64_t size) {
  const Node& node = *graph.nodes()[position];
  const c10::IValue& first = node.aten().args.at(2).constant;
  int64_t start = first.isNone() ? 0 : first.toInt();
  if (start < 0) start += size;
  // A select's index and a narrow's start are in range (checked when recorded); a slice's start
  // is clamped, as at::slice does.
  return detail::viewKind(node, true) == detail::ViewKind::kSlice
             ? std::clamp<int64_t>(start, 0, size)
             : start;
}

std::optional<StartDim> applyStartView(const Graph& graph, uint32_t position,
                                       std::vector<int64_t>& sizes, std::vector<int64_t>& strides,
                                       int64_t& offset) {
  const Node& node = *graph.nodes()[position];
  const detail::ViewKind kind = detail::viewKind(node, true);
  const bool narrow = node.kind() == OpKind::kAten && node.aten().name == "aten::narrow_copy";
  if (kind == detail::ViewKind::kNone && !narrow) return std::nullopt;
  const std::vector<ArgSlot>& args = node.aten().args;
  const int64_t rank = static_cast<int64_t>(sizes.size());
  int64_t dim = args.at(1).constant.toInt();
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank) return std::nullopt;
  const StartDim before{sizes[dim], strides[dim]};
  const int64_t size = sizes[dim];
  const int64_t start = viewStart(graph, position, size);
  offset += start * strides[dim];
  if (kind == detail::ViewKind::kSelect) {
    sizes.erase(sizes.begin() + dim);
    strides.erase(strides.begin() + dim);
    return before;
  }
  if (narrow) {
    sizes[dim] = args.at(3).constant.toInt();
    return before;
  }
  const c10::IValue& last = args.at(3).constant;
  const int64_t step = args.at(4).constant.toInt();
  int64_t end = last.isNone() ? size : last.toInt();
  if (end < 0) end += size;
  end = std::clamp<int64_t>(end, start, size);
  sizes[dim] = (end - start + step - 1) / step;
  strides[dim] *= step;
  return before;
}

int64_t regionOffset(const Graph& graph, const RegionWrite& write) {
  std::vector<uint32_t> chain;  // the views from base to the region, outermost first
  NodeRef ref = graph.inputsOf(write.op)[0];
  while (!detail::sameRef(ref, write.base)) {
    chain.push_back(ref.position);
    ref = graph.inputsOf(ref.position)[0];
  }
  const TensorMeta& meta = graph.nodes()[write.base.position]->outputMeta(write.base.index);
  std::vector<int64_t> sizes = meta.sizes, strides = meta.strides;
  int64_t offset = 0;
  // As at::select and at::slice place a view, which lowering asked of a meta tensor
  // (Finder::writeInto): the graph's sizes are those it checked there.
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const bool view = applyStartView(graph, *it, sizes, strides, offset).has_value();
    LF_INTERNAL_ASSERT(view, "a region write's chain holds ", graph.nodes()[*it]->opName());
  }
  return offset;
}

int64_t viewOffset(const Graph& graph, const StridedView& view) {
  int64_t offset = view.offset;
  for (const PositionShift& shift : view.shifts) {
    offset += (viewStart(graph, shift.position, shift.size) - shift.start) * shift.stride;
  }
  return offset;
}

}  // namespace lazyfuse
