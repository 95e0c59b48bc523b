#include "backend/write_checks.h"

#include "backend/detail/stand_ins.h"
#include "backend/device.h"
#include "backend/functionalize_kernels.h"
#include "backend/lax_meta.h"
#include "backend/lazy_tensor.h"
#include "backend/overlapping_writes.h"
#include "backend/recorder.h"
#include "backend/write_aliasing.h"
#include "lazy_ir/check.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/List.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>

namespace lazyfuse {
namespace {

// Note [In-place result casts]
// Eager refuses an in-place or out= op whose result dtype cannot be cast to the tensor it writes
// (`int_tensor.mul_(floats)`: "result type Float can't be cast to the desired output type Int"),
// and a structured op's out= refuses an out tensor of another dtype than it computes
// (`torch.mm(f32, f32, out=f64)`: "Expected out tensor to have dtype float, but got double
// instead"; its in-place variant: "Bad in-place call"). Functionalization loses those checks: it
// records the functional op (mul), then casts its result to the written tensor's dtype in
// FunctionalTensorWrapper::replace_, silently truncating. Its meta reference run of an in-place
// op does not help (several Python meta kernels, mul_'s among them, check no dtypes), and out=
// ops get none. So every in-place and out= op of aten with a Functionalize kernel gets ours on
// that key in its place (writeKernel; it calls PyTorch's, or for copy_ the one of Note
// [Functionalizing copy_ across devices]). Functionalize is the one key every lazy tensor carries
// that runs in every mode: autograd keys are skipped under InferenceMode and absent from tensors
// made there. For a write into a lazy tensor, ours
//  0. where a written tensor may overlap another tensor of the call or itself, runs eager's
//     overlap checks (Note [Overlapping writes]; also for the ops left out below);
//  1. runs the op itself on Meta, and when that raises, on the CPU on stand-ins (as Note [Eager's
//     errors] does) for eager's exception and message; on a pass, an op whose CPU checks do not
//     depend on sizes (OpTraits::probes_on_cpu) on one-element stand-ins, for the dtype checks
//     only its CPU kernel makes (cumsum into a bool out, nansum into an int one). A call that
//     passes is remembered under its metadata and not checked again;
//  2. notes the dtypes the op will write: the recorder checks eager's TensorIterator rule
//     (can_cast) on the first op of the functional name it then records, before any tensor is
//     replaced, so every tensor stays as it was. The rule agrees with every OpInfo's in-place and
//     out= variant but random ops' out= (they draw in the out dtype; left out), and sum, prod,
//     nansum, cumsum and cumprod with out= and no dtype, which compute in the out tensor's dtype:
//     the kernel passes that dtype on. The result then keeps the written tensor's geometry (see
//     Note [View geometry]).
// An in-place or out= op with no Functionalize kernel but a CompositeImplicitAutograd one (square_,
// matmul.out) decomposes (Note [Decomposing on Functionalize]), and its ops are checked as above.
// Pinned by test_errors.py::test_written_cast_* and test_write_checks_*.
PendingWrite& pendingWrite() {
  thread_local PendingWrite pending;
  return pending;
}

class PendingWriteGuard {
 public:
  explicit PendingWriteGuard(PendingWrite write)
      : saved_(std::exchange(pendingWrite(), std::move(write))) {}
  ~PendingWriteGuard() { pendingWrite() = std::move(saved_); }
  PendingWriteGuard(const PendingWriteGuard&) = delete;
  PendingWriteGuard& operator=(const PendingWriteGuard&) = delete;

