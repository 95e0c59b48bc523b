#include "backend/packed_scalars.h"

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_foreach_addcdiv_ops.h>
#include <ATen/ops/_foreach_addcmul_ops.h>
#include <c10/util/Exception.h>

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
                                       at::TensorList tensor2, const at::Tensor& scalars) {
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

}  // namespace

void registerPackedScalarKernels(torch::Library& lazy_lib, torch::Library& functionalize_lib) {
  lazy_lib.impl("_foreach_addcdiv.Tensor", TORCH_FN(addcdiv));
  lazy_lib.impl("_foreach_addcmul.Tensor", TORCH_FN(addcmul));
  functionalize_lib.impl("_foreach_addcdiv_.Tensor", TORCH_FN(addcdivInPlace));
  functionalize_lib.impl("_foreach_addcmul_.Tensor", TORCH_FN(addcmulInPlace));
}

}  // namespace lazyfuse
