#pragma once

// From a graph to a runnable plan: lowering (fused or node by node, Note [When graphs are
// fused]), rendering and compiling the fused kernels for the hardware device (C++ for the CPU,
// CUDA C++ through NVRTC for a GPU), and the dumps LAZYFUSE_DUMP asks for.

#include "kernels/cpu_compiler.h"
#include "kernels/cuda_emulation.h"
#include "kernels/cuda_runner.h"
#include "kernels/extern_runner.h"
#include "lazy_ir/graph.h"
#include "lowering/execution_plan.h"

#include <memory>
#include <string>
#include <vector>

namespace lazyfuse {

/// A plan with its fused kernels compiled for one target.
struct CompiledPlan {
  ExecutionPlan plan;
  std::shared_ptr<const CpuModule> cpu;  // CPU target
  std::vector<CpuKernelFn> cpu_kernels;
  std::shared_ptr<const CudaModule> cuda;  // CUDA target
  std::shared_ptr<const CudaEmulatedModule> emulated;  // CUDA target run on the CPU (tests)
  /// Runs node by node only because the graph is small: the graph cache compiles it fused once
  /// it recurs. See Note [Fusing recurring small graphs].
  bool fuse_when_recurring = false;
  /// Runs on a GPU, or under CUDA emulation: a plan CUDA graph replay may capture.
  bool cuda_target = false;

  /// Runs fused kernel `index` on the target it was compiled for.
  KernelLauncher launcher() const;
  /// Runs kernel batch `index` as one launch where the target has batch kernels, else empty
  /// (runPlan then runs the members one by one).
  BatchLauncher batchLauncher() const;
};

/// Lowers `graph` and compiles its fused kernels; a compile failure falls back to node-by-node
/// execution of the graph (logged, counted in FusionFallback), never to a wrong result.
/// `recurring`: the graph has run often enough that it is fused whatever its size (unless
/// LAZYFUSE_FUSION is 0).
std::shared_ptr<const CompiledPlan> compilePlan(const Graph& graph, bool recurring = false);

/// The plan compilePlan starts from: `graph` lowered for the hardware device, fused or node by
/// node as LAZYFUSE_FUSION and the graph's size decide (`fuse_when_recurring`, when given, says
/// whether a small graph will be fused once it recurs).
ExecutionPlan lowerForTarget(const Graph& graph, bool recurring = false,
                             bool* fuse_when_recurring = nullptr);

/// True when LAZYFUSE_DUMP names `what` (ir, plan, cpp, cuda).
bool dumpRequested(const char* what);
/// Writes `text` to $LAZYFUSE_DUMP_DIR/lazyfuse-<what>-<graph hash><ext>.
void writeDump(const Graph& graph, const char* what, const char* ext, const std::string& text);

}  // namespace lazyfuse
