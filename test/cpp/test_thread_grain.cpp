// The thread grain of fused CPU kernels (Note [Thread grain]): a kernel of cheap instructions
// splits across threads at 32768 points, as ATen's kernels do; calls of expensive kernel
// functions and reductions make it split earlier, in proportion to the work of a point.
#include "lowering/kernel_ir.h"
#include "test/cpp/kernel_test_builder.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lazyfuse {
namespace {

using c10::ScalarType;
using testing::KernelBuilder;

/// out = f(x) over [n] for each unary function name in `fns`, applied in order.
Kernel chain(int64_t n, const std::vector<std::string>& fns) {
  KernelBuilder k("k", {n});
  const int32_t x = k.buffer(ScalarType::Float, false), out = k.buffer(ScalarType::Float, true);
  int32_t value = k.load(x, ScalarType::Float, ixVar(0));
  for (const std::string& fn : fns) value = k.fn(fn, ScalarType::Float, {value});
  k.store(value, out, ixVar(0));
  return k.k;
}

TEST(ThreadGrainTest, CheapKernelsKeepAtensGrain) {
  EXPECT_EQ(threadGrain(chain(1 << 20, {})), 32768);
  EXPECT_EQ(threadGrain(chain(1 << 20, {"neg"})), 32768);
  EXPECT_EQ(threadGrain(chain(1 << 20, {"neg", "abs"})), 32768);
}

TEST(ThreadGrainTest, ExpensiveCallsSplitEarlier) {
  // A load and one erf: 1 + 8 instructions' worth against a binary op's 3.
  EXPECT_EQ(costPerPoint(chain(4096, {"erf"})), 9);
  EXPECT_EQ(threadGrain(chain(4096, {"erf"})), 32768 * 3 / 9);
  EXPECT_LT(threadGrain(chain(4096, {"erf", "exp"})), threadGrain(chain(4096, {"erf"})));
  // A GELU-sized kernel (256x128 points) is split between two threads.
  EXPECT_LT(threadGrain(chain(32768, {"erf"})), 32768 / 2);
}

TEST(ThreadGrainTest, ReductionsCountTheElementsTheyFold) {
  // exp(x) summed over 10 elements per point, [256] points: a log-softmax's statistics.
  KernelBuilder k("k", {256});
  const int32_t x = k.buffer(ScalarType::Float, false), out = k.buffer(ScalarType::Float, true);
  const IxPtr row = ixAdd(ixMul(ixVar(0), ixConst(10)), ixRVar(0));
  const int32_t body =
      k.fn("exp", ScalarType::Float, {k.load(x, ScalarType::Float, row, /*scope=*/0)}, 0);
  const int32_t sum = k.reduce(ReduceKind::kSum, {10}, body, ScalarType::Float);
  k.store(sum, out, ixVar(0));
  EXPECT_EQ(workPerPoint(k.k), 11);
  EXPECT_EQ(costPerPoint(k.k), 10 * (1 + 8) + 1);
  EXPECT_EQ(threadGrain(k.k), 32768 * 3 / (10 * (1 + 8) + 1));
  // The exp makes it split earlier than the elements folded alone would.
  EXPECT_LT(threadGrain(k.k), 32768 / workPerPoint(k.k));
}

}  // namespace
}  // namespace lazyfuse
