#pragma once

#include "lowering/execution_plan.h"

namespace lazyfuse {

/// Lowers a graph into a plan by running the passes of lowering/pipeline.cpp in order: fused
/// kernels plus extern calls when `fuse`, else one extern call per ATen node; `batch` gathers
/// fused kernels into multi-tensor batches (Note [Kernel batches]), for targets that launch them.
/// `target` is where the fused kernels run: see Note [Ops left to ATen on a target].
ExecutionPlan lowerGraph(const Graph& graph, bool fuse = false, bool batch = false,
                         KernelTarget target = KernelTarget::kCpu);

}  // namespace lazyfuse
