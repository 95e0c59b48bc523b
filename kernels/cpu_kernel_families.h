#pragma once

// The CPU target's kernel families: each function a plan needs is run by a function compiled
// before when one of its family fits, else compiled, specialized or generic. See Note
// [Shape-generic kernels] in kernels/kernel_constants.h.

#include "kernels/cpu_codegen.h"
#include "kernels/cpu_compiler.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lazyfuse {

/// The functions of one plan, ready to run.
struct CpuPlanFunctions {
  /// Per plan kernel: its function, null for the epilogue of a row group (which the function of
  /// the kernel before it runs).
  std::vector<CpuKernelFn> functions;
  /// Per plan kernel: the constants its function takes as arguments, passed after its own
  /// parameters in `iparams`.
  std::vector<std::vector<int64_t>> arguments;
  std::vector<std::shared_ptr<const CpuModule>> modules;  // keep `functions` loaded
  std::vector<std::string> names;  // per plan kernel: the name of its function ("" for epilogues)
  int64_t compiled = 0, disk = 0, reused = 0, dynamic = 0, generalized = 0;  // plan kernels
  std::vector<std::string> recompiles;  // why each generic function was compiled
  std::string error;                    // the compiler's output when compiling failed
};

/// `functions` (as cpuFunctions gives them for a plan) ready to run; `error` set on failure.
CpuPlanFunctions compileCpuFunctions(const std::vector<CpuFunction>& functions);

/// A shared object an ahead-of-time package holds, and the kernel functions in it that its plan
/// runs. See Note [Kernels in a package].
struct PackagedCpuModule {
  std::shared_ptr<const std::string> bytes;
  std::vector<std::string> names;
};

/// The shared objects that hold `functions` (as a plan's CpuPlanFunctions lists them), each once.
std::vector<PackagedCpuModule> packageCpuModules(const CpuPlanFunctions& functions);
/// Makes the functions of `modules` available to every later plan of this process that needs a
/// function of one of their names: loaded from their bytes, not compiled.
void addPackagedCpuModules(const std::vector<PackagedCpuModule>& modules);
/// True once a package added modules: the CPU target then runs without a compiler.
bool hasPackagedCpuModules();

}  // namespace lazyfuse
