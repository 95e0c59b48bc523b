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

/// The first index and the length of slice(start, end, step) of a dim of `size` (step > 0), with
/// start and end wrapped and clamped as eager does (None: the dim's start or end).
struct SliceBounds {
  int64_t start = 0;
  int64_t length = 0;
};
SliceBounds sliceBounds(int64_t size, const c10::IValue& start, const c10::IValue& end,
                        int64_t step);

/// The lengths split(split_size) cuts a dim of `size` into (split_size > 0); an empty dim gives
/// one empty piece, as in eager.
std::vector<int64_t> splitLengths(int64_t size, int64_t split_size);

/// The shape function of the op of this name ("aten::view_copy", "aten::select_copy.int"), or
/// nullptr.
ShapeFunction shapeFunctionOf(const std::string& op_name);

}  // namespace lazyfuse
