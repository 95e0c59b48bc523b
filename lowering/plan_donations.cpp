#include "lazy_ir/check.h"
#include "lowering/lowerings.h"
#include "lowering/passes.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace lazyfuse {
namespace {

// Note [Donated buffers]
// Every output of a fused kernel used to be fresh memory. An optimizer step reads p, grad, m
// and v and writes new p, m and v, while the old p, m and v are dead once the step ran: eager
// updates them in place, and the lazy step allocated three new buffers per parameter. On the
// CPU that is a page fault per fresh 4 KiB (or 2 MiB) page and a read for ownership of every
// output cache line (eager's in-place update writes lines it just read); on a GPU, a CUDA graph
// replay needs each step to write where the step before it did. So an output may be written
// into the memory of an input it replaces: the input is *donated*.
//
// Here, at plan time, each output of a kernel without reductions gets at most one candidate
// input: a graph value (device data or an intermediate, not a plan temporary) that
//   - has the output's dtype, sizes and strides, and is not a graph output;
//   - this step uses last, counting the uses of every strided view of its memory; device data
//     sharing its storage with other device data (a parameter and the base functionalization
//     keeps for it, both read by a training step) qualifies when those others are used only
//     before this step and are no graph outputs;
//   - is bound by this one buffer of one kernel of the step (in a kernel batch, no other
//     member reads it), and every load of it is at the index the output is stored at, so each
//     element is read by the point that then overwrites it (the CPU loop's `omp simd` and the
//     CUDA 4-wide variant read a point's elements before they store them);
//   - if it is device data, has no extern step after it in the plan: extern calls are the
//     steps that raise at run time, and a graph that fails after a device-data buffer was
//     donated cannot be rerun target by target (Note [Failed syncs]), since the rerun would
//     read that buffer; backend/graph_executor.cpp then breaks every target of the graph. An
//     intermediate value is computed again by a rerun, so its memory may be donated anywhere
//     (an extern's result that a kernel reads last, between two matmuls).
// Both buffers of a candidate pair are marked may_alias: the CUDA rendering declares them
// without __restrict__ (which would let the compiler load through the non-coherent read-only
// cache or move a load past a store).
//
// An output may also (or, with no such input, instead) take device data that no step of the plan
// reads and that is no graph output (each such value at most once in a plan): the old value of a
// tensor that the step overwrites whole. `out.copy_(f(x))` records copy(old, f(x)), whose lowering
// reads only f(x), yet the graph holds `old` until the plan has run, so without this the
// output needed fresh memory while the old value's memory sat idle: one buffer more of working
// set than eager's `out=` (a 4M float32 binary op alone: 48 MB against 32 MB, on a 32 MB L3).
// At run time the input is tried first. Its layout must be the output's and the device data sharing
// its storage must be done before the step, as above. The kernel never reads it, so it needs no
// may_alias, and any step may take it: a rerun after a failure (Note [Failed syncs]) reads it no
// more than this plan does, since an op whose fused lowering does not read a value computes the
// same result whatever it holds.
//
// At run time (kernels/fused_runner.cpp, outputBuffer) the candidate is taken only when nothing
// but the plan holds its memory: the tensor is held by the plan's values alone (and, for device
// data, by its node), its storage by that tensor alone (or by the tensors of the device data
// sharing it, each held the same way; the plan lists those, as the graph hash covers which
// device data share storage), and a device-data node is reachable from nothing outside
// the graph but the sync targets being replaced (backend/graph_executor.cpp).
// Otherwise the output is allocated as before. Counted in BuffersDonated; LAZYFUSE_DONATE=0
// turns donation off. The CPU target takes no donation inside a row group (Note [CPU row
// groups]): its statistics kernel may read rows its epilogue already wrote, so a plan's "may
// take" there is for the CUDA target, which runs the two kernels one after the other.

/// The single index text at which kernel buffer `buffer` is loaded (or, with `stores`, stored
/// into), or "" when it is accessed at two indices (or not at all).
std::string accessIndex(const Kernel& kernel, int32_t buffer, bool stores) {
  std::vector<const IxPtr*> indices;
  if (stores) {
    for (const KStore& store : kernel.stores) {
      if (store.buffer == buffer) indices.push_back(&store.index);
    }
  } else {
    for (const KInstr& instr : kernel.instrs) {
      if (instr.op == KOp::kLoad && instr.buffer == buffer) indices.push_back(&instr.index);
    }
  }
  std::string index;
  for (const IxPtr* ix : indices) {
    const std::string text = ixText(*ix);
    if (!index.empty() && text != index) return "";
    index = text;
  }
  return index;
}

/// For each node position of `graph`, the positions of the other device-data nodes whose
/// buffers share a storage with its own (none for a position that is not device data).
std::vector<std::vector<uint32_t>> storageSharers(const Graph& graph) {
  const std::vector<uint32_t>& data = graph.dataPositions();
  const std::vector<uint32_t>& classes = graph.aliasClasses();
  std::map<uint32_t, std::vector<uint32_t>> members;  // alias class -> its positions
  for (size_t i = 0; i < data.size(); ++i) members[classes[i]].push_back(data[i]);
  std::vector<std::vector<uint32_t>> sharers(graph.nodes().size());
  for (const auto& [cls, positions] : members) {
    if (positions.size() < 2) continue;
    for (uint32_t position : positions) {
      for (uint32_t other : positions) {
        if (other != position) sharers[position].push_back(other);
      }
    }
  }
  return sharers;
}

using ValueKey = std::pair<uint32_t, uint32_t>;  // node position, output index

ValueKey keyOf(const NodeRef& ref) { return {ref.position, ref.index}; }

/// The last step using each node position, where a step using a strided view of a value's
/// memory also uses that value.
std::vector<uint32_t> lastUsesThroughViews(const Graph& graph, const ExecutionPlan& plan) {
  std::vector<uint32_t> last = lastUses(graph, plan);
  for (auto it = plan.views.rbegin(); it != plan.views.rend(); ++it) {
    uint32_t& source = last.at(it->source.position);
    const uint32_t view = last.at(it->value.position);
    if (view != kNeverUsed && (source == kNeverUsed || view > source)) source = view;
  }
  return last;
}

/// True when every device-data input in `sharers` is used before step `s` only, and none is a
/// graph output.
bool sharersDoneBefore(const std::vector<uint32_t>& sharers, uint32_t s,
                       const std::vector<uint32_t>& last, const std::set<ValueKey>& outputs) {
  for (uint32_t other : sharers) {
    if (outputs.count({other, 0}) || (last.at(other) != kNeverUsed && last.at(other) >= s)) {
      return false;
    }
  }
  return true;
}

/// Device data that no step of the plan reads and that is no graph output: the old value of a
/// tensor a sync target overwrites whole (`out.copy_(...)`), which the graph holds only so that
/// the plan can take its memory.
std::vector<uint32_t> unreadData(const Graph& graph, const std::vector<uint32_t>& last,
                                 const std::set<ValueKey>& outputs) {
  std::vector<uint32_t> unread;
  for (uint32_t position : graph.dataPositions()) {
    if (last.at(position) == kNeverUsed && !outputs.count({position, 0})) {
      unread.push_back(position);
    }
  }
  return unread;
}

/// Gives output buffer `o` of `fused` (step `s`) the first device data of `unread` with its
/// layout, and removes that from `unread`.
void takeUnread(const Graph& graph, uint32_t s, FusedKernel& fused, size_t o,
                const std::vector<uint32_t>& last, const std::set<ValueKey>& outputs,
                const std::vector<std::vector<uint32_t>>& sharers, std::vector<uint32_t>& unread) {
  for (auto it = unread.begin(); it != unread.end(); ++it) {
    const TensorMeta& meta = graph.nodes()[*it]->outputMeta(0);
    if (!(meta == fused.buffers[o].meta) || !sharersDoneBefore(sharers.at(*it), s, last, outputs)) {
      continue;
    }
    Donation d{static_cast<int32_t>(o), -1, BufferBinding{}, sharers.at(*it)};
    d.unread.value = NodeRef{*it, 0};
    d.unread.meta = meta;
    fused.donations.push_back(std::move(d));
    unread.erase(it);
    return;
  }
}

/// The input buffer of `fused` that output buffer `o` replaces, when the output's value is its
/// op's `self` (for a foreach op, the list element of its own index; for a fused optimizer step,
/// whose output lists mirror its first input lists, the input of its own index), through any
/// number of ops: `p.mul_(a).add_(b)` replaces p. -1 when the chain reaches no input of the
/// kernel.
int32_t replacedInput(const Graph& graph, const FusedKernel& fused, size_t o) {
  NodeRef cur = fused.buffers[o].value;
  for (size_t steps = 0; steps < graph.nodes().size(); ++steps) {
    for (size_t i = 0; i < fused.buffers.size(); ++i) {
      const BufferBinding& in = fused.buffers[i];
      if (!fused.kernel.buffers[i].output && !in.temp && in.value.position == cur.position &&
          in.value.index == cur.index) {
        return static_cast<int32_t>(i);
      }
    }
    const Node& node = *graph.nodes()[cur.position];
    const c10::ArrayRef<NodeRef> inputs = graph.inputsOf(cur.position);
    if (node.kind() != OpKind::kAten || inputs.empty()) return -1;
    const std::string& name = node.aten().name;
    const bool by_index = name.rfind("aten::_foreach_", 0) == 0 || isFusedOptimizerOp(name);
    cur = inputs[by_index && cur.index < inputs.size() ? cur.index : 0];
  }
  return -1;
}

/// Plans the donations of the kernels of step `s`; of device data read by the step only when
/// `data`.
void planStep(const Graph& graph, uint32_t s, bool data, const std::vector<int32_t>& kernels,
              const std::vector<uint32_t>& last, const std::set<ValueKey>& outputs,
              const std::vector<std::vector<uint32_t>>& sharers, std::vector<uint32_t>& unread,
              ExecutionPlan& plan) {
  std::map<ValueKey, int> bindings;
  for (int32_t k : kernels) {
    for (const BufferBinding& b : plan.kernels.at(k).buffers) {
      if (!b.temp) ++bindings[keyOf(b.value)];
    }
  }
  for (int32_t k : kernels) {
    FusedKernel& fused = plan.kernels.at(k);
    Kernel& kernel = fused.kernel;
    if (!kernel.reductions.empty()) continue;
    std::vector<bool> taken(kernel.buffers.size(), false);
    for (size_t o = 0; o < kernel.buffers.size(); ++o) {
      if (!kernel.buffers[o].output || fused.buffers[o].temp) continue;
      const std::string stored = accessIndex(kernel, static_cast<int32_t>(o), /*stores=*/true);
      // The input the output replaces is tried first: another input of the same layout (a
      // gradient beside the parameter it updates) may be held by the program at run time.
      std::vector<size_t> order;
      const int32_t replaced = replacedInput(graph, fused, o);
      if (replaced >= 0) order.push_back(static_cast<size_t>(replaced));
      for (size_t i = 0; i < kernel.buffers.size(); ++i) {
        if (static_cast<int32_t>(i) != replaced) order.push_back(i);
      }
      for (size_t i : order) {
        if (stored.empty()) break;
        const BufferBinding& in = fused.buffers[i];
        if (kernel.buffers[i].output || in.temp || taken[i]) continue;
        if (!data && graph.nodes()[in.value.position]->kind() == OpKind::kDeviceData) continue;
        if (!(in.meta == fused.buffers[o].meta) || outputs.count(keyOf(in.value)) ||
            last.at(in.value.position) != s || bindings.at(keyOf(in.value)) != 1 ||
            accessIndex(kernel, static_cast<int32_t>(i), /*stores=*/false) != stored ||
            !sharersDoneBefore(sharers.at(in.value.position), s, last, outputs)) {
          continue;
        }
        taken[i] = true;
        fused.donations.push_back({static_cast<int32_t>(o), static_cast<int32_t>(i),
                                   BufferBinding{}, sharers.at(in.value.position)});
        kernel.buffers[o].may_alias = kernel.buffers[i].may_alias = true;
        kernel.buffers[o].donor = static_cast<int32_t>(i);
        break;
      }
      takeUnread(graph, s, fused, o, last, outputs, sharers, unread);
    }
  }
}

}  // namespace

