// Reductions of the CPU renderer (kernels/detail/cpu_renderer.h): the fold loops of the point
// loop, and the segment loop of a kernel whose reductions read along the innermost point
// variable (Note [CPU loop structure] in kernels/cpu_codegen.cpp).
#include "kernels/detail/cpu_renderer.h"

#include "kernels/detail/cpu_dialect.h"
#include "kernels/detail/render_text.h"
#include "lazy_ir/check.h"

#include <set>
#include <string>
#include <vector>

namespace lazyfuse::detail {
namespace {

/// Whether a point loop folds max/min as a plain max/min plus a flag saying a NaN was seen:
/// floating max and min. The plain fold vectorizes to max/min instructions, where a fold that
/// keeps the NaN itself (lf_max, lf_min) needs compares and blends: the max of each row of
/// [4096, 1024] floats, one thread, 0.56 ms -> 0.23 ms. The result is a quiet NaN when the
/// flag is set, as eager's is. See Note [CPU loop structure].
bool foldsWithNanFlag(ReduceKind kind, c10::ScalarType dtype) {
  const bool floating = dtype == c10::ScalarType::Float || dtype == c10::ScalarType::Double;
  return floating && (kind == ReduceKind::kMax || kind == ReduceKind::kMin);
}

/// The `omp simd` line that lets the compiler vectorize a fold: each lane keeps a partial
/// result and the lanes are combined after the loop. Floating max/min combine with lf_max and
/// lf_min, which keep a NaN (Note [CPU prelude]); argmax/argmin stay scalar (first index).
std::string simdReductionPragma(ReduceKind kind, c10::ScalarType dtype, const std::string& acc) {
  if (dtype == c10::ScalarType::Bool) return "";
  const bool floating = dtype == c10::ScalarType::Float || dtype == c10::ScalarType::Double;
  std::string op;
  switch (kind) {
    case ReduceKind::kSum: op = "+"; break;
    case ReduceKind::kProd: op = "*"; break;
    case ReduceKind::kMax: op = floating ? "lf_max" : "max"; break;
    case ReduceKind::kMin: op = floating ? "lf_min" : "min"; break;
    case ReduceKind::kArgMax:
    case ReduceKind::kArgMin: return "";
  }
  return "#pragma omp simd reduction(" + op + ":" + acc + ")\n";
}

std::string reductionInit(ReduceKind kind, c10::ScalarType dtype) {
  switch (kind) {
    case ReduceKind::kSum: return detail::cpuLiteral(dtype, 0, 0);
    case ReduceKind::kProd: return detail::cpuLiteral(dtype, 1, 1);
    case ReduceKind::kMax:
    case ReduceKind::kArgMax: return detail::cpuExtremeLiteral(dtype, /*lowest=*/true);
    case ReduceKind::kMin:
    case ReduceKind::kArgMin: return detail::cpuExtremeLiteral(dtype, /*lowest=*/false);
  }
  LF_INTERNAL_ASSERT(false, "unknown reduction kind ", static_cast<int>(kind));
}

/// One fold step. max/min take a NaN and then keep it (no value compares greater than NaN);
/// argmax/argmin keep the first extreme, and the first NaN once one is seen, as eager does.
std::string accumulateLine(ReduceKind kind, const std::string& acc, const std::string& idx,
                           const std::string& x) {
  switch (kind) {
    case ReduceKind::kSum: return acc + " = " + acc + " + " + x + ";";
    case ReduceKind::kProd: return acc + " = " + acc + " * " + x + ";";
    case ReduceKind::kMax:
      return acc + " = (" + x + " != " + x + " || " + x + " > " + acc + ") ? " + x + " : " + acc +
             ";";
    case ReduceKind::kMin:
      return acc + " = (" + x + " != " + x + " || " + x + " < " + acc + ") ? " + x + " : " + acc +
             ";";
    case ReduceKind::kArgMax:
    case ReduceKind::kArgMin: {
      std::string cmp = kind == ReduceKind::kArgMax ? " > " : " < ";
      return "const bool take = " + acc + " == " + acc + " && (" + x + " != " + x + " || " + x +
             cmp + acc + ");\n      " + acc + " = take ? " + x + " : " + acc + ";\n      " + idx +
             " = take ? q : " + idx + ";";
    }
  }
  LF_INTERNAL_ASSERT(false, "unknown reduction kind ", static_cast<int>(kind));
}

}  // namespace

bool CpuRenderer::readsAcrossPoints() const {
  if (k_.reductions.empty() || k_.domain.empty() || k_.domain.back() == 1) return false;
  for (const KReduction& reduction : k_.reductions) {
    if (reduction.kind == ReduceKind::kArgMax || reduction.kind == ReduceKind::kArgMin) {
      return false;
    }
  }
  const size_t rank = k_.domain.size();
  for (const KInstr& instr : k_.instrs) {
    std::vector<bool> vars(rank, false), rvars(64, false);
    if (instr.scope < 0 || instr.op != KOp::kLoad) continue;
    ixCollectVars(instr.index, vars, rvars);
    if (vars[rank - 1]) return true;
  }
  return false;
}

// Segment loop: up to segmentSize() points of the innermost dimension at a time. Each
// outer-scope instruction is an array over the segment, computed by an `omp simd` loop over
// it; each reduction is a loop nest over its reduced dimensions whose innermost loop runs over
// the segment, folding one accumulator per point. See Note [CPU loop structure].

// A segment of up to 1024 points (a whole row of a [G, 1024] split column reduction, Note [Split
// column reductions], so that a task reads whole rows: the weight gradients of a [4096, 1024]
// LayerNorm, 1.66 ms -> 0.94 ms on 2 threads), but no larger than leaves 8 segments to spread
// over threads (down to 256 points), and no larger than 256 KiB of segment arrays.
int64_t CpuRenderer::segmentSize() const {
  int64_t arrays = static_cast<int64_t>(k_.reductions.size());
  for (const KInstr& instr : k_.instrs) arrays += instr.scope == -1;
  int64_t points = 1;
  for (int64_t size : k_.domain) points *= size;
  int64_t size = 1024;
  while (size > 256 && points / size < 8) size /= 2;
  while (size > 16 && size * 8 * arrays > 256 * 1024) size /= 2;
  return size;
}

void CpuRenderer::renderSegmentLoop() {
  const size_t rank = k_.domain.size();
  const std::string last = std::to_string(k_.domain.back());
  const std::string seg = std::to_string(segmentSize());
  segment_var_ = "v" + std::to_string(rank - 1);
  // Values of parameters and constants alone are the same at every point: scalars computed
  // once, so that a pow by such a value takes pow_uniform (`x.square().mean()`: pow(x, 2)).
  varying_.assign(k_.instrs.size(), true);
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    const KInstr& instr = k_.instrs[i];
    const bool leaf = instr.op == KOp::kConst || instr.op == KOp::kParam;
    const bool computed = instr.op == KOp::kUnary || instr.op == KOp::kBinary ||
                          instr.op == KOp::kWhere || instr.op == KOp::kCast;
    bool uniform = instr.scope == -1 && (leaf || computed);
    for (int32_t arg : instr.args) uniform = uniform && !varying_[arg];
    varying_[i] = !uniform;
  }
  std::vector<bool> vars(rank, false), rvars(64, false);
  for (const KInstr& instr : k_.instrs) ixCollectVars(instr.index, vars, rvars);
  for (const KStore& store : k_.stores) ixCollectVars(store.index, vars, rvars);
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    if (!varying_[i]) out_ += "  " + instrLine(i) + "\n";
  }
  out_ += "  for (lf_i64 p = begin; p < end;) {\n";
  out_ += "    const lf_i64 lo = p % " + last + ";\n";
  out_ += "    const lf_i64 n = lf_imin(" + seg + ", lf_imin(" + last + " - lo, end - p));\n";
  out_ += detail::variableLines("    ", "lf_i64", "v", "p", k_.domain, vars, rank - 1);
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    if (k_.instrs[i].scope != -1 || !varying_[i]) continue;
    out_ += "    " + std::string(detail::cpuComputeType(k_.instrs[i].dtype)) + " t" +
            std::to_string(i) + "[" + seg + "];\n";
  }
  // Reductions over the same sizes whose bodies need none of each other's results fold in one
  // loop nest, each element read once for all of them (a Linear's weight and bias gradients).
  std::vector<size_t> before, after;  // outer instructions before the group's loop, after it
  std::vector<int32_t> group;
  auto flush = [&] {
    if (group.empty()) return;
    segmentLines(before, {});
    segmentReductionLines(group);
    before = std::move(after);
    after.clear();
    group.clear();
  };
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    if (k_.instrs[i].scope != -1 || !varying_[i]) continue;
    if (k_.instrs[i].op == KOp::kReduce) {
      if (group.empty() || !joinsGroup(group, static_cast<int32_t>(i), after)) flush();
      group.push_back(static_cast<int32_t>(i));
      after.push_back(i);
      continue;
    }
    (group.empty() ? before : after).push_back(i);
  }
  flush();
  segmentLines(before, storeText("      "));
  out_ += "    p += n;\n  }\n";
}

