#include "kernels/cpu_codegen.h"

#include "kernels/detail/cpu_dialect.h"
#include "kernels/detail/cpu_loop_parts.h"
#include "kernels/detail/cpu_renderer.h"
#include "kernels/detail/render_text.h"
#include "lazy_ir/check.h"

#include <algorithm>
#include <fstream>
#include <set>

namespace lazyfuse {
namespace detail {

// Note [CPU loop structure]
// A kernel function runs the points [begin, end) of its domain, flattened row-major, so that a
// caller can split the domain between threads at any point. Without reductions the points are
// walked in row segments of the last dimension: the outer variables are computed once per
// segment by div/mod, and the innermost variable is the induction variable of an
// `omp simd` loop holding the body; instructions that do not depend on it are hoisted out of
// it. Whole rows of a kernel that reads an input transposed run in tiles first (Note [Tiled
// loops]). With reductions (or an empty domain, a single point) there is one loop over points, the
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

std::string CpuRenderer::render() {
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

std::string CpuRenderer::renderRowGroup(const CpuFunction& function) {
  const Kernel& stats = *function.kernel;
  const Kernel& epilogue = *function.epilogue;
  checkKernel(stats);
  checkKernel(epilogue);
  CpuRenderer first(stats), second(epilogue);
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

void CpuRenderer::declareBuffers() {
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

// Note [Half blocks]
// A Half element is converted to and from float by F16C's vcvtph2ps and vcvtps2ph where the
// CPU has them; GCC 12 does not use them in a vectorized loop (it has no vector _Float16
// without AVX512-FP16), and the branch-free integer conversion (Note [CPU prelude]) costs about
// a dozen vector instructions each way, which held float16 chains at eager's speed. So a row
// loop whose inner loop loads or stores Half buffers contiguously (index affine, step 1 along
// the innermost variable) runs in blocks of kHalfBlock points: each such load is first
// converted for the whole block into a float array, the `omp simd` loop reads those arrays and
// writes each such store into a float array, and the arrays are converted into the Half buffers
// after it. A block's loads all run before its stores, and a donated output is stored at the
// index its input is loaded at (Note [Donated buffers]), so reading and writing one buffer
// stays right. Strided Half loads and stores keep the conversion in the loop.
//
// Note [Streaming stores]
// A kernel that moves more bytes than the last-level cache holds (its contiguous loads and its
// stores, over its whole domain) writes its contiguous outputs with non-temporal stores
// (vmovntdq): its outputs cannot stay in cache for the next step anyway, and a plain store
// first reads each line it writes (read for ownership), which a memory-bound kernel pays as a
// third of its traffic; ATen's kernels pay it too. The loop runs in blocks as above: each such
// store fills an array of its storage type (Half: of float, converted into a second array),
// which lf_stream copies out 32 bytes at a time, and the function ends with an sfence so the
// threads' writes are visible when at::parallel_for returns. A 4M float32 add, two threads
// (48 MB against a 32 MB L3): 1.48-1.59 ms with plain 512-bit stores, 0.84 ms streamed, eager
// 0.92-0.99 ms. A unary op over 4M floats (32 MB) measured no better streamed, so the bound is
// the whole cache. Where the CPU has no AVX, lf_stream is a copy.
namespace {

constexpr int64_t kHalfBlock = 256;  // 1 KiB of floats per array: the arrays stay in L1

/// Whether `ix` walks its buffer with step 1 along variable `var` of a rank-`rank` domain.
bool contiguousAlong(const IxPtr& ix, size_t rank, size_t var) {
  std::vector<int64_t> coeffs(rank, 0);
  int64_t constant = 0;
  return ixAddAffine(ix, 1, coeffs, constant) && coeffs[var] == 1;
}

/// The size of one instance of CPU 0's last-level cache, as sysfs gives it ("32768K"), else
/// 32 MiB. (glibc's sysconf(_SC_LEVEL3_CACHE_SIZE) can count every instance of a large host.)
int64_t lastLevelCacheBytes() {
  static const int64_t bytes = [] {
    int64_t found = 0;
    for (int index = 0; index < 8; ++index) {
      std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) +
                       "/size");
      int64_t size = 0;
      std::string unit;
      if (!(in >> size)) continue;
      in >> unit;
      const int64_t scale = unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : 1;
      found = std::max(found, size * scale);
    }
    return found > 0 ? found : int64_t{32} << 20;
  }();
  return bytes;
}

}  // namespace

void CpuRenderer::renderRowLoop() {
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
  chooseBlocks(inner);
  const std::vector<CpuLoopPart> parts = cpuLoopParts(k_, inner);  // Note [CPU loop parts]
  tileLoop(inner, vars, parts);
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    if (!inner[i]) out_ += "    " + instrLine(i) + "\n";
  }
  for (const CpuLoopPart& part : parts) {
    part_stores_ = part.stores;
    partLoop(part.instrs, v);
  }
  part_stores_.clear();
  out_ += "    p += hi - lo;\n  }\n";
  if (std::count(streams_.begin(), streams_.end(), true) > 0) {
    out_ += "  lf_stream_fence();\n";
  }
  block_var_.clear();
}

// Note [Tiled loops]
// A row loop reads its inputs along the innermost variable. An input that is a transposed view
// (`x.t()`, `x.transpose(-1, -2)`) is contiguous along the second-innermost one instead, and read
// row by row it touches one cache line per element: a [2048, 2048] float transpose read this way
// took 9.5 ms, eager's TensorIterator loop as long. Where a kernel has such a load (an index with
// step 1 along the second-innermost variable, not along the innermost), the row loop first takes,
// wherever [begin, end) holds whole rows, tiles of up to kTileRows rows that share all other
// variables, kTileCols columns at a time: each such load is staged into an array of the tile,
// read down its columns (each cache line once), and the body runs as usual over each row of
// the tile, reading the staged values contiguously, so it vectorizes and its libmvec calls stay
// vector calls; each tile row runs its loop parts and blocks (Note [CPU loop parts], Note [Half
// blocks], Note [Streaming stores]) as a row segment of the plain loop would. Partial rows at
// either end of the range keep the plain row loop. Whether a kernel is tiled depends only on
// its index expressions, never on sizes, so one rendering serves every size of a shape-generic
// family; the tile's bounds are computed from the sizes at run time.
std::vector<bool> CpuRenderer::transposedLoads(const std::vector<bool>& inner) const {
  const size_t rank = k_.domain.size();
  std::vector<bool> out(k_.instrs.size(), false);
  if (rank < 2 || !k_.reductions.empty()) return out;
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    const KInstr& instr = k_.instrs[i];
    out[i] = instr.op == KOp::kLoad && inner[i] && contiguousAlong(instr.index, rank, rank - 2) &&
             !contiguousAlong(instr.index, rank, rank - 1);
  }
  return out;
}

void CpuRenderer::tileLoop(const std::vector<bool>& inner, const std::vector<bool>& vars,
                           const std::vector<CpuLoopPart>& parts) {
  const std::vector<bool> staged = transposedLoads(inner);
  if (std::find(staged.begin(), staged.end(), true) == staged.end()) return;
  const size_t rank = k_.domain.size();
  const std::string last = std::to_string(k_.domain[rank - 1]);
  const std::string rows = std::to_string(k_.domain[rank - 2]);
  const std::string vr = "v" + std::to_string(rank - 2), vl = "v" + std::to_string(rank - 1);
  const std::string tr = std::to_string(kTileRows), tc = std::to_string(kTileCols);
  std::vector<bool> outer_vars = vars;
  outer_vars[rank - 2] = true;
  out_ += "    if (lo == 0 && end - p >= 2 * " + last + ") {  // Note [Tiled loops]\n";
  out_ += detail::variableLines("      ", "lf_i64", "v", "p", k_.domain, outer_vars, rank - 1);
  out_ += "      const lf_i64 tile_row = " + vr + ";\n";
  out_ += "      const lf_i64 w = lf_imin(" + tr + ", lf_imin((end - p) / " + last + ", " + rows +
          " - tile_row));\n";
  out_ += "      for (lf_i64 tc0 = 0; tc0 < " + last + "; tc0 += " + tc + ") {\n";
  out_ += "        const lf_i64 tn = lf_imin(" + tc + ", " + last + " - tc0);\n";
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    if (!staged[i]) continue;
    const std::string array = "g" + std::to_string(i);
    out_ += "        " + std::string(detail::cpuComputeType(k_.instrs[i].dtype)) + " " + array +
            "[" + std::to_string(kTileRows * kTileCols) + "];\n";
    out_ += "        for (lf_i64 j = 0; j < tn; ++j) {\n";
    out_ += "#pragma omp simd\n";
    out_ += "          for (lf_i64 r = 0; r < w; ++r) {\n";
    out_ += "            const lf_i64 " + vr + " = tile_row + r;\n";
    out_ += "            const lf_i64 " + vl + " = tc0 + j;\n";
    out_ += "            " + array + "[r * " + tc + " + j] = (" +
            detail::cpuComputeType(k_.instrs[i].dtype) + ")" + loadExpr(k_.instrs[i]) + ";\n";
    out_ += "          }\n        }\n";
  }
  // Each row of the tile is a row segment [lo, hi) of its own: its parts and blocks run as in
  // the plain loop (Note [CPU loop parts], Note [Half blocks]).
  out_ += "        for (lf_i64 r = 0; r < w; ++r) {\n";
  out_ += "          const lf_i64 " + vr + " = tile_row + r;\n";
  out_ += "          const lf_i64 lo = tc0;\n          const lf_i64 hi = tc0 + tn;\n";
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    if (!inner[i]) out_ += "          " + instrLine(i) + "\n";
  }
  tiled_ = staged;
  for (const CpuLoopPart& part : parts) {
    part_stores_ = part.stores;
    partLoop(part.instrs, vl);
  }
  part_stores_.clear();
  tiled_.clear();
  out_ += "        }\n      }\n";
  out_ += "      p += w * " + last + ";\n      continue;\n    }\n";
}

