#include "kernels/plan_runner.h"

#include "kernels/cuda_graph.h"
#include "kernels/few_rows_matmul.h"
#include "kernels/fused_runner.h"
#include "kernels/interrupts.h"
#include "kernels/target.h"
#include "lazy_ir/check.h"

#include <ATen/core/List.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros_like.h>
#include <ATen/record_function.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <algorithm>
#include <chrono>
#include <mutex>

namespace lazyfuse {
namespace {

bool sameLayout(const at::Tensor& tensor, const TensorMeta& meta) {
  if (tensor.sizes() != c10::IntArrayRef(meta.sizes)) return false;
  for (size_t d = 0; d < meta.sizes.size(); ++d) {
    if (meta.sizes[d] > 1 && tensor.strides()[d] != meta.strides[d]) return false;
  }
  return true;
}

/// A private copy of `tensor` for an op that writes it: buffers in a plan are never written.
/// Its strides when they are dense; a strided view (Note [Strided views of buffers]) may be
/// broadcast, whose elements share memory, and becomes contiguous.
at::Tensor writableCopy(const at::Tensor& tensor) { return tensor.clone(); }

class StepRunner {
 public:
  StepRunner(const Graph& graph, std::vector<std::vector<at::Tensor>>& values)
      : graph_(graph), values_(values) {}

  void run(uint32_t position) {
    const Node& node = *graph_.nodes()[position];
    const AtenCallAttrs& attrs = node.aten();
    inputs_ = graph_.inputsOf(position);
    next_input_ = 0;
    written_.clear();
    sources_.clear();
    torch::jit::Stack stack;
    stack.reserve(attrs.args.size());
    size_t next_param = 0;
    for (const ArgSlot& slot : attrs.args) {
      if (slot.kind == ArgKind::kParam) {
        const c10::IValue& param = node.params()[next_param++];
        // A random op's own generator: each run starts from its recorded state (Note [Random
        // ops draw when recorded] in backend/random_draws.cpp).
        stack.push_back(param.isGenerator() ? c10::IValue(param.toGenerator().clone()) : param);
        continue;
      }
      stack.push_back(argument(slot));
    }
    if (refusesCpuScalars(attrs.op)) moveCpuScalars(stack);
    PlanCapture* capture = currentCapture();
    if (capture && capture->recordsSteps()) {
      recordStep(*capture, position, attrs, std::move(stack));
      return;
    }
    // Note [Matrix products of few rows]
    if (!runFewRowsMatmul(attrs.op, stack)) attrs.op.callBoxed(stack);
    collectOutputs(position, attrs, stack);
  }

  /// `value` as a replay may hold it: tensors on the memory of the run's inputs become views that
  /// do not own it (replay finds the inputs at the same addresses), other tensors are kept.
  static c10::IValue replayable(PlanCapture& capture, const c10::IValue& value) {
    if (value.isTensor()) {
      const at::Tensor& t = value.toTensor();
      if (!t.defined() || !t.has_storage() ||
          !capture.external.count(t.storage().unsafeGetStorageImpl())) {
        return value;
      }
      return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options());
    }
    if (value.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : value.toTensorList()) {
        list.push_back(replayable(capture, t).toTensor());
      }
      return list;
    }
    if (value.isList()) {
      c10::impl::GenericList list(value.toList().elementType());
      for (const c10::IValue& element : value.toList()) {
        list.push_back(replayable(capture, element));
      }
      return list;
    }
    return value;
  }

 private:
  at::Tensor fetch(bool mutated) {
    const NodeRef& ref = inputs_[next_input_++];
    const at::Tensor& tensor = values_[ref.position].at(ref.index);
    LF_INTERNAL_ASSERT(tensor.defined(), "value %", ref.position, " used after release");
    if (!mutated) return tensor;
    sources_.push_back(tensor);
    written_.push_back(writableCopy(tensor));
    return written_.back();
  }

