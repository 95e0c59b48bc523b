#include "lowering/passes.h"

#include "lazy_ir/check.h"

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

/// Whether instruction `i` of `k` is cheap to repeat in every part of a split kernel: constants,
/// parameters, point indices, loads of one fixed element, and math on those only.
std::vector<bool> repeatable(const Kernel& k) {
  std::vector<bool> cheap(k.instrs.size(), false);
  for (size_t i = 0; i < k.instrs.size(); ++i) {
    const KInstr& instr = k.instrs[i];
    switch (instr.op) {
      case KOp::kConst:
      case KOp::kParam:
      case KOp::kIndex: cheap[i] = true; break;
      case KOp::kLoad: {
        std::vector<bool> vars(k.domain.size(), false), rvars;
        ixCollectVars(instr.index, vars, rvars);
        cheap[i] = std::find(vars.begin(), vars.end(), true) == vars.end();
        break;
      }
      case KOp::kReduce: break;
      default: {
        cheap[i] = true;
        for (int32_t arg : instr.args) cheap[i] = cheap[i] && cheap[arg];
      }
    }
  }
  return cheap;
}

int32_t findRoot(std::vector<int32_t>& parent, int32_t x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

// Note [Splitting kernels for batches]
// The partitioner computes independent work of one shape in one kernel: an optimizer step's
// update of every parameter of shape [256] is one kernel with a store per parameter. For a
// CPU that is one loop instead of many; for a batching target it is a kernel of its own shape
// class that batches with nothing. So before batching, a pointwise kernel whose stores fall into
// parts that read no common buffer element (loads of one fixed element, constants and
// parameters are repeated in each part) is split into one kernel per part, when the parts are
// equal up to their bindings: they batch with each other (so the split never adds a launch) and
// with the same update of parameters of other shapes.

/// The kernel computing the stores `stores` of `fused` (a pointwise kernel), named `name`, in a
/// canonical form: instructions in the order a depth-first walk from the stores meets them,
/// buffers and parameters numbered by first use. Kernels that compute the same thing come out
/// alike, however the partitioner interleaved or numbered them.
FusedKernel extract(const FusedKernel& fused, const std::vector<size_t>& stores,
                    const std::string& name) {
  const Kernel& k = fused.kernel;
  std::vector<int32_t> order;
  std::vector<bool> seen(k.instrs.size(), false);
  std::function<void(int32_t)> visit = [&](int32_t i) {
    if (seen[i]) return;
    seen[i] = true;
    for (int32_t arg : k.instrs[i].args) visit(arg);
    order.push_back(i);
  };
  for (size_t s : stores) visit(k.stores[s].value);
  FusedKernel out;
  out.grain = fused.grain;
  out.kernel.name = name;
  out.kernel.domain = k.domain;
  std::map<int32_t, int32_t> instr_at, buffer_at, param_at;
  auto buffer = [&](int32_t b) {
    auto [it, inserted] = buffer_at.emplace(b, static_cast<int32_t>(out.kernel.buffers.size()));
    if (inserted) {
      out.kernel.buffers.push_back(k.buffers[b]);
      out.buffers.push_back(fused.buffers[b]);
    }
    return it->second;
  };
  for (int32_t i : order) {
    KInstr instr = k.instrs[i];
    for (int32_t& arg : instr.args) arg = instr_at.at(arg);
    if (instr.op == KOp::kLoad) instr.buffer = buffer(instr.buffer);
    if (instr.op == KOp::kParam) {
      const int32_t slot = static_cast<int32_t>(instr.ivalue);
      auto [it, inserted] = param_at.emplace(slot, static_cast<int32_t>(out.kernel.params.size()));
      if (inserted) {
        out.kernel.params.push_back(k.params[slot]);
        out.params.push_back(fused.params[slot]);
      }
      instr.ivalue = it->second;
    }
    instr_at[i] = static_cast<int32_t>(out.kernel.instrs.size());
    out.kernel.instrs.push_back(std::move(instr));
  }
  for (size_t s : stores) {
    KStore store = k.stores[s];
    store.value = instr_at.at(store.value);
    store.buffer = buffer(store.buffer);
    out.kernel.stores.push_back(std::move(store));
  }
  return out;
}

/// `fused` as one or more kernels (see the Note): its parts, or itself in canonical form; a
/// kernel with reductions as it is.
std::vector<FusedKernel> splitIndependent(const FusedKernel& fused) {
  const Kernel& k = fused.kernel;
  if (!k.reductions.empty() || k.stores.empty()) return {fused};
  const std::vector<bool> cheap = repeatable(k);
  const int32_t n = static_cast<int32_t>(k.instrs.size());
  std::vector<int32_t> parent(n);
  for (int32_t i = 0; i < n; ++i) parent[i] = i;
  auto unite = [&](int32_t a, int32_t b) { parent[findRoot(parent, a)] = findRoot(parent, b); };
  for (int32_t i = 0; i < n; ++i) {
    if (cheap[i]) continue;
    for (int32_t arg : k.instrs[i].args) {
      if (!cheap[arg]) unite(i, arg);
    }
  }
  // Stores of one buffer, or of a repeatable value, stay with the first store.
  std::map<int32_t, int32_t> buffer_root;
  std::vector<int32_t> store_root(k.stores.size());
  for (size_t s = 0; s < k.stores.size(); ++s) {
    const KStore& store = k.stores[s];
    int32_t root = cheap[store.value] ? findRoot(parent, k.stores[0].value)
                                      : findRoot(parent, store.value);
    auto [it, inserted] = buffer_root.emplace(store.buffer, root);
    if (!inserted && it->second != root) {
      unite(root, it->second);
      root = findRoot(parent, root);
    }
    store_root[s] = root;
  }
  std::vector<int32_t> roots;
  std::vector<std::vector<size_t>> part_stores;
  for (size_t s = 0; s < k.stores.size(); ++s) {
    const int32_t root = findRoot(parent, store_root[s]);
    auto it = std::find(roots.begin(), roots.end(), root);
    if (it == roots.end()) {
      roots.push_back(root);
      part_stores.emplace_back();
      it = roots.end() - 1;
    }
    part_stores[it - roots.begin()].push_back(s);
  }
  std::vector<size_t> all(k.stores.size());
  for (size_t s = 0; s < all.size(); ++s) all[s] = s;
  if (roots.size() < 2) return {extract(fused, all, k.name)};
  std::vector<FusedKernel> parts;
  for (size_t part = 0; part < roots.size(); ++part) {
    parts.push_back(extract(fused, part_stores[part], k.name + "_part" + std::to_string(part)));
  }
  // Equal parts batch at least with each other: never more launches than before.
  const std::string key = batchKey(parts[0].kernel);
  for (const FusedKernel& part : parts) {
    if (key.empty() || batchKey(part.kernel) != key) return {extract(fused, all, k.name)};
  }
  return parts;
}

/// Splits the kernels of `plan` that Note [Splitting kernels for batches] splits, each into
/// consecutive steps, and puts the others in canonical form.
void splitKernels(ExecutionPlan& plan) {
  std::vector<FusedKernel> kernels;
  std::vector<PlanStep> steps;
  for (PlanStep& step : plan.steps) {
    if (step.kind != StepKind::kFusedKernel) {
      steps.push_back(std::move(step));
      continue;
    }
    std::vector<FusedKernel> parts = splitIndependent(plan.kernels.at(step.kernel));
    for (FusedKernel& part : parts) {
      PlanStep part_step = step;
      part_step.kernel = static_cast<int32_t>(kernels.size());
      kernels.push_back(std::move(part));
      steps.push_back(std::move(part_step));
    }
  }
  plan.kernels = std::move(kernels);
  plan.steps = std::move(steps);
}

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
  splitKernels(plan);
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
