// The geometry lazy tensors report: eager's strides and storage offsets. See Note [View
// geometry].

#include "backend/lazy_tensor.h"

#include "backend/conv_layout.h"
#include "backend/detail/stand_ins.h"
#include "backend/meta_layout.h"
#include "backend/shape_functions.h"
#include "backend/storage_addresses.h"
#include "lazy_ir/check.h"
#include "lazy_ir/config.h"
#include "lazy_ir/metrics.h"

#include <ATen/core/List.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <ATen/ExpandUtils.h>
#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/strides.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

namespace lazyfuse {
namespace {

// Note [View geometry]
// Eager reports a view's strides and storage offset (x.t() has strides (1, n)), and
// is_contiguous(), .view() and reshape's choice between a view and a copy follow them. The trace
// has no views: functionalization records *_copy ops, whose values are new contiguous tensors,
// and a FunctionalTensorWrapper reports the strides of the tensor it wraps (it forwards its size
// and stride getters, so the reference strides functionalization sets on the wrapper are never
// seen). So the LazyTensorImpl a *_copy op returns reports the geometry of the view it stands for,
// found by running the view op on Meta over the input's reported geometry (cached), while the
// recorder, its meta cache and the graph go on using the value's strides in the trace
// (traceStrides). Writes keep geometry, as in eager: the result of the op recorded for an
// in-place or out= op reports the geometry of the tensor it is written into (see Note [In-place
// result casts]), and a *_scatter's result the geometry of the base it writes into. That matters
// beyond the written tensor: functionalization replays a write through a view into its base with
// *_scatter and inverse view ops (t_copy for t), whose results become the base's value and views.
// Any other op's result reports the strides eager gives it: its trace strides, unless an input
// reports another geometry (x.t() + 1, x.t().clone() and empty_like(x.t()) stay transposed in
// eager), where the op runs on Meta over the inputs' reported geometry too (cached), and its
// results report the strides found there. Where a meta kernel picks other strides than eager's
// kernel, the result reports Meta's, but for convolution, whose meta kernel is always contiguous:
// see Note [Convolution layout]. Both are computed without Meta where eager's rules are simple
// (many meta kernels are Python, 0.1-1 ms a call, paid at every new size): the geometry of the
// common views (view, expand, t, transpose, permute, select, slice, narrow, split, unbind,
// unsqueeze, squeeze) from their inputs' (computeViewGeometry), and the results of matrix
// products and LayerNorm over inputs of other geometry, and of pointwise ops over row-major
// inputs, which are contiguous (computeResultGeometry: Note [Row-major pointwise results]);
// LAZYFUSE_VERIFY_META=1 checks both against Meta. Buffers keep the trace's strides; a transfer out
// (`.cpu()`) gives the strides eager's _to_copy gives the reported geometry, copying where the
// buffer's differ. Pinned by test_view_metadata.py::test_view_metadata_like_eager,
// test_view_metadata_after_write_like_eager and test_result_strides_like_eager.
struct ViewGeometry {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;
};
using ViewGeometries = std::vector<ViewGeometry>;

struct ViewGeometryCache {
  std::mutex mutex;
  std::unordered_map<HashValue, std::shared_ptr<const ViewGeometries>> entries;
};

ViewGeometryCache& viewGeometryCache() {
  static ViewGeometryCache* instance = new ViewGeometryCache();
  return *instance;
}

}  // namespace

at::Tensor metaWithGeometry(const LazyTensorImpl& impl) {
  int64_t extent = impl.numel() == 0 ? 0 : impl.storage_offset() + 1;
  for (size_t d = 0; d < impl.sizes().size() && impl.numel() > 0; ++d) {
    extent += (impl.sizes()[d] - 1) * impl.strides()[d];
  }
  at::Tensor storage =
      at::empty({extent}, at::TensorOptions().dtype(impl.dtype()).device(c10::kMeta));
  return storage.as_strided(impl.sizes(), impl.strides(), impl.storage_offset());
}

namespace {

/// `base` sliced along `dim` from `start` (wrapped, in range), `length` elements `step` apart.
ViewGeometry sliceOf(ViewGeometry base, size_t dim, int64_t start, int64_t length, int64_t step) {
  base.storage_offset += start * base.strides[dim];
  base.sizes[dim] = length;
  base.strides[dim] *= step;
  return base;
}

ViewGeometry selectOf(ViewGeometry base, size_t dim, int64_t index) {
  base.storage_offset += index * base.strides[dim];
  base.sizes.erase(base.sizes.begin() + static_cast<ptrdiff_t>(dim));
  base.strides.erase(base.strides.begin() + static_cast<ptrdiff_t>(dim));
  return base;
}

/// The geometry of the views of `self` that the view op of `schema` returns for `args`, as
/// eager's kernels compute it (c10::Error where they would raise); nullopt for other view ops.
std::optional<ViewGeometries> viewGeometryOf(const c10::FunctionSchema& schema,
                                             const torch::jit::Stack& args, ViewGeometry self) {
  const std::string& name = schema.name();
  const std::string& overload = schema.overload_name();
  const auto rank = static_cast<int64_t>(self.sizes.size());
  auto dimArg = [&](size_t i, int64_t of_rank) {
    return static_cast<size_t>(c10::maybe_wrap_dim(args[i].toInt(), of_rank));
  };
  auto swap = [&](size_t a, size_t b) {
    std::swap(self.sizes[a], self.sizes[b]);
    std::swap(self.strides[a], self.strides[b]);
  };
  if (name == "aten::alias" || name == "aten::detach") return ViewGeometries{self};
  if (name == "aten::view" && overload.empty()) {
    int64_t numel = 1;
    for (int64_t s : self.sizes) numel *= s;
    const at::DimVector sizes = at::infer_size_dv(args[1].toIntVector(), numel);
    std::optional<at::DimVector> strides =
        at::detail::computeStride(self.sizes, self.strides, sizes);
    if (!strides) return std::nullopt;
    return ViewGeometries{
        {{sizes.begin(), sizes.end()}, {strides->begin(), strides->end()}, self.storage_offset}};
  }
  if (name == "aten::expand") {
    auto expanded =
        at::inferExpandGeometry_dimvector(self.sizes, self.strides, args[1].toIntVector());
    return ViewGeometries{{{expanded.sizes.begin(), expanded.sizes.end()},
                           {expanded.strides.begin(), expanded.strides.end()},
                           self.storage_offset}};
  }
  if (name == "aten::t") {
    TORCH_CHECK(rank <= 2, "t() expects a tensor with <= 2 dimensions");
    if (rank == 2) swap(0, 1);
    return ViewGeometries{self};
  }
  if (name == "aten::transpose" && overload == "int") {
    const size_t d0 = dimArg(1, rank), d1 = dimArg(2, rank);
    if (rank > 0) swap(d0, d1);
    return ViewGeometries{self};
  }
  if (name == "aten::permute") {
    const std::vector<int64_t> dims = args[1].toIntVector();
    TORCH_CHECK(static_cast<int64_t>(dims.size()) == rank, "permute: number of dims differs");
    ViewGeometry out{{}, {}, self.storage_offset};
    std::vector<bool> seen(self.sizes.size(), false);
    for (int64_t d : dims) {
      const auto w = static_cast<size_t>(c10::maybe_wrap_dim(d, rank));
      TORCH_CHECK(!seen[w], "permute: repeated dim");
      seen[w] = true;
      out.sizes.push_back(self.sizes[w]);
      out.strides.push_back(self.strides[w]);
    }
    return ViewGeometries{out};
  }
  if (name == "aten::unsqueeze") {
    const size_t dim = dimArg(1, rank + 1);
    const int64_t stride =
        static_cast<int64_t>(dim) >= rank ? 1 : self.sizes[dim] * self.strides[dim];
    self.sizes.insert(self.sizes.begin() + static_cast<ptrdiff_t>(dim), 1);
    self.strides.insert(self.strides.begin() + static_cast<ptrdiff_t>(dim), stride);
    return ViewGeometries{self};
  }
  if (name == "aten::squeeze") {
    std::vector<bool> chosen(static_cast<size_t>(std::max<int64_t>(rank, 1)), overload.empty());
    std::vector<int64_t> dims;
    if (overload == "dim") dims.push_back(args[1].toInt());
    if (overload == "dims") dims = args[1].toIntVector();
    for (int64_t d : dims) {
      const auto w = static_cast<size_t>(c10::maybe_wrap_dim(d, rank));
      TORCH_CHECK(!chosen[w], "squeeze: repeated dim");
      chosen[w] = true;
    }
    ViewGeometry out{{}, {}, self.storage_offset};
    for (size_t d = 0; d < self.sizes.size(); ++d) {
      if (chosen[d] && self.sizes[d] == 1) continue;
      out.sizes.push_back(self.sizes[d]);
      out.strides.push_back(self.strides[d]);
    }
    return ViewGeometries{out};
  }
  if (rank == 0) return std::nullopt;  // the ops below index a dim
  if (name == "aten::select" && overload == "int") {
    const size_t dim = dimArg(1, rank);
    const int64_t size = self.sizes[dim];
    int64_t index = args[2].toInt();
    TORCH_CHECK(index >= -size && index < size, "select: index out of range");
    return ViewGeometries{selectOf(self, dim, index < 0 ? index + size : index)};
  }
  if (name == "aten::unbind" && overload == "int") {
    const size_t dim = dimArg(1, rank);
    ViewGeometries out;
    for (int64_t i = 0; i < self.sizes[dim]; ++i) out.push_back(selectOf(self, dim, i));
    return out;
  }
  if ((name == "aten::slice" && overload == "Tensor") || name == "aten::narrow") {
    const size_t dim = dimArg(1, rank);
    const int64_t size = self.sizes[dim];
    if (name == "aten::narrow") {
      int64_t start = args[2].toInt();
      const int64_t length = args[3].toInt();
      TORCH_CHECK(start >= -size && start <= size, "narrow: start out of range");
      if (start < 0) start += size;
      TORCH_CHECK(length >= 0 && start <= size - length, "narrow: length out of range");
      return ViewGeometries{sliceOf(self, dim, start, length, 1)};
    }
    const int64_t step = args[4].toInt();
    TORCH_CHECK(step > 0, "slice step must be positive");
    const SliceBounds bounds = sliceBounds(size, args[2], args[3], step);
    return ViewGeometries{sliceOf(self, dim, bounds.start, bounds.length, step)};
  }
  if ((name == "aten::split" && overload == "Tensor") || name == "aten::split_with_sizes") {
    const size_t dim = dimArg(2, rank);
    std::vector<int64_t> lengths;
    if (name == "aten::split") {
      const int64_t split_size = args[1].toInt();
      TORCH_CHECK(split_size > 0, "split: split_size must be positive");
      lengths = splitLengths(self.sizes[dim], split_size);
    } else {
      lengths = args[1].toIntVector();
    }
    ViewGeometries out;
    int64_t at = 0;
    for (int64_t length : lengths) {
      TORCH_CHECK(length >= 0, "split: negative size");
      out.push_back(sliceOf(self, dim, at, length, 1));
      at += length;
    }
    TORCH_CHECK(at == self.sizes[dim], "split: sizes do not add up");
    return out;
  }
  return std::nullopt;
}

/// The geometry of the views `view_op` returns for `args`, computed as eager's view kernels compute
/// it, or nullopt for the ops and arguments left to Meta.
std::optional<ViewGeometries> computeViewGeometry(const c10::OperatorHandle& view_op,
                                                  const torch::jit::Stack& args,
                                                  const LazyTensorImpl& self) {
  try {
    return viewGeometryOf(view_op.schema(), args,
                          {self.sizes().vec(), self.strides().vec(), self.storage_offset()});
  } catch (const c10::Error&) {
    return std::nullopt;  // Meta tells (or raises)
  }
}

/// The geometry of each view `view_op` returns for `args`; empty when Meta cannot tell.
ViewGeometries inferViewGeometry(const c10::OperatorHandle& view_op, const torch::jit::Stack& args,
                                 const LazyTensorImpl& self) {
  c10::impl::ExcludeDispatchKeyGuard no_autograd(
      c10::autograd_dispatch_keyset_with_ADInplaceOrView);
  c10::impl::ExcludeDispatchKeyGuard no_functionalize(c10::DispatchKey::Functionalize);
  torch::jit::Stack meta_stack{metaWithGeometry(self)};
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i].isTensor() || args[i].isTensorList()) return {};
    meta_stack.push_back(args[i]);
  }
  try {
    view_op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
  } catch (const c10::Error&) {
    return {};  // the trace's meta inference accepted the call: its geometry is all we know
  }
  ViewGeometries out;
  for (const c10::IValue& v : meta_stack) {
    std::vector<at::Tensor> views;
    if (v.isTensor()) views.push_back(v.toTensor());
    if (v.isTensorList()) views = v.toTensorList().vec();
    for (const at::Tensor& t : views) {
      out.push_back({t.sizes().vec(), t.strides().vec(), t.storage_offset()});
    }
  }
  return out;
}

