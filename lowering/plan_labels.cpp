#include "lowering/passes.h"

#include <set>
#include <string>
#include <vector>

namespace lazyfuse {
namespace {

// Note [Plan steps in the profiler]
// A plan runs as a list of steps; each gets a name that says what it computes, made once when
// the plan is built: `lazyfuse::lf_kernel_3 [aten::mm, aten::gelu]` for a fused kernel (the ops
// whose values it writes, at most kMaxOps of them), `lazyfuse::batch of 4 [...]`,
// `lazyfuse::extern aten::addmm`, `lazyfuse::view`. runPlan opens a record_function range of that
// name around each step when a profiler listens (torch.profiler, export_chrome_trace), and
// times every step for lazyfuse.last_plan_profile() (host time: on a GPU, the launch).
constexpr size_t kMaxOps = 6;

std::string opsWritten(const Graph& graph, const FusedKernel& k) {
  std::vector<std::string> ops;
  std::set<std::string> seen;
  size_t more = 0;
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    if (!k.kernel.buffers[b].output || k.buffers[b].temp) continue;
    const std::string op = graph.nodes()[k.buffers[b].value.position]->opName();
    if (!seen.insert(op).second) continue;
    if (ops.size() < kMaxOps) {
      ops.push_back(op);
    } else {
      ++more;
    }
  }
  std::string out = " [";
  for (size_t i = 0; i < ops.size(); ++i) out += (i ? ", " : "") + ops[i];
  if (more > 0) out += ", +" + std::to_string(more) + " more";
  return out + "]";
}

}  // namespace

void labelSteps(const Graph& graph, ExecutionPlan& plan) {
  auto labels = std::make_shared<std::vector<std::string>>();
  labels->reserve(plan.steps.size());
  for (const PlanStep& step : plan.steps) {
    switch (step.kind) {
      case StepKind::kFusedKernel: {
        const FusedKernel& k = plan.kernels.at(step.kernel);
        labels->push_back("lazyfuse::" + k.kernel.name + opsWritten(graph, k));
        break;
      }
      case StepKind::kKernelBatch: {
        const KernelBatch& batch = plan.batches.at(step.batch);
        labels->push_back("lazyfuse::batch of " + std::to_string(batch.kernels.size()) +
                          opsWritten(graph, plan.kernels.at(batch.kernels.at(0))));
        break;
      }
      case StepKind::kStridedView: labels->push_back("lazyfuse::view"); break;
      case StepKind::kRegionWrite:
        labels->push_back(plan.region_writes.at(step.region).index_copy
                              ? "lazyfuse::region write [aten::index_copy_]"
                              : "lazyfuse::region write [aten::copy_]");
        break;
      case StepKind::kExternCall:
        labels->push_back("lazyfuse::extern " + graph.nodes()[step.position]->opName());
        break;
    }
  }
  plan.step_labels = std::move(labels);
}

}  // namespace lazyfuse