  /// Runs the extern step at `position` and records it for a capture that records steps: the
  /// same call again over the same memory, its results copied into the outputs this run made.
  void recordStep(PlanCapture& capture, uint32_t position, const AtenCallAttrs& attrs,
                  torch::jit::Stack stack) {
    torch::jit::Stack recorded;
    for (size_t i = 0; i < stack.size(); ++i) {
      const c10::IValue& value = stack[i];
      // A GPU bakes a host scalar's value into the captured kernel: so does the record.
      const bool param = attrs.args.at(i).kind == ArgKind::kParam;
      recorded.push_back(param && value.isTensor() && value.toTensor().defined()
                             ? c10::IValue(value.toTensor().clone())
                             : replayable(capture, value));
    }
    std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (source, its writable copy)
    for (size_t i = 0; i < written_.size(); ++i) {
      copies.emplace_back(replayable(capture, sources_[i]).toTensor(), written_[i]);
    }
    const size_t num_written = written_.size();
    std::vector<ReturnKind> returns;
    for (const ReturnSlot& ret : attrs.returns) returns.push_back(ret.kind);
    attrs.op.callBoxed(stack);
    collectOutputs(position, attrs, stack);
    std::vector<at::Tensor> outputs;
    for (const at::Tensor& out : values_[position]) {
      capture.keep(out);
      outputs.push_back(replayable(capture, out).toTensor());
    }
    capture.addStep([op = attrs.op, recorded, copies, outputs, num_written, returns] {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      for (const auto& [source, copy] : copies) copy.copy_(source);
      torch::jit::Stack again = recorded;
      op.callBoxed(again);
      for (size_t i = 0; i < num_written; ++i) {
        if (!outputs[i].is_same(copies[i].second)) outputs[i].copy_(copies[i].second);
      }
      size_t next = num_written;
      for (size_t r = 0; r < returns.size(); ++r) {
        if (returns[r] == ReturnKind::kTensor) outputs.at(next++).copy_(again[r].toTensor());
        if (returns[r] != ReturnKind::kTensorList) continue;
        for (const at::Tensor& t : again[r].toTensorList()) outputs.at(next++).copy_(t);
      }
    });
  }

  c10::IValue argument(const ArgSlot& slot) {
    switch (slot.kind) {
      case ArgKind::kTensor: return fetch(slot.mutated);
      case ArgKind::kOptionalTensor:
        return slot.present[0] ? c10::IValue(fetch(slot.mutated)) : c10::IValue();
      case ArgKind::kTensorList: {
        c10::List<at::Tensor> list;
        list.reserve(slot.present.size());
        for (size_t i = 0; i < slot.present.size(); ++i) list.push_back(fetch(slot.mutated));
        return list;
      }
      case ArgKind::kOptionalTensorList: {
        c10::List<std::optional<at::Tensor>> list;
        list.reserve(slot.present.size());
        for (uint8_t present : slot.present) {
          list.push_back(present ? std::optional<at::Tensor>(fetch(slot.mutated)) : std::nullopt);
        }
        return list;
      }
      case ArgKind::kConstant: return slot.constant;
      case ArgKind::kParam: break;
    }
    LF_INTERNAL_ASSERT(false, "unexpected argument slot");
  }

  void collectOutputs(uint32_t position, const AtenCallAttrs& attrs, torch::jit::Stack& stack) {
    std::vector<at::Tensor> outputs = std::move(written_);
    for (size_t r = 0; r < attrs.returns.size(); ++r) {
      const ReturnSlot& ret = attrs.returns[r];
      if (ret.kind == ReturnKind::kTensor) outputs.push_back(stack[r].toTensor());
      if (ret.kind != ReturnKind::kTensorList) continue;
      for (const at::Tensor& t : stack[r].toTensorList()) outputs.push_back(t);
    }
    LF_INTERNAL_ASSERT(outputs.size() == attrs.outputs.size(), attrs.name, " produced ",
                       outputs.size(), " outputs, recorded ", attrs.outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      const TensorMeta& meta = attrs.outputs[i];
      LF_CHECK(outputs[i].scalar_type() == meta.dtype &&
                   outputs[i].sizes() == c10::IntArrayRef(meta.sizes),
               attrs.name, " returned ", outputs[i].scalar_type(), outputs[i].sizes(),
               " but its meta kernel promised ", meta.dtype, c10::IntArrayRef(meta.sizes));
      // A ZeroTensor (_efficientzerotensor, autograd's zero grads) has no memory a kernel can
      // read, and refuses in-place writes: a buffer holds real zeros.
      if (outputs[i]._is_zerotensor()) {
        outputs[i] = at::zeros_like(outputs[i], outputs[i].options());
      }
      outputs[i] = withLayout(outputs[i], meta);
    }
    values_[position] = std::move(outputs);
  }

