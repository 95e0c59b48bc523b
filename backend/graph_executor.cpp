#include "backend/graph_executor.h"

#include "backend/device.h"
#include "backend/logging.h"
#include "backend/metrics.h"
#include "backend/plan_compiler.h"
#include "backend/plan_replay.h"
#include "kernels/extern_runner.h"
#include "lazy_ir/check.h"
#include "lowering/print_plan.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

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

/// A cached plan and its replay state.
struct PlanEntry {
  std::shared_ptr<const CompiledPlan> plan;
  std::shared_ptr<PlanReplay> replay;
};

struct GraphCache {
  std::mutex mutex;
  std::unordered_map<HashValue, CachedPlan> plans;
};

GraphCache& graphCache() {
  static GraphCache* instance = new GraphCache();
  return *instance;
}

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
      std::shared_ptr<const CompiledPlan> fused;
      {
        ScopedTimer timer(metrics::compile_time);
        fused = compilePlan(graph, /*recurring=*/true);
      }
      metrics::recurring_graphs_fused.add();
      lock.lock();
      CachedPlan& replaced = cache.plans[graph.hash()];
      replaced.plan = fused;
      return {fused, replaced.replay};
    }
  }
  std::shared_ptr<const CompiledPlan> plan;
  {
    ScopedTimer timer(metrics::compile_time);
    plan = compilePlan(graph);
  }
  metrics::uncached_compile.add();
  LF_LOG_DEBUG("new graph 0x", std::hex, graph.hash(), std::dec, ": ", graph.nodes().size(),
               " nodes, ", plan->plan.steps.size(), " steps, ", plan->plan.kernels.size(),
               " kernels");
  if (dumpRequested("ir")) writeDump(graph, "graph", ".txt", printText(graph));
  std::lock_guard<std::mutex> lock(cache.mutex);
  auto [entry, added] = cache.plans.emplace(graph.hash(), CachedPlan{plan, 1});
  return {entry->second.plan, entry->second.replay};
}

// Note [Renaming ops share their input's buffer]
// The buffers behind lazy tensors are never written in place while anything else holds them
// (functionalization turns every mutation into a new value, transfers copy, and a kernel writes
// into an input's memory only when nothing but its graph holds that memory: Note [Donated
// buffers]), so an op that only renames its input
// (detach_copy, alias_copy) may hand back the input's buffer when it already has the op's
// layout. A sync whose every target is such an op of device data (`p.detach().cpu()`,
// `model.state_dict()` saved to disk) therefore runs no plan: nothing to compile or copy.
bool renamesDeviceData(const std::vector<Value>& roots, std::vector<at::Tensor>& buffers) {
  for (const Value& root : roots) {
    const Node& node = *root.node;
    if (node.kind() != OpKind::kAten || node.inputs().size() != 1) return false;
    const std::string name = node.opName();
    if (name != "aten::detach_copy" && name != "aten::alias_copy") return false;
    const Node& input = *node.inputs()[0].node;
    if (input.kind() != OpKind::kDeviceData || !(TensorMeta::of(input.data()) == root.meta())) {
      return false;
    }
    buffers.push_back(input.data());
  }
  return true;
}

/// For each node position of `graph`, whether it is device data whose node nothing reaches but
/// the graph and the sync targets, which the run replaces: its buffer may be donated (Note
/// [Donated buffers] in lowering/plan_donations.cpp). A node is held from outside when it has
/// more references than the graph, its users in the graph, `roots` and the targets account for,
/// and so is every node it reads, directly or not.
std::vector<uint8_t> freeDataInputs(const Graph& graph, const std::vector<Value>& roots,
                                    const std::vector<LazyData*>& targets) {
  const std::vector<NodePtr>& nodes = graph.nodes();
  std::vector<size_t> internal(nodes.size(), 1);  // the graph's own reference
  for (size_t position = 0; position < nodes.size(); ++position) {
    for (const NodeRef& input : graph.inputsOf(position)) ++internal[input.position];
  }
  LF_INTERNAL_ASSERT(graph.outputs().size() == roots.size(), "a graph output per root");
  std::unordered_set<const LazyData*> seen;
  for (size_t i = 0; i < roots.size(); ++i) {
    const uint32_t position = graph.outputs()[i].position;
    internal[position] += 1 + (seen.insert(targets[i]).second ? 1 : 0);
  }
  std::vector<uint8_t> held(nodes.size(), 0);
  for (size_t position = nodes.size(); position-- > 0;) {
    if (static_cast<size_t>(nodes[position].use_count()) > internal[position]) held[position] = 1;
    if (!held[position]) continue;
    for (const NodeRef& input : graph.inputsOf(position)) held[input.position] = 1;
  }
  std::vector<uint8_t> free(nodes.size(), 0);
  for (uint32_t position : graph.dataPositions()) free[position] = !held[position];
  return free;
}