 private:
  PendingWrite saved_;
};

/// The Functionalize kernel each writeKernel replaces (PyTorch's, or one of ours such as
/// functionalizeCopy), by schema; filled at load, read-only after.
using KernelsBelow = std::unordered_map<const c10::FunctionSchema*, c10::SafeKernelFunction>;

KernelsBelow& kernelsBelow() {
  static KernelsBelow* instance = new KernelsBelow();
  return *instance;
}

/// Calls which passed the checks, by writeKey.
CheckedCalls& checkedCalls() {
  static CheckedCalls* instance = new CheckedCalls();
  return *instance;
}

bool writesLazy(const OpTraits& traits, const torch::jit::Stack& args) {
  bool lazy = false;
  for (size_t i = 0; i < args.size() && !lazy; ++i) {
    if (!traits.written[i]) continue;
    forEachTensor(args[i], [&](const at::Tensor& t) { lazy = lazy || isLazy(t); });
  }
  return lazy;
}

/// A tensor of another device than lazy, not a 0-dim CPU one, is the recorder's to refuse (with
/// a device error), and the stand-ins could not mix with it.
bool mixesDevices(const torch::jit::Stack& args) {
  bool mixes = false;
  for (const c10::IValue& v : args) {
    forEachTensor(v, [&](const at::Tensor& t) {
      mixes = mixes || (t.defined() && !isLazy(t) && !(t.dim() == 0 && t.device().is_cpu()));
    });
  }
  return mixes;
}

HashValue hashTensor(HashValue h, const at::Tensor& t) {
  h = hashCombine(h, t.defined());
  if (!t.defined()) return h;
  h = hashCombine(h, static_cast<HashValue>(t.scalar_type()));
  h = hashCombine(h, static_cast<HashValue>(t.device().type()));
  h = hashCombine(h, t.unsafeGetTensorImpl()->is_wrapped_number());
  return hashInts(hashInts(h, t.sizes()), t.strides());
}

/// Everything about a call the checks depend on: tensor metadata, Scalar kinds, other values.
HashValue writeKey(const OpTraits& traits, const torch::jit::Stack& args) {
  HashValue h = traits.name_hash;
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = args[i];
    h = hashCombine(h, i);
    if (v.isTensor() || v.isTensorList() || (v.isList() && !traits.scalar_arg[i])) {
      h = hashCombine(h, hashString(v.tagKind()));
      forEachTensor(v, [&](const at::Tensor& t) { h = hashTensor(h, t); });
      if (v.isList()) h = hashCombine(h, v.toListRef().size());
      if (!v.isList() || v.isTensorList()) continue;
      for (const c10::IValue& e : v.toListRef()) {
        if (!e.isTensor()) h = hashIValue(h, e);
      }
      continue;
    }
    if (traits.generator_arg[i] || traits.scalar_arg[i]) {
      h = hashCombine(h, hashString(v.tagKind()));
      if (!v.isList()) continue;
      for (const c10::IValue& e : v.toListRef()) h = hashCombine(h, hashString(e.tagKind()));
      continue;
    }
    h = hashIValue(h, v);
  }
  return h;
}

/// Runs `op` on Meta stand-ins of `args`; the exception it raised, or null.
std::exception_ptr errorOnMeta(const c10::OperatorHandle& op, const torch::jit::Stack& args) {
  torch::jit::Stack meta;
  for (const c10::IValue& v : args) meta.push_back(standInArg(v, c10::kMeta, metaStandIn));
  c10::impl::ExcludeDispatchKeyGuard no_autograd(
      c10::autograd_dispatch_keyset_with_ADInplaceOrView);
  c10::impl::ExcludeDispatchKeyGuard no_functionalize(c10::DispatchKey::Functionalize);
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
  } catch (const c10::NotImplementedError&) {
    return nullptr;  // no meta kernel: the recorder runs the functional op eagerly
  } catch (const std::exception&) {
    return std::current_exception();
  }
  return nullptr;
}

/// Raises eager's error for a call that writes lazy tensors, step 1 of Note [In-place result
/// casts].
void checkLikeEager(const c10::OperatorHandle& op, const OpTraits& traits,
                    const torch::jit::Stack& args, HashValue key) {
  if (checkedCalls().passed(key)) return;
  DropWarnings drop;
  c10::WarningUtils::WarningHandlerGuard quiet(&drop);
  checkLaxMetaOnCpu(op, traits, args);  // See Note [Lax meta kernels]
  if (traits.functional_name.empty()) {
    // A random op's out= (the Note leaves it out), or an op that writes arguments other than
    // out= ones (running stats): PyTorch's functionalization kernel runs it as it is.
    return checkedCalls().notePassed(key);
  }
  if (std::exception_ptr error = errorOnMeta(op, args)) {
    // Eager's CPU kernel says what the error is; where it cannot run, the meta kernel's stands.
    if (!raiseEagerErrorOnCpu(op, args, /*one_per_dim=*/false)) std::rethrow_exception(error);
  } else if (traits.probes_on_cpu) {
    raiseEagerErrorOnCpu(op, args, /*one_per_dim=*/true);
  }
  checkedCalls().notePassed(key);
}

