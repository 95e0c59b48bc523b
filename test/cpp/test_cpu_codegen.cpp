// Kernel IR index expressions, the CPU renderer, and the CPU compiler with its disk cache.
// See Note [Kernel IR], Note [CPU loop structure], Note [CPU prelude], Note [CPU disk cache].
#include "kernels/cpu_codegen.h"
#include "kernels/cpu_compiler.h"
#include "kernels/fused_runner.h"
#include "test/cpp/kernel_test_builder.h"
#include "test/cpp/temp_dir.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

namespace lazyfuse {
namespace {

namespace fs = std::filesystem;
using c10::ScalarType;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

using Builder = testing::KernelBuilder;

IxPtr v(int d) { return ixVar(d); }

/// The row-major flat index of a 2-d domain with `cols` columns.
IxPtr flat2(int64_t cols) { return ixOffset({v(0), v(1)}, {cols, 1}); }

class CpuCodegenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    temp_ = std::make_unique<testing::TempDir>("lf-codegen-test");
    ASSERT_TRUE(temp_->made());
    root_ = temp_->path();
    useCacheDir(root_ + "/cache");
  }
  static void TearDownTestSuite() { temp_.reset(); }
  void SetUp() override {
    if (!cpuCompilerAvailable()) GTEST_SKIP() << "no C++ compiler";
    useCacheDir(root_ + "/cache");
  }
  static void useCacheDir(const std::string& dir) {
    setenv("LAZYFUSE_CACHE_DIR", dir.c_str(), /*overwrite=*/1);
  }

  static CpuKernelFn compile(const Kernel& kernel) {
    CpuCompileResult result = compileCpp(renderCpp({&kernel}), {kernel.name});
    EXPECT_TRUE(result.module) << result.error;
    return result.module ? result.module->functions.at(0) : nullptr;
  }

  static std::unique_ptr<testing::TempDir> temp_;
  static std::string root_;  // temp_'s path
};

std::unique_ptr<testing::TempDir> CpuCodegenTest::temp_;
std::string CpuCodegenTest::root_;

// --- index expressions (no compiler needed) ---

TEST(CpuCodegenIxTest, ConstructorsFoldConstantsAndNeutralOperands) {
  IxPtr v0 = v(0);
  EXPECT_EQ(ixText(ixAdd(ixConst(2), ixConst(3))), "5");
  EXPECT_EQ(ixAdd(v0, ixConst(0)), v0);
  EXPECT_EQ(ixAdd(ixConst(0), v0), v0);
  EXPECT_EQ(ixMul(v0, ixConst(1)), v0);
  EXPECT_EQ(ixText(ixMul(v0, ixConst(0))), "0");
  EXPECT_EQ(ixDiv(v0, ixConst(1)), v0);
  EXPECT_EQ(ixText(ixMod(v0, ixConst(1))), "0");
  EXPECT_EQ(ixText(ixAdd(ixConst(4), v0)), "(v0 + 4)");
  EXPECT_EQ(ixText(ixAdd(ixAdd(v0, ixConst(4)), ixConst(-4))), "v0");
  EXPECT_EQ(ixText(ixMul(ixMul(v0, ixConst(3)), ixConst(4))), "v0 * 12");
  EXPECT_EQ(ixText(ixDiv(ixMul(v0, ixConst(8)), ixConst(4))), "v0 * 2");
  EXPECT_EQ(ixText(ixMod(ixMul(v0, ixConst(8)), ixConst(4))), "0");
  EXPECT_EQ(ixText(ixDiv(ixDiv(v0, ixConst(3)), ixConst(5))), "v0 / 15");
  EXPECT_EQ(ixText(ixMod(ixMod(v0, ixConst(12)), ixConst(4))), "v0 % 4");
  EXPECT_EQ(ixText(ixMin(ixConst(3), ixConst(7))), "3");
  EXPECT_EQ(ixText(ixMax(v0, v0)), "v0");
}

