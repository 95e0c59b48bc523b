#include "lowering/passes.h"

namespace lazyfuse {

std::vector<uint32_t> lastUses(const Graph& graph, const ExecutionPlan& plan) {
  std::vector<uint32_t> last(graph.nodes().size(), kNeverUsed);
  for (uint32_t s = 0; s < plan.steps.size(); ++s) {
    for (uint32_t position : stepValues(graph, plan, plan.steps[s])) last[position] = s;
  }
  return last;
}

std::vector<uint32_t> stepValues(const Graph& graph, const ExecutionPlan& plan,
                                 const PlanStep& step) {
  std::vector<uint32_t> positions;
  if (step.kind == StepKind::kExternCall) {
    positions.push_back(step.position);  // a value nobody reads dies at its own step
    for (const NodeRef& ref : graph.inputsOf(step.position)) positions.push_back(ref.position);
    return positions;
  }
  if (step.kind == StepKind::kStridedView) {
    const StridedView& view = plan.views.at(step.view);
    return {view.value.position, view.source.position};
  }
  if (step.kind == StepKind::kRegionWrite) {
    const RegionWrite& write = plan.region_writes.at(step.region);
    std::vector<uint32_t> positions = {write.value.position, write.base.position};
    for (const NodeRef& ref : regionWriteReads(write)) positions.push_back(ref.position);
    return positions;
  }
  std::vector<int32_t> kernels = {step.kernel};
  if (step.kind == StepKind::kKernelBatch) kernels = plan.batches.at(step.batch).kernels;
  for (int32_t k : kernels) {
    for (const BufferBinding& b : plan.kernels.at(k).buffers) {
      if (!b.temp) positions.push_back(b.value.position);
    }
  }
  return positions;
}

bool computeLifetimes(const Graph& graph, ExecutionPlan& plan) {
  std::vector<uint32_t> last = lastUses(graph, plan);
  for (const NodeRef& out : graph.outputs()) last[out.position] = kNeverUsed;
  for (uint32_t position : graph.dataPositions()) last[position] = kNeverUsed;
  bool changed = false;
  for (uint32_t position = 0; position < last.size(); ++position) {
    if (last[position] == kNeverUsed) continue;
    plan.steps[last[position]].release_after.push_back(position);
    changed = true;
  }
  return changed;
}

}  // namespace lazyfuse
