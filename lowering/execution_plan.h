#pragma once

// An ExecutionPlan is what a Graph lowers to, and what the graph cache holds: an ordered list of
// steps, each a fused kernel or an extern call (the node's ATen kernel on the hardware device).
// A plan refers to nodes by their position, so it serves every graph with the same hash. See
// Note [What a graph hash covers].

#include "lazy_ir/graph.h"
#include "lowering/kernel_ir.h"

#include <memory>
#include <string>
#include <vector>

namespace lazyfuse {

enum class StepKind : uint8_t {
  kExternCall,   // run the ATen kernel of the node at `position` on the hardware device
  kFusedKernel,  // run kernels[kernel]
  kKernelBatch,  // run the kernels of batches[batch], independent of each other, in any order
  kStridedView,  // take views[view]: a value that is a strided view of another one's buffer
  kRegionWrite,  // run region_writes[region]: index_copy_ into a region of a value's buffer
};

/// What one kernel buffer is at run time: a graph value (node output) or a plan temporary.
struct BufferBinding {
  bool temp = false;
  NodeRef value;      // !temp
  int32_t slot = -1;  // temp: index into the plan's temporaries
  TensorMeta meta;    // dtype, sizes and strides the kernel indexes it with
};

/// Kernel parameter k is parameter `index` of the node at `position`; for a Scalar[] parameter
/// (a foreach op's scalars), its entry `element`.
struct ParamBinding {
  uint32_t position = 0;
  uint32_t index = 0;
  bool floating = false;
  int32_t element = -1;
};

/// Output buffer `output` of a kernel may be written into the memory of its input buffer
/// `input`, or of device data `unread` that no step of the plan reads, when at run time nothing
/// but the plan holds that memory. See Note [Donated buffers].
struct Donation {
  int32_t output = -1;
  int32_t input = -1;  // -1: `unread` is the donor
  BufferBinding unread;
  /// Positions of the other device data sharing the donor's storage, none used after this step.
  std::vector<uint32_t> sharers;
};

struct FusedKernel {
  Kernel kernel;
  std::vector<BufferBinding> buffers;  // one per kernel buffer
  std::vector<ParamBinding> params;    // one per kernel parameter
  int64_t grain = 1;                   // points per task when split across threads
  std::vector<Donation> donations;
};

/// The binding whose memory donation `d` of `fused` gives: one of the kernel's input buffers, or
/// device data the plan does not read.
inline const BufferBinding& donorOf(const FusedKernel& fused, const Donation& d) {
  return d.input >= 0 ? fused.buffers.at(d.input) : d.unread;
}

/// Kernels that differ only in their sizes and in which buffers and parameters they bind: on a
/// GPU they run as one multi-tensor launch. See Note [Kernel batches].
struct KernelBatch {
  std::vector<int32_t> kernels;  // indices into ExecutionPlan::kernels, at least two
};

/// A select, slice or narrow view at a position: its start, normalized as ATen does within a
/// dimension of `size` elements, moves the view's offset by `stride` elements per element.
struct PositionShift {
  uint32_t position = 0;  // the view's node
  int64_t size = 0;
  int64_t stride = 0;
  int64_t start = 0;  // normalized, in the graph the plan was lowered from
};

/// The start of the view at `position` in `graph` (select's index, slice's or narrow's start),
/// normalized as ATen does within a dimension of `size` elements.
int64_t viewStart(const Graph& graph, uint32_t position, int64_t size);

/// A value that is, element for element, another value's buffer read with other sizes, strides
/// and offset: a transposed weight an extern matmul reads, a graph output that only renames
/// another output. It costs no copy. See Note [Strided views of buffers].
struct StridedView {
  NodeRef value;   // the view
  NodeRef source;  // the value whose buffer it views; laid out as its meta says
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;  // elements past the source's first element
  /// The views at a position between source and value, which move `offset` in a graph whose
  /// positions differ (Note [Positions as plan arguments]).
  std::vector<PositionShift> shifts;
};

/// `view`'s offset in `graph`, a graph of the plan's blind hash.
int64_t viewOffset(const Graph& graph, const StridedView& view);

/// A value that is another value, `base`, with one region of it overwritten by an index_copy
/// or a copy: `cache[i, 0].index_copy_(2, pos, k)` or `cache[:, t] = k`, which
/// functionalization records as that op on a view of the cache scattered back into it
/// (select_scatter / slice_scatter). It runs as index_copy_ or copy_ into that region of base's
/// memory when the plan alone holds it and nothing reads it later, or of a copy of base
/// otherwise. See Note [Region writes].
struct RegionWrite {
  NodeRef value;                        // the outermost scatter: base updated
  NodeRef base;                         // laid out as `value`'s meta says
  std::vector<int64_t> sizes, strides;  // the region, in elements of base's buffer
  int64_t offset = 0;
  bool index_copy = true;  // index_copy_(dim, index, source), else copy_(source)
  int64_t dim = 0;
  NodeRef index;
  NodeRef source;
  uint32_t op = 0;          // the index_copy or copy node
  bool may_donate = false;  // base's memory may be written (see Note [Region writes])
  /// When base is device data: the other device data sharing its storage, which the run-time
  /// check requires held by the plan alone (as Donation::sharers).
  std::vector<uint32_t> sharers;
};

/// The offset of `write`'s region in `graph`, a graph of the plan's blind hash: its view chain's
/// positions are those of `graph` (Note [Positions as plan arguments]).
int64_t regionOffset(const Graph& graph, const RegionWrite& write);

/// What `write` reads besides its base: index_copy's index and source, or copy's source.
inline std::vector<NodeRef> regionWriteReads(const RegionWrite& write) {
  if (write.index_copy) return {write.index, write.source};
  return {write.source};
}

struct PlanStep {
  StepKind kind = StepKind::kExternCall;
  uint32_t position = 0;  // kExternCall
  int32_t kernel = -1;    // kFusedKernel
  int32_t batch = -1;     // kKernelBatch
  int32_t view = -1;      // kStridedView
  int32_t region = -1;    // kRegionWrite
  /// Node positions whose buffers are dead after this step (last use, not a graph output).
  std::vector<uint32_t> release_after;
};

/// The hardware a plan's fused kernels are rendered for (CUDA emulation counts as CUDA).
enum class KernelTarget { kCpu, kCuda };

struct ExecutionPlan {
  HashValue graph_hash = 0;
  HashValue position_blind_hash = 0;  // the graph's: the plan runs every graph of this one
  uint32_t num_nodes = 0;
  std::vector<PlanStep> steps;
  std::vector<FusedKernel> kernels;
  std::vector<KernelBatch> batches;
  std::vector<StridedView> views;
  std::vector<RegionWrite> region_writes;
  int32_t num_temps = 0;
  /// ATen nodes of a fused plan that run their ATen kernel as extern steps: no lowering (matmul,
  /// convolution), one that declined the call's argument forms, or left to ATen on the target.
  /// Counted in the UnfusedNodes metric when the plan is made. 0 for an unfused plan.
  uint32_t unfused_nodes = 0;
  /// What each step is called in profiler traces and in lazyfuse.last_plan_profile(): a fused
  /// kernel with the ops whose values it writes. See Note [Plan steps in the profiler].
  std::shared_ptr<const std::vector<std::string>> step_labels;
  /// Nodes whose position arguments the plan bakes in: it serves a graph of its blind hash only
  /// when their values there are those of the graph it was lowered from. See Note [Positions as
  /// plan arguments].
  std::vector<uint32_t> position_guards;
};

/// The value a kernel parameter binds to in `graph` (whose hash is the plan's).
c10::Scalar paramValue(const Graph& graph, const ParamBinding& binding);

/// True when a kernel of `plan` may write an output into an input's memory (Note [Donated
/// buffers]).
bool hasDonations(const ExecutionPlan& plan);

/// Node positions step `step` reads or writes.
std::vector<uint32_t> stepValues(const Graph& graph, const ExecutionPlan& plan,
                                 const PlanStep& step);

}  // namespace lazyfuse
