#include "kernels/cpu_codegen.h"

#include "kernels/detail/cpu_dialect.h"
#include "kernels/detail/render_text.h"
#include "lazy_ir/check.h"

#include <set>

namespace lazyfuse {
namespace {

// Note [CPU loop structure]
// A kernel function runs the points [begin, end) of its domain, flattened row-major, so that a
// caller can split the domain between threads at any point. Without reductions the points are
// walked in row segments of the last dimension: the outer variables are computed once per
// segment by div/mod, and the innermost variable is the induction variable of an
// `omp simd` loop holding the body; instructions that do not depend on it are hoisted out of
// it. With reductions (or an empty domain, a single point) there is one loop over points, the
// variables come from the flat point index, and each kReduce is a loop over its reduced
// elements: one flat loop when it reduces one dimension (or is an argmax/argmin, which records
// the flat index), else a loop per reduced dimension, so that no variable needs a division.
// Each fold loop is `omp simd` with a reduction clause (not argmax/argmin); a floating max or
// min there folds plainly and keeps a flag for NaN (see foldsWithNanFlag). A kernel whose
// reductions read along the innermost point variable (column sums, layer norm's weight
// gradient) takes a third form instead, the segment loop: up to 256 neighbouring points of
// the innermost dimension at a time, every outer-scope value an array over the segment, and
// each reduction a loop nest over its reduced dimensions whose innermost `omp simd` loop runs
// over the segment, one accumulator per point; each cache line is read once and the fold
// vectorizes across points (a column sum of [8192, 1024], one thread: 104 ms -> 3.1-3.5 ms).
// Every index is 64-bit; only the variables that are used are computed.

class KernelRenderer {
 public:
  explicit KernelRenderer(const Kernel& kernel) : k_(kernel) {}

  std::string render() {
    checkKernel(k_);
    out_ = "extern \"C\" void " + k_.name +
           "(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,\n" +
           "    const double* fparams) {\n";
    if (domainNumel(k_) > 0) {
      declareBuffers();
      if (readsAcrossPoints()) {
        renderSegmentLoop();
      } else if (k_.domain.empty() || !k_.reductions.empty()) {
        renderPointLoop();
      } else {
        renderRowLoop();
      }
    }
    out_ += "}\n";
    return std::move(out_);
  }

  /// The function of a row group: `stats` then `epilogue`, row by row, in one loop over the rows
  /// [begin, end). See Note [CPU row groups].
  static std::string renderRowGroup(const CpuFunction& function) {
    const Kernel& stats = *function.kernel;
    const Kernel& epilogue = *function.epilogue;
    checkKernel(stats);
    checkKernel(epilogue);
    KernelRenderer first(stats), second(epilogue);
    first.caches_ = second.caches_ = function.caches;
    second.buffer_base_ = static_cast<int32_t>(stats.buffers.size());
    second.param_base_ = static_cast<int32_t>(stats.params.size());
    std::string out = "extern \"C\" void " + function.name +
                      "(lf_i64 begin, lf_i64 end, void* const* buffers, const lf_i64* iparams,\n" +
                      "    const double* fparams) {\n";
    first.declareBuffers();
    second.declareBuffers();
    out += first.out_ + second.out_;
    const std::string row = std::to_string(epilogue.domain.back());
    for (const CpuRowCache& cache : function.caches) {
      const c10::ScalarType dtype = epilogue.instrs[cache.epilogue_instr].dtype;
      out += "  " + std::string(detail::cpuComputeType(dtype)) + " c" +
             std::to_string(cache.epilogue_instr) + "[" + row + "];\n";
    }
    first.out_.clear();
    second.out_.clear();
    first.pointBody();
    second.rowBlock();
    out += "  for (lf_i64 p = begin; p < end; ++p) {\n" + first.out_ + second.out_ + "  }\n}\n";
    return out;
  }

 private:
  void declareBuffers() {
    std::set<int32_t> used;
    for (const KInstr& instr : k_.instrs) {
      if (instr.op == KOp::kLoad) used.insert(instr.buffer);
    }
    for (const KStore& store : k_.stores) used.insert(store.buffer);
    for (int32_t b : used) {
      const KBuffer& buffer = k_.buffers[b];
      std::string type =
          std::string(buffer.output ? "" : "const ") + detail::cpuStorageType(buffer.dtype) + "*";
      out_ += "  " + type + " " + bufferName(b) + " = (" + type + ")buffers[" +
              std::to_string(buffer_base_ + b) + "];\n";
    }
  }

