#pragma once

// The fusion partitioner, whose steps live in lowering/partition.cpp (lower),
// lowering/partition_realize.cpp (realize) and lowering/partition_group.cpp (group). See Note
// [Fusion partitioning].

#include "lazy_ir/graph.h"
#include "lowering/execution_plan.h"
#include "lowering/kernel_emitter.h"

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace lazyfuse::detail {

class Partitioner {
 public:
  Partitioner(const Graph& graph, KernelTarget target)
      : graph_(graph), target_(target), p_(graph.nodes().size()) {}

  void run(ExecutionPlan& plan);

 private:
  // 1. Lower (partition.cpp).
  void lowerNodes();
  LoopId addBuffer(uint32_t pos, uint32_t k, const TensorMeta& meta);
  LoopId addLoop(LoopNode node, std::optional<NodeRef> ref);
  bool tryLower(uint32_t pos);

  // 2. Realize (partition_realize.cpp).
  void markRealized();
  /// The loop node that must be in memory for graph value `ref` to be: its own, or, when the
  /// value can be a view of another value's buffer, that value's (the view is recorded). Unless
  /// `any_layout`, only a whole rename qualifies: a view indistinguishable from a fresh tensor.
  LoopId inMemory(const NodeRef& ref, bool any_layout);
  /// The inputs extern step `pos` reads as any layout (`any_layout`) or as fresh tensors: a
  /// region write's base, index and source (Note [Region writes]), another extern's inputs.
  std::vector<NodeRef> externInputs(uint32_t pos, bool any_layout) const;
  LoopId rootOf(const StridedView& view) const;
  /// An input of an extern that reads any layout, written as a copy of part of its root because
  /// the root was not known to be in memory when the input was seen, becomes a strided view of
  /// it once the root turns out to be written anyway (the cache of an attention step, whose
  /// slabs the matmuls read).
  void viewRealizedRoots();
  /// The view has the value's own layout, and covers its root's buffer exactly (so neither
  /// holds on to a larger buffer nor lets an op read past its end).
  bool isWholeRename(const StridedView& view) const;
  /// Realizes every kMaxInlineDepth-th node of a long inlined chain: kernels are built by
  /// recursion through inlined nodes, and memory traffic is cheap next to a stack overflow.
  void capInlineDepth();
  /// True when every input of `id` is in memory (through views): recomputing it reads what
  /// reading it back would, so it is never worth writing.
  bool readsOnlyMemory(LoopId id) const;
  /// Whether `id`'s consumers (looking through views) may end up in different kernels.
  bool sharedAcrossKernels(LoopId id, const std::vector<std::vector<LoopId>>& users) const;
  /// Writes values read on both sides of an extern call that are more than a short expression.
  /// See Note [Values read on both sides of an extern call].
  void realizeAcrossExterns(const std::vector<std::vector<LoopId>>& users);
  /// Whether `id` is a short pointwise expression: recomputing it inside a reduction's loop and
  /// again in the kernel of its other consumers costs less than writing it to memory and reading
  /// it back (softmax's exp(x - max), layer norm backward's dy * weight).
  bool cheapToRecompute(LoopId id) const;

  // 3. Group (partition_group.cpp).
  /// Realized nodes a node reads, each with whether every read is at the node's own index.
  using Reads = std::vector<std::pair<LoopId, bool>>;
  void group();
  /// Appends the kStridedView step of loop node `id` if it is a view that has none yet.
  void addViewStep(LoopId id);
  /// Whether a node with `reads` can be computed in group `gid`.
  bool canJoin(const Reads& reads, const KernelGroup& g, int32_t gid) const;
  void collectReads(LoopId id, Reads& reads) const;

  const Graph& graph_;
  KernelTarget target_;
  Partition p_;
  uint32_t unfused_ = 0;  // see ExecutionPlan::unfused_nodes
};

}  // namespace lazyfuse::detail
