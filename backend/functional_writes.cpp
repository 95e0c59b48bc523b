// In-place writes into lazy tensors functionalized here, without PyTorch's per-call meta check:
// see Note [Functionalizing foreach writes] and Note [Functionalizing in-place writes].

#include "backend/detail/write_kernel.h"

#include "backend/device.h"
#include "backend/functionalize_kernels.h"
#include "backend/lazy_tensor.h"
#include "lazy_ir/check.h"
#include "lazy_ir/text.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/List.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <vector>

namespace lazyfuse::detail {
namespace {

// Note [Functionalizing foreach writes]
// PyTorch's Functionalize kernel of an in-place op first runs the op on meta tensors (to raise
// the errors only the in-place form has), then records its functional form. For the foreach
// ops of an optimizer step those meta kernels are Python, and over a model's parameters they
// cost more than the rest of the step's tracing together (an Adam step over ResNet-50's 161
// tensors spent most of ~45 ms there on 2 cores). checkLikeEager has already run that check,
// once per metadata, so a `_foreach_*_` write of lazy tensors is functionalized here: the
// functional `_foreach_*` over the unwrapped values, then each written tensor replaced by its
// result, as PyTorch's kernel does after its check.
// That computes every element from the values before the call. Eager's CPU kernel writes one
// element after the other (its slow path, the only one on the CPU), so where a written element
// overlaps a tensor of another element (`_foreach_add_([a, b], [b, a])` adds the new a to b),
// the call is split into one call per element, in order, each functionalized as above
// (writeElementByElement; aliasing found as in Note [Overlapping writes]).
// Pinned by test_out_checks.py::test_foreach_write_*.

/// The functional op of each in-place op functionalized here (Note [Functionalizing foreach
/// writes], Note [Functionalizing in-place writes]): `_foreach_add.Scalar` for
/// `_foreach_add_.Scalar`, `add.Tensor` for `add_.Tensor`; filled at load, read-only after.
struct FunctionalWrite {
  c10::OperatorHandle functional;
  bool foreach = false;
};
using FunctionalWrites = std::unordered_map<const c10::FunctionSchema*, FunctionalWrite>;

FunctionalWrites& functionalWrites() {
  static FunctionalWrites* instance = new FunctionalWrites();
  return *instance;
}

/// For a `_foreach_*_` op whose functional form returns one tensor per written tensor.
std::optional<c10::OperatorHandle> findForeachFunctional(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.operator_name();
  const c10::FunctionSchema& schema = op.schema();
  const bool foreach_write = startsWith(name.name, "aten::_foreach_") && name.name.back() == '_' &&
                             schema.returns().empty() && !schema.arguments().empty() &&
                             schema.arguments()[0].type()->isSubtypeOf(*c10::ListType::ofTensors());
  if (!foreach_write) return std::nullopt;
  std::optional<c10::OperatorHandle> functional = c10::Dispatcher::singleton().findOp(
      c10::OperatorName(name.name.substr(0, name.name.size() - 1), name.overload_name));
  const bool one_list =
      functional && functional->schema().returns().size() == 1 &&
      functional->schema().returns()[0].type()->isSubtypeOf(*c10::ListType::ofTensors());
  return one_list ? functional : std::nullopt;
}

/// For an in-place op that writes self alone and returns it (OpTraits::functional_name names
/// its functional form), whose functional op of the same overload takes the same arguments
/// (names and types) and returns one new tensor.
std::optional<c10::OperatorHandle> findInPlaceFunctional(const c10::OperatorHandle& op,
                                                         const OpTraits& traits) {
  const auto& args = op.schema().arguments();
  const bool self_alone = !traits.written.empty() && traits.written[0] &&
                          std::count(traits.written.begin(), traits.written.end(), 1) == 1 &&
                          traits.returns_arg == std::vector<int>{0};
  if (traits.functional_name.empty() || !self_alone ||
      startsWith(traits.functional_name, "aten::_foreach_")) {
    return std::nullopt;
  }
  std::optional<c10::OperatorHandle> functional = c10::Dispatcher::singleton().findOp(
      c10::OperatorName(traits.functional_name, op.operator_name().overload_name));
  if (!functional) return std::nullopt;
  const c10::FunctionSchema& f = functional->schema();
  if (f.returns().size() != 1 || f.returns()[0].alias_info() != nullptr ||
      !f.returns()[0].type()->isSubtypeOf(*c10::TensorType::get()) ||
      f.arguments().size() != args.size()) {
    return std::nullopt;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (f.arguments()[i].name() != args[i].name() || f.arguments()[i].alias_info() != nullptr ||
        *f.arguments()[i].type() != *args[i].type()) {
      return std::nullopt;
    }
  }
  return functional;
}

const FunctionalWrite* functionalWrite(const c10::OperatorHandle& op) {
  const FunctionalWrites& writes = functionalWrites();
  auto it = writes.find(&op.schema());
  return it == writes.end() ? nullptr : &it->second;
}

bool allFunctional(const torch::jit::Stack& args) {
  bool all = true;
  for (const c10::IValue& arg : args) {
    forEachTensor(arg, [&](const at::Tensor& t) {
      all =
          all && (!t.defined() || !isLazy(t) || at::functionalization::impl::isFunctionalTensor(t));
    });
  }
  return all;
}

/// Unwraps the functional tensors of `v` (after bringing them up to date).
c10::IValue unwrapped(const c10::IValue& v) {
  namespace F = at::functionalization::impl;
  auto unwrap = [](const at::Tensor& t) {
    if (!t.defined() || !F::isFunctionalTensor(t)) return t;
    F::sync(t);
    return F::from_functional_tensor(t);
  };
  if (v.isTensor()) return unwrap(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorList()) list.push_back(unwrap(t));
    return list;
  }
  return v;
}

/// Runs `functional` over the unwrapped values of `args` (which passed the checks), noting the
/// write it stands for; its returns.
torch::jit::Stack callFunctional(const c10::OperatorHandle& functional, const OpTraits& traits,
                                 torch::jit::Stack& args) {
  torch::jit::Stack stack;
  for (const c10::IValue& arg : args) stack.push_back(unwrapped(arg));
  PendingWriteGuard guard(pendingWriteOf(traits, args));
  at::AutoDispatchSkipFunctionalize skip;
  functional.callBoxed(&stack);
  return stack;
}

/// Replaces the value of functional tensor `written` by `result`, as PyTorch's kernel does after
/// its meta check: committed to its base when it is a view, and synced.
void replaceWritten(const at::Tensor& written, const at::Tensor& result) {
  namespace F = at::functionalization::impl;
  F::replace_(written, result);
  F::commit_update(written);
  F::sync(written);
}

/// See Note [Functionalizing foreach writes]; `args` passed checkLikeEager.
void functionalizeForeachWrite(const c10::OperatorHandle& functional, const OpTraits& traits,
                               torch::jit::Stack& args) {
  const std::vector<at::Tensor> written = args[0].toTensorVector();
  const torch::jit::Stack stack = callFunctional(functional, traits, args);
  const std::vector<at::Tensor> results = stack.at(0).toTensorVector();
  LF_INTERNAL_ASSERT(results.size() == written.size(), functional.operator_name(), " returned ",
                     results.size(), " tensors for ", written.size());
  for (size_t i = 0; i < written.size(); ++i) replaceWritten(written[i], results[i]);
}

// Note [Functionalizing in-place writes]
// The same holds for an in-place op on one tensor: PyTorch's Functionalize kernel of
// `p.add_(g, alpha=-lr)` runs add_'s Python meta kernel (torch._meta_registrations, its
// broadcast checks in torch._refs) before it records `add`, about 40 us a call, twice in each
// parameter's SGD update: in `make demo`'s MLP step, a third of the step's host time. So an
// in-place op whose functional form takes the same arguments (findInPlaceFunctional) and that
// PyTorch's generated kernel functionalizes (no kernel of ours below: copy_, masked_fill_ and
// polygamma_ keep theirs) is functionalized here after checkLikeEager: the functional op over
// the unwrapped values, then self replaced by its result, committed to its base when it is a
// view, and synced, as PyTorch's kernel does after its meta check. Checks that depend on a
// scalar's value (an integer tensor to a negative power) are the functional op's, which the
// recorder makes on every call. Pinned by test_out_checks.py::test_in_place_write_*.

/// See Note [Functionalizing in-place writes]; `args` passed checkLikeEager. Returns self.
at::Tensor functionalizeInPlaceWrite(const c10::OperatorHandle& functional, const OpTraits& traits,
                                     torch::jit::Stack& args) {
  const at::Tensor written = args[0].toTensor();
  const torch::jit::Stack stack = callFunctional(functional, traits, args);
  LF_INTERNAL_ASSERT(stack.size() == 1 && stack[0].isTensor(), functional.operator_name(),
                     " returned no tensor");
  replaceWritten(written, stack[0].toTensor());
  return written;
}

/// Argument `v` of a foreach call of `n` elements, as the call of its element `k` alone takes it.
/// (The `Tensor scalars` of _foreach_addcmul_.Tensor is a CPU tensor: such calls mix devices and
/// do not come here.)
c10::IValue elementArg(const c10::IValue& v, size_t k, size_t n) {
  if (v.isTensorList()) return c10::List<at::Tensor>({v.toTensorList().get(k)});
  if (v.isList() && v.toListRef().size() == n) {
    c10::impl::GenericList one(v.toList().elementType());
    one.push_back(v.toListRef()[k]);
    return one;
  }
  return v;
}

/// See Note [Functionalizing foreach writes]: a foreach write, one element after the other.
void writeElementByElement(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                           const torch::jit::Stack& args) {
  const size_t n = args[0].toTensorList().size();
  for (size_t k = 0; k < n; ++k) {
    torch::jit::Stack element;
    for (const c10::IValue& arg : args) element.push_back(elementArg(arg, k, n));
    writeKernel(op, keys, &element);
  }
}

}  // namespace

void noteFunctionalWrite(const c10::OperatorHandle& op, const OpTraits& traits) {
  if (std::optional<c10::OperatorHandle> functional = findForeachFunctional(op)) {
    functionalWrites().emplace(&op.schema(), FunctionalWrite{*functional, true});
  } else if (std::optional<c10::OperatorHandle> functional = findInPlaceFunctional(op, traits);
             functional && !hasLazyFunctionalizeKernel(op)) {
    functionalWrites().emplace(&op.schema(), FunctionalWrite{*functional, false});
  }
}

bool functionalizeWrite(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                        const OpTraits& traits, torch::jit::Stack& args, bool across_elements,
                        torch::jit::Stack* stack) {
  const FunctionalWrite* write = functionalWrite(op);
  if (!write || !allFunctional(args)) return false;
  stack->erase(stack->end() - args.size(), stack->end());
  if (!write->foreach) {
    stack->push_back(functionalizeInPlaceWrite(write->functional, traits, args));
  } else if (across_elements && args[0].toTensorList().size() > 1) {
    writeElementByElement(op, keys, args);
  } else {
    functionalizeForeachWrite(write->functional, traits, args);
  }
  return true;
}

}  // namespace lazyfuse::detail
