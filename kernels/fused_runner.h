#pragma once

// Runs one fused-kernel step of a plan on the CPU: allocates its outputs as the plan laid them
// out, gathers buffer addresses and parameters, and splits its points across torch's threads.

#include "kernels/cpu_compiler.h"
#include "lowering/execution_plan.h"

#include <ATen/core/Tensor.h>

#include <vector>

namespace lazyfuse {

/// Graph values by node position and output index, and the plan's temporaries.
struct PlanValues {
  std::vector<std::vector<at::Tensor>> nodes;
  std::vector<at::Tensor> temps;
};

void runFusedKernel(const FusedKernel& fused, CpuKernelFn fn, const Graph& graph,
                    PlanValues& values);

/// Runs a row group's function `fn` (Note [CPU row groups]): the buffers and then the parameters
/// of `stats` and of `epilogue`, one after the other, the rows split across torch's threads.
void runFusedRowGroup(const FusedKernel& stats, const FusedKernel& epilogue, CpuKernelFn fn,
                      const Graph& graph, PlanValues& values);

}  // namespace lazyfuse
