#pragma once

// The conjugate and negative bits of lazy views: see Note [Conjugate and negative bits of lazy
// views] in math_bits.cpp.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>

namespace lazyfuse {

/// What a view op does to the math bits of its input, resolved once per op at registration.
enum class MathBitsRule : uint8_t {
  kCarry,       // the view keeps its input's bits (every view that only moves elements)
  kToggleConj,  // _conj
  kToggleNeg,   // _neg_view
  kRealView,    // view_as_real: refuses a conjugate input, keeps the negative bit
  kDtypeView,   // view(dtype): refuses an input with either bit
  kDecomposed,  // a composite (imag, reshape) run on Functionalize: its parts set the bits
};

MathBitsRule mathBitsRuleFor(const c10::OperatorHandle& op);

/// The bits of a view op's input, read before the op runs.
struct MathBits {
  bool conj = false;
  bool neg = false;
};

/// Raises eager's error where the view op refuses an input with these bits; else the bits its
/// results get.
MathBits viewMathBits(MathBitsRule rule, const at::Tensor& self);

/// Gives a lazy view (a FunctionalTensorWrapper) the bits eager's view would have.
void setMathBits(const at::Tensor& view, MathBits bits);

}  // namespace lazyfuse
