// Note [Affine over a domain] (lowering/ix_affine.cpp): ixAffineOver finds the affine form of
// index expressions with division and modulo where one holds at every point of the domain, and
// only there; checked against the expression's value at every point.
#include "lowering/kernel_ir.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace lazyfuse {
namespace {

int64_t evalIx(const IxPtr& ix, const std::vector<int64_t>& v) {
  switch (ix->op) {
    case IxOp::kConst: return ix->value;
    case IxOp::kVar: return v.at(ix->value);
    case IxOp::kAdd: return evalIx(ix->a, v) + evalIx(ix->b, v);
    case IxOp::kMul: return evalIx(ix->a, v) * evalIx(ix->b, v);
    case IxOp::kDiv: return evalIx(ix->a, v) / evalIx(ix->b, v);
    case IxOp::kMod: return evalIx(ix->a, v) % evalIx(ix->b, v);
    case IxOp::kMin: return std::min(evalIx(ix->a, v), evalIx(ix->b, v));
    case IxOp::kMax: return std::max(evalIx(ix->a, v), evalIx(ix->b, v));
    default: return -1;
  }
}

/// Whether ixAffineOver's form (when it finds one) agrees with `ix` at every point.
bool affineAgrees(const IxPtr& ix, const std::vector<int64_t>& sizes, bool& found) {
  std::vector<int64_t> coeffs;
  int64_t constant = 0;
  found = ixAffineOver(ix, sizes, coeffs, constant);
  if (!found) return true;
  std::vector<int64_t> v(sizes.size(), 0);
  for (;;) {
    int64_t want = constant;
    for (size_t d = 0; d < sizes.size(); ++d) want += coeffs[d] * v[d];
    if (evalIx(ix, v) != want) return false;
    size_t d = sizes.size();
    while (d-- > 0 && ++v[d] == sizes[d]) v[d] = 0;
    if (d == static_cast<size_t>(-1)) return true;
  }
}

/// The offset at which a [out] row-major view reads a contiguous [in] source of the same numel:
/// what a reshape's lowering computes (flat index, then the source's digits).
IxPtr reshapeOffset(const std::vector<int64_t>& out, const std::vector<int64_t>& in) {
  const IxPtr flat = ixFlatIndex(out);
  std::vector<IxPtr> index;
  int64_t inner = 1;
  for (size_t d = in.size(); d-- > 0;) {
    index.insert(index.begin(), ixMod(ixDiv(flat, ixConst(inner)), ixConst(in[d])));
    inner *= in[d];
  }
  std::vector<int64_t> strides(in.size(), 1);
  for (size_t d = in.size() - 1; d-- > 0;) strides[d] = strides[d + 1] * in[d + 1];
  return ixOffset(index, strides);
}

TEST(IxAffineTest, ReshapesOfContiguousTensorsAreAffine) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{1024, 256}, {8, 128, 256}},
      {{8, 128, 256}, {1024, 256}},
      {{32, 128, 64}, {8, 4, 128, 64}},
      {{6, 10}, {2, 3, 10}},
      {{4, 9}, {36}},
      {{36}, {4, 9}},
      {{3, 1, 5}, {15}},
      {{2, 6}, {4, 3}}};  // [2, 6] splits source rows
  for (const auto& [out, in] : cases) {
    bool found = false;
    const IxPtr ix = reshapeOffset(out, in);
    EXPECT_TRUE(affineAgrees(ix, out, found)) << ixText(ix);
    EXPECT_TRUE(found) << ixText(ix);  // a contiguous reshape reads at the flat index
  }
}

TEST(IxAffineTest, RandomDivModExpressionsNeverGetAWrongForm) {
  std::mt19937 rng(7);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % n); };
  int found_count = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::vector<int64_t> sizes = {1 + pick(6), 1 + pick(8)};
    IxPtr ix = ixAdd(ixMul(ixVar(0), ixConst(pick(12))), ixMul(ixVar(1), ixConst(1 + pick(4))));
    for (int k = 0, n = 1 + static_cast<int>(pick(3)); k < n; ++k) {
      const IxPtr c = ixConst(1 + pick(12));
      const IxPtr scale = ixConst(1 + pick(24));
      IxPtr term = pick(2) ? ixDiv(ix, c) : ixMod(ix, c);
      ix = pick(2) ? ixAdd(ixMul(term, scale), ixMod(ix, c)) : ixMul(term, scale);
    }
    bool found = false;
    ASSERT_TRUE(affineAgrees(ix, sizes, found)) << ixText(ix);
    found_count += found;
  }
  EXPECT_GT(found_count, 100);  // the rules do find forms, not only refuse
}

}  // namespace
}  // namespace lazyfuse
