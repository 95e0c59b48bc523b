#pragma once

// Text helpers shared by the renderers of kernels/ (C++ for the CPU, CUDA C++).

#include "lowering/kernel_ir.h"

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lazyfuse {
struct KernelFunction;
}

namespace lazyfuse::detail {

/// `flat / stride % size` as C text, dropping what cannot change the value.
std::string unflatten(const std::string& flat, int64_t stride, int64_t size, bool outermost);

/// Declarations `const <type> <prefix><d> = ...;` of the used variables of a row-major space.
std::string variableLines(const std::string& indent, const std::string& type,
                          const std::string& prefix, const std::string& flat,
                          const std::vector<int64_t>& sizes, const std::vector<bool>& used,
                          size_t count);

/// The C type an instruction of `dtype` computes in, as both targets' preludes spell it (lf_u8
/// and lf_i64 are typedefs there); see Note [Kernel IR]: never Half or BFloat16.
const char* cComputeType(c10::ScalarType dtype);

/// The text of a kUnary, kBinary or kWhere instruction, as both dialects write it: `cast` is the
/// C cast to its type, `arg(i)` the text of instruction i. A binary `pow` of a floating type
/// whose exponent is `uniform_exponent` (the same at every point) calls lf_pow_uniform.
std::string callText(const KInstr& instr, const std::string& cast, bool uniform_exponent,
                     const std::function<std::string(int32_t)>& arg);

/// The shortest text that reads back as exactly `value`, which must be finite (std::to_chars
/// ignores the locale); negative values are parenthesized.
std::string finiteFloatText(double value);

/// A target's prelude: `head`, then the `spelling` of every kernel function of the table
/// (Note [Kernel function table]) on lines of its own, in the table's order, then `tail`.
std::string preludeText(const char* head, const char* KernelFunction::*spelling, const char* tail);

}  // namespace lazyfuse::detail