TEST(CpuCodegenIxTest, TextIsCanonicalCSyntaxAndDomainNumel) {
  IxPtr v0 = v(0), v1 = v(1);
  EXPECT_EQ(ixText(ixAdd(ixMul(v0, ixConst(1024)), v1)), "(v0 * 1024 + v1)");
  EXPECT_EQ(ixText(ixOffset({v0, v1}, {4, 1})), "(v0 * 4 + v1)");
  EXPECT_EQ(ixText(ixMul(ixDiv(v0, ixConst(3)), ixConst(5))), "(v0 / 3) * 5");
  EXPECT_EQ(ixText(ixDiv(v0, ixMul(v1, ixConst(2)))), "v0 / (v1 * 2)");
  EXPECT_EQ(ixText(ixMul(ixAdd(v0, v1), ixConst(2))), "(v0 + v1) * 2");
  EXPECT_EQ(ixText(ixAdd(v0, ixConst(-1))), "(v0 + (-1))");
  EXPECT_EQ(ixText(ixMin(v0, ixConst(5000000000))), "lf_imin(v0, 5000000000LL)");
  EXPECT_EQ(ixText(ixMax(ixRVar(2), ixConst(0))), "lf_imax(r2, 0)");
  EXPECT_TRUE(ixUsesRVar(ixAdd(v0, ixMul(ixRVar(0), ixConst(3)))));
  EXPECT_FALSE(ixUsesRVar(ixAdd(v0, v1)));
  Kernel kernel;
  EXPECT_EQ(domainNumel(kernel), 1);  // an empty domain is one point
  kernel.domain = {2, 3, 4};
  EXPECT_EQ(domainNumel(kernel), 24);
}

// --- rendering ---

/// out = exp(x) + 1.5 and out2 = -x over a 3 x 5 float domain.
Kernel expAddKernel(const std::string& name) {
  Builder b(name, {3, 5});
  int32_t in = b.buffer(ScalarType::Float, false);
  int32_t out = b.buffer(ScalarType::Float, true);
  int32_t neg_out = b.buffer(ScalarType::Float, true);
  int32_t x = b.load(in, ScalarType::Float, flat2(5));
  int32_t e = b.fn("exp", ScalarType::Float, {x});
  int32_t y = b.fn("add", ScalarType::Float, {e, b.constant(ScalarType::Float, 1.5)});
  b.store(y, out, flat2(5));
  b.store(b.fn("neg", ScalarType::Float, {x}), neg_out, flat2(5));
  return b.k;
}

TEST(CpuCodegenRenderTest, RenderIsDeterministicAndSelfContained) {
  Kernel a = expAddKernel("k_a"), b = expAddKernel("k_b");
  std::string once = renderCpp({&a, &b});
  EXPECT_EQ(once, renderCpp({&a, &b}));
  EXPECT_EQ(once.find("#include"), std::string::npos);
  EXPECT_NE(once.find("extern \"C\" void k_a("), std::string::npos);
  EXPECT_NE(once.find("extern \"C\" void k_b("), std::string::npos);
  EXPECT_NE(once.find("#pragma omp simd"), std::string::npos);
}

TEST_F(CpuCodegenTest, PointwiseFloatChainOverRowSegments) {
  Kernel kernel = expAddKernel("exp_add");
  CpuKernelFn fn = compile(kernel);
  ASSERT_TRUE(fn);
  std::vector<float> x = {0.f,    -0.f, 1.f, -1.f, kNan, kInf, -kInf, 88.f,
                          -100.f, 0.5f, 2.f, 3.f,  -2.f, 10.f, 1e-3f};
  std::vector<float> out(15, -7.f), neg(15, -7.f);
  void* buffers[] = {x.data(), out.data(), neg.data()};
  // Uneven chunks start and end inside rows, as a thread split would.
  fn(0, 7, buffers, nullptr, nullptr);
  fn(7, 8, buffers, nullptr, nullptr);
  fn(8, 15, buffers, nullptr, nullptr);
  for (size_t i = 0; i < x.size(); ++i) {
    float expected = std::exp(x[i]) + 1.5f;
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(out[i])) << i;
    } else if (std::isinf(expected)) {
      EXPECT_EQ(out[i], expected) << i;
    } else {
      EXPECT_NEAR(out[i], expected, 4e-7 * std::fabs(expected)) << i;
    }
    if (!std::isnan(x[i])) {
      EXPECT_EQ(neg[i], -x[i]) << i;
      EXPECT_EQ(std::signbit(neg[i]), !std::signbit(x[i])) << i;
    }
  }
}

