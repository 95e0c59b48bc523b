#include "backend/lazy_tensor.h"

#include "backend/device.h"
#include "lazy_ir/check.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

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
  m.strides = strides().vec();
  return m;
}

void LazyTensorImpl::setMeta(const TensorMeta& meta) {
  LF_INTERNAL_ASSERT(meta.dtype == c10::typeMetaToScalarType(dtype()), "dtype of a tensor changed");
  set_sizes_and_strides(meta.sizes, meta.strides);
}

c10::intrusive_ptr<c10::TensorImpl> LazyTensorImpl::shallow_copy_and_detach(
    const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<LazyTensorImpl>(data_, meta());
  copy_tensor_metadata(this, impl.get(), version_counter, allow_tensor_metadata_change);
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl> LazyTensorImpl::shallow_copy_and_detach(
    c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<LazyTensorImpl>(data_, meta());
  copy_tensor_metadata(this, impl.get(), std::move(version_counter), allow_tensor_metadata_change);
  return impl;
}

void LazyTensorImpl::shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) {
  auto* other = dynamic_cast<LazyTensorImpl*>(impl.get());
  LF_CHECK(other != nullptr, "cannot shallow-copy a ", impl->device().str(),
           " tensor into a lazy tensor");
  copy_tensor_metadata(other, this, version_counter(), allow_tensor_metadata_change());
  data_ = other->data_;
}

LazyTensorImpl* lazyImpl(const at::Tensor& tensor) {
  if (!isLazy(tensor)) return nullptr;
  if (at::functionalization::impl::isFunctionalTensor(tensor)) {
    at::functionalization::impl::sync(tensor);
    return lazyImpl(at::functionalization::impl::from_functional_tensor(tensor));
  }
  return dynamic_cast<LazyTensorImpl*>(tensor.unsafeGetTensorImpl());
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
  return at::functionalization::impl::to_functional_tensor(tensor);
}

}  // namespace lazyfuse
