#include "lowering/passes.h"

#include <optional>
#include <utility>
#include <vector>

namespace lazyfuse {
namespace {

// Note [Coalescing kernel domains]
// A kernel's domain is the shape of what it computes. The CPU target runs the domain's last
// dimension as its inner vector loop and computes the other variables with a division and a
// remainder per outer iteration; the CUDA target computes every variable from the flat point
// index. So an optimizer's update of a conv weight [64, 64, 3, 3] ran 3-element inner loops
// under six 64-bit divisions, and of a [256, 64, 1, 1] weight 1-element ones. Before a kernel
// without reductions is rendered, a last dimension of size 1 is dropped (its variable is 0),
// and the dimension before the last is merged into it when every index expression that uses
// either is affine in them with coef(v_d) == coef(v_{d+1}) * size(d + 1): each buffer walks the
// two as one dimension, as TensorIterator coalesces. This repeats outwards. The weights above
// then run over [36864] and [16384]; a broadcast or transposed operand keeps apart the
// dimensions it needs apart. Only the last dimension grows: the rows of a CPU row group's
// epilogue (Note [CPU row groups]) must stay those of its statistics kernel, and they do, since
// the statistics are read once per row (coefficient 0 in the last dimension).

/// An affine index: constant + sum(coef[v] * v).
struct Affine {
  std::vector<int64_t> coef;
  int64_t constant = 0;
};

/// `ix` as an affine expression of `rank` domain variables, or nothing when it is not one.
std::optional<Affine> affineOf(const IxPtr& ix, size_t rank) {
  Affine a{std::vector<int64_t>(rank, 0), 0};
  if (!ixAddAffine(ix, 1, a.coef, a.constant)) return std::nullopt;
  return a;
}

/// The expression of `a`, in the form ixOffset builds.
IxPtr fromAffine(const Affine& a) {
  std::vector<IxPtr> vars;
  for (size_t v = 0; v < a.coef.size(); ++v) vars.push_back(ixVar(static_cast<int>(v)));
  return ixAdd(ixOffset(vars, a.coef), ixConst(a.constant));
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

/// Whether `ix` uses one of the last two of `rank` domain variables.
bool usesLastTwo(const IxPtr& ix, size_t rank) {
  std::vector<bool> vars(rank, false), rvars;
  ixCollectVars(ix, vars, rvars);
  return vars[rank - 2] || vars[rank - 1];
}

/// Merges the last two dimensions of `kernel`'s domain when every index that uses them walks
/// them as one; returns whether it did.
bool mergeLastTwo(Kernel& kernel, const std::vector<IxPtr*>& indices) {
  const size_t rank = kernel.domain.size(), d = rank - 2;
  std::vector<std::pair<IxPtr*, IxPtr>> merged;
  for (IxPtr* ix : indices) {
    if (!usesLastTwo(*ix, rank)) continue;  // its variables keep their numbers
    std::optional<Affine> a = affineOf(*ix, rank);
    if (!a || a->coef[d] != a->coef[d + 1] * kernel.domain[d + 1]) return false;
    a->coef[d] = a->coef[d + 1];
    a->coef.pop_back();
    merged.emplace_back(ix, fromAffine(*a));
  }
  for (auto& [ix, index] : merged) *ix = std::move(index);
  kernel.domain[d] *= kernel.domain[d + 1];
  kernel.domain.pop_back();
  return true;
}

/// Drops the last dimension of `kernel`'s domain, of size 1: its variable is 0.
void dropLastUnit(Kernel& kernel, const std::vector<IxPtr*>& indices) {
  std::vector<IxPtr> vars;
  for (size_t v = 0; v + 1 < kernel.domain.size(); ++v) vars.push_back(ixVar(static_cast<int>(v)));
  vars.push_back(ixConst(0));
  for (IxPtr* ix : indices) *ix = substitute(*ix, vars);
  kernel.domain.pop_back();
}

}  // namespace

void coalesceDomain(Kernel& kernel) {
  if (!kernel.reductions.empty() || domainNumel(kernel) == 0) return;
  std::vector<IxPtr*> indices = indicesOf(kernel);
  // Only into the last dimension, the inner loop: rows stay rows (see the Note).
  while (kernel.domain.size() >= 2) {
    if (kernel.domain.back() == 1) {
      dropLastUnit(kernel, indices);
    } else if (!mergeLastTwo(kernel, indices)) {
      break;
    }
  }
}

}  // namespace lazyfuse
