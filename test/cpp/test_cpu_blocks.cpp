// Row loops in blocks (kernels/cpu_codegen.cpp): Note [Half blocks], a row loop converts its
// contiguous Half loads and stores a block at a time (with F16C where the CPU has it) and keeps
// strided ones in the loop, every value c10::Half's conversion of the float result; Note
// [Streaming stores], a kernel that moves more bytes than the cache holds writes its contiguous
// outputs with non-temporal stores, at any alignment.
#include "kernels/cpu_codegen.h"
#include "kernels/cpu_compiler.h"
#include "test/cpp/kernel_test_builder.h"

#include <c10/util/Half.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace lazyfuse {
namespace {

using c10::ScalarType;
using Builder = testing::KernelBuilder;

using testing::countOccurrences;

uint16_t bitsOf(c10::Half h) {
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

// out[r][c] = a[r][c] * 2 + b[c][r] over [rows, cols]: `a` and `out` are contiguous along the
// inner variable, `b` steps `rows` elements.
TEST(HalfBlocksTest, ContiguousHalfConvertsInBlocksAndStridedInTheLoop) {
  if (!cpuCompilerAvailable()) GTEST_SKIP() << "no C++ compiler";
  for (int64_t cols : {1, 7, 255, 256, 257, 600}) {
    const int64_t rows = 3;
    Builder k("half_blocks_" + std::to_string(cols), {rows, cols});
    const int32_t a = k.buffer(ScalarType::Half, false), b = k.buffer(ScalarType::Half, false);
    const int32_t out = k.buffer(ScalarType::Half, true);
    const IxPtr flat = ixOffset({ixVar(0), ixVar(1)}, {cols, 1});
    const int32_t x = k.load(a, ScalarType::Float, flat);
    const int32_t y = k.load(b, ScalarType::Float, ixOffset({ixVar(0), ixVar(1)}, {1, rows}));
    const int32_t twice = k.fn("mul", ScalarType::Float, {x, k.constant(ScalarType::Float, 2)});
    k.store(k.fn("add", ScalarType::Float, {twice, y}), out, flat);
    const std::string source = renderCpp({&k.k});
    // b is read transposed, so whole rows run in tiles (Note [Tiled loops]) and partial rows in
    // the plain loop: each has a's block load and the output's block store, and converts b
    // where it loads it.
    EXPECT_EQ(countOccurrences(source, "lf_half_block_load(h"), 2u) << source;
    EXPECT_EQ(countOccurrences(source, "lf_half_block_store(&"), 2u) << source;
    EXPECT_EQ(countOccurrences(source, "lf_half_load(b"), 2u) << source;
    EXPECT_EQ(countOccurrences(source, "Note [Tiled loops]"), 1u) << source;
    const CpuCompileResult result = compileCpp(source, {k.k.name});
    ASSERT_TRUE(result.module) << result.error;

    std::mt19937 rng(static_cast<uint32_t>(cols));
    std::vector<uint16_t> av(rows * cols), bv(rows * cols), outv(rows * cols, 0);
    for (auto* v : {&av, &bv}) {
      for (uint16_t& e : *v) e = static_cast<uint16_t>(rng());  // any bits: subnormals, inf, NaN
    }
    void* buffers[] = {av.data(), bv.data(), outv.data()};
    // Two calls splitting the points mid-row, as threads do (rows of the plain loop), then one
    // call over all points (whole rows, in a tile).
    const int64_t points = rows * cols, half = points / 2 + 1;
    for (const int64_t cut : {half, points}) {
      std::fill(outv.begin(), outv.end(), uint16_t{0});
      result.module->functions.at(0)(0, cut, buffers, nullptr, nullptr);
      result.module->functions.at(0)(cut, points, buffers, nullptr, nullptr);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const float xa = static_cast<float>(c10::Half(av[r * cols + c], c10::Half::from_bits()));
          const float yb = static_cast<float>(c10::Half(bv[c * rows + r], c10::Half::from_bits()));
          const float want = xa * 2.0f + yb;
          const c10::Half got(outv[r * cols + c], c10::Half::from_bits());
          if (want != want) {
            EXPECT_TRUE(static_cast<float>(got) != static_cast<float>(got)) << r << "," << c;
          } else {
            EXPECT_EQ(outv[r * cols + c], bitsOf(c10::Half(want))) << r << "," << c << " " << want;
          }
        }
      }
    }
  }
}

// A domain far larger than any last-level cache streams its stores; the function is run on a
// few points only (a row loop touches only [begin, end)), into outputs that start off a
// 32-byte boundary, so lf_stream's unaligned head and tail are exercised too.
TEST(StreamingStoresTest, LargeKernelStreamsItsContiguousOutputs) {
  if (!cpuCompilerAvailable()) GTEST_SKIP() << "no C++ compiler";
  Builder k("streaming_stores", {int64_t{1} << 30});
  const int32_t a = k.buffer(ScalarType::Float, false);
  const int32_t sum = k.buffer(ScalarType::Float, true), half = k.buffer(ScalarType::Half, true);
  const int32_t x = k.load(a, ScalarType::Float, ixVar(0));
  const int32_t y = k.fn("add", ScalarType::Float, {x, k.constant(ScalarType::Float, 0.5)});
  k.store(y, sum, ixVar(0));
  k.store(k.fn("mul", ScalarType::Float, {y, x}), half, ixVar(0));
  const std::string source = renderCpp({&k.k});
  EXPECT_EQ(countOccurrences(source, "lf_stream(&"), 2u) << source;
  EXPECT_EQ(countOccurrences(source, "lf_stream_fence();"), 1u) << source;
  const CpuCompileResult result = compileCpp(source, {k.k.name});
  ASSERT_TRUE(result.module) << result.error;

  const int64_t points = 3001;
  std::vector<float> in(points), sums(points + 9, -1.0f);
  std::vector<uint16_t> halves(points + 9, 0);
  for (int64_t i = 0; i < points; ++i) in[i] = static_cast<float>(i % 97) * 0.37f - 11.0f;
  for (int64_t shift : {1, 3}) {  // 4 and 12 bytes (2 and 6 for Half) off the allocation
    void* buffers[] = {in.data(), sums.data() + shift, halves.data() + shift};
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 1000}, {1000, points}}) {
      result.module->functions.at(0)(begin, end, buffers, nullptr, nullptr);
    }
    for (int64_t i = 0; i < points; ++i) {
      const float want = in[i] + 0.5f;
      ASSERT_EQ(sums[shift + i], want) << shift << " " << i;
      ASSERT_EQ(halves[shift + i], bitsOf(c10::Half(want * in[i]))) << shift << " " << i;
    }
  }
}

}  // namespace
}  // namespace lazyfuse
