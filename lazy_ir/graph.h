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
//
// Note [Positions as plan arguments]
// A loop that writes or reads a tensor at a Python-int position (`cache[:, t] = k`,
// `x.narrow(1, t, 1)`, `x[:, t]`) records select, slice or narrow with t as a constant, so each
// position used to be a graph of its own, lowered and rendered again for every t. The int
// arguments that say where a view starts (AtenCallAttrs::position_args) are therefore left out of
// a second hash, positionBlindHash, which finds cached plans (backend/graph_cache.cpp); their
// sizes, strides and dtypes stay in it, so graphs of one blind hash differ in offsets alone. A
// plan serves every value of the positions it does not bake in:
//   - an extern step's node gives its ATen call the arguments of the graph being run;
//   - a region write (Note [Region writes]) takes the offset of its region from the graph being
//     run (regionOffset), as the views of its chain give it;
//   - a strided view of a buffer (Note [Strided views of buffers]) moves its offset by the
//     difference of the starts of the views at a position between the buffer and itself
//     (StridedView::shifts, viewOffset), when each of those starts in a dimension whose stride
//     over the buffer the plan knows (it views the buffer, or a select, slice or narrow of it).
// Positions of any other node (a view a fused kernel indexes, or that a kernel copies out) are
// baked into the plan: the plan lists those nodes (ExecutionPlan::position_guards), and the cache
// serves it only to graphs whose values there are the ones it was lowered with; another value
// lowers a plan of its own, cached beside it (on the CPU, its kernels come from the families of
// Note [Shape-generic kernels]). A CUDA graph bakes every position its run saw, so the replay
// state of a plan is kept per value of all of them (Note [CUDA graph replay]).
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
  /// The hash without the values of position arguments: what a cached plan is found by (Note
  /// [Positions as plan arguments]). Equal to another graph's when their hashes are, and when
  /// they differ in where views start alone.
  HashValue positionBlindHash() const { return blind_hash_; }
  /// The values of the position arguments of the nodes at `positions`, in order.
  std::vector<int64_t> positionValues(c10::ArrayRef<uint32_t> positions) const;
  /// The values of every position argument of the graph, in node order.
  std::vector<int64_t> positionValues() const;

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
  HashValue blind_body_hash_ = 0;  // as body_hash_ and hash_, without position values
  HashValue blind_hash_ = 0;
  bool has_positions_ = false;  // some node has position arguments
};

/// Readable text: one line per node, `%3 = aten::add.Tensor(%1, %2, alpha=$0) : f32[4, 4]`.
std::string printText(const Graph& graph);
/// Graphviz dot.
std::string printDot(const Graph& graph);

}  // namespace lazyfuse
