#pragma once

#include "lowering/execution_plan.h"

#include <string>

namespace lazyfuse {

/// One line per step: `0: kernel lf_kernel_0 over [4, 6], 0 reductions, reads %0, writes %3`
/// or `1: extern %7 = aten::mm`. Temporaries print as t<slot>. Deterministic.
std::string printPlan(const Graph& graph, const ExecutionPlan& plan);

}  // namespace lazyfuse
