// Lowerings of ops that make a tensor from nothing but Scalars and sizes: empty, zeros, ones,
// full and fill (a constant or a Scalar everywhere) and arange. See Note [Loop graph].

#include "lowering/lower_ops.h"

#include <optional>

namespace lazyfuse {
namespace {

using c10::ScalarType;

/// Every element `value`, or the Scalar (or 0-d tensor) argument `arg` when there is one.
LoweringFn fill(std::optional<std::string_view> arg, double value) {
  return [arg, value](LoweringCall& call) {
    const ScalarType dtype = call.out().dtype;
    std::vector<std::string_view> args;
    if (arg) args.push_back(*arg);
    call.outputs = {call.pointwise(
        args, dtype,
        [value, dtype](KernelBuilder& o, const std::vector<KValue>& v) {
          return v.empty() ? o.constant(value, dtype) : v.back();
        },
        call.out().sizes)};
    return true;
  };
}

/// arange(end), arange(start, end) and arange(start, end, step): start + i * step.
bool lowerArange(LoweringCall& call) {
  const ScalarType dtype = call.out().dtype;
  const ScalarType t = c10::isFloatingType(dtype) ? ScalarType::Double : ScalarType::Long;
  std::optional<ArgIndex> start, step;
  if (call.has("start")) start = call.index("start");
  if (call.has("step")) step = call.index("step");
  LoopNode node;
  node.kind = LoopNode::kCompute;
  node.dtype = dtype;
  node.sizes = call.out().sizes;
  node.compute = [call_args = call.args(), start, step, t, dtype](LoopContext& c,
                                                                  const std::vector<IxPtr>& index) {
    KernelBuilder& o = c.ops();
    KValue first = start ? call_args->scalar(c, *start, t) : o.constant(0, t);
    KValue stride = step ? call_args->scalar(c, *step, t) : o.constant(1, t);
    KValue i = o.cast(o.index(index.at(0)), t);
    return o.cast(o.binary("add", first, o.binary("mul", i, stride)), dtype);
  };
  call.outputs = {call.loops().add(std::move(node))};
  return true;
}

}  // namespace

void registerConstantLowerings(LoweringRegistry& r) {
  // Uninitialized memory may hold anything; zeros are as good a value as any.
  r.add(OpClass::kPointwise,
        {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
         "aten::new_empty_strided", "aten::zeros", "aten::zeros_like", "aten::new_zeros"},
        fill(std::nullopt, 0));
  r.add(OpClass::kPointwise, {"aten::ones", "aten::ones_like", "aten::new_ones"},
        fill(std::nullopt, 1));
  r.add(OpClass::kPointwise, {"aten::fill"}, fill("value", 0));
  r.add(OpClass::kPointwise, {"aten::full", "aten::full_like", "aten::new_full"},
        fill("fill_value", 0));
  r.add(OpClass::kPointwise, {"aten::scalar_tensor"}, fill("s", 0));
  r.add(OpClass::kPointwise,
        {"aten::arange.default", "aten::arange.start", "aten::arange.start_step"}, lowerArange);
}

}  // namespace lazyfuse
