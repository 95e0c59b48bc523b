#include "backend/overlapping_writes.h"

#include "backend/detail/stand_ins.h"
#include "backend/device.h"
#include "backend/graph_executor.h"
#include "backend/lazy_tensor.h"
#include "backend/view_kernels.h"
#include "backend/write_aliasing.h"
#include "lazy_ir/check.h"

#include <ATen/FunctionalStorageImpl.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <typeinfo>
#include <utility>

namespace lazyfuse {
namespace {

namespace F = at::functionalization::impl;

/// Whether two elements of `t` may share memory: a zero stride over more than one element, or
/// strides (sorted) that do not step over the extent of the smaller ones.
bool mayOverlapItself(const at::Tensor& t) {
  if (t.numel() <= 1) return false;
  // (|stride|, size) of the dims with more than one element; on the stack: every lazy in-place
  // op asks (writtenOnMemory).
  c10::SmallVector<std::pair<int64_t, int64_t>, 8> dims;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 1) continue;
    if (t.stride(d) == 0) return true;
    dims.emplace_back(std::abs(t.stride(d)), t.size(d));
  }
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;  // the largest offset the smaller dims step to
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return true;
    reach += stride * (size - 1);
  }
  return false;
}

/// Whether `t` is a view made through a view op whose functionalization inverse does not put the
/// view's elements back where they came from (Note [Writes into views that overlap themselves]).
bool madeThroughUnscatterableView(const at::Tensor& t) {
  const auto& metas = F::unsafeGetFunctionalWrapper(t)->view_metas();
  for (const auto& meta : metas) {
    // An as_strided that is the view's only step addresses the base's storage, and its inverse
    // puts the elements of a view that does not overlap itself (mayOverlapItself asks) back
    // there: DDP's gradient bucket views are such. A view of an as_strided, or an as_strided of a
    // view, may be one element of an as_strided that overlaps itself.
    if (meta->is_as_strided && metas.size() > 1) return true;
    if (isLazyExpandViewMeta(*meta)) return true;        // Note [Lazy view kernels]
    if (isStorageAsStridedViewMeta(*meta)) return true;  // Note [as_strided of a view]
    // PyTorch generates one ViewMeta class per view op, named after it.
    const std::string_view name = typeid(*meta).name();
    for (const char* op : {"unfold_ViewMeta", "expand_ViewMeta"}) {
      if (name.find(op) != std::string_view::npos) return true;
    }
  }
  return false;
}

}  // namespace

at::Tensor writtenOnMemory(const OpTraits& traits, const torch::jit::Stack& args) {
  for (int arg : traits.returns_arg) {
    if (arg < 0) return at::Tensor();  // the op returns a new tensor: not a write on memory
  }
  at::Tensor overlapping;
  const c10::StorageImpl* storage = nullptr;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!traits.written[i]) continue;
    if (!args[i].isTensor() || !hasFunctionalStorage(args[i].toTensor())) return at::Tensor();
    const at::Tensor& t = args[i].toTensor();
    if (storage != nullptr && storageOf(t) != storage) return at::Tensor();
    storage = storageOf(t);
    if (!overlapping.defined() && (mayOverlapItself(t) || madeThroughUnscatterableView(t))) {
      overlapping = t;
    }
  }
  return overlapping;
}

void writeOnMemory(const c10::OperatorHandle& op, const OpTraits& traits, const at::Tensor& written,
                   torch::jit::Stack* stack) {
  const size_t num_args = traits.written.size();
  torch::jit::Stack args(stack->end() - num_args, stack->end());

  // The storage's current value: its base, with every pending update applied.
  F::sync(written);
  // A FunctionalTensorWrapper's storage is the FunctionalStorageImpl its aliases share.
  auto* storage = static_cast<at::functionalization::FunctionalStorageImpl*>(
      written.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl());
  storage->apply_updates();
  const at::Tensor base = storage->base();
  const c10::StorageImpl* storage_key = storageOf(written);
  auto in_storage = [&](const at::Tensor& t) {
    return hasFunctionalStorage(t) && storageOf(t) == storage_key;
  };

  // The other lazy tensors' values and the base's first, in one sync (it may run a graph),
  // then the storage laid out as eager lays it out.
  std::vector<c10::intrusive_ptr<LazyData>> values;
  for (const c10::IValue& v : args) {
    forEachTensor(v, [&](const at::Tensor& t) {
      if (t.defined() && isLazy(t) && !in_storage(t)) values.push_back(lazyImpl(t)->dataPtr());
    });
  }
  values.push_back(lazyImpl(base)->dataPtr());
  syncData(values);
  // In bytes: a view of the storage may have another dtype than its base (view_as_real of a
  // complex tensor, view(dtype)), its sizes, strides and offset counted in its own elements.
  auto end_byte = [](const at::Tensor& t) {
    return endElement(t) * static_cast<int64_t>(t.element_size());
  };
  torch::jit::Stack call;
  int64_t span = end_byte(base);
  for (const c10::IValue& v : args) {
    call.push_back(standInArg(v, hardwareDevice(), [&](const at::Tensor& t) {
      if (!t.defined() || !isLazy(t)) return t;
      if (in_storage(t)) {
        span = std::max(span, end_byte(t));
        return t;  // replaced by a view into the memory below
      }
      return materialize(t);
    }));
  }
  const at::Tensor base_value = materialize(base);
  at::AutoDispatchSkipFunctionalize skip_functionalize;
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  constexpr int64_t kWidest = 16;  // complex128: every dtype's view of the bytes divides them
  at::Tensor memory = at::empty({(span + kWidest - 1) / kWidest * kWidest},
                                at::TensorOptions().dtype(at::kByte).device(hardwareDevice()));
  // With t's math bits: the memory holds eager's bytes, and a view with a bit reads and writes
  // them through it (Note [Conjugate and negative bits of lazy views]).
  auto in_memory = [&](const at::Tensor& t) {
    at::Tensor view =
        memory.view(t.scalar_type()).as_strided(t.sizes(), t.strides(), storageOffsetOf(t));
    view._set_conj(t.is_conj());
    view._set_neg(t.is_neg());
    return view;
  };
  in_memory(base).copy_(base_value);
  for (c10::IValue& v : call) {
    v = standInArg(v, hardwareDevice(), [&](const at::Tensor& t) {
      if (!in_storage(t)) return t;
      return in_memory(t);
    });
  }

  op.callBoxed(call);  // eager's kernel: its errors, its warnings, its order of writes

  at::Tensor new_value =
      at::empty_strided(base.sizes(), base.strides(),
                        at::TensorOptions().dtype(base.scalar_type()).device(hardwareDevice()));
  new_value.copy_(in_memory(base));
  storage->add_update(makeMaterializedTensor(std::move(new_value)), {});
  F::unsafeGetFunctionalWrapper(written)->mark_mutation();
  F::sync(written);  // regenerated from the new base, as every other view is when next used

  torch::jit::drop(*stack, num_args);
  for (int arg : traits.returns_arg) stack->push_back(args.at(static_cast<size_t>(arg)));
}

}  // namespace lazyfuse
