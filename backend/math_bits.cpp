#include "backend/math_bits.h"

#include <c10/util/Exception.h>

#include <string_view>

namespace lazyfuse {

// Note [Conjugate and negative bits of lazy views]
// In eager, x.conj() of a complex tensor is a view with the conjugate bit set, x.conj().imag one
// with the negative bit set, and views of them keep the bits; an op that reads such a tensor
// gets its values resolved first by PyTorch's fallback on the Conjugate or Negative key, which
// sits above Functionalize. PyTorch's functionalization drops the bits: the value it keeps for a
// view is the view's *_copy op (_conj_copy, _neg_view_copy), which resolves, and the wrapper's
// keys are that value's. So a lazy view held eager's values but reported is_conj() and is_neg()
// False, and view_as_real() of it worked where eager refuses.
//
// lazyfuse puts eager's bits on the wrappers of lazy views, in the kernel every view op of a
// lazy tensor passes on Functionalize (storage_addresses.cpp): the bits of the view's input,
// toggled by _conj and _neg_view, after eager's refusals (view_as_real of a conjugate view,
// view(dtype) with either bit). The lazy value under the wrapper stays resolved: it holds the
// view's values, not its memory, and no lazy value has a bit. The bits therefore change what
// eager's fallback does above the wrapper, and nothing below it:
// - an op that reads a wrapper with a bit gets a resolved clone from the fallback, a clone of
//   the resolved value below (one copy, which fusion removes);
// - an op the fallback passes through (copy_, clone, mm, dot, views, ...) reaches
//   functionalization, which hands it the resolved value;
// - an in-place op on a wrapper with a bit writes a clone and copies it back with copy_, which
//   writes values: the inverse of _conj (a conjugation) carries them to the base.
// A wrapper's bits are set when the view is made and never change, as in eager.
// Pinned by test_math_bits.py.

MathBitsRule mathBitsRuleFor(const c10::OperatorHandle& op) {
  const std::string_view name = op.schema().name();
  const std::string_view overload = op.schema().overload_name();
  if (name == "aten::_conj") return MathBitsRule::kToggleConj;
  if (name == "aten::_neg_view") return MathBitsRule::kToggleNeg;
  if (name == "aten::view_as_real") return MathBitsRule::kRealView;
  if (name == "aten::view" && overload == "dtype") return MathBitsRule::kDtypeView;
  // Such a view decomposes above Functionalize, or, in InferenceMode, on it (Note [Decomposing on
  // Functionalize]): then its parts pass this kernel themselves, and imag's result is the
  // negative view of a float tensor, not a view of the complex input with its bits.
  if (op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) {
    return MathBitsRule::kDecomposed;
  }
  return MathBitsRule::kCarry;
}

MathBits viewMathBits(MathBitsRule rule, const at::Tensor& self) {
  MathBits bits{self.is_conj(), self.is_neg()};
  switch (rule) {
    case MathBitsRule::kCarry:
    case MathBitsRule::kDecomposed: break;
    case MathBitsRule::kToggleConj:
      // eager's _conj of a real tensor fails an assertion; conj() never calls it for one
      if (self.is_complex()) bits.conj = !bits.conj;
      break;
    case MathBitsRule::kToggleNeg: bits.neg = !bits.neg; break;
    case MathBitsRule::kRealView:
      TORCH_CHECK(!bits.conj,
                  "view_as_real doesn't work on unresolved conjugated tensors.  To resolve the "
                  "conjugate tensor so you can view it as real, use self.resolve_conj(); however, "
                  "be warned that the resulting tensor will NOT alias the original.");
      break;
    case MathBitsRule::kDtypeView:
      TORCH_CHECK(!bits.conj,
                  "torch.Tensor.view is not supported for conjugate view tensors when converting "
                  "to a different dtype.");
      TORCH_CHECK(!bits.neg,
                  "torch.Tensor.view is not supported for tensors with negative bit set when "
                  "converting to a different dtype.");
      break;
  }
  return bits;
}

void setMathBits(const at::Tensor& view, MathBits bits) {
  c10::TensorImpl* impl = view.unsafeGetTensorImpl();
  if (impl->is_conj() != bits.conj) impl->_set_conj(bits.conj);
  if (impl->is_neg() != bits.neg) impl->_set_neg(bits.neg);
}

}  // namespace lazyfuse
