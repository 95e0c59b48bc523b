// The position arguments a plan bakes in: Note [Positions as plan arguments] in lazy_ir/graph.h.

#include "lowering/detail/region_writes.h"
#include "lowering/passes.h"

#include <vector>

namespace lazyfuse {
namespace {

/// Fills `view.shifts` when the views at a position between its source and value start in
/// dimensions whose strides over the source are known (only select, slice and narrow views come
/// before the last of them), and appends the nodes between them to `between`. False when a view
/// at a position cannot shift it.
bool shiftView(const Graph& graph, StridedView& view, std::vector<uint32_t>& between) {
  std::vector<uint32_t> chain;  // value, then its input, ..., up to the source
  for (NodeRef ref = view.value;
       ref.position != view.source.position || ref.index != view.source.index;) {
    const Node& node = *graph.nodes()[ref.position];
    if (node.kind() != OpKind::kAten || graph.inputsOf(ref.position).empty()) return false;
    chain.push_back(ref.position);
    ref = graph.inputsOf(ref.position)[0];
  }
  // From the source on, the layout over the source's buffer, while the views keep it known.
  const TensorMeta& meta = graph.nodes()[view.source.position]->outputMeta(view.source.index);
  std::vector<int64_t> sizes = meta.sizes, strides = meta.strides;
  int64_t offset = 0;
  bool known = true;
  std::vector<PositionShift> shifts;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const bool positioned = !graph.nodes()[*it]->positionValues().empty();
    if (positioned && !known) return false;
    if (!known) continue;
    const std::optional<StartDim> dim = applyStartView(graph, *it, sizes, strides, offset);
    if (positioned && !dim) return false;
    known = dim.has_value();
    if (positioned) {
      shifts.push_back({*it, dim->size, dim->stride, viewStart(graph, *it, dim->size)});
    }
  }
  view.shifts = std::move(shifts);
  between.insert(between.end(), chain.begin() + 1, chain.end());
  return true;
}

}  // namespace

void findPositionGuards(const Graph& graph, ExecutionPlan& plan) {
  plan.position_guards.clear();
  const size_t n = graph.nodes().size();
  std::vector<bool> positioned(n, false);
  bool any = false;
  for (size_t position = 0; position < n; ++position) {
    const Node& node = *graph.nodes()[position];
    positioned[position] = node.kind() == OpKind::kAten && !node.positionValues().empty();
    any = any || positioned[position];
  }
  if (!any) return;
  // An extern step calls its op with the arguments of the graph being run.
  std::vector<bool> served(n, false);
  for (const PlanStep& step : plan.steps) {
    if (step.kind == StepKind::kExternCall) served[step.position] = true;
  }
  // A region write takes its offset from the graph being run (regionOffset); the views its chain
  // names are computed by no step when nothing else reads them.
  std::vector<uint32_t> written, views;
  for (const RegionWrite& write : plan.region_writes) {
    detail::regionWriteNodes(graph, write, written, views);
  }
  // A strided view takes its offset from the graph being run (viewOffset), shifted by the views
  // at a position between its source and itself, which no step computes when nothing else reads
  // them.
  for (StridedView& view : plan.views) {
    if (shiftView(graph, view, views)) written.push_back(view.value.position);
  }
  std::vector<bool> chain(n, false);
  for (uint32_t position : written) served[position] = chain[position] = true;
  for (uint32_t position : views) chain[position] = true;
  std::vector<bool> read_elsewhere(n, false);
  for (size_t position = 0; position < n; ++position) {
    for (const NodeRef& ref : graph.inputsOf(position)) {
      if (!chain[position]) read_elsewhere[ref.position] = true;
    }
  }
  for (const NodeRef& out : graph.outputs()) read_elsewhere[out.position] = true;
  for (size_t position = 0; position < n; ++position) {
    const bool in_chain = chain[position] && !read_elsewhere[position];
    if (positioned[position] && !served[position] && !in_chain) {
      plan.position_guards.push_back(static_cast<uint32_t>(position));
    }
  }
}

}  // namespace lazyfuse
