#include "backend/view_kernels.h"

#include "backend/device.h"
#include "backend/functionalize_kernels.h"
#include "lazy_ir/check.h"

#include <ATen/EmptyTensor.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/ops/as_strided_copy.h>
#include <ATen/ops/as_strided_scatter.h>
#include <ATen/ops/conj_physical.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/view_copy.h>
#include <ATen/ops/zeros.h>
#include <c10/util/intrusive_ptr.h>

#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace lazyfuse {

// Note [as_strided of a view]
// Eager's as_strided addresses its input's storage: x[1:].as_strided((3,), (2,), 1) reads
// elements 1, 3 and 5 of x. PyTorch's functionalization applies it to the value of the view, as
// if that value were the storage (pytorch/pytorch#120585): lazy read elements 2, 4 and 6, with
// no error, and x.view(3, 4)[1].as_strided((2,), (1,), 5) failed at the sync ("setStorage: ...
// out of bounds"). The same held for a tensor that is not a view but whose value is not laid out
// as its storage (x.t().exp(): eager gives it the input's strides). So as_strided and
// as_strided_ of such a lazy tensor apply as_strided_copy to its storage's base (the value the
// storage's views are replayed from, which has no offset and spans the storage), scattered into
// eager's layout of the storage where it is not already, in the tensor's dtype (view(dtype) may
// have come before) and with its math bits. The ViewMeta reads the base from the storage again
// when the view is replayed, whatever the ViewMetas before it give (as_strided_ appends it to the
// tensor's own). A write through such a view (or a view of it) runs on memory (Note [Writes into
// views that overlap themselves]: isStorageAsStridedViewMeta), so the ViewMeta's reverse never
// runs. Eager's out-of-bounds check comes at the op. Pinned by test_views_mutation.py::
// test_as_strided_of_a_view_*, test_dtype_views.py and the fuzzer's as_strided steps.

namespace {

namespace F = at::functionalization::impl;
using at::functionalization::FunctionalStorageImpl;

/// The storage of the base `base` (a lazy value: no offset, spanning its storage) as a 1-d
/// tensor of `dtype`: its elements where eager's memory has them.
at::Tensor storageValue(const at::Tensor& base, at::ScalarType dtype) {
  // the base spans the storage (it has no offset): its extent is the storage's
  const int64_t n = static_cast<int64_t>(
      at::detail::computeStorageNbytes(base.sizes(), base.strides(), base.element_size(),
                                       base.storage_offset()) /
      base.element_size());
  at::Tensor flat;
  if (base.is_contiguous() && base.storage_offset() == 0 && base.numel() == n) {
    flat = at::view_copy(base, {n});
  } else {
    flat = at::as_strided_scatter(at::zeros({n}, base.options()), base, base.sizes(),
                                  base.strides(), base.storage_offset());
  }
  return dtype == base.scalar_type() ? flat : at::view_copy(flat, dtype);
}

/// Whether the value of lazy functional tensor `self` (whose wrapper is `wrapper`) is its storage:
/// no view, contiguous, no offset, spanning the storage. PyTorch's kernels read such a tensor
/// right.
bool valueIsItsStorage(const at::Tensor& self, const at::FunctionalTensorWrapper& wrapper) {
  return wrapper.view_metas().empty() && self.is_contiguous() && self.storage_offset() == 0 &&
         static_cast<size_t>(self.numel()) * self.element_size() == self.storage().nbytes();
}

/// Eager's check of a view's bounds within `self`'s storage (checkInBoundsForStorage), at the op.
void checkInStorage(const at::Tensor& self, const std::vector<int64_t>& sizes,
                    const std::vector<int64_t>& strides, int64_t offset) {
  const int64_t itemsize = static_cast<int64_t>(self.element_size());
  const int64_t needed =
      static_cast<int64_t>(at::detail::computeStorageNbytes(sizes, strides, itemsize, offset));
  const int64_t have = static_cast<int64_t>(self.storage().nbytes());
  TORCH_CHECK(needed <= have, "setStorage: sizes ", c10::IntArrayRef(sizes), ", strides ",
              c10::IntArrayRef(strides), ", storage offset ", offset, ", and itemsize ", itemsize,
              " requiring a storage size of ", needed, " are out of bounds for storage of size ",
              have);
}

class StorageAsStridedMeta final : public at::functionalization::ViewMeta {
 public:
  StorageAsStridedMeta(FunctionalStorageImpl* storage, const at::Tensor& self,
                       std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset)
      : ViewMeta(/*has_symbolic_inputs=*/false, /*is_multi_output=*/false,
                 /*is_as_strided=*/true),
        // weak: the storage's updates may hold ViewMetas, ours among them
        storage_(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage)),
        dtype_(self.scalar_type()),
        conj_(self.is_conj()),
        neg_(self.is_neg()),
        sizes_(std::move(sizes)),
        strides_(std::move(strides)),
        offset_(offset) {}

