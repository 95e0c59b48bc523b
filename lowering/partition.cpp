// Note [Fusion partitioning]
// 1. Lower: every ATen node becomes loop nodes (Note [Loop graph]) or, when it cannot, an extern
//    step whose outputs are buffers.
// 2. Realize: a loop node is written to memory when it is a graph output, feeds an extern step,
//    is a reduction, or is used by several consumers that cannot share one kernel with it
//    (a consumer of other sizes, or a reduction unless the node is a short pointwise expression,
//    which is cheaper to recompute in each kernel than to store). Everything else is inlined
//    into its users; views are always inlined (recomputing an index is free).
// 3. Group: realized nodes are visited in graph order; each joins the first kernel of the same
//    domain (its sizes) whose step comes after everything it reads, except members it reads at
//    exactly its own index (a fused epilogue, or a reduction whose loop uses an earlier
//    reduction of the same row: softmax's max and sum share one kernel, and the second loop
//    reads the row from cache); otherwise it opens a new kernel step. Which reads are at the
//    node's own index is decided on the index expressions, by building the node's body once
//    (ReadProbe). Extern steps keep graph order. Every node is visited once and every edge a
//    bounded number of times per realized node, so this is near-linear in graph size (each
//    kernel body is built twice: once by the probe, once to emit it).
// 4. Emit: each kernel is built by running its members' lowerings at the identity index.
#include "lowering/passes.h"

#include "lowering/detail/strided_views.h"
#include "lowering/kernel_emitter.h"
#include "lowering/lowerings.h"
#include "lazy_ir/check.h"

#include <cstring>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace lazyfuse {
namespace {

bool supportedDtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Bool: case c10::ScalarType::Byte: case c10::ScalarType::Char:
    case c10::ScalarType::Short: case c10::ScalarType::Int: case c10::ScalarType::Long:
    case c10::ScalarType::Half: case c10::ScalarType::BFloat16: case c10::ScalarType::Float:
    case c10::ScalarType::Double:
      return true;
    default:
      return false;
  }
}

/// Whether the kernels can compute this node: plain dtypes, no empty tensors, no written args.
bool lowerable(const Graph& graph, uint32_t position) {
  const Node& node = *graph.nodes()[position];
  const AtenCallAttrs& attrs = node.aten();
  for (const ArgSlot& slot : attrs.args) {
    if (slot.mutated) return false;
  }
  for (const TensorMeta& out : attrs.outputs) {
    if (!supportedDtype(out.dtype) || out.numel() == 0) return false;
  }
  for (const NodeRef& ref : graph.inputsOf(position)) {
    const TensorMeta& in = graph.nodes()[ref.position]->outputMeta(ref.index);
    if (!supportedDtype(in.dtype) || in.numel() == 0) return false;
  }
  return true;
}

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
    std::string key = std::to_string(id) + "@" + std::to_string(builder_.scope());
    for (const IxPtr& ix : index) key += "|" + ixText(ix);
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
  std::unordered_map<std::string, KValue> memo_;
};

// Note [Ops left to ATen on a target]
// A few kernel functions have no vector form on the CPU: glibc's libmvec has no fmod and no
// lgamma, fmod must be exact, and lgamma must follow glibc's special values, so a fused CPU
// loop calls the scalar function per element and runs at 0.07-0.41x ATen's own kernel (which
// calls SLEEF's vector fmod and its own vectorized lgamma; docs/kernel_sweep.md). On the CPU
// these ops are therefore extern steps, ATen's kernel, not fused loops: their neighbours still
// fuse, before and after. On CUDA, fmodf and lgammaf are device functions as fast as any, and
// they fuse. Pinned by test_fusion.py::test_ops_left_to_aten_on_the_cpu.
bool leftToAten(const Node& node, KernelTarget target) {
  if (target != KernelTarget::kCpu) return false;
  const std::string& name = node.aten().name;
  for (const char* op : {"aten::fmod", "aten::remainder", "aten::lgamma"}) {
    const size_t n = std::strlen(op);
    if (name.compare(0, n, op) == 0 && (name.size() == n || name[n] == '.')) return true;
  }
  return false;
}

// What a user can do about an internal error in lowering or kernel generation.
constexpr const char* kFailureHint =
    "(LAZYFUSE_DUMP=ir writes the graph, LAZYFUSE_FUSION=0 runs it without fusion): ";