/// Meta stand-ins of the tensors in `args`: lazy tensors with their reported geometry.
torch::jit::Stack metaStandIns(const torch::jit::Stack& args) {
  auto meta = [](const at::Tensor& t) {
    auto* impl = dynamic_cast<LazyTensorImpl*>(t.unsafeGetTensorImpl());
    return impl == nullptr ? t : metaWithGeometry(*impl);
  };
  torch::jit::Stack meta_stack;
  for (const c10::IValue& v : args) meta_stack.push_back(standInArg(v, c10::kMeta, meta));
  return meta_stack;
}

/// The geometry of each tensor `op` returns when run on Meta over the reported geometry of the
/// lazy tensors in `args`; empty when Meta cannot tell.
/// See Note [Meta layout corrections].
ViewGeometries inferResultGeometry(const c10::OperatorHandle& op, const OpTraits& traits,
                                   const torch::jit::Stack& args) {
  torch::jit::Stack meta_stack = metaStandIns(args);
  if (const std::optional<size_t> alpha = layoutChangingAlpha(traits.meta_layout, args)) {
    meta_stack[*alpha] = c10::IValue(c10::Scalar(int64_t{1}));
  }
  c10::impl::ExcludeDispatchKeyGuard no_autograd(
      c10::autograd_dispatch_keyset_with_ADInplaceOrView);
  c10::impl::ExcludeDispatchKeyGuard no_functionalize(c10::DispatchKey::Functionalize);
  const torch::jit::Stack meta_args = meta_stack;
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
  } catch (const std::exception&) {
    return {};  // the trace's meta inference accepted the call: its geometry is all we know
  }
  std::vector<at::Tensor> results = resultTensors(meta_stack, meta_stack.size());
  if (traits.meta_layout == MetaLayout::kConvolution) {
    applyConvolutionLayout(op, meta_args, results);  // See Note [Convolution layout]
  }
  correctMetaLayout(traits.meta_layout, meta_args, results);
  ViewGeometries out;
  for (const at::Tensor& t : results) {
    // An undefined result (a gradient output_mask leaves out) keeps the others' places.
    if (!t.defined()) out.emplace_back();
    if (t.defined()) out.push_back({t.sizes().vec(), t.strides().vec(), t.storage_offset()});
  }
  return out;
}

