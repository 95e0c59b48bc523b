#include "backend/op_traits.h"

#include "backend/aux_outputs.h"
#include "backend/meta_layout.h"
#include "backend/meta_templates.h"
#include "lazy_ir/text.h"
#include "lowering/lowerings.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

namespace lazyfuse {
namespace {

// Note [Data-dependent ops]
// These ops have output shapes (or results) that depend on tensor values, so they cannot be
// recorded: they sync their inputs, run eagerly on the hardware device, and the trace goes on
// from their results. Each run counts as aten::<op>. Boolean-mask indexing is caught by the
// recorder from its index dtypes; ops with no meta kernel join at run time (markEager).
const std::set<std::string>& dataDependentOps() {
  // clang-format off
  static const std::set<std::string> ops = {
      "aten::nonzero", "aten::nonzero_numpy", "aten::argwhere", "aten::unique",
      "aten::_unique", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
      "aten::unique_dim_consecutive", "aten::masked_select", "aten::_local_scalar_dense",
      "aten::item", "aten::equal", "aten::bincount", "aten::repeat_interleave",
      "aten::_assert_async", "aten::_assert_scalar", "aten::_functional_assert_async",
      "aten::is_nonzero", "aten::allclose", "aten::histc", "aten::_histogramdd_bin_edges",
      "aten::histogram", "aten::histogramdd", "aten::_histogramdd_from_bin_cts",
      "aten::_histogramdd_from_bin_tensors", "aten::segment_reduce",
      "aten::_nested_tensor_from_mask", "aten::ctc_loss", "aten::_ctc_loss"};
  // clang-format on
  return ops;
}

bool isTensorLike(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  if (auto list = type->cast<c10::ListType>()) {
    return list->getElementType()->kind() == c10::TypeKind::TensorType;
  }
  return false;
}

/// Scalar, Scalar? and Scalar[]: values that become graph parameters (the bias corrections of a
/// foreach Adam step change every step, and must not make every step a new graph).
bool isScalarType(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::NumberType) return true;
  if (auto opt = type->cast<c10::OptionalType>()) {
    return opt->getElementType()->kind() == c10::TypeKind::NumberType;
  }
  if (auto list = type->cast<c10::ListType>()) {
    return list->getElementType()->kind() == c10::TypeKind::NumberType;
  }
  return false;
}

bool isGeneratorType(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (auto opt = type->cast<c10::OptionalType>()) {
    return opt->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

/// SymInt, SymInt? or SymInt[]: a size, an index or an offset.
bool isSymIntType(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  if (auto list = t->cast<c10::ListType>()) t = list->getElementType();
  return t->kind() == c10::TypeKind::SymIntType;
}

bool isInPlace(const c10::FunctionSchema& schema, const std::vector<uint8_t>& written) {
  const std::string& name = schema.name();
  if (name.size() < 2 || name.back() != '_' || name.find("::__") != std::string::npos) return false;
  return !written.empty() && written[0];
}

bool isOut(const c10::FunctionSchema& schema, const std::vector<uint8_t>& written) {
  bool any = false;
  for (size_t i = 0; i < written.size(); ++i) {
    if (!written[i]) continue;
    if (!schema.arguments()[i].is_out()) return false;
    any = true;
  }
  return any;
}

// See Note [In-place result casts]. A random op's out= variant draws in the out tensor's dtype
// (bernoulli into an int tensor is fine), so its functional result's dtype says nothing.
std::string functionalNameOf(const c10::OperatorHandle& op, const std::vector<uint8_t>& written) {
  const c10::FunctionSchema& schema = op.schema();
  if (isInPlace(schema, written)) return schema.name().substr(0, schema.name().size() - 1);
  if (isOut(schema, written) && !op.hasTag(at::Tag::nondeterministic_seeded)) return schema.name();
  return "";
}

int outDtypeArgOf(const c10::FunctionSchema& schema, const std::vector<uint8_t>& written) {
  static const std::set<std::string> reductions = {"aten::sum", "aten::prod", "aten::nansum",
                                                   "aten::cumsum", "aten::cumprod"};
  if (reductions.count(schema.name()) == 0 || !isOut(schema, written)) return -1;
  auto index = schema.argumentIndexWithName("dtype");
  return index ? static_cast<int>(*index) : -1;
}

// See Note [View geometry].
std::optional<c10::OperatorHandle> viewOpOf(const c10::FunctionSchema& schema) {
  static const std::string kSuffix = "_copy";
  const std::string& name = schema.name();
  if (!endsWith(name, kSuffix)) return std::nullopt;
  auto view = c10::Dispatcher::singleton().findOp(
      {name.substr(0, name.size() - kSuffix.size()), schema.overload_name()});
  if (!view || view->schema().returns().size() != 1) return std::nullopt;
  const c10::AliasInfo* alias = view->schema().returns()[0].alias_info();
  if (alias == nullptr || alias->isWrite()) return std::nullopt;
  return view;
}

// See Note [Eager's errors]: pointwise ops broadcast one-element stand-ins, reductions keep every
// dim they are given, and these ops (and their in-place variants) accept any operand of one
// element per dim (floor_divide is pointwise without the tag).
bool probesStandIns(const c10::OperatorHandle& op, const std::vector<uint8_t>& written) {
  static const std::set<std::string> size_free = {
      "aten::mm",           "aten::bmm",          "aten::addmm",  "aten::baddbmm", "aten::addbmm",
      "aten::mv",           "aten::addmv",        "aten::dot",    "aten::vdot",    "aten::_softmax",
      "aten::_log_softmax", "aten::floor_divide", "aten::cumsum", "aten::cumprod", "aten::softmax",
      "aten::log_softmax",  "aten::sort"};
  if (op.hasTag(at::Tag::nondeterministic_seeded)) return false;
  if (op.hasTag(at::Tag::pointwise) || op.hasTag(at::Tag::reduction)) return true;
  const std::string& name = op.schema().name();
  if (isInPlace(op.schema(), written)) return size_free.count(name.substr(0, name.size() - 1)) > 0;
  return size_free.count(name) > 0;
}

std::unique_ptr<OpTraits> computeTraits(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  auto traits = std::make_unique<OpTraits>();
  traits->counter_name = schema.name();
  traits->name = schema.name();
  if (!schema.overload_name().empty()) traits->name += "." + schema.overload_name();
  traits->name_hash = hashString(traits->name);
  traits->position_args = positionArgsOf(traits->name);
  traits->eager = dataDependentOps().count(schema.name()) > 0;
  traits->aux_outputs = auxOutputsOf(traits->name);
  traits->meta_layout = metaLayoutOf(op);
  traits->meta_scalars_on_meta =
      traits->name == "aten::masked_fill.Tensor" || traits->name == "aten::masked_fill_.Tensor";
  traits->scalars_are_constants = schema.name() == "aten::arange" || schema.name() == "aten::range";
  // A fused optimizer step's hyperparameters (lr, betas, eps, weight_decay) are `float`: recorded
  // as parameters, as Scalars are, so a learning-rate schedule reuses one plan (Note [Fused
  // optimizer steps] in backend/write_functionalization.cpp).
  const bool float_params = isFusedOptimizerOp(schema.name());
  for (const c10::Argument& arg : schema.arguments()) {
    const c10::AliasInfo* alias = arg.alias_info();
    traits->written.push_back(alias != nullptr && alias->isWrite());
    traits->scalar_arg.push_back(isScalarType(arg.type()) ||
                                 (float_params && arg.type()->kind() == c10::TypeKind::FloatType));
    traits->generator_arg.push_back(isGeneratorType(arg.type()));
    traits->size_arg.push_back(isSymIntType(arg.real_type()));
  }
  traits->functional_name = functionalNameOf(op, traits->written);
  traits->out_dtype_arg = outDtypeArgOf(schema, traits->written);
  traits->view_op = viewOpOf(schema);
  traits->probes_stand_ins = probesStandIns(op, traits->written);
  traits->scatters_into_self = endsWith(schema.name(), "_scatter") &&
                               schema.returns().size() == 1 && !schema.arguments().empty() &&
                               schema.arguments()[0].type()->kind() == c10::TypeKind::TensorType;
  for (const c10::Argument& ret : schema.returns()) {
    if (!isTensorLike(ret.type())) traits->eager = true;
    int aliased = -1;
    const c10::AliasInfo* alias = ret.alias_info();
    for (size_t i = 0; alias != nullptr && alias->isWrite() && i < schema.arguments().size(); ++i) {
      const c10::AliasInfo* arg_alias = schema.arguments()[i].alias_info();
      if (arg_alias != nullptr && arg_alias->beforeSets() == alias->beforeSets()) {
        aliased = static_cast<int>(i);
      }
    }
    traits->returns_arg.push_back(aliased);
  }
  traits->shape_function = shapeFunctionOf(traits->name);
  traits->generic_meta = hasSizeGenericMeta(op, *traits);
  return traits;
}

struct TraitsTable {
  std::mutex mutex;
  std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpTraits>> table;
};

TraitsTable& traitsTable() {
  static TraitsTable* instance = new TraitsTable();
  return *instance;
}

}  // namespace

const OpTraits& traitsOf(const c10::OperatorHandle& op) {
  TraitsTable& t = traitsTable();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto& slot = t.table[&op.schema()];
  if (!slot) slot = computeTraits(op);
  return *slot;
}

std::string implName(const c10::OperatorName& name) {
  std::string qualified = name.name.substr(name.name.find("::") + 2);
  if (!name.overload_name.empty()) qualified += "." + name.overload_name;
  return qualified;
}

bool writesAnArgument(const OpTraits& traits) {
  return std::any_of(traits.written.begin(), traits.written.end(), [](uint8_t w) { return w; });
}

void markEager(const c10::OperatorHandle& op) {
  TraitsTable& t = traitsTable();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto& slot = t.table[&op.schema()];
  if (!slot) slot = computeTraits(op);
  slot->eager = true;
}

}  // namespace lazyfuse
