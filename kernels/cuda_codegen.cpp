#include "kernels/cuda_codegen.h"

#include "kernels/detail/cuda_dialect.h"
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

class CudaRenderer {
 public:
  explicit CudaRenderer(const Kernel& kernel) : k_(kernel) {}

  CudaLaunchShape render(std::string& out) {
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
      out += signature(k_.name, "unsigned char* __restrict__ lf_ws, unsigned int* __restrict__ lf_done") +
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

  /// The kernel of a batch whose members are this kernel with other sizes and bindings; `this`
  /// is the template (Note [CUDA kernel batches]).
  CudaBatchShape renderBatch(std::string& out, const std::string& name, int capacity) {
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
    out += "\n" + batchSignature(shape.vector_name, name) + "{\n" + batchPrologue() + "  const " + ix_ +
           " vend = begin + (end - begin) / 4 * 4;\n" + "  for (" + ix_ + " g = begin / 4 + (" +
           ix_ + ")threadIdx.x; g < vend / 4; g += " + std::to_string(kBlock) + ") {\n    const " +
           ix_ + " p0 = g * 4;\n" + vectorLines(wide) + "  }\n" + pointLoopIn("vend", "end") +
           pointLines() + "  }\n}\n";
    return shape;
  }

 private:
  std::string signature(const std::string& name, const std::string& extra = "") const {
    std::string text = "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlock) +
                       ") " + name + "(";
    for (size_t b = 0; b < k_.buffers.size(); ++b) {
      const KBuffer& buffer = k_.buffers[b];
      text += std::string(b ? ", " : "") + (buffer.output ? "" : "const ") +
              detail::cudaStorageType(buffer.dtype) + "* __restrict__ b" + std::to_string(b);
    }
    for (size_t p = 0; p < k_.params.size(); ++p) {
      text += std::string(p || !k_.buffers.empty() ? ", " : "") +
              (k_.params[p].floating ? "double fp" : "lf_i64 ip") + std::to_string(p);
    }
    if (!extra.empty()) text += (k_.buffers.empty() && k_.params.empty() ? "" : ", ") + extra;
    return text + ") ";
  }

  static std::string batchSignature(const std::string& name, const std::string& batch) {
    return "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(kBlock) + ") " +
           name + "(const __grid_constant__ lf_tab_" + batch + " tab) ";
  }

  /// Finds this block's segment and chunk [begin, end), and binds the segment's buffers and
  /// parameters to the names the body uses.
  std::string batchPrologue() const {
    const std::string chunk = std::to_string(kBatchChunk);
    std::string out =
        "  const lf_i64 c = blockIdx.x;\n  if (c >= tab.blocks) return;\n"
        "  int lo = 0, hi = (int)tab.segments - 1;\n  while (lo < hi) {\n"
        "    const int mid = (lo + hi + 1) / 2;\n"
        "    if (tab.first[mid] <= c) lo = mid; else hi = mid - 1;\n  }\n"
        "  const " + ix_ + " n = (" + ix_ + ")tab.n[lo];\n"
        "  const " + ix_ + " begin = (" + ix_ + ")(c - tab.first[lo]) * " + chunk + ";\n"
        "  const " + ix_ + " end = n - begin < " + chunk + " ? n : begin + " + chunk + ";\n";
    for (size_t b = 0; b < k_.buffers.size(); ++b) {
      const std::string name = "b" + std::to_string(b);
      out += "  " + std::string(k_.buffers[b].output ? "" : "const ") +
             detail::cudaStorageType(k_.buffers[b].dtype) + "* __restrict__ " + name + " = tab." +
             name + "[lo];\n";
    }
    for (size_t p = 0; p < k_.params.size(); ++p) {
      const std::string name = (k_.params[p].floating ? "fp" : "ip") + std::to_string(p);
      out += std::string(k_.params[p].floating ? "  const double " : "  const lf_i64 ") + name +
             " = tab." + name + "[lo];\n";
    }
    return out;
  }

  /// A loop of the block's threads over the points [from, to).
  std::string pointLoopIn(const std::string& from, const std::string& to) const {
    return "  for (" + ix_ + " p = " + from + " + (" + ix_ + ")threadIdx.x; p < " + to +
           "; p += " + std::to_string(kBlock) + ") {\n";
  }

