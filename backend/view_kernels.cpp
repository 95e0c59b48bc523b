#include "backend/view_kernels.h"

#include "backend/device.h"
#include "backend/lazy_tensor.h"

#include <ATen/ExpandUtils.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/ops/alias_copy_ops.h>
#include <ATen/ops/diagonal_copy_ops.h>
#include <ATen/ops/diagonal_scatter_ops.h>
#include <ATen/ops/expand_copy_ops.h>
#include <ATen/ops/permute_copy_ops.h>
#include <ATen/ops/select_copy_ops.h>
#include <ATen/ops/select_scatter_ops.h>
#include <ATen/ops/slice_copy_ops.h>
#include <ATen/ops/slice_scatter_ops.h>
#include <ATen/ops/squeeze_copy_ops.h>
#include <ATen/ops/t_copy_ops.h>
#include <ATen/ops/transpose_copy_ops.h>
#include <ATen/ops/unsqueeze_copy_ops.h>
#include <ATen/ops/view_copy_ops.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace lazyfuse {

// Note [Lazy view kernels]
// PyTorch's Functionalize kernel of a view op, for a tensor with the Lazy (or XLA) backend bit,
// first runs the view on a Meta copy of its input and then gives the view that reference's
// sizes, strides and offset: lazy backends were not trusted to report eager's geometry. A lazy
// view reports eager's geometry itself (Note [View geometry]), so the reference only costs: a
// third of the ~13,700 instructions a view took under Functionalize (callgrind), and views are
// half the ops of a decoding step. So the common view ops (kViewOps) take this kernel on
// Functionalize (lazy-only, inside ViewAddressKernel: Note [Addresses of lazy storages]). It does
// what PyTorch's kernel does without the reference: records the op's *_copy on the wrapped
// value, and wraps the result as a view of the input with a ViewMeta of ours, whose forward
// records that *_copy again and whose reverse is the inverse PyTorch's functionalization takes
// for the op (a scatter for select, slice and diagonal, sum_to for expand, the inverse view
// otherwise), so the graphs recorded are the ones PyTorch's kernel recorded.
// The reference also checked what the *_copy op does not: that `view`'s sizes fit the input's
// strides; a call that fails that goes to PyTorch's kernel, which raises eager's error, as do
// calls on a tensor that is not functional, with views reapplied (torch.func.functionalize
// removing views too) or with symbolic sizes. Other view ops (split, unbind, unfold, as_strided,
// ...) keep PyTorch's kernel. Pinned by the view, fuzz and write tests, with
// LAZYFUSE_VERIFY_META=1 too (which checks the geometry the views report against Meta).

// Note [Replaying lazy views]
// PyTorch's functionalization replays a view's ViewMetas from its storage's base whenever the
// view is not up to date, and a new view is never up to date once its storage has been written
// (a view's wrapper starts at generation 0; only regenerate_from_base moves it). So each view of
// a parameter an optimizer updates, or of a KV cache a token writes, was recorded twice: when it
// was taken (from its input's value, stale if the input was written through another view) and
// again at its first use (from the base), and applying a write through the view replayed its
// steps once more. With two changes a lazy view is recorded once:
// - takeLazyView syncs a stale input first, as any op reading it does, so that the view is taken
//   from the current value;
// - a LazyViewMeta remembers the base it last gave a view of and that view (LastView: neither
//   is kept alive by it) and gives the same view of the same base again, without recording: the
//   same LazyTensorImpl, alive, whose data has the same id and version (LazyData::version changes
//   when an op below functionalization writes the data, as native_batch_norm writes its running
//   stats, or a sync gives it a buffer), holds the same value.
// The graphs recorded lose only duplicate nodes. Pinned by test_views_mutation.py::
// test_views_of_written_tensors_record_once and the view and fuzz tests.

enum class ViewKind : uint8_t {
  kView,
  kTranspose,
  kT,
  kPermute,
  kSelect,
  kSlice,
  kExpand,
  kUnsqueeze,
  kSqueeze,
  kSqueezeDim,
  kSqueezeDims,
  kDiagonal,
  kAlias,
};

struct LazyViewOp {
  std::string_view name;  // schema name and overload
  ViewKind kind;
};

