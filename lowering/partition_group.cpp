// Step 3 of Note [Fusion partitioning]: realized nodes grouped into kernels.

#include "lowering/detail/partitioner.h"

#include "lowering/kernel_builder.h"

#include <string>
#include <unordered_map>

namespace lazyfuse::detail {
namespace {

/// Builds a realized node's kernel body at its own index (as the emitter will) only to record
/// which realized nodes it reads, and whether each read is at exactly that index: the index
/// expressions themselves decide, so a reduction that reads a same-domain node at its own row
/// from inside its loop (softmax's sum reading the max) may share that node's kernel.
class ReadProbe final : public LoopContext {
 public:
  ReadProbe(const Partition& p, std::vector<int64_t> domain) : p_(p), builder_(std::move(domain)) {}

  KernelBuilder& ops() override { return builder_; }

  KValue at(LoopId id, const std::vector<IxPtr>& index) override {
    if (p_.realized[id]) {
      reads_.push_back({id, builder_.isIdentity(index)});
      // A stand-in load at an offset that uses the same variables, so scopes come out right.
      std::vector<int64_t> ones(index.size(), 1);
      const int32_t buffer = builder_.addBuffer(p_.loops[id].dtype, /*output=*/false);
      return builder_.load(buffer, ixOffset(index, ones));
    }
    LoopValueKey key{id, builder_.scope(), index};
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    KValue v = p_.loops[id].compute(*this, index);
    memo_.emplace(std::move(key), v);
    return v;
  }

  KValue param(int32_t, int32_t, c10::ScalarType dtype, int32_t) override {
    return builder_.newParam(dtype);
  }

  std::vector<std::pair<LoopId, bool>> takeReads() { return std::move(reads_); }

 private:
  const Partition& p_;
  KernelBuilder builder_;
  std::vector<std::pair<LoopId, bool>> reads_;
  LoopValueMemo memo_;
};

}  // namespace

void Partitioner::collectReads(LoopId id, Reads& reads) const {
  ReadProbe probe(p_, p_.loops[id].sizes);
  p_.loops[id].compute(probe, probe.ops().identityIndex());
  reads = probe.takeReads();
}

bool Partitioner::canJoin(const Reads& reads, const KernelGroup& g, int32_t gid) const {
  for (auto [dep, identity] : reads) {
    if (p_.group_of[dep] == gid) {
      if (!identity) return false;
      continue;
    }
    if (p_.step_of[dep] >= g.step) return false;
  }
  return true;
}

// Note [Bounded kernels]
// A kernel's C++ compiles in time that grows faster than its length: a chain of 1,000 pointwise
// ops in one function took 2.6 s to compile, of 5,000 ops 54 s, while 250-op functions take
// 0.3 s each. A loop that never syncs builds such chains. So a kernel group takes a new member
// only while the loop nodes its members compute (each realized node with the nodes inlined into
// it, each counted once per member: an upper bound where members share inlined nodes) stay within
// kMaxGroupNodes; a larger chain is cut into kernels of about that size, each writing its last
// value (4 bytes an element) for the next. Real kernels stay far below it: an optimizer step
// over 40 tensors of one shape is some 400 nodes.
constexpr int64_t kMaxGroupNodes = 512;

void Partitioner::group() {
  const size_t n = p_.loops.nodes.size();
  p_.group_of.assign(n, -1);
  p_.step_of.assign(n, -1);
  // See Note [Bounded kernels]: the compute nodes a realized node's body inlines, each once.
  std::vector<LoopId> seen_by(n, -1);
  auto bodyNodes = [&](LoopId root) {
    int64_t count = 0;
    std::vector<LoopId> stack = {root};
    while (!stack.empty()) {
      const LoopId id = stack.back();
      stack.pop_back();
      if (seen_by[id] == root || p_.loops[id].kind != LoopNode::kCompute) continue;
      seen_by[id] = root;
      ++count;
      for (LoopId in : p_.loops[id].inputs) {
        if (!p_.realized[in]) stack.push_back(in);
      }
    }
    return count;
  };
  for (LoopId id = 0; id < static_cast<LoopId>(n); ++id) {
    if (!p_.live[id] || !p_.realized[id]) continue;
    const LoopNode& node = p_.loops[id];
    if (node.kind == LoopNode::kBuffer) {
      const uint32_t pos = node.source.position;
      if (!p_.is_extern[pos]) continue;  // device data: read from the start
      if (p_.extern_step[pos] < 0) {
        for (bool any_layout : {false, true}) {
          for (const NodeRef& ref : externInputs(pos, any_layout))
            addViewStep(p_.node_loops[ref.position].at(ref.index));
        }
        p_.extern_step[pos] = static_cast<int32_t>(p_.steps.size());
        p_.steps.push_back({-1, pos});
      }
      p_.step_of[id] = p_.extern_step[pos];
      continue;
    }
    Reads reads;
    collectReads(id, reads);
    const int64_t nodes = bodyNodes(id);
    int32_t chosen = -1;
    for (int32_t gid = 0; gid < static_cast<int32_t>(p_.groups.size()) && chosen < 0; ++gid) {
      const KernelGroup& g = p_.groups[gid];
      if (g.domain == node.sizes && g.nodes + nodes <= kMaxGroupNodes && canJoin(reads, g, gid)) {
        chosen = gid;
      }
    }
    if (chosen < 0) {
      chosen = static_cast<int32_t>(p_.groups.size());
      p_.groups.push_back(KernelGroup{node.sizes, {}, static_cast<int32_t>(p_.steps.size())});
      p_.steps.push_back({chosen, 0});
    }
    p_.groups[chosen].members.push_back(id);
    p_.groups[chosen].nodes += nodes;
    p_.group_of[id] = chosen;
    p_.step_of[id] = p_.groups[chosen].step;
  }
  // Views only graph outputs need come last, after everything their roots' steps.
  for (const NodeRef& out : graph_.outputs())
    addViewStep(p_.node_loops[out.position].at(out.index));
}

void Partitioner::addViewStep(LoopId id) {
  const int32_t view = p_.view_of[id];
  if (view < 0 || p_.step_of[id] >= 0) return;
  p_.step_of[id] = static_cast<int32_t>(p_.steps.size());
  p_.steps.push_back({-1, 0, view});
}

}  // namespace lazyfuse::detail
