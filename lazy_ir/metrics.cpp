#include "lazy_ir/metrics.h"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>

namespace lazyfuse {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<Counter*> counters;
  std::vector<Timer*> timers;
  std::map<std::string, std::unique_ptr<Counter>> named;
};

Registry& registry() {
  static Registry* instance = new Registry();  // never destroyed: counters outlive static dtors
  return *instance;
}

}  // namespace

// See Note [One store for metrics].
Counter::Counter(std::string name) : name_(std::move(name)) {
  torch::lazy::MetricsArena::Get()->RegisterCounter(name_, &data_);
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().counters.push_back(this);
}

// The arena keeps this many of a timer's latest samples for its report's percentiles.
constexpr size_t kTimerSamples = 1024;

Timer::Timer(std::string name) : name_(std::move(name)) {
  torch::lazy::MetricsArena::Get()->RegisterMetric(name_, torch::lazy::MetricFnTime, kTimerSamples,
                                                   &data_);
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().timers.push_back(this);
}

void Timer::add(int64_t ns) { data_->AddSample(torch::lazy::NowNs(), static_cast<double>(ns)); }

int64_t Timer::count() const { return static_cast<int64_t>(data_->TotalSamples()); }
int64_t Timer::totalNs() const { return static_cast<int64_t>(data_->Accumulator()); }

ScopedTimer::~ScopedTimer() { timer_.add(torch::lazy::NowNs() - start_ns_); }

Counter& counterNamed(const std::string& name) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.named.find(name);
    if (it != r.named.end()) return *it->second;
  }
  auto counter = std::make_unique<Counter>(name);  // registers itself; takes the lock
  std::lock_guard<std::mutex> lock(r.mutex);
  auto [it, inserted] = r.named.emplace(name, std::move(counter));
  if (!inserted) {
    r.counters.erase(std::remove(r.counters.begin(), r.counters.end(), counter.get()),
                     r.counters.end());
  }
  return *it->second;
}

std::vector<std::pair<std::string, int64_t>> metricsSnapshot() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::pair<std::string, int64_t>> out;
  for (const Counter* c : r.counters) out.emplace_back(c->name(), c->value());
  for (const Timer* t : r.timers) {
    out.emplace_back(t->name() + ".count", t->count());
    out.emplace_back(t->name() + ".total_ns", t->totalNs());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void resetMetrics() {
  // What torch._lazy.metrics.reset() does: every value in the arena, ours included.
  torch::lazy::MetricsArena::Get()->ResetCounters();
  torch::lazy::MetricsArena::Get()->ResetMetrics();
}

namespace metrics {
Counter& mark_steps = *new Counter("MarkStep");
Counter& tensors_created = *new Counter("CreateLtcTensor");
Counter& tensors_destroyed = *new Counter("DestroyLtcTensor");
Counter& ops_recorded = *new Counter("OpsRecorded");
Counter& cached_compile = *new Counter("CachedCompile");
Counter& uncached_compile = *new Counter("UncachedCompile");
Counter& graphs_executed = *new Counter("GraphsExecuted");
Counter& async_steps = *new Counter("AsyncSteps");
Counter& graph_nodes = *new Counter("GraphNodes");
Counter& meta_cache_miss = *new Counter("MetaCacheMiss");
Counter& meta_template_hits = *new Counter("MetaTemplateHits");
Counter& transfers_in = *new Counter("TransferToLazy");
Counter& transfers_out = *new Counter("TransferFromLazy");
Counter& eager_fallbacks = *new Counter("EagerFallback");
Counter& kernels_compiled = *new Counter("KernelsCompiled");
Counter& kernels_launched = *new Counter("KernelsLaunched");
Counter& kernel_disk_hits = *new Counter("KernelDiskCacheHits");
Counter& kernels_reused = *new Counter("KernelsReused");
Counter& dynamic_kernel_hits = *new Counter("DynamicKernelHits");
Counter& kernels_generalized = *new Counter("KernelsGeneralized");
Counter& unfused_nodes = *new Counter("UnfusedNodes");
Counter& fusion_fallbacks = *new Counter("FusionFallback");
Counter& cuda_kernels_checked = *new Counter("CudaKernelsChecked");
Counter& cuda_check_failures = *new Counter("CudaCheckFailures");
Counter& cuda_emulated_launches = *new Counter("CudaEmulatedLaunches");
Counter& cuda_launches = *new Counter("CudaLaunches");
Counter& kernel_batch_launches = *new Counter("KernelBatchLaunches");
Counter& buffers_donated = *new Counter("BuffersDonated");
Counter& step_cuts = *new Counter("StepCuts");
Counter& trace_limit_cuts = *new Counter("TraceLimitCuts");
Counter& recurring_graphs_fused = *new Counter("RecurringGraphsFused");
Counter& values_kept = *new Counter("ValuesKept");
Counter& cuda_graphs_captured = *new Counter("CudaGraphsCaptured");
Counter& cuda_graph_replays = *new Counter("CudaGraphReplays");
Counter& cuda_graph_mismatches = *new Counter("CudaGraphMismatches");
Counter& cuda_graph_capture_failures = *new Counter("CudaGraphCaptureFailures");
Timer& compile_time = *new Timer("CompileTime");
Timer& execute_time = *new Timer("ExecuteTime");
}  // namespace metrics

}  // namespace lazyfuse
