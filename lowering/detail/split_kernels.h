#pragma once

// The split of kernels into independent parts (lowering/split_kernels.cpp) that batchKernels
// (lowering/batch_kernels.cpp) makes first. See Note [Splitting kernels for batches].

#include "lowering/execution_plan.h"

namespace lazyfuse::detail {

/// Splits the kernels of `plan` that Note [Splitting kernels for batches] splits, each into
/// consecutive steps, and puts the others in canonical form.
void splitKernels(ExecutionPlan& plan);

}  // namespace lazyfuse::detail
