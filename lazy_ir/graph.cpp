#include "lazy_ir/graph.h"

#include "lazy_ir/check.h"

#include <mutex>

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

Graph Graph::fromRoots(c10::ArrayRef<Value> roots) {
  std::lock_guard<std::mutex> lock(buildMutex());
  const uint64_t mark = nextMark();
  Graph graph;
  // Iterative post-order DFS; a node is placed once all its inputs are placed.
  std::vector<std::pair<Node*, size_t>> stack;
  for (const Value& root : roots) {
    LF_INTERNAL_ASSERT(root.node, "graph root without a node");
    if (root.node->mark_ == mark) continue;
    root.node->mark_ = mark;
    stack.emplace_back(root.node.get(), 0);
    while (!stack.empty()) {
      auto& [node, next_input] = stack.back();
      if (next_input < node->inputs_.size()) {
        Node* input = node->inputs_[next_input++].node.get();
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
  for (const NodePtr& node : graph.nodes_) {
    graph.input_offsets_.push_back(static_cast<uint32_t>(graph.input_refs_.size()));
    for (const Value& input : node->inputs_) {
      graph.input_refs_.push_back({input.node->position_, input.index});
    }
    if (node->kind() == OpKind::kDeviceData) graph.data_positions_.push_back(node->position_);
  }
  graph.input_offsets_.push_back(static_cast<uint32_t>(graph.input_refs_.size()));
  for (const Value& root : roots) graph.outputs_.push_back({root.node->position_, root.index});
  graph.computeAliasClasses();
  graph.computeHash();
  return graph;
}

c10::ArrayRef<NodeRef> Graph::inputsOf(size_t position) const {
  const uint32_t begin = input_offsets_.at(position);
  const uint32_t end = input_offsets_.at(position + 1);
  return c10::ArrayRef<NodeRef>(input_refs_.data() + begin, end - begin);
}

void Graph::computeAliasClasses() {
  std::vector<const void*> identities;
  identities.reserve(data_positions_.size());
  for (uint32_t position : data_positions_) {
    const void* identity = storageIdentity(nodes_[position]->data());
    uint32_t cls = static_cast<uint32_t>(identities.size());
    for (uint32_t i = 0; i < identities.size(); ++i) {
      if (identities[i] == identity) {
        cls = alias_classes_[i];
        break;
      }
    }
    identities.push_back(identity);
    alias_classes_.push_back(cls);
  }
}

void Graph::computeHash() {
  HashValue h = hashCombine(0, nodes_.size());
  for (size_t position = 0; position < nodes_.size(); ++position) {
    h = hashCombine(h, nodes_[position]->localHash());
    for (const NodeRef& ref : inputsOf(position)) {
      h = hashCombine(hashCombine(h, ref.position), ref.index);
    }
  }
  for (uint32_t cls : alias_classes_) h = hashCombine(h, cls);
  for (const NodeRef& out : outputs_) h = hashCombine(hashCombine(h, out.position), out.index);
  hash_ = h;
}

}  // namespace lazyfuse