  // --- the loops, see Note [CPU loop structure] ---

  void renderRowLoop() {
    size_t rank = k_.domain.size();
    std::vector<bool> vars(rank, false), rvars;
    for (const KInstr& instr : k_.instrs) ixCollectVars(instr.index, vars, rvars);
    for (const KStore& store : k_.stores) ixCollectVars(store.index, vars, rvars);
    std::vector<bool> inner = innerInstrs();
    varying_ = inner;
    std::string last = std::to_string(k_.domain.back());
    std::string v = "v" + std::to_string(rank - 1);
    out_ += "  for (lf_i64 p = begin; p < end;) {\n";
    out_ += rank == 1 ? "    const lf_i64 lo = p;\n    const lf_i64 hi = end;\n"
                      : "    const lf_i64 lo = p % " + last + ";\n    const lf_i64 hi = lf_imin(" +
                            last + ", lo + (end - p));\n";
    out_ += detail::variableLines("    ", "lf_i64", "v", "p", k_.domain, vars, rank - 1);
    for (size_t i = 0; i < k_.instrs.size(); ++i) {
      if (!inner[i]) out_ += "    " + instrLine(i) + "\n";
    }
    out_ += "#pragma omp simd\n    for (lf_i64 " + v + " = lo; " + v + " < hi; ++" + v + ") {\n";
    for (size_t i = 0; i < k_.instrs.size(); ++i) {
      if (inner[i]) out_ += "      " + instrLine(i) + "\n";
    }
    storeLines("      ");
    out_ += "    }\n    p += hi - lo;\n  }\n";
  }

  /// Which instructions depend on the innermost variable and must stay in the inner loop.
  std::vector<bool> innerInstrs() const {
    size_t rank = k_.domain.size();
    std::vector<bool> inner(k_.instrs.size(), false);
    for (size_t i = 0; i < k_.instrs.size(); ++i) {
      const KInstr& instr = k_.instrs[i];
      std::vector<bool> vars(rank, false), rvars;
      ixCollectVars(instr.index, vars, rvars);
      inner[i] = vars[rank - 1];
      for (int32_t arg : instr.args) inner[i] = inner[i] || inner[arg];
    }
    return inner;
  }

  void renderPointLoop() {
    out_ += "  for (lf_i64 p = begin; p < end; ++p) {\n";
    pointBody();
    out_ += "  }\n";
  }

  /// The body of the point loop: point p's variables, instructions (reductions are loops) and
  /// stores.
  void pointBody() {
    varying_.assign(k_.instrs.size(), false);
    for (size_t i = 0; i < k_.instrs.size(); ++i) varying_[i] = k_.instrs[i].scope != -1;
    std::vector<bool> vars(k_.domain.size(), false), rvars;
    for (const KInstr& instr : k_.instrs) {
      if (instr.scope == -1) ixCollectVars(instr.index, vars, rvars);
    }
    for (const KStore& store : k_.stores) ixCollectVars(store.index, vars, rvars);
    out_ += detail::variableLines("    ", "lf_i64", "v", "p", k_.domain, vars, k_.domain.size());
    for (size_t i = 0; i < k_.instrs.size(); ++i) {
      const KInstr& instr = k_.instrs[i];
      if (instr.scope != -1) continue;
      if (instr.op == KOp::kReduce) reductionLines(static_cast<int32_t>(i));
      out_ += "    " + instrLine(i) + "\n";
    }
    storeLines("    ");
  }

