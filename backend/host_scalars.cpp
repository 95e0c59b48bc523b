#include "backend/host_scalars.h"

#include "backend/recorder.h"

#include <ATen/Dispatch.h>
#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_foreach_addcdiv_ops.h>
#include <ATen/ops/_foreach_addcmul_ops.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/util/Exception.h>

#include <string>
#include <unordered_map>
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
// in-place kernels sit on Functionalize and serve every caller of that key, lazy or not; the
// out-of-place ones on Lazy. Pinned by test_ops.py::test_foreach_packed_scalars_like_eager.

/// The scalars packed in `scalars`, one per tensor of `self`, checked as eager checks them. Lists
/// eager refuses before reading the scalars (empty, or of different lengths) get as many
/// placeholder scalars as `self` has tensors, so that the Scalar[] overload raises eager's error.
std::vector<c10::Scalar> unpackScalars(at::TensorList self, at::TensorList tensor1,
                                       at::TensorList tensor2, at::Tensor scalars) {
  if (at::functionalization::impl::isFunctionalTensor(scalars)) {  // torch.func.functionalize's
    at::functionalization::impl::sync(scalars);
    scalars = at::functionalization::impl::from_functional_tensor(scalars);
  }
  if (self.empty() || tensor1.size() != self.size() || tensor2.size() != self.size()) {
    return std::vector<c10::Scalar>(self.size(), c10::Scalar(1));
  }
  TORCH_CHECK(scalars.device().is_cpu(), "Expected scalars to be on CPU, got ", scalars.device(),
              " instead.");
  TORCH_CHECK(scalars.is_contiguous(), "Expected scalars to be contiguous.");
  TORCH_CHECK(scalars.dim() == 1, "Expected packed scalar Tensor to be of dimension 1. Got ",
              scalars.dim(), " instead.");
  TORCH_CHECK(scalars.size(0) == static_cast<int64_t>(self.size()),
              "Expected length of scalars to match input of length ", self.size(), " but got ",
              scalars.size(0), " instead.");
  std::vector<c10::Scalar> unpacked;
  unpacked.reserve(self.size());
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND4(
      at::kComplexHalf, at::kHalf, at::kBool, at::kBFloat16, scalars.scalar_type(),
      "unpackScalars", [&] {
        const scalar_t* data = scalars.const_data_ptr<scalar_t>();
        for (size_t i = 0; i < self.size(); ++i) unpacked.emplace_back(data[i]);
      });
  return unpacked;
}

std::vector<at::Tensor> addcdiv(at::TensorList self, at::TensorList tensor1,
                                at::TensorList tensor2, const at::Tensor& scalars) {
  return at::_ops::_foreach_addcdiv_ScalarList::call(
      self, tensor1, tensor2, unpackScalars(self, tensor1, tensor2, scalars));
}

std::vector<at::Tensor> addcmul(at::TensorList self, at::TensorList tensor1,
                                at::TensorList tensor2, const at::Tensor& scalars) {
  return at::_ops::_foreach_addcmul_ScalarList::call(
      self, tensor1, tensor2, unpackScalars(self, tensor1, tensor2, scalars));
}

void addcdivInPlace(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2,
                    const at::Tensor& scalars) {
  at::_ops::_foreach_addcdiv__ScalarList::call(self, tensor1, tensor2,
                                               unpackScalars(self, tensor1, tensor2, scalars));
}

void addcmulInPlace(at::TensorList self, at::TensorList tensor1, at::TensorList tensor2,
                    const at::Tensor& scalars) {
  at::_ops::_foreach_addcmul__ScalarList::call(self, tensor1, tensor2,
                                               unpackScalars(self, tensor1, tensor2, scalars));
}

// Note [Complex fill values]
// Eager's masked_fill converts its value to self's dtype as it fills, so a complex value with no
// imaginary part fills a real tensor (1+0j fills 1) and any other raises "value cannot be
// converted to type int64_t without overflow". PyTorch's meta kernel (torch._refs.masked_fill)
// refuses every complex value for a real self, by dtype, with another message, and
// functionalization runs it before an in-place op. So for a real self and a complex value these
// kernels convert the value as eager does (its error, if any) and pass its real part on. The
// value is read on the host: a Scalar, a CPU tensor or, as eager's CUDA kernel does with a device
// value tensor (item()), a lazy one, which costs a sync in this rare case only. Pinned by
// test_ops.py::test_masked_fill_complex_value_like_eager and the masked_fill OpInfo error inputs.

/// Rewrites masked_fill's `value` (a Scalar, or a 0-dim tensor) for a real `self` into its real
/// part when it is complex; raises eager's error when it does not convert to self's dtype.
void realFillValue(const at::Tensor& self, c10::IValue& value) {
  if (!self.defined() || at::isComplexType(self.scalar_type())) return;
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

void realFillValue(torch::jit::Stack& stack) {
  realFillValue(stack[stack.size() - 3].toTensor(), stack[stack.size() - 1]);
}

void recordMaskedFill(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  realFillValue(*stack);
  recordOp(op, stack);
}

/// The Functionalize kernels of masked_fill_ registered before ours, by schema.
std::unordered_map<const c10::FunctionSchema*, c10::SafeKernelFunction>& functionalizeKernels() {
  static auto* instance =
      new std::unordered_map<const c10::FunctionSchema*, c10::SafeKernelFunction>();
  return *instance;
}

void functionalizeMaskedFill(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                             torch::jit::Stack* stack) {
  realFillValue(*stack);
  functionalizeKernels().at(&op.schema()).callBoxed(op, keys, stack);
}

}  // namespace

void registerHostScalarKernels(torch::Library& lazy_lib, torch::Library& functionalize_lib) {
  lazy_lib.impl("_foreach_addcdiv.Tensor", TORCH_FN(addcdiv));
  lazy_lib.impl("_foreach_addcmul.Tensor", TORCH_FN(addcmul));
  functionalize_lib.impl("_foreach_addcdiv_.Tensor", TORCH_FN(addcdivInPlace));
  functionalize_lib.impl("_foreach_addcmul_.Tensor", TORCH_FN(addcmulInPlace));
  for (const char* overload : {"Scalar", "Tensor"}) {
    lazy_lib.impl((std::string("masked_fill.") + overload).c_str(),
                  torch::CppFunction::makeFromBoxedFunction<&recordMaskedFill>());
    auto in_place = c10::Dispatcher::singleton().findSchemaOrThrow("aten::masked_fill_", overload);
    functionalizeKernels().emplace(
        &in_place.schema(),
        in_place.getComputedKernelForDispatchKey(c10::DispatchKey::Functionalize));
    functionalize_lib.impl((std::string("masked_fill_.") + overload).c_str(),
                           torch::CppFunction::makeFromBoxedFunction<&functionalizeMaskedFill>());
  }
}

}  // namespace lazyfuse
