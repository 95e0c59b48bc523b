#include "backend/graph_executor.h"

#include "backend/collectives.h"

#include "backend/detail/graph_cache.h"
#include "backend/detail/kept_values.h"
#include "backend/detail/step_worker.h"
#include "backend/device.h"
#include "backend/logging.h"
#include "backend/plan_compiler.h"
#include "backend/plan_replay.h"
#include "backend/step_boundaries.h"
#include "kernels/interrupts.h"
#include "kernels/plan_runner.h"
#include "lazy_ir/check.h"
#include "lazy_ir/config.h"
#include "lazy_ir/metrics.h"
#include "lowering/kernel_ir.h"
#include "lowering/print_plan.h"

#include <ATen/record_function.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>

#include <pthread.h>

namespace lazyfuse {
namespace {

using detail::addKeptOutputs;
using detail::AsyncStep;
using detail::freeDataInputs;
using detail::internalUses;
using detail::nodesToKeep;
using detail::PlanEntry;
using detail::planFor;
using detail::StepWorker;

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

std::string currentErrorMessage();

/// After a run of `plan` over `graph` gave `outputs`: counts it, and gives each node at `keep` its
/// values (the outputs at `kept_slots`). See Note [Values a sync keeps for later].
void keepComputedValues(const CompiledPlan& plan, const Graph& graph,
                        const std::vector<uint32_t>& keep,
                        const std::vector<std::vector<size_t>>& kept_slots,
                        const std::vector<at::Tensor>& outputs) {
  metrics::kernels_launched.add(static_cast<int64_t>(plan.plan.kernels.size()));
  metrics::graphs_executed.add();
  metrics::graph_nodes.add(static_cast<int64_t>(graph.nodes().size()));
  for (size_t k = 0; k < keep.size(); ++k) {
    std::vector<at::Tensor> values;
    for (size_t slot : kept_slots[k]) values.push_back(outputs[slot]);
    Graph::setComputed(graph.nodes()[keep[k]], std::move(values));
  }
  metrics::values_kept.add(static_cast<int64_t>(keep.size()));
}

/// The dispatch keys of Python modes, which a sync runs below: Note [Syncs below Python modes].
const c10::DispatchKeySet kPythonModeKeys({c10::DispatchKey::Python,
                                           c10::DispatchKey::PythonTLSSnapshot});

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
  keepComputedValues(*plan, graph, keep, kept_slots, outputs);
  for (size_t i = 0; i < targets.size(); ++i) targets[i]->setBuffer(std::move(outputs[i]));
}

/// The message of the exception being handled, without the C++ backtrace; one naming its type
/// when it has none (a broken value must say why).
std::string currentErrorMessage() {
  std::string message;
  try {
    throw;
  } catch (const c10::Error& e) {
    message = e.what_without_backtrace();
  } catch (const std::exception& e) {
    message = e.what();
  }
  if (message.empty()) message = "the sync failed with an exception that has no message";
  return message;
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

// Note [Asynchronous steps]
// With LAZYFUSE_ASYNC on and the CPU as the hardware device, mark_step() does what a sync does up
// to the plan (the graph, the values it keeps, the plan from the cache or compiled, the device data
// it may donate), then hands the plan's run to a worker thread and returns: Python records the
// next step while this one runs. One step is in flight at a time. Its targets stay pending until
// the main thread takes its results, which every sync, mark_step(), wait() and read of a value
// does first (drainAsyncStep): so the worker touches only its graph, plan and buffers, never a
// LazyData, and nothing reads a value before it is there.
// - Ops recorded meanwhile read the targets' pending nodes. Each target's node is therefore kept
//   like the values of Note [Values a sync keeps for later]: once computed, the next graph reads
//   its buffer instead of computing it again (which could read memory the step donated).
// - A target that the program pointed at a new value meanwhile (BatchNorm's running stats are
//   assigned in place) keeps the new value.
// - An error of the run surfaces at the next sync, mark_step() or wait(), as a sync's would: its
//   targets are broken (each alone computed again when nothing was donated, Note [Failed
//   syncs]) and the error is raised there.
// - The worker runs a plan's fused kernels on one thread (the main thread records beside it).
//   Each plan is judged where it costs the program less (judgeRun): after its first runs, its
//   waits on the worker are timed against its runs on the main thread, on all threads. A step
//   the program records the next one beside (a decoding loop) stays on the worker; one it waits
//   for at once (a loss read right after mark_step()), or whose run is long next to the recording
//   (a large model's step, an optimizer over large tensors) and faster on all threads, runs on
//   the main thread, from the graph and plan mark_step() made. A plan is judged again after 200
//   runs.
// - While a profiler is on (torch.profiler.profile), mark_step() syncs as usual: the profiler
//   records the main thread's events, and the plan's kernels and extern calls are among them.
// - The worker never takes the GIL, and Ctrl-C does not stop its run (Note [Interrupting a
//   sync] covers the main thread's syncs): a wait for it is not interruptible. Plans replayed as
//   CUDA graphs, and any other hardware device, run synchronously. Counted by AsyncSteps. Pinned by
//   test_async_steps.py.
// - A fork (a DataLoader's workers, multiprocessing) copies no worker thread: once a step has been
//   submitted, a fork first waits for the step in flight to finish (so the child's copy of its
//   buffers is whole and its results are there to take), and the child starts a worker of its
//   own at its first asynchronous step (before, the child's step waited forever).
namespace {

/// A plan's first runs on the worker are not timed: they are slower (fresh buffers, the first
/// calls of its kernels, and of the BLAS on a new thread).
constexpr int kUntimedRuns = 2;
/// Runs timed in each place before the judgement, whose medians are compared.
constexpr int kTimedRuns = 5;
/// A judged plan runs this many times where it was judged to run, then is judged again (what the
/// program does beside it, or the load of the machine, may have changed).
constexpr int kJudgedRuns = 200;

struct InFlight {
  std::mutex mutex;  // held while a step's results are taken
  std::shared_ptr<AsyncStep> step;
  // Per plan (a graph that runs node by node until it recurs, then fused, has two): where it
  // runs, judged by timing both places (see judgeRun). The entry holds the plan, so that its
  // address names no other.
  struct Judgement {
    enum class Mode {
      kWarmingUp,     // first runs on the worker, not timed
      kTimingWorker,  // runs on the worker, each wait timed
      kTimingMain,    // runs on the main thread, each run timed
      kWorker,        // judged: on the worker
      kMain,          // judged: on the main thread
    };
    std::shared_ptr<const CompiledPlan> plan;
    Mode mode = Mode::kWarmingUp;
    int runs_left = kUntimedRuns;           // in this mode
    std::vector<int64_t> waits, main_runs;  // timed in this judgement
    bool onMainThread() const { return mode == Mode::kTimingMain || mode == Mode::kMain; }
  };
  std::unordered_map<const CompiledPlan*, Judgement> judgements;
};

/// Plans judged before those the graph cache no longer holds are forgotten.
constexpr size_t kMaxJudgements = 1024;

InFlight& inFlight() {
  static InFlight* in_flight = new InFlight();
  return *in_flight;
}

int64_t median(std::vector<int64_t> times) {
  LF_INTERNAL_ASSERT(!times.empty(), "the median of no times");
  auto middle = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
  std::nth_element(times.begin(), middle, times.end());
  return *middle;
}

/// Counts a finished run of a plan in its judgement (Note [Asynchronous steps]) and moves it on:
/// `run_ns` is the run's own time, `wait_ns` how long the program waited for it on the worker
/// (nullopt: it ran on the main thread, and the program waited for all of it). A plan runs first
/// on the worker, then on the main thread, on all threads: kTimedRuns timed runs in each place
/// (after a few untimed ones on the worker); the place whose median cost the program less keeps
/// the plan for kJudgedRuns runs, then both are timed again.
void judgeRun(InFlight::Judgement& judgement, int64_t run_ns, std::optional<int64_t> wait_ns) {
  using Mode = InFlight::Judgement::Mode;
  if (judgement.onMainThread() == wait_ns.has_value()) return;  // run where it was not judged to
  if (judgement.mode == Mode::kTimingWorker) judgement.waits.push_back(*wait_ns);
  if (judgement.mode == Mode::kTimingMain) judgement.main_runs.push_back(run_ns);
  if (--judgement.runs_left > 0) return;
  auto next = [&](Mode mode, int runs) {
    judgement.mode = mode;
    judgement.runs_left = runs;
  };
  switch (judgement.mode) {
    case Mode::kWarmingUp:
    case Mode::kWorker:
    case Mode::kMain:
      judgement.waits.clear();
      judgement.main_runs.clear();
      return next(Mode::kTimingWorker, kTimedRuns);
    case Mode::kTimingWorker: return next(Mode::kTimingMain, kTimedRuns);
    case Mode::kTimingMain:
      return next(
          median(judgement.main_runs) < median(judgement.waits) ? Mode::kMain : Mode::kWorker,
          kJudgedRuns);
  }
}

/// Before a fork: the step in flight finishes first, so that the child's copy of its buffers is
/// whole and its results are there for the child to take (which needs no worker).
void finishStepBeforeFork() {
  std::shared_ptr<AsyncStep> step;
  {
    std::lock_guard<std::mutex> lock(inFlight().mutex);
    step = inFlight().step;
  }
  if (step && StepWorker::started()) StepWorker::instance().waitFor(*step);
}

void registerForkHandlers() {
  static const bool registered = [] {
    pthread_atfork(&finishStepBeforeFork, nullptr, &StepWorker::forgetInForkedChild);
    return true;
  }();
  (void)registered;
}

bool holdsRoot(const LazyData& target, const Value& root) {
  return target.isPending() && target.pendingValue().node.get() == root.node.get() &&
         target.pendingValue().index == root.index;
}

/// Takes the results of a finished asynchronous step (main thread), which the program waited
/// `wait_ns` for (nullopt: it ran on the main thread); raises its error.
void finishAsyncStep(AsyncStep& step, std::optional<int64_t> wait_ns) {
  metrics::buffers_donated.add(step.donation.donated);
  const std::vector<NodePtr>& nodes = step.graph->nodes();
  std::vector<LazyData*> targets;
  for (size_t i = 0; i < step.targets.size(); ++i) {
    if (holdsRoot(*step.targets[i], step.roots[i])) targets.push_back(step.targets[i].get());
  }
  if (step.error) {
    std::string error;
    try {
      std::rethrow_exception(step.error);
    } catch (const std::exception&) {
      error = currentErrorMessage();
    }
    if (step.donation.donated_data != 0) {
      for (uint32_t position : step.keep) Graph::setFailed(nodes[position], error);
      for (LazyData* target : targets) target->setBroken(error);
    } else if (!targets.empty()) {
      breakFailedTargets(targets, error);
    }
    std::rethrow_exception(step.error);
  }
  if (wait_ns) metrics::async_steps.add();
  auto& judgements = inFlight().judgements;
  if (judgements.size() >= kMaxJudgements) {  // forget plans nothing else holds any more
    for (auto it = judgements.begin(); it != judgements.end();) {
      it = it->second.plan.use_count() == 1 ? judgements.erase(it) : std::next(it);
    }
  }
  InFlight::Judgement& judgement = judgements[step.plan.get()];
  judgement.plan = step.plan;
  judgeRun(judgement, step.run_ns, wait_ns);
  keepComputedValues(*step.plan, *step.graph, step.keep, step.kept_slots, step.outputs);
  // A target takes its node's computed value: one device data node stands for the buffer, as
  // for a kept value, so later steps may donate it (Note [Donated buffers]).
  for (size_t i = 0; i < step.targets.size(); ++i) {
    LazyData& target = *step.targets[i];
    if (holdsRoot(target, step.roots[i]) && !target.takeComputed()) {
      target.setBuffer(step.outputs[i]);
    }
  }
}

/// Waits for the step in flight, if any, and takes its results. See Note [Asynchronous steps].
void drainAsyncStep() {
  InFlight& in_flight = inFlight();
  std::lock_guard<std::mutex> lock(in_flight.mutex);
  if (!in_flight.step) return;
  c10::impl::ExcludeDispatchKeyGuard no_python_modes(  // Note [Syncs below Python modes]
      kPythonModeKeys);
  std::shared_ptr<AsyncStep> step = std::move(in_flight.step);
  const auto start = std::chrono::steady_clock::now();
  StepWorker::instance().waitFor(*step);
  const int64_t wait_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  finishAsyncStep(*step, std::optional<int64_t>(wait_ns));
}

/// Starts the run of the pending values of `data` on the worker thread; false when they must be
/// synced as usual instead (nothing has changed then). See Note [Asynchronous steps].
bool submitAsyncStep(c10::ArrayRef<c10::intrusive_ptr<LazyData>> data) {
  // A profiler records this thread's events: the step runs here, where its trace shows it.
  if (torch::profiler::impl::profilerEnabled()) return false;
  auto step = std::make_shared<AsyncStep>();
  std::vector<LazyData*> targets;
  for (const auto& d : data) {
    if (!d->isPending()) continue;
    step->targets.push_back(d);
    step->roots.push_back(d->pendingValue());
    targets.push_back(d.get());
  }
  if (targets.empty()) return false;
  step->graph = std::make_unique<Graph>(Graph::fromRoots(step->roots));
  Graph& graph = *step->graph;
  std::vector<at::Tensor> shared;
  // A collective runs on the program's thread, in order with the program's own (Note
  // [Collectives on lazy tensors]).
  if (renamesDeviceData(graph, shared) || hasCollectives(graph)) return false;
  const std::vector<size_t> internal = internalUses(graph, step->roots, targets);
  step->keep = nodesToKeep(graph, internal);
  for (size_t i = 0; i < step->roots.size(); ++i) {
    const uint32_t position = graph.outputs()[i].position;
    const NodePtr& node = graph.nodes()[position];
    if (node.get() != step->roots[i].node.get() || node->kind() != OpKind::kAten) continue;
    if (std::find(step->keep.begin(), step->keep.end(), position) == step->keep.end()) {
      step->keep.push_back(position);
    }
  }
  step->kept_slots = addKeptOutputs(graph, step->keep);
  try {
    InterruptibleSync interruptible;
    step->plan = planFor(graph).plan;
  } catch (const SyncInterrupted& interrupted) {
    std::rethrow_exception(interrupted.cause);  // nothing ran: the targets stay pending
  } catch (const std::exception&) {
    return false;  // the sync compiles again and raises as a sync does
  }
  if (step->plan->replayable()) return false;
  step->donates = hasDonations(step->plan->plan);
  if (step->donates) step->donation.free_data = freeDataInputs(graph, internal);
  InFlight& in_flight = inFlight();
  {
    std::lock_guard<std::mutex> lock(in_flight.mutex);
    if (in_flight.step) return false;  // another thread's mark_step() got here first
    auto judged = in_flight.judgements.find(step->plan.get());
    if (judged == in_flight.judgements.end() || !judged->second.onMainThread()) {
      registerForkHandlers();
      StepWorker::instance().submit(step);  // published only once the worker has it
      in_flight.step = std::move(step);
      return true;
    }
  }
  // Judged to run here: on all threads, from the graph and plan made above.
  try {
    InterruptibleSync interruptible;
    StepWorker::run(*step);
  } catch (const SyncInterrupted& interrupted) {
    metrics::buffers_donated.add(step->donation.donated);
    afterInterrupt(targets, step->donation);
    std::rethrow_exception(interrupted.cause);
  }
  std::lock_guard<std::mutex> lock(in_flight.mutex);
  finishAsyncStep(*step, std::nullopt);
  return true;
}

}  // namespace

// Note [Syncs below Python modes]
// A sync runs ATen on the hardware device's buffers: extern calls, reading a host scalar's value.
// Those calls are lazyfuse's, not the program's, so a TorchDispatchMode the program has active
// must not see them: AOTAutograd runs compiled graphs under one of its own (which turned the
// wrapped number of `x * 0.5` into a Python float and failed the call that reads it). A sync runs
// with the Python dispatch keys excluded, as the kernels below a mode's own handling would.
// Pinned by test_dynamo_backend.py.
void syncData(c10::ArrayRef<c10::intrusive_ptr<LazyData>> data) {
  c10::impl::ExcludeDispatchKeyGuard no_python_modes(kPythonModeKeys);
  drainAsyncStep();  // Note [Asynchronous steps]
  std::vector<LazyData*> targets;
  for (const auto& d : data) {
    d->checkNotBroken();
    // A value an earlier sync kept needs no graph. See Note [Values a sync keeps for later].
    if (d->isPending() && !d->takeComputed()) targets.push_back(d.get());
  }
  if (targets.empty()) return;
  noteSync();  // Note [Automatic step boundaries]
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
  drainAsyncStep();  // Note [Asynchronous steps]
  noteSync();        // even with nothing pending: a step of the program's own
  auto live = livePendingData();
  if (config::asyncSteps() && hardwareDevice().is_cpu()) {
    c10::impl::ExcludeDispatchKeyGuard no_python_modes(kPythonModeKeys);
    for (const auto& d : live) d->checkNotBroken();
    for (const auto& d : live) {
      if (d->isPending()) d->takeComputed();  // See Note [Values a sync keeps for later]
    }
    if (submitAsyncStep(live)) return;
  }
  syncData(live);
}

void waitDevice() {
  drainAsyncStep();  // Note [Asynchronous steps]
  // The hardware device's target: CUDA emulation has nothing queued either.
  const c10::Device device = hardwareDevice();
  findTarget(device.is_cuda() ? "cuda" : "cpu")->synchronize(device);
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

}  // namespace lazyfuse