PendingWrite pendingWriteOf(const OpTraits& traits, torch::jit::Stack& args) {
  PendingWrite write;
  write.functional_name = &traits.functional_name;
  for (size_t i = 0; i < traits.written.size(); ++i) {
    if (!traits.written[i]) continue;
    if (args[i].isTensor()) write.written.push_back(args[i].toTensor());
    if (!args[i].isTensorList()) continue;
    for (const at::Tensor& t : args[i].toTensorList()) write.written.push_back(t);
  }
  if (traits.out_dtype_arg >= 0 && write.written[0].defined()) {
    // Eager reduces in the out tensor's dtype when given none; the functional op must too.
    c10::IValue& dtype = args[traits.out_dtype_arg];
    if (dtype.isNone()) dtype = write.written[0].scalar_type();
  }
  return write;
}

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
  const bool foreach_write = name.name.rfind("aten::_foreach_", 0) == 0 &&
                             name.name.back() == '_' && schema.returns().empty() &&
                             !schema.arguments().empty() &&
                             schema.arguments()[0].type()->isSubtypeOf(*c10::ListType::ofTensors());
  if (!foreach_write) return std::nullopt;
  std::optional<c10::OperatorHandle> functional = c10::Dispatcher::singleton().findOp(
      c10::OperatorName(name.name.substr(0, name.name.size() - 1), name.overload_name));
  const bool one_list = functional && functional->schema().returns().size() == 1 &&
                        functional->schema().returns()[0].type()->isSubtypeOf(
                            *c10::ListType::ofTensors());
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
      traits.functional_name.rfind("aten::_foreach_", 0) == 0) {
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
      all = all && (!t.defined() || !isLazy(t) || at::functionalization::impl::isFunctionalTensor(t));
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

/// See Note [Functionalizing foreach writes]; `args` passed checkLikeEager.
void functionalizeForeachWrite(const c10::OperatorHandle& functional, const OpTraits& traits,
                               torch::jit::Stack& args) {
  namespace F = at::functionalization::impl;
  const std::vector<at::Tensor> written = args[0].toTensorVector();
  torch::jit::Stack stack;
  for (const c10::IValue& arg : args) stack.push_back(unwrapped(arg));
  {
    PendingWriteGuard guard(pendingWriteOf(traits, args));
    at::AutoDispatchSkipFunctionalize skip;
    functional.callBoxed(&stack);
  }
  const std::vector<at::Tensor> results = stack.at(0).toTensorVector();
  LF_INTERNAL_ASSERT(results.size() == written.size(), functional.operator_name(), " returned ",
                     results.size(), " tensors for ", written.size());
  for (size_t i = 0; i < written.size(); ++i) {
    F::replace_(written[i], results[i]);
    F::commit_update(written[i]);
    F::sync(written[i]);
  }
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
at::Tensor functionalizeInPlaceWrite(const c10::OperatorHandle& functional,
                                     const OpTraits& traits, torch::jit::Stack& args) {
  namespace F = at::functionalization::impl;
  const at::Tensor written = args[0].toTensor();
  torch::jit::Stack stack;
  for (const c10::IValue& arg : args) stack.push_back(unwrapped(arg));
  {
    PendingWriteGuard guard(pendingWriteOf(traits, args));
    at::AutoDispatchSkipFunctionalize skip;
    functional.callBoxed(&stack);
  }
  LF_INTERNAL_ASSERT(stack.size() == 1 && stack[0].isTensor(), functional.operator_name(),
                     " returned no tensor");
  F::replace_(written, stack[0].toTensor());
  F::commit_update(written);
  F::sync(written);
  return written;
}

void writeKernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                 torch::jit::Stack* stack);

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

/// Kernel on Functionalize of an in-place or out= op that has one of PyTorch's: see Note
/// [In-place result casts].
void writeKernel(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                 torch::jit::Stack* stack) {
  const c10::SafeKernelFunction& functionalize = kernelsBelow().at(&op.schema());
  const OpTraits& traits = traitsOf(op);
  const size_t num_args = traits.written.size();
  torch::jit::Stack args(stack->end() - num_args, stack->end());
  if (!writesLazy(traits, args)) return functionalize.callBoxed(op, keys, stack);
  const bool mixes_devices = mixesDevices(args);
  const WriteAliasing aliasing = writeAliasingOf(op, traits, args);
  const HashValue key = mixes_devices ? 0 : writeKey(traits, args);
  const at::Tensor on_memory = writtenOnMemory(traits, args);
  if (!mixes_devices) {
    // See Note [Overlapping writes].
    checkOverlapsLikeEager(op, traits, args, aliasing, key);
    // Note [Writes into expanded tensors]: what does not run on memory cannot write into a
    // tensor whose elements share memory.
    TORCH_CHECK(!aliasing.overlaps_itself || on_memory.defined(), traits.name,
                ": the lazy device does not support writing into a tensor whose elements share "
                "memory (a view made by expand, or with a zero stride); eager PyTorch deprecates "
                "it. Write into the tensor it was expanded from, or into a clone.");
    checkLikeEager(op, traits, args, key);
  }
  if (on_memory.defined()) {
    // Note [Writes into views that overlap themselves]
    return writeOnMemory(op, traits, on_memory, stack);
  }
  if (traits.functional_name.empty()) return functionalize.callBoxed(op, keys, stack);
  const FunctionalWrite* write = functionalWrite(op);
  if (write && !mixes_devices && allFunctional(args)) {
    stack->erase(stack->end() - num_args, stack->end());
    if (!write->foreach) {
      stack->push_back(functionalizeInPlaceWrite(write->functional, traits, args));
    } else if (aliasing.across_elements && args[0].toTensorList().size() > 1) {
      writeElementByElement(op, keys, args);
    } else {
      functionalizeForeachWrite(write->functional, traits, args);
    }
    return;
  }
  PendingWriteGuard guard(pendingWriteOf(traits, args));
  std::move(args.begin(), args.end(), stack->end() - num_args);
  functionalize.callBoxed(op, keys, stack);
}

}  // namespace