void CpuRenderer::partLoop(const std::vector<bool>& instrs, const std::string& v) {
  bool blocks = false;
  for (size_t i = 0; i < k_.instrs.size(); ++i) blocks = blocks || (instrs[i] && half_loads_[i]);
  for (size_t k = 0; k < k_.stores.size(); ++k) {
    blocks = blocks || (part_stores_[k] && (half_stores_[k] || streams_[k]));
  }
  if (!blocks) {
    innerLoop(instrs, "    ", v + " = lo; " + v + " < hi; ++" + v);
    return;
  }
  // See Note [Half blocks].
  const std::string block = std::to_string(kHalfBlock);
  const std::string at_start = "      { const lf_i64 " + v + " = c; ";
  out_ += "    for (lf_i64 c = lo; c < hi; c += " + block + ") {\n";
  out_ += "      const lf_i64 n = lf_imin(" + block + ", hi - c);\n";
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    if (!instrs[i] || !half_loads_[i]) continue;
    const std::string array = "h" + std::to_string(i);
    out_ += "      float " + array + "[" + block + "];\n" + at_start + "lf_half_block_load(" +
            array + ", &" + bufferName(k_.instrs[i].buffer) + "[" + ixText(k_.instrs[i].index) +
            "], n); }\n";
  }
  for (size_t k = 0; k < k_.stores.size(); ++k) {
    const std::string type =
        half_stores_[k] ? "float" : detail::cpuStorageType(k_.buffers[k_.stores[k].buffer].dtype);
    if (part_stores_[k] && (half_stores_[k] || streams_[k])) {
      out_ += "      " + type + " s" + std::to_string(k) + "[" + block + "];\n";
    }
  }
  innerLoop(instrs, "      ", v + " = c; " + v + " < c + n; ++" + v);
  for (size_t k = 0; k < k_.stores.size(); ++k) {
    if (!part_stores_[k]) continue;
    const std::string array = "s" + std::to_string(k);
    const std::string target =
        "&" + bufferName(k_.stores[k].buffer) + "[" + ixText(k_.stores[k].index) + "]";
    if (half_stores_[k] && streams_[k]) {  // Note [Streaming stores]
      out_ += "      unsigned short u" + std::to_string(k) + "[" + block + "];\n" +
              "      lf_half_block_store(u" + std::to_string(k) + ", " + array + ", n);\n" +
              at_start + "lf_stream(" + target + ", u" + std::to_string(k) + ", n * 2); }\n";
    } else if (half_stores_[k]) {
      out_ += at_start + "lf_half_block_store(" + target + ", " + array + ", n); }\n";
    } else if (streams_[k]) {
      out_ +=
          at_start + "lf_stream(" + target + ", " + array + ", n * sizeof(" + array + "[0])); }\n";
    }
  }
  out_ += "    }\n";
}

