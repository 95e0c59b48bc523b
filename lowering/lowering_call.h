#pragma once

// What a lowering sees of the ATen node it lowers, and the helpers it builds loop nodes with.
// See Note [Loop graph].

#include "lowering/loop_graph.h"

#include <ATen/core/function_schema.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
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

// Note [Arguments by name]
// A lowering names the arguments it reads as its op's schema names them (`call.tensor("self")`,
// `call.constant("dim")`, `call.pointwise({"self", "other"}, ...)`); CallArgs finds each name's
// position with FunctionSchema::argumentIndexWithName. The schema is the node's own, or, for an
// element of a `_foreach_*` node, the schema of the pointwise op the element is (Note [Foreach
// lowering]): its arguments line up with the foreach op's by position, under other names. An
// unknown name is an internal error naming op and argument, never a decline. Names are resolved
// when the loop node is made: compute closures capture positions (the ArgIndex a lowering gets
// from `index`), not names, because they run for every kernel that reads the node.

/// The position of a schema argument, as `CallArgs::index` resolved it.
using ArgIndex = size_t;

/// The arguments of one ATen node as a kernel reads them. Shared (immutable) by the compute
/// closures of the loop nodes its lowering makes; they run while kernels are built, when the
/// node and the loop graph are alive.
class CallArgs {
 public:
  /// `element` >= 0 reads the node as its element-th pointwise op: tensor lists give their
  /// element-th tensor and Scalar[] parameters their element-th scalar (a `_foreach_*` node);
  /// `extra` are constants for arguments past the node's own (defaults its schema lacks).
  /// Argument names are looked up in `schema` (default: the node's op's).
  CallArgs(const LoopGraph& loops, const Node& node, int32_t position, std::vector<LoopId> inputs,
           int32_t element = -1, std::vector<c10::IValue> extra = {},
           const c10::FunctionSchema* schema = nullptr);

  const AtenCallAttrs& attrs() const { return node_.aten(); }
  const c10::FunctionSchema& schema() const { return *schema_; }
  /// The position of the argument `name` (Note [Arguments by name]).
  ArgIndex index(std::string_view name) const;
  /// Whether the schema has an argument `name` (for lowerings of several ops).
  bool has(std::string_view name) const;

  std::optional<LoopId> tensor(std::string_view name) const { return tensor(index(name)); }
  const c10::IValue& constant(std::string_view name) const { return constant(index(name)); }
  bool isNone(std::string_view name) const { return isNone(index(name)); }
  c10::Scalar scalarValue(std::string_view name) const { return scalarValue(index(name)); }

  // The same by position, for closures that captured one (index()).

  /// The loop node of tensor argument `arg`, or nullopt when it is absent (None).
  std::optional<LoopId> tensor(ArgIndex arg) const;
  const c10::IValue& constant(ArgIndex arg) const;
  bool isNone(ArgIndex arg) const;
  /// A Scalar argument's value when it is a constant, or the first recorded value of a parameter
  /// (only for decisions that the graph hash pins, such as its kind).
  c10::Scalar scalarValue(ArgIndex arg) const;
  /// Argument `arg` at `index`: a tensor broadcast to it, a Scalar parameter or a constant.
  KValue at(LoopContext& c, ArgIndex arg, const std::vector<IxPtr>& index) const;
  /// A Scalar argument (parameter or constant) as `dtype`.
  KValue scalar(LoopContext& c, ArgIndex arg, c10::ScalarType dtype) const;

 private:
  /// A parameter's value: its element in element mode when it is a Scalar[].
  const c10::IValue& paramOf(const ArgSource& source) const;

  const LoopGraph& loops_;
  const Node& node_;
  const c10::FunctionSchema* schema_;
  int32_t position_;
  std::vector<LoopId> inputs_;
  std::vector<ArgSource> sources_;
  int32_t element_;
  std::vector<c10::IValue> extra_;
};

class LoweringCall {
 public:
  LoweringCall(LoopGraph& loops, const Node& node, int32_t position, std::vector<LoopId> inputs,
               int32_t element = -1, std::vector<c10::IValue> extra = {},
               const c10::FunctionSchema* schema = nullptr);

  /// The call of element `element` of a `_foreach_*` node, as the pointwise op of `schema`,
  /// whose arguments past the node's own are `extra`. See CallArgs.
  LoweringCall element(int32_t element, std::vector<c10::IValue> extra,
                       const c10::FunctionSchema& schema) const;

  const Node& node() const { return node_; }
  const AtenCallAttrs& attrs() const { return node_.aten(); }
  LoopGraph& loops() { return loops_; }
  const LoopNode& loop(LoopId id) const { return loops_[id]; }
  const TensorMeta& out(size_t k = 0) const {
    return attrs().outputs.at(element_ >= 0 ? static_cast<size_t>(element_) + k : k);
  }
  /// For closures that read arguments while a kernel is built.
  const std::shared_ptr<const CallArgs>& args() const { return args_; }

  /// Arguments by name: see Note [Arguments by name].
  ArgIndex index(std::string_view name) const { return args_->index(name); }
  bool has(std::string_view name) const { return args_->has(name); }
  std::optional<LoopId> tensor(std::string_view name) const { return args_->tensor(name); }
  const c10::IValue& constant(std::string_view name) const { return args_->constant(name); }
  bool isNone(std::string_view name) const { return args_->isNone(name); }
  c10::Scalar scalarValue(std::string_view name) const { return args_->scalarValue(name); }

  /// A pointwise node over the output's sizes: `body` gets the arguments named `args` (tensors
  /// loaded at the broadcast index, scalars as parameters or constants) in their compute types.
  LoopId pointwise(const std::vector<std::string_view>& args, c10::ScalarType dtype,
                   PointwiseBody body, std::optional<std::vector<int64_t>> sizes = std::nullopt);
  /// A view of loop node `input` with `sizes`, reading input index `map(index)`.
  LoopId view(LoopId input, std::vector<int64_t> sizes, IndexMap map);
  /// Folds `input` over `dims` (sorted, distinct); `pre` maps each element first, `post` maps the
  /// result (both optional). The result has dtype `dtype`.
  LoopId reduce(LoopId input, std::vector<int64_t> dims, bool keepdim, ReduceKind kind,
                c10::ScalarType acc, c10::ScalarType dtype, ReduceFn pre = nullptr,
                ReduceFn post = nullptr);
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