// Note [Row-major pointwise results]
// A pointwise op (tagged `pointwise` in its schema) lays out its result by TensorIterator's
// rule in eager: dims are ordered by the inputs' strides (a dim an input is broadcast along
// counts as stride 0 there), comparing two dims only where an input has a non-zero stride in
// both, and the result is dense in that order. When every input's non-zero strides fall strictly
// from the first dim to the last (contiguous tensors, their slices, expanded or broadcast ones:
// the gradient `sum()` hands back is an expanded scalar), no comparison swaps two dims, dims of
// one element included, so the result is contiguous, with c10's strides for those dims too. The
// pointwise ops that lay out otherwise (contiguous results, or empty_like: masked_fill,
// nan_to_num) agree there but for dims of one element, where empty_like keeps a dense input's
// strides (a slice `x[:, :n]` of a batch of one keeps its batch stride): so a result with such a
// dim is computed for add, sub, mul, div and where (TensorIterator's) and, for other pointwise
// ops, only over inputs laid out exactly as c10 lays out a contiguous tensor. A result with no
// elements, or one that aliases an input, is left to Meta. Two more ops give
// contiguous results whatever their inputs: `clone` into the contiguous format (reshape's copy)
// and `matmul`, but for a matrix or vector times a batch, which eager computes transposed.
// Computed for the `x.expand(...) * y` of every backward of a reduction and a decoder's
// attention products, whose Meta calls ran (some in Python) at every new size.

