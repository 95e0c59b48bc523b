#include "kernels/fused_runner.h"

#include "lazy_ir/check.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty_strided.h>

namespace lazyfuse {
namespace {

at::Tensor& slotFor(const BufferBinding& b, const Graph& graph, PlanValues& values) {
  if (b.temp) return values.temps.at(b.slot);
  auto& outputs = values.nodes.at(b.value.position);
  outputs.resize(std::max<size_t>(outputs.size(), graph.nodes()[b.value.position]->numOutputs()));
  return outputs.at(b.value.index);
}

}  // namespace

void runFusedKernel(const FusedKernel& fused, CpuKernelFn fn, const Graph& graph,
                    PlanValues& values) {
  std::vector<void*> pointers;
  pointers.reserve(fused.buffers.size());
  for (size_t i = 0; i < fused.buffers.size(); ++i) {
    const BufferBinding& b = fused.buffers[i];
    at::Tensor& slot = slotFor(b, graph, values);
    if (fused.kernel.buffers[i].output) {
      slot = at::empty_strided(b.meta.sizes, b.meta.strides,
                               at::TensorOptions().dtype(b.meta.dtype).device(c10::kCPU));
    }
    LF_INTERNAL_ASSERT(slot.defined(), "kernel ", fused.kernel.name, " reads a missing buffer");
    pointers.push_back(slot.data_ptr());
  }
  std::vector<int64_t> iparams(fused.params.size(), 0);
  std::vector<double> fparams(fused.params.size(), 0);
  for (size_t k = 0; k < fused.params.size(); ++k) {
    const ParamBinding& p = fused.params[k];
    const c10::Scalar s = paramValue(graph, p);
    if (p.floating) {
      fparams[k] = s.toDouble();
    } else {
      iparams[k] = s.toLong();
    }
  }
  int64_t points = domainNumel(fused.kernel);
  at::parallel_for(0, points, fused.grain, [&](int64_t begin, int64_t end) {
    fn(begin, end, pointers.data(), iparams.data(), fparams.data());
  });
}

}  // namespace lazyfuse
