// The CPU target: C++ source compiled by the system compiler (Note [Targets]).
#include "kernels/buffer_pool.h"
#include "kernels/cpu_kernel_families.h"
#include "kernels/cpu_row_groups.h"
#include "kernels/target.h"

namespace lazyfuse {
namespace {

class CpuKernels final : public CompiledKernels {
 public:
  CpuKernels(const Target& target, CpuPlanFunctions functions)
      : target_(target), functions_(std::move(functions)) {}
  const Target& target() const override { return target_; }
  void launch(const ExecutionPlan& plan, size_t index, const Graph& graph,
              PlanValues& values) const override {
    runCpuKernel(plan, index, functions_.functions, graph, values, &functions_.arguments);
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> packagedCode() const override {
    std::vector<std::pair<std::string, std::vector<std::string>>> code;
    for (PackagedCpuModule& module : packageCpuModules(functions_)) {
      code.emplace_back(*module.bytes, std::move(module.names));
    }
    return code;
  }

 private:
  const Target& target_;
  CpuPlanFunctions functions_;
};

class CpuTarget final : public Target {
 public:
  const char* name() const override { return "cpu"; }
  TargetCapabilities capabilities() const override { return {}; }
  bool available(std::string* why) const override {
    // A package's kernels run without a compiler (Note [Kernels in a package]).
    if (cpuCompilerAvailable() || hasPackagedCpuModules()) return true;
    if (why != nullptr) *why = "no C++ compiler found (set LAZYFUSE_CXX or CXX)";
    return false;
  }
  CompileOutcome compile(const ExecutionPlan& plan, c10::Device,
                         const SourceDump& dump) const override {
    // The dump shows the plan's kernels with their constants; what is compiled may take some
    // of them as arguments (Note [Shape-generic kernels]).
    if (dump) dump(".cpp", renderCppProgram(plan).source);
    CpuPlanFunctions functions = compileCpuFunctions(cpuFunctions(plan));
    CompileOutcome outcome;
    outcome.error = functions.error;
    if (!outcome.error.empty()) return outcome;
    outcome.compiled = functions.compiled;
    outcome.disk = functions.disk;
    outcome.reused = functions.reused;
    outcome.dynamic = functions.dynamic;
    outcome.generalized = functions.generalized;
    outcome.recompiles = functions.recompiles;
    outcome.disk_hit = functions.compiled == 0;
    outcome.kernels = std::make_shared<CpuKernels>(*this, std::move(functions));
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