std::optional<int64_t> intOf(const c10::IValue& v) {
  if (v.isInt()) return v.toInt();
  if (v.isSymInt()) return v.toSymInt().maybe_as_int();
  return std::nullopt;
}

namespace {

constexpr LazyViewOp kViewOps[] = {
    {"aten::view", ViewKind::kView},
    {"aten::transpose.int", ViewKind::kTranspose},
    {"aten::t", ViewKind::kT},
    {"aten::permute", ViewKind::kPermute},
    {"aten::select.int", ViewKind::kSelect},
    {"aten::slice.Tensor", ViewKind::kSlice},
    {"aten::expand", ViewKind::kExpand},
    {"aten::unsqueeze", ViewKind::kUnsqueeze},
    {"aten::squeeze", ViewKind::kSqueeze},
    {"aten::squeeze.dim", ViewKind::kSqueezeDim},
    {"aten::squeeze.dims", ViewKind::kSqueezeDims},
    {"aten::diagonal", ViewKind::kDiagonal},
    {"aten::alias", ViewKind::kAlias},
};

/// A view's arguments after self.
struct ViewArgs {
  std::vector<int64_t> ints;     // view and expand sizes, permute and squeeze dims
  int64_t a = 0, b = 0, c = 0;   // dims, select's index, diagonal's offset, slice's step
  std::optional<int64_t> start;  // slice
  std::optional<int64_t> end;    // slice
  bool implicit = false;         // expand
};

/// `v` as ints, or nothing when it is None or symbolic (`ok` false then).
std::optional<int64_t> optionalIntOf(const c10::IValue& v, bool& ok) {
  if (v.isNone()) return std::nullopt;
  std::optional<int64_t> i = intOf(v);
  ok = ok && i.has_value();
  return i;
}

/// The call's arguments after self, or nothing when one is symbolic.
std::optional<ViewArgs> parseArgs(ViewKind kind, c10::ArrayRef<c10::IValue> args) {
  ViewArgs v;
  bool ok = true;
  auto int_at = [&](size_t k) {
    std::optional<int64_t> i = intOf(args[k]);
    ok = ok && i.has_value();
    return i.value_or(0);
  };
  auto ints_at = [&](size_t k) {
    ok = ok && args[k].isIntList();
    return ok ? args[k].toIntVector() : std::vector<int64_t>();
  };
  switch (kind) {
    case ViewKind::kView:
    case ViewKind::kPermute:
    case ViewKind::kSqueezeDims: v.ints = ints_at(1); break;
    case ViewKind::kExpand:
      v.ints = ints_at(1);
      v.implicit = args[2].toBool();
      break;
    case ViewKind::kTranspose:
    case ViewKind::kSelect:
      v.a = int_at(1);
      v.b = int_at(2);
      break;
    case ViewKind::kSlice:
      v.a = int_at(1);
      v.start = optionalIntOf(args[2], ok);
      v.end = optionalIntOf(args[3], ok);
      v.c = int_at(4);
      break;
    case ViewKind::kUnsqueeze:
    case ViewKind::kSqueezeDim: v.a = int_at(1); break;
    case ViewKind::kDiagonal:
      v.a = int_at(1);
      v.b = int_at(2);
      v.c = int_at(3);
      break;
    case ViewKind::kT:
    case ViewKind::kSqueeze:
    case ViewKind::kAlias: break;
  }
  if (!ok) return std::nullopt;
  return v;
}

std::optional<c10::SymInt> sym(const std::optional<int64_t>& i) {
  if (!i) return std::nullopt;
  return c10::SymInt(*i);
}

/// The view's *_copy op on `base`: the value of the view.
at::Tensor applyView(ViewKind kind, const ViewArgs& v, const at::Tensor& base) {
  switch (kind) {
    case ViewKind::kView: return at::_ops::view_copy::call(base, c10::fromIntArrayRefSlow(v.ints));
    case ViewKind::kTranspose: return at::_ops::transpose_copy_int::call(base, v.a, v.b);
    case ViewKind::kT: return at::_ops::t_copy::call(base);
    case ViewKind::kPermute: return at::_ops::permute_copy::call(base, v.ints);
    case ViewKind::kSelect: return at::_ops::select_copy_int::call(base, v.a, c10::SymInt(v.b));
    case ViewKind::kSlice:
      return at::_ops::slice_copy_Tensor::call(base, v.a, sym(v.start), sym(v.end),
                                               c10::SymInt(v.c));
    case ViewKind::kExpand:
      return at::_ops::expand_copy::call(base, c10::fromIntArrayRefSlow(v.ints), v.implicit);
    case ViewKind::kUnsqueeze: return at::_ops::unsqueeze_copy::call(base, v.a);
    case ViewKind::kSqueeze: return at::_ops::squeeze_copy::call(base);
    case ViewKind::kSqueezeDim: return at::_ops::squeeze_copy_dim::call(base, v.a);
    case ViewKind::kSqueezeDims: return at::_ops::squeeze_copy_dims::call(base, v.ints);
    case ViewKind::kDiagonal: return at::_ops::diagonal_copy::call(base, v.a, v.b, v.c);
    case ViewKind::kAlias: return at::_ops::alias_copy::call(base);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown view kind");
}

/// `mutated`, a squeeze of `base`, with the size-1 dims of base the squeeze took out put back.
at::Tensor unsqueezeTo(ViewKind kind, const ViewArgs& v, const at::Tensor& base,
                       at::Tensor mutated) {
  const int64_t ndim = base.dim();
  if (ndim == 0) return mutated;
  std::vector<bool> squeezed(static_cast<size_t>(ndim), kind == ViewKind::kSqueeze);
  if (kind == ViewKind::kSqueezeDim) squeezed[at::maybe_wrap_dim(v.a, ndim)] = true;
  if (kind == ViewKind::kSqueezeDims) {
    for (int64_t d : v.ints) squeezed[at::maybe_wrap_dim(d, ndim)] = true;
  }
  for (int64_t d = 0; d < ndim; ++d) {
    if (squeezed[d] && base.size(d) == 1) mutated = at::_ops::unsqueeze_copy::call(mutated, d);
  }
  return mutated;
}

/// The value of `base` with its view `mutated` written back: PyTorch's functional inverse of
/// the view op (InverseReturnMode::NeverView).
at::Tensor invertView(ViewKind kind, const ViewArgs& v, const at::Tensor& base,
                      const at::Tensor& mutated) {
  switch (kind) {
    case ViewKind::kView: return at::_ops::view_copy::call(mutated, base.sym_sizes());
    case ViewKind::kTranspose: return at::_ops::transpose_copy_int::call(mutated, v.a, v.b);
    case ViewKind::kT: return at::_ops::t_copy::call(mutated);
    case ViewKind::kPermute: {
      const int64_t ndim = static_cast<int64_t>(v.ints.size());
      std::vector<int64_t> inverse(v.ints.size());
      for (int64_t i = 0; i < ndim; ++i) inverse[at::maybe_wrap_dim(v.ints[i], ndim)] = i;
      return at::_ops::permute_copy::call(mutated, inverse);
    }
    case ViewKind::kSelect:
      return at::_ops::select_scatter::call(base, mutated, v.a, c10::SymInt(v.b));
    case ViewKind::kSlice:
      return at::_ops::slice_scatter::call(base, mutated, v.a, sym(v.start), sym(v.end),
                                           c10::SymInt(v.c));
    case ViewKind::kExpand:
      return at::sum_to(mutated, base.sizes(), /*always_return_non_view=*/true);
    case ViewKind::kUnsqueeze: return at::_ops::squeeze_copy_dim::call(mutated, v.a);
    case ViewKind::kSqueeze:
    case ViewKind::kSqueezeDim:
    case ViewKind::kSqueezeDims: return unsqueezeTo(kind, v, base, mutated);
    case ViewKind::kDiagonal: return at::_ops::diagonal_scatter::call(base, mutated, v.a, v.b, v.c);
    case ViewKind::kAlias: return at::_ops::alias_copy::call(mutated);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown view kind");
}

/// What a LazyViewMeta's forward last gave, for which base: Note [Replaying lazy views].
class LastView {
 public:
  /// The view `base` gave last time, when it still holds the value it held then.
  std::optional<at::Tensor> of(const at::Tensor& base) const {
    const auto* impl = dynamic_cast<const LazyTensorImpl*>(base.unsafeGetTensorImpl());
    if (impl == nullptr || impl->data().id() != data_id_ || impl->data().version() != version_) {
      return std::nullopt;
    }
    if (base_.lock().get() != impl) return std::nullopt;
    if (auto view = view_.lock()) return at::Tensor(std::move(view));
    return std::nullopt;
  }

  void remember(const at::Tensor& base, const at::Tensor& view) {
    const auto* impl = dynamic_cast<const LazyTensorImpl*>(base.unsafeGetTensorImpl());
    if (impl == nullptr) return;
    data_id_ = impl->data().id();
    version_ = impl->data().version();
    base_ = Weak(base.getIntrusivePtr());
    view_ = Weak(view.getIntrusivePtr());
  }

 private:
  using Weak = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

  int64_t data_id_ = -1;
  uint64_t version_ = 0;
  Weak base_{c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>()};
  Weak view_{c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>()};
};

class LazyViewMeta final : public at::functionalization::ViewMeta {
 public:
  LazyViewMeta(ViewKind kind, ViewArgs args, const at::Tensor& base, const at::Tensor& view)
      : ViewMeta(/*has_symbolic_inputs=*/false), kind_(kind), args_(std::move(args)) {
    last_.remember(base, view);
  }

  at::Tensor forward(const at::Tensor& base) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::optional<at::Tensor> view = last_.of(base)) return *std::move(view);
    at::Tensor view = applyView(kind_, args_, base);
    last_.remember(base, view);
    return view;
  }

  at::Tensor reverse(const at::Tensor& base, const at::Tensor& mutated_view) override {
    return invertView(kind_, args_, base, mutated_view);
  }

  ViewKind kind() const { return kind_; }

 private:
  const ViewKind kind_;
  const ViewArgs args_;
  std::mutex mutex_;  // the views of a view share its ViewMetas
  LastView last_;
};

/// Whether eager's `view` takes `sizes` on `self`: they fit its strides.
bool viewable(const at::Tensor& self, c10::IntArrayRef sizes) {
  at::DimVector shape;
  try {
    shape = at::infer_size_dv(sizes, self.numel());
  } catch (const c10::Error&) {
    return false;  // PyTorch's kernel raises eager's error
  }
  return at::detail::computeStride(self.sizes(), self.strides(), shape).has_value();
}

}  // namespace

