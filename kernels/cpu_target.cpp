// The CPU target: C++ source compiled by the system compiler (Note [Targets]).
#include "kernels/buffer_pool.h"
#include "kernels/cpu_row_groups.h"
#include "kernels/target.h"

namespace lazyfuse {
namespace {

class CpuKernels final : public CompiledKernels {
 public:
  CpuKernels(const Target& target, std::shared_ptr<const CpuModule> module)
      : target_(target), module_(std::move(module)) {}
  const Target& target() const override { return target_; }
  void launch(const ExecutionPlan& plan, size_t index, const Graph& graph,
              PlanValues& values) const override {
    runCpuKernel(plan, index, module_->functions, graph, values);
  }

 private:
  const Target& target_;
  std::shared_ptr<const CpuModule> module_;
};

class CpuTarget final : public Target {
 public:
  const char* name() const override { return "cpu"; }
  TargetCapabilities capabilities() const override { return {}; }
  bool available(std::string* why) const override {
    if (cpuCompilerAvailable()) return true;
    if (why != nullptr) *why = "no C++ compiler found (set LAZYFUSE_CXX or CXX)";
    return false;
  }
  CompileOutcome compile(const ExecutionPlan& plan, c10::Device,
                         const SourceDump& dump) const override {
    const CpuProgram program = renderCppProgram(plan);
    if (dump) dump(".cpp", program.source);
    CpuCompileResult result = compileCppProgram(program);
    CompileOutcome outcome;
    outcome.disk_hit = result.disk_hit;
    outcome.error = result.error;
    if (result.module) outcome.kernels = std::make_shared<CpuKernels>(*this, result.module);
    return outcome;
  }
  at::Tensor allocate(c10::IntArrayRef sizes, c10::IntArrayRef strides, c10::ScalarType dtype,
                      c10::Device) const override {
    return pooledEmptyStrided(sizes, strides, dtype);  // Note [Buffer pool]
  }
};

}  // namespace

std::unique_ptr<Target> makeCpuTarget() { return std::make_unique<CpuTarget>(); }

}  // namespace lazyfuse