bool CpuRenderer::joinsGroup(const std::vector<int32_t>& group, int32_t at,
                             const std::vector<size_t>& after) const {
  const KReduction& first = k_.reductions[k_.instrs[group[0]].ivalue];
  const int32_t k = static_cast<int32_t>(k_.instrs[at].ivalue);
  if (k_.reductions[k].sizes != first.sizes) return false;
  const std::set<size_t> later(after.begin(), after.end());  // the group's reductions are in it
  for (const KInstr& instr : k_.instrs) {
    if (instr.scope != k) continue;
    for (int32_t arg : instr.args) {
      if (later.count(static_cast<size_t>(arg))) return false;
    }
  }
  return true;
}

void CpuRenderer::segmentLines(const std::vector<size_t>& instrs, const std::string& tail) {
  if (instrs.empty() && tail.empty()) return;
  out_ += "#pragma omp simd\n    for (lf_i64 s = 0; s < n; ++s) {\n";
  out_ += "      const lf_i64 " + segment_var_ + " = lo + s;\n";
  for (size_t i : instrs) {
    out_ += "      t" + std::to_string(i) +
            "[s] = " + instrExpr(k_.instrs[i], static_cast<int32_t>(i)) + ";\n";
  }
  out_ += tail + "    }\n";
}

void CpuRenderer::segmentReductionLines(const std::vector<int32_t>& group) {
  for (int32_t at : group) {
    const KReduction& reduction = k_.reductions[k_.instrs[at].ivalue];
    const std::string type = detail::cpuComputeType(reduction.dtype);
    const std::string acc = "a" + std::to_string(at);
    out_ += "    " + type + " " + acc + "[" + std::to_string(segmentSize()) + "];\n";
    out_ += "    for (lf_i64 s = 0; s < n; ++s) " + acc +
            "[s] = " + reductionInit(reduction.kind, reduction.dtype) + ";\n";
  }
  const KReduction& reduction = k_.reductions[k_.instrs[group[0]].ivalue];
  int64_t count = 1;
  for (int64_t size : reduction.sizes) count *= size;
  if (count == 0) return;
  std::string indent = "    ";
  for (size_t d = 0; d < reduction.sizes.size(); ++d) {
    if (reduction.sizes[d] == 1) continue;
    const std::string r = "r" + std::to_string(d);
    out_ += indent + "for (lf_i64 " + r + " = 0; " + r + " < " +
            std::to_string(reduction.sizes[d]) + "; ++" + r + ") {\n";
    indent += "  ";
  }
  out_ += "#pragma omp simd\n" + indent + "for (lf_i64 s = 0; s < n; ++s) {\n";
  out_ += indent + "  const lf_i64 " + segment_var_ + " = lo + s;\n";
  for (int32_t at : group) {
    const int32_t k = static_cast<int32_t>(k_.instrs[at].ivalue);
    const KReduction& member = k_.reductions[k];
    for (size_t i = 0; i < k_.instrs.size(); ++i) {
      if (k_.instrs[i].scope == k) out_ += indent + "  " + instrLine(i) + "\n";
    }
    const std::string type = detail::cpuComputeType(member.dtype);
    const std::string x = "(" + type + ")t" + std::to_string(member.body);
    out_ +=
        indent + "  " + accumulateLine(member.kind, "a" + std::to_string(at) + "[s]", "", x) + "\n";
  }
  out_ += indent + "}\n";
  while (indent.size() > 4) {
    indent.resize(indent.size() - 2);
    out_ += indent + "}\n";
  }
}

