#pragma once

// The state the fusion partitioner builds (Note [Fusion partitioning]) and the last step that
// turns its kernel groups into Kernel IR and plan steps.

#include "lowering/execution_plan.h"
#include "lowering/loop_graph.h"

#include <optional>
#include <vector>

namespace lazyfuse {

struct KernelGroup {
  std::vector<int64_t> domain;
  std::vector<LoopId> members;  // realized loop nodes it computes, in graph order
  int32_t step = -1;
  int64_t nodes = 0;  // loop nodes its members compute, inlined ones included (an estimate)
};

struct Partition {
  explicit Partition(size_t num_nodes);

  struct Step {
    int32_t group = -1;     // a kernel group, or -1 for an extern call or a strided view
    uint32_t position = 0;  // the extern call's node
    int32_t view = -1;      // an index into `views`
  };

  LoopGraph loops;
  std::vector<std::vector<LoopId>> node_loops;  // per graph node: a loop node per output
  std::vector<bool> is_extern;                  // per graph node
  std::vector<int32_t> extern_step;             // per graph node
  std::vector<std::optional<NodeRef>> ref_of;   // per loop node: the graph value it is
  std::vector<bool> live, realized;             // per loop node
  std::vector<int32_t> group_of, step_of;       // per realized loop node
  std::vector<KernelGroup> groups;
  std::vector<Step> steps;
  std::vector<StridedView> views;  // Note [Strided views of buffers]
  std::vector<int32_t> view_of;    // per loop node: its index in `views`, or -1
  // Note [Region writes]: per graph node, the write it is the outermost scatter of (or -1), and
  // whether it is a node a write takes the place of.
  std::vector<RegionWrite> region_writes;
  std::vector<int32_t> region_of;
  std::vector<bool> absorbed;
};

/// Appends the partition's steps to `plan`, building each group's kernel.
void emitKernels(const Graph& graph, const Partition& partition, ExecutionPlan& plan);

}  // namespace lazyfuse
