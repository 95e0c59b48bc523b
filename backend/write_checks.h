#pragma once

// Eager's checks of in-place and out= ops, made on lazy tensors where functionalization turns
// those ops into functional ones. See Note [In-place result casts].

#include "backend/op_traits.h"
#include "lazy_ir/node.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <optional>
#include <string>

namespace lazyfuse {

/// An in-place or out= op on lazy tensors whose functional op is about to be recorded.
struct PendingWrite {
  const std::string* functional_name = nullptr;  // null: no write pending
  c10::SmallVector<at::Tensor, 2> written;       // in argument order, tensor lists flattened
};

/// The pending write that `traits`' op is recorded in place of, taken; nullopt for any other op.
std::optional<PendingWrite> takePendingWrite(const OpTraits& traits);

/// Refuses the op recorded in place of a write when one of its results cannot be cast to the
/// tensor it is written into.
void checkWrittenCasts(const PendingWrite& write, const AtenCallAttrs& attrs);

/// The results of the op recorded in place of a write report the geometry of the tensors they
/// are written into, as eager's in-place and out= ops leave it. See Note [View geometry].
void keepWrittenGeometry(const PendingWrite& write, const torch::jit::Stack& stack,
                         size_t num_results);

/// Registers a kernel on `functionalize_lib` (aten, Functionalize) for `op` when it writes an
/// argument (an in-place or out= op, or running stats) and has a functionalization kernel: one
/// that checks the call as eager would before handing it to that kernel. Returns whether it
/// registered one.
bool registerWriteKernel(const c10::OperatorHandle& op, torch::Library& functionalize_lib);

}  // namespace lazyfuse
