// Lowerings of pointwise ATen ops: math, comparisons, activations and their backward ops,
// casts, copies and constants. See Note [Loop graph].

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

V k(KernelBuilder& ops, double value, V like) { return ops.constant(value, ops.dtypeOf(like)); }

/// Unary math ops named as their kernel function; integer inputs of float results are cast.
bool lowerUnaryMath(LoweringCall& call, const std::string& fn) {
  const ScalarType t = opmath(call);
  call.outputs = {call.pointwise({0}, outType(call), [fn, t](KernelBuilder& ops, const std::vector<V>& v) {
    V x = ops.cast(v[0], t);
    const bool rounding = fn == "floor" || fn == "ceil" || fn == "round" || fn == "trunc";
    if (rounding && !c10::isFloatingType(t)) return x;  // eager returns integers unchanged
    if (fn == "bitwise_not" && t == ScalarType::Bool) return ops.unary("logical_not", x);
    return ops.unary(fn, x);
  })};
  return true;
}

/// Binary arithmetic in the output's compute type: fn(a, b).
bool lowerArith(LoweringCall& call, const std::string& fn) {
  const ScalarType t = opmath(call);
  call.outputs = {call.pointwise({0, 1}, outType(call), [fn, t](KernelBuilder& ops, const std::vector<V>& v) {
    return ops.binary(fn, ops.cast(v[0], t), ops.cast(v[1], t));
  })};
  return true;
}

/// The kernel function of a division of argument 0 by argument 1: eager's CUDA div multiplies
/// by the reciprocal of a Scalar divisor, its foreach ops divide (Note [CUDA prelude]).
const char* divisionFn(LoweringCall& call) {
  const bool foreach = call.attrs().name.rfind("aten::_foreach_", 0) == 0;
  return call.tensor(1) || foreach ? "div" : "div_by_scalar";
}

/// add/sub: a fn alpha * b; rsub: b fn alpha * a.
bool lowerAddSub(LoweringCall& call, const std::string& fn, bool reversed) {
  const ScalarType t = opmath(call);
  if (t == ScalarType::Bool && fn == "sub") return false;
  call.outputs = {call.pointwise({0, 1, 2}, outType(call), [=](KernelBuilder& ops, const std::vector<V>& v) {
    V a = ops.cast(v[reversed ? 1 : 0], t);
    V b = ops.binary("mul", ops.cast(v[reversed ? 0 : 1], t), ops.cast(v[2], t));
    return ops.binary(fn, a, b);
  })};
  return true;
}

