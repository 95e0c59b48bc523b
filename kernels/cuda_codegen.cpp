#include "kernels/cuda_codegen.h"

#include "kernels/detail/cuda_dialect.h"
#include "kernels/detail/cuda_renderer.h"
#include "kernels/detail/cuda_schedule.h"
#include "kernels/detail/render_text.h"
#include "lazy_ir/check.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <set>

namespace lazyfuse {
namespace {

constexpr int kBlock = detail::kCudaBlock;

// Note [CUDA kernel batches]
// A kernel batch (Note [Kernel batches]) renders as one kernel over a table passed by value: the
// members become segments, each cut into chunks of kBatchChunk points, and block c runs chunk c
// of the whole launch; it finds its segment by a binary search over the segments' first chunks,
// reads that segment's buffer addresses and parameters from the table, and runs the shared body
// over the chunk's points (4 at a time in the 4-wide variant, whose table must have every flat
// buffer 16-byte aligned). The table lives in the launch's parameter space, __grid_constant__
// so it is read where it is and never copied; a launch takes as many segments as fit in
// kCudaBatchTableBytes (a CUDA 12.1+ driver takes 32764 bytes of parameters, an older one
// 4096: the plan compiler asks for less there), and a larger batch takes
// several launches. Chunks bound the work of a block, so a batch of very unequal members (an
// optimizer step over a 2M-element weight and a 64-element bias) still spreads evenly.
constexpr int64_t kBatchChunk = 4096;

/// The pointer declarator of a kernel buffer: __restrict__ unless the buffer may share memory
/// with another one of the kernel (Note [Donated buffers]).
std::string pointerQualifier(const KBuffer& buffer) {
  return buffer.may_alias ? "* " : "* __restrict__ ";
}

}  // namespace

namespace detail {

CudaLaunchShape CudaRenderer::render(std::string& out) {
  checkKernel(k_);
  CudaLaunchShape shape;
  shape.name = k_.name;
  shape.points = domainNumel(k_);
  shape.group = k_.reductions.empty() ? 1 : detail::groupSize(k_);
  shape.block = kBlock;
  group_ = shape.group;
  ix_ = detail::fitsIndex32(k_) ? "int" : "lf_i64";
  if (!k_.reductions.empty()) split_ = detail::splitCount(k_, group_);
  if (split_ > 1) {
    shape.split = split_;
    shape.split_blocks = group_ == kBlock ? shape.points : (shape.points + kBlock - 1) / kBlock;
    shape.workspace = detail::saturatingMul(detail::saturatingMul(shape.points, split_),
                                            static_cast<int64_t>(16 * k_.reductions.size()));
    out += signature(k_.name,
                     "unsigned char* __restrict__ lf_ws, unsigned int* __restrict__ lf_done") +
           "{\n" + splitBody() + "}\n";
    return shape;
  }
  out += signature(k_.name) + "{\n";
  if (shape.points > 0) out += k_.reductions.empty() ? pointwiseBody() : groupBody();
  out += "}\n";
  if (!k_.reductions.empty() || shape.points % 4 != 0) return shape;
  std::set<int32_t> wide = contiguousBuffers();
  if (wide.empty()) return shape;
  shape.vector_name = k_.name + "_v4";
  shape.vector_buffers.assign(wide.begin(), wide.end());
  out += "\n" + signature(shape.vector_name) + "{\n" + vectorBody(wide) + "}\n";
  return shape;
}

CudaBatchShape CudaRenderer::renderBatch(std::string& out, const std::string& name, int capacity) {
  checkKernel(k_);
  group_ = 1;
  ix_ = detail::fitsIndex32(k_) ? "int" : "lf_i64";
  CudaBatchShape shape;
  shape.name = name;
  shape.capacity = capacity;
  shape.chunk = kBatchChunk;
  shape.block = kBlock;
  const std::string c = std::to_string(capacity);
  out += "struct lf_tab_" + name + " {\n  lf_i64 segments, blocks;\n  lf_i64 n[" + c +
         "];\n  lf_i64 first[" + c + "];\n";
  for (size_t b = 0; b < k_.buffers.size(); ++b) {
    out += "  " + std::string(k_.buffers[b].output ? "" : "const ") +
           detail::cudaStorageType(k_.buffers[b].dtype) + "* b" + std::to_string(b) + "[" + c +
           "];\n";
  }
  for (size_t p = 0; p < k_.params.size(); ++p) {
    out += k_.params[p].floating ? "  double fp" : "  lf_i64 ip";
    out += std::to_string(p) + "[" + c + "];\n";
  }
  out += "};\n";
  out += batchSignature(name, name) + "{\n" + batchPrologue() + pointLoopIn("begin", "end") +
         pointLines() + "  }\n}\n";
  std::set<int32_t> wide = contiguousBuffers();
  if (wide.empty()) return shape;
  shape.vector_name = name + "_v4";
  shape.vector_buffers.assign(wide.begin(), wide.end());
  out += "\n" + batchSignature(shape.vector_name, name) + "{\n" + batchPrologue() + "  const " +
         ix_ + " vend = begin + (end - begin) / 4 * 4;\n" + "  for (" + ix_ + " g = begin / 4 + (" +
         ix_ + ")threadIdx.x; g < vend / 4; g += " + std::to_string(kBlock) + ") {\n    const " +
         ix_ + " p0 = g * 4;\n" + vectorLines(wide) + "  }\n" + pointLoopIn("vend", "end") +
         pointLines() + "  }\n}\n";
  return shape;
}

std::string CudaRenderer::signature(const std::string& name, const std::string& extra) const {
  std::string text = "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlock) +
                     ") " + name + "(";
  for (size_t b = 0; b < k_.buffers.size(); ++b) {
    const KBuffer& buffer = k_.buffers[b];
    text += std::string(b ? ", " : "") + (buffer.output ? "" : "const ") +
            detail::cudaStorageType(buffer.dtype) + pointerQualifier(buffer) + "b" +
            std::to_string(b);
  }
  for (size_t p = 0; p < k_.params.size(); ++p) {
    text += std::string(p || !k_.buffers.empty() ? ", " : "") +
            (k_.params[p].floating ? "double fp" : "lf_i64 ip") + std::to_string(p);
  }
  if (!extra.empty()) text += (k_.buffers.empty() && k_.params.empty() ? "" : ", ") + extra;
  return text + ") ";
}

std::string CudaRenderer::batchSignature(const std::string& name, const std::string& batch) {
  return "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlock) + ") " + name +
         "(const __grid_constant__ lf_tab_" + batch + " tab) ";
}

std::string CudaRenderer::batchPrologue() const {
  const std::string chunk = std::to_string(kBatchChunk);
  std::string out =
      "  const lf_i64 c = blockIdx.x;\n  if (c >= tab.blocks) return;\n"
      "  int lo = 0, hi = (int)tab.segments - 1;\n  while (lo < hi) {\n"
      "    const int mid = (lo + hi + 1) / 2;\n"
      "    if (tab.first[mid] <= c) lo = mid; else hi = mid - 1;\n  }\n"
      "  const " +
      ix_ + " n = (" + ix_ +
      ")tab.n[lo];\n"
      "  const " +
      ix_ + " begin = (" + ix_ + ")(c - tab.first[lo]) * " + chunk +
      ";\n"
      "  const " +
      ix_ + " end = n - begin < " + chunk + " ? n : begin + " + chunk + ";\n";
  for (size_t b = 0; b < k_.buffers.size(); ++b) {
    const std::string name = "b" + std::to_string(b);
    out += "  " + std::string(k_.buffers[b].output ? "" : "const ") +
           detail::cudaStorageType(k_.buffers[b].dtype) + pointerQualifier(k_.buffers[b]) + name +
           " = tab." + name + "[lo];\n";
  }
  for (size_t p = 0; p < k_.params.size(); ++p) {
    const std::string name = (k_.params[p].floating ? "fp" : "ip") + std::to_string(p);
    out += std::string(k_.params[p].floating ? "  const double " : "  const lf_i64 ") + name +
           " = tab." + name + "[lo];\n";
  }
  return out;
}

std::string CudaRenderer::pointLoopIn(const std::string& from, const std::string& to) const {
  return "  for (" + ix_ + " p = " + from + " + (" + ix_ + ")threadIdx.x; p < " + to +
         "; p += " + std::to_string(kBlock) + ") {\n";
}

std::string CudaRenderer::pointLoop(const std::string& var, int64_t count, int per_block) const {
  std::string step =
      per_block == kBlock ? "threadIdx.x" : "threadIdx.x / " + std::to_string(group_);
  return "  for (" + ix_ + " " + var + " = (" + ix_ + ")blockIdx.x * " + std::to_string(per_block) +
         " + " + step + "; " + var + " < " + std::to_string(count) + "; " + var + " += (" + ix_ +
         ")gridDim.x * " + std::to_string(per_block) + ") {\n";
}

std::string CudaRenderer::variables(const std::string& indent, const std::string& flat) const {
  std::vector<bool> vars(k_.domain.size(), false), rvars;
  for (const KInstr& instr : k_.instrs) {
    if (instr.scope == -1) ixCollectVars(instr.index, vars, rvars);
  }
  for (const KStore& store : k_.stores) ixCollectVars(store.index, vars, rvars);
  return detail::variableLines(indent, ix_, "v", flat, k_.domain, vars, k_.domain.size());
}

std::string CudaRenderer::pointwiseBody() {
  return pointLoop("p", domainNumel(k_), kBlock) + pointLines() + "  }\n";
}

std::string CudaRenderer::pointLines() const {
  std::string out = variables("    ", "p");
  for (size_t i = 0; i < k_.instrs.size(); ++i) out += "    " + instrLine(i, "") + "\n";
  for (const KStore& store : k_.stores) {
    out += "    b" + std::to_string(store.buffer) + "[" + ixText(store.index) +
           "] = " + storeValue(store) + ";\n";
  }
  return out;
}

std::set<int32_t> CudaRenderer::contiguousBuffers() const {
  const std::string flat = ixText(ixFlatIndex(k_.domain));
  std::set<int32_t> wide, narrow;
  auto note = [&](int32_t buffer, const IxPtr& index) {
    (ixText(index) == flat ? wide : narrow).insert(buffer);
  };
  for (const KInstr& instr : k_.instrs) {
    if (instr.op == KOp::kLoad) note(instr.buffer, instr.index);
  }
  for (const KStore& store : k_.stores) note(store.buffer, store.index);
  for (int32_t b : narrow) wide.erase(b);
  return wide;
}

std::string CudaRenderer::vectorBody(const std::set<int32_t>& wide) {
  return pointLoop("g", domainNumel(k_) / 4, kBlock) + "    const " + ix_ + " p0 = g * 4;\n" +
         vectorLines(wide) + "  }\n";
}

std::string CudaRenderer::vectorLines(const std::set<int32_t>& wide) {
  std::string out;
  for (int32_t b : wide) {
    std::string pack =
        "lf_pack4<" + std::string(detail::cudaStorageType(k_.buffers[b].dtype)) + ">";
    std::string name = "w" + std::to_string(b);
    out += k_.buffers[b].output ? "    " + pack + " " + name + ";\n"
                                : "    const " + pack + " " + name + " = *(const " + pack + "*)(b" +
                                      std::to_string(b) + " + p0);\n";
  }
  for (int lane = 0; lane < 4; ++lane) {
    lane_ = lane;
    wide_ = &wide;
    out += "    {\n      const " + ix_ + " p = p0 + " + std::to_string(lane) + ";\n" +
           variables("      ", "p");
    for (size_t i = 0; i < k_.instrs.size(); ++i) out += "      " + instrLine(i, "") + "\n";
    for (const KStore& store : k_.stores) {
      out += "      " + element(store.buffer, store.index) + " = " + storeValue(store) + ";\n";
    }
    out += "    }\n";
  }
  wide_ = nullptr;
  for (int32_t b : wide) {
    if (!k_.buffers[b].output) continue;
    std::string pack =
        "lf_pack4<" + std::string(detail::cudaStorageType(k_.buffers[b].dtype)) + ">";
    out += "    *(" + pack + "*)(b" + std::to_string(b) + " + p0) = w" + std::to_string(b) + ";\n";
  }
  return out;
}

std::string CudaRenderer::t(int32_t i) { return "t" + std::to_string(i); }

std::string CudaRenderer::instrLine(size_t i, const std::string&) const {
  const KInstr& instr = k_.instrs[i];
  return "const " + std::string(detail::cudaComputeType(instr.dtype)) + " " +
         t(static_cast<int32_t>(i)) + " = " + instrExpr(instr, static_cast<int32_t>(i)) + ";";
}

std::string CudaRenderer::instrExpr(const KInstr& instr, int32_t i) const {
  std::string cast = "(" + std::string(detail::cudaComputeType(instr.dtype)) + ")";
  switch (instr.op) {
    case KOp::kLoad: return cast + loadValue(instr);
    case KOp::kConst: return detail::cudaLiteral(instr.dtype, instr.fvalue, instr.ivalue);
    case KOp::kParam:
      return cast + (k_.params[instr.ivalue].floating ? "fp" : "ip") + std::to_string(instr.ivalue);
    case KOp::kIndex: return cast + "(" + ixText(instr.index) + ")";
    case KOp::kUnary:
    case KOp::kBinary:
    case KOp::kWhere:
      // A floating pow whose exponent is the same at every point (built from constants and
      // parameters only) takes eager's pow(Tensor, Scalar) special cases; see Note [CUDA prelude].
      return detail::callText(instr, cast, instr.op == KOp::kBinary && isUniform(instr.args[1]),
                              [](int32_t a) { return t(a); });
    case KOp::kCast: return castText(instr.dtype, k_.instrs[instr.args[0]].dtype, t(instr.args[0]));
    case KOp::kReduce:
      return cast + (isArg(k_.reductions[instr.ivalue]) ? "x" : "a") + std::to_string(i);
  }
  LF_INTERNAL_ASSERT(false, "unknown kernel op ", static_cast<int>(instr.op));
}

bool CudaRenderer::isUniform(int32_t i) const {
  const KInstr& instr = k_.instrs[i];
  if (instr.op == KOp::kConst || instr.op == KOp::kParam) return true;
  if (instr.op == KOp::kLoad || instr.op == KOp::kIndex || instr.op == KOp::kReduce) return false;
  for (int32_t arg : instr.args) {
    if (!isUniform(arg)) return false;
  }
  return true;
}

std::string CudaRenderer::castText(c10::ScalarType to, c10::ScalarType from,
                                   const std::string& value) {
  const std::string type = detail::cudaComputeType(to);
  if (to == c10::ScalarType::Byte && c10::isFloatingType(from)) {
    return "(" + type + ")(lf_i64)" + value;
  }
  return "(" + type + ")" + value;
}

std::string CudaRenderer::element(int32_t buffer, const IxPtr& index) const {
  if (wide_ && wide_->count(buffer)) {
    return "w" + std::to_string(buffer) + ".v[" + std::to_string(lane_) + "]";
  }
  return "b" + std::to_string(buffer) + "[" + ixText(index) + "]";
}

std::string CudaRenderer::loadValue(const KInstr& instr) const {
  std::string e = element(instr.buffer, instr.index);
  switch (k_.buffers[instr.buffer].dtype) {
    case c10::ScalarType::Bool: return "(" + e + " != 0)";
    case c10::ScalarType::Half: return "lf_h2f(" + e + ")";
    case c10::ScalarType::BFloat16: return "lf_bf16_load(" + e + ")";
    default: return e;
  }
}

std::string CudaRenderer::storeValue(const KStore& store) const {
  std::string value = t(store.value);
  switch (k_.buffers[store.buffer].dtype) {
    case c10::ScalarType::Bool: return "(lf_u8)(" + value + " != 0)";
    case c10::ScalarType::Half: return "lf_f2h((float)" + value + ")";
    case c10::ScalarType::BFloat16: return "lf_bf16_store((float)" + value + ")";
    default: return castText(k_.buffers[store.buffer].dtype, k_.instrs[store.value].dtype, value);
  }
}

}  // namespace detail

