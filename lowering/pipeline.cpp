#include "lowering/pipeline.h"

#include "lowering/passes.h"

namespace lazyfuse {

ExecutionPlan lowerGraph(const Graph& graph, bool fuse, bool batch, KernelTarget target,
                         bool region_writes) {
  ExecutionPlan plan;
  plan.graph_hash = graph.hash();
  plan.position_blind_hash = graph.positionBlindHash();
  plan.num_nodes = static_cast<uint32_t>(graph.nodes().size());
  if (fuse) {
    partitionGraph(graph, plan, target);
    if (batch) batchKernels(graph, plan);
  } else {
    scheduleExternCalls(graph, plan, region_writes);
  }
  // Lifetimes come last: they depend on the final order of the steps.
  computeLifetimes(graph, plan);
  if (fuse || !plan.region_writes.empty()) planDonations(graph, plan);
  labelSteps(graph, plan);
  findPositionGuards(graph, plan);
  return plan;
}

}  // namespace lazyfuse
