// Step 2 of Note [Fusion partitioning]: which loop nodes are written to memory.

#include "lowering/detail/partitioner.h"

#include "lowering/detail/strided_views.h"
#include "lowering/lowerings.h"

#include <algorithm>
#include <cstdint>
#include <unordered_set>
#include <utility>

namespace lazyfuse::detail {

void Partitioner::markRealized() {
  const size_t n = p_.loops.nodes.size();
  p_.realized.assign(n, false);
  std::vector<bool> live(n, false);
  std::vector<LoopId> stack;
  auto need = [&](LoopId id) {
    p_.realized[id] = true;
    stack.push_back(id);
  };
  p_.view_of.assign(n, -1);
  // What must be exactly a fresh tensor first (graph outputs, inputs of ops that may look at
  // strides or storage): a value that is no whole rename of its root is written, and an op
  // that takes any layout then reads that buffer. See Note [Strided views of buffers].
  for (const NodeRef& out : graph_.outputs()) need(inMemory(out, /*any_layout=*/false));
  for (bool any_layout : {false, true}) {
    for (uint32_t pos = 0; pos < graph_.nodes().size(); ++pos) {
      if (!p_.is_extern[pos] || p_.absorbed[pos]) continue;
      for (const NodeRef& ref : externInputs(pos, any_layout)) need(inMemory(ref, any_layout));
      for (LoopId id : p_.node_loops[pos]) live[id] = true;
    }
  }
  while (!stack.empty()) {
    LoopId id = stack.back();
    stack.pop_back();
    if (live[id]) continue;
    live[id] = true;
    for (LoopId in : p_.loops[id].inputs) stack.push_back(in);
  }
  std::vector<std::vector<LoopId>> users(n);
  for (LoopId id = 0; id < static_cast<LoopId>(n); ++id) {
    if (!live[id]) continue;
    for (LoopId in : p_.loops[id].inputs) users[in].push_back(id);
    const LoopNode& node = p_.loops[id];
    if (node.kind != LoopNode::kCompute) p_.realized[id] = true;
  }
  for (LoopId id = static_cast<LoopId>(n) - 1; id >= 0; --id) {
    if (live[id] && !p_.realized[id] && !p_.loops[id].is_view && p_.view_of[id] < 0 &&
        !readsOnlyMemory(id) && sharedAcrossKernels(id, users)) {
      p_.realized[id] = true;
    }
  }
  p_.live = std::move(live);
  realizeAcrossExterns(users);
  viewRealizedRoots();
  capInlineDepth();
}

void Partitioner::viewRealizedRoots() {
  // Kept in memory as they are: graph outputs, the roots of views, and what an extern reads as
  // a fresh tensor (as_strided_copy of `x.t().contiguous()`, a region write's base).
  std::vector<bool> kept(p_.loops.nodes.size(), false);
  for (const NodeRef& out : graph_.outputs())
    kept[p_.node_loops[out.position].at(out.index)] = true;
  for (const StridedView& view : p_.views) kept[rootOf(view)] = true;
  for (uint32_t pos = 0; pos < graph_.nodes().size(); ++pos) {
    if (!p_.is_extern[pos] || p_.absorbed[pos]) continue;
    for (const NodeRef& ref : externInputs(pos, /*any_layout=*/false))
      kept[p_.node_loops[ref.position].at(ref.index)] = true;
  }
  for (uint32_t pos = 0; pos < graph_.nodes().size(); ++pos) {
    if (!p_.is_extern[pos] || p_.absorbed[pos]) continue;
    for (const NodeRef& ref : externInputs(pos, /*any_layout=*/true)) {
      const LoopId id = p_.node_loops[ref.position].at(ref.index);
      if (!p_.realized[id] || kept[id] || p_.view_of[id] >= 0 ||
          p_.loops[id].kind != LoopNode::kCompute) {
        continue;
      }
      std::optional<StridedView> view = stridedViewOf(graph_, p_, id, ref);
      if (!view || !p_.realized[rootOf(*view)]) continue;
      p_.realized[id] = false;
      kept[rootOf(*view)] = true;
      p_.view_of[id] = static_cast<int32_t>(p_.views.size());
      p_.views.push_back(std::move(*view));
    }
  }
}

std::vector<NodeRef> Partitioner::externInputs(uint32_t pos, bool any_layout) const {
  if (p_.region_of[pos] >= 0) {
    // index_copy_ reads its index and source as any layout; the base becomes the result.
    const RegionWrite& write = p_.region_writes[p_.region_of[pos]];
    if (!any_layout) return {write.base};
    return regionWriteReads(write);
  }
  if (readsAnyLayout(graph_.nodes()[pos]->opName()) != any_layout) return {};
  const c10::ArrayRef<NodeRef> inputs = graph_.inputsOf(pos);
  return {inputs.begin(), inputs.end()};
}

LoopId Partitioner::inMemory(const NodeRef& ref, bool any_layout) {
  const LoopId id = p_.node_loops[ref.position].at(ref.index);
  if (p_.realized[id]) return id;
  if (p_.view_of[id] >= 0) return rootOf(p_.views[p_.view_of[id]]);
  std::optional<StridedView> view = stridedViewOf(graph_, p_, id, ref);
  if (!view || (!any_layout && !isWholeRename(*view))) return id;
  p_.view_of[id] = static_cast<int32_t>(p_.views.size());
  p_.views.push_back(std::move(*view));
  return rootOf(p_.views.back());
}

LoopId Partitioner::rootOf(const StridedView& view) const {
  return p_.node_loops[view.source.position].at(view.source.index);
}

bool Partitioner::isWholeRename(const StridedView& view) const {
  const TensorMeta& meta = graph_.nodes()[view.value.position]->outputMeta(view.value.index);
  const TensorMeta& root = graph_.nodes()[view.source.position]->outputMeta(view.source.index);
  return view.offset == 0 && view.strides == meta.strides && meta.numel() == root.numel();
}

void Partitioner::capInlineDepth() {
  constexpr int32_t kMaxInlineDepth = 256;
  std::vector<int32_t> depth(p_.loops.nodes.size(), 0);
  for (LoopId id = 0; id < static_cast<LoopId>(depth.size()); ++id) {
    if (!p_.live[id] || p_.realized[id] || p_.view_of[id] >= 0) continue;
    for (LoopId in : p_.loops[id].inputs) depth[id] = std::max(depth[id], depth[in] + 1);
    if (depth[id] < kMaxInlineDepth) continue;
    p_.realized[id] = true;
    depth[id] = 0;
  }
}

bool Partitioner::readsOnlyMemory(LoopId id) const {
  std::vector<LoopId> stack = p_.loops[id].inputs;
  while (!stack.empty()) {
    const LoopNode& in = p_.loops[stack.back()];
    stack.pop_back();
    if (in.kind != LoopNode::kCompute) continue;
    if (!in.is_view) return false;
    stack.insert(stack.end(), in.inputs.begin(), in.inputs.end());
  }
  return true;
}

bool Partitioner::sharedAcrossKernels(LoopId id,
                                      const std::vector<std::vector<LoopId>>& users) const {
  std::vector<LoopId> consumers;
  std::vector<LoopId> stack = users[id];
  bool through_view = false;
  while (!stack.empty()) {
    LoopId u = stack.back();
    stack.pop_back();
    if (p_.loops[u].is_view && !p_.realized[u]) {
      through_view = true;
      stack.insert(stack.end(), users[u].begin(), users[u].end());
      continue;
    }
    consumers.push_back(u);
  }
  if (consumers.size() <= 1) return false;
  if (through_view) return true;
  for (LoopId u : consumers) {
    const LoopNode& user = p_.loops[u];
    if (user.kind == LoopNode::kReduce && cheapToRecompute(id)) continue;
    if (user.kind != LoopNode::kCompute || user.sizes != p_.loops[id].sizes) return true;
  }
  return false;
}

// Note [Values read on both sides of an extern call]
// sharedAcrossKernels leaves a value unwritten when its consumers are pointwise over its own
// sizes, expecting one kernel to compute them all. Consumers that an extern call separates
// cannot share one: an SGD momentum buffer feeds its step's parameter update, which the next
// step's matmul reads, and (through the next step's `buf * momentum`) the next step's buffer,
// which reads that matmul's gradient. Each kernel then computes the value again from its
// inputs, and along a chain of such values (a trace of many optimizer steps) every step's
// kernel recomputed all the steps before it: a 200-step loop built kernels of up to 24 KB of
// source, 45 s to compile. So each node gets an extern level (extern calls on the longest path
// from the graph's inputs), and each unwritten value the span of levels at which what reads it
// runs: a written consumer at its own level, an inlined one with its own span. A value whose
// span crosses an extern call is written, unless it is a short expression (cheapToRecompute).
// The nodes are visited consumers first, so a span sees the consumers' decisions.
void Partitioner::realizeAcrossExterns(const std::vector<std::vector<LoopId>>& users) {
  const LoopId n = static_cast<LoopId>(p_.loops.nodes.size());
  std::vector<int32_t> level(static_cast<size_t>(n), 0);
  for (LoopId id = 0; id < n; ++id) {
    const LoopNode& node = p_.loops[id];
    int32_t l = 0;
    for (LoopId in : node.inputs) l = std::max(l, level[in]);
    const uint32_t pos = node.source.position;
    if (node.kind == LoopNode::kBuffer && node.inputs.empty() && pos < p_.is_extern.size() &&
        p_.is_extern[pos] && !p_.absorbed[pos]) {
      for (bool any_layout : {false, true}) {
        for (const NodeRef& ref : externInputs(pos, any_layout)) {
          const LoopId in = p_.node_loops[ref.position].at(ref.index);
          if (in < id) l = std::max(l, level[in] + 1);
        }
      }
    }
    level[id] = l;
  }
  std::vector<std::pair<int32_t, int32_t>> span(static_cast<size_t>(n), {INT32_MAX, -1});
  for (LoopId id = n - 1; id >= 0; --id) {
    if (!p_.live[id]) continue;
    auto& [lo, hi] = span[id];
    for (LoopId c : users[id]) {
      const bool inlined = p_.loops[c].kind == LoopNode::kCompute && !p_.realized[c];
      lo = std::min(lo, inlined ? span[c].first : level[c]);
      hi = std::max(hi, inlined ? span[c].second : level[c]);
    }
    const LoopNode& node = p_.loops[id];
    if (lo < hi && !p_.realized[id] && node.kind == LoopNode::kCompute && !node.is_view &&
        p_.view_of[id] < 0 && !cheapToRecompute(id)) {
      p_.realized[id] = true;
    }
  }
}

bool Partitioner::cheapToRecompute(LoopId id) const {
  constexpr int kMaxOps = 8;
  int ops = 0;
  std::vector<LoopId> stack = {id};
  std::unordered_set<LoopId> seen;
  while (!stack.empty()) {
    LoopId n = stack.back();
    stack.pop_back();
    const LoopNode& node = p_.loops[n];
    const bool in_memory = node.kind != LoopNode::kCompute || (n != id && p_.realized[n]);
    if (in_memory || !seen.insert(n).second) continue;
    if (!node.is_view && ++ops > kMaxOps) return false;
    stack.insert(stack.end(), node.inputs.begin(), node.inputs.end());
  }
  return true;
}

}  // namespace lazyfuse::detail
