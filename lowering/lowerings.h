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

/// Whether the ATen op `name` (`aten::mm`) computes the same for an input of any strides and
/// storage offset (a strided view of a larger buffer) as for a fresh one: matmuls and
/// convolutions, which take transposed operands as they are. Ops that read storage or need
/// certain strides (as_strided_copy, view_copy.dtype, view_as_complex_copy) are not. See Note
/// [Strided views of buffers].
bool readsAnyLayout(const std::string& name);

/// Fills call.outputs (one loop node per node output) and returns true, or returns false when
/// the op runs as an ATen call.
bool lowerCall(LoweringCall& call);

}  // namespace lazyfuse
