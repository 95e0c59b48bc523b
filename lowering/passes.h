#pragma once

#include "lowering/execution_plan.h"

namespace lazyfuse {

/// Appends one extern step per ATen node, in graph order. Afterwards every ATen node has a step,
/// except, with `region_writes`, the nodes a region write takes the place of, which it computes
/// in one step (Note [Region writes]), and what only those nodes read.
bool scheduleExternCalls(const Graph& graph, ExecutionPlan& plan, bool region_writes = false);

/// Lowers the graph into fused kernels where it can and extern steps where it cannot, in an
/// order that respects every dependency. Afterwards every ATen node's outputs that anything
/// needs are computed by some step, and a value is in memory only when it is a graph output,
/// feeds an extern step, or is read by another kernel. See Note [Fusion partitioning].
bool partitionGraph(const Graph& graph, ExecutionPlan& plan,
                    KernelTarget target = KernelTarget::kCpu);

/// Gathers independent fused kernels that differ only in sizes and bindings into kernel batches
/// (Note [Kernel batches]), reordering kernel steps between extern steps where dependencies
/// allow. Run before computeLifetimes.
bool batchKernels(const Graph& graph, ExecutionPlan& plan);
/// What the kernels of one batch have in common (equal for kernels that may batch), or "" for
/// a kernel that cannot be in a batch. See Note [Kernel batches].
std::string batchKey(const Kernel& kernel);

/// Drops trailing size-1 dimensions of `kernel`'s domain (a kernel without reductions) and merges
/// into its last dimension the dimensions before it that every index walks as one with it,
/// rewriting its index expressions. See Note [Coalescing kernel domains].
void coalesceDomain(Kernel& kernel);

constexpr uint32_t kNeverUsed = UINT32_MAX;
/// For each node position, the index of the last step that reads or writes it (kNeverUsed if
/// none).
std::vector<uint32_t> lastUses(const Graph& graph, const ExecutionPlan& plan);

/// Fills `release_after` so every intermediate buffer is dropped after its last use. Afterwards
/// each node position that is neither device data nor a graph output is released exactly once.
bool computeLifetimes(const Graph& graph, ExecutionPlan& plan);

/// Finds, for the outputs of fused kernels, inputs whose memory they may be written into: an
/// input read only by that kernel, last, at the index the output is written, with the output's
/// layout (device data: with no extern step after). Run after computeLifetimes. See Note
/// [Donated buffers].
bool planDonations(const Graph& graph, ExecutionPlan& plan);

/// Fills plan.step_labels (Note [Plan steps in the profiler]).
void labelSteps(const Graph& graph, ExecutionPlan& plan);

/// Fills plan.position_guards: the nodes whose position arguments the plan bakes in (Note
/// [Positions as plan arguments]).
void findPositionGuards(const Graph& graph, ExecutionPlan& plan);

}  // namespace lazyfuse
