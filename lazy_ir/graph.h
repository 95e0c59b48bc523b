#pragma once

// A Graph is one cut of the trace: the nodes that the requested values need, in topological
// order, with inputs as positions. It is what gets hashed, lowered and run.

#include "lazy_ir/node.h"

#include <c10/util/ArrayRef.h>

#include <string>
#include <vector>

namespace lazyfuse {

/// Output `index` of the node at `position` in a Graph.
struct NodeRef {
  uint32_t position = 0;
  uint32_t index = 0;
};

// Note [What a graph hash covers]
// The hash covers, in node order: each node's op, constants and output dtypes/shapes/strides,
// its inputs as positions, which device-data inputs alias each other (share storage), and the
// graph outputs. Never data values (scalars are parameters), buffer addresses or node ids. Two
// graphs with equal hashes therefore lower to the same plan. Pinned by test/cpp/test_graph.cpp.
class Graph {
 public:
  /// The nodes `roots` depend on, each once, inputs before users; roots in the given order.
  static Graph fromRoots(c10::ArrayRef<Value> roots);

  const std::vector<NodePtr>& nodes() const { return nodes_; }
  c10::ArrayRef<NodeRef> inputsOf(size_t position) const;
  const std::vector<NodeRef>& outputs() const { return outputs_; }
  /// Positions of the device-data nodes (the graph inputs), in node order.
  const std::vector<uint32_t>& dataPositions() const { return data_positions_; }
  /// For each device-data input, the index of the first input sharing its storage.
  const std::vector<uint32_t>& aliasClasses() const { return alias_classes_; }
  HashValue hash() const { return hash_; }

 private:
  void computeAliasClasses();
  void computeHash();

  std::vector<NodePtr> nodes_;
  std::vector<uint32_t> input_offsets_;
  std::vector<NodeRef> input_refs_;
  std::vector<NodeRef> outputs_;
  std::vector<uint32_t> data_positions_;
  std::vector<uint32_t> alias_classes_;
  HashValue hash_ = 0;
};

/// Readable text: one line per node, `%3 = aten::add.Tensor(%1, %2, alpha=$0) : f32[4, 4]`.
std::string printText(const Graph& graph);
/// Graphviz dot.
std::string printDot(const Graph& graph);

}  // namespace lazyfuse
