// Text helpers shared by the renderers of kernels/ (C++ for the CPU, CUDA C++).

#include "kernels/detail/render_text.h"

#include "lazy_ir/check.h"
#include "lowering/kernel_functions.h"

#include <charconv>
#include <cmath>

namespace lazyfuse::detail {

/// `flat / stride % size` as C text, dropping what cannot change the value.
std::string unflatten(const std::string& flat, int64_t stride, int64_t size, bool outermost) {
  std::string text = stride == 1 ? flat : "(" + flat + " / " + std::to_string(stride) + ")";
  if (outermost || size == 1) return size == 1 ? "0" : text;
  return text + " % " + std::to_string(size);
}

/// Declarations `const <type> <prefix><d> = ...;` of the used variables of a
/// row-major space.
std::string variableLines(const std::string& indent, const std::string& type,
                          const std::string& prefix, const std::string& flat,
                          const std::vector<int64_t>& sizes, const std::vector<bool>& used,
                          size_t count) {
  std::string out;
  int64_t stride = 1;
  std::vector<int64_t> strides(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= sizes[d];
  }
  for (size_t d = 0; d < count; ++d) {
    if (!used[d]) continue;
    out += indent + "const " + type + " " + prefix + std::to_string(d) + " = " +
           unflatten(flat, strides[d], sizes[d], /*outermost=*/d == 0) + ";\n";
  }
  return out;
}

const char* cComputeType(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Bool: return "bool";
    case c10::ScalarType::Byte: return "lf_u8";
    case c10::ScalarType::Char: return "signed char";
    case c10::ScalarType::Short: return "short";
    case c10::ScalarType::Int: return "int";
    case c10::ScalarType::Long: return "lf_i64";
    case c10::ScalarType::Float: return "float";
    case c10::ScalarType::Double: return "double";
    default: break;
  }
  LF_INTERNAL_ASSERT(false, "no compute type for ", dtype);
}

std::string callText(const KInstr& instr, const std::string& cast, bool uniform_exponent,
                     const std::function<std::string(int32_t)>& arg) {
  switch (instr.op) {
    case KOp::kUnary: return cast + "lf_" + instr.fn + "(" + arg(instr.args[0]) + ")";
    case KOp::kBinary: {
      const bool floating =
          instr.dtype == c10::ScalarType::Float || instr.dtype == c10::ScalarType::Double;
      const std::string fn =
          instr.fn == "pow" && floating && uniform_exponent ? "pow_uniform" : instr.fn;
      return cast + "lf_" + fn + "(" + arg(instr.args[0]) + ", " + arg(instr.args[1]) + ")";
    }
    case KOp::kWhere:
      return arg(instr.args[0]) + " ? " + cast + arg(instr.args[1]) + " : " + cast +
             arg(instr.args[2]);
    default: break;
  }
  LF_INTERNAL_ASSERT(false, "not a call: kernel op ", static_cast<int>(instr.op));
}

std::string finiteFloatText(double value) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text[0] == '-' ? "(" + text + ")" : text;
}

std::string preludeText(const char* head, const char* KernelFunction::*spelling, const char* tail) {
  std::string text = head;
  for (const KernelFunction& fn : kernelFunctions()) {
    text += fn.*spelling;
    text += '\n';
  }
  return text + tail;
}

}  // namespace lazyfuse::detail