  /// A row group's epilogue for row p, a block of its own (its names shadow the statistics
  /// kernel's): the row loop of one whole row, where each cached instruction is read from the
  /// array the statistics kernel filled. See Note [CPU row groups].
  void rowBlock() {
    const size_t rank = k_.domain.size();
    std::vector<bool> vars(rank, false), rvars;
    for (const KInstr& instr : k_.instrs) ixCollectVars(instr.index, vars, rvars);
    for (const KStore& store : k_.stores) ixCollectVars(store.index, vars, rvars);
    std::vector<int64_t> rows(k_.domain.begin(), k_.domain.end() - 1);
    varying_ = innerInstrs();
    std::vector<std::string> cached(k_.instrs.size());
    for (const CpuRowCache& cache : caches_) {
      cached[cache.epilogue_instr] = "c" + std::to_string(cache.epilogue_instr);
    }
    const std::string v = "v" + std::to_string(rank - 1);
    out_ += "    {\n";
    out_ += detail::variableLines("      ", "lf_i64", "v", "p", rows, vars, rank - 1);
    for (size_t i = 0; i < k_.instrs.size(); ++i) {
      if (!varying_[i]) out_ += "      " + instrLine(i) + "\n";
    }
    out_ += "#pragma omp simd\n      for (lf_i64 " + v + " = 0; " + v + " < " +
            std::to_string(k_.domain.back()) + "; ++" + v + ") {\n";
    for (size_t i = 0; i < k_.instrs.size(); ++i) {
      if (!varying_[i]) continue;
      if (cached[i].empty()) {
        out_ += "        " + instrLine(i) + "\n";
        continue;
      }
      out_ += "        const " + std::string(detail::cpuComputeType(k_.instrs[i].dtype)) + " t" +
              std::to_string(i) + " = " + cached[i] + "[" + v + "];\n";
    }
    storeLines("        ");
    out_ += "      }\n    }\n";
  }

