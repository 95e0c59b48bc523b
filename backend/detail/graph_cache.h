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

/// While it lives, a graph this thread compiles for the first time is fused whatever its size,
/// as if it recurred (an ahead-of-time package's graph: Note [Ahead-of-time packages]).
class ScopedFuseNewGraphs {
 public:
  ScopedFuseNewGraphs();
  ~ScopedFuseNewGraphs();
  ScopedFuseNewGraphs(const ScopedFuseNewGraphs&) = delete;
  ScopedFuseNewGraphs& operator=(const ScopedFuseNewGraphs&) = delete;

 private:
  bool previous_;
};

}  // namespace lazyfuse::detail
