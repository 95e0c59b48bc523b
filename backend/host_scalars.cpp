#include "backend/host_scalars.h"

#include "backend/device.h"
#include "backend/functionalize_kernels.h"
#include "backend/recorder.h"

#include <ATen/Dispatch.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_foreach_addcdiv_ops.h>
#include <ATen/ops/_foreach_addcmul_ops.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/util/Exception.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lazyfuse {
namespace {

// Note [Packed scalars]
// _foreach_addcdiv/_foreach_addcmul take their per-tensor scalars either as a Scalar[] or packed
// in a 1-D CPU tensor (the .Tensor overloads). Eager's kernels of the latter read the tensor on
// the host and call the Scalar[] overload. On lazy tensors neither overload's generic path works:
// PyTorch's generated functionalization runs an in-place op on Meta copies of every tensor first,
// the scalars too, which then fail eager's own "Expected scalars to be on CPU" check, and the
// recorder would take the CPU tensor for a misplaced input. So these kernels do what eager's do:
// check the scalars as eager checks them, read them (they are on the CPU: no sync), and call the
// Scalar[] overload, whose scalars are node parameters (a new value compiles nothing). The
// out-of-place kernels sit on Lazy; the in-place ones on Functionalize, for lazy tensors only:
// other callers of that key (make_fx over CPU tensors) keep PyTorch's kernel, which never bakes
// a tensor's values into a trace. Pinned by test_foreach_fusion.py::test_foreach_packed_scalars_*.

/// The scalars packed in `scalars`, one per tensor of `self`, checked as eager checks them,
/// before the lists: lists eager refuses (empty, or of different lengths) then get as many
/// placeholder scalars as `self` has tensors, so that the Scalar[] overload raises eager's error.
std::vector<c10::Scalar> unpackScalars(at::TensorList self, at::TensorList tensor1,
                                       at::TensorList tensor2, const at::Tensor& scalars) {
  TORCH_CHECK(scalars.device().is_cpu(), "Expected scalars to be on CPU, got ", scalars.device(),
              " instead.");
  TORCH_CHECK(scalars.is_contiguous(), "Expected scalars to be contiguous.");
  TORCH_CHECK(scalars.dim() == 1, "Expected packed scalar Tensor to be of dimension 1. Got ",
              scalars.dim(), " instead.");
  TORCH_CHECK(scalars.size(0) == static_cast<int64_t>(self.size()),
              "Expected length of scalars to match input of length ", self.size(), " but got ",
              scalars.size(0), " instead.");
  if (self.empty() || tensor1.size() != self.size() || tensor2.size() != self.size()) {
    return std::vector<c10::Scalar>(self.size(), c10::Scalar(1));
  }
  std::vector<c10::Scalar> unpacked;
  unpacked.reserve(self.size());
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND4(at::kComplexHalf, at::kHalf, at::kBool, at::kBFloat16,
                                         scalars.scalar_type(), "unpackScalars", [&] {
                                           const scalar_t* data =
                                               scalars.const_data_ptr<scalar_t>();
                                           for (size_t i = 0; i < self.size(); ++i)
                                             unpacked.emplace_back(data[i]);
                                         });
  return unpacked;
}

std::vector<at::Tensor> addcdiv(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2,
                                const at::Tensor& scalars) {
  return at::_ops::_foreach_addcdiv_ScalarList::call(
      self, tensor1, tensor2, unpackScalars(self, tensor1, tensor2, scalars));
}

std::vector<at::Tensor> addcmul(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2,
                                const at::Tensor& scalars) {
  return at::_ops::_foreach_addcmul_ScalarList::call(
      self, tensor1, tensor2, unpackScalars(self, tensor1, tensor2, scalars));
}

void functionalizePackedScalars(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                torch::jit::Stack* stack) {
  const size_t n = stack->size();
  const std::vector<at::Tensor> self = (*stack)[n - 4].toTensorVector();
  if (!self.empty() && !isLazy(self[0])) {
    return pytorchFunctionalizeKernel(op).callBoxed(op, keys, stack);
  }
  const std::vector<at::Tensor> tensor1 = (*stack)[n - 3].toTensorVector();
  const std::vector<at::Tensor> tensor2 = (*stack)[n - 2].toTensorVector();
  const std::vector<c10::Scalar> scalars =
      unpackScalars(self, tensor1, tensor2, (*stack)[n - 1].toTensor());
  if (op.schema().name() == "aten::_foreach_addcdiv_") {
    at::_ops::_foreach_addcdiv__ScalarList::call(self, tensor1, tensor2, scalars);
  } else {
    at::_ops::_foreach_addcmul__ScalarList::call(self, tensor1, tensor2, scalars);
  }
  torch::jit::drop(*stack, 4);
}

// Note [Complex fill values]
// Eager's masked_fill converts its value to self's dtype as it fills, so a complex value with no
// imaginary part fills a real tensor (1+0j fills 1) and any other raises "value cannot be
// converted to type int64_t without overflow". PyTorch's meta kernel (torch._refs.masked_fill)
// refuses every complex value for a real self, by dtype, with another message, and
// functionalization runs it before an in-place op. So for a real self (lazy, for the in-place
// op), a bool mask and broadcastable shapes (eager checks those first), and a complex value,
// these kernels convert the value as eager does (its error, if any) and pass its real part on. The
// value is read on the host: a Scalar, a CPU tensor or, as eager's CUDA kernel does with a device
// value tensor (item()), a lazy one, which costs a sync in this rare case only. Pinned by
// test_ops.py::test_masked_fill_complex_value_like_eager and the masked_fill OpInfo error inputs.

/// Rewrites masked_fill's `value` (a Scalar, or a 0-dim tensor) for a real `self` into its real
/// part when it is complex; raises eager's error when it does not convert to self's dtype.
void realFillValue(const at::Tensor& self, const at::Tensor& mask, c10::IValue& value) {
  if (!self.defined() || at::isComplexType(self.scalar_type())) return;
  // Eager checks the mask and the shapes first: calls they fail keep their value, and their error.
  if (!mask.defined() || mask.scalar_type() != at::kBool ||
      !at::is_expandable_to(mask.sizes(), self.sizes())) {
    return;
  }
  c10::Scalar scalar;
  if (value.isScalar()) {
    scalar = value.toScalar();
  } else if (value.isTensor() && value.toTensor().defined() && value.toTensor().dim() == 0 &&
             at::isComplexType(value.toTensor().scalar_type())) {
    scalar = value.toTensor().item();
  }
  if (!scalar.isComplex()) return;
  const at::ScalarType dtype = self.scalar_type();
  if (!at::isFloatingType(dtype) && !at::isIntegralType(dtype, /*includeBool=*/true)) return;
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, dtype, "masked_fill", [&] {
    (void)scalar.to<scalar_t>();  // eager's conversion, and its error
  });
  const c10::Scalar real(scalar.toComplexDouble().real());
  value = value.isScalar() ? c10::IValue(real) : c10::IValue(at::scalar_tensor(real, at::kDouble));
}

