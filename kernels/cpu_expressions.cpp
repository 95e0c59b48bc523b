// How the CPU renderer writes one instruction, load and store of a kernel as C++: the
// expressions of the loop bodies that kernels/cpu_codegen.cpp lays out.
#include "kernels/detail/cpu_dialect.h"
#include "kernels/detail/cpu_renderer.h"
#include "kernels/detail/render_text.h"
#include "lazy_ir/check.h"

namespace lazyfuse {
namespace detail {

std::string CpuRenderer::instrLine(size_t i) const {
  const KInstr& instr = k_.instrs[i];
  return "const " + std::string(detail::cpuComputeType(instr.dtype)) + " t" + std::to_string(i) +
         " = " + instrExpr(instr, static_cast<int32_t>(i)) + ";";
}

std::string CpuRenderer::t(int32_t i) const {
  const bool element = !segment_var_.empty() && k_.instrs[i].scope == -1 && varying_[i];
  return "t" + std::to_string(i) + (element ? "[s]" : "");
}

std::string CpuRenderer::instrExpr(const KInstr& instr, int32_t i) const {
  std::string type = detail::cpuComputeType(instr.dtype);
  std::string cast = "(" + type + ")";
  switch (instr.op) {
    case KOp::kLoad:
      if (!block_var_.empty() && half_loads_[i]) {
        return "h" + std::to_string(i) + "[" + block_var_ + " - c]";  // Note [Half blocks]
      }
      if (!tiled_.empty() && tiled_[i]) {  // Note [Tiled loops]
        return "g" + std::to_string(i) + "[r * " + std::to_string(kTileCols) + " + (v" +
               std::to_string(k_.domain.size() - 1) + " - tc0)]";
      }
      return cast + loadExpr(instr);
    case KOp::kConst: return detail::cpuLiteral(instr.dtype, instr.fvalue, instr.ivalue);
    case KOp::kParam:
      return cast + (k_.params[instr.ivalue].floating ? "fparams[" : "iparams[") +
             std::to_string(param_base_ + instr.ivalue) + "]";
    case KOp::kIndex: return cast + "(" + ixText(instr.index) + ")";
    case KOp::kWhere:
      // Note [Branch-free selects]
      if (instr.dtype == c10::ScalarType::Float || instr.dtype == c10::ScalarType::Double) {
        return "lf_select(" + t(instr.args[0]) + ", " + cast + t(instr.args[1]) + ", " + cast +
               t(instr.args[2]) + ")";
      }
      [[fallthrough]];
    case KOp::kUnary:
    case KOp::kBinary:
      // A floating pow whose exponent stays the same over the loop it is in takes the special
      // cases eager's pow(Tensor, Scalar) takes; see Note [CPU prelude].
      return detail::callText(instr, cast, instr.op == KOp::kBinary && !varying_[instr.args[1]],
                              [this](int32_t a) { return t(a); });
    case KOp::kCast: return cast + t(instr.args[0]);
    case KOp::kReduce: {
      const KReduction& reduction = k_.reductions[instr.ivalue];
      bool arg = reduction.kind == ReduceKind::kArgMax || reduction.kind == ReduceKind::kArgMin;
      return cast + (arg ? "x" : "a") + std::to_string(i) + (segment_var_.empty() ? "" : "[s]");
    }
  }
  LF_INTERNAL_ASSERT(false, "unknown kernel op ", static_cast<int>(instr.op));
}

std::string CpuRenderer::loadExpr(const KInstr& instr) const {
  std::string element = bufferName(instr.buffer) + "[" + ixText(instr.index) + "]";
  switch (k_.buffers[instr.buffer].dtype) {
    case c10::ScalarType::Bool: return "(" + element + " != 0)";
    case c10::ScalarType::Half: return "lf_half_load(" + element + ")";
    case c10::ScalarType::BFloat16: return "lf_bf16_load(" + element + ")";
    default: return element;
  }
}

/// The instruction a store writes: a Half (BFloat16) store rounds, so a value rounded to that
/// type just before it is stored unrounded (the rounding is a store and a load in this dialect).
int32_t CpuRenderer::storedValue(const KStore& store) const {
  const KInstr& instr = k_.instrs[store.value];
  const char* rounding = roundingFunction(k_.buffers[store.buffer].dtype);
  const bool rounds = instr.op == KOp::kUnary && rounding != nullptr && instr.fn == rounding;
  return rounds ? instr.args[0] : store.value;
}

void CpuRenderer::storeLines(const std::string& indent) { out_ += storeText(indent); }

std::string CpuRenderer::storeText(const std::string& indent) const {
  std::string out;
  for (size_t k = 0; k < k_.stores.size(); ++k) {
    if (!part_stores_.empty() && !part_stores_[k]) continue;
    const KStore& store = k_.stores[k];
    std::string value = t(storedValue(store));
    if (!block_var_.empty() && half_stores_[k]) {  // Note [Half blocks]
      out +=
          indent + "s" + std::to_string(k) + "[" + block_var_ + " - c] = (float)" + value + ";\n";
      continue;
    }
    std::string element = !block_var_.empty() && streams_[k]  // Note [Streaming stores]
                              ? "s" + std::to_string(k) + "[" + block_var_ + " - c]"
                              : bufferName(store.buffer) + "[" + ixText(store.index) + "]";
    switch (k_.buffers[store.buffer].dtype) {
      case c10::ScalarType::Bool: value = "(lf_u8)(" + value + " != 0)"; break;
      case c10::ScalarType::Half: value = "lf_half_store((float)" + value + ")"; break;
      case c10::ScalarType::BFloat16: value = "lf_bf16_store((float)" + value + ")"; break;
      default:
        value =
            "(" + std::string(detail::cpuStorageType(k_.buffers[store.buffer].dtype)) + ")" + value;
    }
    out += indent + element + " = " + value + ";\n";
  }
  return out;
}

std::string CpuRenderer::bufferName(int32_t b) const {
  return "b" + std::to_string(buffer_base_ + b);
}

}  // namespace detail
}  // namespace lazyfuse