  /// The view's values from the storage's base: its elements in the view's dtype (view(dtype)
  /// may have come before), then the view's math bits applied (Note [Conjugate and negative bits
  /// of lazy views]: a lazy value holds the values, the base the memory).
  at::Tensor read(const at::Tensor& base) const {
    // the bits before as_strided_copy, whose result reports the view's geometry
    at::Tensor storage = storageValue(base, dtype_);
    if (conj_) storage = at::conj_physical(storage);
    if (neg_) storage = at::neg(storage);
    return at::as_strided_copy(storage, sizes_, strides_, offset_);
  }

  at::Tensor forward(const at::Tensor&) override {
    c10::intrusive_ptr<c10::StorageImpl> storage = storage_.lock();
    LF_INTERNAL_ASSERT(storage, "as_strided of a view replayed after its storage was freed");
    return read(static_cast<FunctionalStorageImpl*>(storage.get())->base());
  }

  at::Tensor reverse(const at::Tensor&, const at::Tensor&) override {
    LF_INTERNAL_ASSERT(false,
                       "a write through as_strided of a lazy view reached functionalization; it "
                       "runs on memory (Note [as_strided of a view])");
  }

 private:
  c10::weak_intrusive_ptr<c10::StorageImpl> storage_;
  at::ScalarType dtype_;
  bool conj_, neg_;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;
  int64_t offset_;
};

}  // namespace

bool isStorageAsStridedViewMeta(const at::functionalization::ViewMeta& meta) {
  return dynamic_cast<const StorageAsStridedMeta*>(&meta) != nullptr;
}

bool takeAsStridedOfView(torch::jit::Stack* stack, bool in_place) {
  // as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None)
  auto args = torch::jit::last(*stack, 4);
  if (!args[0].isTensor()) return false;
  const at::Tensor& self = args[0].toTensor();
  if (!isLazy(self) || !F::isFunctionalTensor(self) || F::getFunctionalizationReapplyViewsTLS() ||
      self.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
    return false;
  }
  at::FunctionalTensorWrapper* wrapper = F::unsafeGetFunctionalWrapper(self);
  if (valueIsItsStorage(self, *wrapper)) {
    return false;  // its value is its storage: PyTorch's kernel reads it right
  }
  // concrete sizes box as int lists (as takeLazyView reads them); a symbolic one goes to PyTorch
  if (!args[1].isIntList() || !args[2].isIntList()) return false;
  std::vector<int64_t> sizes = args[1].toIntVector();
  std::vector<int64_t> strides = args[2].toIntVector();
  // eager's default offset: the input's own
  const std::optional<int64_t> offset =
      args[3].isNone() ? std::optional<int64_t>(self.storage_offset()) : intOf(args[3]);
  if (!offset || sizes.size() != strides.size() || *offset < 0) return false;
  for (int64_t stride : strides) {
    if (stride < 0) return false;  // PyTorch's kernel raises eager's error
  }
  checkInStorage(self, sizes, strides, *offset);
  F::sync(self);
  auto* storage = static_cast<FunctionalStorageImpl*>(
      self.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl());
  storage->apply_updates();
  auto meta = std::make_shared<StorageAsStridedMeta>(storage, self, std::move(sizes),
                                                     std::move(strides), *offset);
  if (in_place) {
    // as_strided_: self becomes the view (Note [Functionalization Pass - Inplace View Ops])
    at::Tensor result = self;
    wrapper->mutate_view_meta(meta);
    torch::jit::drop(*stack, 4);
    stack->push_back(std::move(result));
    return true;
  }
  at::Tensor value;
  {
    at::AutoDispatchSkipFunctionalize skip;
    value = meta->read(storage->base());
  }
  at::Tensor out = at::detail::make_tensor<at::FunctionalTensorWrapper>(value, wrapper, meta);
  torch::jit::drop(*stack, 4);
  stack->push_back(std::move(out));
  return true;
}