/// Geometry for every result of `schema` in `stack`: contiguous, or nullopt where a result is not
/// one tensor of its own with elements.
std::optional<ViewGeometries> contiguousResults(const c10::FunctionSchema& schema,
                                                const torch::jit::Stack& stack,
                                                size_t num_results) {
  ViewGeometries out;
  for (size_t k = 0; k < num_results; ++k) {
    const c10::IValue& v = stack[stack.size() - num_results + k];
    if (schema.returns().at(k).alias_info() != nullptr || !v.isTensor() ||
        !v.toTensor().defined() || v.toTensor().numel() == 0) {
      return std::nullopt;
    }
    const c10::IntArrayRef sizes = v.toTensor().sizes();
    const c10::DimVector strides = c10::contiguous_strides(sizes);
    out.push_back({sizes.vec(), {strides.begin(), strides.end()}, 0});
  }
  return out;
}

/// Whether every tensor in `args`, broadcast to `sizes`, has non-zero strides that fall strictly
/// from its first dim to its last.
bool rowMajorInputs(const torch::jit::Stack& args, c10::IntArrayRef sizes) {
  bool row_major = true;
  for (const c10::IValue& v : args) {
    forEachTensor(v, [&](const at::Tensor& t) {
      if (!row_major || !t.defined()) return;
      const int64_t lead = static_cast<int64_t>(sizes.size()) - t.dim();
      row_major = lead >= 0;
      int64_t previous = 0;
      for (int64_t d = 0; d < t.dim() && row_major; ++d) {
        const bool broadcast = t.sizes()[d] == 1 && sizes[lead + d] != 1;
        const int64_t stride = broadcast ? 0 : t.strides()[d];
        if (stride == 0) continue;
        row_major = previous == 0 || stride < previous;
        previous = stride;
      }
    });
  }
  return row_major;
}

