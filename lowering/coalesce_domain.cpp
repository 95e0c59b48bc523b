#include <optional>
#include <vector>

#include "lazy_ir/check.h"
#include "lowering/passes.h"

namespace lazyfuse {
namespace {

// Note [Coalescing kernel domains]
// A kernel's domain is the shape of what it computes. The CPU target runs the
// domain's last dimension as its inner vector loop and computes the other
// variables with a division and a remainder per outer iteration; the CUDA
// target computes every variable from the flat point index. So an optimizer's
// update of a conv weight [64, 64, 3, 3] ran 3-element inner loops under six
// 64-bit divisions, and of a [256, 64, 1, 1] weight 1-element ones. Before a
// kernel without reductions is rendered, a last dimension of size 1 is dropped
// (its variable is 0), and the dimension before the last is merged into it when
// every index expression that uses either is affine in them with coef(v_d) ==
// coef(v_{d+1}) * size(d + 1): each buffer walks the two as one dimension, as
// TensorIterator coalesces. This repeats outwards. The weights above then run
// over [36864] and [16384]; a broadcast or transposed operand keeps apart the
// dimensions it needs apart. Only the last dimension grows: the rows of a CPU
// row group's epilogue (Note [CPU row groups]) must stay those of its
// statistics kernel, and they do, since the statistics are read once per row
// (coefficient 0 in the last dimension).

/// An affine index: constant + sum(coef[v] * v).
struct Affine {
  std::vector<int64_t> coef;
  int64_t constant = 0;
};

/// `ix` as an affine expression of `rank` domain variables, or nothing when it
/// is not one (a division, remainder, min, max or reduction variable in it).
std::optional<Affine> affineOf(const IxPtr& ix, size_t rank) {
  switch (ix->op) {
    case IxOp::kConst: {
      Affine a{std::vector<int64_t>(rank, 0), ix->value};
      return a;
    }
    case IxOp::kVar: {
      Affine a{std::vector<int64_t>(rank, 0), 0};
      a.coef.at(static_cast<size_t>(ix->value)) = 1;
      return a;
    }
    case IxOp::kAdd: {
      std::optional<Affine> a = affineOf(ix->a, rank), b = affineOf(ix->b, rank);
      if (!a || !b) return std::nullopt;
      for (size_t v = 0; v < rank; ++v) a->coef[v] += b->coef[v];
      a->constant += b->constant;
      return a;
    }
    case IxOp::kMul: {
      // The constructors put a constant factor on the right.
      if (ix->b->op != IxOp::kConst) return std::nullopt;
      std::optional<Affine> a = affineOf(ix->a, rank);
      if (!a) return std::nullopt;
      for (int64_t& c : a->coef) c *= ix->b->value;
      a->constant *= ix->b->value;
      return a;
    }
    default:
      return std::nullopt;
  }
}

/// The expression of `a`, in the form ixOffset builds: v0 * c0 + v1 * c1 + ...
/// + constant.
IxPtr fromAffine(const Affine& a) {
  IxPtr ix = ixConst(0);
  for (size_t v = 0; v < a.coef.size(); ++v) {
    if (a.coef[v] != 0) ix = ixAdd(ix, ixMul(ixVar(static_cast<int>(v)), ixConst(a.coef[v])));
  }
  return ixAdd(ix, ixConst(a.constant));
}

/// `ix` with domain variable v replaced by vars[v].
IxPtr substitute(const IxPtr& ix, const std::vector<IxPtr>& vars) {
  if (ix->op == IxOp::kVar) return vars.at(static_cast<size_t>(ix->value));
  if (ix->op == IxOp::kRVar || ix->op == IxOp::kConst) return ix;
  // The constructors of the two-operand expressions, in IxOp's order from kAdd.
  using Constructor = IxPtr (*)(IxPtr, IxPtr);
  static constexpr Constructor kConstructors[] = {ixAdd, ixMul, ixDiv, ixMod, ixMin, ixMax};
  static_assert(static_cast<int>(IxOp::kMax) - static_cast<int>(IxOp::kAdd) == 5);
  const int which = static_cast<int>(ix->op) - static_cast<int>(IxOp::kAdd);
  return kConstructors[which](substitute(ix->a, vars), substitute(ix->b, vars));
}

/// Every index expression of `kernel`: of its loads, index values and stores.
std::vector<IxPtr*> indicesOf(Kernel& kernel) {
  std::vector<IxPtr*> indices;
  for (KInstr& instr : kernel.instrs) {
    if (instr.op == KOp::kLoad || instr.op == KOp::kIndex) indices.push_back(&instr.index);
  }
  for (KStore& store : kernel.stores) indices.push_back(&store.index);
  return indices;
}

bool usesEither(const IxPtr& ix, size_t rank, size_t d) {
  std::vector<bool> vars(rank, false), rvars;
  ixCollectVars(ix, vars, rvars);
  return vars[d] || vars[d + 1];
}

/// Whether domain dimensions d and d + 1 of `kernel` may become one.
bool mergeable(const Kernel& kernel, const std::vector<IxPtr*>& indices, size_t d) {
  const size_t rank = kernel.domain.size();
  for (const IxPtr* ix : indices) {
    if (!usesEither(*ix, rank, d)) continue;
    std::optional<Affine> a = affineOf(*ix, rank);
    if (!a || a->coef[d] != a->coef[d + 1] * kernel.domain[d + 1]) return false;
  }
  return true;
}

void merge(Kernel& kernel, const std::vector<IxPtr*>& indices, size_t d) {
  const size_t rank = kernel.domain.size();
  std::vector<IxPtr> renumbered;
  for (size_t v = 0; v < rank; ++v) {
    renumbered.push_back(v <= d ? ixVar(static_cast<int>(v)) : ixVar(static_cast<int>(v) - 1));
  }
  for (IxPtr* ix : indices) {
    if (!usesEither(*ix, rank, d)) {
      *ix = substitute(*ix, renumbered);
      continue;
    }
    Affine a = *affineOf(*ix, rank);
    a.coef[d] = a.coef[d + 1];
    a.coef.erase(a.coef.begin() + static_cast<std::ptrdiff_t>(d) + 1);
    *ix = fromAffine(a);
  }
  kernel.domain[d] *= kernel.domain[d + 1];
  kernel.domain.erase(kernel.domain.begin() + static_cast<std::ptrdiff_t>(d) + 1);
}

/// Merges domain dimension d + 1, of size 1 (its variable is 0), into d.
void dropUnit(Kernel& kernel, const std::vector<IxPtr*>& indices, size_t d) {
  std::vector<IxPtr> vars;
  for (size_t v = 0; v <= d; ++v) vars.push_back(ixVar(static_cast<int>(v)));
  vars.push_back(ixConst(0));
  for (IxPtr* ix : indices) *ix = substitute(*ix, vars);
  kernel.domain.pop_back();
}

}  // namespace

void coalesceDomain(Kernel& kernel) {
  if (!kernel.reductions.empty() || domainNumel(kernel) == 0) return;
  std::vector<IxPtr*> indices = indicesOf(kernel);
  // Only into the last dimension, the inner loop; rows stay rows (see the
  // Note).
  while (kernel.domain.size() >= 2) {
    const size_t d = kernel.domain.size() - 2;
    if (kernel.domain[d + 1] == 1) {
      dropUnit(kernel, indices, d);
    } else if (mergeable(kernel, indices, d)) {
      merge(kernel, indices, d);
    } else {
      break;
    }
  }
}

}  // namespace lazyfuse