/// Checks masked_fill's value as eager's kernel does first (a value tensor of another device
/// would otherwise meet the recorder's device check), then realFillValue.
void checkFillValue(torch::jit::Stack& stack) {
  c10::IValue& value = stack[stack.size() - 1];
  if (value.isTensor() && value.toTensor().defined()) {
    TORCH_CHECK(value.toTensor().dim() == 0,
                "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
                value.toTensor().dim(), " dimension(s).");
  }
  realFillValue(stack[stack.size() - 3].toTensor(), stack[stack.size() - 2].toTensor(), value);
}

void recordMaskedFill(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  checkFillValue(*stack);
  recordOp(op, stack);
}

void functionalizeMaskedFill(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                             torch::jit::Stack* stack) {
  if (isLazy((*stack)[stack->size() - 3].toTensor())) checkFillValue(*stack);
  pytorchFunctionalizeKernel(op).callBoxed(op, keys, stack);
}

}  // namespace

void registerHostScalarKernels(torch::Library& lazy_lib, torch::Library& functionalize_lib) {
  auto wrap = [&](const char* name, const char* overload, c10::KernelFunction kernel) {
    auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
    implLazyOnFunctionalize(functionalize_lib, op, std::move(kernel));
  };
  lazy_lib.impl("_foreach_addcdiv.Tensor", TORCH_FN(addcdiv));
  lazy_lib.impl("_foreach_addcmul.Tensor", TORCH_FN(addcmul));
  for (const char* name : {"aten::_foreach_addcdiv_", "aten::_foreach_addcmul_"}) {
    wrap(name, "Tensor", c10::KernelFunction::makeFromBoxedFunction<&functionalizePackedScalars>());
  }
  for (const char* overload : {"Scalar", "Tensor"}) {
    lazy_lib.impl((std::string("masked_fill.") + overload).c_str(),
                  torch::CppFunction::makeFromBoxedFunction<&recordMaskedFill>());
    wrap("aten::masked_fill_", overload,
         c10::KernelFunction::makeFromBoxedFunction<&functionalizeMaskedFill>());
  }
}

}  // namespace lazyfuse
