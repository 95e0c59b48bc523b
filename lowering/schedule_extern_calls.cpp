#include "lowering/detail/region_writes.h"
#include "lowering/passes.h"

namespace lazyfuse {

bool scheduleExternCalls(const Graph& graph, ExecutionPlan& plan, bool region_writes) {
  const size_t n = graph.nodes().size();
  std::vector<int32_t> region_of(n, -1);
  std::vector<bool> skipped(n, false);
  std::vector<RegionWrite> writes;
  if (region_writes) {
    writes = detail::findRegionWrites(graph, region_of, skipped);
    // What only skipped nodes read (the views of the written tensor) is not computed either.
    std::vector<bool> needed(n, false);
    for (const NodeRef& out : graph.outputs()) needed[out.position] = true;
    for (size_t position = n; position-- > 0;) {
      if (!needed[position] && region_of[position] < 0) {
        skipped[position] = true;
        continue;
      }
      if (region_of[position] >= 0) {
        const RegionWrite& write = writes[region_of[position]];
        needed[write.base.position] = true;
        for (const NodeRef& ref : regionWriteReads(write)) needed[ref.position] = true;
        continue;
      }
      for (const NodeRef& ref : graph.inputsOf(position)) needed[ref.position] = true;
    }
  }
  bool changed = false;
  for (size_t position = 0; position < n; ++position) {
    if (graph.nodes()[position]->kind() != OpKind::kAten || skipped[position]) continue;
    PlanStep step;
    if (region_of[position] >= 0) {
      step.kind = StepKind::kRegionWrite;
      step.region = static_cast<int32_t>(plan.region_writes.size());
      plan.region_writes.push_back(writes[region_of[position]]);
    } else {
      step.kind = StepKind::kExternCall;
      step.position = static_cast<uint32_t>(position);
    }
    plan.steps.push_back(std::move(step));
    changed = true;
  }
  return changed;
}

}  // namespace lazyfuse
