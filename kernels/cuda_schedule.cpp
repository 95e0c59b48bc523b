#include "kernels/detail/cuda_schedule.h"

#include "lazy_ir/check.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace lazyfuse::detail {
namespace {

// Note [CUDA kernel structure]
// Every kernel runs blocks of 256 threads over its points with a grid-stride loop, so the
// runner may pick any grid (it sizes it from the SM count). A kernel without reductions gives
// each thread one point; its 4-wide variant gives each thread 4 consecutive points and moves the
// buffers indexed by the flat point itself (the contiguous ones) with one 4-element load or
// store. A kernel with reductions gives each point a group of G threads, G = 1, 8, 32 or 256,
// chosen by the longest reduction: the lanes of a group split each reduction's elements
// round-robin (consecutive lanes read consecutive elements) and combine them as Note [CUDA
// prelude] says; lane 0 stores. When the reduced elements are strided and the points
// contiguous (a reduction over a leading dimension), G = 1 keeps the reads coalesced across
// threads. Index arithmetic is 32-bit when every index, point and reduced element count stays
// below 2^30 (and the grid-stride step, which the runner keeps below 2^30, cannot overflow it),
// else 64-bit.

constexpr int kBlock = kCudaBlock;
constexpr int64_t kIndex32Limit = int64_t{1} << 30;

/// The largest value `ix` takes when every variable is at most its bound (operands are
/// non-negative, Note [Kernel IR], so each operation is monotone in them). `widest` also gets
/// the largest magnitude of every subexpression: a numerator under `%` or the discarded side of
/// a min can be far larger than the result, and 32-bit math must hold those too.
int64_t ixUpperBound(const IxPtr& ix, const std::vector<int64_t>& vmax,
                     const std::vector<int64_t>& rmax, int64_t& widest) {
  int64_t a = 0, b = 0, result = 0;
  if (ix->a) a = ixUpperBound(ix->a, vmax, rmax, widest);
  if (ix->b) b = ixUpperBound(ix->b, vmax, rmax, widest);
  switch (ix->op) {
    case IxOp::kVar: result = vmax.at(ix->value); break;
    case IxOp::kRVar: result = rmax.at(ix->value); break;
    case IxOp::kConst: result = ix->value; break;
    case IxOp::kAdd: result = saturatingAdd(a, b); break;
    case IxOp::kMul: result = saturatingMul(a, b); break;
    case IxOp::kDiv: result = a; break;
    case IxOp::kMod: result = std::min(a, b); break;
    case IxOp::kMin: result = std::min(a, b); break;
    case IxOp::kMax: result = std::max(a, b); break;
  }
  const int64_t magnitude = result == std::numeric_limits<int64_t>::min()
                                ? std::numeric_limits<int64_t>::max()
                                : std::abs(result);
  widest = std::max(widest, magnitude);
  return result;
}

/// The value of `ix` at the given variables.
int64_t ixEval(const IxPtr& ix, const std::vector<int64_t>& v, const std::vector<int64_t>& r) {
  switch (ix->op) {
    case IxOp::kVar: return v.at(ix->value);
    case IxOp::kRVar: return r.at(ix->value);
    case IxOp::kConst: return ix->value;
    case IxOp::kAdd: return ixEval(ix->a, v, r) + ixEval(ix->b, v, r);
    case IxOp::kMul: return ixEval(ix->a, v, r) * ixEval(ix->b, v, r);
    case IxOp::kDiv: return ixEval(ix->a, v, r) / ixEval(ix->b, v, r);
    case IxOp::kMod: return ixEval(ix->a, v, r) % ixEval(ix->b, v, r);
    case IxOp::kMin: return std::min(ixEval(ix->a, v, r), ixEval(ix->b, v, r));
    case IxOp::kMax: return std::max(ixEval(ix->a, v, r), ixEval(ix->b, v, r));
  }
  LF_INTERNAL_ASSERT(false, "unknown index op ", static_cast<int>(ix->op));
}

std::vector<int64_t> lastIndices(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> last;
  for (int64_t size : sizes) last.push_back(std::max<int64_t>(size - 1, 0));
  return last;
}

/// Whether the reduction's first load walks memory with a stride while neighbouring points are
/// neighbours in memory (a reduction over a leading dimension).
bool readsAcrossPoints(const Kernel& k, const KReduction& reduction, int32_t scope) {
  if (k.domain.empty() || reduction.sizes.empty()) return false;
  for (const KInstr& instr : k.instrs) {
    if (instr.scope != scope || instr.op != KOp::kLoad) continue;
    std::vector<int64_t> v(k.domain.size(), 0), r(reduction.sizes.size(), 0);
    int64_t base = ixEval(instr.index, v, r);
    v.back() = k.domain.back() > 1 ? 1 : 0;
    int64_t point_step = ixEval(instr.index, v, r) - base;
    v.back() = 0;
    r.back() = reduction.sizes.back() > 1 ? 1 : 0;
    int64_t element_step = ixEval(instr.index, v, r) - base;
    return point_step == 1 && element_step != 1;
  }
  return false;
}

// Note [CUDA split reductions]
// A kernel with few points and long reductions would leave most of the GPU idle: one block per
// point (G = 256), or for a reduction over a leading dimension (G = 1) one block per 256 points.
// Such a kernel is split: each of the S blocks of a point (or block of points) folds one slice of
// every reduction's elements and writes its partial result (value, and index for an arg
// reduction) to a workspace; the block that finishes last, counted by an atomic on a zeroed
// counter per point, folds the S partials in slice order (so the result is deterministic) and
// runs the rest of the kernel. Only kernels whose reductions do not read other reductions'
// results split (softmax's sum of exp(x - max) needs the whole max first). S aims at about 1024
// blocks, each folding at least 8192 elements (G = 256) or 32 per thread (G = 1).
constexpr int64_t kSplitBlocks = 1024;

}  // namespace

