// Half blocks (Note [Half blocks] in kernels/cpu_codegen.cpp): a row loop converts its contiguous
// Half loads and stores a block at a time (with F16C where the CPU has it) and keeps strided
// ones in the loop; either way every value is c10::Half's conversion of the float result.
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

size_t count(const std::string& text, const std::string& word) {
  size_t n = 0;
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

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
    EXPECT_EQ(count(source, "lf_half_block_load(h"), 1u) << source;
    EXPECT_EQ(count(source, "lf_half_block_store(&"), 1u) << source;
    EXPECT_EQ(count(source, "lf_half_load(b"), 1u) << source;  // b, in the loop
    const CpuCompileResult result = compileCpp(source, {k.k.name});
    ASSERT_TRUE(result.module) << result.error;

    std::mt19937 rng(static_cast<uint32_t>(cols));
    std::vector<uint16_t> av(rows * cols), bv(rows * cols), outv(rows * cols, 0);
    for (auto* v : {&av, &bv}) {
      for (uint16_t& e : *v) e = static_cast<uint16_t>(rng());  // any bits: subnormals, inf, NaN
    }
    void* buffers[] = {av.data(), bv.data(), outv.data()};
    // Two calls splitting the points mid-row, as threads do.
    const int64_t points = rows * cols, half = points / 2 + 1;
    result.module->functions.at(0)(0, half, buffers, nullptr, nullptr);
    result.module->functions.at(0)(half, points, buffers, nullptr, nullptr);
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

}  // namespace
}  // namespace lazyfuse
