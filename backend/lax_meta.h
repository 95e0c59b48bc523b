#pragma once

// Eager's errors for the ops whose meta kernels miss checks their CPU kernels make.
// See Note [Lax meta kernels].

#include "backend/op_traits.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace lazyfuse {

/// Whether the op's meta kernel misses checks its CPU kernel makes (Note [Lax meta kernels]).
bool isLaxMeta(const c10::OperatorHandle& op);

/// For an op of the lax list (or its in-place or out= variant), runs the call on the CPU on
/// stand-ins of the lazy tensors' sizes when they are small, so that it raises eager's error;
/// nothing for any other op. Callers run it once per call metadata (on a cache miss).
void checkLaxMetaOnCpu(const c10::OperatorHandle& op, const OpTraits& traits,
                       const torch::jit::Stack& args);

}  // namespace lazyfuse
