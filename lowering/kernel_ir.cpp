#include "lowering/kernel_ir.h"

#include "lazy_ir/check.h"
#include "lazy_ir/hash.h"
#include "lowering/kernel_functions.h"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace lazyfuse {
namespace {

// Note [Ix simplification]
// The constructors fold only what is cheap and obviously right: constant operands, neutral and
// absorbing constants, and a few nestings that make index math of views shorter. Constants are
// moved to the right of kAdd and kMul so that `4 + v0` and `v0 + 4` get the same text (ixText
// is used to merge equal loads). Every rule holds for the non-negative operands Note [Kernel IR]
// promises; none of them needs to know the range of a variable.

IxPtr make(IxOp op, IxPtr a, IxPtr b) {
  auto ix = std::make_shared<Ix>();
  ix->op = op;
  ix->hash = hashCombine(hashCombine(static_cast<uint64_t>(op) + 1, a->hash), b->hash);
  ix->a = std::move(a);
  ix->b = std::move(b);
  return ix;
}

IxPtr leaf(IxOp op, int64_t value) {
  auto ix = std::make_shared<Ix>();
  ix->op = op;
  ix->value = value;
  ix->hash = hashCombine(static_cast<uint64_t>(op) + 1, static_cast<uint64_t>(value));
  return ix;
}

bool isConst(const IxPtr& ix) { return ix->op == IxOp::kConst; }

bool isConst(const IxPtr& ix, int64_t value) {
  return ix->op == IxOp::kConst && ix->value == value;
}

/// Puts a constant operand of a commutative op on the right.
void constToRight(IxPtr& a, IxPtr& b) {
  if (isConst(a) && !isConst(b)) std::swap(a, b);
}

std::string constText(int64_t value) {
  // -9223372036854775808 is not a literal in C: the minus applies to a number that overflows.
  if (value == INT64_MIN) return "(-9223372036854775807LL - 1)";
  std::string digits = std::to_string(value);
  if (value > INT32_MAX || value < INT32_MIN) digits += "LL";
  return value < 0 ? "(" + digits + ")" : digits;
}

bool isProductLike(const IxPtr& ix) {
  return ix->op == IxOp::kMul || ix->op == IxOp::kDiv || ix->op == IxOp::kMod;
}

/// Text of an operand of `*`, `/` or `%`: a product-like operand gets parentheses, so that
/// `(a * b) / c` and `a * (b / c)` stay apart; sums always carry their own.
std::string factorText(const IxPtr& ix) {
  std::string text = ixText(ix);
  return isProductLike(ix) ? "(" + text + ")" : text;
}

}  // namespace

IxPtr ixConst(int64_t value) { return leaf(IxOp::kConst, value); }

IxPtr ixVar(int index) {
  LF_INTERNAL_ASSERT(index >= 0, "index variable v", index);
  return leaf(IxOp::kVar, index);
}

IxPtr ixRVar(int index) {
  LF_INTERNAL_ASSERT(index >= 0, "reduction variable r", index);
  return leaf(IxOp::kRVar, index);
}

IxPtr ixAdd(IxPtr a, IxPtr b) {
  LF_INTERNAL_ASSERT(a && b, "ixAdd of a null expression");
  constToRight(a, b);
  if (isConst(a) && isConst(b)) return ixConst(a->value + b->value);
  if (isConst(b, 0)) return a;
  // (x + c1) + c2 -> x + (c1 + c2): offsets of nested views collapse into one constant.
  if (isConst(b) && a->op == IxOp::kAdd && isConst(a->b)) {
    return ixAdd(a->a, ixConst(a->b->value + b->value));
  }
  return make(IxOp::kAdd, std::move(a), std::move(b));
}

IxPtr ixMul(IxPtr a, IxPtr b) {
  LF_INTERNAL_ASSERT(a && b, "ixMul of a null expression");
  constToRight(a, b);
  if (isConst(a) && isConst(b)) return ixConst(a->value * b->value);
  if (isConst(b, 0)) return b;
  if (isConst(b, 1)) return a;
  // (x * c1) * c2 -> x * (c1 * c2).
  if (isConst(b) && a->op == IxOp::kMul && isConst(a->b)) {
    return ixMul(a->a, ixConst(a->b->value * b->value));
  }
  return make(IxOp::kMul, std::move(a), std::move(b));
}