size_t cudaBatchTableWords(const CudaBatchShape& shape, size_t buffers, size_t params) {
  return 2 + static_cast<size_t>(shape.capacity) * (2 + buffers + params);
}

size_t cudaBatchTableWord(const CudaBatchShape& shape, size_t field, size_t segment) {
  LF_INTERNAL_ASSERT(segment < static_cast<size_t>(shape.capacity), "segment ", segment,
                     " of a table of ", shape.capacity);
  return 2 + field * static_cast<size_t>(shape.capacity) + segment;
}

CudaSource renderCuda(const std::vector<const Kernel*>& kernels,
                      const std::vector<std::vector<const Kernel*>>& batches, size_t table_bytes) {
  CudaSource result;
  result.source = "// codegen version " + std::to_string(kCudaCodegenVersion) + "\n";
  result.source += detail::cudaPrelude();
  std::set<std::string> names;
  for (const Kernel* kernel : kernels) {
    if (!kernel) {
      result.kernels.emplace_back();
      continue;
    }
    LF_INTERNAL_ASSERT(names.insert(kernel->name).second, "two kernels named ", kernel->name);
    result.source += "\n";
    result.kernels.push_back(detail::CudaRenderer(*kernel).render(result.source));
  }
  for (size_t g = 0; g < batches.size(); ++g) {
    const std::vector<const Kernel*>& members = batches[g];
    LF_INTERNAL_ASSERT(members.size() >= 2 && members[0], "a kernel batch of ", members.size());
    // The template: the first member over the largest point count, every flat index v0.
    Kernel shared = *members[0];
    int64_t points = 1;
    for (const Kernel* member : members) points = std::max(points, domainNumel(*member));
    const std::string flat = ixText(ixFlatIndex(shared.domain));
    auto normalize = [&](IxPtr& index) {
      if (ixText(index) == flat) index = ixVar(0);
    };
    for (KInstr& instr : shared.instrs) {
      if (instr.op == KOp::kLoad || instr.op == KOp::kIndex) normalize(instr.index);
    }
    for (KStore& store : shared.stores) normalize(store.index);
    shared.domain = {points};
    shared.name = "lf_batch" + std::to_string(g);
    LF_INTERNAL_ASSERT(names.insert(shared.name).second, "two kernels named ", shared.name);
    const size_t per_segment = 8 * (2 + shared.buffers.size() + shared.params.size());
    const size_t fit = (table_bytes - 16) / per_segment;
    const int capacity = static_cast<int>(std::max<size_t>(1, std::min(fit, members.size())));
    result.source += "\n";
    result.batches.push_back(
        detail::CudaRenderer(shared).renderBatch(result.source, shared.name, capacity));
  }
  return result;
}

CudaPlanKernels cudaPlanKernels(const ExecutionPlan& plan) {
  CudaPlanKernels inputs;
  for (const FusedKernel& k : plan.kernels) inputs.kernels.push_back(&k.kernel);
  for (const KernelBatch& batch : plan.batches) {
    inputs.batches.emplace_back();
    for (int32_t k : batch.kernels) {
      inputs.batches.back().push_back(inputs.kernels.at(k));
      inputs.kernels.at(k) = nullptr;
    }
  }
  return inputs;
}

}  // namespace lazyfuse
