// Splitting rendered kernel text into its shape and constants (Note [Shape-generic kernels]).
#include "kernels/kernel_constants.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lazyfuse {
namespace {

std::string joinAll(const KernelText& k, const std::string& name) {
  return joinConstants(k, k.constants, std::vector<bool>(k.constants.size(), false), name,
                       [](size_t) { return std::string("unused"); });
}

TEST(KernelConstantsTest, IntegerAndIntegralFloatLiteralsAreConstants) {
  const std::string text =
      "extern \"C\" void lf_kernel_3(lf_i64 begin) {\n"
      "  float c34[256];\n"
      "  for (lf_i64 v1 = 0; v1 < 256LL; ++v1) b0[(v0 * 256 + v1)] = (double)256.0 * 2.0f;\n"
      "}\n";
  const KernelText k = splitConstants(text, "lf_kernel_3");
  EXPECT_EQ(k.constants, (std::vector<int64_t>{256, 0, 256, 256, 256, 2}));
  EXPECT_EQ(k.shape.find("lf_kernel_3"), std::string::npos);
  EXPECT_EQ(joinAll(k, "lf_kernel_3"), text);
  EXPECT_EQ(joinAll(k, "other"), [&] {
    std::string renamed = text;
    renamed.replace(renamed.find("lf_kernel_3"), 11, "other");
    return renamed;
  }());
}

TEST(KernelConstantsTest, IdentifiersFloatsHexCommentsStringsAndPragmasStayInTheShape) {
  const std::string text =
      "// size 4096\n"
      "  #pragma omp simd simdlen(8)\n"
      "x1 = lf_i64(3) + v12 + 1.5 + 1e30 + 2.5f + 0x7f + 0.5 + .25 + 1.0e3; /* 77 */ s = \"9\";\n";
  const KernelText k = splitConstants(text, "f");
  EXPECT_EQ(k.constants, (std::vector<int64_t>{3}));
  EXPECT_NE(k.shape.find("simdlen(8)"), std::string::npos);
  EXPECT_NE(k.shape.find("4096"), std::string::npos);
  EXPECT_NE(k.shape.find("1.0e3"), std::string::npos);
  EXPECT_EQ(joinAll(k, "f"), text);
}

TEST(KernelConstantsTest, TemplateArgumentsStayInTheShape) {
  const KernelText k =
      splitConstants("a = lf_group_reduce<lf_max, 32>(a) + lf_arg<8>(b) < 9;", "f");
  EXPECT_EQ(k.constants, (std::vector<int64_t>{9}));
  EXPECT_NE(k.shape.find("32>"), std::string::npos);
  EXPECT_NE(k.shape.find("<8>"), std::string::npos);
}

TEST(KernelConstantsTest, CudaKeepsBracketedLiteralsAndLaunchBounds) {
  const std::string text =
      "void __launch_bounds__(256) f() { __shared__ float s3[8]; x = w0.v[2] + b[(v0 * 300)]; }";
  EXPECT_EQ(splitConstants(text, "f", /*constant_brackets=*/true).constants,
            (std::vector<int64_t>{300}));
  EXPECT_EQ(splitConstants(text, "f").constants, (std::vector<int64_t>{256, 8, 2, 300}));
}

TEST(KernelConstantsTest, TextsThatDifferOnlyInConstantsShareAShape) {
  const KernelText a = splitConstants("void k1() { x[v0 * 256 + v1] = y / 256.0; }", "k1");
  const KernelText b = splitConstants("void k9() { x[v0 * 384 + v1] = y / 384.0; }", "k9");
  const KernelText c = splitConstants("void k9() { x[v0 * 384 + v1] = y / 384.5; }", "k9");
  EXPECT_EQ(a.shape, b.shape);
  EXPECT_NE(a.shape, c.shape);
  EXPECT_EQ(a.constants, (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(b.constants, (std::vector<int64_t>{384, 384}));
}

TEST(KernelConstantsTest, RuntimeConstantsBecomeArgumentsWithoutSuffixes) {
  const KernelText k = splitConstants("a = b[v0 * 256LL + 7] * 3.0f + 2.0 + 5;", "f");
  ASSERT_EQ(k.constants, (std::vector<int64_t>{256, 7, 3, 2, 5}));
  const std::string out = joinConstants(k, {1024, 7, 4, 2, 6}, {true, false, true, true, false},
                                        "f", [](size_t i) { return "A" + std::to_string(i); });
  EXPECT_EQ(out, "a = b[v0 * A0 + 7] * ((float)A2) + ((double)A3) + 6;");
}

}  // namespace
}  // namespace lazyfuse
