#include "backend/plan_replay.h"

#include "backend/collectives.h"

#include "backend/detail/captured_run.h"
#include "backend/device.h"
#include "backend/logging.h"
#include "kernels/cuda_graph.h"
#include "kernels/plan_runner.h"
#include "lazy_ir/check.h"
#include "lazy_ir/config.h"
#include "lazy_ir/metrics.h"
#include "lowering/lowerings.h"

#include <ATen/ops/empty_strided.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/isnan.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <string>

namespace lazyfuse {

// Note [CUDA graph replay]
// A training or inference loop runs the same plan every step, and on a GPU a small step costs
// its launches: an ATen call or a kernel launch per step of the plan, microseconds each on the
// host. So a cached plan whose runs keep finding their inputs where they were is captured once
// as a CUDA graph, and later runs replay it: one graph launch, nothing dispatched.
//
// What a graph bakes in, and how each is kept true on replay:
// - Addresses of inputs. The first two runs of a plan tell the device data that stay in place
//   (parameters and optimizer state, which donation writes in place: Note [Donated buffers])
//   from those that move (a new data batch each step; one the allocator places where the last
//   batch was moves too: its storage is another one). The graph reads the first in place,
//   and a replay requires each at the address captured; the others are copied, before each
//   replay, into buffers the capture made for them. An input in place that moves ends the
//   graph, and two runs later the plan is captured anew, with what those runs tell
//   (kMaxCaptures in all): a parameter that moved once, because something held it at one step
//   (a checkpoint's state_dict) so that it could not be donated, is read in place again.
// - Memory of everything else. On a GPU the capture allocates from a private pool of torch's
//   caching allocator (torch's own capture, in the plugin liblazyfuse_cuda_graphs.so), which
//   keeps the graph's memory for it. Graph outputs live there too: a large one is handed out
//   as a view of that memory, and a replay waits (runs the plan as usual) until nothing holds
//   the previous one, and copies it out from then on (a loop that keeps the last output while
//   it runs the next step would otherwise replay every other step); a small one (kCloneBytes)
//   is always copied out, so a loss a loop keeps never stops replay.
// - Donations. An output the capture wrote into an input's memory is written there on every
//   replay, so each replay checks that nothing but the plan holds those inputs, as a donating
//   run does.
// - Scalars. Kernel parameters (Adam's bias corrections, a scheduled learning rate) change from
//   step to step: a replay gives each captured launch its current values
//   (cuGraphExecKernelNodeSetParams), and under emulation the recorded launch reads them. The
//   scalars of extern steps are baked into ATen's kernels, so a replay requires them unchanged,
//   host scalar tensors compared by value (one may be changed in place between runs).
// - Order. A replay runs on the stream the capture was made from, so that copying the next run's
//   inputs into the graph's buffers never overtakes the replay before; on another current
//   stream the plan runs as usual.
// - Nothing else: plans with random ops are never captured (their generator offsets would need
//   torch's graph-safe RNG bookkeeping, and replaying them could not be checked against a run),
//   and a capture that a synchronizing op breaks is given up: the plan then runs as usual, and
//   the plugin leaves torch's allocators as if the capture never began.
//
// Every capture is checked. The capturing run first runs the plan as usual without donation
// (its inputs untouched), then captures and replays it, and compares the outputs bit for bit
// (NaN equal to NaN); so do the first replay after it and the first that gives launches new
// scalars. A difference gives up replay for the plan, and the run returns the outputs of the
// ordinary run (counted in CudaGraphMismatches): a replay that goes wrong where it is checked
// costs speed, not numbers. The replays after those rely on the checks above.
//
// The target makes the capture and the replay graph (Note [Targets]). Under CUDA emulation
// (LAZYFUSE_CUDA_EMULATION=1) the same logic runs on the CPU: the capture is a normal run that
// records its launches and extern calls (kernels/cuda_graph.h), and replay runs the records
// again over the same memory. That is how the tests check, without a GPU,
// what a replay reads and writes. LAZYFUSE_CUDA_GRAPHS=0 turns replay off.
constexpr int64_t kRunsBeforeCapture = 3;
constexpr int kMaxCaptures = 8;
// A captured graph keeps the memory of its run (its pool) for as long as it lives: at most this
// many live at once, the plans first captured (a program whose shapes keep changing makes new
// plans without end).
constexpr int kMaxLiveGraphs = 64;

namespace detail {

bool sameValues(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  if (a.numel() == 0) return true;
  at::Tensor equal = at::eq(a, b);
  if (a.is_floating_point() || a.is_complex()) {
    equal = equal.logical_or(at::isnan(a).logical_and(at::isnan(b)));
  }
  return equal.all().item<bool>();
}

std::optional<size_t> firstMismatch(const std::vector<at::Tensor>& result,
                                    const std::vector<at::Tensor>& reference) {
  for (size_t i = 0; i < result.size(); ++i) {
    if (sameValues(result[i], reference[i])) continue;
    metrics::cuda_graph_mismatches.add();
    return i;
  }
  return std::nullopt;
}

}  // namespace detail

namespace {

using detail::firstMismatch;
using detail::OutputKind;
using detail::OutputSource;
using detail::sameValues;

bool sameParams(const std::vector<c10::IValue>& now, const std::vector<c10::IValue>& captured) {
  if (now.size() != captured.size()) return false;
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i].isTensor() != captured[i].isTensor()) return false;
    if (!now[i].isTensor()) {
      if (!c10::_fastEqualsForContainer(now[i], captured[i])) return false;
      continue;
    }
    const at::Tensor &a = now[i].toTensor(), &b = captured[i].toTensor();
    if (a.defined() != b.defined()) return false;
    if (a.defined() && (a.device() != b.device() || !sameValues(a, b))) return false;
  }
  return true;
}