  const Graph& graph_;
  std::vector<std::vector<at::Tensor>>& values_;
  c10::ArrayRef<NodeRef> inputs_;
  size_t next_input_ = 0;
  std::vector<at::Tensor> written_;
  std::vector<at::Tensor> sources_;  // what each of written_ copies
};

/// Whether `write` may write into `base`'s memory. Device data (a KV cache the program holds) is
/// written in place as a kernel's donated device data is (Note [Donated buffers]): only when
/// nothing but the plan holds it and the write cannot fail halfway; under a CUDA graph capture
/// only when the capture records it (DonationState::regions_taken), since each replay must check
/// the same again (backend/plan_replay.cpp).
bool writesInPlace(const RegionWrite& write, const at::Tensor& base, const at::Tensor& index,
                   const TensorMeta& meta, const Graph& graph, const PlanValues& values) {
  if (!write.may_donate || values.donation == nullptr) return false;
  if (graph.nodes()[write.base.position]->kind() != OpKind::kDeviceData) {
    // A value an earlier write put into device data's memory is that memory too.
    return writableInPlace(base, meta, *values.donation) &&
           (!values.donation->wroteInto(base) || writeCannotRaise(write, index));
  }
  return (currentCapture() == nullptr || values.donation->record_taken) && write.base.index == 0 &&
         dataWritableInPlace(write.base.position, meta, write.sharers, graph, values) &&
         writeCannotRaise(write, index);
}

/// See Note [Region writes] in lowering/region_writes.cpp.
void runRegionWrite(const RegionWrite& write, const Graph& graph, PlanValues& values) {
  const at::Tensor& base = values.nodes.at(write.base.position).at(write.base.index);
  LF_INTERNAL_ASSERT(base.defined(), "value %", write.base.position, " used after release");
  const TensorMeta& meta = graph.nodes()[write.value.position]->outputMeta(write.value.index);
  const at::Tensor index =
      write.index_copy ? values.nodes.at(write.index.position).at(write.index.index) : at::Tensor();
  at::Tensor out;
  bool into_data = false;
  if (writesInPlace(write, base, index, meta, graph, values)) {
    out = base;
    ++values.donation->donated;
    into_data = graph.nodes()[write.base.position]->kind() == OpKind::kDeviceData;
    if (into_data) {
      ++values.donation->donated_data;
      values.donation->written_data.push_back(base.unsafeGetTensorImpl());
      if (values.donation->record_taken) values.donation->regions_taken.push_back(&write);
    }
  }
  const bool copied = !out.defined();
  if (copied) {
    out = values.target != nullptr
              ? values.target->allocate(meta.sizes, meta.strides, meta.dtype, base.device())
              : at::empty_strided(meta.sizes, meta.strides, base.options());
    out.copy_(base);
  }
  const at::Tensor& source = values.nodes.at(write.source.position).at(write.source.index);
  // The offset of the graph being run: Note [Positions as plan arguments].
  at::Tensor region =
      out.as_strided(write.sizes, write.strides, out.storage_offset() + regionOffset(graph, write));
  auto run = [index_copy = write.index_copy, dim = write.dim](
                 const at::Tensor& region, const at::Tensor& index, const at::Tensor& source) {
    if (index_copy) {
      region.index_copy_(dim, index, source);
    } else {
      region.copy_(source);
    }
  };
  run(region, index, source);
  PlanCapture* capture = currentCapture();
  if (capture != nullptr && capture->recordsSteps()) {
    // Replay writes the same region of the same memory again (Note [CUDA graph replay]).
    capture->keep(out);
    auto held = [&](const at::Tensor& t) {
      return t.defined() ? StepRunner::replayable(*capture, t).toTensor() : t;
    };
    capture->addStep([run, copied, base = held(base), region = held(region), index = held(index),
                      source = held(source), out = held(out)] {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      if (copied) out.copy_(base);
      run(region, index, source);
    });
  }
  std::vector<at::Tensor>& slot = values.nodes.at(write.value.position);
  slot.resize(std::max<size_t>(slot.size(), write.value.index + 1));
  slot[write.value.index] = std::move(out);
  // No later step reads the old value (may_donate): its slot lets go, so that the tensor is held
  // by its node and the new value's slot alone, as writableInPlace expects of written_data.
  if (into_data) values.nodes.at(write.base.position).at(write.base.index) = at::Tensor();
}

