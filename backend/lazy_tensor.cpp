#include "backend/lazy_tensor.h"

#include "backend/conv_layout.h"
#include "backend/device.h"
#include "lazy_ir/metrics.h"
#include "backend/storage_addresses.h"
#include "lazy_ir/check.h"
#include "lazy_ir/graph.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/List.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace lazyfuse {
namespace {

// The registry holds weak references; entries of dead data are dropped when the list has grown
// to twice what it held after the last sweep, so registering stays amortized O(1).
struct Registry {
  std::mutex mutex;
  std::vector<c10::weak_intrusive_ptr<LazyData>> entries;
  size_t sweep_at = 1024;
};

Registry& registry() {
  static Registry* instance = new Registry();
  return *instance;
}

void sweepLocked(Registry& r) {
  size_t kept = 0;
  for (auto& entry : r.entries) {
    if (!entry.expired()) r.entries[kept++] = std::move(entry);
  }
  r.entries.erase(r.entries.begin() + kept, r.entries.end());
  r.sweep_at = std::max<size_t>(1024, 2 * kept);
}

void registerData(const c10::intrusive_ptr<LazyData>& data) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.entries.size() >= r.sweep_at) sweepLocked(r);
  r.entries.emplace_back(data);
}

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
  for (const c10::IValue& v : args) {
    if (v.isTensor()) {
      meta_stack.push_back(meta(v.toTensor()));
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : v.toTensorList()) list.push_back(meta(t));
      meta_stack.push_back(list);
    } else if (v.isList() && v.toListRef().size() > 0 && v.toListRef()[0].isTensor()) {
      c10::List<std::optional<at::Tensor>> list;
      for (const c10::IValue& e : v.toListRef()) {
        list.push_back(e.isTensor() ? std::optional<at::Tensor>(meta(e.toTensor())) : std::nullopt);
      }
      meta_stack.push_back(list);
    } else {
      meta_stack.push_back(v.isDevice() ? c10::IValue(c10::Device(c10::kMeta)) : v);
    }
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
  std::vector<at::Tensor> results;
  for (const c10::IValue& v : meta_stack) {
    if (v.isTensor()) results.push_back(v.toTensor());
    if (!v.isTensorList()) continue;
    for (const at::Tensor& t : v.toTensorList()) results.push_back(t);
  }
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
  const LazyTensorImpl* self = args.empty() || !args[0].isTensor() ? nullptr
                                                                     : lazyImpl(args[0].toTensor());
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
  key = hashCombine(key, 0x7e5a17ULL);  // apart from the view geometries' keys
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

static std::atomic<int64_t> next_data_id{1};  // LazyData::id()

LazyData::LazyData() : id_(next_data_id.fetch_add(1, std::memory_order_relaxed)) {
  metrics::tensors_created.add();
}

LazyData::~LazyData() { metrics::tensors_destroyed.add(); }

c10::intrusive_ptr<LazyData> LazyData::pending(Value value) {
  auto data = c10::make_intrusive<LazyData>();
  data->value_ = std::move(value);
  registerData(data);
  return data;
}

c10::intrusive_ptr<LazyData> LazyData::materialized(at::Tensor buffer) {
  auto data = c10::make_intrusive<LazyData>();
  data->buffer_ = std::move(buffer);
  registerData(data);
  return data;
}

void LazyData::checkNotBroken() const {
  LF_CHECK(error_.empty(), "this lazy tensor has no value: the graph computing it failed at sync "
           "with: ", error_);
}

Value LazyData::asInput() {
  checkNotBroken();
  if (!buffer_.defined()) return value_;
  if (!value_.node || value_.node->kind() != OpKind::kDeviceData) {
    value_ = Value{Node::deviceData(buffer_), 0};
  }
  return value_;
}

bool LazyData::takeComputed() {
  NodePtr data = Graph::computedValue(value_);
  if (!data) return false;
  buffer_ = data->data();
  value_ = Value{std::move(data), 0};  // the device data asInput() would make for `buffer_`
  error_.clear();
  return true;
}

void LazyData::setPending(Value value) {
  value_ = std::move(value);
  buffer_ = at::Tensor();
  error_.clear();
}

void LazyData::setBuffer(at::Tensor buffer) {
  buffer_ = std::move(buffer);
  value_ = Value{};
  error_.clear();
}

void LazyData::setBroken(std::string error) {
  LF_INTERNAL_ASSERT(!error.empty(), "broken data needs the error that broke it");
  error_ = std::move(error);
  value_ = Value{};
  buffer_ = at::Tensor();
}

void LazyData::release_resources() {
  value_ = Value{};
  buffer_ = at::Tensor();
  error_.clear();
}

std::vector<c10::intrusive_ptr<LazyData>> livePendingData() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  sweepLocked(r);
  std::vector<c10::intrusive_ptr<LazyData>> out;
  for (const auto& entry : r.entries) {
    auto data = entry.lock();
    if (data && data->isPending()) out.push_back(std::move(data));
  }
  return out;
}

LazyTensorImpl::LazyTensorImpl(c10::intrusive_ptr<LazyData> data, const TensorMeta& meta)
    : c10::TensorImpl(c10::DispatchKeySet(c10::DispatchKey::Lazy),
                      c10::scalarTypeToTypeMeta(meta.dtype), lazyDevice()),
      data_(std::move(data)) {
  set_sizes_and_strides(meta.sizes, meta.strides);
}

