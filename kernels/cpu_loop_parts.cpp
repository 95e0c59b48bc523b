#include "kernels/detail/cpu_loop_parts.h"

#include <cstdint>
#include <numeric>
#include <set>

namespace lazyfuse::detail {
namespace {

// Note [CPU loop parts]
// Fusion groups kernels of one domain even when they compute independent things: an
// optimizer step over 16 weights of one shape becomes one kernel reading 64 buffers and
// writing 48. As one loop that walks 112 memory streams at once: more than the hardware
// prefetchers track, and its block arrays (Note [Streaming stores]) no longer fit in L1. Adam
// over 16 tensors of 590K floats took 26.5 ms a step where the same bytes in one tensor took
// 8.1 ms. So the inner loop of a row loop is split into parts that run one after the other
// over the same points: the instructions and stores are divided into independent computations
// (connected through their arguments; a load shared by two stores joins them), and consecutive
// computations are packed into a part while it touches at most kPartBuffers buffers. The
// hoisted instructions still run once, before the parts; the function keeps one call per
// thread, so small tensors pay no more dispatches.
//
// A part runs over all its points before the next part starts, so a store must not land in a
// buffer a later part still reads. Inside one kernel that happens only through donation
// (Note [Donated buffers]): an output may take the memory of its donor input, which is
// loaded at the index the output is stored at. So a store joins the computation of every load
// of its buffer's donor, and the donor's element is read before it is overwritten, as in the
// single loop.

struct Components {
  explicit Components(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  size_t find(size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void join(size_t a, size_t b) { parent[find(a)] = find(b); }
  std::vector<size_t> parent;
};

}  // namespace

std::vector<CpuLoopPart> cpuLoopParts(const Kernel& k, const std::vector<bool>& inner) {
  const size_t n = k.instrs.size(), m = k.stores.size();
  Components c(n + m);
  for (size_t i = 0; i < n; ++i) {
    if (!inner[i]) continue;
    for (int32_t arg : k.instrs[i].args) {
      if (inner[arg]) c.join(i, arg);
    }
  }
  for (size_t s = 0; s < m; ++s) {
    const KStore& store = k.stores[s];
    if (inner[store.value]) c.join(n + s, store.value);
    const int32_t donor = k.buffers[store.buffer].donor;
    for (size_t i = 0; i < n && donor >= 0; ++i) {
      if (inner[i] && k.instrs[i].op == KOp::kLoad && k.instrs[i].buffer == donor) c.join(n + s, i);
    }
  }
  // Each computation in the order its first instruction (or store) comes, with its buffers.
  std::vector<size_t> order, root_of_slot(n + m, SIZE_MAX);
  std::vector<std::set<int32_t>> buffers;
  auto slot = [&](size_t x) {
    const size_t root = c.find(x);
    if (root_of_slot[root] == SIZE_MAX) {
      root_of_slot[root] = order.size();
      order.push_back(root);
      buffers.emplace_back();
    }
    return root_of_slot[root];
  };
  std::vector<size_t> slot_of(n + m, SIZE_MAX);
  for (size_t i = 0; i < n; ++i) {
    if (!inner[i]) continue;
    slot_of[i] = slot(i);
    if (k.instrs[i].op == KOp::kLoad) buffers[slot_of[i]].insert(k.instrs[i].buffer);
  }
  for (size_t s = 0; s < m; ++s) {
    slot_of[n + s] = slot(n + s);
    buffers[slot_of[n + s]].insert(k.stores[s].buffer);
  }
  // Consecutive computations share a part while it touches at most kPartBuffers buffers.
  std::vector<size_t> part_of_slot(order.size());
  std::vector<CpuLoopPart> parts;
  std::set<int32_t> touched;
  for (size_t x = 0; x < order.size(); ++x) {
    std::set<int32_t> joined = touched;
    joined.insert(buffers[x].begin(), buffers[x].end());
    if (parts.empty() || (joined.size() > kPartBuffers && !touched.empty())) {
      parts.push_back({std::vector<bool>(n, false), std::vector<bool>(m, false)});
      joined = buffers[x];
    }
    touched = std::move(joined);
    part_of_slot[x] = parts.size() - 1;
  }
  for (size_t i = 0; i < n; ++i) {
    if (inner[i]) parts[part_of_slot[slot_of[i]]].instrs[i] = true;
  }
  for (size_t s = 0; s < m; ++s) parts[part_of_slot[slot_of[n + s]]].stores[s] = true;
  if (parts.empty()) parts.push_back({std::vector<bool>(n, false), std::vector<bool>(m, false)});
  return parts;
}

}  // namespace lazyfuse::detail
