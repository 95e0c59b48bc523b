#pragma once
// The worker thread that runs asynchronous steps: see Note [Asynchronous steps] in
// backend/graph_executor.cpp.

#include "backend/lazy_tensor.h"
#include "backend/plan_compiler.h"
#include "kernels/plan_runner.h"
#include "lazy_ir/graph.h"

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

namespace lazyfuse::detail {

/// A step handed to the worker: what it runs, and (once `done`) what it gave.
struct AsyncStep {
  std::vector<c10::intrusive_ptr<LazyData>> targets;
  std::vector<Value> roots;
  std::unique_ptr<Graph> graph;
  std::vector<uint32_t> keep;
  std::vector<std::vector<size_t>> kept_slots;
  std::shared_ptr<const CompiledPlan> plan;
  bool donates = false;
  DonationState donation;
  // Written by the worker; read after `done`.
  int64_t run_ns = 0;
  std::vector<at::Tensor> outputs;
  std::exception_ptr error;
  bool done = false;
};

/// The one worker thread of the process, started by the first asynchronous step.
class StepWorker {
 public:
  static StepWorker& instance();
  static bool started();
  /// In the child of a fork: the worker's thread was not copied, and its mutex may have been
  /// taken; the child's next asynchronous step starts a worker of its own.
  static void forgetInForkedChild();

  void submit(std::shared_ptr<AsyncStep> step);
  void waitFor(const AsyncStep& step);
  /// Runs `step`'s plan on this thread, timed into `run_ns`. An error is kept in `error`, except
  /// SyncInterrupted, which propagates (nothing but the main thread's run is interruptible).
  static void run(AsyncStep& step);

 private:
  StepWorker();
  static StepWorker*& slot();
  static std::mutex*& instanceMutex();
  void waitIdle();
  [[noreturn]] void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::shared_ptr<AsyncStep> queued_;
  bool running_ = false;
};

}  // namespace lazyfuse::detail
