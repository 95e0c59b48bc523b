// The registry of targets and the defaults of the Target interface. See Note [Targets].
#include "kernels/target.h"

#include "kernels/cuda_graph.h"
#include "lazy_ir/check.h"

#include <ATen/ops/empty_strided.h>

#include <cstring>
#include <mutex>

namespace lazyfuse {

std::unique_ptr<Target> makeCpuTarget();   // kernels/cpu_target.cpp
std::unique_ptr<Target> makeCudaTarget();  // kernels/cuda_target.cpp

namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<Target>> targets;
};

/// The registry, holding the CPU and CUDA targets from the start (named here rather than
/// registered by their files, which a static link would otherwise drop).
Registry& registry() {
  static Registry* instance = [] {
    auto* r = new Registry();  // never destroyed: plans hold targets until exit
    r->targets.push_back(makeCpuTarget());
    r->targets.push_back(makeCudaTarget());
    return r;
  }();
  return *instance;
}

}  // namespace

bool CompiledKernels::launchBatch(const ExecutionPlan&, size_t, const Graph&, PlanValues&) const {
  return false;
}

at::Tensor Target::allocate(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                            c10::Device device) const {
  return at::empty_strided(sizes, strides, at::TensorOptions().dtype(dtype).device(device));
}

void Target::synchronize(c10::Device) const {}

std::unique_ptr<PlanCapture> Target::newCapture() const {
  return std::make_unique<PlanCapture>(/*records_steps=*/false);
}

std::unique_ptr<ReplayGraph> Target::beginReplay(PlanCapture&, c10::Device) const {
  LF_INTERNAL_ASSERT(false, "target ", name(), " has no graph replay");
  return nullptr;
}

bool registerTarget(std::unique_ptr<Target> target) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const std::unique_ptr<Target>& t : r.targets) {
    LF_INTERNAL_ASSERT(std::strcmp(t->name(), target->name()) != 0, "two targets named ",
                       target->name());
  }
  r.targets.push_back(std::move(target));
  return true;
}

const Target* findTarget(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const std::unique_ptr<Target>& t : r.targets) {
    if (name == t->name()) return t.get();
  }
  return nullptr;
}

std::vector<std::string> targetNames() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const std::unique_ptr<Target>& t : r.targets) names.emplace_back(t->name());
  return names;
}

}  // namespace lazyfuse
