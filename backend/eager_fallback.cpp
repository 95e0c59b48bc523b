#include "backend/device.h"
#include "backend/graph_executor.h"
#include "backend/lazy_tensor.h"
#include "backend/logging.h"
#include "backend/op_traits.h"
#include "backend/recorder.h"
#include "kernels/plan_runner.h"
#include "lazy_ir/check.h"
#include "lazy_ir/metrics.h"

#include <ATen/core/List.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/ones.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <typeinfo>
#include <unordered_set>

namespace lazyfuse {
namespace {

struct Written {
  LazyTensorImpl* impl;
  at::Tensor buffer;
};

at::Tensor writableCopy(const at::Tensor& buffer) {
  auto copy = at::empty_strided(buffer.sizes(), buffer.strides(), buffer.options());
  copy.copy_(buffer);
  return copy;
}

void collectData(const c10::IValue& v, std::vector<c10::intrusive_ptr<LazyData>>& out) {
  forEachTensor(v, [&](const at::Tensor& t) {
    if (LazyTensorImpl* impl = lazyImpl(t)) out.push_back(impl->dataPtr());
  });
}

/// The hardware tensor standing for `t` in the eager call.
at::Tensor realTensor(const at::Tensor& t, bool written, std::vector<Written>& writes) {
  LazyTensorImpl* impl = lazyImpl(t);
  if (impl == nullptr) return t;
  at::Tensor buffer = impl->data().buffer();
  if (!written) return buffer;
  writes.push_back({impl, writableCopy(buffer)});
  return writes.back().buffer;
}

c10::IValue realArg(const c10::IValue& v, bool written, std::vector<Written>& writes) {
  if (v.isTensor()) return realTensor(v.toTensor(), written, writes);
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorList()) list.push_back(realTensor(t, written, writes));
    return list;
  }
  if (v.isList() && v.toListRef().size() > 0 && v.toListRef()[0].isTensor()) {
    c10::List<std::optional<at::Tensor>> list;
    for (const c10::IValue& e : v.toListRef()) {
      list.push_back(e.isTensor()
                         ? std::optional<at::Tensor>(realTensor(e.toTensor(), written, writes))
                         : std::nullopt);
    }
    return list;
  }
  if (v.isDevice()) return c10::IValue(toHardware(v.toDevice()));
  return v;
}

/// An op with no meta kernel (quantize_per_tensor) would give a quantized lazy tensor, which no
/// later op or sync can read: refused (see refuseQuantized in recorder.cpp).
c10::IValue lazyResult(const c10::IValue& v, bool factory) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || t.is_meta()) return v;
    refuseQuantizedDtype(t.scalar_type(), "an eagerly run call");
    at::Tensor lazy = makeMaterializedTensor(t);
    return factory ? wrapIfFactory(lazy) : lazy;
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorList()) {
      refuseQuantizedDtype(t.scalar_type(), "an eagerly run call");
      list.push_back(makeMaterializedTensor(t));
    }
    return list;
  }
  return v;
}

// Note [Eager's errors]
// A user mistake must raise eager's exception, type and message, at the op. The recorder finds
// most of them with the meta kernel, but a meta kernel can raise another type than the device's
// kernel (RuntimeError for IndexError: a[float_index], empty.amax(0)), and some checks only the
// device's kernel makes (dtypes: a & b on floats, softmax of ints, mm of float and double; max()
// of an empty tensor). So the hardware device's kernel is asked too (the CPU's, or CUDA's: their
// checks differ, abs of bool and int // 0 raise on the CPU only), on stand-ins for the lazy
// tensors (ones of their dtypes, on the hardware device): when the meta kernel raised, with their
// sizes (up to kMaxStandInElements in all; beyond, the meta kernel's error stands), and, on a
// meta-cache miss for ops whose checks do not depend on sizes (pointwise and reduction ops, the
// mm and softmax families: OpTraits::probes_stand_ins), with every size cut to at most 1, which
// costs microseconds once per op and input metadata; its warnings are dropped. Scalar arguments
// are parameters, not part of that key, yet integer ops check their values (int ** -1,
// int // 0), so a call on integer tensors with Scalar arguments is asked about once per distinct
// Scalar values (checkScalarValuesOnStandIns). Checks on tensor values (index ranges) and other
// ops' checks still raise at sync.
// Pinned by test_errors.py::test_dtype_error_at_op and test_empty_reduction_error_at_op.
constexpr int64_t kMaxStandInElements = int64_t{1} << 22;

