// Note [Strided views of buffers]
// An extern step reads its inputs as ATen tensors, which may have any strides: addmm multiplies
// by a transposed weight without copying it, as eager does with `w.t()`. Functionalization
// records `w.t()` as t_copy, so a plan that wrote each extern input to memory copied the
// weight, transposed, at every step (three 1024x1024 copies per training step of a two-layer
// MLP). A value that is only a view or a rename of another value's buffer is therefore not
// written by a kernel: a kStridedView step takes it as `as_strided` of that buffer, at no cost.
// Buffers are never written in place while another tensor holds them (Note [Renaming ops share
// their input's buffer]; a donation needs the source's storage free of views, and counts uses
// of a view as uses of its source), so a view sharing memory with its source is safe to read;
// but not every reader is indifferent to
// what it gets:
//  * an extern op reads any view only if readsAnyLayout says it computes the same for any
//    strides, offset and storage (matmuls, convolutions, losses). Others may look at storage
//    or strides (as_strided_copy of `x.t().contiguous()` reads the storage, view_copy.dtype
//    needs a unit last stride), and read only whole renames;
//  * a graph output becomes a lazy tensor's buffer, which later graphs and as_strided read as
//    storage, so it only shares a whole rename: the output's own layout over exactly the
//    root's buffer (an optimizer's `detach_copy` of an updated parameter, which otherwise wrote
//    the same values twice), never a slice that would keep a larger buffer alive.
//
// What qualifies is decided on the loop graph, not on op names: the value's body is built once
// and must return, unchanged, one load of one root value at an index whose flat offset is
// affine in the index variables with non-negative coefficients (as_strided has no negative
// strides), division and modulo included: Note [Affine over a domain] (a reshape that merges
// dimensions reads through them).
#include "lowering/detail/strided_views.h"

#include "lazy_ir/check.h"

namespace lazyfuse {
namespace {

struct RootRead {
  LoopId id = -1;
  std::vector<IxPtr> index;
  KValue value = -1;
};

/// Builds a body and records what it reads; a compute node whose body returns exactly the one
/// value it read (a view, or a conversion to its own dtype) is looked through.
class RenameProbe final : public LoopContext {
 public:
  RenameProbe(const Partition& p, std::vector<int64_t> domain)
      : p_(p), builder_(std::move(domain)) {}

  KernelBuilder& ops() override { return builder_; }

  KValue at(LoopId id, const std::vector<IxPtr>& index) override {
    const LoopNode& node = p_.loops[id];
    // A rename has one input; the budget bounds bodies that read it at many indices.
    if (node.kind == LoopNode::kCompute && node.inputs.size() == 1 && ++visits_ <= kMaxVisits) {
      const size_t before = reads_.size();
      const KValue v = node.compute(*this, index);
      if (reads_.size() == before + 1 && reads_.back().value == v) return v;
      reads_.resize(before);
    }
    std::vector<int64_t> ones(index.size(), 1);
    const int32_t buffer = builder_.addBuffer(node.dtype, /*output=*/false);
    reads_.push_back({id, index, builder_.load(buffer, ixOffset(index, ones))});
    return reads_.back().value;
  }

  KValue param(int32_t, int32_t, c10::ScalarType dtype, int32_t) override {
    return builder_.newParam(dtype);
  }

  const std::vector<RootRead>& reads() const { return reads_; }

 private:
  const Partition& p_;
  KernelBuilder builder_;
  std::vector<RootRead> reads_;
  static constexpr int kMaxVisits = 64;
  int visits_ = 0;
};

}  // namespace

std::optional<StridedView> stridedViewOf(const Graph& graph, const Partition& p, LoopId id,
                                         NodeRef value) {
  const LoopNode& node = p.loops[id];
  if (node.kind != LoopNode::kCompute) return std::nullopt;
  RenameProbe probe(p, node.sizes);
  probe.at(id, probe.ops().identityIndex());
  if (probe.reads().size() != 1) return std::nullopt;
  const RootRead& read = probe.reads().front();
  const LoopNode& root = p.loops[read.id];
  if (read.id == id || !p.ref_of[read.id] || root.dtype != node.dtype) return std::nullopt;
  const NodeRef source = *p.ref_of[read.id];
  const TensorMeta& root_meta = graph.nodes()[source.position]->outputMeta(source.index);
  const TensorMeta& meta = graph.nodes()[value.position]->outputMeta(value.index);
  // Writing a computed root in full must not cost more than writing the view (a slice of it),
  // unless the root is written anyway (a graph output: a KV cache an attention reads a slab of).
  if (root.kind == LoopNode::kCompute && root_meta.numel() > meta.numel() &&
      !(read.id < static_cast<LoopId>(p.realized.size()) && p.realized[read.id])) {
    return std::nullopt;
  }
  std::vector<int64_t> strides(node.sizes.size(), 0);
  int64_t offset = 0;
  if (!ixAffineOver(ixOffset(read.index, root_meta.strides), node.sizes, strides, offset) ||
      offset < 0) {
    return std::nullopt;
  }
  for (size_t d = 0; d < strides.size(); ++d) {
    if (node.sizes[d] == 1) strides[d] = meta.strides[d];  // never stepped along: any stride
    if (strides[d] < 0) return std::nullopt;
  }
  return StridedView{value, source, node.sizes, std::move(strides), offset, {}};
}

}  // namespace lazyfuse
