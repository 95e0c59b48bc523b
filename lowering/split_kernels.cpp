// Kernels of independent parts split for batching. See Note [Splitting kernels for batches].

#include "lowering/detail/split_kernels.h"

#include "lowering/passes.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>

namespace lazyfuse::detail {
namespace {

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
    int32_t root =
        cheap[store.value] ? findRoot(parent, k.stores[0].value) : findRoot(parent, store.value);
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

}  // namespace

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

}  // namespace lazyfuse::detail
