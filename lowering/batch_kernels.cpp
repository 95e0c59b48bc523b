#include "lowering/passes.h"

#include "lazy_ir/check.h"
#include "lowering/detail/split_kernels.h"

#include <algorithm>
#include <cstring>
#include <functional>
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
// one level never read each other's outputs; a batch never spans levels. Kernels that could
// batch then move, between the level after what they read and the level before what reads
// them, to a level they share (gatherBatchLevels). Within a level, kernels and batches keep
// the order of their first member, so the pass is deterministic.

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
  const bool one_point = domainNumel(kernel) == 1;
  // 'p': at the flat point index; '0': element 0; '?': either, in a kernel of one point (where
  // both are 0: see keysMatch); anything else cannot batch.
  auto where = [&](const IxPtr& index) -> char {
    const std::string text = ixText(index);
    if (one_point && (text == flat || text == "0")) return '?';
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
    const char at = where(store.index);
    if (at != 'p' && at != '?') return "";
    key << ";s" << store.value << "," << store.buffer;
  }
  return key.str();
}

namespace {

/// Whether kernels of keys `a` and `b` batch: equal, but where one has an index of either kind
/// ('?', a kernel of one point) and the other one kind.
bool keysMatch(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    const bool at_index = i > 0 && a[i - 1] == '@';
    if (!at_index || (a[i] != '?' && b[i] != '?')) return false;
  }
  return true;
}

bool isOnePointKey(const std::string& key) { return key.find("@?") != std::string::npos; }

/// Moves kernels of one batch key to a common level where their dependencies allow: kernel i
/// may run at any level from level[i] (after what it reads) to latest[i] (before what reads
/// it), and a batch never spans levels. Per key, the level holding most of the key's kernels
/// takes them (ties: the lowest), then the next, until no level would take two. An optimizer
/// step whose bias gradients come from a reduction kernel of the same run would otherwise
/// launch its updates in two batches, before and after that reduction.
void gatherBatchLevels(const std::vector<std::string>& keys, const std::vector<int>& latest,
                       int top, std::vector<int>& level) {
  std::map<std::string, std::vector<size_t>> by_key;
  std::vector<std::string> order;
  for (size_t i = 0; i < level.size(); ++i) {
    const std::string& key = keys[i];
    if (key.empty() || isOnePointKey(key)) continue;
    if (by_key[key].empty()) order.push_back(key);
    by_key[key].push_back(i);
  }
  for (const std::string& key : order) {
    std::vector<size_t> left = by_key[key];
    while (left.size() > 1) {
      // Kernels of `left` that may run at each level; the first level with the most takes them.
      std::vector<size_t> fits(static_cast<size_t>(top) + 1);
      for (size_t i : left) {
        for (int l = level[i]; l <= latest[i]; ++l) ++fits[l];
      }
      const int best = static_cast<int>(std::max_element(fits.begin(), fits.end()) - fits.begin());
      if (fits[best] < 2) break;
      std::vector<size_t> rest;
      for (size_t i : left) {
        if (level[i] <= best && best <= latest[i]) {
          level[i] = best;
        } else {
          rest.push_back(i);
        }
      }
      left = std::move(rest);
    }
  }
}

/// Orders the kernel steps [begin, end) of `plan` by level and appends them to `steps`, members
/// of a batch as one kKernelBatch step. True when a batch was formed.
bool batchRun(ExecutionPlan& plan, size_t begin, size_t end, std::vector<PlanStep>& steps) {
  std::map<BindingKey, size_t> producer;
  std::vector<int> level(end - begin, 0);
  std::vector<size_t> reads_from;  // (reader, producer) pairs, flattened
  int top = 0;
  for (size_t s = begin; s < end; ++s) {
    const size_t i = s - begin;
    const FusedKernel& k = plan.kernels.at(plan.steps[s].kernel);
    for (size_t b = 0; b < k.buffers.size(); ++b) {
      if (k.kernel.buffers[b].output) continue;
      auto it = producer.find(bindingKey(k.buffers[b]));
      if (it == producer.end()) continue;
      level[i] = std::max(level[i], level[it->second] + 1);
      reads_from.insert(reads_from.end(), {i, it->second});
    }
    for (size_t b = 0; b < k.buffers.size(); ++b) {
      if (k.kernel.buffers[b].output) producer[bindingKey(k.buffers[b])] = i;
    }
    top = std::max(top, level[i]);
  }
  std::vector<int> latest(level.size(), top);
  for (size_t r = 0; r < reads_from.size(); r += 2) {
    latest[reads_from[r + 1]] = std::min(latest[reads_from[r + 1]], level[reads_from[r]] - 1);
  }
  std::vector<std::string> keys;
  for (size_t s = begin; s < end; ++s) {
    keys.push_back(batchKey(plan.kernels[plan.steps[s].kernel].kernel));
  }
  gatherBatchLevels(keys, latest, top, level);
  bool batched = false;
  for (int l = 0; l <= top; ++l) {
    // Units of this level in order of first appearance: a lone kernel or a batch's members.
    // Kernels of one point come last, to join a batch of kernels of more points if one matches.
    std::vector<std::vector<int32_t>> units;
    std::vector<std::string> unit_keys;
    std::map<std::string, size_t> unit_of_key;
    for (bool one_point : {false, true}) {
      for (size_t s = begin; s < end; ++s) {
        if (level[s - begin] != l) continue;
        const int32_t kernel = plan.steps[s].kernel;
        const std::string& key = keys[s - begin];
        if (!key.empty() && isOnePointKey(key) != one_point) continue;
        if (key.empty() && one_point) continue;
        auto it = key.empty() ? unit_of_key.end() : unit_of_key.find(key);
        size_t unit = it == unit_of_key.end() ? units.size() : it->second;
        for (size_t u = 0; one_point && unit == units.size() && u < units.size(); ++u) {
          if (!unit_keys[u].empty() && keysMatch(key, unit_keys[u])) unit = u;
        }
        if (unit < units.size()) {
          units[unit].push_back(kernel);
          continue;
        }
        if (!key.empty()) unit_of_key.emplace(key, units.size());
        units.push_back({kernel});
        unit_keys.push_back(key);
      }
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
  detail::splitKernels(plan);
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