  /// Whether the kernel folds columns: a reduction loop reads at the innermost point variable,
  /// so neighbouring points read neighbouring elements, and folding them side by side (a
  /// segment) vectorizes and reads each cache line once. argmax/argmin keep the point loop.
  bool readsAcrossPoints() const {
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

  /// 256 points (a 1 KiB run of floats per reduced row, which the prefetcher streams: a column
  /// sum of [8192, 1024] took 3.1-3.5 ms on one thread with 256, 3.8-4.8 ms with 64), fewer when
  /// the arrays would pass 256 KiB of stack.
  int64_t segmentSize() const {
    int64_t arrays = static_cast<int64_t>(k_.reductions.size());
    for (const KInstr& instr : k_.instrs) arrays += instr.scope == -1;
    int64_t size = 256;
    while (size > 16 && size * 8 * arrays > 256 * 1024) size /= 2;
    return size;
  }

  void renderSegmentLoop() {
    const size_t rank = k_.domain.size();
    const std::string last = std::to_string(k_.domain.back());
    const std::string seg = std::to_string(segmentSize());
    segment_var_ = "v" + std::to_string(rank - 1);
    varying_.assign(k_.instrs.size(), true);
    std::vector<bool> vars(rank, false), rvars(64, false);
    for (const KInstr& instr : k_.instrs) ixCollectVars(instr.index, vars, rvars);
    for (const KStore& store : k_.stores) ixCollectVars(store.index, vars, rvars);
    out_ += "  for (lf_i64 p = begin; p < end;) {\n";
    out_ += "    const lf_i64 lo = p % " + last + ";\n";
    out_ += "    const lf_i64 n = lf_imin(" + seg + ", lf_imin(" + last + " - lo, end - p));\n";
    out_ += detail::variableLines("    ", "lf_i64", "v", "p", k_.domain, vars, rank - 1);
    for (size_t i = 0; i < k_.instrs.size(); ++i) {
      if (k_.instrs[i].scope != -1) continue;
      out_ += "    " + std::string(detail::cpuComputeType(k_.instrs[i].dtype)) + " t" +
              std::to_string(i) + "[" + seg + "];\n";
    }
    std::vector<size_t> pending;
    for (size_t i = 0; i < k_.instrs.size(); ++i) {
      if (k_.instrs[i].scope != -1) continue;
      if (k_.instrs[i].op == KOp::kReduce) {
        segmentLines(pending, {});
        pending.clear();
        segmentReductionLines(static_cast<int32_t>(i));
      }
      pending.push_back(i);
    }
    segmentLines(pending, storeText("      "));
    out_ += "    p += n;\n  }\n";
  }

  /// An `omp simd` loop over the segment computing outer-scope instructions `instrs` into their
  /// arrays, then `tail`.
  void segmentLines(const std::vector<size_t>& instrs, const std::string& tail) {
    if (instrs.empty() && tail.empty()) return;
    out_ += "#pragma omp simd\n    for (lf_i64 s = 0; s < n; ++s) {\n";
    out_ += "      const lf_i64 " + segment_var_ + " = lo + s;\n";
    for (size_t i : instrs) {
      out_ += "      t" + std::to_string(i) + "[s] = " +
              instrExpr(k_.instrs[i], static_cast<int32_t>(i)) + ";\n";
    }
    out_ += tail + "    }\n";
  }

  void segmentReductionLines(int32_t at) {
    const int32_t k = static_cast<int32_t>(k_.instrs[at].ivalue);
    const KReduction& reduction = k_.reductions[k];
    const std::string type = detail::cpuComputeType(reduction.dtype);
    const std::string acc = "a" + std::to_string(at);
    out_ += "    " + type + " " + acc + "[" + std::to_string(segmentSize()) + "];\n";
    out_ += "    for (lf_i64 s = 0; s < n; ++s) " + acc + "[s] = " +
            reductionInit(reduction.kind, reduction.dtype) + ";\n";
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
    for (size_t i = 0; i < k_.instrs.size(); ++i) {
      if (k_.instrs[i].scope == k) out_ += indent + "  " + instrLine(i) + "\n";
    }
    const std::string x = "(" + type + ")t" + std::to_string(reduction.body);
    out_ += indent + "  " + accumulateLine(reduction.kind, acc + "[s]", "", x) + "\n";
    out_ += indent + "}\n";
    while (indent.size() > 4) {
      indent.resize(indent.size() - 2);
      out_ += indent + "}\n";
    }
  }

  void reductionLines(int32_t at) {
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
    std::string pragma = nan_flag ? "#pragma omp simd reduction(" + plain + ":" + acc +
                                        ") reduction(|:" + flag + ")\n"
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

  /// Whether a point loop folds max/min as a plain max/min plus a flag saying a NaN was seen:
  /// floating max and min. The plain fold vectorizes to max/min instructions, where a fold that
  /// keeps the NaN itself (lf_max, lf_min) needs compares and blends: the max of each row of
  /// [4096, 1024] floats, one thread, 0.56 ms -> 0.23 ms. The result is a quiet NaN when the
  /// flag is set, as eager's is. See Note [CPU loop structure].
  static bool foldsWithNanFlag(ReduceKind kind, c10::ScalarType dtype) {
    const bool floating = dtype == c10::ScalarType::Float || dtype == c10::ScalarType::Double;
    return floating && (kind == ReduceKind::kMax || kind == ReduceKind::kMin);
  }

  /// The `omp simd` line that lets the compiler vectorize a fold: each lane keeps a partial
  /// result and the lanes are combined after the loop. Floating max/min combine with lf_max and
  /// lf_min, which keep a NaN (Note [CPU prelude]); argmax/argmin stay scalar (first index).
  static std::string simdReductionPragma(ReduceKind kind, c10::ScalarType dtype,
                                         const std::string& acc) {
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

  static std::string reductionInit(ReduceKind kind, c10::ScalarType dtype) {
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
  static std::string accumulateLine(ReduceKind kind, const std::string& acc, const std::string& idx,
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

  // --- instructions and stores ---

  std::string instrLine(size_t i) const {
    const KInstr& instr = k_.instrs[i];
    return "const " + std::string(detail::cpuComputeType(instr.dtype)) + " t" + std::to_string(i) +
           " = " + instrExpr(instr, static_cast<int32_t>(i)) + ";";
  }

  /// Instruction `i`'s value; in a segment loop an outer-scope one is its array's element.
  std::string t(int32_t i) const {
    const bool element = !segment_var_.empty() && k_.instrs[i].scope == -1;
    return "t" + std::to_string(i) + (element ? "[s]" : "");
  }

  std::string instrExpr(const KInstr& instr, int32_t i) const {
    std::string type = detail::cpuComputeType(instr.dtype);
    std::string cast = "(" + type + ")";
    switch (instr.op) {
      case KOp::kLoad: return cast + loadExpr(instr);
      case KOp::kConst: return detail::cpuLiteral(instr.dtype, instr.fvalue, instr.ivalue);
      case KOp::kParam:
        return cast + (k_.params[instr.ivalue].floating ? "fparams[" : "iparams[") +
               std::to_string(param_base_ + instr.ivalue) + "]";
      case KOp::kIndex: return cast + "(" + ixText(instr.index) + ")";
      case KOp::kUnary: return cast + "lf_" + instr.fn + "(" + t(instr.args[0]) + ")";
      case KOp::kBinary:
        return cast + "lf_" + binaryName(instr) + "(" + t(instr.args[0]) + ", " +
               t(instr.args[1]) + ")";
      case KOp::kWhere:
        return t(instr.args[0]) + " ? " + cast + t(instr.args[1]) + " : " + cast + t(instr.args[2]);
      case KOp::kCast: return cast + t(instr.args[0]);
      case KOp::kReduce: {
        const KReduction& reduction = k_.reductions[instr.ivalue];
        bool arg = reduction.kind == ReduceKind::kArgMax || reduction.kind == ReduceKind::kArgMin;
        return cast + (arg ? "x" : "a") + std::to_string(i) + (segment_var_.empty() ? "" : "[s]");
      }
    }
    LF_INTERNAL_ASSERT(false, "unknown kernel op ", static_cast<int>(instr.op));
  }

  /// A floating pow whose exponent stays the same over the loop it is in takes the special
  /// cases eager's pow(Tensor, Scalar) takes; see Note [CPU prelude].
  std::string binaryName(const KInstr& instr) const {
    const bool floating = instr.dtype == c10::ScalarType::Float ||
                          instr.dtype == c10::ScalarType::Double;
    if (instr.fn == "pow" && floating && !varying_[instr.args[1]]) return "pow_uniform";
    return instr.fn;
  }

  std::string loadExpr(const KInstr& instr) const {
    std::string element = bufferName(instr.buffer) + "[" + ixText(instr.index) + "]";
    switch (k_.buffers[instr.buffer].dtype) {
      case c10::ScalarType::Bool: return "(" + element + " != 0)";
      case c10::ScalarType::Half: return "(float)" + element;
      case c10::ScalarType::BFloat16: return "lf_bf16_load(" + element + ")";
      default: return element;
    }
  }

  void storeLines(const std::string& indent) { out_ += storeText(indent); }

  std::string storeText(const std::string& indent) const {
    std::string out;
    for (const KStore& store : k_.stores) {
      std::string value = t(store.value);
      std::string element = bufferName(store.buffer) + "[" + ixText(store.index) + "]";
      switch (k_.buffers[store.buffer].dtype) {
        case c10::ScalarType::Bool: value = "(lf_u8)(" + value + " != 0)"; break;
        case c10::ScalarType::Half: value = "(_Float16)(float)" + value; break;
        case c10::ScalarType::BFloat16: value = "lf_bf16_store((float)" + value + ")"; break;
        default:
          value = "(" + std::string(detail::cpuStorageType(k_.buffers[store.buffer].dtype)) + ")" +
                  value;
      }
      out += indent + element + " = " + value + ";\n";
    }
    return out;
  }

  std::string bufferName(int32_t b) const { return "b" + std::to_string(buffer_base_ + b); }

  const Kernel& k_;
  std::string out_;
  std::vector<bool> varying_;  // per instruction: whether it changes inside its innermost loop
  std::string segment_var_;    // in a segment loop: the innermost point variable
  // In a row group's function (Note [CPU row groups]): where this kernel's buffers and
  // parameters start in the function's arrays, and the values its two kernels share.
  int32_t buffer_base_ = 0;
  int32_t param_base_ = 0;
  std::vector<CpuRowCache> caches_;
};

}  // namespace

std::string renderCpp(const std::vector<const Kernel*>& kernels) {
  std::vector<CpuFunction> functions;
  for (const Kernel* kernel : kernels) {
    LF_INTERNAL_ASSERT(kernel, "renderCpp of a null kernel");
    functions.push_back(CpuFunction{kernel->name, kernel, nullptr, {}});
  }
  return renderCppFunctions(functions);
}

std::string renderCppFunctions(const std::vector<CpuFunction>& functions) {
  std::string out = "// codegen version " + std::to_string(kCpuCodegenVersion) + "\n";
  out += detail::cpuPrelude();
  std::set<std::string> names;
  for (const CpuFunction& function : functions) {
    LF_INTERNAL_ASSERT(function.kernel, "renderCpp of a null kernel");
    LF_INTERNAL_ASSERT(names.insert(function.name).second, "two functions named ", function.name);
    if (!function.epilogue) {
      LF_INTERNAL_ASSERT(function.name == function.kernel->name, "kernel ", function.kernel->name,
                         " renamed ", function.name);
      out += "\n" + KernelRenderer(*function.kernel).render();
      continue;
    }
    out += "\n" + KernelRenderer::renderRowGroup(function);
  }
  return out;
}

}  // namespace lazyfuse