/// The geometry of the results of `op` over the reported geometry of the lazy tensors in `args`,
/// as eager's kernels lay them out, without a meta kernel (many are Python, 0.1-1 ms a call): the
/// results of matrix products and LayerNorm are contiguous whatever their inputs' layout (empty:
/// nothing to report), and so are those of Note [Row-major pointwise results]; nullopt for
/// other ops. LAZYFUSE_VERIFY_META=1 checks it against Meta.
std::optional<ViewGeometries> computeResultGeometry(const c10::OperatorHandle& op,
                                                    const torch::jit::Stack& args,
                                                    const torch::jit::Stack& stack,
                                                    size_t num_results) {
  static const std::set<std::string> contiguous = {"aten::mm", "aten::bmm", "aten::addmm",
                                                   "aten::baddbmm", "aten::native_layer_norm"};
  static const std::set<std::string> iterated = {"aten::add", "aten::sub", "aten::mul", "aten::div",
                                                 "aten::where"};
  const c10::FunctionSchema& schema = op.schema();
  if (contiguous.count(schema.name()) > 0) return ViewGeometries{};
  if (schema.name() == "aten::matmul" && args.size() >= 2 && args[0].isTensor() &&
      args[1].isTensor()) {
    if (args[0].toTensor().dim() <= 2 && args[1].toTensor().dim() >= 3) return std::nullopt;
    return contiguousResults(schema, stack, num_results);
  }
  if (schema.name() == "aten::clone") {
    const bool to_contiguous = args.size() >= 2 && !args[1].isNone() &&
                               args[1].toMemoryFormat() == c10::MemoryFormat::Contiguous;
    return to_contiguous ? contiguousResults(schema, stack, num_results) : std::nullopt;
  }
  if (!op.hasTag(at::Tag::pointwise) || num_results == 0) return std::nullopt;
  std::optional<ViewGeometries> out = contiguousResults(schema, stack, num_results);
  if (!out || !rowMajorInputs(args, out->front().sizes)) return std::nullopt;
  for (const ViewGeometry& g : *out) {
    if (g.sizes != out->front().sizes) return std::nullopt;
  }
  const std::vector<int64_t>& sizes = out->front().sizes;
  if (std::find(sizes.begin(), sizes.end(), 1) != sizes.end() &&
      iterated.count(schema.name()) == 0) {
    bool standard = true;
    for (const c10::IValue& v : args) {
      forEachTensor(v, [&](const at::Tensor& t) {
        if (!standard || !t.defined()) return;
        const c10::DimVector strides = c10::contiguous_strides(t.sizes());
        standard = t.strides() == c10::IntArrayRef(strides);
      });
    }
    if (!standard) return std::nullopt;
  }
  return out;
}

