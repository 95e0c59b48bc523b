#pragma once

// A Graph is one cut of the trace: the nodes that the requested values need, in topological
// order, with inputs as positions. It is what gets hashed, lowered and run.

#include "lazy_ir/node.h"

#include <c10/util/ArrayRef.h>

#include <string>
#include <utility>
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

  /// Adds outputs (values of nodes already in the graph) after the roots, and rehashes.
  void addOutputs(c10::ArrayRef<NodeRef> outputs);

  /// A device-data input that stands for a node a sync computed earlier (setComputed).
  struct ComputedInput {
    uint32_t position = 0;  // of the device-data node in this graph
    NodePtr owner;          // the computed node (this reference is the graph's)
    uint32_t uses = 0;      // how many inputs of this graph's nodes name `owner`
    uint32_t resolved = 0;  // how many of them read this device data: inputsOf() lists them
                            // at `position`, though they name `owner`, not the device data
  };
  const std::vector<ComputedInput>& computedInputs() const { return computed_inputs_; }

  /// Stores `outputs`, one buffer per output of `node`, as its value: from then on a graph reads
  /// device data in its place, and `node` lets go of its inputs. A node computed already keeps
  /// its first value. See Note [Values a sync keeps for later] in backend/kept_values.cpp.
  static void setComputed(const NodePtr& node, std::vector<at::Tensor> outputs);
  /// Marks `node`, which a failed sync should have computed, as having no value: a graph that
  /// reads it raises `error` (the sync overwrote memory it reads; Note [Failed syncs]).
  static void setFailed(const NodePtr& node, std::string error);
  /// The device-data node standing for `value` once its node was computed, else null.
  static NodePtr computedValue(const Value& value);

 private:
  void computeAliasClasses();
  void computeHash();
  void hashOutputs();
  static std::pair<Node*, uint32_t> resolveLocked(const Value& value);

  std::vector<NodePtr> nodes_;
  std::vector<uint32_t> input_offsets_;
  std::vector<NodeRef> input_refs_;
  std::vector<NodeRef> outputs_;
  std::vector<uint32_t> data_positions_;
  std::vector<uint32_t> alias_classes_;
  std::vector<ComputedInput> computed_inputs_;
  HashValue body_hash_ = 0;  // the hash of everything but the outputs
  HashValue hash_ = 0;
};

/// Readable text: one line per node, `%3 = aten::add.Tensor(%1, %2, alpha=$0) : f32[4, 4]`.
std::string printText(const Graph& graph);
/// Graphviz dot.
std::string printDot(const Graph& graph);

}  // namespace lazyfuse
