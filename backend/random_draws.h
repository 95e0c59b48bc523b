#pragma once
// Random ops on lazy tensors draw their randomness when recorded. See Note [Random ops draw when
// recorded] in backend/random_draws.cpp.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <torch/library.h>

namespace lazyfuse {

/// The generator a random op's node keeps for its Generator? argument `given`: one of its own,
/// seeded by a draw from `given` or, when that is None, from the hardware device's default
/// generator. Each run of the node starts from a copy of it.
c10::IValue recordedGenerator(const c10::IValue& given);

/// Records the random factories and *_like ops that take no generator as their twin that does
/// (aten::rand as aten::rand.generator), so that they draw when recorded too.
void registerRandomTwinKernels(torch::Library& lazy_lib);

/// The Lazy kernel of native_dropout: a mask drawn by bernoulli, as its CPU kernel computes.
void nativeDropoutKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace lazyfuse
