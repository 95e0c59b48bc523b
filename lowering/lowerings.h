#pragma once

// Which ATen ops lazyfuse compiles itself, and how. See Note [Loop graph].

#include "lowering/lowering_call.h"

#include <string>

namespace lazyfuse {

enum class OpClass : uint8_t { kPointwise, kReduction, kView, kScatter, kExtern, kRandom };

struct OpName {
  std::string op;        // "add"
  std::string overload;  // "Tensor", or empty
};
OpName splitOpName(const std::string& name);

/// The class of a recorded op by its name. Random ops and ops outside aten always run as ATen
/// calls; so does any op whose lowering declines its arguments.
OpClass classifyOp(const std::string& name);
const char* opClassName(OpClass kind);

/// Fills call.outputs (one loop node per node output) and returns true, or returns false when
/// the op runs as an ATen call.
bool lowerCall(LoweringCall& call);

}  // namespace lazyfuse
