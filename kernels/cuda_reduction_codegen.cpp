// Reductions of the CUDA renderer (kernels/detail/cuda_renderer.h): a thread, a group of
// threads or a block per point, and split reductions (Note [CUDA split reductions]).
#include "kernels/detail/cuda_renderer.h"

#include "kernels/detail/cuda_dialect.h"
#include "kernels/detail/cuda_schedule.h"
#include "kernels/detail/render_text.h"
#include "lazy_ir/check.h"

namespace lazyfuse::detail {
namespace {

constexpr int kBlock = kCudaBlock;

}  // namespace

std::string CudaRenderer::subWarpLoop() const {
  const int64_t n = domainNumel(k_);
  const std::string per_warp = std::to_string(32 / group_),
                    per_block = std::to_string(kBlock / group_);
  return "  for (" + ix_ + " pw = (" + ix_ + ")blockIdx.x * " + per_block +
         " + threadIdx.x / 32 * " + per_warp + "; pw < " + std::to_string(n) + "; pw += (" + ix_ +
         ")gridDim.x * " + per_block + ") {\n    const " + ix_ + " pg = pw + threadIdx.x % 32 / " +
         std::to_string(group_) + ";\n    const bool live = pg < " + std::to_string(n) +
         ";\n    const " + ix_ + " p = live ? pg : " + std::to_string(n - 1) + ";\n";
}

std::string CudaRenderer::groupBody() {
  std::string out;
  if (group_ == kBlock) out += sharedMemory();
  if (group_ > 1) out += "  const int lane = threadIdx.x % " + std::to_string(group_) + ";\n";
  out +=
      group_ > 1 && group_ < 32 ? subWarpLoop() : pointLoop("p", domainNumel(k_), kBlock / group_);
  out += variables("    ", "p");
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    const KInstr& instr = k_.instrs[i];
    if (instr.scope != -1) continue;
    if (instr.op == KOp::kReduce) out += reductionLines(static_cast<int32_t>(i));
    out += "    " + instrLine(i, "") + "\n";
  }
  std::string indent = group_ > 1 ? "      " : "    ";
  if (group_ > 1) out += group_ < 32 ? "    if (lane == 0 && live) {\n" : "    if (lane == 0) {\n";
  for (const KStore& store : k_.stores) {
    out += indent + "b" + std::to_string(store.buffer) + "[" + ixText(store.index) +
           "] = " + storeValue(store) + ";\n";
  }
  if (group_ > 1) out += "    }\n";
  return out + "  }\n";
}

std::string CudaRenderer::splitBody() {
  const std::string parts = std::to_string(split_);
  const int64_t n = domainNumel(k_);
  std::string out = group_ == kBlock ? sharedMemory() : "";
  out += "  __shared__ bool lf_last;\n  const " + ix_ + " lf_pb = (" + ix_ + ")(blockIdx.x / " +
         parts + ");\n  const int lf_s = (int)(blockIdx.x % " + parts + ");\n";
  std::string live = "true";
  if (group_ == kBlock) {
    out += "  const int lane = threadIdx.x;\n  const " + ix_ + " p = lf_pb;\n";
  } else {
    out += "  const " + ix_ + " pg = lf_pb * " + std::to_string(kBlock) + " + (" + ix_ +
           ")threadIdx.x;\n  const bool live = pg < " + std::to_string(n) + ";\n  const " + ix_ +
           " p = live ? pg : " + std::to_string(n - 1) + ";\n";
    live = "live";
  }
  out += "  {\n" + variables("    ", "p");
  const std::vector<bool> late = detail::dependsOnReduction(k_);
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    const KInstr& instr = k_.instrs[i];
    if (instr.scope != -1) continue;
    if (instr.op == KOp::kReduce) out += reductionLines(static_cast<int32_t>(i), /*split=*/true);
    if (!late[i]) out += "    " + instrLine(i, "") + "\n";
  }
  // This block's partial results, then the last block of the point (block) folds them all.
  const std::string writer = group_ == kBlock ? "lane == 0" : "live";
  out += "    if (" + writer + ") {\n";
  int r = 0;
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    if (k_.instrs[i].op != KOp::kReduce) continue;
    const KReduction& reduction = k_.reductions[k_.instrs[i].ivalue];
    const std::string type = detail::cudaComputeType(accumulatorType(reduction));
    const std::string at = partialAddress("lf_s", r++);
    out += "      *(" + type + "*)(" + at + ") = a" + std::to_string(i) + ";\n";
    if (isArg(reduction)) out += "      *(lf_i64*)(" + at + " + 8) = x" + std::to_string(i) + ";\n";
  }
  out +=
      "    }\n    __threadfence();\n    __syncthreads();\n"
      "    if (threadIdx.x == 0) lf_last = atomicAdd(&lf_done[lf_pb], 1u) == " +
      parts + " - 1;\n    __syncthreads();\n    if (!lf_last) return;\n    __threadfence();\n";
  out += "    if (" + writer + ") {\n";
  r = 0;
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    const KInstr& instr = k_.instrs[i];
    if (instr.op == KOp::kReduce) out += foldPartials(static_cast<int32_t>(i), r++);
    if (instr.scope == -1 && late[i]) out += "      " + instrLine(i, "") + "\n";
  }
  for (const KStore& store : k_.stores) {
    out += "      b" + std::to_string(store.buffer) + "[" + ixText(store.index) +
           "] = " + storeValue(store) + ";\n";
  }
  return out + "    }\n  }\n";
}

