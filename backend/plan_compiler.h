#pragma once

// From a graph to a runnable plan: the target of the process (Note [Targets]), lowering for it
// (fused or node by node, Note [When graphs are fused]), compiling the fused kernels through it,
// and the dumps LAZYFUSE_DUMP asks for.

#include "kernels/target.h"
#include "lazy_ir/graph.h"
#include "lowering/execution_plan.h"

#include <memory>
#include <string>
#include <vector>

namespace lazyfuse {

/// A plan with its fused kernels compiled for one target.
struct CompiledPlan {
  ExecutionPlan plan;
  /// The target it was lowered for (also when it runs node by node).
  const Target* target = nullptr;
  /// Its fused kernels; null when it has none.
  std::shared_ptr<const CompiledKernels> kernels;
  /// Runs node by node only because the graph is small: the graph cache compiles it fused once
  /// it recurs. See Note [Fusing recurring small graphs].
  bool fuse_when_recurring = false;

  /// Whether its runs may be captured and replayed (Note [CUDA graph replay]).
  bool replayable() const { return target != nullptr && target->capabilities().graph_replay; }
};

/// The target of this graph's kernels: the hardware device's, or CUDA emulation on the CPU when
/// LAZYFUSE_CUDA_EMULATION asks for it (read at each graph).
const Target& chooseTarget();

/// Lowers `graph` and compiles its fused kernels; a compile failure falls back to node-by-node
/// execution of the graph (logged, counted in FusionFallback), never to a wrong result.
/// `recurring`: the graph has run often enough that it is fused whatever its size (unless
/// LAZYFUSE_FUSION is 0).
std::shared_ptr<const CompiledPlan> compilePlan(const Graph& graph, bool recurring = false);

/// The plan compilePlan starts from: `graph` lowered for `target`, fused or node by node as
/// LAZYFUSE_FUSION and the graph's size decide (`fuse_when_recurring`, when given, says whether
/// a small graph will be fused once it recurs).
ExecutionPlan lowerForTarget(const Graph& graph, const Target& target, bool recurring = false,
                             bool* fuse_when_recurring = nullptr);

/// True when LAZYFUSE_DUMP names `what` (ir, plan, cpp, cuda).
bool dumpRequested(const char* what);
/// Writes `text` to $LAZYFUSE_DUMP_DIR/lazyfuse-<what>-<graph hash><ext>.
void writeDump(const Graph& graph, const char* what, const char* ext, const std::string& text);

}  // namespace lazyfuse