TEST_F(CpuCodegenTest, Int8ArithmeticWrapsAndIntegerPow) {
  Builder b("int8_ops", {6});
  int32_t in_a = b.buffer(ScalarType::Char, false), in_b = b.buffer(ScalarType::Char, false);
  std::vector<int32_t> outs;
  for (int i = 0; i < 4; ++i) outs.push_back(b.buffer(ScalarType::Char, true));
  int32_t a = b.load(in_a, ScalarType::Char, v(0)), c = b.load(in_b, ScalarType::Char, v(0));
  b.store(b.fn("add", ScalarType::Char, {a, c}), outs[0], v(0));
  b.store(b.fn("mul", ScalarType::Char, {a, c}), outs[1], v(0));
  b.store(b.fn("abs", ScalarType::Char, {a}), outs[2], v(0));
  b.store(b.fn("pow", ScalarType::Char, {a, c}), outs[3], v(0));
  CpuKernelFn fn = compile(b.k);
  ASSERT_TRUE(fn);
  std::vector<int8_t> x = {100, 16, -128, 3, -1, 2}, y = {100, 16, 1, 5, -3, -1};
  std::vector<std::vector<int8_t>> out(4, std::vector<int8_t>(6));
  void* buffers[] = {x.data(),      y.data(),      out[0].data(),
                     out[1].data(), out[2].data(), out[3].data()};
  fn(0, 6, buffers, nullptr, nullptr);
  EXPECT_EQ(out[0], (std::vector<int8_t>{-56, 32, -127, 8, -4, 1}));
  EXPECT_EQ(out[1], (std::vector<int8_t>{16, 0, -128, 15, 3, -2}));
  EXPECT_EQ(out[2], (std::vector<int8_t>{100, 16, -128, 3, 1, 2}));
  // 3^5 = 243 wraps to -13; (-1)^-3 = -1 and 2^-1 = 0 as in ATen's integer pow.
  EXPECT_EQ(out[3], (std::vector<int8_t>{0, 0, -128, -13, -1, 0}));
}

TEST_F(CpuCodegenTest, HalfAndBFloat16RoundToNearestEven) {
  Builder b("low_precision", {6});
  int32_t in = b.buffer(ScalarType::Float, false), in_bf = b.buffer(ScalarType::BFloat16, false);
  int32_t out_bf = b.buffer(ScalarType::BFloat16, true), out_h = b.buffer(ScalarType::Half, true);
  int32_t out_f = b.buffer(ScalarType::Float, true);
  int32_t x = b.load(in, ScalarType::Float, v(0));
  b.store(x, out_bf, v(0));
  b.store(x, out_h, v(0));
  b.store(b.load(in_bf, ScalarType::Float, v(0)), out_f, v(0));
  CpuKernelFn fn = compile(b.k);
  ASSERT_TRUE(fn);
  std::vector<float> x_values = {1.f + 0x1p-8f, 1.f + 3 * 0x1p-8f, kNan,
                                 kInf,          65520.f,           1.f + 0x1p-11f};
  std::vector<uint16_t> bf_in = {0x3FC0, 0xBF80, 0x7FC0, 0xFF80, 0x0001, 0x4049};
  std::vector<uint16_t> bf_out(6), h_out(6);
  std::vector<float> f_out(6);
  void* buffers[] = {x_values.data(), bf_in.data(), bf_out.data(), h_out.data(), f_out.data()};
  fn(0, 6, buffers, nullptr, nullptr);
  EXPECT_EQ(bf_out[0], 0x3F80);  // halfway, the even neighbour 1.0
  EXPECT_EQ(bf_out[1], 0x3F82);  // halfway, rounds up to the even mantissa
  EXPECT_EQ(bf_out[2], 0x7FC0);  // NaN stays NaN
  EXPECT_EQ(bf_out[3], 0x7F80);
  EXPECT_EQ(h_out[0], 0x3C04);  // 1 + 2^-8 is exact in half
  EXPECT_EQ(h_out[3], 0x7C00);
  EXPECT_EQ(h_out[4], 0x7C00);  // 65520 rounds up past the largest half
  EXPECT_EQ(h_out[5], 0x3C00);
  EXPECT_EQ(f_out[0], 1.5f);
  EXPECT_EQ(f_out[1], -1.f);
  EXPECT_TRUE(std::isnan(f_out[2]));
  EXPECT_EQ(f_out[3], -kInf);
  EXPECT_EQ(f_out[4], 0x1p-133f);
  EXPECT_EQ(f_out[5], 3.140625f);
}

