#pragma once

#include "lowering/execution_plan.h"

namespace lazyfuse {

/// Appends one extern step per ATen node, in graph order. Afterwards every ATen node has a step.
bool scheduleExternCalls(const Graph& graph, ExecutionPlan& plan);

/// Fills `release_after` so every intermediate buffer is dropped after its last use. Afterwards
/// each node position that is neither device data nor a graph output is released exactly once.
bool computeLifetimes(const Graph& graph, ExecutionPlan& plan);

}  // namespace lazyfuse
