#include "backend/graph_executor.h"

#include "backend/device.h"
#include "backend/logging.h"
#include "lazy_ir/metrics.h"
#include "backend/plan_compiler.h"
#include "backend/plan_replay.h"
#include "kernels/plan_runner.h"
#include "kernels/interrupts.h"
#include "lazy_ir/check.h"
#include "lowering/print_plan.h"

#include <ATen/record_function.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

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
        RECORD_USER_SCOPE("lazyfuse::compile");
        fused = compilePlan(graph, /*recurring=*/true);
      }
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
  std::shared_ptr<const CompiledPlan> plan;
  {
    ScopedTimer timer(metrics::compile_time);
    RECORD_USER_SCOPE("lazyfuse::compile");
    plan = compilePlan(graph);
  }
  metrics::uncached_compile.add();
  metrics::unfused_nodes.add(plan->plan.unfused_nodes);
  LF_LOG_DEBUG("new graph 0x", std::hex, graph.hash(), std::dec, ": ", graph.nodes().size(),
               " nodes, ", plan->plan.steps.size(), " steps, ", plan->plan.kernels.size(),
               " kernels");
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
bool renamesDeviceData(const Graph& graph, std::vector<at::Tensor>& buffers) {
  const std::vector<NodePtr>& nodes = graph.nodes();
  for (const NodeRef& out : graph.outputs()) {
    const Node& node = *nodes[out.position];
    if (node.kind() != OpKind::kAten || graph.inputsOf(out.position).size() != 1) return false;
    const std::string name = node.opName();
    if (name != "aten::detach_copy" && name != "aten::alias_copy") return false;
    const Node& input = *nodes[graph.inputsOf(out.position)[0].position];
    if (input.kind() != OpKind::kDeviceData ||
        !(TensorMeta::of(input.data()) == node.outputMeta(0))) {
      return false;
    }
    buffers.push_back(input.data());
  }
  return true;
}

// Note [Values a sync keeps for later]
// A sync computes its targets, and on the way every value they depend on. Some of those values
// are needed again: a pending value outside the graph reads them, or a live tensor that is not a
// target holds them. The common case is a training loop that calls `loss.item()` each step and
// never mark_step(): the item syncs the forward pass, which reads the parameters as the last
// step's optimizer left them, while this step's optimizer update (pending, outside the graph)
// reads them too. Were only the targets stored, the next sync would compute those parameters
// again from the step before, and that one from the step before it: each graph would be larger
// than the last (a new compile every step, and work growing with the step count), and every
// step's tensors would stay alive through the pending trace.
// So the values of a graph's nodes that something outside the graph still reaches (more
// references than the graph, the roots and the targets account for, the count that
// freeDataInputs makes for donation) become graph outputs too. After the run each such node
// gets its buffers (Graph::setComputed): later graphs read them as device data where they would
// have computed the node, the node lets go of its inputs, and a live tensor pending on the node
// takes the buffer when next synced. So each step's graph starts from stored values, as eager's
// steps do, and its hash recurs. A random op computed once keeps its values too, as eager
// would. A mark_step() syncs every live tensor: nothing outside its targets holds a value, so
// it keeps no extra outputs.
// Donation (Note [Donated buffers]) follows: what a kept node reads is not held by it, since
// nothing will compute the node again, so the loop's optimizer updates its state in place as
// under mark_step(). Device data standing for a computed node may be donated when nothing
// outside the graph reaches that node. Should the run fail after it donated device data, the
// kept nodes are marked failed instead (Graph::setFailed), like the targets (Note [Failed
// syncs]): what they read may be overwritten.

