#pragma once

// An ExecutionPlan is what a Graph lowers to, and what the graph cache holds: an ordered list of
// steps, each a fused kernel or an extern call (the node's ATen kernel on the hardware device).
// A plan refers to nodes by their position, so it serves every graph with the same hash. See
// Note [What a graph hash covers].

#include "lazy_ir/graph.h"
#include "lowering/kernel_ir.h"

#include <vector>

namespace lazyfuse {

enum class StepKind : uint8_t {
  kExternCall,   // run the ATen kernel of the node at `position` on the hardware device
  kFusedKernel,  // run kernels[kernel]
  kKernelBatch,  // run the kernels of batches[batch], independent of each other, in any order
};

/// What one kernel buffer is at run time: a graph value (node output) or a plan temporary.
struct BufferBinding {
  bool temp = false;
  NodeRef value;      // !temp
  int32_t slot = -1;  // temp: index into the plan's temporaries
  TensorMeta meta;    // dtype, sizes and strides the kernel indexes it with
};

/// Kernel parameter k is parameter `index` of the node at `position`; for a Scalar[] parameter
/// (a foreach op's scalars), its entry `element`.
struct ParamBinding {
  uint32_t position = 0;
  uint32_t index = 0;
  bool floating = false;
  int32_t element = -1;
};

struct FusedKernel {
  Kernel kernel;
  std::vector<BufferBinding> buffers;  // one per kernel buffer
  std::vector<ParamBinding> params;    // one per kernel parameter
  int64_t grain = 1;                   // points per task when split across threads
};

/// Kernels that differ only in their sizes and in which buffers and parameters they bind: on a
/// GPU they run as one multi-tensor launch. See Note [Kernel batches].
struct KernelBatch {
  std::vector<int32_t> kernels;  // indices into ExecutionPlan::kernels, at least two
};

struct PlanStep {
  StepKind kind = StepKind::kExternCall;
  uint32_t position = 0;  // kExternCall
  int32_t kernel = -1;    // kFusedKernel
  int32_t batch = -1;     // kKernelBatch
  /// Node positions whose buffers are dead after this step (last use, not a graph output).
  std::vector<uint32_t> release_after;
};

struct ExecutionPlan {
  HashValue graph_hash = 0;
  uint32_t num_nodes = 0;
  std::vector<PlanStep> steps;
  std::vector<FusedKernel> kernels;
  std::vector<KernelBatch> batches;
  int32_t num_temps = 0;
};

/// The value a kernel parameter binds to in `graph` (whose hash is the plan's).
c10::Scalar paramValue(const Graph& graph, const ParamBinding& binding);

/// Node positions step `step` reads or writes.
std::vector<uint32_t> stepValues(const Graph& graph, const ExecutionPlan& plan,
                                 const PlanStep& step);

}  // namespace lazyfuse
