#pragma once

// The lowerings, grouped by kind; each returns false when it cannot lower this call (it then
// runs as an ATen call). `op` is the operator name without "aten::", `overload` its overload.

#include "lowering/lowering_call.h"

#include <string>

namespace lazyfuse {

bool lowerPointwise(LoweringCall& call, const std::string& op, const std::string& overload);
bool lowerView(LoweringCall& call, const std::string& op, const std::string& overload);
bool lowerConstant(LoweringCall& call, const std::string& op, const std::string& overload);
bool lowerReduction(LoweringCall& call, const std::string& op, const std::string& overload);
bool lowerNormalization(LoweringCall& call, const std::string& op);
bool lowerForeach(LoweringCall& call, const std::string& op, const std::string& overload);

/// call.reduce, split in two steps where one would run on few threads (Note [Split full
/// reductions], Note [Split column reductions]).
LoopId reduceMaybeSplit(LoweringCall& call, LoopId input, const std::vector<int64_t>& dims,
                        bool keepdim, ReduceKind kind, c10::ScalarType acc, c10::ScalarType dtype,
                        ReduceFn pre, ReduceFn post);

}  // namespace lazyfuse