TensorMeta LazyTensorImpl::meta() const {
  TensorMeta m;
  m.dtype = c10::typeMetaToScalarType(dtype());
  m.sizes = sizes().vec();
  m.strides = traceStrides().vec();
  return m;
}

c10::IntArrayRef LazyTensorImpl::traceStrides() const {
  return trace_strides_.empty() ? strides() : c10::IntArrayRef(trace_strides_);
}

void LazyTensorImpl::setMeta(const TensorMeta& meta) {
  LF_INTERNAL_ASSERT(meta.dtype == c10::typeMetaToScalarType(dtype()), "dtype of a tensor changed");
  trace_strides_.clear();
  set_sizes_and_strides(meta.sizes, meta.strides);
}

void LazyTensorImpl::reportViewGeometry(c10::IntArrayRef strides, int64_t storage_offset) {
  LF_INTERNAL_ASSERT(strides.size() == sizes().size(), "view geometry of another rank");
  std::vector<int64_t> trace = traceStrides().vec();
  set_sizes_and_strides(sizes(), strides, storage_offset);
  trace_strides_.clear();
  if (storage_offset != 0 || strides != c10::IntArrayRef(trace)) trace_strides_ = std::move(trace);
}

// Note [Values made in InferenceMode]
// A tensor made in InferenceMode is an inference tensor (no autograd keys, no version counter),
// except a view of a normal tensor, which eager keeps normal. A lazy tensor's FunctionalTensorWrapper
// takes both from the value it wraps when it is made, so the value a view op's *_copy returns in
// InferenceMode would make the view an inference tensor, and ADInplaceOrView, which runs for the
// normal base, refuses to give it the base's version counter ("Cannot set version_counter for
// inference tensor"): a model made outside InferenceMode could not even run F.linear inside it.
// So the recorder makes such a value normal when the value it is a view of is (leaveInference),
// and likewise the new value of a write into a normal tensor and of a *_scatter into a normal
// base, which functionalization swaps in under the normal wrapper that later views are taken of.
// Pinned by test_inference_mode.py::test_inference_mode_on_tensors_made_outside_it.
void LazyTensorImpl::leaveInference() {
  if (!is_inference()) return;
  key_set_ = key_set_ | c10::getAutogradRelatedKeySetFromBackend(c10::BackendComponent::LazyBit);
  version_counter_ = c10::VariableVersion(/*version=*/0);
}

c10::intrusive_ptr<c10::TensorImpl> LazyTensorImpl::shallow_copy_and_detach(
    const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<LazyTensorImpl>(data_, meta());
  copy_tensor_metadata(this, impl.get(), version_counter, allow_tensor_metadata_change);
  impl->trace_strides_ = trace_strides_;
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl> LazyTensorImpl::shallow_copy_and_detach(
    c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<LazyTensorImpl>(data_, meta());
  copy_tensor_metadata(this, impl.get(), std::move(version_counter), allow_tensor_metadata_change);
  impl->trace_strides_ = trace_strides_;
  return impl;
}

void LazyTensorImpl::shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) {
  auto* other = dynamic_cast<LazyTensorImpl*>(impl.get());
  LF_CHECK(other != nullptr, "cannot shallow-copy a ", impl->device().str(),
           " tensor into a lazy tensor");
  copy_tensor_metadata(other, this, version_counter(), allow_tensor_metadata_change());
  data_ = other->data_;
  trace_strides_ = other->trace_strides_;
}

LazyTensorImpl* lazyImpl(const at::Tensor& tensor) {
  if (!isLazy(tensor)) return nullptr;
  if (at::functionalization::impl::isFunctionalTensor(tensor)) {
    at::functionalization::impl::sync(tensor);
    return lazyImpl(at::functionalization::impl::from_functional_tensor(tensor));
  }
  return dynamic_cast<LazyTensorImpl*>(tensor.unsafeGetTensorImpl());
}

LazyTensorImpl& lazyImplOrRaise(const at::Tensor& tensor, const char* expected) {
  LazyTensorImpl* impl = lazyImpl(tensor);
  LF_CHECK(impl != nullptr, expected, ", got a ",
           tensor.defined() ? tensor.device().str() : std::string("undefined"), " tensor");
  return *impl;
}

at::Tensor makeLazyTensor(Value value) {
  TensorMeta meta = value.meta();
  return at::Tensor(c10::make_intrusive<LazyTensorImpl>(LazyData::pending(std::move(value)), meta));
}

at::Tensor makeMaterializedTensor(at::Tensor buffer) {
  TensorMeta meta = TensorMeta::of(buffer);
  return at::Tensor(
      c10::make_intrusive<LazyTensorImpl>(LazyData::materialized(std::move(buffer)), meta));
}

at::Tensor wrapIfFactory(at::Tensor tensor) {
  if (c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Functionalize)) return tensor;
  at::Tensor wrapped = at::functionalization::impl::to_functional_tensor(tensor);
  giveStorageAnAddress(wrapped);
  return wrapped;
}

}  // namespace lazyfuse
