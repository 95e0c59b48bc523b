#include "lazy_ir/node.h"

#include "lazy_ir/check.h"

#include <algorithm>
#include <atomic>

namespace lazyfuse {
namespace {

std::atomic<uint64_t> next_node_id{1};

size_t countInputs(const ArgSlot& slot) {
  switch (slot.kind) {
    case ArgKind::kTensor: return 1;
    case ArgKind::kOptionalTensor:
    case ArgKind::kTensorList:
    case ArgKind::kOptionalTensorList: {
      size_t n = 0;
      for (uint8_t p : slot.present) n += p;
      return n;
    }
    case ArgKind::kConstant:
    case ArgKind::kParam: return 0;
  }
  return 0;
}

}  // namespace

TensorMeta TensorMeta::of(const at::Tensor& tensor) {
  TensorMeta meta;
  meta.dtype = tensor.scalar_type();
  meta.sizes = tensor.sizes().vec();
  meta.strides = tensor.strides().vec();
  return meta;
}

int64_t TensorMeta::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

HashValue TensorMeta::hash(HashValue seed) const {
  seed = hashCombine(seed, static_cast<HashValue>(dtype));
  seed = hashInts(seed, sizes);
  return hashInts(seed, strides);
}

std::vector<uint32_t> positionArgsOf(const std::string& name) {
  if (name == "aten::select_copy.int" || name == "aten::narrow_copy") return {2};
  if (name == "aten::select_scatter") return {3};
  if (name == "aten::slice_copy.Tensor") return {2, 3};
  if (name == "aten::slice_scatter") return {3, 4};
  return {};
}

void AtenCallAttrs::finalize() {
  static const HashValue kPosition = hashString("position");
  position_args = positionArgsOf(name);
  HashValue h = hashString(name), blind = h;
  for (size_t i = 0; i < args.size(); ++i) {
    const ArgSlot& slot = args[i];
    const HashValue shape = static_cast<HashValue>(slot.kind) * 2 + slot.mutated;
    h = hashCombine(hashCombine(h, shape), slot.present.size());
    blind = hashCombine(hashCombine(blind, shape), slot.present.size());
    for (uint8_t p : slot.present) {
      h = hashCombine(h, p);
      blind = hashCombine(blind, p);
    }
    if (slot.kind != ArgKind::kConstant) continue;
    h = hashIValue(h, slot.constant);
    const bool position =
        slot.constant.isInt() &&
        std::find(position_args.begin(), position_args.end(), i) != position_args.end();
    // A position's value is left out, not whether it is an int or None.
    blind = position ? hashCombine(blind, kPosition) : hashIValue(blind, slot.constant);
  }
  for (const ReturnSlot& ret : returns) {
    h = hashCombine(h, static_cast<HashValue>(ret.kind));
    h = hashCombine(hashCombine(h, ret.count), ret.arg);
    blind = hashCombine(blind, static_cast<HashValue>(ret.kind));
    blind = hashCombine(hashCombine(blind, ret.count), ret.arg);
  }
  for (const TensorMeta& meta : outputs) {
    h = meta.hash(h);
    blind = meta.hash(blind);
  }
  position_blind_hash = blind;
  num_inputs = 0;
  num_params = 0;
  for (const ArgSlot& slot : args) {
    num_inputs += countInputs(slot);
    num_params += slot.kind == ArgKind::kParam;
  }
  hash = h;
}

const TensorMeta& Value::meta() const { return node->outputMeta(index); }

Node::Node(Private, OpKind kind, std::vector<Value> inputs)
    : kind_(kind),
      id_(next_node_id.fetch_add(1, std::memory_order_relaxed)),
      inputs_(std::move(inputs)) {}

NodePtr Node::deviceData(at::Tensor data) {
  LF_INTERNAL_ASSERT(data.defined(), "device data needs a defined tensor");
  auto node = c10::make_intrusive<Node>(Private{}, OpKind::kDeviceData, std::vector<Value>{});
  node->data_meta_ = TensorMeta::of(data);
  node->data_ = std::move(data);
  return node;
}

NodePtr Node::aten(std::shared_ptr<const AtenCallAttrs> attrs, std::vector<Value> inputs,
                   std::vector<c10::IValue> params) {
  LF_INTERNAL_ASSERT(attrs != nullptr, "aten node without attributes");
  LF_INTERNAL_ASSERT(inputs.size() == attrs->num_inputs, attrs->name, ": ", inputs.size(),
                     " inputs for a recipe of ", attrs->num_inputs);
  LF_INTERNAL_ASSERT(params.size() == attrs->num_params, attrs->name, ": ", params.size(),
                     " params for a recipe of ", attrs->num_params);
  for (const Value& input : inputs) {
    LF_INTERNAL_ASSERT(input.node && input.index < input.node->numOutputs(), attrs->name,
                       ": input refers to a missing output");
  }
  auto node = c10::make_intrusive<Node>(Private{}, OpKind::kAten, std::move(inputs));
  node->attrs_ = std::move(attrs);
  node->params_ = std::move(params);
  return node;
}

size_t Node::numOutputs() const {
  return kind_ == OpKind::kDeviceData ? 1 : attrs_->outputs.size();
}

const TensorMeta& Node::outputMeta(size_t index) const {
  if (kind_ == OpKind::kDeviceData) return data_meta_;
  return attrs_->outputs.at(index);
}

const AtenCallAttrs& Node::aten() const {
  LF_INTERNAL_ASSERT(kind_ == OpKind::kAten, "not an aten node");
  return *attrs_;
}

HashValue Node::localHash() const {
  if (kind_ == OpKind::kDeviceData) return data_meta_.hash(hashString("device_data"));
  return attrs_->hash;
}

HashValue Node::localPositionBlindHash() const {
  if (kind_ == OpKind::kDeviceData) return localHash();
  return attrs_->position_blind_hash;
}

std::vector<int64_t> Node::positionValues() const {
  std::vector<int64_t> values;
  if (kind_ != OpKind::kAten) return values;
  for (uint32_t i : attrs_->position_args) {
    const c10::IValue& v = attrs_->args.at(i).constant;
    if (attrs_->args[i].kind == ArgKind::kConstant && v.isInt()) values.push_back(v.toInt());
  }
  return values;
}

std::string Node::opName() const {
  return kind_ == OpKind::kDeviceData ? "device_data" : attrs_->name;
}

}  // namespace lazyfuse
