// Lowerings of `_foreach_*` ops: each element of the tensor lists is the pointwise op the
// foreach op applies, lowered by lowerPointwise, so the partitioner can fuse a whole optimizer
// step per parameter (Note [Foreach lowering]).

#include "lowering/lower_ops.h"

#include <map>
#include <utility>

namespace lazyfuse {
namespace {

// Note [Foreach lowering]
// A `_foreach_<op>.<overload>` node of N tensors becomes N pointwise loop nodes, element i
// computed by the lowering of `<op>` on element i of every tensor list argument and of every
// Scalar[] argument (CallArgs' element mode); a single tensor or Scalar argument is shared by all
// elements. Only the overloads whose arguments line up with a pointwise op's are lowered; a
// trailing argument the foreach schema lacks (add.Scalar's alpha) is supplied as a constant. The
// `.Tensor` overloads (a tensor of per-element scalars) stay ATen calls.
struct ElementOp {
  std::string overload;            // of the pointwise op
  std::vector<c10::IValue> extra;  // its arguments past the foreach op's own
};

/// The pointwise op element i of `_foreach_<op>.<overload>` is, or nullopt.
std::optional<ElementOp> elementOp(const std::string& op, const std::string& overload) {
  const bool add_sub = op == "add" || op == "sub";
  if (overload.empty()) return ElementOp{"", {}};
  if (overload == "List") {
    if (add_sub || op == "mul" || op == "div") return ElementOp{"Tensor", {}};
    if (op == "pow") return ElementOp{"Tensor_Tensor", {}};
    return ElementOp{"", {}};  // maximum, minimum, clamp_min, clamp_max, copysign, ...
  }
  if (overload == "Scalar" || overload == "ScalarList") {
    if (add_sub) return ElementOp{"Scalar", {c10::IValue(c10::Scalar(int64_t{1}))}};
    if (op == "mul" || op == "div" || op == "lerp") return ElementOp{"Scalar", {}};
    if (op == "pow") return ElementOp{"Tensor_Scalar", {}};
    if (op == "addcmul" || op == "addcdiv" || op == "clamp_min" || op == "clamp_max") {
      return ElementOp{"", {}};
    }
  }
  return std::nullopt;
}

}  // namespace

bool lowerForeach(LoweringCall& call, const std::string& op, const std::string& overload) {
  static const std::string kPrefix = "_foreach_";
  if (op.rfind(kPrefix, 0) != 0) return false;
  const std::string base = op.substr(kPrefix.size());
  std::optional<ElementOp> element_op = elementOp(base, overload);
  if (!element_op) return false;
  const size_t n = call.attrs().outputs.size();
  std::vector<LoopId> outputs;
  for (size_t i = 0; i < n; ++i) {
    LoweringCall element = call.element(static_cast<int32_t>(i), element_op->extra);
    if (!lowerPointwise(element, base, element_op->overload) || element.outputs.size() != 1) {
      return false;
    }
    outputs.push_back(element.outputs[0]);
  }
  call.outputs = std::move(outputs);
  return n > 0;
}

}  // namespace lazyfuse