IxPtr ixDiv(IxPtr a, IxPtr b) {
  LF_INTERNAL_ASSERT(a && b, "ixDiv of a null expression");
  LF_INTERNAL_ASSERT(!isConst(b, 0), "index division by zero");
  if (isConst(a) && isConst(b)) return ixConst(a->value / b->value);
  if (isConst(a, 0) || isConst(b, 1)) return a;
  if (isConst(b) && b->value > 0) {
    // (x * c1) / c2 -> x * (c1 / c2) when c2 divides c1 (exact for non-negative x).
    if (a->op == IxOp::kMul && isConst(a->b) && a->b->value % b->value == 0) {
      return ixMul(a->a, ixConst(a->b->value / b->value));
    }
    // (x / c1) / c2 -> x / (c1 * c2), floor division of non-negative values.
    if (a->op == IxOp::kDiv && isConst(a->b) && a->b->value > 0) {
      return ixDiv(a->a, ixConst(a->b->value * b->value));
    }
  }
  return make(IxOp::kDiv, std::move(a), std::move(b));
}

IxPtr ixMod(IxPtr a, IxPtr b) {
  LF_INTERNAL_ASSERT(a && b, "ixMod of a null expression");
  LF_INTERNAL_ASSERT(!isConst(b, 0), "index modulo by zero");
  if (isConst(a) && isConst(b)) return ixConst(a->value % b->value);
  if (isConst(b, 1)) return ixConst(0);
  if (isConst(a, 0)) return a;
  if (isConst(b) && b->value > 0) {
    // (x * c1) % c2 -> 0 when c2 divides c1.
    if (a->op == IxOp::kMul && isConst(a->b) && a->b->value % b->value == 0) return ixConst(0);
    // (x % c1) % c2 -> x % c2 when c2 divides c1.
    if (a->op == IxOp::kMod && isConst(a->b) && a->b->value % b->value == 0) {
      return ixMod(a->a, std::move(b));
    }
  }
  return make(IxOp::kMod, std::move(a), std::move(b));
}

IxPtr ixMin(IxPtr a, IxPtr b) {
  LF_INTERNAL_ASSERT(a && b, "ixMin of a null expression");
  if (isConst(a) && isConst(b)) return ixConst(std::min(a->value, b->value));
  if (a == b) return a;
  return make(IxOp::kMin, std::move(a), std::move(b));
}

IxPtr ixMax(IxPtr a, IxPtr b) {
  LF_INTERNAL_ASSERT(a && b, "ixMax of a null expression");
  if (isConst(a) && isConst(b)) return ixConst(std::max(a->value, b->value));
  if (a == b) return a;
  return make(IxOp::kMax, std::move(a), std::move(b));
}

// Sums always carry parentheses and `*`, `/`, `%` parenthesize product-like operands, so the
// text parses back to exactly one tree: equal text means an equal expression. kMin and kMax
// render as calls to the lf_imin/lf_imax helpers every target defines for 64-bit integers.
std::string ixText(const IxPtr& ix) {
  LF_INTERNAL_ASSERT(ix, "ixText of a null expression");
  switch (ix->op) {
    case IxOp::kVar: return "v" + std::to_string(ix->value);
    case IxOp::kRVar: return "r" + std::to_string(ix->value);
    case IxOp::kConst: return constText(ix->value);
    case IxOp::kAdd: return "(" + ixText(ix->a) + " + " + ixText(ix->b) + ")";
    case IxOp::kMul: return factorText(ix->a) + " * " + factorText(ix->b);
    case IxOp::kDiv: return factorText(ix->a) + " / " + factorText(ix->b);
    case IxOp::kMod: return factorText(ix->a) + " % " + factorText(ix->b);
    case IxOp::kMin: return "lf_imin(" + ixText(ix->a) + ", " + ixText(ix->b) + ")";
    case IxOp::kMax: return "lf_imax(" + ixText(ix->a) + ", " + ixText(ix->b) + ")";
  }
  LF_INTERNAL_ASSERT(false, "unknown index op ", static_cast<int>(ix->op));
}

bool ixSame(const IxPtr& a, const IxPtr& b) {
  if (a == b) return true;
  if (!a || !b || a->hash != b->hash || a->op != b->op || a->value != b->value) return false;
  return ixSame(a->a, b->a) && ixSame(a->b, b->b);
}

bool ixSame(const std::vector<IxPtr>& a, const std::vector<IxPtr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t d = 0; d < a.size(); ++d) {
    if (!ixSame(a[d], b[d])) return false;
  }
  return true;
}

uint64_t ixHash(const std::vector<IxPtr>& index) {
  uint64_t h = index.size();
  for (const IxPtr& ix : index) h = hashCombine(h, ix ? ix->hash : 0);
  return h;
}