bool eligible(const CompiledPlan& plan, const Graph& graph) {
  // A replay would run a collective again, or leave it out (Note [Collectives on lazy tensors]).
  if (!plan.replayable() || plan.plan.steps.empty() || hasCollectives(graph)) return false;
  for (const NodePtr& node : graph.nodes()) {
    // A random op (by name, and any op PyTorch tags as drawing from a generator: binomial,
    // rrelu_with_noise, _sample_dirichlet, ...) is never captured.
    if (node->kind() != OpKind::kAten) continue;
    if (classifyOp(node->opName()) == OpClass::kRandom ||
        node->aten().op.hasTag(at::Tag::nondeterministic_seeded)) {
      return false;
    }
  }
  return true;
}

std::atomic<int> live_graphs{0};  // CapturedRuns alive

}  // namespace

CapturedRun::CapturedRun() { ++live_graphs; }
CapturedRun::~CapturedRun() { --live_graphs; }

std::vector<at::Tensor> CapturedRun::handOut(const Graph& graph) const {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  std::vector<at::Tensor> result;
  result.reserve(outputs.size());
  for (const OutputSource& o : outputs) {
    if (o.kind == OutputKind::kInput) {
      const at::Tensor& input = graph.nodes()[o.position]->data();
      result.push_back(
          o.same ? input : input.as_strided(o.sizes, o.strides, input.storage_offset() + o.offset));
      continue;
    }
    at::Tensor view = statics[o.storage].as_strided(o.sizes, o.strides, o.offset);
    if (o.kind == OutputKind::kClone) {
      at::Tensor copy = at::empty_strided(o.sizes, o.strides, view.options());
      copy.copy_(view);
      view = copy;
    }
    result.push_back(std::move(view));
  }
  return result;
}

bool cudaGraphsEnabled() { return config::cudaGraphs(); }

PlanReplay::PlanReplay() = default;
PlanReplay::~PlanReplay() = default;

void PlanReplay::disable(const std::string& why) {
  disabled_ = true;
  captured_.reset();
  LF_LOG_WARN("graph of ", plan_ ? plan_->plan.steps.size() : 0,
              " steps is not replayed as a CUDA graph: ", why);
}

std::optional<std::vector<at::Tensor>> PlanReplay::run(
    const CompiledPlan& plan, const Graph& graph,
    const std::function<std::vector<uint8_t>()>& free_data, DonationState& donation) {
  if (!cudaGraphsEnabled()) return std::nullopt;
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;  // another thread runs this plan
  if (plan_ != &plan) {  // a recurring small graph's plan was replaced by a fused one
    captured_.reset();
    eligible_ = -1;
    disabled_ = false;
    runs_ = 0;
    captures_ = 0;
    plan_ = &plan;
  }
  if (eligible_ < 0) eligible_ = eligible(plan, graph) ? 1 : 0;
  if (!eligible_ || disabled_) return std::nullopt;
  const std::vector<uint32_t>& data = graph.dataPositions();
  std::vector<const void*> addresses(data.size());
  for (size_t i = 0; i < data.size(); ++i) addresses[i] = graph.nodes()[data[i]]->data().data_ptr();
  if (captured_) {
    Attempt attempt = replay(plan, graph, addresses, free_data, donation);
    if (attempt.outputs) return attempt.outputs;
    if (!attempt.moved || disabled_) return std::nullopt;
    captured_.reset();
    runs_ = 0;  // which inputs stay in place is learnt anew
  }
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> storages;
  storages.reserve(data.size());
  for (uint32_t position : data) {
    storages.emplace_back(graph.nodes()[position]->data().storage().getWeakStorageImpl());
  }
  if (runs_ > 0) {
    for (size_t i = 0; i < data.size(); ++i) {
      // A storage still alive is the same one only if it is the one seen before; one freed
      // since (lock() gives null) means a new tensor, wherever its memory is.
      const c10::intrusive_ptr<c10::StorageImpl> last = last_storages_[i].lock();
      moving_[i] |= addresses[i] != last_addresses_[i] ||
                    last.get() != graph.nodes()[data[i]]->data().storage().unsafeGetStorageImpl();
    }
  } else {
    moving_.assign(data.size(), 0);
  }
  last_addresses_ = addresses;
  last_storages_ = std::move(storages);
  ++runs_;
  if (runs_ < kRunsBeforeCapture || captures_ >= kMaxCaptures) return std::nullopt;
  if (live_graphs.load() >= kMaxLiveGraphs) return std::nullopt;
  ++captures_;
  return capture(plan, graph, free_data, donation);
}