/// How many references to each node of `graph` the graph itself, `roots` and the targets (the
/// LazyData `roots` came from, each counted once) account for.
std::vector<size_t> internalUses(const Graph& graph, const std::vector<Value>& roots,
                                 const std::vector<LazyData*>& targets) {
  const std::vector<NodePtr>& nodes = graph.nodes();
  std::vector<size_t> internal(nodes.size(), 1);  // the graph's own reference
  for (size_t position = 0; position < nodes.size(); ++position) {
    for (const NodeRef& input : graph.inputsOf(position)) ++internal[input.position];
  }
  LF_INTERNAL_ASSERT(graph.outputs().size() >= roots.size(), "a graph output per root");
  std::unordered_set<const LazyData*> seen;
  for (size_t i = 0; i < roots.size(); ++i) {
    const uint32_t position = graph.outputs()[i].position;
    // A root whose node was computed resolves to device data the root does not reference.
    if (nodes[position].get() != roots[i].node.get()) continue;
    internal[position] += 1 + (seen.insert(targets[i]).second ? 1 : 0);
  }
  // Device data standing for a computed node: the inputs that read it name that node, not the
  // device data, and the node holds the device data. That hold is the graph's own when nothing
  // but the graph's nodes (and the graph's references to it, one per ComputedInput) name the
  // computed node.
  std::unordered_map<const Node*, size_t> entries;
  for (const Graph::ComputedInput& in : graph.computedInputs()) ++entries[in.owner.get()];
  for (const Graph::ComputedInput& in : graph.computedInputs()) {
    internal[in.position] -= in.resolved;
    if (in.owner.use_count() == in.uses + entries[in.owner.get()]) ++internal[in.position];
  }
  return internal;
}

/// For each node position of `graph`, whether it is device data whose node nothing reaches but
/// the graph and the sync targets, which the run replaces: its buffer may be donated (Note
/// [Donated buffers] in lowering/plan_donations.cpp). That is, it has no more references than
/// `internal` (internalUses) accounts for. An op node held from outside does not hold what it
/// reads: the run stores its value (Note [Values a sync keeps for later]), or, failing after a
/// donation, marks it failed.
std::vector<uint8_t> freeDataInputs(const Graph& graph, const std::vector<size_t>& internal) {
  const std::vector<NodePtr>& nodes = graph.nodes();
  std::vector<uint8_t> free(nodes.size(), 0);
  for (uint32_t position : graph.dataPositions()) {
    free[position] = static_cast<size_t>(nodes[position].use_count()) <= internal[position];
  }
  return free;
}

/// The op nodes of `graph` that something outside it still reaches; their values are kept. See
/// Note [Values a sync keeps for later].
std::vector<uint32_t> nodesToKeep(const Graph& graph, const std::vector<size_t>& internal) {
  const std::vector<NodePtr>& nodes = graph.nodes();
  std::vector<uint32_t> keep;
  for (size_t position = 0; position < nodes.size(); ++position) {
    if (nodes[position]->kind() != OpKind::kAten || nodes[position]->numOutputs() == 0) continue;
    if (static_cast<size_t>(nodes[position].use_count()) > internal[position]) {
      keep.push_back(static_cast<uint32_t>(position));
    }
  }
  return keep;
}

/// Makes every output of the nodes at `keep` a graph output (after the roots), and returns, per
/// node, the graph output index of each of its outputs.
std::vector<std::vector<size_t>> addKeptOutputs(Graph& graph, const std::vector<uint32_t>& keep) {
  std::vector<std::vector<size_t>> slots(keep.size());
  std::vector<NodeRef> added;
  const size_t roots = graph.outputs().size();
  for (size_t k = 0; k < keep.size(); ++k) {
    const uint32_t position = keep[k];
    const size_t count = graph.nodes()[position]->numOutputs();
    for (uint32_t index = 0; index < count; ++index) {
      size_t slot = roots + added.size();
      for (size_t i = 0; i < roots; ++i) {
        const NodeRef& out = graph.outputs()[i];
        if (out.position == position && out.index == index) {
          slot = i;
          break;
        }
      }
      if (slot == roots + added.size()) added.push_back({position, index});
      slots[k].push_back(slot);
    }
  }
  graph.addOutputs(added);
  return slots;
}

std::string currentErrorMessage();