void CpuRenderer::reductionLines(int32_t at) {
  int32_t k = static_cast<int32_t>(k_.instrs[at].ivalue);
  const KReduction& reduction = k_.reductions[k];
  const KInstr& body = k_.instrs[reduction.body];
  bool arg = reduction.kind == ReduceKind::kArgMax || reduction.kind == ReduceKind::kArgMin;
  c10::ScalarType acc_type = arg ? body.dtype : reduction.dtype;
  std::string acc = "a" + std::to_string(at), idx = "x" + std::to_string(at);
  std::string type = detail::cpuComputeType(acc_type);
  const bool nan_flag = foldsWithNanFlag(reduction.kind, acc_type);
  const std::string flag = "n" + std::to_string(at);
  out_ += "    " + type + " " + acc + " = " + reductionInit(reduction.kind, acc_type) + ";\n";
  if (arg) out_ += "    lf_i64 " + idx + " = 0;\n";
  if (nan_flag) out_ += "    int " + flag + " = 0;\n";
  int64_t count = 1;
  std::vector<size_t> looped;  // the reduced dimensions of size > 1
  for (size_t d = 0; d < reduction.sizes.size(); ++d) {
    count *= reduction.sizes[d];
    if (reduction.sizes[d] != 1) looped.push_back(d);
  }
  if (count == 0) return;
  const std::string plain = reduction.kind == ReduceKind::kMax ? "max" : "min";
  std::string pragma =
      nan_flag ? "#pragma omp simd reduction(" + plain + ":" + acc + ") reduction(|:" + flag + ")\n"
               : simdReductionPragma(reduction.kind, acc_type, acc);
  std::string indent = "    ";
  if (arg || looped.size() <= 1) {
    // One flat loop: argmax/argmin record the flat index q.
    out_ += pragma + indent + "for (lf_i64 q = 0; q < " + std::to_string(count) + "; ++q) {\n";
    indent += "  ";
    std::vector<bool> vars(k_.domain.size(), false), rvars(reduction.sizes.size(), false);
    for (const KInstr& instr : k_.instrs) {
      if (instr.scope == k) ixCollectVars(instr.index, vars, rvars);
    }
    out_ += detail::variableLines(indent, "lf_i64", "r", "q", reduction.sizes, rvars,
                                  reduction.sizes.size());
  } else {
    // A loop per reduced dimension, no division in the body; the innermost one vectorizes.
    for (size_t j = 0; j < looped.size(); ++j) {
      std::string r = "r" + std::to_string(looped[j]);
      if (j + 1 == looped.size()) out_ += pragma;
      out_ += indent + "for (lf_i64 " + r + " = 0; " + r + " < " +
              std::to_string(reduction.sizes[looped[j]]) + "; ++" + r + ") {\n";
      indent += "  ";
    }
  }
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    if (k_.instrs[i].scope == k) out_ += indent + instrLine(i) + "\n";
  }
  for (const CpuRowCache& cache : caches_) {
    if (k_.instrs[cache.stats_instr].scope != k) continue;
    out_ += indent + "c" + std::to_string(cache.epilogue_instr) + "[q] = t" +
            std::to_string(cache.stats_instr) + ";\n";
  }
  std::string x = "(" + type + ")t" + std::to_string(reduction.body);
  if (nan_flag) {
    const std::string cmp = reduction.kind == ReduceKind::kMax ? " > " : " < ";
    out_ += indent + acc + " = " + x + cmp + acc + " ? " + x + " : " + acc + ";\n";
    out_ += indent + flag + " |= (int)(" + x + " != " + x + ");\n";
  } else {
    out_ += indent + accumulateLine(reduction.kind, acc, idx, x) + "\n";
  }
  while (indent.size() > 4) {
    indent.resize(indent.size() - 2);
    out_ += indent + "}\n";
  }
  if (nan_flag) {
    out_ += "    " + acc + " = " + flag + " ? (" + type + ")__builtin_nan(\"\") : " + acc + ";\n";
  }
}

}  // namespace lazyfuse::detail
