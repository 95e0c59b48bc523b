#include "backend/storage_addresses.h"

#include "backend/device.h"
#include "backend/functionalize_kernels.h"
#include "backend/lazy_tensor.h"
#include "backend/math_bits.h"
#include "backend/view_kernels.h"

#include <ATen/FunctionalTensorWrapper.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

namespace lazyfuse {

// Note [Addresses of lazy storages]
// A lazy tensor has no memory of its own to point at, and PyTorch's functionalization gives the
// storage of every wrapper a null data pointer, so data_ptr() was 0 for every lazy tensor and
// untyped_storage().data_ptr() raised. User code (and PyTorch's view tests) checks aliasing
// through both: a view and its base must report one address, distinct tensors different ones.
// So a lazy storage gets an address of its own: the start of a range as long as the storage in
// a part of the address space no pointer can be in (from 2^57 up), never read, written or
// freed. A view shares its base's storage, so its data_ptr() is that address plus its offset in
// bytes, as in eager; nbytes() is the storage's. Reading memory through it (storage[i], copying
// the storage) makes a tensor over the storage with set_, which raises a clear error on lazy
// tensors (registerStorageKernels), as does set_ with another tensor's storage; set_ with a
// tensor's own storage (x.set_(x.storage(), 0, sizes, strides): new geometry over its memory)
// is as_strided_, when x is not a view.
//
// Who gives the address: wrapIfFactory, for the storages lazyfuse makes (factories and
// transfers: parameters, inputs, buffers); a kernel on every view op, for the storage of the
// view's base the first time it is viewed (an op's result, whose storage PyTorch's
// functionalization makes where lazyfuse does not see it; a hook on every op would cost
// recording time); and the same kernel on _unsafe_view, where reshape and flatten end when they
// copy. Any other op result keeps the null address until it is first viewed (stable from then
// on): its data_ptr() is 0 and untyped_storage().data_ptr() raises, as for PyTorch's own tensor
// subclasses without memory; `a.untyped_storage()._cdata == b.untyped_storage()._cdata` tells
// aliasing for every lazy tensor.
//
// The view kernel (on the in-place view ops too: t_, unsqueeze_, as_strided_) also puts the
// view's storage offset where data_ptr() reads it. A FunctionalTensorWrapper reports the offset
// of the tensor it wraps (Note [View geometry]), but data_ptr() reads the TensorImpl's own field,
// which PyTorch's view kernels set from a Meta reference made from the input's sizes and strides
// without its offset: the view of a view would point at its parent's offset only. Pinned by
// test_view_metadata.py::test_data_ptr_*.

namespace {

/// The start of an unused range of `nbytes` (whole pages, with a page between ranges). The
/// ranges lie from 2^57 up: no x86-64 or AArch64 address (at most 57 bits, sign-extended) can be
/// there, so no real pointer equals one, and 2^62 bytes of them last any run.
void* reserveAddress(size_t nbytes) {
  constexpr uintptr_t kFirst = uintptr_t{1} << 57;
  constexpr uintptr_t kPage = 4096;
  static std::atomic<uintptr_t> next{kFirst};
  const uintptr_t pages = std::min<uintptr_t>(nbytes, uintptr_t{1} << 58) / kPage + 2;
  return reinterpret_cast<void*>(next.fetch_add(pages * kPage, std::memory_order_relaxed));
}

/// See Note [Addresses of lazy storages]: the view's own offset field, and its storage's address.
void placeView(const at::Tensor& view) {
  if (!view.defined() || !isLazy(view) || !at::functionalization::impl::isFunctionalTensor(view)) {
    return;
  }
  c10::TensorImpl* impl = view.unsafeGetTensorImpl();
  if (impl->has_symbolic_sizes_strides()) return;
  impl->set_storage_offset(storageOffsetOf(view));
  giveStorageAnAddress(view);
}

/// lazyfuse's view kernel (Note [Lazy view kernels]) where the op has one and it takes the call,
/// else the Functionalize kernel the op had (PyTorch's, or lazyfuse's write kernel for an
/// in-place view op); then placeView on its results, and eager's conjugate and negative bits
/// (Note [Conjugate and negative bits of lazy views]).
class ViewAddressKernel final : public c10::OperatorKernel {
 public:
  ViewAddressKernel(c10::SafeKernelFunction below, const LazyViewOp* view, size_t num_args,
                    MathBitsRule bits_rule, bool as_strided, bool in_place)
      : below_(std::move(below)),
        view_(view),
        num_args_(num_args),
        bits_rule_(bits_rule),
        as_strided_(as_strided),
        in_place_(in_place) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
    const c10::IValue& self = (*stack)[stack->size() - num_args_];
    const bool bits_here = bits_rule_ != MathBitsRule::kDecomposed && self.isTensor();
    const MathBits bits = bits_here ? viewMathBits(bits_rule_, self.toTensor()) : MathBits{};
    if (as_strided_ && takeAsStridedOfView(stack, in_place_)) {
      // Note [as_strided of a view]
    } else if (view_ == nullptr || !takeLazyView(*view_, num_args_, stack)) {
      below_.callBoxed(op, keys, stack);
    }
    const size_t results = op.schema().returns().size();
    for (size_t r = stack->size() - results; r < stack->size(); ++r) {
      forEachTensor((*stack)[r], [bits, bits_here](const at::Tensor& view) {
        placeView(view);
        if (bits_here && view.defined() && isLazy(view)) setMathBits(view, bits);
      });
    }
  }