TEST_F(CpuCodegenTest, FloatSemanticsMatchEager) {
  Builder b("float_semantics", {6});
  int32_t in_a = b.buffer(ScalarType::Float, false), in_b = b.buffer(ScalarType::Float, false);
  std::vector<int32_t> outs;
  for (int i = 0; i < 5; ++i) outs.push_back(b.buffer(ScalarType::Float, true));
  int32_t lt_out = b.buffer(ScalarType::Bool, true);
  int32_t a = b.load(in_a, ScalarType::Float, v(0)), c = b.load(in_b, ScalarType::Float, v(0));
  b.store(b.fn("maximum", ScalarType::Float, {a, c}), outs[0], v(0));
  b.store(b.fn("minimum", ScalarType::Float, {a, c}), outs[1], v(0));
  b.store(b.fn("remainder", ScalarType::Float, {a, c}), outs[2], v(0));
  b.store(b.fn("round", ScalarType::Float, {a}), outs[3], v(0));
  b.store(b.fn("sign", ScalarType::Float, {a}), outs[4], v(0));
  b.store(b.fn("lt", ScalarType::Bool, {a, c}), lt_out, v(0));
  CpuKernelFn fn = compile(b.k);
  ASSERT_TRUE(fn);
  std::vector<float> x = {-3.f, 3.f, -0.f, 5.f, -1.5f, kNan}, y = {2.f, -2.f, 2.f, kInf, kInf, 1.f};
  std::vector<std::vector<float>> out(5, std::vector<float>(6));
  std::vector<uint8_t> lt(6, 7);
  void* buffers[] = {x.data(),      y.data(),      out[0].data(), out[1].data(),
                     out[2].data(), out[3].data(), out[4].data(), lt.data()};
  fn(0, 6, buffers, nullptr, nullptr);
  EXPECT_TRUE(std::isnan(out[0][5]) && std::isnan(out[1][5]));
  EXPECT_EQ(out[0][0], 2.f);
  EXPECT_EQ(out[1][1], -2.f);
  // Values from eager torch.remainder: the sign of the divisor, -0.0 kept, -1 % inf = inf.
  std::vector<float> remainder = {1.f, -1.f, -0.f, 5.f, kInf};
  for (size_t i = 0; i < remainder.size(); ++i) EXPECT_EQ(out[2][i], remainder[i]) << i;
  EXPECT_TRUE(std::signbit(out[2][2]));
  EXPECT_EQ(out[3][4], -2.f);  // round half to even
  EXPECT_EQ(out[3][0], -3.f);
  EXPECT_EQ(out[4][5], 0.f);  // sign(NaN) is 0 in ATen
  EXPECT_EQ(out[4][0], -1.f);
  EXPECT_EQ(lt, (std::vector<uint8_t>{1, 0, 1, 1, 1, 0}));
}

/// Whether the bytes of the shared object at `path` name `symbol` (an import, for instance).
bool namesSymbol(const std::string& path, const std::string& symbol) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return bytes.find(std::string(1, '\0') + symbol + std::string(1, '\0')) != std::string::npos;
}

/// With libmvec, the shared object calls the AVX2 or SSE variant of C function `fn`: its loop
/// was vectorized.
void expectVectorVariant(const std::string& path, const std::string& fn) {
  if (libmvecLevel() == 0) return;
  EXPECT_TRUE(namesSymbol(path, "_ZGVdN8v_" + fn) || namesSymbol(path, "_ZGVbN4v_" + fn))
      << "no vector " << fn << " in " << path;
}

// sin and cos of one value, as rotary embeddings compute them: without -fno-builtin-sin/cos GCC
// merges the two into scalar sincosf and the loop is not vectorized (Note [CPU compile flags]).
TEST_F(CpuCodegenTest, SinAndCosOfOneValueStayVectorized) {
  Builder b("sin_cos_rotary", {1000});
  int32_t in = b.buffer(ScalarType::Float, false), out = b.buffer(ScalarType::Float, true);
  int32_t x = b.load(in, ScalarType::Float, v(0));
  int32_t s = b.fn("mul", ScalarType::Float,
                   {b.fn("sin", ScalarType::Float, {x}), b.constant(ScalarType::Float, 0.5)});
  b.store(b.fn("add", ScalarType::Float, {s, b.fn("cos", ScalarType::Float, {x})}), out, v(0));
  CpuCompileResult result = compileCpp(renderCpp({&b.k}), {b.k.name});
  ASSERT_TRUE(result.module) << result.error;
  EXPECT_FALSE(namesSymbol(result.module->path, "sincosf")) << result.module->path;
  expectVectorVariant(result.module->path, "sinf");
  std::vector<float> xs(1000), ys(1000);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = -20.f + 0.04f * static_cast<float>(i);
  void* buffers[] = {xs.data(), ys.data()};
  result.module->functions.at(0)(0, 1000, buffers, nullptr, nullptr);
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(ys[i], 0.5f * std::sin(xs[i]) + std::cos(xs[i]), 1e-5f) << xs[i];
  }
}

