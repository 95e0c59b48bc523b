// Lowerings of torch.optim's fused steps (Note [Fused optimizer steps] in
// backend/write_functionalization.cpp): element i of a `_fused_adam` or `_fused_adamw` node is
// the update of parameter i, in pointwise loop nodes that the partitioner fuses per parameter
// and batches across parameters of one shape (Note [Lowering fused Adam]).

#include "lazy_ir/check.h"
#include "lowering/lower_ops.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <utility>

namespace lazyfuse {
namespace {

using V = KValue;

// Note [Lowering fused Adam]
// ATen's CPU kernel of `_fused_adam_` computes, per element, in the parameter's type (scalars
// cast to it), with the step's bias corrections in double on the host:
//   grad = maximize ? -grad : grad
//   Adam:  grad += param * weight_decay           (only where weight_decay != 0)
//   AdamW: param *= 1 - lr * weight_decay
//   exp_avg = exp_avg * beta1 + grad * (1 - beta1)
//   exp_avg_sq = exp_avg_sq * beta2 + grad * grad * (1 - beta2)
//   amsgrad: max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq), read below instead of exp_avg_sq
//   denom = sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps
//   param = param - (lr / (1 - beta1^step)) * exp_avg / denom
// The element lowering computes the same, each value a pointwise node over the parameter (the
// kernel builder merges what they share); the step is the state's 0-dim step tensor, read in
// the kernel, and its bias corrections are computed there in double (they do not vary along the
// loop, so the loop computes them once). lr, betas, eps and weight_decay are parameters of the
// plan (Note [Fused optimizer steps]). Float32 and float64 only (ATen rounds 16-bit values after
// every operation); with grad_scale, found_inf or a tensor lr the node stays an ATen call.

/// The values one element of a fused Adam step writes.
struct AdamValues {
  V param, exp_avg, exp_avg_sq, max_exp_avg_sq;
};

/// The arguments the element formula reads, in this order.
const std::vector<std::string_view> kAdamArgs = {"self",         "grads", "exp_avgs", "exp_avg_sqs",
                                                 "state_steps",  "lr",    "beta1",    "beta2",
                                                 "weight_decay", "eps"};

AdamValues adamValues(KernelBuilder& o, const std::vector<V>& v, bool adamw, bool maximize,
                      std::optional<V> max_exp_avg_sq) {
  const c10::ScalarType t = o.dtypeOf(v[0]);
  const c10::ScalarType d = c10::ScalarType::Double;
  auto as = [&](V x) { return o.cast(x, t); };
  V param = v[0];
  V grad = v[1];
  const V step = o.cast(v[4], d);
  const V lr = o.cast(v[5], d), beta1 = o.cast(v[6], d), beta2 = o.cast(v[7], d);
  const V weight_decay = o.cast(v[8], d), eps = o.cast(v[9], d);
  const V one = o.constant(1.0, d);
  if (maximize) grad = o.unary("neg", grad);
  const V decays = o.binary("ne", weight_decay, o.constant(0.0, d));
  if (adamw) {
    param = o.where(decays, mul(o, param, as(sub(o, one, mul(o, lr, weight_decay)))), param);
  } else {
    grad = o.where(decays, add(o, grad, mul(o, param, as(weight_decay))), grad);
  }
  AdamValues out;
  out.exp_avg = add(o, mul(o, v[2], as(beta1)), mul(o, grad, as(sub(o, one, beta1))));
  out.exp_avg_sq =
      add(o, mul(o, v[3], as(beta2)), mul(o, mul(o, grad, grad), as(sub(o, one, beta2))));
  V second = out.exp_avg_sq;
  if (max_exp_avg_sq) {
    out.max_exp_avg_sq = o.binary("maximum", *max_exp_avg_sq, out.exp_avg_sq);
    second = out.max_exp_avg_sq;
  }
  const V bias1 = sub(o, one, o.binary("pow", beta1, step));
  const V bias2_sqrt = o.unary("sqrt", sub(o, one, o.binary("pow", beta2, step)));
  const V denom = add(o, o.binary("div", o.unary("sqrt", second), as(bias2_sqrt)), as(eps));
  const V step_size = as(o.binary("div", lr, bias1));
  out.param = sub(o, param, o.binary("div", mul(o, step_size, out.exp_avg), denom));
  return out;
}

/// The length of tensor list argument `name` of `call`'s node.
size_t listLength(LoweringCall& call, std::string_view name) {
  return call.attrs().args.at(call.index(name)).present.size();
}

/// Whether every output of `call`'s node is float32 or float64.
bool floatingOutputs(LoweringCall& call) {
  for (const TensorMeta& out : call.attrs().outputs) {
    if (out.dtype != c10::ScalarType::Float && out.dtype != c10::ScalarType::Double) return false;
  }
  return true;
}

/// Sets `call.outputs` to `lists`, one after the other: the node's outputs, list by list.
void setOutputLists(LoweringCall& call, const std::vector<std::vector<LoopId>>& lists) {
  call.outputs.clear();
  for (const std::vector<LoopId>& list : lists) {
    call.outputs.insert(call.outputs.end(), list.begin(), list.end());
  }
}

/// The gradients a fused step returns: unchanged without grad_scale, and not written back then
/// (Note [Fused optimizer steps]): a copy nothing reads, never computed.
LoopId copyOf(LoweringCall& each, std::string_view name, c10::ScalarType dtype,
              const std::vector<int64_t>& sizes) {
  return each.pointwise(
      {name}, dtype, [](KernelBuilder&, const std::vector<V>& v) { return v[0]; }, sizes);
}

/// The lowering of a `_fused_adam` (`adamw`: `_fused_adamw`) node.
bool lowerFusedAdam(LoweringCall& call, bool adamw) {
  if (!call.isNone("grad_scale") || !call.isNone("found_inf")) return false;
  const bool amsgrad = call.constant("amsgrad").toBool();
  const bool maximize = call.constant("maximize").toBool();
  const AtenCallAttrs& attrs = call.attrs();
  if (!floatingOutputs(call)) return false;
  const size_t lists = amsgrad ? 5 : 4;
  const size_t count = listLength(call, "self");
  LF_INTERNAL_ASSERT(attrs.outputs.size() == count * lists, attrs.name, ": ", attrs.outputs.size(),
                     " outputs for ", count, " parameters");
  auto op = c10::Dispatcher::singleton().findSchema(
      {adamw ? "aten::_fused_adamw" : "aten::_fused_adam", ""});
  LF_INTERNAL_ASSERT(op, "no schema of ", attrs.name);
  std::vector<std::vector<LoopId>> outputs(lists);
  for (size_t i = 0; i < count; ++i) {
    LoweringCall each = call.element(static_cast<int32_t>(i), {}, op->schema());
    const LoopNode& self = each.loop(*each.tensor("self"));
    const std::vector<int64_t> sizes = self.sizes;
    const c10::ScalarType dtype = self.dtype;
    std::vector<std::string_view> args = kAdamArgs;
    if (amsgrad) args.push_back("max_exp_avg_sqs");
    auto value = [&](V AdamValues::*member) {
      return each.pointwise(
          args, dtype,
          [adamw, maximize, amsgrad, member](KernelBuilder& o, const std::vector<V>& v) {
            std::optional<V> max;
            if (amsgrad) max = v.back();
            return adamValues(o, v, adamw, maximize, max).*member;
          },
          sizes);
    };
    outputs[0].push_back(value(&AdamValues::param));
    outputs[1].push_back(copyOf(each, "grads", dtype, sizes));
    outputs[2].push_back(value(&AdamValues::exp_avg));
    outputs[3].push_back(value(&AdamValues::exp_avg_sq));
    if (amsgrad) outputs[4].push_back(value(&AdamValues::max_exp_avg_sq));
  }
  setOutputLists(call, outputs);
  return count > 0;
}

// Note [Lowering fused SGD]
// ATen's CPU kernel of `_fused_sgd_`, per element in the parameter's type:
//   grad = maximize ? -grad : grad
//   grad += param * weight_decay                   (only where weight_decay != 0)
//   with momentum (a momentum buffer list):
//     buf = is_first_step ? grad : buf * momentum + grad * (1 - dampening)
//     grad = nesterov ? grad + buf * momentum : buf
//   param = param + grad * -lr
// torch.optim passes the buffer list empty without momentum, and new, unwritten buffers on the
// first step (is_first_step), which the lowering then does not read.

/// The values one element of a fused SGD step writes.
struct SgdValues {
  V param, momentum_buffer;
};

const std::vector<std::string_view> kSgdArgs = {"self",     "grads", "weight_decay",
                                                "momentum", "lr",    "dampening"};

SgdValues sgdValues(KernelBuilder& o, const std::vector<V>& v, bool maximize, bool nesterov,
                    bool has_momentum, bool first, std::optional<V> buffer) {
  const c10::ScalarType t = o.dtypeOf(v[0]);
  const c10::ScalarType d = c10::ScalarType::Double;
  auto as = [&](V x) { return o.cast(x, t); };
  const V param = v[0];
  V grad = v[1];
  const V weight_decay = o.cast(v[2], d), momentum = o.cast(v[3], d);
  const V lr = o.cast(v[4], d), dampening = o.cast(v[5], d);
  if (maximize) grad = o.unary("neg", grad);
  const V decays = o.binary("ne", weight_decay, o.constant(0.0, d));
  grad = o.where(decays, add(o, grad, mul(o, param, as(weight_decay))), grad);
  SgdValues out;
  if (has_momentum) {
    out.momentum_buffer = first ? grad
                                : add(o, mul(o, *buffer, as(momentum)),
                                      mul(o, grad, as(sub(o, o.constant(1.0, d), dampening))));
    grad = nesterov ? add(o, grad, mul(o, out.momentum_buffer, as(momentum))) : out.momentum_buffer;
  }
  out.param = add(o, param, mul(o, grad, as(o.unary("neg", lr))));
  return out;
}

/// The lowering of a `_fused_sgd` node.
bool lowerFusedSgd(LoweringCall& call) {
  if (!call.isNone("grad_scale") || !call.isNone("found_inf") || !floatingOutputs(call)) {
    return false;
  }
  const bool maximize = call.constant("maximize").toBool();
  const bool nesterov = call.constant("nesterov").toBool();
  const bool first = call.constant("is_first_step").toBool();
  const size_t count = listLength(call, "self");
  const bool has_momentum = listLength(call, "momentum_buffer_list") > 0;
  LF_INTERNAL_ASSERT(call.attrs().outputs.size() == count * (has_momentum ? 3 : 2),
                     call.attrs().name, ": ", call.attrs().outputs.size(), " outputs for ", count,
                     " parameters");
  auto op = c10::Dispatcher::singleton().findSchema({"aten::_fused_sgd", ""});
  LF_INTERNAL_ASSERT(op, "no schema of ", call.attrs().name);
  std::vector<std::vector<LoopId>> outputs(3);
  for (size_t i = 0; i < count; ++i) {
    LoweringCall each = call.element(static_cast<int32_t>(i), {}, op->schema());
    const LoopNode& self = each.loop(*each.tensor("self"));
    const std::vector<int64_t> sizes = self.sizes;
    const c10::ScalarType dtype = self.dtype;
    std::vector<std::string_view> args = kSgdArgs;
    const bool reads_buffer = has_momentum && !first;
    if (reads_buffer) args.push_back("momentum_buffer_list");
    auto value = [&](V SgdValues::*member) {
      return each.pointwise(
          args, dtype,
          [=](KernelBuilder& o, const std::vector<V>& v) {
            std::optional<V> buffer;
            if (reads_buffer) buffer = v.back();
            return sgdValues(o, v, maximize, nesterov, has_momentum, first, buffer).*member;
          },
          sizes);
    };
    outputs[0].push_back(value(&SgdValues::param));
    outputs[1].push_back(copyOf(each, "grads", dtype, sizes));
    if (has_momentum) outputs[2].push_back(value(&SgdValues::momentum_buffer));
  }
  setOutputLists(call, outputs);
  return count > 0;
}

}  // namespace

bool isFusedOptimizerOp(std::string_view name) {
  name = name.substr(0, name.find('.'));
  if (!name.empty() && name.back() == '_') name.remove_suffix(1);
  return name == "aten::_fused_adam" || name == "aten::_fused_adamw" ||
         name == "aten::_fused_sgd" || name == "aten::_fused_adagrad";
}

void registerOptimizerLowerings(LoweringRegistry& r) {
  r.add(OpClass::kPointwise, {"aten::_fused_adam.default"},
        [](LoweringCall& call) { return lowerFusedAdam(call, false); });
  r.add(OpClass::kPointwise, {"aten::_fused_adamw.default"},
        [](LoweringCall& call) { return lowerFusedAdam(call, true); });
  r.add(OpClass::kPointwise, {"aten::_fused_sgd.default"}, lowerFusedSgd);
}

}  // namespace lazyfuse
