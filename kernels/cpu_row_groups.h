#pragma once

// The CPU target's program for a plan: which of its kernels run together as a row group (Note
// [CPU row groups]), the C++ source of its functions, and the run of one plan kernel.

#include "kernels/cpu_codegen.h"
#include "kernels/cpu_compiler.h"
#include "kernels/fused_runner.h"
#include "lowering/execution_plan.h"

#include <string>
#include <vector>

namespace lazyfuse {

/// The functions that run `plan`'s kernels on the CPU, in plan order: a kernel alone, or a row
/// group of a kernel and the kernel after it. Deterministic: the same plan, the same functions.
std::vector<CpuFunction> cpuFunctions(const ExecutionPlan& plan);

struct CpuProgram {
  std::string source;
  std::vector<std::string> names;  // per plan kernel: its function, "" when a row group runs it
};

/// The source of cpuFunctions(plan), and which function runs each kernel.
CpuProgram renderCppProgram(const ExecutionPlan& plan);

/// compileCpp of the program; the module's `functions` has one entry per plan kernel, null for a
/// kernel the row group of the kernel before it runs.
CpuCompileResult compileCppProgram(const CpuProgram& program);

/// Runs plan kernel `index` with `functions` (as compileCppProgram resolves them): alone, with
/// the kernel after it when they are a row group, or not at all when its group ran it.
/// `arguments`, when given, has one entry per plan kernel: the constants its function takes as
/// arguments (Note [Shape-generic kernels]).
void runCpuKernel(const ExecutionPlan& plan, size_t index,
                  const std::vector<CpuKernelFn>& functions, const Graph& graph, PlanValues& values,
                  const std::vector<std::vector<int64_t>>* arguments = nullptr);

}  // namespace lazyfuse
