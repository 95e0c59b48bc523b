// The graph cache: the compiled plan of each graph hash, and its replay state.

#include "backend/detail/graph_cache.h"

#include "backend/logging.h"
#include "lazy_ir/check.h"
#include "lazy_ir/metrics.h"

#include <ATen/record_function.h>

#include <memory>
#include <mutex>
#include <unordered_map>

namespace lazyfuse {
namespace {

// Note [Fusing recurring small graphs]
// Under LAZYFUSE_FUSION=auto a graph with little work runs node by node, since compiling its
// kernels (~0.1 s with a cold disk cache, ~2 ms from it) costs more than fusing saves in one
// run (Note [When graphs are fused]). A graph that recurs is another matter: a training or
// inference loop over a small model runs the same graph every step, and node by node each run
// costs an ATen call (on a GPU, a launch) of a few microseconds per node, where the fused plan
// is a few kernels. So a cached plan left unfused for its size is compiled fused once its runs
// times its nodes reach kNodeRunsBeforeFusing, and replaces the cached one (counted in
// RecurringGraphsFused; it is not a new graph, so UncachedCompile does not count it): a
// 1000-node graph on its third run, a 100-node training step on its 20th, a 5-node graph
// never before its 400th. PyTorch's OpInfo sweep, whose thousands of small graphs mostly run
// a few times, would compile about 3000 more graphs with a plain "third run" rule. Fused
// kernels compute what the ATen kernels do (the fusion tests hold both to eager), so a value
// differs from one run to the next by rounding at most.
constexpr int64_t kNodeRunsBeforeFusing = 2000;
constexpr int64_t kMinRunsBeforeFusing = 3;

struct CachedPlan {
  std::shared_ptr<const CompiledPlan> plan;
  int64_t runs = 0;
  std::shared_ptr<PlanReplay> replay = std::make_shared<PlanReplay>();
};

struct GraphCache {
  std::mutex mutex;
  std::unordered_map<HashValue, CachedPlan> plans;
};

GraphCache& graphCache() {
  static GraphCache* instance = new GraphCache();
  return *instance;
}

/// compilePlan(graph, recurring), timed and named in the profiler.
std::shared_ptr<const CompiledPlan> timedCompile(const Graph& graph, bool recurring) {
  ScopedTimer timer(metrics::compile_time);
  RECORD_USER_SCOPE("lazyfuse::compile");
  return compilePlan(graph, recurring);
}

thread_local bool fuse_new_graphs = false;  // see ScopedFuseNewGraphs

}  // namespace

namespace detail {

ScopedFuseNewGraphs::ScopedFuseNewGraphs() : previous_(fuse_new_graphs) { fuse_new_graphs = true; }

ScopedFuseNewGraphs::~ScopedFuseNewGraphs() { fuse_new_graphs = previous_; }

PlanEntry planFor(const Graph& graph) {
  GraphCache& cache = graphCache();
  {
    std::unique_lock<std::mutex> lock(cache.mutex);
    auto it = cache.plans.find(graph.hash());
    if (it != cache.plans.end()) {
      metrics::cached_compile.add();
      CachedPlan& entry = it->second;
      ++entry.runs;
      const int64_t nodes = static_cast<int64_t>(graph.nodes().size());
      if (!entry.plan->fuse_when_recurring || entry.runs < kMinRunsBeforeFusing ||
          entry.runs * nodes < kNodeRunsBeforeFusing) {
        return {entry.plan, entry.replay};
      }
      lock.unlock();
      // See Note [Fusing recurring small graphs].
      std::shared_ptr<const CompiledPlan> fused = timedCompile(graph, /*recurring=*/true);
      metrics::recurring_graphs_fused.add();
      metrics::unfused_nodes.add(fused->plan.unfused_nodes);
      lock.lock();
      CachedPlan& replaced = cache.plans[graph.hash()];
      replaced.plan = fused;
      return {fused, replaced.replay};
    }
  }
  // Before compiling: a lowering that fails names this graph, and the dump shows it.
  if (dumpRequested("ir")) writeDump(graph, "graph", ".txt", printText(graph));
  std::shared_ptr<const CompiledPlan> plan = timedCompile(graph, fuse_new_graphs);
  metrics::uncached_compile.add();
  metrics::unfused_nodes.add(plan->plan.unfused_nodes);
  LF_LOG_DEBUG("new graph 0x", std::hex, graph.hash(), std::dec, ": ", graph.nodes().size(),
               " nodes, ", plan->plan.steps.size(), " steps, ", plan->plan.kernels.size(),
               " kernels");
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto [entry, added] = cache.plans.emplace(graph.hash(), CachedPlan{plan, 1});
  return {entry->second.plan, entry->second.replay};
}

}  // namespace detail

size_t graphCacheSize() {
  std::lock_guard<std::mutex> lock(graphCache().mutex);
  return graphCache().plans.size();
}

void clearGraphCache() {
  std::lock_guard<std::mutex> lock(graphCache().mutex);
  graphCache().plans.clear();
}

}  // namespace lazyfuse