  std::string pointLoop(const std::string& var, int64_t count, int per_block) const {
    std::string step = per_block == kBlock ? "threadIdx.x" : "threadIdx.x / " + std::to_string(group_);
    return "  for (" + ix_ + " " + var + " = (" + ix_ + ")blockIdx.x * " +
           std::to_string(per_block) + " + " + step + "; " + var + " < " + std::to_string(count) +
           "; " + var + " += (" + ix_ + ")gridDim.x * " + std::to_string(per_block) + ") {\n";
  }

  std::string variables(const std::string& indent, const std::string& flat) const {
    std::vector<bool> vars(k_.domain.size(), false), rvars;
    for (const KInstr& instr : k_.instrs) {
      if (instr.scope == -1) ixCollectVars(instr.index, vars, rvars);
    }
    for (const KStore& store : k_.stores) ixCollectVars(store.index, vars, rvars);
    return detail::variableLines(indent, ix_, "v", flat, k_.domain, vars, k_.domain.size());
  }

  std::string pointwiseBody() {
    return pointLoop("p", domainNumel(k_), kBlock) + pointLines() + "  }\n";
  }

  /// The body of a pointwise kernel at point `p`.
  std::string pointLines() const {
    std::string out = variables("    ", "p");
    for (size_t i = 0; i < k_.instrs.size(); ++i) out += "    " + instrLine(i, "") + "\n";
    for (const KStore& store : k_.stores) {
      out += "    b" + std::to_string(store.buffer) + "[" + ixText(store.index) +
             "] = " + storeValue(store) + ";\n";
    }
    return out;
  }

