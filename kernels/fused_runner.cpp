#include "kernels/fused_runner.h"

#include "lazy_ir/check.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty_strided.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>

namespace lazyfuse {
namespace {

// Note [Huge pages for kernel outputs]
// A large output buffer is usually fresh memory (glibc maps allocations of 32 MiB and more
// afresh each time, and gives smaller ones back when the heap shrinks), and a kernel that writes
// it first takes a page fault per 4 KiB page: for the [64, 128, 1024] W3 block, 3 float outputs
// of 32 MiB, one thread, those faults took 46 ms of the output kernel's 52 ms. So before a kernel
// runs, the whole 2 MiB pages inside each output of at least kHugePageMin bytes are marked
// MADV_HUGEPAGE: with transparent huge pages in `madvise` mode (the common default) the kernel
// then faults 2 MiB at a time (46 ms -> 16 ms). This is what torch's own allocator does for
// every allocation when THP_MEM_ALLOC_ENABLE=1 (c10/core/alloc_cpu.cpp); where the memory is
// already mapped, or huge pages are off, the call changes nothing. Its result is ignored: the
// advice is a hint.
constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
constexpr size_t kHugePageMin = 2 * kHugePage;

void adviseHugePages(void* data, size_t bytes) {
#if defined(MADV_HUGEPAGE)
  if (bytes < kHugePageMin) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
}

at::Tensor& slotFor(const BufferBinding& b, const Graph& graph, PlanValues& values) {
  if (b.temp) return values.temps.at(b.slot);
  auto& outputs = values.nodes.at(b.value.position);
  outputs.resize(std::max<size_t>(outputs.size(), graph.nodes()[b.value.position]->numOutputs()));
  return outputs.at(b.value.index);
}


/// Allocates `fused`'s outputs as the plan laid them out and appends the addresses of its
/// buffers to `pointers`, its parameters to `iparams` and `fparams`.
void gatherArguments(const FusedKernel& fused, const Graph& graph, PlanValues& values,
                     std::vector<void*>& pointers, std::vector<int64_t>& iparams,
                     std::vector<double>& fparams) {
  for (size_t i = 0; i < fused.buffers.size(); ++i) {
    const BufferBinding& b = fused.buffers[i];
    at::Tensor& slot = slotFor(b, graph, values);
    if (fused.kernel.buffers[i].output) {
      slot = at::empty_strided(b.meta.sizes, b.meta.strides,
                               at::TensorOptions().dtype(b.meta.dtype).device(c10::kCPU));
      adviseHugePages(slot.data_ptr(), slot.storage().nbytes());  // Note [Huge pages for ...]
    }
    LF_INTERNAL_ASSERT(slot.defined(), "kernel ", fused.kernel.name, " reads a missing buffer");
    pointers.push_back(slot.data_ptr());
  }
  for (const ParamBinding& p : fused.params) {
    const c10::Scalar s = paramValue(graph, p);
    iparams.push_back(p.floating ? 0 : s.toLong());
    fparams.push_back(p.floating ? s.toDouble() : 0);
  }
}

}  // namespace

void runFusedKernel(const FusedKernel& fused, CpuKernelFn fn, const Graph& graph,
                    PlanValues& values) {
  std::vector<void*> pointers;
  std::vector<int64_t> iparams;
  std::vector<double> fparams;
  gatherArguments(fused, graph, values, pointers, iparams, fparams);
  int64_t points = domainNumel(fused.kernel);
  // Runs on torch's threads only because this file is built with -fopenmp: see Note [Threads
  // of the CPU kernels] in kernels/CMakeLists.txt.
  at::parallel_for(0, points, fused.grain, [&](int64_t begin, int64_t end) {
    fn(begin, end, pointers.data(), iparams.data(), fparams.data());
  });
}

void runFusedRowGroup(const FusedKernel& stats, const FusedKernel& epilogue, CpuKernelFn fn,
                      const Graph& graph, PlanValues& values) {
  std::vector<void*> pointers;
  std::vector<int64_t> iparams;
  std::vector<double> fparams;
  gatherArguments(stats, graph, values, pointers, iparams, fparams);
  gatherArguments(epilogue, graph, values, pointers, iparams, fparams);
  const int64_t rows = domainNumel(stats.kernel);
  const int64_t row = epilogue.kernel.domain.back();
  const int64_t grain = std::max<int64_t>(1, std::min(stats.grain, epilogue.grain / row));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    fn(begin, end, pointers.data(), iparams.data(), fparams.data());
  });
}

}  // namespace lazyfuse