/// Drops the warnings a run on stand-ins gives (var over one element warns of its correction).
class DropWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

at::Tensor standIn(const at::Tensor& t, bool one_per_dim) {
  if (!isLazy(t)) return t;
  std::vector<int64_t> sizes = t.sizes().vec();
  if (one_per_dim) {
    for (int64_t& size : sizes) size = std::min<int64_t>(size, 1);
  }
  return at::ones(sizes, at::TensorOptions().dtype(t.scalar_type()).device(hardwareDevice()));
}

c10::IValue standInArg(const c10::IValue& v, bool one_per_dim) {
  if (v.isTensor()) return standIn(v.toTensor(), one_per_dim);
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorList()) list.push_back(standIn(t, one_per_dim));
    return list;
  }
  if (v.isList() && v.toListRef().size() > 0 && v.toListRef()[0].isTensor()) {
    c10::List<std::optional<at::Tensor>> list;
    for (const c10::IValue& e : v.toListRef()) {
      list.push_back(e.isTensor() ? std::optional<at::Tensor>(standIn(e.toTensor(), one_per_dim))
                                  : std::nullopt);
    }
    return list;
  }
  if (v.isDevice()) return c10::IValue(toHardware(v.toDevice()));
  return v;
}

int64_t lazyElements(const c10::IValue& v) {
  int64_t n = 0;
  forEachTensor(v, [&](const at::Tensor& t) { n += isLazy(t) ? t.numel() : 0; });
  return n;
}

bool isIntegerCall(const torch::jit::Stack& args) {
  for (const c10::IValue& v : args) {
    if (!v.isTensor() || !isLazy(v.toTensor())) continue;
    if (c10::isIntegralType(v.toTensor().scalar_type(), /*includeBool=*/true)) return true;
  }
  return false;
}

struct ProbedScalars {
  std::mutex mutex;
  std::unordered_set<HashValue> seen;
};

/// `error`, with the context lines of `e` it replaces.
template <typename E>
[[noreturn]] void throwWithContextOf(const c10::Error& e, E error) {
  for (const std::string& context : e.context()) error.add_context(context);
  throw error;
}

/// `e` again, of its type, backtrace and context, with the hardware device's name (cuda:0) in its
/// message replaced by the lazy device's: the stand-ins stood for lazy tensors, and eager's error
/// on them names their device ("Expected scalars to be on CPU, got lazy:0"). On the CPU, where real
/// CPU tensors sit beside the stand-ins, `e` as it is. Call it only from the handler of `e`.
[[noreturn]] void rethrowNamingLazy(const c10::Error& e) {
  const std::string hardware = hardwareDevice().str();
  std::string message = e.msg();
  if (hardwareDevice().is_cpu() || message.find(hardware) == std::string::npos) throw;
  const std::string lazy = lazyDevice().str();
  for (size_t pos = message.find(hardware); pos != std::string::npos;
       pos = message.find(hardware, pos + lazy.size())) {
    message.replace(pos, hardware.size(), lazy);
  }
  // The classes Python maps to their own exception types and that carry nothing but a message.
  if (dynamic_cast<const c10::IndexError*>(&e)) {
    throwWithContextOf(e, c10::IndexError(message, e.backtrace()));
  }
  if (dynamic_cast<const c10::ValueError*>(&e)) {
    throwWithContextOf(e, c10::ValueError(message, e.backtrace()));
  }
  if (dynamic_cast<const c10::TypeError*>(&e)) {
    throwWithContextOf(e, c10::TypeError(message, e.backtrace()));
  }
  if (dynamic_cast<const c10::LinAlgError*>(&e)) {
    throwWithContextOf(e, c10::LinAlgError(message, e.backtrace()));
  }
  if (dynamic_cast<const c10::NotImplementedError*>(&e)) {
    throwWithContextOf(e, c10::NotImplementedError(message, e.backtrace()));
  }
  if (typeid(e) != typeid(c10::Error)) throw;  // a class with more than a message: as it is
  throwWithContextOf(e, c10::Error(message, e.backtrace()));
}

