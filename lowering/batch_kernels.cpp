#include "lowering/passes.h"

#include "lazy_ir/check.h"

#include <cstring>
#include <map>
#include <sstream>
#include <utility>

namespace lazyfuse {
namespace {

// Note [Kernel batches]
// An optimizer step over hundreds of parameters lowers to one fused kernel per parameter (Note
// [Foreach lowering]); on a GPU each is a launch of a few microseconds that moves a few
// kilobytes. Kernels that compute the same thing over contiguous buffers (every store, and every
// load, at the kernel's flat point index, or a load of element 0 of its buffer) and differ only
// in their point count, their buffers and their parameter values form a batch: a GPU target
// renders the shared body once and runs all of them in one launch (Note [CUDA kernel batches]).
// A target without batch kernels runs the members one by one.
// Only independent kernels batch. The pass works on each run of consecutive kernel steps
// (extern steps stay where they are): a kernel's level is one more than the highest level of
// the kernels of the run whose outputs it reads, and the run is ordered by level, so kernels of
// one level never read each other's outputs; a batch never spans levels. Within a level,
// kernels and batches keep the order of their first member, so the pass is deterministic.

constexpr size_t kMaxBatchBindings = 400;

using BindingKey = std::pair<int64_t, int64_t>;

BindingKey bindingKey(const BufferBinding& b) {
  return b.temp ? BindingKey{-1 - static_cast<int64_t>(b.slot), 0}
                : BindingKey{static_cast<int64_t>(b.value.position), b.value.index};
}

}  // namespace

std::string batchKey(const Kernel& kernel) {
  if (!kernel.reductions.empty() || domainNumel(kernel) == 0) return "";
  // A segment of a batch's table takes a word per binding: keep one far below a 4 KB table.
  if (kernel.buffers.size() + kernel.params.size() > kMaxBatchBindings) return "";
  const std::string flat = ixText(ixFlatIndex(kernel.domain));
  // 'p': at the flat point index; '0': element 0; anything else cannot batch.
  auto where = [&](const IxPtr& index) -> char {
    const std::string text = ixText(index);
    return text == flat ? 'p' : text == "0" ? '0' : 'x';
  };
  std::ostringstream key;
  for (const KBuffer& b : kernel.buffers) key << "b" << static_cast<int>(b.dtype) << b.output;
  for (const KParam& p : kernel.params) key << "q" << p.floating;
  for (const KInstr& instr : kernel.instrs) {
    key << ";" << static_cast<int>(instr.op) << "," << static_cast<int>(instr.dtype) << ","
        << instr.fn << "," << instr.buffer << "," << instr.ivalue << ",";
    int64_t bits = 0;
    std::memcpy(&bits, &instr.fvalue, sizeof(bits));
    key << bits;
    for (int32_t arg : instr.args) key << "," << arg;
    if (instr.op == KOp::kLoad || instr.op == KOp::kIndex) {
      const char at = where(instr.index);
      if (at == 'x' || (at == '0' && instr.op == KOp::kIndex)) return "";
      key << "@" << at;
    }
  }
  for (const KStore& store : kernel.stores) {
    if (where(store.index) != 'p') return "";
    key << ";s" << store.value << "," << store.buffer;
  }
  return key.str();
}

namespace {

/// Orders the kernel steps [begin, end) of `plan` by level and appends them to `steps`, members
/// of a batch as one kKernelBatch step. True when a batch was formed.
bool batchRun(ExecutionPlan& plan, size_t begin, size_t end, std::vector<PlanStep>& steps) {
  std::map<BindingKey, int> producer_level;
  std::vector<int> level(end - begin, 0);
  int top = 0;
  for (size_t s = begin; s < end; ++s) {
    const FusedKernel& k = plan.kernels.at(plan.steps[s].kernel);
    for (size_t b = 0; b < k.buffers.size(); ++b) {
      if (k.kernel.buffers[b].output) continue;
      auto it = producer_level.find(bindingKey(k.buffers[b]));
      if (it != producer_level.end()) level[s - begin] = std::max(level[s - begin], it->second + 1);
    }
    for (size_t b = 0; b < k.buffers.size(); ++b) {
      if (k.kernel.buffers[b].output) producer_level[bindingKey(k.buffers[b])] = level[s - begin];
    }
    top = std::max(top, level[s - begin]);
  }
  bool batched = false;
  for (int l = 0; l <= top; ++l) {
    // Units of this level in order of first appearance: a lone kernel or a batch's members.
    std::vector<std::vector<int32_t>> units;
    std::map<std::string, size_t> unit_of_key;
    for (size_t s = begin; s < end; ++s) {
      if (level[s - begin] != l) continue;
      const int32_t kernel = plan.steps[s].kernel;
      const std::string key = batchKey(plan.kernels[kernel].kernel);
      auto it = key.empty() ? unit_of_key.end() : unit_of_key.find(key);
      if (it != unit_of_key.end()) {
        units[it->second].push_back(kernel);
        continue;
      }
      if (!key.empty()) unit_of_key.emplace(key, units.size());
      units.push_back({kernel});
    }
    for (std::vector<int32_t>& unit : units) {
      PlanStep step;
      if (unit.size() == 1) {
        step.kind = StepKind::kFusedKernel;
        step.kernel = unit[0];
      } else {
        step.kind = StepKind::kKernelBatch;
        step.batch = static_cast<int32_t>(plan.batches.size());
        plan.batches.push_back(KernelBatch{std::move(unit)});
        batched = true;
      }
      steps.push_back(std::move(step));
    }
  }
  return batched;
}

}  // namespace

bool batchKernels(const Graph& graph, ExecutionPlan& plan) {
  (void)graph;
  std::vector<PlanStep> steps;
  bool changed = false;
  for (size_t s = 0; s < plan.steps.size();) {
    LF_INTERNAL_ASSERT(plan.steps[s].release_after.empty(), "batchKernels after computeLifetimes");
    if (plan.steps[s].kind != StepKind::kFusedKernel) {
      steps.push_back(plan.steps[s++]);
      continue;
    }
    size_t end = s;
    while (end < plan.steps.size() && plan.steps[end].kind == StepKind::kFusedKernel) ++end;
    changed = batchRun(plan, s, end, steps) || changed;
    s = end;
  }
  plan.steps = std::move(steps);
  return changed;
}

}  // namespace lazyfuse