/// See Note [Strided views of buffers].
void takeView(const StridedView& view, const Graph& graph,
              std::vector<std::vector<at::Tensor>>& values) {
  const at::Tensor& source = values.at(view.source.position).at(view.source.index);
  LF_INTERNAL_ASSERT(source.defined(), "view of value %", view.source.position, " after release");
  std::vector<at::Tensor>& outputs = values.at(view.value.position);
  outputs.resize(
      std::max<size_t>(outputs.size(), graph.nodes()[view.value.position]->numOutputs()));
  // The offset of the graph being run: Note [Positions as plan arguments].
  outputs[view.value.index] = source.as_strided(view.sizes, view.strides,
                                                source.storage_offset() + viewOffset(graph, view));
}

std::mutex& lastProfileMutex() {
  static std::mutex* mutex = new std::mutex();
  return *mutex;
}

PlanProfile& lastProfile() {
  static PlanProfile* profile = new PlanProfile();
  return *profile;
}

}  // namespace

bool refusesCpuScalars(const c10::OperatorHandle& op) {
  const std::string& name = op.operator_name().name;  // no overload: "aten::clamp"
  for (const char* clamp : {"aten::clamp", "aten::clamp_", "aten::clamp_min", "aten::clamp_min_",
                            "aten::clamp_max", "aten::clamp_max_"}) {
    if (name == clamp) return true;
  }
  return false;
}

void moveCpuScalars(torch::jit::Stack& stack) {
  std::optional<c10::Device> device;
  for (const c10::IValue& v : stack) {
    if (v.isTensor() && v.toTensor().defined() && !v.toTensor().is_cpu()) {
      device = v.toTensor().device();
      break;
    }
  }
  if (!device) return;
  for (c10::IValue& v : stack) {
    if (!v.isTensor() || !v.toTensor().defined() || !v.toTensor().is_cpu()) continue;
    const at::Tensor& t = v.toTensor();
    if (t.dim() == 0) v = at::full({}, t.item(), t.options().device(*device));
  }
}

bool writeCannotRaise(const RegionWrite& write, const at::Tensor& index) {
  if (!write.index_copy || index.is_cuda()) return true;
  if (!index.device().is_cpu() || index.scalar_type() != at::kLong) return false;
  const int64_t rank = static_cast<int64_t>(write.sizes.size());
  const int64_t size = rank == 0 ? 1 : write.sizes.at(c10::maybe_wrap_dim(write.dim, rank));
  const at::Tensor flat = index.contiguous();
  const int64_t* p = flat.const_data_ptr<int64_t>();
  return std::all_of(p, p + flat.numel(), [size](int64_t i) { return i >= 0 && i < size; });
}

PlanProfile lastPlanProfile() {
  std::lock_guard<std::mutex> lock(lastProfileMutex());
  return lastProfile();
}

at::Tensor withLayout(const at::Tensor& tensor, const TensorMeta& meta) {
  if (sameLayout(tensor, meta)) return tensor;
  auto result = at::empty_strided(meta.sizes, meta.strides, tensor.options());
  result.copy_(tensor);
  return result;
}

std::vector<at::Tensor> runPlan(const ExecutionPlan& plan, const Graph& graph,
                                const std::vector<CpuKernelFn>& kernels) {
  LF_INTERNAL_ASSERT(kernels.size() == plan.kernels.size(), "plan run without its kernels");
  return runPlan(plan, graph, [&](size_t index, const Graph& g, PlanValues& values) {
    runFusedKernel(plan.kernels[index], kernels[index], g, values);
  });
}

namespace {

/// Kernels whose launches are functions.
class LaunchedKernels final : public CompiledKernels {
 public:
  LaunchedKernels(const KernelLauncher& launch, const BatchLauncher& launch_batch)
      : launch_(launch), launch_batch_(launch_batch) {}
  /// The functions callers bring are CPU functions.
  const Target& target() const override { return *findTarget("cpu"); }
  void launch(const ExecutionPlan&, size_t index, const Graph& graph,
              PlanValues& values) const override {
    launch_(index, graph, values);
  }
  bool launchBatch(const ExecutionPlan&, size_t index, const Graph& graph,
                   PlanValues& values) const override {
    if (!launch_batch_) return false;
    launch_batch_(index, graph, values);
    return true;
  }

