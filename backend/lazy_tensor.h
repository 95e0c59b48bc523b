#pragma once

// Note [Lazy data]
// A LazyTensorImpl sits on the Lazy dispatch key, below PyTorch's functionalization: users hold
// FunctionalTensorWrappers around it, so our kernels only see functional ops, *_copy views and
// *_scatter. Its value lives in a LazyData: either a pending IR value or a buffer on the hardware
// device. LazyData is shared by shallow copies (detach, .data) and changes in place when an op
// below functionalization writes the tensor or when a sync materializes it. Every LazyData is
// listed in a registry so mark_step can sync every live tensor.
//
// Note [Failed syncs]
// Eager raises at the op that fails; a lazy value whose kernel fails (an index out of range, found
// only when the graph runs) raises at sync instead. The sync that ran the graph raises that error
// once and marks the data it could not compute broken: broken data is no longer pending, so later
// mark_steps do not run the failed graph again, and any later use of it raises an error naming
// the first one. Pinned by test_errors.py::test_failed_sync_does_not_break_later_mark_steps.

#include "lazy_ir/node.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <string>
#include <vector>

namespace lazyfuse {

struct OpTraits;

class LazyData final : public c10::intrusive_ptr_target {
 public:
  LazyData();  // use pending() or materialized(): they register the data
  ~LazyData() override;
  static c10::intrusive_ptr<LazyData> pending(Value value);
  static c10::intrusive_ptr<LazyData> materialized(at::Tensor buffer);

  /// A number no other LazyData of this process has had (torch._lazy.get_tensor_id).
  int64_t id() const { return id_; }
  /// Changes whenever this data is given another value (or its value another form): a view of
  /// it is the same value while id and version are (Note [Replaying lazy views]).
  uint64_t version() const { return version_; }
  bool isPending() const { return value_.node && !buffer_.defined(); }
  bool isBroken() const { return !error_.empty(); }
  /// Raises when this data is broken. See Note [Failed syncs].
  void checkNotBroken() const;
  const Value& pendingValue() const { return value_; }
  const at::Tensor& buffer() const { return buffer_; }
  /// This data as an op input: its pending value, or a device-data node made once per buffer.
  Value asInput();
  /// Takes the buffer of a pending value an earlier sync computed and kept (Note [Values a sync
  /// keeps for later]); false if it was not.
  bool takeComputed();
  void setPending(Value value);
  void setBuffer(at::Tensor buffer);
  /// Drops the pending value whose graph failed with `error`. See Note [Failed syncs].
  void setBroken(std::string error);

  void release_resources() override;

 private:
  const int64_t id_;
  uint64_t version_ = 0;
  Value value_;
  at::Tensor buffer_;
  std::string error_;  // why this data has no value; empty unless broken
};

/// Every live LazyData that is pending, oldest first.
std::vector<c10::intrusive_ptr<LazyData>> livePendingData();

class LazyTensorImpl final : public c10::TensorImpl {
 public:
  LazyTensorImpl(c10::intrusive_ptr<LazyData> data, const TensorMeta& meta);

  LazyData& data() const { return *data_; }
  const c10::intrusive_ptr<LazyData>& dataPtr() const { return data_; }
  /// The metadata of this tensor's value in the trace (its strides are not always the ones it
  /// reports). See Note [View geometry].
  TensorMeta meta() const;
  /// The strides of this tensor's value in the trace.
  c10::IntArrayRef traceStrides() const;
  /// New sizes and strides after an op resized this tensor (out= arguments); it reports them too.
  void setMeta(const TensorMeta& meta);
  /// Reports `strides` and `storage_offset` (a view's, in eager) instead of the trace's strides.
  /// See Note [View geometry].
  void reportViewGeometry(c10::IntArrayRef strides, int64_t storage_offset);
  /// Makes this tensor, made in InferenceMode, a normal one (autograd keys, a version counter).
  /// See Note [Values made in InferenceMode].
  void leaveInference();
  /// Whether this tensor reports other strides or storage offset than its value has in the trace.
  bool reportsOtherGeometry() const { return !trace_strides_.empty(); }

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion& version_counter,
      bool allow_tensor_metadata_change) const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const override;
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override;
  /// Drops the data when the last strong reference goes: a weak reference to a lazy tensor
  /// (Note [Replaying lazy views]) must not keep its value alive, which would make it an output
  /// of the next graph.
  void release_resources() override;