 private:
  c10::SafeKernelFunction below_;
  const LazyViewOp* view_;
  size_t num_args_;
  MathBitsRule bits_rule_;
  bool as_strided_;
  bool in_place_;
};

/// set_ with a storage, on a lazy tensor: with its own storage, as_strided_ (x.set_(x.storage(),
/// offset, sizes, strides) gives x that geometry over the memory it has); with another, an
/// error. See Note [Addresses of lazy storages].
void setStorage(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  namespace F = at::functionalization::impl;
  const size_t n = op.schema().arguments().size();
  auto args = torch::jit::last(*stack, n);
  at::Tensor self = args[0].toTensor();
  const c10::Storage storage = args[1].toStorage();
  // A view's as_strided_ would address its own value, not the storage (pytorch/pytorch#120585).
  const bool own = F::isFunctionalTensor(self) && self.has_storage() &&
                   storage.unsafeGetStorageImpl() == self.storage().unsafeGetStorageImpl() &&
                   F::unsafeGetFunctionalWrapper(self)->view_metas().empty();
  TORCH_CHECK(own,
              "set_ with a storage is not supported on lazy tensors, except a tensor's own "
              "storage when it is not a view: a lazy storage holds no memory a tensor can be made "
              "over (so storage[i], tolist() and cpu() of a lazy storage cannot read it either; "
              "its data_ptr() serves aliasing checks only). Read the values through the tensor, "
              "e.g. tensor.cpu()");
  int64_t offset = 0;
  std::vector<int64_t> sizes{static_cast<int64_t>(storage.nbytes()) /
                             static_cast<int64_t>(self.element_size())};
  std::vector<int64_t> strides{1};
  if (n == 5) {
    offset = args[2].toSymInt().expect_int();
    sizes = C10_AS_INTARRAYREF_SLOW(args[3].toSymIntVector()).vec();
    strides = C10_AS_INTARRAYREF_SLOW(args[4].toSymIntVector()).vec();
  }
  torch::jit::drop(*stack, n);
  self.as_strided_(sizes, strides, offset);
  stack->push_back(self);
}

/// _has_same_storage_numel on the wrappers, whose storages have a size: PyTorch's Functionalize
/// fallback ran it on the lazy values, which have no storage, and crashed the process
/// (forward-mode AD asks it of a tangent in make_dual). See Note [Addresses of lazy storages].
void hasSameStorageNumel(const c10::OperatorHandle&, c10::DispatchKeySet,
                         torch::jit::Stack* stack) {
  auto numel = [](const at::Tensor& t) {
    if (!t.unsafeGetTensorImpl()->has_storage()) return t.numel();
    return static_cast<int64_t>(t.storage().nbytes() / t.itemsize());
  };
  const bool same = numel((*stack)[stack->size() - 2].toTensor()) ==
                    numel((*stack)[stack->size() - 1].toTensor());
  torch::jit::drop(*stack, 2);
  stack->push_back(same);
}

}  // namespace

void registerStorageKernels(torch::Library& functionalize_lib) {
  implLazyOnFunctionalize(
      functionalize_lib,
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::_has_same_storage_numel", ""),
      c10::KernelFunction::makeFromBoxedFunction<&hasSameStorageNumel>());
  // On Functionalize, before the write checks, which would run set_ on CPU stand-ins.
  for (const char* overload : {"source_Storage", "source_Storage_storage_offset"}) {
    implLazyOnFunctionalize(functionalize_lib,
                            c10::Dispatcher::singleton().findSchemaOrThrow("aten::set_", overload),
                            c10::KernelFunction::makeFromBoxedFunction<&setStorage>());
  }
}

void giveStorageAnAddress(const at::Tensor& wrapper) {
  c10::StorageImpl* storage =
      wrapper.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  if (storage == nullptr || storage->data() != nullptr) return;
  static std::mutex mutex;  // two threads viewing one base at once give it one address
  std::lock_guard<std::mutex> lock(mutex);
  if (storage->data() != nullptr) return;
  storage->set_data_ptr_noswap(c10::DataPtr(reserveAddress(storage->nbytes()), wrapper.device()));
}

bool registerViewAddressKernel(const c10::OperatorHandle& op, torch::Library& functionalize_lib) {
  const auto& returns = op.schema().returns();
  // In-place view ops (t_, unsqueeze_, as_strided_) change self's geometry and return it.
  const bool view = !returns.empty() && returns[0].alias_info() != nullptr &&
                    (!returns[0].alias_info()->isWrite() || op.hasTag(at::Tag::inplace_view));
  // reshape's copy (and flatten's, view's of a copy) ends in _unsafe_view of the copy.
  const bool reshape_copy = op.schema().name() == "aten::_unsafe_view";
  if (!(view || reshape_copy) || !op.hasKernelForDispatchKey(c10::DispatchKey::Functionalize)) {
    return false;
  }
  // Over what lazy calls get now: PyTorch's kernel, or lazyfuse's write kernel (in-place views).
  // lazyfuse's view kernel stands in for PyTorch's only.
  const LazyViewOp* ours = hasLazyFunctionalizeKernel(op) ? nullptr : lazyViewOpFor(op);
  auto kernel = std::make_unique<ViewAddressKernel>(
      op.getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize), ours,
      op.schema().arguments().size(), mathBitsRuleFor(op),
      (op.schema().name() == "aten::as_strided" || op.schema().name() == "aten::as_strided_") &&
          op.schema().overload_name().empty(),
      op.schema().name() == "aten::as_strided_");
  implLazyOnFunctionalize(functionalize_lib, op,
                          c10::KernelFunction::makeFromBoxedFunctor(std::move(kernel)));
  return true;
}

}  // namespace lazyfuse
