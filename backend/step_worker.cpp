// The worker thread of asynchronous steps: see Note [Asynchronous steps] in
// backend/graph_executor.cpp.
#include "backend/detail/step_worker.h"

#include "kernels/interrupts.h"
#include "lazy_ir/check.h"
#include "lazy_ir/metrics.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <chrono>
#include <cstdlib>
#include <thread>

extern "C" void omp_set_num_threads(int);  // libgomp, which torch loads: a per-thread setting

namespace lazyfuse::detail {

StepWorker& StepWorker::instance() {
  std::lock_guard<std::mutex> lock(*instanceMutex());
  if (slot() == nullptr) slot() = new StepWorker();  // never destroyed: its thread outlives exit
  return *slot();
}

bool StepWorker::started() { return slot() != nullptr; }

void StepWorker::forgetInForkedChild() {
  instanceMutex() = new std::mutex();
  slot() = nullptr;
}

void StepWorker::submit(std::shared_ptr<AsyncStep> step) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    LF_INTERNAL_ASSERT(!queued_, "an asynchronous step submitted while another waits to run");
    queued_ = std::move(step);
  }
  cv_.notify_all();
}

void StepWorker::waitFor(const AsyncStep& step) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return step.done; });
}

StepWorker::StepWorker() {
  std::thread([this] { loop(); }).detach();
  // A step still running at exit would run kernels of libraries being unloaded.
  std::atexit([] {
    if (started()) instance().waitIdle();
  });
}

StepWorker*& StepWorker::slot() {
  static StepWorker* worker = nullptr;
  return worker;
}

std::mutex*& StepWorker::instanceMutex() {
  static std::mutex* mutex = new std::mutex();
  return mutex;
}

void StepWorker::waitIdle() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !queued_ && !running_; });
}

void StepWorker::loop() {
  // One thread: the main thread records beside it, and a second team of OpenMP threads,
  // spinning beside the main thread's, would take the cores from the recording and from eager
  // work alike. A step longer than its recording runs synchronously instead.
  // at::parallel_for sets a new thread's count on its first call: set it first, then ours.
  at::internal::lazy_init_num_threads();
  omp_set_num_threads(1);
  for (;;) {
    std::shared_ptr<AsyncStep> step;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return queued_ != nullptr; });
      step = std::move(queued_);
      running_ = true;
    }
    run(*step);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      step->done = true;
      running_ = false;
    }
    cv_.notify_all();
  }
}

void StepWorker::run(AsyncStep& step) {
  const auto start = std::chrono::steady_clock::now();
  try {
    ScopedTimer timer(metrics::execute_time);
    RECORD_USER_SCOPE("lazyfuse::execute");
    step.outputs = runPlan(step.plan->plan, *step.graph, step.plan->kernels.get(),
                           step.donates ? &step.donation : nullptr);
  } catch (const SyncInterrupted&) {
    throw;  // the interrupted step is dropped, its time unread
  } catch (...) {
    step.error = std::current_exception();
  }
  step.run_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
}

}  // namespace lazyfuse::detail
