#include "backend/write_checks.h"

#include "backend/detail/stand_ins.h"
#include "backend/detail/write_kernel.h"
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
//     depend on sizes (OpTraits::probes_stand_ins) on one-element stand-ins, for the dtype checks
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
    if (!raiseEagerErrorOnStandIns(op, args, /*one_per_dim=*/false)) std::rethrow_exception(error);
  } else if (traits.probes_stand_ins) {
    raiseEagerErrorOnStandIns(op, args, /*one_per_dim=*/true);
  }
  checkedCalls().notePassed(key);
}

}  // namespace

namespace detail {

PendingWrite& pendingWrite() {
  thread_local PendingWrite pending;
  return pending;
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
  // See Note [Functionalizing foreach writes] and Note [Functionalizing in-place writes].
  if (!mixes_devices &&
      functionalizeWrite(op, keys, traits, args, aliasing.across_elements, stack)) {
    return;
  }
  PendingWriteGuard guard(pendingWriteOf(traits, args));
  std::move(args.begin(), args.end(), stack->end() - num_args);
  functionalize.callBoxed(op, keys, stack);
}

}  // namespace detail

std::optional<PendingWrite> takePendingWrite(const OpTraits& traits) {
  PendingWrite& pending = detail::pendingWrite();
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
  const std::vector<at::Tensor> results = resultTensors(stack, num_results);
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
  detail::noteFunctionalWrite(op, traits);
  implLazyOnFunctionalize(functionalize_lib, op,
                          c10::KernelFunction::makeFromBoxedFunction<&detail::writeKernel>());
  return true;
}

}  // namespace lazyfuse
