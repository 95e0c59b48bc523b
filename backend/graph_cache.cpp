// The graph cache: the compiled plan of each graph hash, and its replay state.

#include "backend/detail/graph_cache.h"

#include "backend/logging.h"
#include "lazy_ir/check.h"
#include "lazy_ir/config.h"
#include "lazy_ir/metrics.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

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

/// One plan of a blind hash (Note [Positions as plan arguments]).
struct CachedPlan {
  std::shared_ptr<const CompiledPlan> plan;
  int64_t runs = 0;
  /// May be compiled fused when it recurs (Note [Fusing recurring small graphs]); false once a
  /// fused plan baked positions this one serves, and is cached beside it.
  bool may_fuse = true;
  /// Replay state per value of every position of the graph: a CUDA graph bakes them all.
  std::map<std::vector<int64_t>, std::shared_ptr<PlanReplay>> replays;

  std::shared_ptr<PlanReplay>& replayFor(const Graph& graph) {
    std::shared_ptr<PlanReplay>& replay = replays[graph.positionValues()];
    if (!replay) replay = std::make_shared<PlanReplay>();
    return replay;
  }
};

/// The plans of a blind hash that bake in the positions of the same nodes, by their values there.
struct GuardGroup {
  std::vector<uint32_t> positions;  // ExecutionPlan::position_guards
  std::map<std::vector<int64_t>, std::shared_ptr<CachedPlan>> plans;
  std::vector<int64_t> last;  // the values of the plan added last, for the recompile log
};

/// What a graph's plans are cached under: its blind hash and the LAZYFUSE_FUSION setting (read
/// at each graph: a plan made unfused under one setting never serves another).
HashValue cacheKey(const Graph& graph) {
  return hashCombine(graph.positionBlindHash(), static_cast<HashValue>(config::fusion()));
}

struct GraphCache {
  std::mutex mutex;
  /// Per cache key, its guard groups, the most recently made first.
  std::unordered_map<HashValue, std::vector<GuardGroup>> plans;

  /// The cached plan that serves `graph` (cached under `key`), or null.
  std::shared_ptr<CachedPlan> find(const Graph& graph, HashValue key) {
    auto it = plans.find(key);
    if (it == plans.end()) return nullptr;
    for (GuardGroup& group : it->second) {
      auto found = group.plans.find(graph.positionValues(group.positions));
      if (found != group.plans.end()) return found->second;
    }
    return nullptr;
  }

  /// Caches `plan` for `graph` under `key` (a plan already there that serves it stays) and
  /// returns it.
  std::shared_ptr<CachedPlan> add(const Graph& graph, HashValue key,
                                  std::shared_ptr<CachedPlan> plan) {
    std::vector<GuardGroup>& groups = plans[key];
    const std::vector<uint32_t>& positions = plan->plan->plan.position_guards;
    auto group = std::find_if(groups.begin(), groups.end(),
                              [&](const GuardGroup& g) { return g.positions == positions; });
    if (group == groups.end()) group = groups.insert(groups.begin(), GuardGroup{positions, {}, {}});
    group->last = graph.positionValues(positions);
    return group->plans.emplace(group->last, std::move(plan)).first->second;
  }
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
  const HashValue key = cacheKey(graph);
  std::vector<uint32_t> missed_at;  // positions a cached plan of this blind hash bakes in
  std::vector<int64_t> missed_values;
  {
    std::unique_lock<std::mutex> lock(cache.mutex);
    std::shared_ptr<CachedPlan> found = cache.find(graph, key);
    if (!found) {
      auto it = cache.plans.find(key);
      if (it != cache.plans.end() && !it->second.empty()) {
        missed_at = it->second.front().positions;
        missed_values = it->second.front().last;
      }
    }
    if (found) {
      metrics::cached_compile.add();
      CachedPlan& entry = *found;
      ++entry.runs;
      const int64_t nodes = static_cast<int64_t>(graph.nodes().size());
      if (!entry.may_fuse || !entry.plan->fuse_when_recurring ||
          entry.runs < kMinRunsBeforeFusing || entry.runs * nodes < kNodeRunsBeforeFusing) {
        return {entry.plan, entry.replayFor(graph)};
      }
      entry.may_fuse = false;  // one thread fuses it
      lock.unlock();
      // See Note [Fusing recurring small graphs].
      std::shared_ptr<const CompiledPlan> fused = timedCompile(graph, /*recurring=*/true);
      metrics::recurring_graphs_fused.add();
      metrics::unfused_nodes.add(fused->plan.unfused_nodes);
      lock.lock();
      if (fused->plan.position_guards == entry.plan->plan.position_guards) {
        entry.plan = fused;
        return {fused, entry.replayFor(graph)};
      }
      // The fused plan bakes positions the unfused one serves: it serves this graph's values,
      // the unfused plan the others, unfused from now on.
      auto added = std::make_shared<CachedPlan>();
      added->plan = fused;
      added->runs = entry.runs;
      added->may_fuse = false;
      std::shared_ptr<CachedPlan> cached = cache.add(graph, key, std::move(added));
      return {cached->plan, cached->replayFor(graph)};
    }
  }
  // Before compiling: a lowering that fails names this graph, and the dump shows it.
  if (dumpRequested("ir")) writeDump(graph, "graph", ".txt", printText(graph));
  if (!missed_at.empty() && config::logRecompiles()) {
    // Logged whatever LAZYFUSE_LOG_LEVEL says: the switch asks for these lines.
    const std::vector<int64_t> now = graph.positionValues(missed_at);
    std::string nodes;
    for (uint32_t position : missed_at) {
      nodes += (nodes.empty() ? "%" : ", %") + std::to_string(position) + " " +
               graph.nodes()[position]->opName();
    }
    logMessage(LogLevel::kWarn,
               detail::concat("new plan for graph 0x", std::hex, graph.hash(), std::dec,
                              ": its cached plan bakes the positions of ", nodes, " (",
                              c10::IntArrayRef(missed_values), "), here ", c10::IntArrayRef(now)));
  }
  std::shared_ptr<const CompiledPlan> plan = timedCompile(graph, fuse_new_graphs);
  metrics::uncached_compile.add();
  metrics::unfused_nodes.add(plan->plan.unfused_nodes);
  LF_LOG_DEBUG("new graph 0x", std::hex, graph.hash(), std::dec, ": ", graph.nodes().size(),
               " nodes, ", plan->plan.steps.size(), " steps, ", plan->plan.kernels.size(),
               " kernels");
  auto added = std::make_shared<CachedPlan>();
  added->plan = plan;
  added->runs = 1;
  std::lock_guard<std::mutex> lock(cache.mutex);
  std::shared_ptr<CachedPlan> cached = cache.add(graph, key, std::move(added));
  return {cached->plan, cached->replayFor(graph)};
}

}  // namespace detail

size_t graphCacheSize() {
  std::lock_guard<std::mutex> lock(graphCache().mutex);
  size_t plans = 0;
  for (const auto& [hash, groups] : graphCache().plans) {
    for (const GuardGroup& group : groups) plans += group.plans.size();
  }
  return plans;
}

void clearGraphCache() {
  std::lock_guard<std::mutex> lock(graphCache().mutex);
  graphCache().plans.clear();
}

}  // namespace lazyfuse
