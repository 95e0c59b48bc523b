#pragma once

// What the checks that run a call on stand-ins for its lazy tensors share: the stand-in
// arguments, the calls that passed, and a handler that drops the stand-in run's warnings.
// See Note [In-place result casts] and Note [Overlapping writes].

#include "backend/device.h"
#include "backend/op_traits.h"
#include "lazy_ir/hash.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <optional>

#include <mutex>
#include <unordered_set>

namespace lazyfuse {

/// Argument `v` with `stand_in(t)` for each tensor t (in a tensor, a tensor list or a list of
/// optional tensors) and `device` for a device.
template <typename Fn>
c10::IValue standInArg(const c10::IValue& v, c10::Device device, Fn stand_in) {
  if (v.isTensor()) return stand_in(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorList()) list.push_back(stand_in(t));
    return list;
  }
  if (v.isList() && !v.toListRef().empty() && v.toListRef()[0].isTensor()) {
    c10::List<std::optional<at::Tensor>> list;
    for (const c10::IValue& e : v.toListRef()) {
      list.push_back(e.isTensor() ? std::optional<at::Tensor>(stand_in(e.toTensor()))
                                  : std::nullopt);
    }
    return list;
  }
  if (v.isDevice()) return c10::IValue(device);
  return v;
}

/// A Meta tensor like lazy tensor `t`; any other tensor (a CPU scalar) as it is.
inline at::Tensor metaStandIn(const at::Tensor& t) {
  if (!isLazy(t)) return t;
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

/// Gives a random op's CPU stand-in call a generator of its own in each Generator? slot, so that it
/// does not advance the generator eager code draws from. False when a random op has no such slot.
inline bool givePrivateGenerators(const c10::OperatorHandle& op, const OpTraits& traits,
                                  torch::jit::Stack& cpu) {
  if (!op.hasTag(at::Tag::nondeterministic_seeded)) return true;
  bool given = false;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!traits.generator_arg[i]) continue;
    cpu[i] = at::detail::createCPUGenerator(/*seed_val=*/0);
    given = true;
  }
  return given;
}

/// Keys of calls that passed a check, so that it runs once per key; safe across threads.
class CheckedCalls {
 public:
  bool passed(HashValue key) {
    std::lock_guard<std::mutex> lock(mutex_);
    return passed_.count(key) > 0;
  }
  void notePassed(HashValue key) {
    std::lock_guard<std::mutex> lock(mutex_);
    passed_.insert(key);
  }

 private:
  std::mutex mutex_;
  std::unordered_set<HashValue> passed_;
};

/// Drops the warnings of a check run on stand-ins (an out= of another size warns that it is
/// resized; the op itself then warns as eager does, or not, on its own).
class DropWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

}  // namespace lazyfuse
