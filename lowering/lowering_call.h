#pragma once

// What a lowering sees of the ATen node it lowers, and the helpers it builds loop nodes with.
// See Note [Loop graph].

#include "lowering/loop_graph.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lazyfuse {

/// Where one schema argument of the node comes from.
struct ArgSource {
  ArgKind kind = ArgKind::kConstant;
  int32_t input = -1;  // first node input (tensors)
  int32_t count = 0;   // node inputs it takes
  int32_t param = -1;  // kParam: index into the node's params
};

using PointwiseBody = std::function<KValue(KernelBuilder&, const std::vector<KValue>&)>;
using IndexMap = std::function<std::vector<IxPtr>(const std::vector<IxPtr>&)>;
using ReduceFn = std::function<KValue(LoopContext&, KValue)>;

/// The arguments of one ATen node as a kernel reads them. Shared (immutable) by the compute
/// closures of the loop nodes its lowering makes; they run while kernels are built, when the
/// node and the loop graph are alive.
class CallArgs {
 public:
  /// `element` >= 0 reads the node as its element-th pointwise op: tensor lists give their
  /// element-th tensor and Scalar[] parameters their element-th scalar (a `_foreach_*` node);
  /// `extra` are constants for arguments past the node's own (defaults its schema lacks).
  CallArgs(const LoopGraph& loops, const Node& node, int32_t position, std::vector<LoopId> inputs,
           int32_t element = -1, std::vector<c10::IValue> extra = {});

  const AtenCallAttrs& attrs() const { return node_.aten(); }
  /// The loop node of tensor argument `arg`, or nullopt when it is absent (None).
  std::optional<LoopId> tensor(size_t arg) const;
  const c10::IValue& constant(size_t arg) const;
  bool isNone(size_t arg) const;
  /// A Scalar argument's value when it is a constant, or the first recorded value of a parameter
  /// (only for decisions that the graph hash pins, such as its kind).
  c10::Scalar scalarValue(size_t arg) const;
  /// Argument `arg` at `index`: a tensor broadcast to it, a Scalar parameter or a constant.
  KValue at(LoopContext& c, size_t arg, const std::vector<IxPtr>& index) const;
  /// A Scalar argument (parameter or constant) as `dtype`.
  KValue scalar(LoopContext& c, size_t arg, c10::ScalarType dtype) const;

 private:
  /// A parameter's value: its element in element mode when it is a Scalar[].
  const c10::IValue& paramOf(const ArgSource& source) const;

  const LoopGraph& loops_;
  const Node& node_;
  int32_t position_;
  std::vector<LoopId> inputs_;
  std::vector<ArgSource> sources_;
  int32_t element_;
  std::vector<c10::IValue> extra_;
};

class LoweringCall {
 public:
  LoweringCall(LoopGraph& loops, const Node& node, int32_t position, std::vector<LoopId> inputs,
               int32_t element = -1, std::vector<c10::IValue> extra = {});

  /// The call of element `element` of a `_foreach_*` node, as a pointwise op whose arguments
  /// past the node's own are `extra`. See CallArgs.
  LoweringCall element(int32_t element, std::vector<c10::IValue> extra) const;

  const Node& node() const { return node_; }
  const AtenCallAttrs& attrs() const { return node_.aten(); }
  LoopGraph& loops() { return loops_; }
  const LoopNode& loop(LoopId id) const { return loops_[id]; }
  const TensorMeta& out(size_t k = 0) const {
    return attrs().outputs.at(element_ >= 0 ? static_cast<size_t>(element_) + k : k);
  }
  /// For closures that read arguments while a kernel is built.
  const std::shared_ptr<const CallArgs>& args() const { return args_; }

  std::optional<LoopId> tensor(size_t arg) const { return args_->tensor(arg); }
  const c10::IValue& constant(size_t arg) const { return args_->constant(arg); }
  bool isNone(size_t arg) const { return args_->isNone(arg); }
  c10::Scalar scalarValue(size_t arg) const { return args_->scalarValue(arg); }

  /// A pointwise node over the output's sizes: `body` gets the arguments `args` (tensors loaded
  /// at the broadcast index, scalars as parameters or constants) in their compute types.
  LoopId pointwise(std::vector<size_t> args, c10::ScalarType dtype, PointwiseBody body,
                   std::optional<std::vector<int64_t>> sizes = std::nullopt);
  /// A view of loop node `input` with `sizes`, reading input index `map(index)`.
  LoopId view(LoopId input, std::vector<int64_t> sizes, IndexMap map);
  /// Folds `input` over `dims` (sorted, distinct); `pre` maps each element first, `post` maps the
  /// result (both optional). The result has dtype `dtype`.
  LoopId reduce(LoopId input, std::vector<int64_t> dims, bool keepdim, ReduceKind kind,
                c10::ScalarType acc, c10::ScalarType dtype,
                ReduceFn pre = nullptr, ReduceFn post = nullptr);
  /// A pointwise node of loop nodes `inputs`, broadcast to `sizes`.
  LoopId combine(std::vector<LoopId> inputs, std::vector<int64_t> sizes, c10::ScalarType dtype,
                 PointwiseBody body);

  std::vector<LoopId> outputs;

 private:
  LoopGraph& loops_;
  const Node& node_;
  int32_t position_;
  std::vector<LoopId> inputs_;
  int32_t element_;
  std::shared_ptr<const CallArgs> args_;
};

/// The index of a tensor of `sizes` broadcast to `index` (right-aligned, size-1 dims read 0).
std::vector<IxPtr> broadcastIndex(const std::vector<IxPtr>& index,
                                  const std::vector<int64_t>& sizes);
/// Normalizes a possibly negative dimension against `rank` (0-d tensors take 0 and -1).
int64_t wrapDim(int64_t dim, int64_t rank);

}  // namespace lazyfuse
