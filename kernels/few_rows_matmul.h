#pragma once
// Matrix products of a few rows on the CPU: see Note [Matrix products of few rows].

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace lazyfuse {

/// Runs the extern call `op` over `stack` (its arguments; its result left in their place, as
/// callBoxed does) with lazyfuse's own kernel when it is a float32 CPU matrix product of at most
/// kFewRows rows against a large enough matrix (aten::mm, matmul, linear, addmm); false, with
/// `stack` untouched, for anything else (ATen's kernel runs it then).
bool runFewRowsMatmul(const c10::OperatorHandle& op, torch::jit::Stack& stack);

}  // namespace lazyfuse
