// The segment loop (Note [CPU loop structure], kernels/cpu_reduction_codegen.cpp): column
// reductions over the same rows fold in one loop nest when neither needs the other's result,
// each element read once; a reduction that reads another's result gets a loop of its own; and
// values of parameters alone are scalars, not arrays per point.
#include "kernels/cpu_codegen.h"
#include "kernels/cpu_compiler.h"
#include "test/cpp/kernel_test_builder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace lazyfuse {
namespace {

using c10::ScalarType;
using Builder = testing::KernelBuilder;
using testing::countOccurrences;

constexpr int64_t kRows = 37, kCols = 300;

/// out_sum[c] = sum_r x[r][c] * y[r][c]; out_max[c] = max_r x[r][c]; and, with `dependent`,
/// out_dep[c] = sum_r (x[r][c] - out_sum[c]), which must fold after the first.
Builder columnReductions(bool dependent) {
  Builder k(dependent ? "segment_dependent" : "segment_siblings", {1, kCols});
  const int32_t x = k.buffer(ScalarType::Float, false), y = k.buffer(ScalarType::Float, false);
  const IxPtr at = ixOffset({ixRVar(0), ixVar(1)}, {kCols, 1});
  const int32_t sum_scope = static_cast<int32_t>(k.k.reductions.size());
  const int32_t product = k.fn("mul", ScalarType::Double,
                               {k.op(KOp::kCast, ScalarType::Double,
                                     {k.load(x, ScalarType::Float, at, sum_scope)}, 0, sum_scope),
                                k.op(KOp::kCast, ScalarType::Double,
                                     {k.load(y, ScalarType::Float, at, sum_scope)}, 0, sum_scope)},
                               sum_scope);
  const int32_t sum = k.reduce(ReduceKind::kSum, {kRows}, product, ScalarType::Double);
  const int32_t max_scope = static_cast<int32_t>(k.k.reductions.size());
  const int32_t max = k.reduce(ReduceKind::kMax, {kRows},
                               k.load(x, ScalarType::Float, at, max_scope), ScalarType::Float);
  const int32_t out_sum = k.buffer(ScalarType::Double, true);
  const int32_t out_max = k.buffer(ScalarType::Float, true);
  const IxPtr col = ixVar(1);
  k.store(sum, out_sum, col);
  k.store(max, out_max, col);
  if (dependent) {
    const int32_t dep_scope = static_cast<int32_t>(k.k.reductions.size());
    const int32_t diff = k.fn("sub", ScalarType::Double,
                              {k.op(KOp::kCast, ScalarType::Double,
                                    {k.load(x, ScalarType::Float, at, dep_scope)}, 0, dep_scope),
                               sum},
                              dep_scope);
    const int32_t dep = k.reduce(ReduceKind::kSum, {kRows}, diff, ScalarType::Double);
    k.store(dep, k.buffer(ScalarType::Double, true), col);
  }
  return k;
}

void checkColumns(Builder& k, bool dependent) {
  if (!cpuCompilerAvailable()) GTEST_SKIP() << "no C++ compiler";
  const std::string source = renderCpp({&k.k});
  const CpuCompileResult result = compileCpp(source, {k.k.name});
  ASSERT_TRUE(result.module) << result.error << source;
  std::vector<float> x(kRows * kCols), y(kRows * kCols), out_max(kCols);
  std::vector<double> out_sum(kCols), out_dep(kCols);
  for (int64_t e = 0; e < kRows * kCols; ++e) {
    x[e] = static_cast<float>((e * 7919) % 101) / 8.0f - 6.0f;
    y[e] = static_cast<float>((e * 104729) % 37) / 4.0f;
  }
  std::vector<void*> buffers = {x.data(), y.data(), out_sum.data(), out_max.data()};
  if (dependent) buffers.push_back(out_dep.data());
  result.module->functions.at(0)(0, 131, buffers.data(), nullptr, nullptr);  // two threads
  result.module->functions.at(0)(131, kCols, buffers.data(), nullptr, nullptr);
  for (int64_t c = 0; c < kCols; ++c) {
    double sum = 0;
    float max = -INFINITY;
    for (int64_t r = 0; r < kRows; ++r) {
      sum += static_cast<double>(x[r * kCols + c]) * static_cast<double>(y[r * kCols + c]);
      max = std::max(max, x[r * kCols + c]);
    }
    ASSERT_DOUBLE_EQ(out_sum[c], sum) << c;
    ASSERT_EQ(out_max[c], max) << c;
    if (!dependent) continue;
    double dep = 0;
    for (int64_t r = 0; r < kRows; ++r) dep += static_cast<double>(x[r * kCols + c]) - sum;
    ASSERT_NEAR(out_dep[c], dep, 1e-9 * std::abs(dep) + 1e-9) << c;
  }
}

TEST(CpuSegmentLoopTest, SiblingColumnReductionsFoldInOneLoop) {
  Builder k = columnReductions(/*dependent=*/false);
  EXPECT_EQ(countOccurrences(renderCpp({&k.k}), "for (lf_i64 r0 = 0;"), 1u) << renderCpp({&k.k});
  checkColumns(k, false);
}

TEST(CpuSegmentLoopTest, AReductionOfAnotherReductionsResultFoldsAfterIt) {
  Builder k = columnReductions(/*dependent=*/true);
  EXPECT_EQ(countOccurrences(renderCpp({&k.k}), "for (lf_i64 r0 = 0;"), 2u) << renderCpp({&k.k});
  checkColumns(k, true);
}

}  // namespace
}  // namespace lazyfuse