class Partitioner {
 public:
  Partitioner(const Graph& graph, KernelTarget target)
      : graph_(graph), target_(target), p_(graph.nodes().size()) {}

  void run(ExecutionPlan& plan) {
    lowerNodes();
    plan.unfused_nodes = unfused_;
    try {
      markRealized();
      group();
      emitKernels(graph_, p_, plan);
    } catch (const c10::Error& e) {
      // The lowerings' closures run here; an error of ours in them names the graph. See Note
      // [Loud lowering errors].
      LF_INTERNAL_ASSERT(false, "generating the kernels of graph 0x", std::hex, graph_.hash(),
                         std::dec, " failed ", kFailureHint, e.what_without_backtrace());
    }
  }

 private:
  void lowerNodes() {
    for (uint32_t pos = 0; pos < graph_.nodes().size(); ++pos) {
      const Node& node = *graph_.nodes()[pos];
      if (node.kind() == OpKind::kDeviceData) {
        p_.node_loops[pos] = {addBuffer(pos, 0, node.outputMeta(0))};
        continue;
      }
      if (lowerable(graph_, pos) && !leftToAten(node, target_) && tryLower(pos)) continue;
      p_.is_extern[pos] = true;
      ++unfused_;
      for (uint32_t k = 0; k < node.numOutputs(); ++k) {
        p_.node_loops[pos].push_back(addBuffer(pos, k, node.outputMeta(k)));
      }
    }
  }

  LoopId addBuffer(uint32_t pos, uint32_t k, const TensorMeta& meta) {
    LoopNode node;
    node.kind = LoopNode::kBuffer;
    node.dtype = meta.dtype;
    node.sizes = meta.sizes;
    node.source = NodeRef{pos, k};
    node.position = static_cast<int32_t>(pos);
    return addLoop(std::move(node), NodeRef{pos, k});
  }

  LoopId addLoop(LoopNode node, std::optional<NodeRef> ref) {
    LoopId id = p_.loops.add(std::move(node));
    p_.ref_of.resize(p_.loops.nodes.size());
    if (ref) p_.ref_of[id] = *ref;
    return id;
  }

  bool tryLower(uint32_t pos) {
    const Node& node = *graph_.nodes()[pos];
    std::vector<LoopId> inputs;
    for (const NodeRef& ref : graph_.inputsOf(pos)) {
      inputs.push_back(p_.node_loops[ref.position].at(ref.index));
    }
    const size_t before = p_.loops.nodes.size();
    LoweringCall call(p_.loops, node, static_cast<int32_t>(pos), inputs);
    bool ok = false;
    try {
      ok = lowerCall(call) && call.outputs.size() == node.numOutputs();
    } catch (const c10::Error& e) {
      // An argument form the lowering does not know (an IValue of another type than it reads):
      // the node runs its ATen kernel instead. An assertion of ours is a bug: the sync fails.
      // See Note [Loud lowering errors].
      LF_INTERNAL_ASSERT(std::string_view(e.what()).find(kInternalErrorPrefix) ==
                             std::string_view::npos,
                         "lowering ", node.opName(), " (node %", pos, ") of graph 0x", std::hex,
                         graph_.hash(), std::dec, " failed ", kFailureHint,
                         e.what_without_backtrace());
      ok = false;
    }
    if (!ok) {
      p_.loops.nodes.resize(before);  // drop what a declined lowering had made
      p_.ref_of.resize(before);
      return false;
    }
    p_.ref_of.resize(p_.loops.nodes.size());
    for (uint32_t k = 0; k < call.outputs.size(); ++k) {
      LoopId id = call.outputs[k];
      LF_INTERNAL_ASSERT(id >= static_cast<LoopId>(before) && !p_.ref_of[id],
                         node.opName(), " returned a loop node it did not make");
      const TensorMeta& meta = node.outputMeta(k);
      LF_INTERNAL_ASSERT(p_.loops[id].sizes == meta.sizes && p_.loops[id].dtype == meta.dtype,
                         node.opName(), " output ", k, " lowered with another shape or dtype");
      p_.ref_of[id] = NodeRef{pos, k};
    }
    p_.node_loops[pos] = call.outputs;
    return true;
  }