/// Runs one graph computing the pending values of `targets` and stores the results in them.
/// `donation` counts the outputs written into donated memory, also when the run fails.
void runTargets(const std::vector<LazyData*>& targets, DonationState& donation) {
  std::vector<Value> roots;
  for (LazyData* target : targets) roots.push_back(target->pendingValue());
  Graph graph = Graph::fromRoots(roots);
  std::vector<at::Tensor> shared;
  if (renamesDeviceData(graph, shared)) {
    for (size_t i = 0; i < targets.size(); ++i) targets[i]->setBuffer(std::move(shared[i]));
    return;
  }
  std::vector<size_t> internal = internalUses(graph, roots, targets);
  // See Note [Values a sync keeps for later].
  const std::vector<uint32_t> keep = nodesToKeep(graph, internal);
  const std::vector<std::vector<size_t>> kept_slots = addKeptOutputs(graph, keep);
  const PlanEntry entry = planFor(graph);
  const std::shared_ptr<const CompiledPlan>& plan = entry.plan;
  std::vector<at::Tensor> outputs;
  {
    ScopedTimer timer(metrics::execute_time);
    RECORD_USER_SCOPE("lazyfuse::execute");
    const bool donates = hasDonations(plan->plan);
    try {
      // See Note [CUDA graph replay] in backend/plan_replay.cpp.
      std::optional<std::vector<at::Tensor>> replayed;
      if (plan->replayable()) {
        replayed = entry.replay->run(
            *plan, graph, [&] { return freeDataInputs(graph, internal); }, donation);
      }
      if (replayed) {
        outputs = std::move(*replayed);
      } else {
        if (donates) donation.free_data = freeDataInputs(graph, internal);
        outputs = runPlan(plan->plan, graph, plan->kernels.get(), donates ? &donation : nullptr);
      }
    } catch (...) {
      metrics::buffers_donated.add(donation.donated);
      if (donation.donated_data != 0) {
        // What the kept nodes read may be overwritten: computing them later would read it.
        const std::string error = currentErrorMessage();
        for (uint32_t position : keep) Graph::setFailed(graph.nodes()[position], error);
      }
      throw;
    }
    metrics::buffers_donated.add(donation.donated);
  }
  metrics::kernels_launched.add(static_cast<int64_t>(plan->plan.kernels.size()));
  metrics::graphs_executed.add();
  metrics::graph_nodes.add(static_cast<int64_t>(graph.nodes().size()));
  for (size_t k = 0; k < keep.size(); ++k) {
    std::vector<at::Tensor> values;
    for (size_t slot : kept_slots[k]) values.push_back(outputs[slot]);
    Graph::setComputed(graph.nodes()[keep[k]], std::move(values));
  }
  metrics::values_kept.add(static_cast<int64_t>(keep.size()));
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
    } catch (const SyncInterrupted&) {
      throw;  // the user stops the whole sync: see Note [Interrupting a sync]
    } catch (const std::exception&) {
      target->setBroken(currentErrorMessage());
    }
  }
}

}  // namespace

namespace {

/// The targets of an interrupted run stay pending: it stopped before writing into an input's
/// memory (Note [Interrupting a sync]). Were that ever not so, their inputs would be overwritten,
/// and they are marked broken rather than computed again from them.
void afterInterrupt(const std::vector<LazyData*>& targets, const DonationState& donation) {
  if (donation.donated_data == 0) return;
  for (LazyData* target : targets) {
    if (target->isPending()) {
      target->setBroken(
          "the sync that computed this tensor was interrupted after it had written into memory "
          "its inputs held, so it cannot be computed again");
    }
  }
}

}  // namespace

void syncData(c10::ArrayRef<c10::intrusive_ptr<LazyData>> data) {
  std::vector<LazyData*> targets;
  for (const auto& d : data) {
    d->checkNotBroken();
    // A value an earlier sync kept needs no graph. See Note [Values a sync keeps for later].
    if (d->isPending() && !d->takeComputed()) targets.push_back(d.get());
  }
  if (targets.empty()) return;
  InterruptibleSync interruptible;
  DonationState donation;
  try {
    runTargets(targets, donation);
  } catch (const SyncInterrupted& interrupted) {
    afterInterrupt(targets, donation);
    std::rethrow_exception(interrupted.cause);
  } catch (const std::exception&) {
    const std::string error = currentErrorMessage();
    if (donation.donated_data != 0) {
      // Donated device data is overwritten: a target alone would read it. See Note [Donated
      // buffers].
      for (LazyData* target : targets) target->setBroken(error);
      throw;
    }
    try {
      breakFailedTargets(targets, error);
    } catch (const SyncInterrupted& interrupted) {
      std::rethrow_exception(interrupted.cause);
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
  LF_CHECK(format == "text" || format == "dot" || format == "plan",
           "dump_ir: format must be 'text', 'dot' or 'plan', got '", format, "'");
  std::vector<Value> roots;
  for (const at::Tensor& t : tensors) {
    roots.push_back(lazyImplOrRaise(t, "dump_ir: expected lazy tensors").data().asInput());
  }
  Graph graph = Graph::fromRoots(roots);
  if (format == "plan") return printPlan(graph, lowerForTarget(graph, chooseTarget()));
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