void CpuRenderer::innerLoop(const std::vector<bool>& inner, const std::string& indent,
                            const std::string& bounds) {
  out_ += "#pragma omp simd\n" + indent + "for (lf_i64 " + bounds + ") {\n";
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    if (inner[i]) out_ += indent + "  " + instrLine(i) + "\n";
  }
  storeLines(indent + "  ");
  out_ += indent + "}\n";
}

void CpuRenderer::chooseBlocks(const std::vector<bool>& inner) {
  const size_t rank = k_.domain.size();
  half_loads_.assign(k_.instrs.size(), false);
  half_stores_.assign(k_.stores.size(), false);
  streams_.assign(k_.stores.size(), false);
  bool any = false;
  std::set<int32_t> contiguous;  // buffers read or written with step 1
  for (size_t i = 0; i < k_.instrs.size(); ++i) {
    const KInstr& instr = k_.instrs[i];
    if (instr.op != KOp::kLoad || !inner[i] || !contiguousAlong(instr.index, rank, rank - 1)) {
      continue;
    }
    contiguous.insert(instr.buffer);
    half_loads_[i] = k_.buffers[instr.buffer].dtype == c10::ScalarType::Half;
    any = any || half_loads_[i];
  }
  std::vector<bool> contiguous_store(k_.stores.size(), false);
  for (size_t k = 0; k < k_.stores.size(); ++k) {
    const KStore& store = k_.stores[k];
    contiguous_store[k] = contiguousAlong(store.index, rank, rank - 1);
    if (contiguous_store[k]) contiguous.insert(store.buffer);
    half_stores_[k] =
        contiguous_store[k] && k_.buffers[store.buffer].dtype == c10::ScalarType::Half;
    any = any || half_stores_[k];
  }
  // See Note [Streaming stores].
  int64_t bytes = 0;
  for (int32_t b : contiguous) {
    bytes += static_cast<int64_t>(c10::elementSize(k_.buffers[b].dtype)) * domainNumel(k_);
  }
  if (bytes > lastLevelCacheBytes()) {
    for (size_t k = 0; k < k_.stores.size(); ++k) {
      streams_[k] = contiguous_store[k];
      any = any || streams_[k];
    }
  }
  if (any) block_var_ = "v" + std::to_string(rank - 1);
}