PlanReplay::Attempt PlanReplay::replay(const CompiledPlan& plan, const Graph& graph,
                                       const std::vector<const void*>& addresses,
                                       const std::function<std::vector<uint8_t>()>& free_data,
                                       DonationState& donation) {
  CapturedRun& run = *captured_;
  Attempt attempt;
  for (size_t k = 0; k < run.fixed.size(); ++k) {
    attempt.moved = attempt.moved || addresses[run.fixed[k]] != run.fixed_addresses[k];
  }
  if (attempt.moved) return attempt;
  const c10::Device device = hardwareDevice();
  if (run.stream &&
      c10::impl::getDeviceGuardImpl(device.type())->getStream(device) != *run.stream) {
    return attempt;
  }
  const std::vector<NodePtr>& nodes = graph.nodes();
  for (const auto& [position, params] : run.extern_params) {
    if (!sameParams(nodes[position]->params(), params)) return attempt;
  }
  bool held = false;
  for (size_t s = 0; s < run.statics.size(); ++s) {
    if (static_cast<size_t>(run.statics[s].storage().use_count()) == run.holders[s]) continue;
    // Something outside still holds an output of the last replay: this run cannot write it, and
    // later replays copy that output out rather than hand out the graph's memory again.
    held = true;
    for (OutputSource& o : run.outputs) {
      if (o.storage == static_cast<int32_t>(s)) o.kind = OutputKind::kClone;
    }
  }
  if (held) return attempt;
  if (!run.data_donations.empty() || !run.data_regions.empty()) {
    DonationState state;
    state.free_data = free_data();
    PlanValues values;
    values.nodes.resize(nodes.size());
    values.donation = &state;
    for (uint32_t position : graph.dataPositions())
      values.nodes[position] = {nodes[position]->data()};
    for (const auto& [fused, d] : run.data_donations) {
      if (!mayDonate(*fused, *d, graph, values, device)) return attempt;
    }
    for (const RegionWrite* write : run.data_regions) {
      // Off a GPU the index must be device data, to be checked before the replay writes with it.
      const Node& index = *nodes[write->index.position];
      const TensorMeta& meta = nodes[write->value.position]->outputMeta(write->value.index);
      if (!dataWritableInPlace(write->base.position, meta, write->sharers, graph, values) ||
          (write->index_copy && !device.is_cuda() &&
           (index.kind() != OpKind::kDeviceData || !writeCannotRaise(*write, index.data())))) {
        return attempt;
      }
    }
  }
  bool changed = false;
  for (const std::unique_ptr<CapturedLaunch>& launch : run.capture->launches()) {
    if (!launch->function || !refreshLaunchParams(plan.plan, graph, *launch)) continue;
    changed = true;
    if (!run.graph->updateLaunch(*launch)) {
      disable("the CUDA driver cannot give captured kernels new parameters");
      return attempt;
    }
  }
  std::vector<at::Tensor> reference;
  const bool verify = run.verify_next || (changed && run.verify_changed);
  if (verify) {
    run.verify_next = false;
    run.verify_changed = run.verify_changed && !changed;
    reference = runPlan(plan.plan, graph, plan.kernels.get(), nullptr);
  }
  for (size_t k = 0; k < run.copied.size(); ++k) {
    run.statics[run.copied_into[k]].copy_(nodes[run.copied[k]]->data());
  }
  try {
    run.graph->replay();
  } catch (const c10::Error& e) {
    // A graph launch that fails runs nothing; a replay of recorded steps may have run some of
    // them (and written into donated inputs), so its error is the sync's, and the targets it
    // may have overwritten are broken rather than computed again (Note [Failed syncs]).
    if (run.graph->ranWhileCapturing()) {
      donation.donated += run.donated;
      donation.donated_data += run.donated_data;
      throw;
    }
    disable(e.what_without_backtrace());
    if (verify) attempt.outputs = std::move(reference);
    return attempt;
  }
  donation.donated += run.donated;
  donation.donated_data += run.donated_data;
  metrics::cuda_graph_replays.add();
  std::vector<at::Tensor> result = run.handOut(graph);
  if (verify) {
    if (std::optional<size_t> i = firstMismatch(result, reference)) {
      disable("a replay computed other values than the plan (output " + std::to_string(*i) + ")");
      attempt.outputs = std::move(reference);
      return attempt;
    }
  }
  attempt.outputs = std::move(result);
  return attempt;
}

}  // namespace lazyfuse
