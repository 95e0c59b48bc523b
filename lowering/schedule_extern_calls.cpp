#include "lowering/passes.h"

namespace lazyfuse {

bool scheduleExternCalls(const Graph& graph, ExecutionPlan& plan) {
  bool changed = false;
  for (size_t position = 0; position < graph.nodes().size(); ++position) {
    if (graph.nodes()[position]->kind() != OpKind::kAten) continue;
    PlanStep step;
    step.kind = StepKind::kExternCall;
    step.position = static_cast<uint32_t>(position);
    plan.steps.push_back(std::move(step));
    changed = true;
  }
  return changed;
}

}  // namespace lazyfuse
