#pragma once

// Counters and timers, named as users of lazy tensor backends know them (CachedCompile,
// UncachedCompile, MarkStep, CreateLtcTensor, CompileTime, ExecuteTime, aten::<op> per eager
// fallback) plus our own.
//
// Note [One store for metrics]
// Each counter and timer keeps its value in PyTorch's lazy-core metrics arena
// (torch::lazy::MetricsArena), the store `torch._lazy.metrics` reads and resets. So
// `torch._lazy.metrics.counter_value("CachedCompile")`, `metrics_report()` and `reset()` see and
// change the same numbers as `lazyfuse.metrics()` and `lazyfuse.reset_metrics()`: one store, two
// views. A timer is an arena metric of nanosecond samples (count = samples, total = their sum).

#include <torch/csrc/lazy/core/metrics.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lazyfuse {

class Counter {
 public:
  explicit Counter(std::string name);
  void add(int64_t delta = 1) { data_->AddValue(delta); }
  int64_t value() const { return data_->Value(); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<torch::lazy::CounterData> data_;  // in torch's arena, never unregistered
};

class Timer {
 public:
  explicit Timer(std::string name);
  void add(int64_t ns);
  int64_t count() const;
  int64_t totalNs() const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<torch::lazy::MetricData> data_;  // in torch's arena, never unregistered
};

class ScopedTimer {
 public:
  explicit ScopedTimer(Timer& timer) : timer_(timer), start_ns_(torch::lazy::NowNs()) {}
  ~ScopedTimer();
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Timer& timer_;
  int64_t start_ns_;
};

/// The counter with this name, made on first use (for names only known at run time).
Counter& counterNamed(const std::string& name);

/// Every counter, then `<timer>.count` and `<timer>.total_ns` for every timer; sorted by name.
std::vector<std::pair<std::string, int64_t>> metricsSnapshot();
void resetMetrics();

namespace metrics {
extern Counter& mark_steps;          // MarkStep: mark_step calls (lazyfuse's or torch._lazy's)
extern Counter& tensors_created;     // CreateLtcTensor: lazy tensor values made (LazyData)
extern Counter& tensors_destroyed;   // DestroyLtcTensor: lazy tensor values freed
extern Counter& ops_recorded;        // OpsRecorded: nodes recorded into the trace
extern Counter& cached_compile;      // CachedCompile: syncs served from the graph cache
extern Counter& uncached_compile;    // UncachedCompile: graphs lowered anew
extern Counter& graphs_executed;     // GraphsExecuted
extern Counter& async_steps;         // AsyncSteps: plans mark_step() ran on the worker thread
extern Counter& graph_nodes;         // GraphNodes: nodes over all executed graphs
extern Counter& meta_cache_miss;     // MetaCacheMiss: ops inferred on Meta
extern Counter& meta_template_hits;  // MetaTemplateHits: meta-cache misses served by a template
extern Counter& transfers_in;        // TransferToLazy
extern Counter& transfers_out;       // TransferFromLazy
extern Counter& eager_fallbacks;     // EagerFallback: all aten::<op> together
extern Counter& kernels_compiled;    // KernelsCompiled: fused kernels built by the compiler
extern Counter& kernels_launched;    // KernelsLaunched: fused kernel steps run
extern Counter& kernel_disk_hits;  // KernelDiskCacheHits: fused kernels loaded from the disk cache
// KernelsReused: fused kernels of a new graph run by functions compiled before; DynamicKernelHits:
// those of them run with other constants as arguments; KernelsGeneralized: generic kernels
// compiled for a family seen with other constants (Note [Shape-generic kernels]).
extern Counter& kernels_reused;
extern Counter& dynamic_kernel_hits;
extern Counter& kernels_generalized;
extern Counter& unfused_nodes;         // UnfusedNodes: ATen nodes a fused plan runs as extern steps
extern Counter& fusion_fallbacks;      // FusionFallback: graphs run per node after a failed compile
extern Counter& cuda_kernels_checked;  // CudaKernelsChecked: CPU kernels also compiled by NVRTC
extern Counter& cuda_check_failures;   // CudaCheckFailures: graphs whose CUDA rendering failed
extern Counter& cuda_emulated_launches;  // CudaEmulatedLaunches: CUDA kernels run emulated
extern Counter& cuda_launches;           // CudaLaunches: fused kernel launches on a GPU
extern Counter& recurring_graphs_fused;  // RecurringGraphsFused: small graphs fused once they recur
extern Counter& values_kept;  // ValuesKept: nodes a sync computed and stored for later graphs
extern Counter& cuda_graphs_captured;   // CudaGraphsCaptured: plan runs captured for replay
extern Counter& cuda_graph_replays;     // CudaGraphReplays: plan runs replayed as a CUDA graph
extern Counter& cuda_graph_mismatches;  // CudaGraphMismatches: checked replays that differed
extern Counter& cuda_graph_capture_failures;  // CudaGraphCaptureFailures
extern Counter& kernel_batch_launches;  // KernelBatchLaunches: kernel batches run by a batch kernel
extern Counter& step_cuts;              // StepCuts: traces cut at a repeated step
extern Counter& trace_limit_cuts;       // TraceLimitCuts: traces cut at LAZYFUSE_TRACE_LIMIT ops
extern Counter& buffers_donated;  // BuffersDonated: kernel outputs written into inputs' memory
extern Timer& compile_time;       // CompileTime
extern Timer& execute_time;       // ExecuteTime
}  // namespace metrics

}  // namespace lazyfuse
