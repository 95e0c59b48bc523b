#pragma once

#include "lowering/execution_plan.h"

namespace lazyfuse {

/// Lowers a graph into a plan by running the passes of lowering/pipeline.cpp in order.
ExecutionPlan lowerGraph(const Graph& graph);

}  // namespace lazyfuse
