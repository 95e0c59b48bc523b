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

}  // namespace lazyfuse
