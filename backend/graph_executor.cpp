#include "backend/graph_executor.h"

#include "backend/detail/graph_cache.h"
#include "backend/detail/kept_values.h"
#include "backend/device.h"
#include "backend/logging.h"
#include "backend/plan_compiler.h"
#include "backend/plan_replay.h"
#include "backend/step_boundaries.h"
#include "kernels/interrupts.h"
#include "kernels/plan_runner.h"
#include "lazy_ir/check.h"
#include "lazy_ir/metrics.h"
#include "lowering/print_plan.h"

#include <ATen/record_function.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <memory>
#include <sstream>

namespace lazyfuse {
namespace {

using detail::addKeptOutputs;
using detail::freeDataInputs;
using detail::internalUses;
using detail::nodesToKeep;
using detail::PlanEntry;
using detail::planFor;

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

// Note [Syncs below Python modes]
// A sync runs ATen on the hardware device's buffers: extern calls, reading a host scalar's value.
// Those calls are lazyfuse's, not the program's, so a TorchDispatchMode the program has active
// must not see them: AOTAutograd runs compiled graphs under one of its own (which turned the
// wrapped number of `x * 0.5` into a Python float and failed the call that reads it). A sync runs
// with the Python dispatch keys excluded, as the kernels below a mode's own handling would.
// Pinned by test_dynamo_backend.py.
void syncData(c10::ArrayRef<c10::intrusive_ptr<LazyData>> data) {
  c10::impl::ExcludeDispatchKeyGuard no_python_modes(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
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
  noteSync();  // even with nothing pending: a step of the program's own
  auto live = livePendingData();
  syncData(live);
}

void waitDevice() {
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
