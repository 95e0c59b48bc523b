#include "lowering/kernel_emitter.h"

#include "lazy_ir/check.h"
#include "lowering/passes.h"

#include <map>
#include <tuple>
#include <unordered_map>

namespace lazyfuse {
namespace {

std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * std::max<int64_t>(sizes[d + 1], 1);
  }
  return strides;
}

class EmitContext final : public LoopContext {
 public:
  EmitContext(const Graph& graph, const Partition& p, int32_t gid, std::vector<int32_t>& temp_of,
              int32_t& num_temps, FusedKernel& out)
      : graph_(graph),
        p_(p),
        gid_(gid),
        temp_of_(temp_of),
        num_temps_(num_temps),
        out_(out),
        builder_(p.groups[gid].domain),
        identity_(builder_.identityIndex()) {}

  KernelBuilder& ops() override { return builder_; }

  KValue at(LoopId id, const std::vector<IxPtr>& index) override {
    if (p_.realized[id]) {
      if (p_.group_of[id] == gid_) {
        LF_INTERNAL_ASSERT(isIdentity(index), "kernel member read at another index");
        return member_value_.at(id);
      }
      return builder_.load(bufferFor(id, /*output=*/false), ixOffset(index, meta(id).strides));
    }
    LoopValueKey key{id, builder_.scope(), index};
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    // Memoized per scope: a value made inside one reduction's loop is not visible elsewhere.
    KValue v = p_.loops[id].compute(*this, index);
    memo_.emplace(key, v);
    return v;
  }

  KValue param(int32_t position, int32_t k, c10::ScalarType dtype, int32_t element) override {
    auto key = std::make_tuple(position, k, element);
    auto it = param_of_.find(key);
    const bool floating = c10::isFloatingType(dtype);
    if (it == param_of_.end()) {
      it = param_of_.emplace(key, builder_.addParam(floating)).first;
      out_.params.push_back(ParamBinding{static_cast<uint32_t>(position), static_cast<uint32_t>(k),
                                         floating, element});
    }
    return builder_.param(it->second, floating ? c10::ScalarType::Double : c10::ScalarType::Long);
  }

  void emitMember(LoopId id) {
    KValue v = p_.loops[id].compute(*this, identity_);
    member_value_[id] = v;
    builder_.store(v, bufferFor(id, /*output=*/true), ixOffset(identity_, meta(id).strides));
  }

  Kernel finish(std::string name) { return std::move(builder_).finish(std::move(name)); }

 private:
  bool isIdentity(const std::vector<IxPtr>& index) const { return ixSame(index, identity_); }

  TensorMeta meta(LoopId id) const {
    const LoopNode& node = p_.loops[id];
    if (p_.ref_of[id]) {
      const NodeRef ref = *p_.ref_of[id];
      return graph_.nodes()[ref.position]->outputMeta(ref.index);
    }
    TensorMeta m;
    m.dtype = node.dtype;
    m.sizes = node.sizes;
    m.strides = contiguousStrides(node.sizes);
    return m;
  }

  int32_t bufferFor(LoopId id, bool output) {
    auto it = buffer_of_.find(id);
    if (it != buffer_of_.end()) return it->second;
    BufferBinding binding;
    binding.meta = meta(id);
    if (p_.ref_of[id]) {
      binding.value = *p_.ref_of[id];
    } else {
      binding.temp = true;
      if (temp_of_[id] < 0) temp_of_[id] = num_temps_++;
      binding.slot = temp_of_[id];
    }
    out_.buffers.push_back(binding);
    int32_t slot = builder_.addBuffer(binding.meta.dtype, output);
    buffer_of_.emplace(id, slot);
    return slot;
  }

  const Graph& graph_;
  const Partition& p_;
  int32_t gid_;
  std::vector<int32_t>& temp_of_;
  int32_t& num_temps_;
  FusedKernel& out_;
  KernelBuilder builder_;
  const std::vector<IxPtr> identity_;  // the domain's own index: v0, v1, ...
  std::unordered_map<LoopId, int32_t> buffer_of_;
  std::map<std::tuple<int32_t, int32_t, int32_t>, int32_t> param_of_;
  std::unordered_map<LoopId, KValue> member_value_;
  LoopValueMemo memo_;
};

}  // namespace

void emitKernels(const Graph& graph, const Partition& p, ExecutionPlan& plan) {
  std::vector<int32_t> temp_of(p.loops.nodes.size(), -1);
  int32_t num_temps = 0;
  for (const Partition::Step& s : p.steps) {
    PlanStep step;
    if (s.view >= 0) {
      step.kind = StepKind::kStridedView;
      step.view = static_cast<int32_t>(plan.views.size());
      plan.views.push_back(p.views.at(s.view));
      plan.steps.push_back(std::move(step));
      continue;
    }
    if (s.group < 0 && p.region_of.at(s.position) >= 0) {
      step.kind = StepKind::kRegionWrite;
      step.region = static_cast<int32_t>(plan.region_writes.size());
      plan.region_writes.push_back(p.region_writes.at(p.region_of[s.position]));
      plan.steps.push_back(std::move(step));
      continue;
    }
    if (s.group < 0) {
      step.kind = StepKind::kExternCall;
      step.position = s.position;
      plan.steps.push_back(std::move(step));
      continue;
    }
    FusedKernel fused;
    EmitContext context(graph, p, s.group, temp_of, num_temps, fused);
    for (LoopId id : p.groups[s.group].members) context.emitMember(id);
    fused.kernel = context.finish("lf_kernel_" + std::to_string(plan.kernels.size()));
    coalesceDomain(fused.kernel);
    fused.grain = threadGrain(fused.kernel);
    step.kind = StepKind::kFusedKernel;
    step.kernel = static_cast<int32_t>(plan.kernels.size());
    plan.kernels.push_back(std::move(fused));
    plan.steps.push_back(std::move(step));
  }
  plan.num_temps = num_temps;
}

}  // namespace lazyfuse
