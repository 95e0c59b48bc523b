#pragma once

// Which ATen ops lazyfuse compiles itself, and how. See Note [Loop graph].

#include "lowering/lowering_call.h"

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lazyfuse {

enum class OpClass : uint8_t { kPointwise, kReduction, kView, kScatter, kExtern, kRandom };

struct OpName {
  std::string op;        // "add"
  std::string overload;  // "Tensor", or empty
};
OpName splitOpName(const std::string& name);

/// The class of a recorded op by its name: the class its lowering was registered with. Random
/// ops are kRandom; ops outside aten and ops without a lowering are kExtern (ATen calls).
OpClass classifyOp(const std::string& name);
const char* opClassName(OpClass kind);

/// Whether `name` (`aten::_fused_adam_`, `aten::_fused_sgd.tensor_lr`, ...) is one of
/// torch.optim's fused optimizer steps, in-place or functional, of any overload: `_fused_adam`,
/// `_fused_adamw`, `_fused_sgd`, `_fused_adagrad` (Note [Fused optimizer steps] in
/// backend/write_functionalization.cpp).
bool isFusedOptimizerOp(std::string_view name);

/// Whether `name` is an op that draws random numbers by its name (`bernoulli`, `*_dropout`, ...):
/// such an op is never lowered (its lowering would draw other numbers than ATen's).
bool isRandomOp(const std::string& name);

/// Makes the loop nodes of one call (call.outputs) and returns true, or returns false when the
/// op runs as an ATen call.
using LoweringFn = std::function<bool(LoweringCall&)>;

struct Lowering {
  OpClass kind = OpClass::kPointwise;
  LoweringFn fn;
};

// Note [Lowering registry]
// Each lowering is registered for the ATen ops it lowers, as Inductor's `register_lowering`:
// an overload (`aten::add.Tensor`; `aten::round.default` is the overload without a name) or
// every overload of an op (`aten::add`). `lowerCall` finds a node's lowering by its overload
// first, then by its op; an op found in neither runs as an ATen call, and so does a call whose
// lowering returns false. The families register theirs in `register*Lowerings` (lower_ops.h),
// each called once from `loweringRegistry()`, the table's one builder: explicit calls, not
// static initializers, which a static library linked into liblazyfuse.so could drop.
class LoweringRegistry {
 public:
  /// Registers `fn` for each of `ops` (names as in Note [Lowering registry]); a name registered
  /// twice, outside aten or of a random op is an internal error.
  void add(OpClass kind, std::initializer_list<std::string_view> ops, const LoweringFn& fn);
  void add(OpClass kind, const std::string& op, const LoweringFn& fn);
  /// The lowering of the recorded op `name` (`aten::add.Tensor`), or nullptr.
  const Lowering* find(const std::string& name) const;
  /// Every registered name, sorted.
  std::vector<std::string> names() const;

 private:
  std::unordered_map<std::string, Lowering> table_;
};

/// The registry of every lowering, built on first use.
const LoweringRegistry& loweringRegistry();

/// Whether the ATen op `name` (`aten::mm`) computes the same for an input of any strides and
/// storage offset (a strided view of a larger buffer) as for a fresh one: matmuls and
/// convolutions, which take transposed operands as they are. Ops that read storage or need
/// certain strides (as_strided_copy, view_copy.dtype, view_as_complex_copy) are not. See Note
/// [Strided views of buffers].
bool readsAnyLayout(const std::string& name);

/// Fills call.outputs (one loop node per node output) with the op's registered lowering and
/// returns true, or returns false when the op runs as an ATen call.
bool lowerCall(LoweringCall& call);

}  // namespace lazyfuse