std::string CudaRenderer::partialAddress(const std::string& slice, int r) const {
  return "lf_ws + (((lf_i64)p * " + std::to_string(split_) + " + " + slice + ") * " +
         std::to_string(k_.reductions.size()) + " + " + std::to_string(r) + ") * 16";
}

std::string CudaRenderer::foldPartials(int32_t at, int r) const {
  const KReduction& reduction = k_.reductions[k_.instrs[at].ivalue];
  const c10::ScalarType acc_type = accumulatorType(reduction);
  const std::string type = detail::cudaComputeType(acc_type), i = std::to_string(at);
  const std::string value = "*(volatile const " + type + "*)(" + partialAddress("j", r) + ")";
  std::string out = "      a" + i + " = " + initValue(reduction.kind, acc_type) + ";\n";
  out += "      for (int j = 0; j < " + std::to_string(split_) + "; ++j) {\n";
  if (isArg(reduction)) {
    const std::string max = reduction.kind == ReduceKind::kArgMax ? "true" : "false";
    out += "        const " + type + " v = " + value +
           ";\n        const lf_i64 vi = *(volatile const lf_i64*)(" + partialAddress("j", r) +
           " + 8);\n        if (j == 0 || lf_arg_takes(a" + i + ", x" + i + ", v, vi, " + max +
           ")) { a" + i + " = v; x" + i + " = vi; }\n";
  } else {
    out += "        a" + i + " = " + opName(reduction.kind) + "::f(a" + i + ", (" + type + ")" +
           value + ");\n";
  }
  return out + "      }\n";
}

std::string CudaRenderer::sharedMemory() const {
  std::string out;
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    const KInstr& instr = k_.instrs[i];
    if (instr.op != KOp::kReduce) continue;
    const KReduction& reduction = k_.reductions[instr.ivalue];
    std::string n = std::to_string(kBlock / 32), at = std::to_string(i);
    out += "  __shared__ " + std::string(detail::cudaComputeType(accumulatorType(reduction))) +
           " s" + at + "[" + n + "];\n";
    if (isArg(reduction)) out += "  __shared__ lf_i64 si" + at + "[" + n + "];\n";
  }
  return out;
}

bool CudaRenderer::isArg(const KReduction& r) {
  return r.kind == ReduceKind::kArgMax || r.kind == ReduceKind::kArgMin;
}

c10::ScalarType CudaRenderer::accumulatorType(const KReduction& r) const {
  return isArg(r) ? k_.instrs[r.body].dtype : r.dtype;
}

