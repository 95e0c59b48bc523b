#pragma once

// The graph cache (backend/graph_cache.cpp) that a sync (backend/graph_executor.cpp) finds its
// plan in.

#include "backend/plan_compiler.h"
#include "backend/plan_replay.h"
#include "lazy_ir/graph.h"

#include <memory>

namespace lazyfuse::detail {

/// A cached plan and its replay state.
struct PlanEntry {
  std::shared_ptr<const CompiledPlan> plan;
  std::shared_ptr<PlanReplay> replay;
};

/// The plan of `graph` from the cache, or compiled and cached; a recurring small graph's plan
/// is compiled fused in time. See Note [Fusing recurring small graphs].
PlanEntry planFor(const Graph& graph);

}  // namespace lazyfuse::detail
