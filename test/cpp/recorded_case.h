#pragma once

// Graphs recorded through the dispatcher on the lazy device, with their eager CPU results and
// fused plans, and what tests ask of those plans. Shared by the partitioner's tests.
#include "backend/lazy_tensor.h"
#include "lazy_ir/metrics.h"
#include "lowering/pipeline.h"

#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace lazyfuse {
namespace testing_case {

/// A graph recorded on the lazy device, its eager CPU result, and its fused plan.
struct Case {
  std::vector<at::Tensor> expected;  // eager CPU
  Graph graph;
  ExecutionPlan plan;
};

using Program = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

/// The graph a sync of `tensors` would run, taken the way the backend takes it.
inline Graph graphOf(const std::vector<at::Tensor>& tensors) {
  std::vector<Value> roots;
  for (const at::Tensor& t : tensors) {
    LazyTensorImpl* impl = lazyImpl(t);
    if (impl == nullptr) {
      ADD_FAILURE() << "expected a lazy tensor, got a " << t.device() << " tensor";
      continue;
    }
    EXPECT_TRUE(impl->data().isPending());
    roots.push_back(impl->data().asInput());
  }
  return Graph::fromRoots(roots);
}

inline int64_t eagerFallbacks() {
  for (const auto& [name, value] : metricsSnapshot()) {
    if (name == "EagerFallback") return value;
  }
  return -1;
}

/// Runs `program` eagerly on `inputs` and recorded on lazy copies of them, and lowers the
/// recorded graph with fusion on. Every op must record: an eager fallback would cut the graph.
inline Case record(const std::vector<at::Tensor>& inputs, const Program& program) {
  std::vector<at::Tensor> lazy_inputs;
  for (const at::Tensor& t : inputs) lazy_inputs.push_back(t.to(c10::DeviceType::Lazy));
  const int64_t fallbacks = eagerFallbacks();
  std::vector<at::Tensor> lazy_outputs = program(lazy_inputs);
  EXPECT_EQ(eagerFallbacks(), fallbacks) << "an op ran eagerly instead of recording";
  Graph graph = graphOf(lazy_outputs);
  ExecutionPlan plan = lowerGraph(graph, /*fuse=*/true);
  return Case{program(inputs), std::move(graph), std::move(plan)};
}

inline std::vector<const FusedKernel*> kernelSteps(const ExecutionPlan& plan) {
  std::vector<const FusedKernel*> kernels;
  for (const PlanStep& step : plan.steps) {
    if (step.kind == StepKind::kFusedKernel) kernels.push_back(&plan.kernels.at(step.kernel));
  }
  return kernels;
}

inline int countExterns(const ExecutionPlan& plan) {
  int n = 0;
  for (const PlanStep& step : plan.steps) n += step.kind == StepKind::kExternCall;
  return n;
}

/// The buffers kernel `k` reads (`output` false) or writes (`output` true).
inline std::vector<BufferBinding> buffers(const FusedKernel& k, bool output) {
  std::vector<BufferBinding> result;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    if (k.kernel.buffers[i].output == output) result.push_back(k.buffers[i]);
  }
  return result;
}

/// Node positions of the graph values (never temporaries) among `bindings`.
inline std::vector<uint32_t> positions(const std::vector<BufferBinding>& bindings) {
  std::vector<uint32_t> result;
  for (const BufferBinding& b : bindings) {
    if (!b.temp) result.push_back(b.value.position);
  }
  return result;
}

inline std::vector<uint32_t> outputPositions(const Graph& graph) {
  std::vector<uint32_t> result;
  for (const NodeRef& ref : graph.outputs()) result.push_back(ref.position);
  return result;
}

/// The position of the first node named `op`, or -1.
inline int64_t positionOf(const Graph& graph, const std::string& op) {
  for (size_t p = 0; p < graph.nodes().size(); ++p) {
    const Node& node = *graph.nodes()[p];
    if (node.kind() == OpKind::kDeviceData) continue;
    if (node.aten().name == op) return static_cast<int64_t>(p);
  }
  return -1;
}

}  // namespace testing_case
}  // namespace lazyfuse