/// Runs one graph computing the pending values of `targets` and stores the results in them.
/// `donation` counts the outputs written into donated memory, also when the run fails.
void runTargets(const std::vector<LazyData*>& targets, DonationState& donation) {
  std::vector<Value> roots;
  for (LazyData* target : targets) roots.push_back(target->pendingValue());
  std::vector<at::Tensor> shared;
  if (renamesDeviceData(roots, shared)) {
    for (size_t i = 0; i < targets.size(); ++i) targets[i]->setBuffer(std::move(shared[i]));
    return;
  }
  Graph graph = Graph::fromRoots(roots);
  const PlanEntry entry = planFor(graph);
  const std::shared_ptr<const CompiledPlan>& plan = entry.plan;
  std::vector<at::Tensor> outputs;
  {
    ScopedTimer timer(metrics::execute_time);
    const bool donates = hasDonations(plan->plan);
    try {
      // See Note [CUDA graph replay] in backend/plan_replay.cpp.
      std::optional<std::vector<at::Tensor>> replayed;
      if (plan->cuda_target) {
        replayed = entry.replay->run(
            *plan, graph, [&] { return freeDataInputs(graph, roots, targets); }, donation);
      }
      if (replayed) {
        outputs = std::move(*replayed);
      } else {
        if (donates) donation.free_data = freeDataInputs(graph, roots, targets);
        outputs = runPlan(plan->plan, graph, plan->launcher(), plan->batchLauncher(),
                          donates ? &donation : nullptr);
      }
    } catch (...) {
      metrics::buffers_donated.add(donation.donated);
      throw;
    }
    metrics::buffers_donated.add(donation.donated);
  }
  metrics::kernels_launched.add(static_cast<int64_t>(plan->plan.kernels.size()));
  metrics::graphs_executed.add();
  metrics::graph_nodes.add(static_cast<int64_t>(graph.nodes().size()));
  for (size_t i = 0; i < targets.size(); ++i) targets[i]->setBuffer(std::move(outputs[i]));
}

/// The message of the exception being handled, without the C++ backtrace.
std::string currentErrorMessage() {
  try {
    throw;
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  } catch (const std::exception& e) {
    return e.what();
  }
}

// See Note [Failed syncs]. Each target of a failed graph is retried alone, so only the values
// that depend on the failing op break: eager would have computed the others.
void breakFailedTargets(const std::vector<LazyData*>& targets, const std::string& error) {
  if (targets.size() == 1) return targets[0]->setBroken(error);
  for (LazyData* target : targets) {
    if (!target->isPending()) continue;  // listed twice, and already computed
    try {
      DonationState donation;
      runTargets({target}, donation);
    } catch (const std::exception&) {
      target->setBroken(currentErrorMessage());
    }
  }
}

}  // namespace

void syncData(c10::ArrayRef<c10::intrusive_ptr<LazyData>> data) {
  std::vector<LazyData*> targets;
  for (const auto& d : data) {
    d->checkNotBroken();
    if (d->isPending()) targets.push_back(d.get());
  }
  if (targets.empty()) return;
  DonationState donation;
  try {
    runTargets(targets, donation);
  } catch (const std::exception&) {
    const std::string error = currentErrorMessage();
    if (donation.donated_data == 0) {
      breakFailedTargets(targets, error);
    } else {
      // Donated device data is overwritten: a target alone would read it. See Note [Donated
      // buffers].
      for (LazyData* target : targets) target->setBroken(error);
    }
    throw;
  }
}

void syncLiveTensors() {
  auto live = livePendingData();
  syncData(live);
}

void waitDevice() {
  c10::Device device = hardwareDevice();
  if (device.is_cpu()) return;
  c10::impl::getDeviceGuardImpl(device.type())->synchronizeDevice(device.index());
}

at::Tensor materialize(const at::Tensor& tensor) {
  LazyTensorImpl* impl = lazyImpl(tensor);
  LF_INTERNAL_ASSERT(impl != nullptr, "materialize() needs a lazy tensor");
  impl->data().checkNotBroken();
  if (impl->data().isPending()) syncData({impl->dataPtr()});
  return impl->data().buffer();
}

std::string dumpGraph(c10::ArrayRef<at::Tensor> tensors, const std::string& format) {
  LF_CHECK(format == "text" || format == "dot", "dump_ir: format must be 'text' or 'dot', got '",
           format, "'");
  std::vector<Value> roots;
  for (const at::Tensor& t : tensors) {
    LazyTensorImpl* impl = lazyImpl(t);
    LF_CHECK(impl != nullptr, "dump_ir: expected lazy tensors, got a ",
             t.defined() ? t.device().str() : std::string("undefined"), " tensor");
    roots.push_back(impl->data().asInput());
  }
  Graph graph = Graph::fromRoots(roots);
  return format == "dot" ? printDot(graph) : printText(graph);
}

size_t graphCacheSize() {
  std::lock_guard<std::mutex> lock(graphCache().mutex);
  return graphCache().plans.size();
}

void clearGraphCache() {
  std::lock_guard<std::mutex> lock(graphCache().mutex);
  graphCache().plans.clear();
}

}  // namespace lazyfuse
