#include "lowering/print_plan.h"

#include <sstream>

namespace lazyfuse {
namespace {

void printBinding(std::ostream& out, const BufferBinding& b) {
  if (b.temp) {
    out << "t" << b.slot;
    return;
  }
  out << "%" << b.value.position;
  if (b.value.index > 0) out << "." << b.value.index;
}

void printSizes(std::ostream& out, const std::vector<int64_t>& sizes) {
  out << "[";
  for (size_t d = 0; d < sizes.size(); ++d) out << (d ? ", " : "") << sizes[d];
  out << "]";
}

}  // namespace

std::string printPlan(const Graph& graph, const ExecutionPlan& plan) {
  std::ostringstream out;
  out << "plan(graph=0x" << std::hex << plan.graph_hash << std::dec << ", steps="
      << plan.steps.size() << ", kernels=" << plan.kernels.size() << ")\n";
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const PlanStep& step = plan.steps[s];
    out << "  " << s << ": ";
    if (step.kind == StepKind::kExternCall) {
      out << "extern %" << step.position << " = " << graph.nodes()[step.position]->opName() << "\n";
      continue;
    }
    const FusedKernel& k = plan.kernels[step.kernel];
    out << "kernel " << k.kernel.name << " over ";
    printSizes(out, k.kernel.domain);
    out << ", " << k.kernel.reductions.size() << " reductions, reads";
    for (size_t i = 0; i < k.buffers.size(); ++i) {
      if (k.kernel.buffers[i].output) continue;
      out << " ";
      printBinding(out, k.buffers[i]);
    }
    out << ", writes";
    for (size_t i = 0; i < k.buffers.size(); ++i) {
      if (!k.kernel.buffers[i].output) continue;
      out << " ";
      printBinding(out, k.buffers[i]);
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace lazyfuse
