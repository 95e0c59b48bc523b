// Tiled row loops (Note [Tiled loops]): a kernel reading an input transposed stages it in tiles
// of whole rows, and gives what the plain loop gives wherever threads split its points.
#include "kernels/cpu_codegen.h"
#include "kernels/cpu_compiler.h"
#include "test/cpp/kernel_test_builder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace lazyfuse {
namespace {

using Builder = testing::KernelBuilder;
using c10::ScalarType;

IxPtr v(int d) { return ixVar(d); }

TEST(CpuTiledLoopsTest, TransposedLoadRunsInTiles) {
  // out[r, c] = exp(x[c, r]) * y[r] + z[r, c] over [2, 37, 150], x stored [2, 150, 37]: the load
  // of x is contiguous along v1, not v2, so the row loop stages it in tiles (Note [Tiled loops]);
  // 37 rows and 150 columns are not multiples of the tile, and the calls split the points inside
  // rows and tiles as threads would.
  if (!cpuCompilerAvailable()) GTEST_SKIP() << "no C++ compiler";
  const int64_t B = 2, R = 37, C = 150;
  Builder b("tiled", {B, R, C});
  int32_t xb = b.buffer(ScalarType::Float, false), yb = b.buffer(ScalarType::Float, false);
  int32_t zb = b.buffer(ScalarType::Float, false), out = b.buffer(ScalarType::Float, true);
  const IxPtr at = ixOffset({v(0), v(1), v(2)}, {R * C, C, 1});
  int32_t x = b.load(xb, ScalarType::Float, ixOffset({v(0), v(2), v(1)}, {C * R, R, 1}));
  int32_t y = b.load(yb, ScalarType::Float, v(1));
  int32_t z = b.load(zb, ScalarType::Float, at);
  int32_t e = b.fn("mul", ScalarType::Float, {b.fn("exp", ScalarType::Float, {x}), y});
  b.store(b.fn("add", ScalarType::Float, {e, z}), out, at);
  const std::string source = renderCpp({&b.k});
  EXPECT_NE(source.find("Note [Tiled loops]"), std::string::npos) << source;
  const CpuCompileResult compiled = compileCpp(source, {b.k.name});
  ASSERT_TRUE(compiled.module) << compiled.error;
  const CpuKernelFn fn = compiled.module->functions.at(0);
  std::vector<float> xs(B * C * R), ys(R), zs(B * R * C), result(B * R * C, -1);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 17) * 0.25f - 2;
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<float>(i) * 0.5f - 3;
  for (size_t i = 0; i < zs.size(); ++i) zs[i] = static_cast<float>(i % 11);
  void* buffers[] = {xs.data(), ys.data(), zs.data(), result.data()};
  const int64_t n = B * R * C;
  for (int64_t cut : {int64_t{0}, int64_t{77}, C * 5, C * 20 + 3, R * C + 1, n}) {
    std::fill(result.begin(), result.end(), -1.f);
    fn(0, cut, buffers, nullptr, nullptr);
    fn(cut, n, buffers, nullptr, nullptr);
    for (int64_t i = 0; i < B; ++i) {
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t c = 0; c < C; ++c) {
          const float expected =
              std::exp(xs[(i * C + c) * R + r]) * ys[r] + zs[(i * R + r) * C + c];
          const float got = result[(i * R + r) * C + c];
          ASSERT_NEAR(got, expected, 1e-5f * std::fabs(expected) + 1e-6f)
              << "cut " << cut << " at " << i << ", " << r << ", " << c;
        }
      }
    }
  }
}

}  // namespace
}  // namespace lazyfuse
