#pragma once

#include "lowering/execution_plan.h"

namespace lazyfuse {

/// Lowers a graph into a plan by running the passes of lowering/pipeline.cpp in order: fused
/// kernels plus extern calls when `fuse`, else one extern call per ATen node; `batch` gathers
/// fused kernels into multi-tensor batches (Note [Kernel batches]), for targets that launch them.
/// `target` is where the fused kernels run: see Note [Ops left to ATen on a target].
/// `region_writes`: an unfused plan still runs region writes (Note [Region writes]) as one step.
ExecutionPlan lowerGraph(const Graph& graph, bool fuse = false, bool batch = false,
                         KernelTarget target = KernelTarget::kCpu, bool region_writes = false);

}  // namespace lazyfuse