// A clamp after libmvec calls: GCC 12 leaves a loop with a branch and a call to sinf (a plain
// function under -fno-builtin-sin) scalar, so maximum/minimum select without branching (Note
// [CPU prelude]).
TEST_F(CpuCodegenTest, ClampAfterSinAndExpStaysVectorized) {
  Builder b("sin_exp_clamp", {1000});
  int32_t in = b.buffer(ScalarType::Float, false), out = b.buffer(ScalarType::Float, true);
  int32_t x = b.load(in, ScalarType::Float, v(0));
  int32_t s = b.fn("add", ScalarType::Float, {x, b.fn("sin", ScalarType::Float, {x})});
  int32_t e = b.fn("exp", ScalarType::Float, {s});
  int32_t lo = b.fn("maximum", ScalarType::Float, {e, b.constant(ScalarType::Float, 0.5)});
  b.store(b.fn("minimum", ScalarType::Float, {lo, b.constant(ScalarType::Float, 10.0)}), out, v(0));
  CpuCompileResult result = compileCpp(renderCpp({&b.k}), {b.k.name});
  ASSERT_TRUE(result.module) << result.error;
  expectVectorVariant(result.module->path, "expf");
  std::vector<float> xs(1000), ys(1000);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = -5.f + 0.01f * static_cast<float>(i);
  xs[7] = kNan;
  void* buffers[] = {xs.data(), ys.data()};
  result.module->functions.at(0)(0, 1000, buffers, nullptr, nullptr);
  EXPECT_TRUE(std::isnan(ys[7]));  // NaN goes through the clamp, as in eager
  for (size_t i = 0; i < xs.size(); ++i) {
    if (i == 7) continue;
    const float want = std::min(std::max(std::exp(xs[i] + std::sin(xs[i])), 0.5f), 10.f);
    EXPECT_NEAR(ys[i], want, 1e-5f * want) << xs[i];
  }
}

TEST_F(CpuCodegenTest, SumMaxArgmaxOverA2dDomain) {
  // x is [2, 3, 4]; the domain is [2, 3] and each point reduces its row of 4.
  Builder b("row_reduce", {2, 3});
  int32_t in = b.buffer(ScalarType::Float, false);
  int32_t sum_out = b.buffer(ScalarType::Float, true), max_out = b.buffer(ScalarType::Float, true);
  int32_t arg_out = b.buffer(ScalarType::Long, true);
  IxPtr at = ixOffset({v(0), v(1), ixRVar(0)}, {12, 4, 1});
  int32_t x0 = b.load(in, ScalarType::Float, at, /*scope=*/0);
  int32_t sum = b.reduce(ReduceKind::kSum, {4}, x0, ScalarType::Float);
  int32_t x1 = b.load(in, ScalarType::Float, at, /*scope=*/1);
  int32_t max = b.reduce(ReduceKind::kMax, {4}, x1, ScalarType::Float);
  int32_t x2 = b.load(in, ScalarType::Float, at, /*scope=*/2);
  int32_t arg = b.reduce(ReduceKind::kArgMax, {4}, x2, ScalarType::Long);
  b.store(b.fn("mul", ScalarType::Float, {sum, b.constant(ScalarType::Float, 2)}), sum_out,
          flat2(3));
  b.store(max, max_out, flat2(3));
  b.store(arg, arg_out, flat2(3));
  CpuKernelFn fn = compile(b.k);
  ASSERT_TRUE(fn);
  std::vector<float> x = {1, 5, 5, 2, -kInf, -kInf, -kInf, -kInf, 1,    kNan, 3,    kNan,
                          0, 0, 0, 0, -1,    -2,    -3,    7,     kInf, 1,    kInf, 2};
  std::vector<float> sums(6), maxes(6);
  std::vector<int64_t> args(6, -1);
  void* buffers[] = {x.data(), sums.data(), maxes.data(), args.data()};
  fn(0, 4, buffers, nullptr, nullptr);
  fn(4, 6, buffers, nullptr, nullptr);
  EXPECT_EQ(sums[0], 26.f);
  EXPECT_EQ(sums[4], 2.f);
  EXPECT_EQ(maxes[0], 5.f);
  EXPECT_EQ(maxes[1], -kInf);
  EXPECT_TRUE(std::isnan(maxes[2]));
  EXPECT_EQ(maxes[5], kInf);
  // The first maximum wins; the first NaN wins over everything.
  EXPECT_EQ(args, (std::vector<int64_t>{1, 0, 1, 0, 3, 0}));
}

