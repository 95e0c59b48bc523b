#include "backend/graph_executor.h"

#include "backend/device.h"
#include "backend/logging.h"
#include "backend/metrics.h"
#include "kernels/extern_runner.h"
#include "lazy_ir/check.h"
#include "lowering/pipeline.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>

namespace lazyfuse {
namespace {

struct GraphCache {
  std::mutex mutex;
  std::unordered_map<HashValue, std::shared_ptr<const ExecutionPlan>> plans;
};

GraphCache& graphCache() {
  static GraphCache* instance = new GraphCache();
  return *instance;
}

bool dumpRequested(const char* what) {
  static const std::string dump = std::getenv("LAZYFUSE_DUMP") ? std::getenv("LAZYFUSE_DUMP") : "";
  return dump.find(what) != std::string::npos;
}

void dumpNewGraph(const Graph& graph) {
  const char* dir = std::getenv("LAZYFUSE_DUMP_DIR");
  std::ostringstream path;
  path << (dir ? dir : ".") << "/lazyfuse-graph-" << std::hex << std::setw(16) << std::setfill('0')
       << graph.hash() << ".txt";
  std::ofstream out(path.str());
  if (!out) {
    LF_LOG_WARN("cannot write the IR dump ", path.str());
    return;
  }
  out << printText(graph);
  LF_LOG_DEBUG("wrote ", path.str());
}

std::shared_ptr<const ExecutionPlan> planFor(const Graph& graph) {
  GraphCache& cache = graphCache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.plans.find(graph.hash());
    if (it != cache.plans.end()) {
      metrics::cached_compile.add();
      return it->second;
    }
  }
  std::shared_ptr<const ExecutionPlan> plan;
  {
    ScopedTimer timer(metrics::compile_time);
    plan = std::make_shared<const ExecutionPlan>(lowerGraph(graph));
  }
  metrics::uncached_compile.add();
  LF_LOG_DEBUG("new graph 0x", std::hex, graph.hash(), std::dec, ": ", graph.nodes().size(),
               " nodes, ", plan->steps.size(), " steps");
  if (dumpRequested("ir")) dumpNewGraph(graph);
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.plans.emplace(graph.hash(), plan);
  return plan;
}

/// Runs one graph computing the pending values of `targets` and stores the results in them.
void runTargets(const std::vector<LazyData*>& targets) {
  std::vector<Value> roots;
  for (LazyData* target : targets) roots.push_back(target->pendingValue());
  Graph graph = Graph::fromRoots(roots);
  auto plan = planFor(graph);
  std::vector<at::Tensor> outputs;
  {
    ScopedTimer timer(metrics::execute_time);
    outputs = runPlan(*plan, graph);
  }
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
      runTargets({target});
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
  try {
    runTargets(targets);
  } catch (const std::exception&) {
    breakFailedTargets(targets, currentErrorMessage());
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
