// Lowerings of pointwise ATen ops: math, arithmetic, comparisons, selections and clamps. See
// Note [Loop graph]; activations are in lower_activations.cpp.

#include "lowering/lower_ops.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>

#include <cmath>
#include <unordered_map>

namespace lazyfuse {
namespace {

using c10::ScalarType;
using V = KValue;

ScalarType outType(LoweringCall& call) { return call.out().dtype; }
ScalarType opmath(LoweringCall& call) { return computeType(outType(call)); }

/// Unary math ops named as their kernel function; integer inputs of float results are cast.
bool lowerUnaryMath(LoweringCall& call, const std::string& fn) {
  const ScalarType t = opmath(call);
  call.outputs = {
      call.pointwise({"self"}, outType(call), [fn, t](KernelBuilder& ops, const std::vector<V>& v) {
        V x = ops.cast(v[0], t);
        const bool rounding = fn == "floor" || fn == "ceil" || fn == "round" || fn == "trunc";
        if (rounding && !c10::isFloatingType(t)) return x;  // eager returns integers unchanged
        if (fn == "bitwise_not" && t == ScalarType::Bool) return ops.unary("logical_not", x);
        return ops.unary(fn, x);
      })};
  return true;
}

/// Binary arithmetic in the output's compute type: fn(a, b) of the arguments named `a` and `b`.
bool lowerArith(LoweringCall& call, const std::string& fn, std::string_view a = "self",
                std::string_view b = "other") {
  const ScalarType t = opmath(call);
  call.outputs = {
      call.pointwise({a, b}, outType(call), [fn, t](KernelBuilder& ops, const std::vector<V>& v) {
        return ops.binary(fn, ops.cast(v[0], t), ops.cast(v[1], t));
      })};
  return true;
}

/// The kernel function of a division of `self` by `other`: eager's CUDA div multiplies by the
/// reciprocal of a Scalar divisor, its foreach ops divide (Note [CUDA prelude]).
const char* divisionFn(LoweringCall& call) {
  const bool foreach = call.attrs().name.rfind("aten::_foreach_", 0) == 0;
  return call.tensor("other") || foreach ? "div" : "div_by_scalar";
}

/// add/sub: self fn alpha * other; rsub: other fn alpha * self.
bool lowerAddSub(LoweringCall& call, const std::string& fn, bool reversed) {
  const ScalarType t = opmath(call);
  if (t == ScalarType::Bool && fn == "sub") return false;
  call.outputs = {call.pointwise(
      {"self", "other", "alpha"}, outType(call), [=](KernelBuilder& ops, const std::vector<V>& v) {
        V a = ops.cast(v[reversed ? 1 : 0], t);
        V b = ops.binary("mul", ops.cast(v[reversed ? 0 : 1], t), ops.cast(v[2], t));
        return ops.binary(fn, a, b);
      })};
  return true;
}

/// The type eager compares and combines two operands in (at::result_type).
ScalarType commonType(LoweringCall& call, std::string_view a, std::string_view b) {
  auto meta = [&](std::string_view arg) -> c10::IValue {
    if (auto id = call.tensor(arg)) {
      const LoopNode& n = call.loop(*id);
      return at::empty(n.sizes, at::TensorOptions().dtype(n.dtype).device(c10::kMeta));
    }
    return c10::IValue(call.scalarValue(arg));
  };
  c10::IValue x = meta(a), y = meta(b);
  if (x.isTensor() && y.isTensor()) return at::result_type(x.toTensor(), y.toTensor());
  if (x.isTensor()) return at::result_type(x.toTensor(), y.toScalar());
  if (y.isTensor()) return at::result_type(x.toScalar(), y.toTensor());
  return at::result_type(x.toScalar(), y.toScalar());
}

bool lowerCompare(LoweringCall& call, const std::string& fn) {
  const ScalarType t = computeType(commonType(call, "self", "other"));
  call.outputs = {call.pointwise({"self", "other"}, outType(call),
                                 [fn, t](KernelBuilder& ops, const std::vector<V>& v) {
                                   return ops.binary(fn, ops.cast(v[0], t), ops.cast(v[1], t));
                                 })};
  return true;
}

bool lowerWhere(LoweringCall& call) {
  const ScalarType t = opmath(call);
  call.outputs = {call.pointwise({"condition", "self", "other"}, outType(call),
                                 [t](KernelBuilder& ops, const std::vector<V>& v) {
                                   return ops.where(v[0], ops.cast(v[1], t), ops.cast(v[2], t));
                                 })};
  return true;
}

/// clamp(self, min, max), clamp_min(self, min), clamp_max(self, max), with either bound absent
/// (None); NaN propagates as in eager.
bool lowerClamp(LoweringCall& call) {
  const ScalarType t = opmath(call);
  std::vector<std::string_view> args = {"self"};
  const bool lo = call.has("min") && !call.isNone("min");
  const bool hi = call.has("max") && !call.isNone("max");
  if (lo) args.push_back("min");
  if (hi) args.push_back("max");
  call.outputs = {
      call.pointwise(args, outType(call), [=](KernelBuilder& ops, const std::vector<V>& v) {
        V x = ops.cast(v[0], t);
        size_t next = 1;
        if (lo) x = ops.binary("maximum", x, ops.cast(v[next++], t));
        if (hi) x = ops.binary("minimum", x, ops.cast(v[next], t));
        return x;
      })};
  return true;
}

bool lowerMaskedFill(LoweringCall& call) {
  const ScalarType t = opmath(call);
  call.outputs = {call.pointwise({"self", "mask", "value"}, outType(call),
                                 [t](KernelBuilder& o, const std::vector<V>& v) {
                                   return o.where(v[1], o.cast(v[2], t), o.cast(v[0], t));
                                 })};
  return true;
}

bool lowerIsNanInf(LoweringCall& call, const std::string& fn) {
  const ScalarType in = call.loop(*call.tensor("self")).dtype;
  call.outputs = {call.pointwise({"self"}, outType(call),
                                 [fn, in](KernelBuilder& ops, const std::vector<V>& v) {
                                   if (!c10::isFloatingType(in))
                                     return ops.constant(0, ScalarType::Bool);
                                   return ops.unary(fn, v[0]);
                                 })};
  return true;
}

/// div with a rounding mode: only "trunc", of a floating output.
bool lowerDivTrunc(LoweringCall& call) {
  const c10::IValue& mode = call.constant("rounding_mode");
  if (!mode.isString() || mode.toStringRef() != "trunc" || integralOut(call)) return false;
  const std::string div = divisionFn(call);
  return lowerFormula(call, {"self", "other"}, [div](KernelBuilder& o, const std::vector<V>& v) {
    return o.unary("trunc", o.binary(div, v[0], v[1]));
  });
}

bool lowerLerp(LoweringCall& call) {
  if (integralOut(call)) return false;
  return lowerFormula(
      call, {"self", "end", "weight"}, [](KernelBuilder& o, const std::vector<V>& v) {
        V diff = sub(o, v[1], v[0]);
        V low = add(o, v[0], mul(o, v[2], diff));
        V high = sub(o, v[1], mul(o, diff, sub(o, k(o, 1, v[2]), v[2])));
        return o.where(o.binary("lt", o.unary("abs", v[2]), k(o, 0.5, v[2])), low, high);
      });
}

/// addcmul/addcdiv: self + value * (tensor1 fn tensor2).
bool lowerAddc(LoweringCall& call, bool is_div) {
  if (integralOut(call)) return false;
  return lowerFormula(call, {"self", "tensor1", "tensor2", "value"},
                      [is_div](KernelBuilder& o, const std::vector<V>& v) {
                        V prod = is_div ? o.binary("div", v[1], v[2]) : mul(o, v[1], v[2]);
                        return add(o, v[0], mul(o, v[3], prod));
                      });
}

/// Registers `fn(call, name)` for the op `aten::<name>` (all its overloads) of each name.
void addEach(LoweringRegistry& r, std::initializer_list<const char*> names,
             bool (*fn)(LoweringCall&, const std::string&)) {
  for (const char* name : names) {
    r.add(OpClass::kPointwise, std::string("aten::") + name,
          [fn, op = std::string(name)](LoweringCall& call) { return fn(call, op); });
  }
}

}  // namespace

bool integralOut(LoweringCall& call) { return !c10::isFloatingType(outType(call)); }

bool lowerFormula(LoweringCall& call, const std::vector<std::string_view>& args, Formula formula) {
  const ScalarType t = opmath(call);
  call.outputs = {call.pointwise(args, outType(call),
                                 [t, formula](KernelBuilder& ops, const std::vector<V>& v) {
                                   std::vector<V> cast;
                                   for (V x : v) cast.push_back(ops.cast(x, t));
                                   return formula(ops, cast);
                                 })};
  return true;
}

void registerPointwiseLowerings(LoweringRegistry& r) {
  // Unary math ops, each named as its kernel function.
  addEach(r, {"abs",   "neg",   "exp",        "exp2",        "expm1",       "log",   "log2",
              "log10", "log1p", "sqrt",       "rsqrt",       "sin",         "cos",   "tan",
              "asin",  "acos",  "atan",       "sinh",        "cosh",        "tanh",  "asinh",
              "acosh", "atanh", "erf",        "erfc",        "sigmoid",     "floor", "ceil",
              "trunc", "sign",  "reciprocal", "bitwise_not", "logical_not", "lgamma"},
          lowerUnaryMath);
  r.add(OpClass::kPointwise, {"aten::round.default"},
        [](LoweringCall& c) { return lowerUnaryMath(c, "round"); });
  addEach(r, {"isnan", "isinf"}, lowerIsNanInf);
  r.add(OpClass::kPointwise, {"aten::add"},
        [](LoweringCall& c) { return lowerAddSub(c, "add", false); });
  r.add(OpClass::kPointwise, {"aten::sub"},
        [](LoweringCall& c) { return lowerAddSub(c, "sub", false); });
  r.add(OpClass::kPointwise, {"aten::rsub"},
        [](LoweringCall& c) { return lowerAddSub(c, "sub", true); });
  r.add(OpClass::kPointwise, {"aten::mul"}, [](LoweringCall& c) { return lowerArith(c, "mul"); });
  r.add(OpClass::kPointwise, {"aten::div.Tensor", "aten::div.Scalar"},
        [](LoweringCall& c) { return lowerArith(c, divisionFn(c)); });
  r.add(OpClass::kPointwise, {"aten::div.Tensor_mode", "aten::div.Scalar_mode"}, lowerDivTrunc);
  auto arith = [](LoweringCall& call, const std::string& fn) { return lowerArith(call, fn); };
  addEach(r,
          {"maximum", "minimum", "atan2", "copysign", "hypot", "bitwise_and", "bitwise_or",
           "bitwise_xor"},
          arith);
  // Integer powers and integer division have eager's own error and rounding rules.
  r.add(OpClass::kPointwise, {"aten::pow"}, [](LoweringCall& c) {
    return !integralOut(c) && lowerArith(c, "pow", "self", "exponent");
  });
  addEach(r, {"fmod", "remainder"}, [](LoweringCall& call, const std::string& fn) {
    return !integralOut(call) && lowerArith(call, fn);
  });
  addEach(r, {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"},
          lowerCompare);
  r.add(OpClass::kPointwise, {"aten::where.self"}, lowerWhere);
  r.add(OpClass::kPointwise, {"aten::clamp", "aten::clamp_min", "aten::clamp_max"}, lowerClamp);
  r.add(OpClass::kPointwise, {"aten::masked_fill"}, lowerMaskedFill);
  r.add(OpClass::kPointwise, {"aten::lerp.Scalar"}, lowerLerp);
  r.add(OpClass::kPointwise, {"aten::addcmul"},
        [](LoweringCall& c) { return lowerAddc(c, false); });
  r.add(OpClass::kPointwise, {"aten::addcdiv"}, [](LoweringCall& c) { return lowerAddc(c, true); });
}

}  // namespace lazyfuse