TEST_F(CpuCodegenTest, ReductionOverTwoDimsIntoAScalarWithParams) {
  // out[] = sum over [3, 4] of (long)x * iparams[0] + fparams[0]: an empty domain, one point.
  Builder b("scalar_reduce");
  int32_t in = b.buffer(ScalarType::Char, false), out = b.buffer(ScalarType::Double, true);
  b.k.params = {KParam{false}, KParam{true}};
  int32_t x = b.load(in, ScalarType::Char, ixOffset({ixRVar(0), ixRVar(1)}, {4, 1}), 0);
  int32_t wide = b.op(KOp::kCast, ScalarType::Long, {x}, 0, /*scope=*/0);
  int32_t scale = b.op(KOp::kParam, ScalarType::Long, {}, /*ivalue=*/0, /*scope=*/0);
  int32_t term = b.fn("mul", ScalarType::Long, {wide, scale}, /*scope=*/0);
  int32_t sum = b.reduce(ReduceKind::kSum, {3, 4}, term, ScalarType::Long);
  int32_t offset = b.op(KOp::kParam, ScalarType::Double, {}, 1);
  int32_t total =
      b.fn("add", ScalarType::Double, {b.op(KOp::kCast, ScalarType::Double, {sum}), offset});
  b.store(total, out, ixConst(0));
  // A loop per reduced dimension (Note [CPU loop structure]): no division by the inner size.
  const std::string source = renderCpp({&b.k});
  EXPECT_NE(source.find("for (lf_i64 r0 = 0; r0 < 3; ++r0)"), std::string::npos) << source;
  EXPECT_NE(source.find("for (lf_i64 r1 = 0; r1 < 4; ++r1)"), std::string::npos) << source;
  EXPECT_EQ(source.find("% 4"), std::string::npos) << source;
  CpuKernelFn fn = compile(b.k);
  ASSERT_TRUE(fn);
  std::vector<int8_t> values(12);
  for (int i = 0; i < 12; ++i) values[i] = static_cast<int8_t>(120 + i);  // wraps past 127
  int64_t expected = 0;
  for (int8_t value : values) expected += value;
  double result = 0;
  void* buffers[] = {values.data(), &result};
  // A parameter's slot indexes the array of its kind: slot 1 is fparams[1].
  int64_t iparams[] = {3, 0};
  double fparams[] = {0.0, 0.25};
  fn(0, 1, buffers, iparams, fparams);
  EXPECT_EQ(result, static_cast<double>(expected * 3) + 0.25);
  iparams[0] = -1;
  fn(0, 1, buffers, iparams, fparams);
  EXPECT_EQ(result, static_cast<double>(-expected) + 0.25);
}

TEST_F(CpuCodegenTest, ColumnSumFoldsSegmentsOfPoints) {
  // out[c] = sum over r of x[r, c] for x [9, 70]: the loads use the point variable v0, so the
  // kernel is a segment loop (Note [CPU loop structure]); run split at a point inside a segment.
  Builder b("column_sum", {70});
  int32_t in = b.buffer(ScalarType::Float, false), out = b.buffer(ScalarType::Float, true);
  int32_t x = b.load(in, ScalarType::Float, ixOffset({ixRVar(0), v(0)}, {70, 1}), 0);
  int32_t wide = b.op(KOp::kCast, ScalarType::Double, {x}, 0, /*scope=*/0);
  int32_t sum = b.reduce(ReduceKind::kSum, {9}, wide, ScalarType::Double);
  b.store(b.op(KOp::kCast, ScalarType::Float, {sum}), out, v(0));
  const std::string source = renderCpp({&b.k});
  EXPECT_NE(source.find("for (lf_i64 s = 0; s < n; ++s)"), std::string::npos) << source;
  CpuKernelFn fn = compile(b.k);
  ASSERT_TRUE(fn);
  std::vector<float> values(9 * 70), result(70, -1);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 13) - 6;
  void* buffers[] = {values.data(), result.data()};
  fn(0, 30, buffers, nullptr, nullptr);
  fn(30, 70, buffers, nullptr, nullptr);
  for (int c = 0; c < 70; ++c) {
    float expected = 0;
    for (int r = 0; r < 9; ++r) expected += values[r * 70 + c];
    EXPECT_EQ(result[c], expected) << c;
  }
}

