#include "lowering/lowerings.h"

#include "lowering/lower_ops.h"

#include <unordered_set>

namespace lazyfuse {
namespace {

bool startsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const std::unordered_set<std::string>& names(OpClass kind) {
  static const std::unordered_set<std::string> kReduction = {
      "sum", "mean", "amax", "amin", "prod", "var", "std", "argmax", "argmin", "_softmax",
      "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data",
      "native_layer_norm", "native_layer_norm_backward"};
  static const std::unordered_set<std::string> kRandom = {
      "bernoulli", "rand", "randn", "rand_like", "randn_like", "randint", "randint_like",
      "randperm", "normal", "uniform", "native_dropout", "multinomial", "exponential",
      "geometric", "cauchy", "log_normal", "random", "poisson", "_standard_gamma"};
  static const std::unordered_set<std::string> kView = {
      "view_copy", "_unsafe_view", "_reshape_alias_copy", "reshape", "squeeze_copy",
      "unsqueeze_copy", "permute_copy", "transpose_copy", "t_copy", "expand_copy", "slice_copy",
      "select_copy", "diagonal_copy", "alias_copy", "detach_copy", "lift_fresh_copy",
      "split_copy", "split_with_sizes_copy", "unbind_copy"};
  static const std::unordered_set<std::string> kNone;
  switch (kind) {
    case OpClass::kReduction: return kReduction;
    case OpClass::kRandom: return kRandom;
    case OpClass::kView: return kView;
    default: return kNone;
  }
}

/// The class of an aten op by its name.
OpClass classify(const OpName& n) {
  if (names(OpClass::kRandom).count(n.op) || endsWith(n.op, "_dropout")) return OpClass::kRandom;
  if (names(OpClass::kReduction).count(n.op)) return OpClass::kReduction;
  if (names(OpClass::kView).count(n.op)) return OpClass::kView;
  if (endsWith(n.op, "_scatter")) return OpClass::kScatter;
  return OpClass::kPointwise;  // a guess: ops that are not pointwise have no lowering there
}

}  // namespace

OpName splitOpName(const std::string& name) {
  OpName result;
  std::string rest = startsWith(name, "aten::") ? name.substr(6) : name;
  const size_t dot = rest.find('.');
  result.op = rest.substr(0, dot);
  if (dot != std::string::npos) result.overload = rest.substr(dot + 1);
  return result;
}

bool readsAnyLayout(const std::string& name) {
  // The ops where views of weights and activations meet in training: the matmul and
  // convolution families and their backward ops, with the losses and lookups around them.
  static const std::unordered_set<std::string> kAnyLayout = {
      "mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "linear",
      "_addmm_activation", "convolution", "_convolution", "convolution_backward",
      "embedding", "embedding_dense_backward", "index_select", "gather", "cat", "stack",
      "mse_loss", "mse_loss_backward", "nll_loss_forward", "nll_loss_backward",
      "nll_loss2d_forward", "nll_loss2d_backward"};
  if (!startsWith(name, "aten::")) return false;
  return kAnyLayout.count(splitOpName(name).op) > 0;
}

OpClass classifyOp(const std::string& name) {
  if (!startsWith(name, "aten::")) return OpClass::kExtern;
  return classify(splitOpName(name));
}

const char* opClassName(OpClass kind) {
  switch (kind) {
    case OpClass::kPointwise: return "pointwise";
    case OpClass::kReduction: return "reduction";
    case OpClass::kView: return "view";
    case OpClass::kScatter: return "scatter";
    case OpClass::kExtern: return "extern";
    case OpClass::kRandom: return "random";
  }
  return "?";
}

bool lowerCall(LoweringCall& call) {
  const std::string& name = call.attrs().name;
  if (!startsWith(name, "aten::")) return false;
  const OpName n = splitOpName(name);
  switch (classify(n)) {
    case OpClass::kReduction: return lowerReduction(call, n.op, n.overload);
    case OpClass::kView:
    case OpClass::kScatter: return lowerView(call, n.op, n.overload);
    case OpClass::kPointwise:
      if (startsWith(n.op, "_foreach_")) return lowerForeach(call, n.op, n.overload);
      return lowerPointwise(call, n.op, n.overload) || lowerView(call, n.op, n.overload) ||
             lowerConstant(call, n.op, n.overload);
    case OpClass::kExtern:
    case OpClass::kRandom: return false;
  }
  return false;
}

}  // namespace lazyfuse
