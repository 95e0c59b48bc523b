// The values a sync stores beyond its targets, and the device data it may donate. See Note
// [Values a sync keeps for later].

#include "backend/detail/kept_values.h"

#include "lazy_ir/check.h"

#include <unordered_map>
#include <unordered_set>

namespace lazyfuse::detail {

// Note [Values a sync keeps for later]
// A sync computes its targets, and on the way every value they depend on. Some of those values
// are needed again: a pending value outside the graph reads them, or a live tensor that is not a
// target holds them. The common case is a training loop that calls `loss.item()` each step and
// never mark_step(): the item syncs the forward pass, which reads the parameters as the last
// step's optimizer left them, while this step's optimizer update (pending, outside the graph)
// reads them too. Were only the targets stored, the next sync would compute those parameters
// again from the step before, and that one from the step before it: each graph would be larger
// than the last (a new compile every step, and work growing with the step count), and every
// step's tensors would stay alive through the pending trace.
// So the values of a graph's nodes that something outside the graph still reaches (more
// references than the graph, the roots and the targets account for, the count that
// freeDataInputs makes for donation) become graph outputs too. After the run each such node
// gets its buffers (Graph::setComputed): later graphs read them as device data where they would
// have computed the node, the node lets go of its inputs, and a live tensor pending on the node
// takes the buffer when next synced. So each step's graph starts from stored values, as eager's
// steps do, and its hash recurs. A random op computed once keeps its values too, as eager
// would. A mark_step() syncs every live tensor: nothing outside its targets holds a value, so
// it keeps no extra outputs (an asynchronous one keeps its targets' nodes: Note [Asynchronous
// steps]).
// Donation (Note [Donated buffers]) follows: what a kept node reads is not held by it, since
// nothing will compute the node again, so the loop's optimizer updates its state in place as
// under mark_step(). Device data standing for a computed node may be donated when nothing
// outside the graph reaches that node. Should the run fail after it donated device data, the
// kept nodes are marked failed instead (Graph::setFailed), like the targets (Note [Failed
// syncs]): what they read may be overwritten.

/// How many references to each node of `graph` the graph itself, `roots` and the targets (the
/// LazyData `roots` came from, each counted once) account for.
std::vector<size_t> internalUses(const Graph& graph, const std::vector<Value>& roots,
                                 const std::vector<LazyData*>& targets) {
  const std::vector<NodePtr>& nodes = graph.nodes();
  std::vector<size_t> internal(nodes.size(), 1);  // the graph's own reference
  for (size_t position = 0; position < nodes.size(); ++position) {
    for (const NodeRef& input : graph.inputsOf(position)) ++internal[input.position];
  }
  LF_INTERNAL_ASSERT(graph.outputs().size() >= roots.size(), "a graph output per root");
  std::unordered_set<const LazyData*> seen;
  for (size_t i = 0; i < roots.size(); ++i) {
    const uint32_t position = graph.outputs()[i].position;
    // A root whose node was computed resolves to device data the root does not reference.
    if (nodes[position].get() != roots[i].node.get()) continue;
    internal[position] += 1 + (seen.insert(targets[i]).second ? 1 : 0);
  }
  // Device data standing for a computed node: the inputs that read it name that node, not the
  // device data, and the node holds the device data. That hold is the graph's own when nothing
  // but the graph's nodes (and the graph's references to it, one per ComputedInput) name the
  // computed node.
  std::unordered_map<const Node*, size_t> entries;
  for (const Graph::ComputedInput& in : graph.computedInputs()) ++entries[in.owner.get()];
  for (const Graph::ComputedInput& in : graph.computedInputs()) {
    internal[in.position] -= in.resolved;
    if (in.owner.use_count() == in.uses + entries[in.owner.get()]) ++internal[in.position];
  }
  return internal;
}

/// For each node position of `graph`, whether it is device data whose node nothing reaches but
/// the graph and the sync targets, which the run replaces: its buffer may be donated (Note
/// [Donated buffers] in lowering/plan_donations.cpp). That is, it has no more references than
/// `internal` (internalUses) accounts for. An op node held from outside does not hold what it
/// reads: the run stores its value (Note [Values a sync keeps for later]), or, failing after a
/// donation, marks it failed.
std::vector<uint8_t> freeDataInputs(const Graph& graph, const std::vector<size_t>& internal) {
  const std::vector<NodePtr>& nodes = graph.nodes();
  std::vector<uint8_t> free(nodes.size(), 0);
  for (uint32_t position : graph.dataPositions()) {
    free[position] = static_cast<size_t>(nodes[position].use_count()) <= internal[position];
  }
  return free;
}

/// The op nodes of `graph` that something outside it still reaches; their values are kept. See
/// Note [Values a sync keeps for later].
std::vector<uint32_t> nodesToKeep(const Graph& graph, const std::vector<size_t>& internal) {
  const std::vector<NodePtr>& nodes = graph.nodes();
  std::vector<uint32_t> keep;
  for (size_t position = 0; position < nodes.size(); ++position) {
    if (nodes[position]->kind() != OpKind::kAten || nodes[position]->numOutputs() == 0) continue;
    if (static_cast<size_t>(nodes[position].use_count()) > internal[position]) {
      keep.push_back(static_cast<uint32_t>(position));
    }
  }
  return keep;
}

/// Makes every output of the nodes at `keep` a graph output (after the roots), and returns, per
/// node, the graph output index of each of its outputs.
std::vector<std::vector<size_t>> addKeptOutputs(Graph& graph, const std::vector<uint32_t>& keep) {
  std::vector<std::vector<size_t>> slots(keep.size());
  std::vector<NodeRef> added;
  const size_t roots = graph.outputs().size();
  for (size_t k = 0; k < keep.size(); ++k) {
    const uint32_t position = keep[k];
    const size_t count = graph.nodes()[position]->numOutputs();
    for (uint32_t index = 0; index < count; ++index) {
      size_t slot = roots + added.size();
      for (size_t i = 0; i < roots; ++i) {
        const NodeRef& out = graph.outputs()[i];
        if (out.position == position && out.index == index) {
          slot = i;
          break;
        }
      }
      if (slot == roots + added.size()) added.push_back({position, index});
      slots[k].push_back(slot);
    }
  }
  graph.addOutputs(added);
  return slots;
}

}  // namespace lazyfuse::detail