namespace {

// Note [as_strided_scatter of a view]
// Eager's as_strided_scatter(self, src, size, stride, offset) writes src into a copy of self's
// storage (laid out as self's: same strides, same offset, the storage's size) at the storage
// positions as_strided(size, stride, offset) names, and returns that copy seen as self is: so for
// x = s[2:6], offset 2 is x's first element, offset 0 falls before x (nothing of src shows), and
// the result reports x's strides and storage offset 2. PyTorch's functionalization runs the op on
// the value of the view, whose storage is its own (no offset), so lazy wrote at x[2] and x[0]
// instead. For a lazy functional tensor whose value is not laid out as its storage (the cases of
// Note [as_strided of a view]), the op runs on its storage instead: the storage's base in eager's
// layout (storageValue), src scattered into it, then as_strided_copy with self's geometry, whose
// result reports it. Eager's bounds check (the region within self's storage) comes at the op.
// Tensors with a math bit keep PyTorch's path. Pinned by test_views_mutation.py::
// test_as_strided_scatter_of_a_view_*.
void asStridedScatterKernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                            torch::jit::Stack* stack) {
  // as_strided_scatter(Tensor self, Tensor src, SymInt[] size, SymInt[] stride,
  //                    SymInt? storage_offset=None) -> Tensor
  auto args = torch::jit::last(*stack, 5);
  auto pytorch = [&] { pytorchFunctionalizeKernel(op).callBoxed(op, keys, stack); };
  if (!args[0].isTensor() || !args[1].isTensor()) return pytorch();
  const at::Tensor self = args[0].toTensor();
  const at::Tensor src = args[1].toTensor();
  if (!isLazy(self) || !F::isFunctionalTensor(self) || !F::isFunctionalTensor(src) ||
      F::getFunctionalizationReapplyViewsTLS() || self.is_conj() || self.is_neg() ||
      self.unsafeGetTensorImpl()->has_symbolic_sizes_strides() || !args[2].isIntList() ||
      !args[3].isIntList()) {
    return pytorch();
  }
  at::FunctionalTensorWrapper* wrapper = F::unsafeGetFunctionalWrapper(self);
  if (valueIsItsStorage(self, *wrapper)) {
    return pytorch();  // its value is its storage
  }
  std::vector<int64_t> sizes = args[2].toIntVector();
  std::vector<int64_t> strides = args[3].toIntVector();
  const std::optional<int64_t> offset =
      args[4].isNone() ? std::optional<int64_t>(self.storage_offset()) : intOf(args[4]);
  if (!offset || sizes.size() != strides.size() || *offset < 0) return pytorch();
  for (int64_t stride : strides) {
    if (stride < 0) return pytorch();  // PyTorch's kernel raises eager's error
  }
  checkInStorage(self, sizes, strides, *offset);
  TORCH_CHECK(src.sizes() == c10::IntArrayRef(sizes), "expected src to have a size equal to the ",
              "slice of self. src size = ", src.sizes(),
              ", slice size = ", c10::IntArrayRef(sizes));
  F::sync(self);
  F::sync(src);
  auto* storage = static_cast<FunctionalStorageImpl*>(
      self.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl());
  storage->apply_updates();
  at::Tensor value;
  {
    at::AutoDispatchSkipFunctionalize skip;
    at::Tensor flat = storageValue(storage->base(), self.scalar_type());
    flat = at::as_strided_scatter(flat, F::from_functional_tensor(src), sizes, strides, *offset);
    value = at::as_strided_copy(flat, self.sizes(), self.strides(), self.storage_offset());
  }
  torch::jit::drop(*stack, 5);
  stack->push_back(F::to_functional_tensor(value));
}

}  // namespace

void registerAsStridedScatterKernel(torch::Library& functionalize_lib) {
  implLazyOnFunctionalize(
      functionalize_lib,
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::as_strided_scatter", ""),
      c10::KernelFunction::makeFromBoxedFunction<&asStridedScatterKernel>());
}

}  // namespace lazyfuse