/// Whether two geometries agree where reportGeometries would use them. An empty list reports
/// nothing: the results keep their contiguous trace strides, which Meta's must equal in every dim
/// of more than one element.
bool sameGeometries(const ViewGeometries& computed, const ViewGeometries& inferred) {
  if (!computed.empty()) {
    return computed.size() == inferred.size() &&
           std::equal(computed.begin(), computed.end(), inferred.begin(),
                      [](const ViewGeometry& a, const ViewGeometry& b) {
                        return a.sizes == b.sizes && a.strides == b.strides &&
                               a.storage_offset == b.storage_offset;
                      });
  }
  for (const ViewGeometry& g : inferred) {
    const c10::DimVector contiguous = c10::contiguous_strides(g.sizes);
    for (size_t d = 0; d < g.sizes.size(); ++d) {
      if (g.sizes[d] > 1 && g.strides[d] != contiguous[d]) return false;
    }
  }
  return true;
}

/// `infer()`, cached under `key`.
template <typename Infer>
std::shared_ptr<const ViewGeometries> cachedGeometry(HashValue key, Infer infer) {
  ViewGeometryCache& cache = viewGeometryCache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.entries.find(key);
    if (it != cache.entries.end()) return it->second;
  }
  auto geometries = std::make_shared<const ViewGeometries>(infer());
  std::lock_guard<std::mutex> lock(cache.mutex);
  cache.entries.emplace(key, geometries);
  return geometries;
}

/// The `num_results` tensors at the end of `stack` report `geometries`, in order, where their
/// sizes agree.
void reportGeometries(const ViewGeometries& geometries, torch::jit::Stack& stack,
                      size_t num_results) {
  size_t k = 0;
  for (size_t r = stack.size() - num_results; r < stack.size(); ++r) {
    std::vector<at::Tensor> results;
    if (stack[r].isTensor()) results.push_back(stack[r].toTensor());
    if (stack[r].isTensorList()) results = stack[r].toTensorList().vec();
    for (const at::Tensor& t : results) {
      if (k >= geometries.size()) return;
      const ViewGeometry& g = geometries[k++];
      auto* impl = dynamic_cast<LazyTensorImpl*>(t.unsafeGetTensorImpl());
      if (impl != nullptr && impl->sizes() == c10::IntArrayRef(g.sizes)) {
        impl->reportViewGeometry(g.strides, g.storage_offset);
      }
    }
  }
}

}  // namespace