std::vector<bool> CpuRenderer::innerInstrs() const {
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

void CpuRenderer::renderPointLoop() {
  out_ += "  for (lf_i64 p = begin; p < end; ++p) {\n";
  pointBody();
  out_ += "  }\n";
}

void CpuRenderer::pointBody() {
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

void CpuRenderer::rowBlock() {
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

}  // namespace detail

std::string renderCpp(const std::vector<const Kernel*>& kernels) {
  std::vector<CpuFunction> functions;
  for (const Kernel* kernel : kernels) {
    LF_INTERNAL_ASSERT(kernel, "renderCpp of a null kernel");
    functions.push_back(CpuFunction{kernel->name, kernel, nullptr, {}});
  }
  return renderCppFunctions(functions);
}

std::string renderCppHeader() {
  return "// codegen version " + std::to_string(kCpuCodegenVersion) + "\n" + detail::cpuPrelude();
}

std::string renderCppFunction(const CpuFunction& function) {
  LF_INTERNAL_ASSERT(function.kernel, "renderCpp of a null kernel");
  if (function.epilogue) return detail::CpuRenderer::renderRowGroup(function);
  LF_INTERNAL_ASSERT(function.name == function.kernel->name, "kernel ", function.kernel->name,
                     " renamed ", function.name);
  return detail::CpuRenderer(*function.kernel).render();
}

std::string renderCppFunctions(const std::vector<CpuFunction>& functions) {
  std::string out = renderCppHeader();
  std::set<std::string> names;
  for (const CpuFunction& function : functions) {
    LF_INTERNAL_ASSERT(names.insert(function.name).second, "two functions named ", function.name);
    out += "\n" + renderCppFunction(function);
  }
  return out;
}

}  // namespace lazyfuse
