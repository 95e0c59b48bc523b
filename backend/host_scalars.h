#pragma once

// Kernels of ours for ops whose eager kernels read a scalar argument on the host, where
// PyTorch's generic paths on lazy tensors (functionalization's Meta run, the meta kernels) refuse
// calls that eager runs: the foreach ops with scalars packed in a CPU tensor (Note [Packed
// scalars]) and masked_fill with a complex value for a real tensor (Note [Complex fill values]).

#include <torch/library.h>

namespace lazyfuse {

/// Registers them: out-of-place ops on `lazy_lib` (aten, Lazy), in-place ones on
/// `functionalize_lib` (aten, Functionalize), where they wrap the kernel registered there before.
void registerHostScalarKernels(torch::Library& lazy_lib, torch::Library& functionalize_lib);

}  // namespace lazyfuse
