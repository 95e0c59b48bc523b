#include "lowering/execution_plan.h"

#include "lazy_ir/check.h"

#include <algorithm>

namespace lazyfuse {

c10::Scalar paramValue(const Graph& graph, const ParamBinding& binding) {
  const c10::IValue& v = graph.nodes().at(binding.position)->params().at(binding.index);
  if (binding.element >= 0) {
    LF_INTERNAL_ASSERT(v.isList() && static_cast<size_t>(binding.element) < v.toListRef().size(),
                       "parameter ", binding.index, " has no element ", binding.element);
    return v.toListRef()[binding.element].toScalar();
  }
  return v.isTensor() ? v.toTensor().item() : v.toScalar();
}

bool hasDonations(const ExecutionPlan& plan) {
  return std::any_of(plan.kernels.begin(), plan.kernels.end(),
                     [](const FusedKernel& k) { return !k.donations.empty(); }) ||
         std::any_of(plan.region_writes.begin(), plan.region_writes.end(),
                     [](const RegionWrite& w) { return w.may_donate; });
}

}  // namespace lazyfuse
