#pragma once

// What the kernel that checks in-place and out= ops (backend/write_checks.cpp) shares with the
// functionalization of those ops done here rather than by PyTorch
// (backend/functional_writes.cpp). See Note [In-place result casts].

#include "backend/op_traits.h"
#include "backend/write_checks.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/DispatchKeySet.h>

#include <utility>

namespace lazyfuse::detail {

/// This thread's pending write.
PendingWrite& pendingWrite();

/// Notes `write` as this thread's pending write for as long as it lives.
class PendingWriteGuard {
 public:
  explicit PendingWriteGuard(PendingWrite write)
      : saved_(std::exchange(pendingWrite(), std::move(write))) {}
  ~PendingWriteGuard() { pendingWrite() = std::move(saved_); }
  PendingWriteGuard(const PendingWriteGuard&) = delete;
  PendingWriteGuard& operator=(const PendingWriteGuard&) = delete;

 private:
  PendingWrite saved_;
};

/// The write of a call of `traits`' op with `args`; gives an out= reduction with no dtype the
/// out tensor's.
PendingWrite pendingWriteOf(const OpTraits& traits, torch::jit::Stack& args);

/// Kernel on Functionalize of an in-place or out= op that has one of PyTorch's: see Note
/// [In-place result casts].
void writeKernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack);

/// Notes, at load, the functional op that functionalizes `op` here, if it has one: see Note
/// [Functionalizing foreach writes] and Note [Functionalizing in-place writes].
void noteFunctionalWrite(const c10::OperatorHandle& op, const OpTraits& traits);

/// Functionalizes a call of `op` here when noteFunctionalWrite found its functional op and
/// every lazy tensor of `args` (which passed the checks) is functional: the call's `args` on
/// `stack` are replaced by its returns. `across_elements`: a written element of a foreach call
/// overlaps a tensor of another element. False when PyTorch's kernel is left to do it.
bool functionalizeWrite(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                        const OpTraits& traits, torch::jit::Stack& args, bool across_elements,
                        torch::jit::Stack* stack);

}  // namespace lazyfuse::detail
