// Lowerings of `_foreach_*` ops: each element of the tensor lists is the pointwise op the
// foreach op applies, lowered by that op's lowering, so the partitioner can fuse a whole
// optimizer step per parameter (Note [Foreach lowering]).

#include "lazy_ir/check.h"
#include "lowering/lower_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <utility>

namespace lazyfuse {
namespace {

// Note [Foreach lowering]
// A `_foreach_<op>.<overload>` node of N tensors becomes N pointwise loop nodes, element i
// computed by the lowering of the pointwise op the foreach overload applies (its element op) on
// element i of every tensor list argument and of every Scalar[] argument (CallArgs' element
// mode); a single tensor or Scalar argument is shared by all elements. Only the overloads whose
// arguments line up with their element op's, position by position, are registered (the table
// below); a trailing argument the foreach schema lacks (add.Scalar's alpha) is supplied as a
// constant. The lowering reads the arguments by the element op's names (Note [Arguments by
// name]): `_foreach_add.Scalar`'s `scalar` is add.Scalar's `other`. The `.Tensor` overloads (a
// tensor of per-element scalars) stay ATen calls.

/// The element op of a foreach overload, and whether it takes add/sub's alpha as an extra.
struct ForeachOp {
  const char* foreach;
  const char* element;
  bool alpha = false;
};

/// The lowering of `_foreach_*` node `call` as `element`, with `extra` arguments.
bool lowerForeach(LoweringCall& call, const std::string& element,
                  const std::vector<c10::IValue>& extra) {
  const Lowering* lowering = loweringRegistry().find(element);
  const OpName n = splitOpName(element);
  auto op = c10::Dispatcher::singleton().findSchema({"aten::" + n.op, n.overload});
  LF_INTERNAL_ASSERT(lowering && op, call.attrs().name, ": no lowering of its element op ",
                     element);
  const size_t count = call.attrs().outputs.size();
  std::vector<LoopId> outputs;
  for (size_t i = 0; i < count; ++i) {
    LoweringCall each = call.element(static_cast<int32_t>(i), extra, op->schema());
    if (!lowering->fn(each) || each.outputs.size() != 1) return false;
    outputs.push_back(each.outputs[0]);
  }
  call.outputs = std::move(outputs);
  return count > 0;
}

}  // namespace

void registerForeachLowerings(LoweringRegistry& r) {
  // The overloads of the binary, pointwise and clamp foreach ops, and their element ops.
  static const ForeachOp kBinary[] = {{"add.List", "add.Tensor"},
                                      {"add.Scalar", "add.Scalar", true},
                                      {"add.ScalarList", "add.Scalar", true},
                                      {"sub.List", "sub.Tensor"},
                                      {"sub.Scalar", "sub.Scalar", true},
                                      {"sub.ScalarList", "sub.Scalar", true},
                                      {"mul.List", "mul.Tensor"},
                                      {"mul.Scalar", "mul.Scalar"},
                                      {"mul.ScalarList", "mul.Scalar"},
                                      {"div.List", "div.Tensor"},
                                      {"div.Scalar", "div.Scalar"},
                                      {"div.ScalarList", "div.Scalar"},
                                      {"pow.List", "pow.Tensor_Tensor"},
                                      {"pow.Scalar", "pow.Tensor_Scalar"},
                                      {"pow.ScalarList", "pow.Tensor_Scalar"},
                                      {"lerp.Scalar", "lerp.Scalar"},
                                      {"lerp.ScalarList", "lerp.Scalar"},
                                      {"addcmul.Scalar", "addcmul"},
                                      {"addcmul.ScalarList", "addcmul"},
                                      {"addcdiv.Scalar", "addcdiv"},
                                      {"addcdiv.ScalarList", "addcdiv"},
                                      {"clamp_min.List", "clamp_min"},
                                      {"clamp_min.Scalar", "clamp_min"},
                                      {"clamp_min.ScalarList", "clamp_min"},
                                      {"clamp_max.List", "clamp_max"},
                                      {"clamp_max.Scalar", "clamp_max"},
                                      {"clamp_max.ScalarList", "clamp_max"},
                                      {"maximum.List", "maximum"},
                                      {"minimum.List", "minimum"}};
  // The unary foreach ops (one overload each), whose element op is the op of the same name.
  static const char* const kUnary[] = {
      "abs",   "acos",    "asin",   "atan", "ceil",  "cos",   "cosh", "erf",  "erfc",       "exp",
      "expm1", "floor",   "lgamma", "log",  "log10", "log1p", "log2", "neg",  "reciprocal", "round",
      "rsqrt", "sigmoid", "sign",   "sin",  "sinh",  "sqrt",  "tan",  "tanh", "trunc"};
  auto add = [&r](const std::string& foreach, const std::string& element, bool alpha) {
    std::vector<c10::IValue> extra;
    if (alpha) extra.emplace_back(c10::Scalar(int64_t{1}));
    r.add(OpClass::kPointwise, "aten::_foreach_" + foreach,
          [element = "aten::" + element, extra](LoweringCall& call) {
            return lowerForeach(call, element, extra);
          });
  };
  for (const ForeachOp& op : kBinary) add(op.foreach, op.element, op.alpha);
  for (const char* op : kUnary) add(std::string(op) + ".default", op, false);
}

}  // namespace lazyfuse
