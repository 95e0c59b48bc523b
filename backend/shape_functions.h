#pragma once

// Output sizes of ops whose outputs follow from size arguments: see Note [Shape functions] in
// shape_functions.cpp.

#include <ATen/core/stack.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lazyfuse {

using ShapeList = std::vector<std::vector<int64_t>>;

/// The sizes of a call's tensor outputs, in order (undefined outputs left out), computed from the
/// sizes of its tensor arguments and its other arguments; nullopt where the arguments are outside
/// what the function handles, and always where eager would refuse the call.
using ShapeFunction = std::optional<ShapeList> (*)(const torch::jit::Stack& args);

/// The shape function of the op of this name ("aten::view_copy", "aten::select_copy.int"), or
/// nullptr.
ShapeFunction shapeFunctionOf(const std::string& op_name);

}  // namespace lazyfuse
