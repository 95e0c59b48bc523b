#include "lowering/passes.h"

namespace lazyfuse {
namespace {

constexpr uint32_t kNever = UINT32_MAX;

/// For each node position, the index of the last step that reads it (kNever if none).
std::vector<uint32_t> lastUses(const Graph& graph, const ExecutionPlan& plan) {
  std::vector<uint32_t> last(graph.nodes().size(), kNever);
  for (uint32_t s = 0; s < plan.steps.size(); ++s) {
    last[plan.steps[s].position] = s;  // a value nobody reads dies at its own step
    for (const NodeRef& ref : graph.inputsOf(plan.steps[s].position)) last[ref.position] = s;
  }
  return last;
}

}  // namespace

bool computeLifetimes(const Graph& graph, ExecutionPlan& plan) {
  std::vector<uint32_t> last = lastUses(graph, plan);
  for (const NodeRef& out : graph.outputs()) last[out.position] = kNever;
  for (uint32_t position : graph.dataPositions()) last[position] = kNever;
  bool changed = false;
  for (uint32_t position = 0; position < last.size(); ++position) {
    if (last[position] == kNever) continue;
    plan.steps[last[position]].release_after.push_back(position);
    changed = true;
  }
  return changed;
}

}  // namespace lazyfuse