  void markRealized() {
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
        if (!p_.is_extern[pos]) continue;
        if (readsAnyLayout(graph_.nodes()[pos]->opName()) != any_layout) continue;
        for (const NodeRef& ref : graph_.inputsOf(pos)) need(inMemory(ref, any_layout));
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
    capInlineDepth();
  }

  /// The loop node that must be in memory for graph value `ref` to be: its own, or, when the
  /// value can be a view of another value's buffer, that value's (the view is recorded). Unless
  /// `any_layout`, only a whole rename qualifies: a view indistinguishable from a fresh tensor.
  LoopId inMemory(const NodeRef& ref, bool any_layout) {
    const LoopId id = p_.node_loops[ref.position].at(ref.index);
    if (p_.realized[id]) return id;
    if (p_.view_of[id] >= 0) return rootOf(p_.views[p_.view_of[id]]);
    std::optional<StridedView> view = stridedViewOf(graph_, p_, id, ref);
    if (!view || (!any_layout && !isWholeRename(*view))) return id;
    p_.view_of[id] = static_cast<int32_t>(p_.views.size());
    p_.views.push_back(std::move(*view));
    return rootOf(p_.views.back());
  }

  LoopId rootOf(const StridedView& view) const {
    return p_.node_loops[view.source.position].at(view.source.index);
  }

  /// The view has the value's own layout, and covers its root's buffer exactly (so neither
  /// holds on to a larger buffer nor lets an op read past its end).
  bool isWholeRename(const StridedView& view) const {
    const TensorMeta& meta = graph_.nodes()[view.value.position]->outputMeta(view.value.index);
    const TensorMeta& root = graph_.nodes()[view.source.position]->outputMeta(view.source.index);
    return view.offset == 0 && view.strides == meta.strides && meta.numel() == root.numel();
  }

  /// Realizes every kMaxInlineDepth-th node of a long inlined chain: kernels are built by
  /// recursion through inlined nodes, and memory traffic is cheap next to a stack overflow.
  void capInlineDepth() {
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

  /// True when every input of `id` is in memory (through views): recomputing it reads what
  /// reading it back would, so it is never worth writing.
  bool readsOnlyMemory(LoopId id) const {
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

  /// Whether `id`'s consumers (looking through views) may end up in different kernels.
  bool sharedAcrossKernels(LoopId id, const std::vector<std::vector<LoopId>>& users) const {
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

  /// Whether `id` is a short pointwise expression: recomputing it inside a reduction's loop and
  /// again in the kernel of its other consumers costs less than writing it to memory and reading
  /// it back (softmax's exp(x - max), layer norm backward's dy * weight).
  bool cheapToRecompute(LoopId id) const {
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

  /// Realized nodes a node reads, each with whether every read is at the node's own index.
  using Reads = std::vector<std::pair<LoopId, bool>>;

  void group();
  /// Appends the kStridedView step of loop node `id` if it is a view that has none yet.
  void addViewStep(LoopId id);
  /// Whether a node with `reads` can be computed in group `gid`.
  bool canJoin(const Reads& reads, const KernelGroup& g, int32_t gid) const;
  void collectReads(LoopId id, Reads& reads) const;

  const Graph& graph_;
  KernelTarget target_;
  Partition p_;
  uint32_t unfused_ = 0;  // see ExecutionPlan::unfused_nodes
};

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
        for (const NodeRef& ref : graph_.inputsOf(pos)) addViewStep(p_.node_loops[ref.position].at(ref.index));
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
      if (g.domain == node.sizes && g.nodes + nodes <= kMaxGroupNodes &&
          canJoin(reads, g, gid)) {
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
  for (const NodeRef& out : graph_.outputs()) addViewStep(p_.node_loops[out.position].at(out.index));
}

void Partitioner::addViewStep(LoopId id) {
  const int32_t view = p_.view_of[id];
  if (view < 0 || p_.step_of[id] >= 0) return;
  p_.step_of[id] = static_cast<int32_t>(p_.steps.size());
  p_.steps.push_back({-1, 0, view});
}

}  // namespace

Partition::Partition(size_t num_nodes)
    : node_loops(num_nodes), is_extern(num_nodes, false), extern_step(num_nodes, -1) {}

bool partitionGraph(const Graph& graph, ExecutionPlan& plan, KernelTarget target) {
  Partitioner(graph, target).run(plan);
  return !plan.steps.empty();
}

}  // namespace lazyfuse