  /// Buffers every access of which is at the flat point index itself.
  std::set<int32_t> contiguousBuffers() const {
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

  std::string vectorBody(const std::set<int32_t>& wide) {
    return pointLoop("g", domainNumel(k_) / 4, kBlock) + "    const " + ix_ + " p0 = g * 4;\n" +
           vectorLines(wide) + "  }\n";
  }

  /// The body of the 4-wide variant at points p0 .. p0 + 3.
  std::string vectorLines(const std::set<int32_t>& wide) {
    std::string out;
    for (int32_t b : wide) {
      std::string pack = "lf_pack4<" + std::string(detail::cudaStorageType(k_.buffers[b].dtype)) + ">";
      std::string name = "w" + std::to_string(b);
      out += k_.buffers[b].output
                 ? "    " + pack + " " + name + ";\n"
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
      std::string pack = "lf_pack4<" + std::string(detail::cudaStorageType(k_.buffers[b].dtype)) + ">";
      out += "    *(" + pack + "*)(b" + std::to_string(b) + " + p0) = w" + std::to_string(b) + ";\n";
    }
    return out;
  }

  /// The loop over points of a group smaller than a warp: the loop runs over warp-wide steps,
  /// so every lane of a warp takes the same iterations (its shuffles need all 32 lanes); a
  /// group past the last point recomputes the last one and does not store.
  std::string subWarpLoop() const {
    const int64_t n = domainNumel(k_);
    const std::string per_warp = std::to_string(32 / group_), per_block = std::to_string(kBlock / group_);
    return "  for (" + ix_ + " pw = (" + ix_ + ")blockIdx.x * " + per_block + " + threadIdx.x / 32 * " +
           per_warp + "; pw < " + std::to_string(n) + "; pw += (" + ix_ + ")gridDim.x * " +
           per_block + ") {\n    const " + ix_ + " pg = pw + threadIdx.x % 32 / " +
           std::to_string(group_) + ";\n    const bool live = pg < " + std::to_string(n) +
           ";\n    const " + ix_ + " p = live ? pg : " + std::to_string(n - 1) + ";\n";
  }

  std::string groupBody() {
    std::string out;
    if (group_ == kBlock) out += sharedMemory();
    if (group_ > 1) out += "  const int lane = threadIdx.x % " + std::to_string(group_) + ";\n";
    out += group_ > 1 && group_ < 32 ? subWarpLoop() : pointLoop("p", domainNumel(k_), kBlock / group_);
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

  /// A kernel whose blocks each fold one slice of the reductions; see Note [CUDA split
  /// reductions].
  std::string splitBody() {
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
    out += "    }\n    __threadfence();\n    __syncthreads();\n"
           "    if (threadIdx.x == 0) lf_last = atomicAdd(&lf_done[lf_pb], 1u) == " + parts +
           " - 1;\n    __syncthreads();\n    if (!lf_last) return;\n    __threadfence();\n";
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

  /// The workspace address of partial result `r` of slice `slice` of point p: 16 bytes, the
  /// value, then the index of an arg reduction.
  std::string partialAddress(const std::string& slice, int r) const {
    return "lf_ws + (((lf_i64)p * " + std::to_string(split_) + " + " + slice + ") * " +
           std::to_string(k_.reductions.size()) + " + " + std::to_string(r) + ") * 16";
  }

  /// Redefines a<at> (and x<at>) as the fold of every slice's partial, in slice order.
  std::string foldPartials(int32_t at, int r) const {
    const KReduction& reduction = k_.reductions[k_.instrs[at].ivalue];
    const c10::ScalarType acc_type = accumulatorType(reduction);
    const std::string type = detail::cudaComputeType(acc_type), i = std::to_string(at);
    const std::string value = "*(volatile const " + type + "*)(" + partialAddress("j", r) + ")";
    std::string out = "      a" + i + " = " + initValue(reduction.kind, acc_type) + ";\n";
    out += "      for (int j = 0; j < " + std::to_string(split_) + "; ++j) {\n";
    if (isArg(reduction)) {
      const std::string max = reduction.kind == ReduceKind::kArgMax ? "true" : "false";
      out += "        const " + type + " v = " + value + ";\n        const lf_i64 vi = *(volatile const lf_i64*)(" +
             partialAddress("j", r) + " + 8);\n        if (j == 0 || lf_arg_takes(a" + i + ", x" + i +
             ", v, vi, " + max + ")) { a" + i + " = v; x" + i + " = vi; }\n";
    } else {
      out += "        a" + i + " = " + opName(reduction.kind) + "::f(a" + i + ", (" + type + ")" +
             value + ");\n";
    }
    return out + "      }\n";
  }

  std::string sharedMemory() const {
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

  static bool isArg(const KReduction& r) {
    return r.kind == ReduceKind::kArgMax || r.kind == ReduceKind::kArgMin;
  }

  c10::ScalarType accumulatorType(const KReduction& r) const {
    return isArg(r) ? k_.instrs[r.body].dtype : r.dtype;
  }

  /// The fold of reduction instruction `at` over this lane's elements: all of them, or with
  /// `split`, the elements [q<at>lo, q<at>hi) (Note [CUDA split reductions]).
  std::string reductionLines(int32_t at, bool split = false) {
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
      out += "    const " + ix_ + " " + lo + " = (" + ix_ + ")(" + n + " * lf_s / " + parts +
             "), " + hi + " = (" + ix_ + ")(" + n + " * (lf_s + 1) / " + parts + ");\n";
      first = lo + " + " + lane;
      end = hi;
    }
    out += "    " + type + " " + acc + " = " + initValue(reduction.kind, acc_type) + ";\n";
    if (isArg(reduction)) out += "    lf_i64 " + idx + " = " + first + ";\n";
    if (count > 0) {
      out += "    for (" + ix_ + " q = " + first + "; q < " + end + "; q += " +
             std::to_string(group_) + ") {\n";
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

  static const char* opName(ReduceKind kind) {
    switch (kind) {
      case ReduceKind::kSum: return "lf_sum";
      case ReduceKind::kProd: return "lf_prod";
      case ReduceKind::kMax: return "lf_max";
      case ReduceKind::kMin: return "lf_min";
      default: break;
    }
    LF_INTERNAL_ASSERT(false, "no group fold for reduction kind ", static_cast<int>(kind));
  }

  static std::string initValue(ReduceKind kind, c10::ScalarType dtype) {
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

  /// One step of a lane's in-order fold; see Note [CUDA prelude].
  static std::string foldLine(ReduceKind kind, const std::string& acc, const std::string& idx,
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
               cmp + acc + ");\n      " + acc + " = take ? " + x + " : " + acc + ";\n      " +
               idx + " = take ? (lf_i64)q : " + idx + ";";
      }
    }
    LF_INTERNAL_ASSERT(false, "unknown reduction kind ", static_cast<int>(kind));
  }

  // --- instructions, loads and stores ---

  static std::string t(int32_t i) { return "t" + std::to_string(i); }

  std::string instrLine(size_t i, const std::string&) const {
    const KInstr& instr = k_.instrs[i];
    return "const " + std::string(detail::cudaComputeType(instr.dtype)) + " " +
           t(static_cast<int32_t>(i)) + " = " + instrExpr(instr, static_cast<int32_t>(i)) + ";";
  }

  std::string instrExpr(const KInstr& instr, int32_t i) const {
    std::string cast = "(" + std::string(detail::cudaComputeType(instr.dtype)) + ")";
    switch (instr.op) {
      case KOp::kLoad: return cast + loadValue(instr);
      case KOp::kConst: return detail::cudaLiteral(instr.dtype, instr.fvalue, instr.ivalue);
      case KOp::kParam:
        return cast + (k_.params[instr.ivalue].floating ? "fp" : "ip") + std::to_string(instr.ivalue);
      case KOp::kIndex: return cast + "(" + ixText(instr.index) + ")";
      case KOp::kUnary: return cast + "lf_" + instr.fn + "(" + t(instr.args[0]) + ")";
      case KOp::kBinary:
        return cast + "lf_" + binaryName(instr) + "(" + t(instr.args[0]) + ", " + t(instr.args[1]) +
               ")";
      case KOp::kWhere:
        return t(instr.args[0]) + " ? " + cast + t(instr.args[1]) + " : " + cast + t(instr.args[2]);
      case KOp::kCast: return castText(instr.dtype, k_.instrs[instr.args[0]].dtype, t(instr.args[0]));
      case KOp::kReduce:
        return cast + (isArg(k_.reductions[instr.ivalue]) ? "x" : "a") + std::to_string(i);
    }
    LF_INTERNAL_ASSERT(false, "unknown kernel op ", static_cast<int>(instr.op));
  }

  /// A floating pow whose exponent is the same at every point (built from constants and
  /// parameters only) takes eager's pow(Tensor, Scalar) special cases; see Note [CUDA prelude].
  std::string binaryName(const KInstr& instr) const {
    const bool floating = instr.dtype == c10::ScalarType::Float ||
                          instr.dtype == c10::ScalarType::Double;
    if (instr.fn == "pow" && floating && isUniform(instr.args[1])) return "pow_uniform";
    return instr.fn;
  }

  bool isUniform(int32_t i) const {
    const KInstr& instr = k_.instrs[i];
    if (instr.op == KOp::kConst || instr.op == KOp::kParam) return true;
    if (instr.op == KOp::kLoad || instr.op == KOp::kIndex || instr.op == KOp::kReduce) return false;
    for (int32_t arg : instr.args) {
      if (!isUniform(arg)) return false;
    }
    return true;
  }

  /// `value` (of type `from`) converted to `to`. A floating value becomes uint8 through int64,
  /// as c10's casts do (-1.0 -> 255); a direct conversion would saturate on the GPU.
  static std::string castText(c10::ScalarType to, c10::ScalarType from, const std::string& value) {
    const std::string type = detail::cudaComputeType(to);
    if (to == c10::ScalarType::Byte && c10::isFloatingType(from)) {
      return "(" + type + ")(lf_i64)" + value;
    }
    return "(" + type + ")" + value;
  }

  /// The element of `buffer` at `index`: a lane of its 4-wide pack in a vector body.
  std::string element(int32_t buffer, const IxPtr& index) const {
    if (wide_ && wide_->count(buffer)) {
      return "w" + std::to_string(buffer) + ".v[" + std::to_string(lane_) + "]";
    }
    return "b" + std::to_string(buffer) + "[" + ixText(index) + "]";
  }

  std::string loadValue(const KInstr& instr) const {
    std::string e = element(instr.buffer, instr.index);
    switch (k_.buffers[instr.buffer].dtype) {
      case c10::ScalarType::Bool: return "(" + e + " != 0)";
      case c10::ScalarType::Half: return "lf_h2f(" + e + ")";
      case c10::ScalarType::BFloat16: return "lf_bf16_load(" + e + ")";
      default: return e;
    }
  }

  std::string storeValue(const KStore& store) const {
    std::string value = t(store.value);
    switch (k_.buffers[store.buffer].dtype) {
      case c10::ScalarType::Bool: return "(lf_u8)(" + value + " != 0)";
      case c10::ScalarType::Half: return "lf_f2h((float)" + value + ")";
      case c10::ScalarType::BFloat16: return "lf_bf16_store((float)" + value + ")";
      default: return castText(k_.buffers[store.buffer].dtype, k_.instrs[store.value].dtype, value);
    }
  }

  const Kernel& k_;
  int group_ = 1;
  int split_ = 1;
  std::string ix_ = "lf_i64";
  int lane_ = 0;
  const std::set<int32_t>* wide_ = nullptr;
};

}  // namespace

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
    result.kernels.push_back(CudaRenderer(*kernel).render(result.source));
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
    result.batches.push_back(CudaRenderer(shared).renderBatch(result.source, shared.name, capacity));
  }
  return result;
}

}  // namespace lazyfuse