 private:
  const KernelLauncher& launch_;
  const BatchLauncher& launch_batch_;
};

}  // namespace

std::vector<at::Tensor> runPlan(const ExecutionPlan& plan, const Graph& graph,
                                const KernelLauncher& launch, const BatchLauncher& launch_batch,
                                DonationState* donation, const std::vector<at::Tensor>* data) {
  if (!launch) return runPlan(plan, graph, nullptr, donation, data);
  const LaunchedKernels kernels(launch, launch_batch);
  return runPlan(plan, graph, &kernels, donation, data);
}

std::vector<at::Tensor> runPlan(const ExecutionPlan& plan, const Graph& graph,
                                const CompiledKernels* kernels, DonationState* donation,
                                const std::vector<at::Tensor>* data) {
  LF_INTERNAL_ASSERT(plan.position_blind_hash == graph.positionBlindHash(),
                     "plan run on a graph of another hash");
  LF_INTERNAL_ASSERT(plan.kernels.empty() || kernels, "plan run without its kernels");
  // Real tensors need no autograd here: lazy autograd already recorded the backward ops.
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  PlanValues values;
  values.nodes.resize(graph.nodes().size());
  values.temps.resize(plan.num_temps);
  values.donation = donation;
  values.target = kernels != nullptr ? &kernels->target() : nullptr;
  for (uint32_t position : graph.dataPositions()) {
    const bool replaced = data && data->at(position).defined();
    values.nodes[position] = {replaced ? data->at(position) : graph.nodes()[position]->data()};
  }
  PlanCapture* capture = currentCapture();
  if (capture && !capture->recordsSteps()) capture = nullptr;  // a GPU keeps memory in its pool
  StepRunner runner(graph, values.nodes);
  std::vector<int64_t> step_ns(plan.steps.size(), 0);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const PlanStep& step = plan.steps[s];
    // See Note [Interrupting a sync]: not once the run has written into an input's memory.
    if (donation == nullptr || donation->donated_data == 0) pollInterrupt();
    const auto start = std::chrono::steady_clock::now();
    // See Note [Plan steps in the profiler].
    RECORD_USER_SCOPE(plan.step_labels ? plan.step_labels->at(s) : std::string("lazyfuse::step"));
    if (step.kind == StepKind::kFusedKernel) {
      kernels->launch(plan, static_cast<size_t>(step.kernel), graph, values);
    } else if (step.kind == StepKind::kKernelBatch) {
      if (!kernels->launchBatch(plan, static_cast<size_t>(step.batch), graph, values)) {
        for (int32_t k : plan.batches.at(step.batch).kernels) {
          kernels->launch(plan, static_cast<size_t>(k), graph, values);
        }
      }
    } else if (step.kind == StepKind::kStridedView) {
      takeView(plan.views.at(step.view), graph, values.nodes);
    } else if (step.kind == StepKind::kRegionWrite) {
      runRegionWrite(plan.region_writes.at(step.region), graph, values);
    } else {
      runner.run(step.position);
    }
    if (capture) {
      for (uint32_t dead : step.release_after) {
        for (const at::Tensor& t : values.nodes[dead]) capture->keep(t);
      }
      for (const at::Tensor& t : values.temps) capture->keep(t);
    }
    for (uint32_t dead : step.release_after) values.nodes[dead].clear();
    step_ns[s] = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count();
  }
  {
    std::lock_guard<std::mutex> lock(lastProfileMutex());
    lastProfile() = PlanProfile{plan.step_labels, std::move(step_ns)};
  }
  if (capture) {
    for (const std::vector<at::Tensor>& node : values.nodes) {
      for (const at::Tensor& t : node) capture->keep(t);
    }
  }
  std::vector<at::Tensor> outputs;
  outputs.reserve(graph.outputs().size());
  for (const NodeRef& out : graph.outputs()) {
    outputs.push_back(values.nodes[out.position].at(out.index));
  }
  return outputs;
}

}  // namespace lazyfuse
