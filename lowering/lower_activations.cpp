// Lowerings of activations and their backward ops (relu, threshold, gelu, silu, softplus,
// leaky_relu, hardtanh, sigmoid and tanh backward) as formulas of the kernel functions. See
// Note [Loop graph].

#include "lowering/lower_ops.h"

#include <cmath>

namespace lazyfuse {
namespace {

using V = KValue;
using Args = const std::vector<V>&;

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
    V pdf = mul(o, o.unary("exp", mul(o, k(o, -0.5, x), mul(o, x, x))),
                k(o, M_2_SQRTPI * M_SQRT1_2 * 0.5, x));
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

bool tanhApprox(LoweringCall& call) { return call.constant("approximate").toStringRef() == "tanh"; }

/// A floating-output activation: `formula` of the arguments named `args`.
LoweringFn activation(std::vector<std::string_view> args, Formula formula) {
  return [args, formula](LoweringCall& call) {
    return !integralOut(call) && lowerFormula(call, args, formula);
  };
}

bool lowerGelu(LoweringCall& call) {
  if (integralOut(call)) return false;
  const bool t = tanhApprox(call);
  return lowerFormula(call, {"self"}, [t](KernelBuilder& o, Args v) { return gelu(o, v[0], t); });
}

bool lowerGeluBackward(LoweringCall& call) {
  if (integralOut(call)) return false;
  const bool t = tanhApprox(call);
  return lowerFormula(call, {"grad_output", "self"},
                      [t](KernelBuilder& o, Args v) { return geluBackward(o, v[0], v[1], t); });
}

}  // namespace

void registerActivationLowerings(LoweringRegistry& r) {
  constexpr OpClass kPointwise = OpClass::kPointwise;
  r.add(kPointwise, {"aten::relu"}, [](LoweringCall& call) {
    return lowerFormula(call, {"self"}, [](KernelBuilder& o, Args v) {
      return o.where(o.binary("lt", v[0], k(o, 0, v[0])), k(o, 0, v[0]), v[0]);
    });
  });
  // threshold(x, t, value): x <= t ? value : x; threshold_backward(g, x, t): x <= t ? 0 : g.
  r.add(kPointwise, {"aten::threshold"}, [](LoweringCall& call) {
    return lowerFormula(call, {"self", "threshold", "value"}, [](KernelBuilder& o, Args v) {
      return o.where(o.binary("le", v[0], v[1]), v[2], v[0]);
    });
  });
  r.add(kPointwise, {"aten::threshold_backward"}, [](LoweringCall& call) {
    return lowerFormula(call, {"grad_output", "self", "threshold"}, [](KernelBuilder& o, Args v) {
      return o.where(o.binary("le", v[1], v[2]), k(o, 0, v[0]), v[0]);
    });
  });
  r.add(kPointwise, {"aten::gelu"}, lowerGelu);
  r.add(kPointwise, {"aten::gelu_backward"}, lowerGeluBackward);
  r.add(kPointwise, {"aten::silu"}, activation({"self"}, [](KernelBuilder& o, Args v) {
          return mul(o, v[0], o.unary("sigmoid", v[0]));
        }));
  r.add(kPointwise, {"aten::silu_backward"},
        activation({"grad_output", "self"}, [](KernelBuilder& o, Args v) {
          V s = o.unary("sigmoid", v[1]);
          return mul(o, mul(o, v[0], s), add(o, k(o, 1, s), mul(o, v[1], sub(o, k(o, 1, s), s))));
        }));
  r.add(kPointwise, {"aten::sigmoid_backward"},
        activation({"grad_output", "output"}, [](KernelBuilder& o, Args v) {
          return mul(o, v[0], mul(o, sub(o, k(o, 1, v[1]), v[1]), v[1]));
        }));
  r.add(kPointwise, {"aten::tanh_backward"},
        activation({"grad_output", "output"}, [](KernelBuilder& o, Args v) {
          return mul(o, v[0], sub(o, k(o, 1, v[1]), mul(o, v[1], v[1])));
        }));
  r.add(kPointwise, {"aten::softplus"},
        activation({"self", "beta", "threshold"}, [](KernelBuilder& o, Args v) {
          V xb = mul(o, v[0], v[1]);
          V soft = o.binary("div", o.unary("log1p", o.unary("exp", xb)), v[1]);
          return o.where(o.binary("gt", xb, v[2]), v[0], soft);
        }));
  r.add(kPointwise, {"aten::softplus_backward"},
        activation({"grad_output", "self", "beta", "threshold"}, [](KernelBuilder& o, Args v) {
          V xb = mul(o, v[1], v[2]);
          V z = o.unary("exp", xb);
          return o.where(o.binary("gt", xb, v[3]), v[0],
                         o.binary("div", mul(o, v[0], z), add(o, z, k(o, 1, z))));
        }));
  r.add(kPointwise, {"aten::leaky_relu"},
        activation({"self", "negative_slope"}, [](KernelBuilder& o, Args v) {
          return o.where(o.binary("gt", v[0], k(o, 0, v[0])), v[0], mul(o, v[0], v[1]));
        }));
  r.add(kPointwise, {"aten::leaky_relu_backward"},
        activation({"grad_output", "self", "negative_slope"}, [](KernelBuilder& o, Args v) {
          return o.where(o.binary("gt", v[1], k(o, 0, v[1])), v[0], mul(o, v[0], v[2]));
        }));
  r.add(kPointwise, {"aten::hardtanh"},
        activation({"self", "min_val", "max_val"}, [](KernelBuilder& o, Args v) {
          return o.binary("minimum", o.binary("maximum", v[0], v[1]), v[2]);
        }));
  r.add(kPointwise, {"aten::hardtanh_backward"},
        activation({"grad_output", "self", "min_val", "max_val"}, [](KernelBuilder& o, Args v) {
          V out = o.binary("logical_or", o.binary("le", v[1], v[2]), o.binary("ge", v[1], v[3]));
          return o.where(out, k(o, 0, v[0]), v[0]);
        }));
}

}  // namespace lazyfuse