int64_t numel(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t size : sizes) n *= size;
  return n;
}

int64_t saturatingAdd(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}

int64_t saturatingMul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}

/// True when 32-bit index arithmetic cannot overflow; see Note [CUDA kernel structure].
bool fitsIndex32(const Kernel& k) {
  std::vector<int64_t> vmax = lastIndices(k.domain), rmax;
  int64_t bound = saturatingMul(domainNumel(k), 4);
  for (const KReduction& r : k.reductions) {
    std::vector<int64_t> last = lastIndices(r.sizes);
    rmax.resize(std::max(rmax.size(), last.size()), 0);
    for (size_t d = 0; d < last.size(); ++d) rmax[d] = std::max(rmax[d], last[d]);
    bound = std::max(bound, saturatingAdd(numel(r.sizes), kBlock));
  }
  for (const KInstr& instr : k.instrs) {
    if (instr.index) ixUpperBound(instr.index, vmax, rmax, bound);
  }
  for (const KStore& store : k.stores) ixUpperBound(store.index, vmax, rmax, bound);
  return bound < kIndex32Limit;
}

/// Threads per point; see Note [CUDA kernel structure].
int groupSize(const Kernel& k) {
  int64_t longest = 0;
  bool across = false;
  for (size_t i = 0; i < k.reductions.size(); ++i) {
    longest = std::max(longest, numel(k.reductions[i].sizes));
    across = across || readsAcrossPoints(k, k.reductions[i], static_cast<int32_t>(i));
  }
  if (longest < 16 || (across && domainNumel(k) >= 2048)) return 1;
  if (longest < 256) return 8;
  return longest < 4096 ? 32 : kBlock;
}

std::vector<bool> dependsOnReduction(const Kernel& k) {
  std::vector<bool> late(k.instrs.size(), false);
  for (size_t i = 0; i < k.instrs.size(); ++i) {
    late[i] = k.instrs[i].op == KOp::kReduce;
    for (int32_t arg : k.instrs[i].args) late[i] = late[i] || late[arg];
  }
  return late;
}

int splitCount(const Kernel& k, int group) {
  if (group != kBlock && group != 1) return 1;
  const std::vector<bool> late = dependsOnReduction(k);
  for (size_t i = 0; i < k.instrs.size(); ++i) {
    if (k.instrs[i].scope != -1 && late[i]) return 1;  // a reduction reads a reduction
  }
  int64_t longest = 0;
  for (const KReduction& r : k.reductions) longest = std::max(longest, numel(r.sizes));
  const int64_t points = domainNumel(k);
  const int64_t blocks = group == kBlock ? points : (points + kBlock - 1) / kBlock;
  if (points == 0 || blocks * 4 > kSplitBlocks) return 1;
  const int64_t per_block = group == kBlock ? 8192 : 32;
  const int64_t split = std::min(longest / per_block, kSplitBlocks / blocks);
  return split >= 2 ? static_cast<int>(split) : 1;
}

}  // namespace lazyfuse::detail