TEST_F(CpuCodegenTest, WhereCastAndIndex) {
  // out[i] = i < 2 ? (float)i : isnan(x[i]) cast to float, over a domain of 4.
  Builder b("where_index", {4});
  int32_t in = b.buffer(ScalarType::Float, false), out = b.buffer(ScalarType::Float, true);
  int32_t i = b.op(KOp::kIndex, ScalarType::Long, {});
  b.k.instrs[i].index = v(0);
  int32_t small = b.fn("lt", ScalarType::Bool, {i, b.constant(ScalarType::Long, 2)});
  int32_t nan = b.fn("isnan", ScalarType::Bool, {b.load(in, ScalarType::Float, v(0))});
  int32_t picked = b.op(KOp::kWhere, ScalarType::Float,
                        {small, b.op(KOp::kCast, ScalarType::Float, {i}),
                         b.op(KOp::kCast, ScalarType::Float, {nan})});
  b.store(picked, out, v(0));
  CpuKernelFn fn = compile(b.k);
  ASSERT_TRUE(fn);
  std::vector<float> x = {kNan, kNan, kNan, 1.f}, y(4, -1.f);
  void* buffers[] = {x.data(), y.data()};
  fn(0, 4, buffers, nullptr, nullptr);
  EXPECT_EQ(y, (std::vector<float>{0.f, 1.f, 1.f, 0.f}));
}

// --- the compiler and its disk cache ---

std::string sourceNamed(const std::string& name) {
  Kernel kernel = expAddKernel(name);
  return renderCpp({&kernel});
}

/// A private (0700) copy of the cache entry `so` in a new folder `dir`; returns the copy.
fs::path copyEntry(const fs::path& so, const fs::path& dir) {
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
  fs::copy_file(so, dir / so.filename());
  fs::copy_file(so.string() + ".fnv64", dir / (so.filename().string() + ".fnv64"));
  return dir / so.filename();
}