namespace {

/// GeometryOnMeta: view and result geometries inferred by running the op on Meta (those no C++
/// rule computes), once per cache key.
Counter& geometryOnMeta() {
  static Counter& counter = counterNamed("GeometryOnMeta");
  return counter;
}

}  // namespace

void reportViewResults(const c10::OperatorHandle& view_op, HashValue key,
                       const torch::jit::Stack& args, torch::jit::Stack& stack,
                       size_t num_results) {
  const LazyTensorImpl* self =
      args.empty() || !args[0].isTensor() ? nullptr : lazyImpl(args[0].toTensor());
  if (self == nullptr) return;
  key = hashCombine(hashInts(key, self->strides()), self->storage_offset());
  auto geometries = cachedGeometry(key, [&] {
    std::optional<ViewGeometries> computed = computeViewGeometry(view_op, args, *self);
    if (computed && !config::verifyMeta()) return *std::move(computed);
    if (!computed) geometryOnMeta().add();
    ViewGeometries inferred = inferViewGeometry(view_op, args, *self);
    LF_INTERNAL_ASSERT(!computed || sameGeometries(*computed, inferred), view_op.schema().name(),
                       ": the view geometry computed differs from Meta's");
    return inferred;
  });
  reportGeometries(*geometries, stack, num_results);
}

void reportResultGeometry(const c10::OperatorHandle& op, const OpTraits& traits, HashValue key,
                          const torch::jit::Stack& args, torch::jit::Stack& stack,
                          size_t num_results) {
  bool other = false;
  for (const c10::IValue& v : args) {
    forEachTensor(v, [&](const at::Tensor& t) {
      auto* impl = dynamic_cast<LazyTensorImpl*>(t.unsafeGetTensorImpl());
      other = other || (impl != nullptr && impl->reportsOtherGeometry());
    });
  }
  // A result's trace strides are eager's (Note [Meta layout corrections]) unless an input reports
  // another geometry than its trace strides, or the op is a convolution (Note [Convolution
  // layout]).
  if (!other && traits.meta_layout != MetaLayout::kConvolution) return;
  // Where an input starts matters only to a result that may alias it: a loop over x[t] finds
  // its results' geometry cached at every t (Note [Positions as plan arguments]).
  const bool aliases =
      std::any_of(op.schema().returns().begin(), op.schema().returns().end(),
                  [](const c10::Argument& r) { return r.alias_info() != nullptr; });
  for (const c10::IValue& v : args) {
    forEachTensor(v, [&](const at::Tensor& t) {
      auto* impl = dynamic_cast<LazyTensorImpl*>(t.unsafeGetTensorImpl());
      if (impl == nullptr) return;
      key = hashInts(key, impl->strides());
      if (aliases) key = hashCombine(key, impl->storage_offset());
    });
  }
  key = hashCombine(key, 0x7e5a17ULL);  // apart from the view geometries' keys
  auto geometries = cachedGeometry(key, [&] {
    std::optional<ViewGeometries> computed = computeResultGeometry(op, args, stack, num_results);
    if (computed && !config::verifyMeta()) return *std::move(computed);
    if (!computed) geometryOnMeta().add();
    ViewGeometries inferred = inferResultGeometry(op, traits, args);
    LF_INTERNAL_ASSERT(!computed || sameGeometries(*computed, inferred), op.schema().name(),
                       ": the result geometry computed differs from Meta's");
    return inferred;
  });
  reportGeometries(*geometries, stack, num_results);
}

void reportGeometryOf(const at::Tensor& like, const at::Tensor& result) {
  auto* impl = dynamic_cast<LazyTensorImpl*>(result.unsafeGetTensorImpl());
  if (!like.defined() || impl == nullptr || impl->sizes() != like.sizes()) return;
  const int64_t offset = storageOffsetOf(like);
  if (impl->strides() == like.strides() && offset == impl->storage_offset()) return;
  impl->reportViewGeometry(like.strides(), offset);
}

}  // namespace lazyfuse