ProbedScalars& probedScalars() {
  static ProbedScalars* instance = new ProbedScalars();
  return *instance;
}

}  // namespace

void checkScalarValuesOnStandIns(const c10::OperatorHandle& op, const OpTraits& traits,
                                 HashValue key, const torch::jit::Stack& args) {
  if (!traits.probes_stand_ins || !isIntegerCall(args)) return;
  bool any_scalar = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = args[i];
    if (v.isTensor() && v.toTensor().defined() && !isLazy(v.toTensor())) {
      key = hashIValue(key, c10::IValue(v.toTensor().item()));  // a 0-dim CPU tensor
      any_scalar = true;
    } else if (traits.scalar_arg[i]) {
      key = hashIValue(key, v);
      any_scalar = true;
    }
  }
  if (!any_scalar) return;
  ProbedScalars& probed = probedScalars();
  {
    std::lock_guard<std::mutex> lock(probed.mutex);
    if (probed.seen.count(key) > 0) return;
  }
  raiseEagerErrorOnStandIns(op, args, /*one_per_dim=*/true);
  std::lock_guard<std::mutex> lock(probed.mutex);
  probed.seen.insert(key);
}

bool raiseEagerErrorOnStandIns(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                               bool one_per_dim) {
  if (op.hasTag(at::Tag::nondeterministic_seeded)) return false;  // it would draw random numbers
  int64_t elements = 0;
  for (const c10::IValue& v : args) elements += lazyElements(v);
  if (!one_per_dim && elements > kMaxStandInElements) return false;
  torch::jit::Stack stand_ins;
  for (const c10::IValue& v : args) stand_ins.push_back(standInArg(v, one_per_dim));
  if (refusesCpuScalars(op)) moveCpuScalars(stand_ins);  // as the call will run
  DropWarnings drop;
  c10::WarningUtils::WarningHandlerGuard quiet(&drop);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  try {
    op.callBoxed(stand_ins);
  } catch (const c10::Error& e) {
    rethrowNamingLazy(e);
  }
  return true;
}

void eagerFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpTraits& traits = traitsOf(op);
  counterNamed(traits.counter_name).add();
  metrics::eager_fallbacks.add();
  LF_LOG_DEBUG("running ", traits.name, " eagerly on ", hardwareDevice().str());
  const size_t num_args = op.schema().arguments().size();
  auto args = torch::jit::last(*stack, num_args).vec();
  std::vector<c10::intrusive_ptr<LazyData>> data;
  for (const c10::IValue& v : args) collectData(v, data);
  syncData(data);

  std::vector<Written> writes;
  torch::jit::Stack real;
  for (size_t i = 0; i < args.size(); ++i)
    real.push_back(realArg(args[i], traits.written[i], writes));
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    op.callBoxed(real);
  }
  for (Written& w : writes) {
    TensorMeta meta = TensorMeta::of(w.buffer);
    if (!(w.impl->meta() == meta)) w.impl->setMeta(meta);
    w.impl->data().setBuffer(std::move(w.buffer));
  }
  torch::jit::drop(*stack, num_args);
  const bool factory = data.empty();
  for (size_t r = 0; r < real.size(); ++r) {
    const int aliased = r < traits.returns_arg.size() ? traits.returns_arg[r] : -1;
    stack->push_back(aliased >= 0 ? args[aliased] : lazyResult(real[r], factory));
  }
}

}  // namespace lazyfuse
