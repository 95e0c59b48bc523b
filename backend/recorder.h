#pragma once

#include "backend/op_traits.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string_view>

namespace lazyfuse {

struct AtenCallAttrs;

/// The boxed kernel on the Lazy key: records any ATen op as a node of the trace, inferring its
/// outputs on Meta (cached), or runs it eagerly when its result depends on data.
void recordOp(const c10::OperatorHandle& op, torch::jit::Stack* stack);

/// Runs `op` eagerly on the hardware device with the stack's lazy tensors materialized, and
/// leaves lazy results on the stack. Counts aten::<op>. See Note [Data-dependent ops].
void eagerFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

/// Runs `op` on the hardware device with `args`, each lazy tensor replaced by ones of its dtype
/// and sizes (every size cut to at most 1 when `one_per_dim`), so that the device's kernel raises
/// the error eager would raise; returns whether it ran (not when the stand-ins would be too
/// large, or the op is random). See Note [Eager's errors].
bool raiseEagerErrorOnStandIns(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                               bool one_per_dim);

/// raiseEagerErrorOnStandIns on one-element stand-ins for a call on integer tensors with Scalar
/// arguments, once per op, input metadata (`key`) and Scalar values. See Note [Eager's errors].
void checkScalarValuesOnStandIns(const c10::OperatorHandle& op, const OpTraits& traits,
                                 HashValue key, const torch::jit::Stack& args);

/// Lazy kernel of native_batch_norm: records it, and updates the running stats when it trains.
/// See Note [native_batch_norm writes its running stats].
void nativeBatchNormKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

/// Number of distinct (op, input metadata) entries inferred on Meta.
size_t metaCacheSize();

/// Raises NotImplementedError when the call takes or makes a quantized tensor: a quantized tensor
/// argument, a quantized dtype argument, or (`attrs`, when given) a quantized output.
void refuseQuantizedCall(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                         const AtenCallAttrs* attrs);

/// Raises NotImplementedError when `dtype` is quantized: quantized tensors have no lazy form.
/// `what` names the call ("aten::quantize_per_tensor").
void refuseQuantizedDtype(c10::ScalarType dtype, std::string_view what);

}  // namespace lazyfuse