std::string CudaRenderer::reductionLines(int32_t at, bool split) {
  int32_t k = static_cast<int32_t>(k_.instrs[at].ivalue);
  const KReduction& reduction = k_.reductions[k];
  c10::ScalarType acc_type = accumulatorType(reduction);
  std::string type = detail::cudaComputeType(acc_type);
  std::string acc = "a" + std::to_string(at), idx = "x" + std::to_string(at);
  std::string lane = group_ > 1 ? "lane" : "0";
  int64_t count = detail::numel(reduction.sizes);
  std::string first = lane, end = std::to_string(count), out;
  if (split) {
    const std::string lo = "q" + std::to_string(at) + "lo", hi = "q" + std::to_string(at) + "hi";
    const std::string n = std::to_string(count) + "LL", parts = std::to_string(split_);
    out += "    const " + ix_ + " " + lo + " = (" + ix_ + ")(" + n + " * lf_s / " + parts + "), " +
           hi + " = (" + ix_ + ")(" + n + " * (lf_s + 1) / " + parts + ");\n";
    first = lo + " + " + lane;
    end = hi;
  }
  out += "    " + type + " " + acc + " = " + initValue(reduction.kind, acc_type) + ";\n";
  if (isArg(reduction)) out += "    lf_i64 " + idx + " = " + first + ";\n";
  if (count > 0) {
    out += "    for (" + ix_ + " q = " + first + "; q < " + end +
           "; q += " + std::to_string(group_) + ") {\n";
    std::vector<bool> vars(k_.domain.size(), false), rvars(reduction.sizes.size(), false);
    for (const KInstr& instr : k_.instrs) {
      if (instr.scope == k) ixCollectVars(instr.index, vars, rvars);
    }
    out += detail::variableLines("      ", ix_, "r", "q", reduction.sizes, rvars,
                                 reduction.sizes.size());
    for (size_t i = 0; i < k_.instrs.size(); ++i) {
      if (k_.instrs[i].scope == k) out += "      " + instrLine(i, "") + "\n";
    }
    std::string x = "(" + type + ")t" + std::to_string(reduction.body);
    out += "      " + foldLine(reduction.kind, acc, idx, x) + "\n    }\n";
  }
  if (group_ == 1) return out;
  std::string g = std::to_string(group_), s = "s" + std::to_string(at);
  if (isArg(reduction)) {
    std::string max = reduction.kind == ReduceKind::kArgMax ? "true" : "false";
    return out + "    lf_group_arg<" + g + ">(" + acc + ", " + idx + ", " + max + ", " +
           (group_ == kBlock ? s + ", si" + std::to_string(at) : "(" + type + "*)0, (lf_i64*)0") +
           ");\n";
  }
  return out + "    " + acc + " = lf_group_reduce<" + opName(reduction.kind) + ", " + g + ">(" +
         acc + ", " + (group_ == kBlock ? s : "(" + type + "*)0") + ");\n";
}

const char* CudaRenderer::opName(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum: return "lf_sum";
    case ReduceKind::kProd: return "lf_prod";
    case ReduceKind::kMax: return "lf_max";
    case ReduceKind::kMin: return "lf_min";
    default: break;
  }
  LF_INTERNAL_ASSERT(false, "no group fold for reduction kind ", static_cast<int>(kind));
}

std::string CudaRenderer::initValue(ReduceKind kind, c10::ScalarType dtype) {
  switch (kind) {
    case ReduceKind::kSum: return detail::cudaLiteral(dtype, 0, 0);
    case ReduceKind::kProd: return detail::cudaLiteral(dtype, 1, 1);
    case ReduceKind::kMax:
    case ReduceKind::kArgMax: return detail::cudaExtremeLiteral(dtype, /*lowest=*/true);
    case ReduceKind::kMin:
    case ReduceKind::kArgMin: return detail::cudaExtremeLiteral(dtype, /*lowest=*/false);
  }
  LF_INTERNAL_ASSERT(false, "unknown reduction kind ", static_cast<int>(kind));
}

std::string CudaRenderer::foldLine(ReduceKind kind, const std::string& acc, const std::string& idx,
                                   const std::string& x) {
  switch (kind) {
    case ReduceKind::kSum: return acc + " = lf_sum::f(" + acc + ", " + x + ");";
    case ReduceKind::kProd: return acc + " = lf_prod::f(" + acc + ", " + x + ");";
    case ReduceKind::kMax: return acc + " = lf_max::f(" + acc + ", " + x + ");";
    case ReduceKind::kMin: return acc + " = lf_min::f(" + acc + ", " + x + ");";
    case ReduceKind::kArgMax:
    case ReduceKind::kArgMin: {
      std::string cmp = kind == ReduceKind::kArgMax ? " > " : " < ";
      return "const bool take = " + acc + " == " + acc + " && (" + x + " != " + x + " || " + x +
             cmp + acc + ");\n      " + acc + " = take ? " + x + " : " + acc + ";\n      " + idx +
             " = take ? (lf_i64)q : " + idx + ";";
    }
  }
  LF_INTERNAL_ASSERT(false, "unknown reduction kind ", static_cast<int>(kind));
}

}  // namespace lazyfuse::detail
