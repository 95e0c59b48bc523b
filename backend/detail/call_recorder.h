#pragma once

// The walk over one recorded call's arguments (backend/call_recorder.cpp) that recordOp
// (backend/recorder.cpp) builds its node from. See Note [Meta cache].

#include "backend/op_traits.h"
#include "lazy_ir/hash.h"
#include "lazy_ir/node.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>

#include <memory>
#include <utility>
#include <vector>

namespace lazyfuse::detail {

/// The meta-cache key's part for a 0-dim CPU tensor parameter: its dtype and whether it was a
/// Python number (its value is a parameter).
HashValue hashCpuScalarParam(HashValue h, const at::Tensor& scalar);
/// The meta-cache key's part for a parameter (Scalar, Scalar[], generator): its kind, and a
/// Scalar[]'s length and entry kinds, not its value.
HashValue hashParamKind(HashValue h, const c10::IValue& param);

/// Walks the arguments of one call: computes the meta-cache key and collects the node's inputs
/// and parameters. On a cache miss it also builds the recipe and the Meta stack.
class CallRecorder {
 public:
  CallRecorder(const c10::OperatorHandle& op, const OpTraits& traits, torch::jit::Stack& args)
      : op_(op), traits_(traits), args_(args) {}

  /// Whether the call has a lazy tensor (after scan()).
  bool anyLazy() const { return any_lazy_; }
  /// The meta-cache key of the call; uploads the CPU tensors a lazy call may take.
  HashValue scan();
  /// The meta-cache key without the values of the call's position arguments (after scan()):
  /// Note [Positions as plan arguments].
  HashValue positionBlindKey() const { return blind_key_; }
  /// The call's node attributes, inferred on Meta; `key` is scan()'s.
  std::shared_ptr<const AtenCallAttrs> inferOnMeta(HashValue key);
  std::vector<Value> takeInputs() { return std::move(inputs_); }
  std::vector<c10::IValue> takeParams() { return std::move(params_); }
  /// The call's argument slots (after scan()), as inferOnMeta records them.
  std::vector<ArgSlot> slots() const;

 private:
  static void collectTensors(const c10::IValue& value, std::vector<at::Tensor>& out);
  void addInput(const at::Tensor& tensor, size_t arg);
  void scanTensor(const at::Tensor& t, size_t i);
  void scanArg(size_t i);
  /// A Tensor[] argument. Eager's foreach kernels accept 0-dim CPU tensors in a list next to
  /// device tensors (optimizers pass a tensor lr that way); they are moved to lazy.
  void scanTensorList(size_t i);
  bool isOptionalTensorList(size_t i) const;
  void scanOptionalList(size_t i);
  ArgSlot slotFor(size_t i) const;
  c10::IValue metaArg(size_t i, const ArgSlot& slot) const;
  void addReturn(AtenCallAttrs& attrs, size_t r, const c10::IValue& value) const;

  const c10::OperatorHandle& op_;
  const OpTraits& traits_;
  torch::jit::Stack& args_;
  HashValue key_ = 0;
  HashValue blind_key_ = 0;
  std::vector<int64_t> positions_;  // the values of the position arguments scanned
  bool any_lazy_ = false;
  std::vector<Value> inputs_;
  std::vector<c10::IValue> params_;
};

}  // namespace lazyfuse::detail
