#include "lazy_ir/graph.h"

#include "lazy_ir/check.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace lazyfuse {
namespace {

std::mutex& buildMutex() {
  static std::mutex mutex;
  return mutex;
}

uint64_t nextMark() {
  static uint64_t mark = 0;
  return ++mark;
}

const void* storageIdentity(const at::Tensor& tensor) {
  if (!tensor.has_storage()) return tensor.unsafeGetTensorImpl();
  return tensor.storage().unsafeGetStorageImpl();
}

}  // namespace

/// What a graph reads for `value`: the device data standing for its node once that node was
/// computed (Graph::setComputed), else the value itself. Call with the build lock held.
std::pair<Node*, uint32_t> Graph::resolveLocked(const Value& value) {
  Node* node = value.node.get();
  LF_CHECK(node->failed_.empty(),
           "this lazy tensor has no value: the graph computing it failed "
           "at sync with: ",
           node->failed_);
  if (node->computed_.empty()) return {node, value.index};
  return {node->computed_[value.index].get(), 0};
}

Graph Graph::fromRoots(c10::ArrayRef<Value> roots) {
  std::lock_guard<std::mutex> lock(buildMutex());
  const uint64_t mark = nextMark();
  Graph graph;
  // Iterative post-order DFS; a node is placed once all its inputs are placed.
  std::vector<std::pair<Node*, size_t>> stack;
  for (const Value& root_value : roots) {
    LF_INTERNAL_ASSERT(root_value.node, "graph root without a node");
    Node* root = resolveLocked(root_value).first;
    if (root->mark_ == mark) continue;
    root->mark_ = mark;
    stack.emplace_back(root, 0);
    while (!stack.empty()) {
      auto& [node, next_input] = stack.back();
      if (next_input < node->inputs_.size()) {
        Node* input = resolveLocked(node->inputs_[next_input++]).first;
        if (input->mark_ == mark) continue;
        input->mark_ = mark;
        stack.emplace_back(input, 0);
        continue;
      }
      node->position_ = static_cast<uint32_t>(graph.nodes_.size());
      graph.nodes_.push_back(NodePtr::reclaim_copy(node));
      stack.pop_back();
    }
  }
  graph.input_offsets_.reserve(graph.nodes_.size() + 1);
  std::vector<std::pair<Node*, uint32_t>> owner_uses;            // computed nodes the inputs name
  std::vector<uint32_t> resolved_reads(graph.nodes_.size(), 0);  // by device-data position
  for (const NodePtr& node : graph.nodes_) {
    graph.input_offsets_.push_back(static_cast<uint32_t>(graph.input_refs_.size()));
    for (const Value& input : node->inputs_) {
      const auto [read, index] = resolveLocked(input);
      graph.input_refs_.push_back({read->position_, index});
      if (read == input.node.get()) continue;
      ++resolved_reads[read->position_];
      auto it = std::find_if(owner_uses.begin(), owner_uses.end(),
                             [&](const auto& entry) { return entry.first == input.node.get(); });
      if (it == owner_uses.end()) {
        owner_uses.emplace_back(input.node.get(), 1);
      } else {
        ++it->second;
      }
    }
    if (node->kind() == OpKind::kDeviceData) graph.data_positions_.push_back(node->position_);
  }
  graph.input_offsets_.push_back(static_cast<uint32_t>(graph.input_refs_.size()));
  for (const auto& [owner, uses] : owner_uses) {
    for (const NodePtr& data : owner->computed_) {
      if (data->mark_ != mark) continue;  // an output of `owner` this graph does not read
      graph.computed_inputs_.push_back(
          {data->position_, NodePtr::reclaim_copy(owner), uses, resolved_reads[data->position_]});
    }
  }
  for (const Value& root : roots) {
    const auto [read, index] = resolveLocked(root);
    graph.outputs_.push_back({read->position_, index});
  }
  graph.computeAliasClasses();
  graph.computeHash();
  return graph;
}

