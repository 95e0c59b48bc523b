#pragma once

// The IR: one node type, one list of op kinds. A Node is immutable once made, but for one step:
// a sync that computed it for later graphs stores its value and lets go of its inputs (Note
// [Values a sync keeps for later] in backend/kept_values.cpp). Its identity is the node
// itself, never a name. Nodes are reference counted and point at their inputs, so a pending lazy
// tensor keeps alive exactly the trace it needs.

#include "lazy_ir/hash.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lazyfuse {

enum class OpKind : uint8_t {
  kDeviceData,  // a buffer already on the hardware device: a graph input
  kAten,        // one ATen operator call; see AtenCallAttrs
};

/// dtype, sizes and strides of one tensor value: everything about it that changes generated code.
struct TensorMeta {
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;

  static TensorMeta of(const at::Tensor& tensor);
  int64_t numel() const;
  HashValue hash(HashValue seed) const;
  bool operator==(const TensorMeta& other) const {
    return dtype == other.dtype && sizes == other.sizes && strides == other.strides;
  }
};

// Note [Argument recipes]
// An ATen node stores how to rebuild its operator's boxed stack: each schema argument is a slot
// that takes node inputs (tensors), a constant (hashed: ints, lists, dtypes, ...), or a parameter
// (not hashed: Scalars, generators, CPU scalar tensors). Parameters are why `x + 1` and `x + 2`
// share one graph. The node's outputs are first the new values of the arguments the op writes
// (in-place and out= ops), then its tensor returns.
enum class ArgKind : uint8_t {
  kTensor,              // the next node input
  kOptionalTensor,      // the next node input if present[0], else None
  kTensorList,          // present.size() node inputs
  kOptionalTensorList,  // entry i is the next node input if present[i], else None
  kConstant,            // `constant`
  kParam,               // the next entry of Node::params()
};

struct ArgSlot {
  ArgKind kind = ArgKind::kConstant;
  bool mutated = false;  // the op writes this tensor argument
  std::vector<uint8_t> present;
  c10::IValue constant;
};

enum class ReturnKind : uint8_t {
  kTensor,           // one node output
  kTensorList,       // `count` node outputs
  kUndefinedTensor,  // an undefined tensor, no output
  kMutatedArg,       // returns argument `arg`, which the op wrote (its output is listed first)
};

struct ReturnSlot {
  ReturnKind kind = ReturnKind::kTensor;
  uint32_t count = 1;
  uint32_t arg = 0;
};

/// Everything about one recorded ATen call except its inputs and parameters. Shared by every node
/// recorded from the same operator on the same input metadata (the meta cache hands it out).
struct AtenCallAttrs {
  c10::OperatorHandle op;
  std::string name;  // "aten::add.Tensor"
  std::vector<ArgSlot> args;
  std::vector<ReturnSlot> returns;
  std::vector<TensorMeta> outputs;
  uint32_t num_inputs = 0;
  uint32_t num_params = 0;
  HashValue hash = 0;
  /// `hash` with the values of the position arguments left out: Note [Positions as plan
  /// arguments] in lazy_ir/graph.h.
  HashValue position_blind_hash = 0;
  /// Schema positions of the constant int arguments that say where a view starts (select's
  /// index, slice's start and end, narrow's start), in order; empty for other ops.
  std::vector<uint32_t> position_args;

  explicit AtenCallAttrs(c10::OperatorHandle handle) : op(std::move(handle)) {}
  /// Computes `hash` from name, constants, slot shapes and output metadata.
  void finalize();
  /// Combines a call's meta-cache key into `hash`, and the key without its position values into
  /// position_blind_hash.
  void combineIntoHash(HashValue key, HashValue blind_key) {
    hash = hashCombine(hash, key);
    position_blind_hash = hashCombine(position_blind_hash, blind_key);
  }
};

/// Schema positions of the arguments of op `name` ("aten::select_copy.int") that say where its
/// view starts: Note [Positions as plan arguments] in lazy_ir/graph.h.
std::vector<uint32_t> positionArgsOf(const std::string& name);

class Node;
using NodePtr = c10::intrusive_ptr<Node>;

/// One output of one node.
struct Value {
  NodePtr node;
  uint32_t index = 0;
  const TensorMeta& meta() const;
};

class Node final : public c10::intrusive_ptr_target {
 public:
  /// A graph input holding `data`, a tensor on the hardware device.
  static NodePtr deviceData(at::Tensor data);
  /// An ATen call; checks that inputs and params match the recipe in `attrs`.
  static NodePtr aten(std::shared_ptr<const AtenCallAttrs> attrs, std::vector<Value> inputs,
                      std::vector<c10::IValue> params);

  OpKind kind() const { return kind_; }
  uint64_t id() const { return id_; }
  const std::vector<Value>& inputs() const { return inputs_; }
  size_t numOutputs() const;
  const TensorMeta& outputMeta(size_t index) const;
  const AtenCallAttrs& aten() const;
  const std::vector<c10::IValue>& params() const { return params_; }
  const at::Tensor& data() const { return data_; }
  /// Marks the graphs that hold this node to compile generic kernels from their first compile
  /// (lazyfuse.mark_dynamic: Note [Shape-generic kernels]); not part of any hash.
  void markDynamic() { dynamic_.store(true, std::memory_order_relaxed); }
  bool markedDynamic() const { return dynamic_.load(std::memory_order_relaxed); }
  /// Hash of this node alone: op, constants and output metadata; not inputs, params or data.
  HashValue localHash() const;
  /// localHash without the values of its position arguments (AtenCallAttrs::position_args).
  HashValue localPositionBlindHash() const;
  /// The values of its position arguments, in order; empty when it has none.
  std::vector<int64_t> positionValues() const;
  std::string opName() const;

 private:
  struct Private {};

 public:
  Node(Private, OpKind kind, std::vector<Value> inputs);  // use deviceData() or aten()

 private:
  OpKind kind_;
  uint64_t id_;
  std::vector<Value> inputs_;
  std::shared_ptr<const AtenCallAttrs> attrs_;
  std::vector<c10::IValue> params_;
  at::Tensor data_;
  TensorMeta data_meta_;

  // Scratch for Graph::fromRoots, which holds a lock while it uses them.
  mutable uint64_t mark_ = 0;
  mutable uint32_t position_ = 0;
  // Once a sync computed this node for later graphs: a device-data node per output, which
  // graphs read in its place (Graph::setComputed). Guarded by the same lock.
  std::vector<NodePtr> computed_;
  std::string failed_;  // why this node has no value (Graph::setFailed); guarded by that lock
  std::atomic<bool> dynamic_{false};
  friend class Graph;
};

}  // namespace lazyfuse