/// The type eager compares and combines two operands in (at::result_type).
ScalarType commonType(LoweringCall& call, size_t a, size_t b) {
  auto meta = [&](size_t arg) -> c10::IValue {
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
  const ScalarType t = computeType(commonType(call, 0, 1));
  call.outputs = {call.pointwise({0, 1}, outType(call), [fn, t](KernelBuilder& ops, const std::vector<V>& v) {
    return ops.binary(fn, ops.cast(v[0], t), ops.cast(v[1], t));
  })};
  return true;
}

bool integralOut(LoweringCall& call) { return !c10::isFloatingType(outType(call)); }

bool lowerWhere(LoweringCall& call) {
  const ScalarType t = opmath(call);
  call.outputs = {call.pointwise({0, 1, 2}, outType(call), [t](KernelBuilder& ops, const std::vector<V>& v) {
    return ops.where(v[0], ops.cast(v[1], t), ops.cast(v[2], t));
  })};
  return true;
}

/// clamp(x, lo, hi) with either bound absent (None); NaN propagates as in eager.
bool lowerClamp(LoweringCall& call, bool has_lo, bool has_hi) {
  const ScalarType t = opmath(call);
  std::vector<size_t> args = {0};
  const bool lo = has_lo && !call.isNone(1), hi = has_hi && !call.isNone(has_lo ? 2 : 1);
  if (lo) args.push_back(1);
  if (hi) args.push_back(has_lo ? 2 : 1);
  call.outputs = {call.pointwise(args, outType(call), [=](KernelBuilder& ops, const std::vector<V>& v) {
    V x = ops.cast(v[0], t);
    size_t next = 1;
    if (lo) x = ops.binary("maximum", x, ops.cast(v[next++], t));
    if (hi) x = ops.binary("minimum", x, ops.cast(v[next], t));
    return x;
  })};
  return true;
}

/// An activation or backward op written with the kernel functions, computed in the output's
/// compute type; `args` are its tensor and scalar arguments in schema order.
using Formula = std::function<V(KernelBuilder&, const std::vector<V>&)>;
bool lowerFormula(LoweringCall& call, std::vector<size_t> args, Formula formula) {
  const ScalarType t = opmath(call);
  call.outputs = {call.pointwise(args, outType(call), [t, formula](KernelBuilder& ops, const std::vector<V>& v) {
    std::vector<V> cast;
    for (V x : v) cast.push_back(ops.cast(x, t));
    return formula(ops, cast);
  })};
  return true;
}

V mul(KernelBuilder& o, V a, V b) { return o.binary("mul", a, b); }
V add(KernelBuilder& o, V a, V b) { return o.binary("add", a, b); }
V sub(KernelBuilder& o, V a, V b) { return o.binary("sub", a, b); }

V gelu(KernelBuilder& o, V x, bool tanh_approx) {
  if (!tanh_approx) {
    V cdf = mul(o, k(o, 0.5, x), add(o, k(o, 1, x), o.unary("erf", mul(o, x, k(o, M_SQRT1_2, x)))));
    return mul(o, x, cdf);
  }
  V inner = mul(o, k(o, M_SQRT2 * M_2_SQRTPI * 0.5, x),
                add(o, x, mul(o, k(o, 0.044715, x), mul(o, x, mul(o, x, x)))));
  return mul(o, mul(o, k(o, 0.5, x), x), add(o, k(o, 1, x), o.unary("tanh", inner)));
}

V geluBackward(KernelBuilder& o, V g, V x, bool tanh_approx) {
  if (!tanh_approx) {
    V cdf = mul(o, k(o, 0.5, x), add(o, k(o, 1, x), o.unary("erf", mul(o, x, k(o, M_SQRT1_2, x)))));
    V pdf = mul(o, o.unary("exp", mul(o, k(o, -0.5, x), mul(o, x, x))), k(o, M_2_SQRTPI * M_SQRT1_2 * 0.5, x));
    return mul(o, g, add(o, cdf, mul(o, x, pdf)));
  }
  const double beta = M_SQRT2 * M_2_SQRTPI * 0.5, kappa = 0.044715;
  V x_sq = mul(o, x, x);
  V inner = mul(o, k(o, beta, x), add(o, x, mul(o, k(o, kappa, x), mul(o, x_sq, x))));
  V th = o.unary("tanh", inner);
  V left = mul(o, k(o, 0.5, x), x);
  V right = add(o, k(o, 1, x), th);
  V left_d = mul(o, k(o, 0.5, x), right);
  V tanh_d = sub(o, k(o, 1, x), mul(o, th, th));
  V inner_d = mul(o, k(o, beta, x), add(o, k(o, 1, x), mul(o, k(o, 3 * kappa, x), x_sq)));
  return mul(o, g, add(o, left_d, mul(o, left, mul(o, tanh_d, inner_d))));
}

bool tanhApprox(LoweringCall& call, size_t arg) {
  return call.constant(arg).toStringRef() == "tanh";
}

bool lowerActivation(LoweringCall& call, const std::string& op) {
  if (integralOut(call)) return false;
  if (op == "gelu") {
    bool t = tanhApprox(call, 1);
    return lowerFormula(call, {0}, [t](KernelBuilder& o, const std::vector<V>& v) { return gelu(o, v[0], t); });
  }
  if (op == "gelu_backward") {
    bool t = tanhApprox(call, 2);
    return lowerFormula(call, {0, 1}, [t](KernelBuilder& o, const std::vector<V>& v) { return geluBackward(o, v[0], v[1], t); });
  }
  if (op == "silu") {
    return lowerFormula(call, {0}, [](KernelBuilder& o, const std::vector<V>& v) { return mul(o, v[0], o.unary("sigmoid", v[0])); });
  }
  if (op == "silu_backward") {
    return lowerFormula(call, {0, 1}, [](KernelBuilder& o, const std::vector<V>& v) {
      V s = o.unary("sigmoid", v[1]);
      return mul(o, mul(o, v[0], s), add(o, k(o, 1, s), mul(o, v[1], sub(o, k(o, 1, s), s))));
    });
  }
  if (op == "sigmoid_backward") {
    return lowerFormula(call, {0, 1}, [](KernelBuilder& o, const std::vector<V>& v) { return mul(o, v[0], mul(o, sub(o, k(o, 1, v[1]), v[1]), v[1])); });
  }
  if (op == "tanh_backward") {
    return lowerFormula(call, {0, 1}, [](KernelBuilder& o, const std::vector<V>& v) { return mul(o, v[0], sub(o, k(o, 1, v[1]), mul(o, v[1], v[1]))); });
  }
  if (op == "softplus") {
    return lowerFormula(call, {0, 1, 2}, [](KernelBuilder& o, const std::vector<V>& v) {
      V xb = mul(o, v[0], v[1]);
      V soft = o.binary("div", o.unary("log1p", o.unary("exp", xb)), v[1]);
      return o.where(o.binary("gt", xb, v[2]), v[0], soft);
    });
  }
  if (op == "softplus_backward") {
    return lowerFormula(call, {0, 1, 2, 3}, [](KernelBuilder& o, const std::vector<V>& v) {
      V xb = mul(o, v[1], v[2]);
      V z = o.unary("exp", xb);
      return o.where(o.binary("gt", xb, v[3]), v[0], o.binary("div", mul(o, v[0], z), add(o, z, k(o, 1, z))));
    });
  }
  if (op == "leaky_relu") {
    return lowerFormula(call, {0, 1}, [](KernelBuilder& o, const std::vector<V>& v) { return o.where(o.binary("gt", v[0], k(o, 0, v[0])), v[0], mul(o, v[0], v[1])); });
  }
  if (op == "leaky_relu_backward") {
    return lowerFormula(call, {0, 1, 2}, [](KernelBuilder& o, const std::vector<V>& v) { return o.where(o.binary("gt", v[1], k(o, 0, v[1])), v[0], mul(o, v[0], v[2])); });
  }
  if (op == "hardtanh") {
    return lowerFormula(call, {0, 1, 2}, [](KernelBuilder& o, const std::vector<V>& v) { return o.binary("minimum", o.binary("maximum", v[0], v[1]), v[2]); });
  }
  if (op == "hardtanh_backward") {
    return lowerFormula(call, {0, 1, 2, 3}, [](KernelBuilder& o, const std::vector<V>& v) {
      V out = o.binary("logical_or", o.binary("le", v[1], v[2]), o.binary("ge", v[1], v[3]));
      return o.where(out, k(o, 0, v[0]), v[0]);
    });
  }
  return false;
}

}  // namespace

