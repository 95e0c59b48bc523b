#include "lowering/lowerings.h"

#include "lazy_ir/check.h"
#include "lazy_ir/text.h"
#include "lowering/lower_ops.h"

#include <algorithm>
#include <unordered_set>

namespace lazyfuse {
namespace {

/// Ops that draw random numbers, by name (without overload); also any name ending `_dropout`.
bool isRandomName(const std::string& op) {
  static const std::unordered_set<std::string> kRandom = {
      "bernoulli",      "rand",         "randn",       "rand_like",      "randn_like",
      "randint",        "randint_like", "randperm",    "normal",         "uniform",
      "native_dropout", "multinomial",  "exponential", "geometric",      "cauchy",
      "log_normal",     "random",       "poisson",     "_standard_gamma"};
  return kRandom.count(op) > 0 || endsWith(op, "_dropout");
}

/// The registry key of an overload: `aten::add.Tensor`, `aten::round.default`.
std::string overloadKey(const OpName& n) {
  return "aten::" + n.op + "." + (n.overload.empty() ? "default" : n.overload);
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
      "mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "linear", "matmul",
      "_addmm_activation", "convolution", "_convolution", "convolution_backward", "embedding",
      "embedding_dense_backward", "index_select", "gather", "cat", "stack", "mse_loss",
      "mse_loss_backward", "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward",
      "nll_loss2d_backward",
      // Write into a copy of self (a slab of a cache); the result is laid out as its meta says.
      "index_copy", "index_put", "index_add", "scatter", "scatter_add"};
  if (!startsWith(name, "aten::")) return false;
  return kAnyLayout.count(splitOpName(name).op) > 0;
}

bool isRandomOp(const std::string& name) {
  return startsWith(name, "aten::") && isRandomName(splitOpName(name).op);
}

OpClass classifyOp(const std::string& name) {
  if (!startsWith(name, "aten::")) return OpClass::kExtern;
  if (isRandomOp(name)) return OpClass::kRandom;
  const Lowering* lowering = loweringRegistry().find(name);
  return lowering ? lowering->kind : OpClass::kExtern;
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

void LoweringRegistry::add(OpClass kind, const std::string& op, const LoweringFn& fn) {
  LF_INTERNAL_ASSERT(startsWith(op, "aten::") && !isRandomOp(op), "no lowering for ", op);
  const bool added = table_.emplace(op, Lowering{kind, fn}).second;
  LF_INTERNAL_ASSERT(added, "two lowerings of ", op);
}

void LoweringRegistry::add(OpClass kind, std::initializer_list<std::string_view> ops,
                           const LoweringFn& fn) {
  for (std::string_view op : ops) add(kind, std::string(op), fn);
}

const Lowering* LoweringRegistry::find(const std::string& name) const {
  if (!startsWith(name, "aten::")) return nullptr;
  const OpName n = splitOpName(name);
  auto it = table_.find(overloadKey(n));
  if (it == table_.end()) it = table_.find("aten::" + n.op);
  return it == table_.end() ? nullptr : &it->second;
}

std::vector<std::string> LoweringRegistry::names() const {
  std::vector<std::string> result;
  for (const auto& [name, lowering] : table_) result.push_back(name);
  std::sort(result.begin(), result.end());
  return result;
}

const LoweringRegistry& loweringRegistry() {
  static const LoweringRegistry registry = [] {
    LoweringRegistry r;
    registerPointwiseLowerings(r);
    registerActivationLowerings(r);
    registerViewLowerings(r);
    registerConversionLowerings(r);
    registerConstantLowerings(r);
    registerReductionLowerings(r);
    registerNormalizationLowerings(r);
    registerForeachLowerings(r);
    registerOptimizerLowerings(r);
    return r;
  }();
  return registry;
}

bool lowerCall(LoweringCall& call) {
  const Lowering* lowering = loweringRegistry().find(call.attrs().name);
  return lowering != nullptr && lowering->fn(call);
}

}  // namespace lazyfuse