bool planDonations(const Graph& graph, ExecutionPlan& plan) {
  uint32_t first = 0;  // the first step after the last extern call: device data from there
  for (uint32_t s = 0; s < plan.steps.size(); ++s) {
    const StepKind kind = plan.steps[s].kind;
    if (kind == StepKind::kExternCall || kind == StepKind::kRegionWrite) first = s + 1;
  }
  const std::vector<uint32_t> last = lastUsesThroughViews(graph, plan);
  const std::vector<std::vector<uint32_t>> sharers = storageSharers(graph);
  std::set<ValueKey> outputs;
  for (const NodeRef& out : graph.outputs()) outputs.insert(keyOf(out));
  // See Note [Region writes]: a base that nothing reads afterwards.
  for (uint32_t s = 0; s < plan.steps.size(); ++s) {
    if (plan.steps[s].kind != StepKind::kRegionWrite) continue;
    RegionWrite& write = plan.region_writes.at(plan.steps[s].region);
    // index_copy_ refuses a source or index that overlaps what it writes; a base that is a view
    // of another buffer is written into a copy, never handed out as a slice of that buffer.
    const std::vector<NodeRef> reads = regionWriteReads(write);
    auto reads_value = [&](uint32_t position) {
      return std::any_of(reads.begin(), reads.end(),
                         [&](const NodeRef& in) { return in.position == position; });
    };
    bool shares_base = reads_value(write.base.position);
    for (const StridedView& view : plan.views) {
      shares_base =
          shares_base || view.value.position == write.base.position ||
          (view.source.position == write.base.position && reads_value(view.value.position));
    }
    const bool data = graph.nodes()[write.base.position]->kind() == OpKind::kDeviceData;
    write.may_donate =
        !outputs.count(keyOf(write.base)) && last.at(write.base.position) == s && !shares_base &&
        (!data || sharersDoneBefore(sharers.at(write.base.position), s, last, outputs));
    if (data) write.sharers = sharers.at(write.base.position);
  }
  std::vector<uint32_t> unread = unreadData(graph, last, outputs);
  for (uint32_t s = 0; s < plan.steps.size(); ++s) {
    const PlanStep& step = plan.steps[s];
    if (step.kind != StepKind::kFusedKernel && step.kind != StepKind::kKernelBatch) continue;
    const std::vector<int32_t> kernels = step.kind == StepKind::kFusedKernel
                                             ? std::vector<int32_t>{step.kernel}
                                             : plan.batches.at(step.batch).kernels;
    planStep(graph, s, s >= first, kernels, last, outputs, sharers, unread, plan);
    if (step.kind != StepKind::kKernelBatch) continue;
    // A batch renders one kernel for all its members: a buffer that may alias in one member is
    // declared so in all.
    const size_t buffers = plan.kernels.at(kernels[0]).kernel.buffers.size();
    for (size_t b = 0; b < buffers; ++b) {
      bool any = false;
      for (int32_t k : kernels) any = any || plan.kernels.at(k).kernel.buffers.at(b).may_alias;
      for (int32_t k : kernels) plan.kernels.at(k).kernel.buffers.at(b).may_alias = any;
    }
  }
  // outputBuffer (kernels/fused_runner.cpp) finds an output's donations by binary search.
  for (const FusedKernel& fused : plan.kernels) {
    LF_INTERNAL_ASSERT(
        std::is_sorted(fused.donations.begin(), fused.donations.end(),
                       [](const Donation& a, const Donation& b) { return a.output < b.output; }),
        "a kernel's donations are not ordered by output");
  }
  return hasDonations(plan);
}

}  // namespace lazyfuse