bool ixUsesRVar(const IxPtr& ix) {
  if (!ix) return false;
  if (ix->op == IxOp::kRVar) return true;
  return ixUsesRVar(ix->a) || ixUsesRVar(ix->b);
}

IxPtr ixOffset(const std::vector<IxPtr>& index, const std::vector<int64_t>& strides) {
  LF_INTERNAL_ASSERT(index.size() == strides.size(), "index of rank ", index.size(), " with ",
                     strides.size(), " strides");
  IxPtr offset = ixConst(0);
  for (size_t d = 0; d < index.size(); ++d) {
    offset = ixAdd(offset, ixMul(index[d], ixConst(strides[d])));
  }
  return offset;
}

bool ixAddAffine(const IxPtr& ix, int64_t scale, std::vector<int64_t>& coeffs, int64_t& constant) {
  switch (ix->op) {
    case IxOp::kConst: constant += scale * ix->value; return true;
    case IxOp::kVar:
      if (ix->value < 0 || ix->value >= static_cast<int64_t>(coeffs.size())) return false;
      coeffs[ix->value] += scale;
      return true;
    case IxOp::kAdd:
      return ixAddAffine(ix->a, scale, coeffs, constant) &&
             ixAddAffine(ix->b, scale, coeffs, constant);
    case IxOp::kMul:
      if (ix->b->op == IxOp::kConst)
        return ixAddAffine(ix->a, scale * ix->b->value, coeffs, constant);
      if (ix->a->op == IxOp::kConst)
        return ixAddAffine(ix->b, scale * ix->a->value, coeffs, constant);
      return false;
    default: return false;
  }
}

IxPtr ixFlatIndex(const std::vector<int64_t>& domain) {
  std::vector<IxPtr> vars;
  std::vector<int64_t> strides(domain.size());
  int64_t stride = 1;
  for (size_t d = domain.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= domain[d];
  }
  for (size_t d = 0; d < domain.size(); ++d) vars.push_back(ixVar(static_cast<int>(d)));
  return ixOffset(vars, strides);
}

int64_t domainNumel(const Kernel& kernel) {
  int64_t numel = 1;
  for (int64_t size : kernel.domain) numel *= size;
  return numel;
}

namespace {

/// The elements one point of reduction `r` folds.
int64_t foldedElements(const KReduction& r) {
  int64_t n = 1;
  for (int64_t size : r.sizes) n *= size;
  return n;
}

}  // namespace

int64_t workPerPoint(const Kernel& kernel) {
  int64_t work = 1;
  for (const KReduction& r : kernel.reductions) work += foldedElements(r);
  return work;
}

int64_t costPerPoint(const Kernel& kernel) {
  // Units of one cheap instruction (a load, an add); a call of an expensive kernel function
  // (exp, erf, tanh: a libmvec call) costs about as much as eight. See threadGrain.
  constexpr int64_t kExpensiveCall = 8;
  int64_t cost = 0;
  for (const KInstr& instr : kernel.instrs) {
    if (instr.op == KOp::kConst || instr.op == KOp::kParam) continue;
    int64_t c = 1;
    if (instr.op == KOp::kUnary || instr.op == KOp::kBinary) {
      const KernelFunction* fn = findKernelFunction(instr.fn);
      if (fn != nullptr && fn->expensive) c = kExpensiveCall;
    }
    cost += instr.scope < 0 ? c : c * foldedElements(kernel.reductions.at(instr.scope));
  }
  return std::max<int64_t>(cost, 1);
}

int64_t threadGrain(const Kernel& kernel) {
  // Note [Thread grain]
  // at::parallel_for runs a range on one thread up to `grain` points and splits larger ones
  // between threads. ATen's own kernels use 32768 elements of a cheap op, the work that makes
  // waking a second thread (a few microseconds) pay; a fused point that folds reductions or
  // calls exp or erf costs many times that, so such a kernel splits earlier: its grain is the
  // same work, measured by costPerPoint against a binary op's three instructions (two loads and
  // the op). A GELU over 256x128 (32K points, one erf each) ran on one thread in 35-45 us where
  // two take 21-26 us; a kernel of cheap instructions keeps the 32768 points of before.
  constexpr int64_t kGrainElements = 32768;
  constexpr int64_t kCheapPoint = 3;
  const int64_t by_work = kGrainElements / workPerPoint(kernel);
  const int64_t by_cost = kGrainElements * kCheapPoint / costPerPoint(kernel);
  return std::max<int64_t>(1, std::min(by_work, by_cost));
}

}  // namespace lazyfuse