const LazyViewOp* lazyViewOpFor(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.operator_name();
  std::string full = name.name;
  if (!name.overload_name.empty()) full += "." + name.overload_name;
  for (const LazyViewOp& view : kViewOps) {
    if (view.name == full) return &view;
  }
  return nullptr;
}

bool takeLazyView(const LazyViewOp& view, size_t num_args, torch::jit::Stack* stack) {
  namespace F = at::functionalization::impl;
  auto args = torch::jit::last(*stack, num_args);
  if (!args[0].isTensor()) return false;
  const at::Tensor& self = args[0].toTensor();
  if (!isLazy(self) || !F::isFunctionalTensor(self) || F::getFunctionalizationReapplyViewsTLS() ||
      self.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
    return false;
  }
  std::optional<ViewArgs> parsed = parseArgs(view.kind, args);
  if (!parsed) return false;
  // Note [Replaying lazy views]; before the check of `view`, which reads the synced geometry.
  if (!F::unsafeGetFunctionalWrapper(self)->is_up_to_date()) F::sync(self);
  if (view.kind == ViewKind::kView && !viewable(self, parsed->ints)) return false;
  const at::Tensor base = F::from_functional_tensor(self);
  at::Tensor value;
  {
    at::AutoDispatchSkipFunctionalize skip;
    value = applyView(view.kind, *parsed, base);
  }
  std::shared_ptr<at::functionalization::ViewMeta> meta =
      std::make_shared<LazyViewMeta>(view.kind, std::move(*parsed), base, value);
  at::Tensor out = at::detail::make_tensor<at::FunctionalTensorWrapper>(
      value, F::unsafeGetFunctionalWrapper(self), meta);
  torch::jit::drop(*stack, num_args);
  stack->push_back(std::move(out));
  return true;
}

bool isLazyExpandViewMeta(const at::functionalization::ViewMeta& meta) {
  const auto* ours = dynamic_cast<const LazyViewMeta*>(&meta);
  return ours != nullptr && ours->kind() == ViewKind::kExpand;
}

}  // namespace lazyfuse