void Graph::setComputed(const NodePtr& node, std::vector<at::Tensor> outputs) {
  LF_INTERNAL_ASSERT(node->kind() == OpKind::kAten, "only an op's node can be computed");
  LF_INTERNAL_ASSERT(outputs.size() == node->numOutputs(), node->opName(), ": ", outputs.size(),
                     " buffers for ", node->numOutputs(), " outputs");
  std::vector<NodePtr> data;
  data.reserve(outputs.size());
  for (at::Tensor& output : outputs) data.push_back(Node::deviceData(std::move(output)));
  std::vector<Value> inputs;  // released after the lock: they may be the last hold on a trace
  {
    std::lock_guard<std::mutex> lock(buildMutex());
    if (!node->computed_.empty()) return;
    node->computed_ = std::move(data);
    inputs.swap(node->inputs_);
  }
}

void Graph::setFailed(const NodePtr& node, std::string error) {
  std::vector<Value> inputs;  // released after the lock
  std::lock_guard<std::mutex> lock(buildMutex());
  if (!node->computed_.empty() || !node->failed_.empty()) return;
  node->failed_ = error.empty() ? std::string("an unknown error") : std::move(error);
  inputs.swap(node->inputs_);
}

NodePtr Graph::computedValue(const Value& value) {
  if (!value.node) return NodePtr();
  std::lock_guard<std::mutex> lock(buildMutex());
  if (value.node->computed_.empty()) return NodePtr();
  return value.node->computed_[value.index];
}

void Graph::addOutputs(c10::ArrayRef<NodeRef> outputs) {
  for (const NodeRef& out : outputs) {
    LF_INTERNAL_ASSERT(
        out.position < nodes_.size() && out.index < nodes_[out.position]->numOutputs(),
        "an added graph output names no value of the graph");
    outputs_.push_back(out);
  }
  hashOutputs();
}

c10::ArrayRef<NodeRef> Graph::inputsOf(size_t position) const {
  const uint32_t begin = input_offsets_.at(position);
  const uint32_t end = input_offsets_.at(position + 1);
  return c10::ArrayRef<NodeRef>(input_refs_.data() + begin, end - begin);
}

void Graph::computeAliasClasses() {
  // Each input's class is the index of the first input of its storage: one lookup per input (an
  // optimizer step's graph has over a thousand inputs).
  std::unordered_map<const void*, uint32_t> first_of;
  first_of.reserve(data_positions_.size());
  for (uint32_t position : data_positions_) {
    const void* identity = storageIdentity(nodes_[position]->data());
    const auto cls = static_cast<uint32_t>(alias_classes_.size());
    alias_classes_.push_back(first_of.emplace(identity, cls).first->second);
  }
}

void Graph::computeHash() {
  HashValue h = hashCombine(0, nodes_.size()), blind = h;
  has_positions_ = false;
  for (size_t position = 0; position < nodes_.size(); ++position) {
    const Node& node = *nodes_[position];
    h = hashCombine(h, node.localHash());
    blind = hashCombine(blind, node.localPositionBlindHash());
    has_positions_ =
        has_positions_ || (node.kind() == OpKind::kAten && !node.aten().position_args.empty());
    for (const NodeRef& ref : inputsOf(position)) {
      h = hashCombine(hashCombine(h, ref.position), ref.index);
      blind = hashCombine(hashCombine(blind, ref.position), ref.index);
    }
  }
  for (uint32_t cls : alias_classes_) {
    h = hashCombine(h, cls);
    blind = hashCombine(blind, cls);
  }
  body_hash_ = h;
  blind_body_hash_ = blind;
  hashOutputs();
}

void Graph::hashOutputs() {
  HashValue h = body_hash_, blind = blind_body_hash_;
  for (const NodeRef& out : outputs_) {
    h = hashCombine(hashCombine(h, out.position), out.index);
    blind = hashCombine(hashCombine(blind, out.position), out.index);
  }
  hash_ = h;
  blind_hash_ = blind;
}

std::vector<int64_t> Graph::positionValues(c10::ArrayRef<uint32_t> positions) const {
  std::vector<int64_t> values;
  for (uint32_t position : positions) {
    const std::vector<int64_t> own = nodes_.at(position)->positionValues();
    values.insert(values.end(), own.begin(), own.end());
  }
  return values;
}

std::vector<int64_t> Graph::positionValues() const {
  std::vector<int64_t> values;
  if (!has_positions_) return values;
  for (const NodePtr& node : nodes_) {
    const std::vector<int64_t> own = node->positionValues();
    values.insert(values.end(), own.begin(), own.end());
  }
  return values;
}

}  // namespace lazyfuse
