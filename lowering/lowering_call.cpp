#include "lowering/lowering_call.h"

#include "lazy_ir/check.h"

namespace lazyfuse {

std::vector<IxPtr> broadcastIndex(const std::vector<IxPtr>& index,
                                  const std::vector<int64_t>& sizes) {
  LF_INTERNAL_ASSERT(sizes.size() <= index.size(), "broadcast of rank ", sizes.size(), " to ",
                     index.size());
  std::vector<IxPtr> result;
  const size_t lead = index.size() - sizes.size();
  for (size_t d = 0; d < sizes.size(); ++d) {
    result.push_back(sizes[d] == 1 ? ixConst(0) : index[lead + d]);
  }
  return result;
}

int64_t wrapDim(int64_t dim, int64_t rank) {
  const int64_t r = std::max<int64_t>(rank, 1);
  return dim < 0 ? dim + r : dim;
}

LoweringCall::LoweringCall(LoopGraph& loops, const Node& node, int32_t position,
                           std::vector<LoopId> inputs, int32_t element,
                           std::vector<c10::IValue> extra, const c10::FunctionSchema* schema)
    : loops_(loops),
      node_(node),
      position_(position),
      inputs_(inputs),
      element_(element),
      args_(std::make_shared<const CallArgs>(loops, node, position, std::move(inputs), element,
                                             std::move(extra), schema)) {}

LoweringCall LoweringCall::element(int32_t element, std::vector<c10::IValue> extra,
                                   const c10::FunctionSchema& schema) const {
  // The element op's arguments are the node's, position by position, then `extra`.
  LF_INTERNAL_ASSERT(attrs().args.size() + extra.size() == schema.arguments().size(), attrs().name,
                     " does not line up with ", schema.operator_name(), ": ", attrs().args.size(),
                     " + ", extra.size(), " arguments for ", schema.arguments().size());
  return LoweringCall(loops_, node_, position_, inputs_, element, std::move(extra), &schema);
}

CallArgs::CallArgs(const LoopGraph& loops, const Node& node, int32_t position,
                   std::vector<LoopId> inputs, int32_t element, std::vector<c10::IValue> extra,
                   const c10::FunctionSchema* schema)
    : loops_(loops),
      node_(node),
      schema_(schema ? schema : &node.aten().op.schema()),
      position_(position),
      inputs_(std::move(inputs)),
      element_(element),
      extra_(std::move(extra)) {
  int32_t next_input = 0;
  int32_t next_param = 0;
  for (const ArgSlot& slot : attrs().args) {
    ArgSource source;
    source.kind = slot.kind;
    switch (slot.kind) {
      case ArgKind::kTensor: source.count = 1; break;
      case ArgKind::kOptionalTensor: source.count = slot.present.at(0); break;
      case ArgKind::kTensorList:
      case ArgKind::kOptionalTensorList:
        for (uint8_t p : slot.present) source.count += p;
        break;
      case ArgKind::kParam: source.param = next_param++; break;
      case ArgKind::kConstant: break;
    }
    source.input = next_input;
    next_input += source.count;
    sources_.push_back(source);
  }
  sources_.resize(sources_.size() + extra_.size());  // kConstant: see constant()
}

ArgIndex CallArgs::index(std::string_view name) const {
  const std::optional<int> found = schema_->argumentIndexWithName(name);
  LF_INTERNAL_ASSERT(found && static_cast<size_t>(*found) < sources_.size(),
                     schema_->operator_name(), " has no argument `", name, "` (lowering ",
                     attrs().name, ")");
  return static_cast<ArgIndex>(*found);
}

bool CallArgs::has(std::string_view name) const {
  return schema_->argumentIndexWithName(name).has_value();
}

const c10::IValue& CallArgs::constant(ArgIndex arg) const {
  const size_t own = attrs().args.size();
  return arg < own ? attrs().args.at(arg).constant : extra_.at(arg - own);
}

std::optional<LoopId> CallArgs::tensor(ArgIndex arg) const {
  const ArgSource& s = sources_.at(arg);
  if (s.count == 0 || s.kind == ArgKind::kParam || s.kind == ArgKind::kConstant) {
    return std::nullopt;
  }
  if (element_ >= 0 && s.kind == ArgKind::kTensorList) {
    LF_CHECK(element_ < s.count, "tensor list argument ", arg, " has no element ", element_);
    return inputs_.at(s.input + element_);
  }
  return inputs_.at(s.input);
}

const c10::IValue& CallArgs::paramOf(const ArgSource& s) const {
  const c10::IValue& v = node_.params().at(s.param);
  if (element_ < 0 || !v.isList()) return v;
  LF_CHECK(static_cast<size_t>(element_) < v.toListRef().size(), "scalar list has no element ",
           element_);
  return v.toListRef()[element_];
}

bool CallArgs::isNone(ArgIndex arg) const {
  // A None Scalar can be a parameter: its kind (None or not) is in the graph hash.
  const ArgSource& s = sources_.at(arg);
  if (s.kind == ArgKind::kParam) return paramOf(s).isNone();
  return s.kind == ArgKind::kConstant && constant(arg).isNone();
}

c10::Scalar CallArgs::scalarValue(ArgIndex arg) const {
  const ArgSource& s = sources_.at(arg);
  const c10::IValue& v = s.kind == ArgKind::kParam ? paramOf(s) : constant(arg);
  if (v.isTensor()) return v.toTensor().item();
  return v.toScalar();
}

KValue CallArgs::at(LoopContext& c, ArgIndex arg, const std::vector<IxPtr>& index) const {
  const ArgSource& s = sources_.at(arg);
  if (s.kind == ArgKind::kParam) {
    const c10::IValue& v = paramOf(s);
    c10::ScalarType type = v.isTensor()                     ? v.toTensor().scalar_type()
                           : v.toScalar().isFloatingPoint() ? c10::ScalarType::Double
                           : v.toScalar().isBoolean()       ? c10::ScalarType::Bool
                                                            : c10::ScalarType::Long;
    const bool listed = element_ >= 0 && node_.params().at(s.param).isList();
    return c.param(position_, s.param, type, listed ? element_ : -1);
  }
  if (s.kind == ArgKind::kConstant) {
    c10::Scalar value = constant(arg).toScalar();
    if (value.isFloatingPoint()) return c.ops().constant(value.toDouble(), c10::ScalarType::Double);
    if (value.isBoolean()) return c.ops().constant(value.toBool(), c10::ScalarType::Bool);
    return c.ops().constant(static_cast<double>(value.toLong()), c10::ScalarType::Long);
  }
  LoopId id = *tensor(arg);
  return c.at(id, broadcastIndex(index, loops_[id].sizes));
}

KValue CallArgs::scalar(LoopContext& c, ArgIndex arg, c10::ScalarType dtype) const {
  LF_INTERNAL_ASSERT(!tensor(arg), "scalar() of a tensor argument");
  return c.ops().cast(at(c, arg, {}), dtype);
}

LoopId LoweringCall::pointwise(const std::vector<std::string_view>& names, c10::ScalarType dtype,
                               PointwiseBody body, std::optional<std::vector<int64_t>> sizes) {
  std::vector<ArgIndex> args;
  for (std::string_view name : names) args.push_back(args_->index(name));
  LoopNode node;
  node.kind = LoopNode::kCompute;
  node.dtype = dtype;
  node.sizes = sizes ? *sizes : out().sizes;
  node.position = position_;
  for (ArgIndex arg : args) {
    if (auto id = args_->tensor(arg)) node.inputs.push_back(*id);
  }
  node.compute = [call_args = args_, args, body, dtype](LoopContext& c,
                                                        const std::vector<IxPtr>& index) {
    std::vector<KValue> values;
    for (ArgIndex arg : args) values.push_back(call_args->at(c, arg, index));
    return c.ops().cast(body(c.ops(), values), dtype);
  };
  return loops_.add(std::move(node));
}

LoopId LoweringCall::combine(std::vector<LoopId> inputs, std::vector<int64_t> sizes,
                             c10::ScalarType dtype, PointwiseBody body) {
  LoopNode node;
  node.kind = LoopNode::kCompute;
  node.dtype = dtype;
  node.sizes = std::move(sizes);
  node.position = position_;
  node.inputs = inputs;
  const LoopGraph* loops = &loops_;
  node.compute = [loops, inputs, body, dtype](LoopContext& c, const std::vector<IxPtr>& index) {
    std::vector<KValue> values;
    for (LoopId id : inputs) values.push_back(c.at(id, broadcastIndex(index, (*loops)[id].sizes)));
    return c.ops().cast(body(c.ops(), values), dtype);
  };
  return loops_.add(std::move(node));
}

LoopId LoweringCall::view(LoopId input, std::vector<int64_t> sizes, IndexMap map) {
  LoopNode node;
  node.kind = LoopNode::kCompute;
  node.is_view = true;
  node.remaps = true;
  node.dtype = loops_[input].dtype;
  node.sizes = std::move(sizes);
  node.position = position_;
  node.inputs = {input};
  node.compute = [input, map](LoopContext& c, const std::vector<IxPtr>& index) {
    return c.at(input, map(index));
  };
  return loops_.add(std::move(node));
}

LoopId LoweringCall::reduce(LoopId input, std::vector<int64_t> dims, bool keepdim, ReduceKind kind,
                            c10::ScalarType acc, c10::ScalarType dtype, ReduceFn pre,
                            ReduceFn post) {
  const std::vector<int64_t> in_sizes = loops_[input].sizes;
  std::vector<bool> reduced(in_sizes.size(), false);
  std::vector<int64_t> out_sizes, rsizes;
  for (int64_t d : dims) reduced.at(d) = true;
  for (size_t d = 0; d < in_sizes.size(); ++d) {
    if (reduced[d]) rsizes.push_back(in_sizes[d]);
    if (!reduced[d] || keepdim) out_sizes.push_back(reduced[d] ? 1 : in_sizes[d]);
  }
  LoopNode node;
  node.kind = LoopNode::kReduce;
  node.dtype = dtype;
  node.sizes = out_sizes;
  node.position = position_;
  node.inputs = {input};
  node.compute = [=](LoopContext& c, const std::vector<IxPtr>& index) {
    KernelBuilder& ops = c.ops();
    KValue folded = ops.reduce(kind, acc, rsizes, [&](const std::vector<IxPtr>& rvars) {
      std::vector<IxPtr> in_index;
      size_t next_out = 0, next_r = 0;
      for (size_t d = 0; d < in_sizes.size(); ++d) {
        if (reduced[d]) {
          in_index.push_back(rvars[next_r++]);
          if (keepdim) ++next_out;
        } else {
          in_index.push_back(index[next_out++]);
        }
      }
      KValue v = c.at(input, in_index);
      return pre ? pre(c, v) : v;
    });
    return ops.cast(post ? post(c, folded) : folded, dtype);
  };
  return loops_.add(std::move(node));
}

}  // namespace lazyfuse