std::optional<PendingWrite> takePendingWrite(const OpTraits& traits) {
  PendingWrite& pending = pendingWrite();
  if (pending.functional_name == nullptr || *pending.functional_name != traits.counter_name) {
    return std::nullopt;
  }
  PendingWrite taken = pending;
  pending.functional_name = nullptr;
  return taken;
}

void checkWrittenCasts(const PendingWrite& write, const AtenCallAttrs& attrs) {
  const size_t n = write.written.size();
  if (attrs.outputs.size() < n) return;
  const size_t first = attrs.outputs.size() - n;
  for (size_t k = 0; k < n; ++k) {
    if (!write.written[k].defined()) continue;
    c10::ScalarType result = attrs.outputs[first + k].dtype;
    c10::ScalarType written = write.written[k].scalar_type();
    LF_CHECK(c10::canCast(result, written), "result type ", result,
             " can't be cast to the desired output type ", written);
  }
}

void keepWrittenGeometry(const PendingWrite& write, const torch::jit::Stack& stack,
                         size_t num_results) {
  std::vector<at::Tensor> results;
  for (size_t r = stack.size() - num_results; r < stack.size(); ++r) {
    if (stack[r].isTensor()) results.push_back(stack[r].toTensor());
    if (!stack[r].isTensorList()) continue;
    for (const at::Tensor& t : stack[r].toTensorList()) results.push_back(t);
  }
  const size_t n = write.written.size();
  if (n > results.size()) return;
  const size_t first = results.size() - n;
  for (size_t k = 0; k < n; ++k) reportGeometryOf(write.written[k], results[first + k]);
}

bool registerWriteKernel(const c10::OperatorHandle& op, torch::Library& functionalize_lib) {
  const OpTraits& traits = traitsOf(op);
  if (!writesAnArgument(traits)) return false;
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::Functionalize)) return false;
  kernelsBelow().emplace(&op.schema(),
                         op.getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize));
  if (std::optional<c10::OperatorHandle> functional = findForeachFunctional(op)) {
    functionalWrites().emplace(&op.schema(), FunctionalWrite{*functional, true});
  } else if (std::optional<c10::OperatorHandle> functional = findInPlaceFunctional(op, traits);
             functional && !hasLazyFunctionalizeKernel(op)) {
    functionalWrites().emplace(&op.schema(), FunctionalWrite{*functional, false});
  }
  implLazyOnFunctionalize(functionalize_lib, op,
                          c10::KernelFunction::makeFromBoxedFunction<&writeKernel>());
  return true;
}

}  // namespace lazyfuse