bool lowerPointwise(LoweringCall& call, const std::string& op, const std::string& overload) {
  static const char* const kUnary[] = {
      "abs", "neg", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
      "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
      "atanh", "erf", "erfc", "sigmoid", "floor", "ceil", "trunc", "sign", "reciprocal",
      "bitwise_not", "logical_not", "lgamma"};
  for (const char* name : kUnary) {
    if (op == name) return lowerUnaryMath(call, op);
  }
  if (op == "round" && overload.empty()) return lowerUnaryMath(call, op);
  if (op == "isnan" || op == "isinf") {
    const ScalarType in = call.loop(*call.tensor(0)).dtype;
    call.outputs = {call.pointwise({0}, outType(call), [op, in](KernelBuilder& ops, const std::vector<V>& v) {
      if (!c10::isFloatingType(in)) return ops.constant(0, ScalarType::Bool);
      return ops.unary(op, v[0]);
    })};
    return true;
  }
  if (op == "relu") {
    return lowerFormula(call, {0}, [](KernelBuilder& o, const std::vector<V>& v) { return o.where(o.binary("lt", v[0], k(o, 0, v[0])), k(o, 0, v[0]), v[0]); });
  }
  if (op == "threshold" || op == "threshold_backward") {
    // threshold(x, t, value): x <= t ? value : x; threshold_backward(g, x, t): x <= t ? 0 : g.
    const bool fwd = op == "threshold";
    return lowerFormula(call, {0, 1, 2}, [fwd](KernelBuilder& o, const std::vector<V>& v) {
      if (fwd) return o.where(o.binary("le", v[0], v[1]), v[2], v[0]);
      return o.where(o.binary("le", v[1], v[2]), k(o, 0, v[0]), v[0]);
    });
  }
  if (op == "add" || op == "sub") return lowerAddSub(call, op, false);
  if (op == "rsub") return lowerAddSub(call, "sub", true);
  if (op == "mul") return lowerArith(call, "mul");
  if (op == "div" && (overload == "Tensor" || overload == "Scalar")) {
    return lowerArith(call, divisionFn(call));
  }
  if (op == "div" && call.constant(2).toStringRef() == "trunc" && !integralOut(call)) {
    const std::string div = divisionFn(call);
    return lowerFormula(call, {0, 1}, [div](KernelBuilder& o, const std::vector<V>& v) { return o.unary("trunc", o.binary(div, v[0], v[1])); });
  }
  if (op == "maximum" || op == "minimum" || op == "atan2" || op == "copysign" || op == "hypot") {
    return lowerArith(call, op);
  }
  if (op == "pow" || op == "fmod" || op == "remainder") {
    // Integer powers and integer division have eager's own error and rounding rules.
    return !integralOut(call) && lowerArith(call, op);
  }
  if (op == "eq" || op == "ne" || op == "lt" || op == "le" || op == "gt" || op == "ge" ||
      op == "logical_and" || op == "logical_or" || op == "logical_xor") {
    return lowerCompare(call, op);
  }
  if (op == "bitwise_and" || op == "bitwise_or" || op == "bitwise_xor") return lowerArith(call, op);
  if (op == "where" && overload == "self") return lowerWhere(call);
  if (op == "clamp") return lowerClamp(call, true, true);
  if (op == "clamp_min") return lowerClamp(call, true, false);
  if (op == "clamp_max") return lowerClamp(call, false, true);
  if (op == "masked_fill") {
    const ScalarType t = opmath(call);
    call.outputs = {call.pointwise({0, 1, 2}, outType(call), [t](KernelBuilder& o, const std::vector<V>& v) {
      return o.where(v[1], o.cast(v[2], t), o.cast(v[0], t));
    })};
    return true;
  }
  if (op == "lerp" && overload == "Scalar" && !integralOut(call)) {
    return lowerFormula(call, {0, 1, 2}, [](KernelBuilder& o, const std::vector<V>& v) {
      V diff = sub(o, v[1], v[0]);
      V low = add(o, v[0], mul(o, v[2], diff));
      V high = sub(o, v[1], mul(o, diff, sub(o, k(o, 1, v[2]), v[2])));
      return o.where(o.binary("lt", o.unary("abs", v[2]), k(o, 0.5, v[2])), low, high);
    });
  }
  if ((op == "addcmul" || op == "addcdiv") && !integralOut(call)) {
    const bool is_div = op == "addcdiv";
    return lowerFormula(call, {0, 1, 2, 3}, [is_div](KernelBuilder& o, const std::vector<V>& v) {
      V prod = is_div ? o.binary("div", v[1], v[2]) : mul(o, v[1], v[2]);
      return add(o, v[0], mul(o, v[3], prod));
    });
  }
  return lowerActivation(call, op);
}

}  // namespace lazyfuse
