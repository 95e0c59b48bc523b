#pragma once

// Note [Lazy-only kernels on Functionalize]
// Functionalize is one dispatch key for every device: PyTorch's functionalization kernels run
// there for CPU, CUDA, meta and fake tensors (torch.func.functionalize, make_fx, torch.compile's
// AOTAutograd), and for lazy tensors, which always sit under a FunctionalTensorWrapper (Note
// [Lazy data]). lazyfuse needs kernels of its own there (Note [Decomposing on Functionalize],
// Note [In-place result casts], Note [Functionalizing copy_ across devices], ...), and loading
// it must change nothing for other tensors. So every kernel lazyfuse puts on Functionalize is
// registered through implLazyOnFunctionalize: it runs only for a call with a lazy tensor (or the
// lazy device) among its arguments; any other call goes, untouched and with the same dispatch
// keys, to the kernel PyTorch computed for Functionalize before lazyfuse loaded (its generated
// kernel, a composite, or the Functionalize fallback). Pinned by test_containment.py, which runs
// CPU programs with and without lazyfuse loaded and compares what they compute and trace.

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

namespace lazyfuse {

/// Registers `kernel` as `op`'s Functionalize kernel for calls that involve a lazy tensor;
/// other calls keep PyTorch's. A kernel registered over one of ours replaces it for lazy calls
/// (and may call it: op.getComputedKernelForDispatchKey before registering gives it). See Note
/// [Lazy-only kernels on Functionalize].
void implLazyOnFunctionalize(torch::Library& functionalize_lib, const c10::OperatorHandle& op,
                             c10::KernelFunction kernel);

/// Whether implLazyOnFunctionalize registered a kernel of ours for `op`.
bool hasLazyFunctionalizeKernel(const c10::OperatorHandle& op);

/// The kernel PyTorch computed for `op` on Functionalize before lazyfuse registered the first of
/// its own (an op implLazyOnFunctionalize registered).
const c10::SafeKernelFunction& pytorchFunctionalizeKernel(const c10::OperatorHandle& op);

/// For a kernel on the Lazy key: when the call on `stack` has a functional tensor among its
/// arguments and comes from inside a __torch_dispatch__ (which excludes Functionalize), runs it
/// again through Functionalize and returns true; false, with the stack untouched, otherwise.
/// See Note [Lazy calls that skipped functionalization].
bool redispatchThroughFunctionalize(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace lazyfuse
