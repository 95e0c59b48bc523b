#pragma once

// The lowering families: each registers its lowerings by op (Note [Lowering registry]); a
// lowering returns false when it cannot lower a call (it then runs as an ATen call).

#include "lowering/lowerings.h"

#include <string_view>
#include <vector>

namespace lazyfuse {

void registerPointwiseLowerings(LoweringRegistry& registry);      // lower_pointwise.cpp
void registerActivationLowerings(LoweringRegistry& registry);     // lower_activations.cpp
void registerViewLowerings(LoweringRegistry& registry);           // lower_views.cpp
void registerConversionLowerings(LoweringRegistry& registry);     // lower_views.cpp
void registerConstantLowerings(LoweringRegistry& registry);       // lower_constants.cpp
void registerReductionLowerings(LoweringRegistry& registry);      // lower_reductions.cpp
void registerNormalizationLowerings(LoweringRegistry& registry);  // lower_normalization.cpp
void registerForeachLowerings(LoweringRegistry& registry);        // lower_foreach.cpp
void registerOptimizerLowerings(LoweringRegistry& registry);      // lower_optimizers.cpp

/// call.reduce, split in two steps where one would run on few threads (Note [Split full
/// reductions], Note [Split column reductions]).
LoopId reduceMaybeSplit(LoweringCall& call, LoopId input, const std::vector<int64_t>& dims,
                        bool keepdim, ReduceKind kind, c10::ScalarType acc, c10::ScalarType dtype,
                        ReduceFn pre, ReduceFn post);

/// Whether the output is an integer or bool tensor.
bool integralOut(LoweringCall& call);

/// A pointwise op written with the kernel functions, computed in the output's compute type: the
/// arguments named `args` (tensors and Scalars) cast to it.
using Formula = std::function<KValue(KernelBuilder&, const std::vector<KValue>&)>;
bool lowerFormula(LoweringCall& call, const std::vector<std::string_view>& args, Formula formula);

/// Shorthands for formulas: a constant of `like`'s type, and the arithmetic kernel functions.
inline KValue k(KernelBuilder& ops, double value, KValue like) {
  return ops.constant(value, ops.dtypeOf(like));
}
inline KValue mul(KernelBuilder& o, KValue a, KValue b) { return o.binary("mul", a, b); }
inline KValue add(KernelBuilder& o, KValue a, KValue b) { return o.binary("add", a, b); }
inline KValue sub(KernelBuilder& o, KValue a, KValue b) { return o.binary("sub", a, b); }

}  // namespace lazyfuse
