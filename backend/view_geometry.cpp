// The geometry lazy tensors report: eager's strides and storage offsets. See Note [View
// geometry].

#include "backend/lazy_tensor.h"

#include "backend/conv_layout.h"
#include "backend/detail/stand_ins.h"
#include "backend/storage_addresses.h"

#include <ATen/core/List.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <memory>
#include <mutex>
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
// see Note [Convolution layout]. Buffers
// keep the trace's strides; a transfer out (`.cpu()`) gives the strides eager's _to_copy gives the
// reported geometry, copying where the buffer's differ.
// Pinned by test_view_metadata.py::test_view_metadata_like_eager,
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

/// The geometry of each tensor `op` returns when run on Meta over the reported geometry of the
/// lazy tensors in `args`; empty when Meta cannot tell.
ViewGeometries inferResultGeometry(const c10::OperatorHandle& op, const torch::jit::Stack& args) {
  auto meta = [](const at::Tensor& t) {
    auto* impl = dynamic_cast<LazyTensorImpl*>(t.unsafeGetTensorImpl());
    return impl == nullptr ? t : metaWithGeometry(*impl);
  };
  torch::jit::Stack meta_stack;
  for (const c10::IValue& v : args) meta_stack.push_back(standInArg(v, c10::kMeta, meta));
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
  applyConvolutionLayout(op, meta_args, results);  // See Note [Convolution layout]
  ViewGeometries out;
  for (const at::Tensor& t : results) {
    // An undefined result (a gradient output_mask leaves out) keeps the others' places.
    if (!t.defined()) out.emplace_back();
    if (t.defined()) out.push_back({t.sizes().vec(), t.strides().vec(), t.storage_offset()});
  }
  return out;
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

void reportViewResults(const c10::OperatorHandle& view_op, HashValue key,
                       const torch::jit::Stack& args, torch::jit::Stack& stack,
                       size_t num_results) {
  const LazyTensorImpl* self =
      args.empty() || !args[0].isTensor() ? nullptr : lazyImpl(args[0].toTensor());
  if (self == nullptr) return;
  key = hashCombine(hashInts(key, self->strides()), self->storage_offset());
  auto geometries = cachedGeometry(key, [&] { return inferViewGeometry(view_op, args, *self); });
  reportGeometries(*geometries, stack, num_results);
}

void reportResultGeometry(const c10::OperatorHandle& op, HashValue key,
                          const torch::jit::Stack& args, torch::jit::Stack& stack,
                          size_t num_results) {
  bool other = false;
  auto add = [&](const at::Tensor& t) {
    auto* impl = dynamic_cast<LazyTensorImpl*>(t.unsafeGetTensorImpl());
    if (impl == nullptr) return;
    other = other || impl->reportsOtherGeometry();
    key = hashCombine(hashInts(key, impl->strides()), impl->storage_offset());
  };
  for (const c10::IValue& v : args) {
    if (v.isTensor()) add(v.toTensor());
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) add(t);
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) add(e.toTensor());
      }
    }
  }
  if (!other && !hasConvolutionLayout(op)) return;  // See Note [Convolution layout]
  key = hashCombine(key, 0x7e5a17ULL);              // apart from the view geometries' keys
  auto geometries = cachedGeometry(key, [&] { return inferResultGeometry(op, args); });
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
