#include "backend/lazy_tensor.h"

#include "backend/device.h"
#include "backend/storage_addresses.h"
#include "lazy_ir/check.h"
#include "lazy_ir/graph.h"
#include "lazy_ir/metrics.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <memory>
#include <mutex>

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

}  // namespace

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
  LF_CHECK(error_.empty(),
           "this lazy tensor has no value: the graph computing it failed at sync "
           "with: ",
           error_);
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
  ++version_;
  return true;
}

void LazyData::setPending(Value value) {
  value_ = std::move(value);
  buffer_ = at::Tensor();
  error_.clear();
  ++version_;
}

void LazyData::setBuffer(at::Tensor buffer) {
  buffer_ = std::move(buffer);
  value_ = Value{};
  error_.clear();
  ++version_;
}

void LazyData::setBroken(std::string error) {
  LF_INTERNAL_ASSERT(!error.empty(), "broken data needs the error that broke it");
  error_ = std::move(error);
  value_ = Value{};
  buffer_ = at::Tensor();
  ++version_;
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

void LazyTensorImpl::release_resources() {
  data_.reset();
  c10::TensorImpl::release_resources();
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
// except a view of a normal tensor, which eager keeps normal. A lazy tensor's
// FunctionalTensorWrapper takes both from the value it wraps when it is made, so the value a view
// op's *_copy returns in InferenceMode would make the view an inference tensor, and
// ADInplaceOrView, which runs for the normal base, refuses to give it the base's version counter
// ("Cannot set version_counter for inference tensor"): a model made outside InferenceMode could not
// even run F.linear inside it. So the recorder makes such a value normal when the value it is a
// view of is (leaveInference), and likewise the new value of a write into a normal tensor and of a
// *_scatter into a normal base, which functionalization swaps in under the normal wrapper that
// later views are taken of. Pinned by
// test_inference_mode.py::test_inference_mode_on_tensors_made_outside_it.
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
