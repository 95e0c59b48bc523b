#include "lowering/print_plan.h"

#include <sstream>

namespace lazyfuse {
namespace {

void printRef(std::ostream& out, const NodeRef& ref) {
  out << "%" << ref.position;
  if (ref.index > 0) out << "." << ref.index;
}

void printBinding(std::ostream& out, const BufferBinding& b) {
  if (b.temp) {
    out << "t" << b.slot;
    return;
  }
  printRef(out, b.value);
}

void printSizes(std::ostream& out, const std::vector<int64_t>& sizes) {
  out << "[";
  for (size_t d = 0; d < sizes.size(); ++d) out << (d ? ", " : "") << sizes[d];
  out << "]";
}

/// `[sizes] strides [strides] offset offset`.
void printGeometry(std::ostream& out, const std::vector<int64_t>& sizes,
                   const std::vector<int64_t>& strides, int64_t offset) {
  printSizes(out, sizes);
  out << " strides ";
  printSizes(out, strides);
  out << " offset " << offset;
}

void printKernel(std::ostream& out, const FusedKernel& k) {
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
    for (const Donation& d : k.donations) {
      if (static_cast<size_t>(d.output) != i) continue;
      out << " (may take ";
      printBinding(out, donorOf(k, d));
      out << ")";
    }
  }
  out << "\n";
}

}  // namespace

std::string printPlan(const Graph& graph, const ExecutionPlan& plan) {
  std::ostringstream out;
  out << "plan(graph=0x" << std::hex << plan.graph_hash << std::dec
      << ", steps=" << plan.steps.size() << ", kernels=" << plan.kernels.size();
  if (!plan.batches.empty()) out << ", batches=" << plan.batches.size();
  out << ")\n";
  if (!plan.position_guards.empty()) {  // Note [Positions as plan arguments]
    out << "  positions baked in:";
    for (uint32_t position : plan.position_guards) out << " %" << position;
    out << "\n";
  }
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const PlanStep& step = plan.steps[s];
    out << "  " << s << ": ";
    if (step.kind == StepKind::kExternCall) {
      out << "extern %" << step.position << " = " << graph.nodes()[step.position]->opName() << "\n";
      continue;
    }
    if (step.kind == StepKind::kStridedView) {
      const StridedView& view = plan.views[step.view];
      out << "view ";
      printRef(out, view.value);
      out << " = ";
      printRef(out, view.source);
      out << " as ";
      printGeometry(out, view.sizes, view.strides, view.offset);
      out << "\n";
      continue;
    }
    if (step.kind == StepKind::kRegionWrite) {
      const RegionWrite& write = plan.region_writes[step.region];
      out << "region write ";
      printRef(out, write.value);
      out << " = ";
      printRef(out, write.base);
      if (write.index_copy) {
        out << " with index_copy_(" << write.dim << ", ";
        printRef(out, write.index);
        out << ", ";
      } else {
        out << " with copy_(";
      }
      printRef(out, write.source);
      out << ") into ";
      printGeometry(out, write.sizes, write.strides, write.offset);
      out << (write.may_donate ? " (may write in place)" : "") << "\n";
      continue;
    }
    if (step.kind == StepKind::kKernelBatch) {
      const KernelBatch& batch = plan.batches[step.batch];
      out << "batch of " << batch.kernels.size() << " kernels\n";
      for (int32_t k : batch.kernels) {
        out << "       ";
        printKernel(out, plan.kernels[k]);
      }
      continue;
    }
    printKernel(out, plan.kernels[step.kernel]);
  }
  return out.str();
}

}  // namespace lazyfuse
