// Coalescing kernel domains (Note [Coalescing kernel domains]): which dimensions become one,
// which stay apart, and the index expressions afterwards.
#include "lowering/passes.h"
#include "test/cpp/kernel_test_builder.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lazyfuse {
namespace {

using c10::ScalarType;
using testing::KernelBuilder;

IxPtr v(int index) { return ixVar(index); }

/// out = a + b over `domain`, a read at `a_index` and b at `b_index`, out
/// written contiguously.
Kernel add(const std::vector<int64_t>& domain, IxPtr a_index, IxPtr b_index) {
  KernelBuilder k("k", domain);
  const int32_t a = k.buffer(ScalarType::Float, false), b = k.buffer(ScalarType::Float, false);
  const int32_t out = k.buffer(ScalarType::Float, true);
  const int32_t sum = k.fn("add", ScalarType::Float,
                           {k.load(a, ScalarType::Float, std::move(a_index)),
                            k.load(b, ScalarType::Float, std::move(b_index))});
  k.store(sum, out, ixFlatIndex(domain));
  return k.k;
}

/// The index texts of the loads and the store of `kernel`, in order.
std::vector<std::string> indexTexts(const Kernel& kernel) {
  std::vector<std::string> texts;
  for (const KInstr& instr : kernel.instrs) {
    if (instr.op == KOp::kLoad) texts.push_back(ixText(instr.index));
  }
  for (const KStore& store : kernel.stores) texts.push_back(ixText(store.index));
  return texts;
}

TEST(CoalesceDomainTest, ContiguousDimensionsBecomeOne) {
  Kernel k = add({4, 3, 5}, ixFlatIndex({4, 3, 5}), ixFlatIndex({4, 3, 5}));
  coalesceDomain(k);
  EXPECT_EQ(k.domain, (std::vector<int64_t>{60}));
  EXPECT_EQ(indexTexts(k), (std::vector<std::string>{"v0", "v0", "v0"}));
}

TEST(CoalesceDomainTest, TrailingUnitDimensionsAreDroppedAndWhatIsLeftMerges) {
  // A [256, 64, 1, 1] weight.
  Kernel k = add({256, 64, 1, 1}, ixFlatIndex({256, 64, 1, 1}), ixFlatIndex({256, 64, 1, 1}));
  coalesceDomain(k);
  EXPECT_EQ(k.domain, (std::vector<int64_t>{16384}));
  EXPECT_EQ(indexTexts(k), (std::vector<std::string>{"v0", "v0", "v0"}));
}

TEST(CoalesceDomainTest, BroadcastOperandKeepsItsDimensionsApart) {
  // b is a row broadcast over the first dimension: its index does not walk [4,
  // 5] as one.
  Kernel k = add({4, 5}, ixFlatIndex({4, 5}), v(1));
  coalesceDomain(k);
  EXPECT_EQ(k.domain, (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(indexTexts(k), (std::vector<std::string>{"(v0 * 5 + v1)", "v1", "(v0 * 5 + v1)"}));
}

TEST(CoalesceDomainTest, TransposedOperandKeepsItsDimensionsApart) {
  Kernel k = add({3, 4}, ixFlatIndex({3, 4}), ixOffset({v(0), v(1)}, {1, 3}));
  coalesceDomain(k);
  EXPECT_EQ(k.domain, (std::vector<int64_t>{3, 4}));
}

TEST(CoalesceDomainTest, InnerDimensionsMergeUpToTheFirstThatCannot) {
  // b broadcasts over the first dimension only: the last two merge, the first
  // stays.
  Kernel k = add({2, 3, 4}, ixFlatIndex({2, 3, 4}), ixOffset({v(1), v(2)}, {4, 1}));
  coalesceDomain(k);
  EXPECT_EQ(k.domain, (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(indexTexts(k), (std::vector<std::string>{"(v0 * 12 + v1)", "v1", "(v0 * 12 + v1)"}));
}

TEST(CoalesceDomainTest, NonAffineIndexStopsTheMergeOfWhatItUses) {
  // b's index divides the last variable: no strides describe it.
  Kernel uses =
      add({3, 4}, ixFlatIndex({3, 4}), ixAdd(ixMul(v(0), ixConst(2)), ixDiv(v(1), ixConst(2))));
  coalesceDomain(uses);
  EXPECT_EQ(uses.domain, (std::vector<int64_t>{3, 4}));
  // One that uses only the first variable is renumbered, not a reason to stop.
  Kernel other = add({2, 3, 4}, ixFlatIndex({2, 3, 4}), ixMod(v(0), ixConst(2)));
  coalesceDomain(other);
  EXPECT_EQ(other.domain, (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(indexTexts(other),
            (std::vector<std::string>{"(v0 * 12 + v1)", "v0 % 2", "(v0 * 12 + v1)"}));
}

TEST(CoalesceDomainTest, LeadingUnitDimensionMergesOnlyWhereIndicesAllow) {
  // [4, 1, 16] with per-row statistics (a row group's epilogue): the rows stay
  // rows.
  Kernel rows = add({4, 1, 16}, ixFlatIndex({4, 1, 16}), ixFlatIndex({4, 1}));
  coalesceDomain(rows);
  EXPECT_EQ(rows.domain, (std::vector<int64_t>{4, 1, 16}));
  Kernel flat = add({4, 1, 16}, ixFlatIndex({4, 1, 16}), ixFlatIndex({4, 1, 16}));
  coalesceDomain(flat);
  EXPECT_EQ(flat.domain, (std::vector<int64_t>{64}));
}

TEST(CoalesceDomainTest, KernelsWithReductionsAreLeftAlone) {
  KernelBuilder k("sum", {4, 1});
  const int32_t a = k.buffer(ScalarType::Float, false), out = k.buffer(ScalarType::Float, true);
  const int32_t body = k.load(a, ScalarType::Float, ixAdd(ixMul(v(0), ixConst(8)), ixRVar(0)), 0);
  const int32_t total = k.reduce(ReduceKind::kSum, {8}, body, ScalarType::Float);
  k.store(total, out, ixFlatIndex({4, 1}));
  Kernel kernel = k.k;
  coalesceDomain(kernel);
  EXPECT_EQ(kernel.domain, (std::vector<int64_t>{4, 1}));
}

}  // namespace
}  // namespace lazyfuse