 private:
  const char* tensorimpl_type_name() const override { return "LazyTensorImpl"; }

  c10::intrusive_ptr<LazyData> data_;
  std::vector<int64_t> trace_strides_;  // empty: the same as the reported strides
};

/// The LazyTensorImpl under `tensor`, unwrapping (and syncing) a functional wrapper; nullptr when
/// `tensor` is not a lazy tensor.
LazyTensorImpl* lazyImpl(const at::Tensor& tensor);
/// lazyImpl(tensor), or an error "<expected>, got a <device> tensor" when it is not lazy (for
/// the API functions that take only lazy tensors).
LazyTensorImpl& lazyImplOrRaise(const at::Tensor& tensor, const char* expected);

/// Makes the `num_results` lazy tensors at the end of `stack`, returned by the *_copy op that
/// stands for `view_op` called with `args`, report the strides and storage offset eager gives that
/// view. `key` identifies the call's ops, constants and input metadata in the trace.
/// See Note [View geometry].
void reportViewResults(const c10::OperatorHandle& view_op, HashValue key,
                       const torch::jit::Stack& args, torch::jit::Stack& stack, size_t num_results);

/// Makes the `num_results` lazy tensors at the end of `stack`, returned by `op` (not a view op, and
/// writing no argument, whose traits are `traits`) called with `args`, report the strides eager
/// gives them, when an input reports another geometry than it has in the trace or `op` is a
/// convolution. `key` identifies the call in the trace. See Note [View geometry].
void reportResultGeometry(const c10::OperatorHandle& op, const OpTraits& traits, HashValue key,
                          const torch::jit::Stack& args, torch::jit::Stack& stack,
                          size_t num_results);

/// A Meta tensor with `impl`'s dtype, sizes, reported strides and storage offset.
at::Tensor metaWithGeometry(const LazyTensorImpl& impl);

/// Makes the raw lazy tensor `result` report the strides and storage offset `like` reports, when
/// their sizes agree: the result of an in-place op keeps the geometry of the tensor it writes, a
/// *_scatter the geometry of the base it writes into. See Note [View geometry].
void reportGeometryOf(const at::Tensor& like, const at::Tensor& result);

/// The storage offset `t` reports: a FunctionalTensorWrapper's storage_offset() returns a field
/// set when it was made (PyTorch overrides only its sym_storage_offset), which a view made by
/// as_strided on another view does not keep; sym_storage_offset() asks the tensor it wraps.
inline int64_t storageOffsetOf(const at::Tensor& t) { return t.sym_storage_offset().expect_int(); }

/// A raw (unwrapped) lazy tensor holding a pending value.
at::Tensor makeLazyTensor(Value value);
/// A raw lazy tensor holding `buffer`, which lives on the hardware device.
at::Tensor makeMaterializedTensor(at::Tensor buffer);
/// Wraps `tensor` into a FunctionalTensorWrapper unless functionalization is excluded in this
/// thread, the way a factory on a functionalized device must. See Note [Lazy data].
at::Tensor wrapIfFactory(at::Tensor tensor);

/// Calls `fn` on each tensor in `v`: a tensor, a tensor list or a list of optional tensors.
template <typename Fn>
void forEachTensor(const c10::IValue& v, Fn fn) {
  if (v.isTensor()) fn(v.toTensor());
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) fn(t);
    return;  // a Tensor[] is a list too: each tensor once
  }
  if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) fn(e.toTensor());
    }
  }
}

/// The tensors of the last `num_results` entries of `stack`, in order, tensor lists flattened.
inline std::vector<at::Tensor> resultTensors(const torch::jit::Stack& stack, size_t num_results) {
  std::vector<at::Tensor> results;
  for (size_t r = stack.size() - num_results; r < stack.size(); ++r) {
    if (stack[r].isTensor()) results.push_back(stack[r].toTensor());
    if (!stack[r].isTensorList()) continue;
    for (const at::Tensor& t : stack[r].toTensorList()) results.push_back(t);
  }
  return results;
}

}  // namespace lazyfuse
