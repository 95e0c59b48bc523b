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

#include "lazy_ir/check.h"
#include "lowering/detail/partitioner.h"
#include "lowering/detail/region_writes.h"
#include "lowering/lowerings.h"

#include <cstring>
#include <string_view>

namespace lazyfuse {
namespace {

bool supportedDtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Bool:
    case c10::ScalarType::Byte:
    case c10::ScalarType::Char:
    case c10::ScalarType::Short:
    case c10::ScalarType::Int:
    case c10::ScalarType::Long:
    case c10::ScalarType::Half:
    case c10::ScalarType::BFloat16:
    case c10::ScalarType::Float:
    case c10::ScalarType::Double: return true;
    default: return false;
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

}  // namespace

namespace detail {

void Partitioner::run(ExecutionPlan& plan) {
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

void Partitioner::lowerNodes() {
  p_.region_writes = findRegionWrites(graph_, p_.region_of, p_.absorbed);
  for (uint32_t pos = 0; pos < graph_.nodes().size(); ++pos) {
    const Node& node = *graph_.nodes()[pos];
    if (node.kind() == OpKind::kDeviceData) {
      p_.node_loops[pos] = {addBuffer(pos, 0, node.outputMeta(0))};
      continue;
    }
    // A node a region write computes, or takes the place of, is a buffer no kernel computes.
    const bool written = p_.region_of[pos] >= 0 || p_.absorbed[pos];
    if (!written && lowerable(graph_, pos) && !leftToAten(node, target_) && tryLower(pos)) {
      continue;
    }
    p_.is_extern[pos] = true;
    if (!p_.absorbed[pos]) ++unfused_;
    for (uint32_t k = 0; k < node.numOutputs(); ++k) {
      p_.node_loops[pos].push_back(addBuffer(pos, k, node.outputMeta(k)));
    }
  }
}

LoopId Partitioner::addBuffer(uint32_t pos, uint32_t k, const TensorMeta& meta) {
  LoopNode node;
  node.kind = LoopNode::kBuffer;
  node.dtype = meta.dtype;
  node.sizes = meta.sizes;
  node.source = NodeRef{pos, k};
  node.position = static_cast<int32_t>(pos);
  return addLoop(std::move(node), NodeRef{pos, k});
}

LoopId Partitioner::addLoop(LoopNode node, std::optional<NodeRef> ref) {
  LoopId id = p_.loops.add(std::move(node));
  p_.ref_of.resize(p_.loops.nodes.size());
  if (ref) p_.ref_of[id] = *ref;
  return id;
}

bool Partitioner::tryLower(uint32_t pos) {
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
    LF_INTERNAL_ASSERT(
        std::string_view(e.what()).find(kInternalErrorPrefix) == std::string_view::npos,
        "lowering ", node.opName(), " (node %", pos, ") of graph 0x", std::hex, graph_.hash(),
        std::dec, " failed ", kFailureHint, e.what_without_backtrace());
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
    LF_INTERNAL_ASSERT(id >= static_cast<LoopId>(before) && !p_.ref_of[id], node.opName(),
                       " returned a loop node it did not make");
    const TensorMeta& meta = node.outputMeta(k);
    LF_INTERNAL_ASSERT(p_.loops[id].sizes == meta.sizes && p_.loops[id].dtype == meta.dtype,
                       node.opName(), " output ", k, " lowered with another shape or dtype");
    p_.ref_of[id] = NodeRef{pos, k};
  }
  p_.node_loops[pos] = call.outputs;
  return true;
}

}  // namespace detail

Partition::Partition(size_t num_nodes)
    : node_loops(num_nodes), is_extern(num_nodes, false), extern_step(num_nodes, -1) {}

bool partitionGraph(const Graph& graph, ExecutionPlan& plan, KernelTarget target) {
  detail::Partitioner(graph, target).run(plan);
  return !plan.steps.empty();
}

}  // namespace lazyfuse
