// The capture of a plan run for CUDA graph replay. See Note [CUDA graph replay] in
// backend/plan_replay.cpp.

#include "backend/detail/captured_run.h"

#include "backend/device.h"
#include "kernels/interrupts.h"
#include "kernels/plan_runner.h"
#include "lazy_ir/metrics.h"

#include <ATen/ops/empty_strided.h>

#include <string>
#include <unordered_map>

namespace lazyfuse {
namespace {

using detail::firstMismatch;
using detail::OutputKind;
using detail::OutputSource;

/// An output of at most this many bytes is always copied out of the graph's memory.
constexpr size_t kCloneBytes = size_t{1} << 20;

/// The values of an extern call's parameters, to compare with a later run's: a tensor (a host
/// scalar) is copied, since the call may be given the same tensor, changed in place, again.
std::vector<c10::IValue> snapshotParams(const std::vector<c10::IValue>& params) {
  std::vector<c10::IValue> values;
  for (const c10::IValue& p : params) {
    values.push_back(p.isTensor() && p.toTensor().defined() ? c10::IValue(p.toTensor().clone())
                                                            : p);
  }
  return values;
}

}  // namespace

std::optional<std::vector<at::Tensor>> PlanReplay::capture(
    const CompiledPlan& plan, const Graph& graph,
    const std::function<std::vector<uint8_t>()>& free_data, DonationState& donation) {
  const c10::Device device = hardwareDevice();
  const Target& target = *plan.target;
  // A capture counts against kMaxCaptures and, on a GPU, runs nothing: not interrupted. See
  // Note [Interrupting a sync].
  NoInterrupts no_interrupts;
  // The run as usual, without donation so that the inputs stay as they are: what the capture's
  // replay must give, and what this run returns if it does not.
  std::vector<at::Tensor> reference = runPlan(plan.plan, graph, plan.kernels.get(), nullptr);

  auto run = std::make_unique<CapturedRun>();
  run->capture = target.newCapture();
  const std::vector<uint32_t>& data = graph.dataPositions();
  const std::vector<NodePtr>& nodes = graph.nodes();
  std::vector<at::Tensor> replaced(nodes.size());
  std::unordered_map<const c10::StorageImpl*, int32_t> static_of;
  for (size_t i = 0; i < data.size(); ++i) {
    const at::Tensor& input = nodes[data[i]]->data();
    if (input.device() != device) {
      disable("an input is on " + input.device().str());
      return reference;
    }
    if (moving_[i] && !input.is_non_overlapping_and_dense()) {
      // Its values could not be copied into a buffer laid out as it is.
      disable("an input that changes place from run to run overlaps itself");
      return reference;
    }
    if (!moving_[i]) {
      run->fixed.push_back(i);
      run->fixed_addresses.push_back(input.data_ptr());
      run->capture->external.insert(input.storage().unsafeGetStorageImpl());
      continue;
    }
    at::Tensor buffer = at::empty_strided(input.sizes(), input.strides(), input.options());
    buffer.copy_(input);
    replaced[data[i]] = buffer;
    run->copied.push_back(data[i]);
    run->copied_into.push_back(static_cast<int32_t>(run->statics.size()));
    static_of[buffer.storage().unsafeGetStorageImpl()] = static_cast<int32_t>(run->statics.size());
    run->statics.push_back(buffer);
  }
  DonationState state;
  state.record_taken = true;
  const bool donates = hasDonations(plan.plan);
  if (donates) {
    state.free_data = free_data();
    for (uint32_t position : run->copied) state.free_data[position] = 0;  // held by the run
  }
  std::vector<at::Tensor> outputs;
  try {
    CaptureScope scope(run->capture.get());
    run->graph = target.beginReplay(*run->capture, device);
    run->stream = run->graph->stream();
    outputs = runPlan(plan.plan, graph, plan.kernels.get(), donates ? &state : nullptr, &replaced);
    run->graph->end();
  } catch (const std::exception& e) {
    if (run->graph) run->graph->abort();
    metrics::cuda_graph_capture_failures.add();
    const auto* error = dynamic_cast<const c10::Error*>(&e);
    disable(std::string("capture failed: ") + (error ? error->what_without_backtrace() : e.what()));
    return reference;
  }

  // Where each output is: an input's memory, or the graph's.
  std::unordered_map<const c10::TensorImpl*, uint32_t> input_tensor;
  std::unordered_map<const c10::StorageImpl*, uint32_t> input_storage;
  for (size_t i : run->fixed) {
    const at::Tensor& input = nodes[data[i]]->data();
    input_tensor[input.unsafeGetTensorImpl()] = data[i];
    input_storage[input.storage().unsafeGetStorageImpl()] = data[i];
  }
  for (const at::Tensor& out : outputs) {
    OutputSource o;
    o.sizes = out.sizes().vec();
    o.strides = out.strides().vec();
    o.offset = out.storage_offset();
    const c10::StorageImpl* storage = out.storage().unsafeGetStorageImpl();
    if (auto it = input_tensor.find(out.unsafeGetTensorImpl()); it != input_tensor.end()) {
      o.kind = OutputKind::kInput;
      o.position = it->second;
      o.same = true;
    } else if (auto at = input_storage.find(storage); at != input_storage.end()) {
      o.kind = OutputKind::kInput;
      o.position = at->second;
      o.offset -= nodes[o.position]->data().storage_offset();
    } else {
      auto [entry, added] = static_of.emplace(storage, static_cast<int32_t>(run->statics.size()));
      if (added) run->statics.push_back(out);
      o.storage = entry->second;
      o.kind = out.storage().nbytes() <= kCloneBytes ? OutputKind::kClone : OutputKind::kStatic;
    }
    run->outputs.push_back(std::move(o));
  }
  outputs.clear();
  replaced.clear();
  for (const at::Tensor& t : run->statics) run->holders.push_back(t.storage().use_count());
  for (const PlanStep& step : plan.plan.steps) {
    if (step.kind == StepKind::kExternCall) {
      run->extern_params.emplace_back(step.position,
                                      snapshotParams(nodes[step.position]->params()));
    }
  }
  for (const auto& [fused, d] : state.taken) {
    const uint32_t position = donorOf(*fused, *d).value.position;
    if (nodes[position]->kind() == OpKind::kDeviceData) run->data_donations.emplace_back(fused, d);
  }
  run->data_regions = state.regions_taken;
  run->donated = state.donated;
  run->donated_data = state.donated_data;
  metrics::cuda_graphs_captured.add();
  if (!run->graph->ranWhileCapturing()) {
    try {
      run->graph->replay();
    } catch (const c10::Error& e) {  // the launch failed: nothing ran
      disable(e.what_without_backtrace());
      return reference;
    }
  }
  donation.donated += state.donated;
  donation.donated_data += state.donated_data;
  std::vector<at::Tensor> result = run->handOut(graph);
  if (std::optional<size_t> i = firstMismatch(result, reference)) {
    disable("its captured run computed other values than the plan (output " + std::to_string(*i) +
            ")");
    return reference;
  }
  captured_ = std::move(run);
  return result;
}

}  // namespace lazyfuse
