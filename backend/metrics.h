#pragma once

// Counters and timers, named as users of lazy tensor backends know them (CachedCompile,
// UncachedCompile, CompileTime, ExecuteTime, aten::<op> per eager fallback) plus our own.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lazyfuse {

class Counter {
 public:
  explicit Counter(std::string name);
  void add(int64_t delta = 1) { value_.fetch_add(delta, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }
  void reset() { value_.store(0, std::memory_order_relaxed); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::atomic<int64_t> value_{0};
};

class Timer {
 public:
  explicit Timer(std::string name);
  void add(int64_t ns);
  int64_t count() const { return count_.load(std::memory_order_relaxed); }
  int64_t totalNs() const { return total_ns_.load(std::memory_order_relaxed); }
  void reset();
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::atomic<int64_t> count_{0};
  std::atomic<int64_t> total_ns_{0};
};

class ScopedTimer {
 public:
  explicit ScopedTimer(Timer& timer) : timer_(timer), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer();
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Timer& timer_;
  std::chrono::steady_clock::time_point start_;
};

/// The counter with this name, made on first use (for names only known at run time).
Counter& counterNamed(const std::string& name);

/// Every counter, then `<timer>.count` and `<timer>.total_ns` for every timer; sorted by name.
std::vector<std::pair<std::string, int64_t>> metricsSnapshot();
void resetMetrics();

namespace metrics {
extern Counter& ops_recorded;     // OpsRecorded: nodes recorded into the trace
extern Counter& cached_compile;   // CachedCompile: syncs served from the graph cache
extern Counter& uncached_compile; // UncachedCompile: graphs lowered anew
extern Counter& graphs_executed;  // GraphsExecuted
extern Counter& graph_nodes;      // GraphNodes: nodes over all executed graphs
extern Counter& meta_cache_miss;  // MetaCacheMiss: ops inferred on Meta
extern Counter& transfers_in;     // TransferToLazy
extern Counter& transfers_out;    // TransferFromLazy
extern Counter& eager_fallbacks;  // EagerFallback: all aten::<op> together
extern Counter& kernels_compiled; // KernelsCompiled: fused kernels built by the compiler
extern Counter& kernels_launched; // KernelsLaunched: fused kernel steps run
extern Counter& kernel_disk_hits; // KernelDiskCacheHits: fused kernels loaded from the disk cache
extern Counter& fusion_fallbacks; // FusionFallback: graphs run per node after a failed compile
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
extern Counter& kernel_batch_launches;   // KernelBatchLaunches: kernel batches run by a batch kernel
extern Counter& buffers_donated;  // BuffersDonated: kernel outputs written into inputs' memory
extern Timer& compile_time;       // CompileTime
extern Timer& execute_time;       // ExecuteTime
}  // namespace metrics

}  // namespace lazyfuse