TEST_F(CpuCodegenTest, DiskCacheStoresVerifiesAndRebuilds) {
  const std::string name = "disk_cache_kernel";
  const std::string source = sourceNamed(name);
  useCacheDir(root_ + "/fresh/nested");
  CpuCompileResult first = compileCpp(source, {name});
  ASSERT_TRUE(first.module) << first.error;
  EXPECT_FALSE(first.disk_hit);
  struct stat st;
  ASSERT_EQ(stat((root_ + "/fresh/nested").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  fs::path so = first.module->path;
  EXPECT_EQ(so.parent_path(), fs::path(root_ + "/fresh/nested"));
  EXPECT_TRUE(fs::exists(so.string() + ".fnv64"));
  // The same source again is the module already loaded in this process.
  CpuCompileResult again = compileCpp(source, {name});
  ASSERT_TRUE(again.module);
  EXPECT_TRUE(again.disk_hit);
  EXPECT_EQ(again.module->handle, first.module->handle);
  // A new folder holding a copy of the entry: loaded from disk, nothing compiled.
  fs::path copied = copyEntry(so, root_ + "/copy");
  useCacheDir(root_ + "/copy");
  CpuCompileResult loaded = compileCpp(source, {name});
  ASSERT_TRUE(loaded.module) << loaded.error;
  EXPECT_TRUE(loaded.disk_hit);
  EXPECT_EQ(loaded.module->path, copied.string());
  std::vector<float> x(15, 0.f), out(15), neg(15);
  void* buffers[] = {x.data(), out.data(), neg.data()};
  loaded.module->functions.at(0)(0, 15, buffers, nullptr, nullptr);
  EXPECT_EQ(out[14], 2.5f);
  // A truncated shared object, or one whose checksum does not match, is rebuilt, never run.
  fs::path truncated = copyEntry(so, root_ + "/truncated");
  fs::resize_file(truncated, 16);
  fs::path mismatched = copyEntry(so, root_ + "/mismatched");
  std::ofstream(mismatched.string() + ".fnv64") << "fnv1a64 0000000000000000 1\n";
  // An entry renamed to another key (both files, as a swap of two entries leaves them) is
  // another source's code: rebuilt, never loaded under the key it was found at.
  const std::string other = sourceNamed("disk_cache_other");
  CpuCompileResult other_entry = compileCpp(other, {"disk_cache_other"});
  ASSERT_TRUE(other_entry.module) << other_entry.error;
  fs::path foreign = copyEntry(other_entry.module->path, root_ + "/swapped");
  fs::rename(foreign, fs::path(root_ + "/swapped") / so.filename());
  fs::rename(foreign.string() + ".fnv64", root_ + "/swapped/" + so.filename().string() + ".fnv64");
  for (const std::string& dir : {root_ + "/truncated", root_ + "/mismatched", root_ + "/swapped"}) {
    useCacheDir(dir);
    CpuCompileResult rebuilt = compileCpp(source, {name});
    ASSERT_TRUE(rebuilt.module) << rebuilt.error;
    EXPECT_FALSE(rebuilt.disk_hit) << dir;
    EXPECT_EQ(fs::file_size(rebuilt.module->path), fs::file_size(so)) << dir;
  }
}

TEST_F(CpuCodegenTest, CacheFolderOthersCanWriteIsNotUsed) {
  std::string shared = root_ + "/shared";
  fs::create_directories(shared);
  fs::permissions(shared, fs::perms::all, fs::perm_options::replace);
  useCacheDir(shared);
  // The private temporary folder goes under TMPDIR; keep it inside this test's folder.
  const char* old_tmp = std::getenv("TMPDIR");
  std::string saved = old_tmp ? old_tmp : "";
  setenv("TMPDIR", root_.c_str(), /*overwrite=*/1);
  CpuCompileResult result =
      compileCpp(sourceNamed("shared_folder_kernel"), {"shared_folder_kernel"});
  old_tmp ? setenv("TMPDIR", saved.c_str(), 1) : unsetenv("TMPDIR");
  ASSERT_TRUE(result.module) << result.error;
  EXPECT_NE(fs::path(result.module->path).parent_path(), fs::path(shared));
  EXPECT_TRUE(fs::is_empty(shared));
}

TEST_F(CpuCodegenTest, CompileErrorCarriesCompilerOutputAndKeptSource) {
  CpuCompileResult result = compileCpp("extern \"C\" void broken( { not C++", {"broken"});
  EXPECT_FALSE(result.module);
  EXPECT_NE(result.error.find("error"), std::string::npos) << result.error;
  const std::string marker = "source kept at ";
  size_t at = result.error.find(marker);
  ASSERT_NE(at, std::string::npos) << result.error;
  size_t start = at + marker.size();
  std::string kept = result.error.substr(start, result.error.find(":\n", start) - start);
  EXPECT_TRUE(fs::exists(kept)) << kept;
}

TEST_F(CpuCodegenTest, MissingFunctionIsAnError) {
  CpuCompileResult result = compileCpp(sourceNamed("has_name"), {"has_name", "no_such_kernel"});
  EXPECT_FALSE(result.module);
  EXPECT_NE(result.error.find("no_such_kernel"), std::string::npos) << result.error;
}

std::mutex runner_threads_mutex;
std::set<std::thread::id> runner_threads;

void recordRunnerThread(int64_t, int64_t, void* const*, const int64_t*, const double*) {
  std::lock_guard<std::mutex> guard(runner_threads_mutex);
  runner_threads.insert(std::this_thread::get_id());
}

// Note [Threads of the CPU kernels]: the runner splits a kernel's points across torch's threads
// (built without -fopenmp, at::parallel_for ran every chunk on the calling thread).
TEST(CpuRunnerTest, PointsAreSplitAcrossTorchsThreads) {
  if (at::get_num_threads() < 2) GTEST_SKIP() << "torch has one thread here";
  FusedKernel fused;
  fused.kernel.name = "threads";
  fused.kernel.domain = {1 << 16};
  fused.grain = 1024;
  PlanValues values;
  runner_threads.clear();
  runFusedKernel(fused, &recordRunnerThread, Graph::fromRoots({}), values);
  EXPECT_GE(runner_threads.size(), 2u);
}

}  // namespace
}  // namespace lazyfuse
