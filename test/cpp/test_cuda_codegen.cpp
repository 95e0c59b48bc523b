// The CUDA target without a GPU: the NVRTC and driver loaders, the CUDA renderer (every kernel
// function of the table over each type it takes, every dtype, reduction kind and schedule
// compiles with NVRTC for sm_90), golden sources, and the NVRTC compiler's errors and disk cache.
// See Note [CUDA kernel structure], Note [CUDA prelude], Note [CUDA kernel cache key],
// Note [Finding NVRTC and the driver].
#include "kernels/cuda_api.h"
#include "kernels/cuda_codegen.h"
#include "kernels/cuda_compiler.h"
#include "kernels/detail/cuda_dialect.h"
#include "lowering/kernel_functions.h"
#include "test/cpp/golden.h"
#include "test/cpp/kernel_test_builder.h"
#include "test/cpp/temp_dir.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace lazyfuse {
namespace {

namespace fs = std::filesystem;
using c10::ScalarType;
using testing::KernelBuilder;

constexpr int kHopper = 90;

bool isFloating(ScalarType dtype) {
  return dtype == ScalarType::Float || dtype == ScalarType::Double;
}

/// Every kernel function that applies to `dtype`, summed into one output (storage `stored`).
Kernel everyFunction(const std::string& name, ScalarType dtype, ScalarType stored) {
  KernelBuilder b(name, {64, 33});
  int32_t in0 = b.buffer(stored, false), in1 = b.buffer(stored, false);
  int32_t out = b.buffer(stored, true);
  IxPtr flat = ixOffset({ixVar(0), ixVar(1)}, {33, 1});
  ScalarType compute =
      dtype == ScalarType::Half || dtype == ScalarType::BFloat16 ? ScalarType::Float : dtype;
  int32_t x = b.load(in0, compute, flat), y = b.load(in1, compute, ixOffset({ixVar(1)}, {1}));
  int32_t acc = b.op(KOp::kCast, compute, {x});
  auto accumulate = [&](int32_t value) {
    int32_t cast = b.op(KOp::kCast, compute, {value});
    acc = b.fn("add", compute, {acc, cast});
  };
  bool floating = isFloating(compute);
  for (const KernelFunction& fn : kernelFunctions()) {
    if (!fnAcceptsType(fn.args, compute)) continue;
    std::vector<int32_t> args = {x, y};
    args.resize(fn.arity);
    ScalarType result = fn.result == FnResult::kBool ? ScalarType::Bool : compute;
    accumulate(b.fn(fn.name, result, args));
  }
  int32_t cond = b.fn("gt", ScalarType::Bool, {x, y});
  accumulate(b.op(KOp::kWhere, compute, {cond, x, y}));
  KInstr index;
  index.op = KOp::kIndex;
  index.dtype = ScalarType::Long;
  index.index = flat;
  accumulate(b.push(index));
  accumulate(b.constant(compute, floating ? -0.0 : 7));
  if (floating) {
    accumulate(b.constant(compute, std::numeric_limits<double>::quiet_NaN()));
    accumulate(b.constant(compute, -std::numeric_limits<double>::infinity()));
  }
  int32_t p = b.param(floating);
  KInstr param;
  param.op = KOp::kParam;
  param.dtype = compute;
  param.ivalue = p;
  accumulate(b.push(param));
  b.store(acc, out, flat);
  return b.k;
}

/// out[v0] = fold over r0 < `count` of in[v0 * count + r0] (prologue: exp for floats).
Kernel rowReduction(const std::string& name, ReduceKind kind, ScalarType dtype, int64_t rows,
                    int64_t count, bool column = false) {
  KernelBuilder b(name, {rows});
  int32_t in = b.buffer(dtype, false);
  bool arg = kind == ReduceKind::kArgMax || kind == ReduceKind::kArgMin;
  int32_t out = b.buffer(arg ? ScalarType::Long : dtype, true);
  IxPtr index = column ? ixAdd(ixMul(ixRVar(0), ixConst(rows)), ixVar(0))
                       : ixAdd(ixMul(ixVar(0), ixConst(count)), ixRVar(0));
  ScalarType compute =
      dtype == ScalarType::Half || dtype == ScalarType::BFloat16 ? ScalarType::Float : dtype;
  int32_t x = b.load(in, compute, index, /*scope=*/0);
  int32_t body = isFloating(compute) && !arg ? b.fn("exp", compute, {x}, 0) : x;
  ScalarType acc =
      arg ? ScalarType::Long
          : (compute == ScalarType::Float && kind == ReduceKind::kSum ? ScalarType::Double
                                                                      : compute);
  int32_t r = b.reduce(kind, {count}, body, acc);
  b.store(r, out, ixVar(0));
  return b.k;
}

/// Variance of rows: the mean, then the sum of squared deviations from it, in one kernel.
Kernel twoReductions(const std::string& name, int64_t rows, int64_t count) {
  KernelBuilder b(name, {rows});
  int32_t in = b.buffer(ScalarType::BFloat16, false), out = b.buffer(ScalarType::Float, true);
  IxPtr index = ixAdd(ixMul(ixVar(0), ixConst(count)), ixRVar(0));
  int32_t x = b.load(in, ScalarType::Float, index, 0);
  int32_t sum = b.reduce(ReduceKind::kSum, {count}, x, ScalarType::Float);
  int32_t mean =
      b.fn("div", ScalarType::Float, {sum, b.constant(ScalarType::Float, double(count))});
  int32_t y = b.load(in, ScalarType::Float, index, 1);
  int32_t d = b.fn("sub", ScalarType::Float, {y, mean}, 1);
  int32_t sq = b.fn("mul", ScalarType::Float, {d, d}, 1);
  int32_t ss = b.reduce(ReduceKind::kSum, {count}, sq, ScalarType::Float);
  b.store(b.fn("div", ScalarType::Float, {ss, b.constant(ScalarType::Float, double(count))}), out,
          ixVar(0));
  return b.k;
}

/// out = in * 2 over a contiguous 1-d domain: the vector variant's case.
Kernel contiguousScale(const std::string& name, ScalarType dtype, int64_t n) {
  KernelBuilder b(name, {n});
  int32_t in = b.buffer(dtype, false), out = b.buffer(dtype, true);
  ScalarType compute =
      dtype == ScalarType::Half || dtype == ScalarType::BFloat16 ? ScalarType::Float : dtype;
  int32_t x = b.load(in, compute, ixVar(0));
  b.store(b.fn("mul", compute, {x, b.constant(compute, 2)}), out, ixVar(0));
  return b.k;
}

std::vector<Kernel> allKernels() {
  std::vector<Kernel> kernels;
  const ScalarType dtypes[] = {ScalarType::Float,    ScalarType::Double, ScalarType::Half,
                               ScalarType::BFloat16, ScalarType::Bool,   ScalarType::Byte,
                               ScalarType::Char,     ScalarType::Short,  ScalarType::Int,
                               ScalarType::Long};
  for (ScalarType dtype : dtypes) {
    std::string suffix = c10::toString(dtype);
    kernels.push_back(everyFunction("functions_" + suffix, dtype, dtype));
    if (dtype == ScalarType::Bool) continue;
    const ReduceKind kinds[] = {ReduceKind::kSum, ReduceKind::kProd,   ReduceKind::kMax,
                                ReduceKind::kMin, ReduceKind::kArgMax, ReduceKind::kArgMin};
    for (ReduceKind kind : kinds) {
      for (int64_t count : {5, 100, 1000, 20000}) {
        kernels.push_back(rowReduction(
            "reduce_" + suffix + "_" + std::to_string(int(kind)) + "_" + std::to_string(count),
            kind, dtype, 64, count));
      }
    }
    kernels.push_back(contiguousScale("scale_" + suffix, dtype, 4096));
  }
  kernels.push_back(
      rowReduction("column_sum", ReduceKind::kSum, ScalarType::Float, 4096, 100, true));
  kernels.push_back(rowReduction("full_sum", ReduceKind::kSum, ScalarType::Float, 1, 1 << 20));
  kernels.push_back(twoReductions("variance_rows", 512, 3000));
  kernels.push_back(contiguousScale("scale_huge", ScalarType::Float, int64_t{3} << 30));
  return kernels;
}

std::vector<const Kernel*> pointers(const std::vector<Kernel>& kernels) {
  std::vector<const Kernel*> out;
  for (const Kernel& k : kernels) out.push_back(&k);
  return out;
}

class CudaCodegenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = std::make_unique<testing::TempDir>("lf-cuda-test");
    ASSERT_TRUE(root_->made());
    root_->useAsCacheDir("cache");
  }
  static void TearDownTestSuite() { root_.reset(); }
  void SetUp() override {
    std::string why;
    ASSERT_NE(nvrtc(&why), nullptr) << why;
  }
  static std::unique_ptr<testing::TempDir> root_;
};
std::unique_ptr<testing::TempDir> CudaCodegenTest::root_;

TEST(CudaLoaderTest, DriverIsFoundOrItsAbsenceIsExplained) {
  std::string why;
  const CudaDriverApi* driver = cudaDriver(&why);
  if (driver) {
    EXPECT_GT(driver->version, 0);
    EXPECT_NE(cudaDriverDescription().find("CUDA driver"), std::string::npos);
    return;
  }
  EXPECT_NE(why.find("GPU"), std::string::npos) << why;
  EXPECT_EQ(cudaDriverDescription(), why);
}

TEST_F(CudaCodegenTest, NvrtcIsDescribed) {
  EXPECT_NE(nvrtcDescription().find("NVRTC "), std::string::npos) << nvrtcDescription();
}

TEST_F(CudaCodegenTest, EveryFunctionDtypeAndReductionCompilesForHopper) {
  std::vector<Kernel> kernels = allKernels();
  CudaSource source = renderCuda(pointers(kernels));
  ASSERT_EQ(source.kernels.size(), kernels.size());
  CudaCompileResult result = compileCuda(source.source, kHopper);
  ASSERT_TRUE(result.binary) << result.error;
  EXPECT_FALSE(result.binary->ptx);
  EXPECT_FALSE(result.binary->image.empty());
}

TEST_F(CudaCodegenTest, RenderingIsDeterministic) {
  std::vector<Kernel> first = allKernels(), second = allKernels();
  EXPECT_EQ(renderCuda(pointers(first)).source, renderCuda(pointers(second)).source);
}

TEST_F(CudaCodegenTest, SchedulesFollowTheReductionLength) {
  std::vector<Kernel> kernels = {
      rowReduction("tiny_rows", ReduceKind::kSum, ScalarType::Float, 64, 8),
      rowReduction("short_rows", ReduceKind::kSum, ScalarType::Float, 64, 100),
      rowReduction("mid_rows", ReduceKind::kSum, ScalarType::Float, 64, 1000),
      rowReduction("long_rows", ReduceKind::kSum, ScalarType::Float, 64, 20000),
      rowReduction("columns", ReduceKind::kSum, ScalarType::Float, 4096, 1000, true),
      contiguousScale("scale", ScalarType::Float, 4096),
      contiguousScale("odd_scale", ScalarType::Float, 4099)};
  CudaSource source = renderCuda(pointers(kernels));
  EXPECT_EQ(source.kernels[0].group, 1);
  EXPECT_EQ(source.kernels[1].group, 8);
  EXPECT_EQ(source.kernels[2].group, 32);
  EXPECT_EQ(source.kernels[3].group, 256);
  EXPECT_EQ(source.kernels[4].group, 1) << "a reduction over a leading dim reads across points";
  // Few blocks for the work: split (Note [CUDA split reductions]).
  EXPECT_EQ(source.kernels[2].split, 1) << "rows of 1000 by warps";
  EXPECT_EQ(source.kernels[3].split, 2) << "64 rows of 20000: 2 blocks of 10000 each";
  EXPECT_EQ(source.kernels[3].split_blocks, 64);
  EXPECT_EQ(source.kernels[3].workspace, 64 * 2 * 16);
  EXPECT_EQ(source.kernels[4].split, 31) << "16 blocks of 256 columns, 31 slices of the rows";
  EXPECT_EQ(source.kernels[4].split_blocks, 16);
  EXPECT_EQ(source.kernels[5].vector_name, "scale_v4");
  EXPECT_EQ(source.kernels[5].vector_buffers, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(source.kernels[6].vector_name, "") << "4099 points do not split into fours";
  for (const CudaLaunchShape& shape : source.kernels) EXPECT_EQ(shape.block, 256);
}

/// out[v0, v1] = in[(v0 * 2^28 + v1) % 64] over [16, 65536]: the index stays below 64, but its
/// numerator does not fit 32 bits (a broadcast reshaped and strided, as lowering makes it).
Kernel wideIntermediate(const std::string& name) {
  KernelBuilder b(name, {16, 65536});
  int32_t in = b.buffer(ScalarType::Float, false), out = b.buffer(ScalarType::Float, true);
  IxPtr index = ixMod(ixAdd(ixMul(ixVar(0), ixConst(int64_t{1} << 28)), ixVar(1)), ixConst(64));
  b.store(b.load(in, ScalarType::Float, index), out, ixOffset({ixVar(0), ixVar(1)}, {65536, 1}));
  return b.k;
}

/// A 64-bit kernel whose index clamps with lf_imax against a small constant (slice_scatter).
Kernel clampedWideIndex(const std::string& name) {
  KernelBuilder b(name, {int64_t{1} << 31});
  int32_t in = b.buffer(ScalarType::Float, false), out = b.buffer(ScalarType::Float, true);
  IxPtr index = ixMax(ixAdd(ixVar(0), ixConst(-5)), ixConst(0));
  b.store(b.load(in, ScalarType::Float, index), out, ixVar(0));
  return b.k;
}

TEST_F(CudaCodegenTest, IndexMathIs32BitUnlessAnIndexCanReach2To30) {
  Kernel small = contiguousScale("small", ScalarType::Float, 1 << 20);
  Kernel huge = contiguousScale("huge", ScalarType::Float, int64_t{1} << 31);
  Kernel wide = wideIntermediate("wide"), clamped = clampedWideIndex("clamped");
  EXPECT_NE(renderCuda({&small}).source.find("for (int p = "), std::string::npos);
  EXPECT_NE(renderCuda({&huge}).source.find("for (lf_i64 p = "), std::string::npos);
  EXPECT_NE(renderCuda({&wide}).source.find("for (lf_i64 p = "), std::string::npos)
      << "an intermediate of the index needs 64 bits";
  CudaCompileResult result = compileCuda(renderCuda({&wide, &clamped}).source, kHopper);
  EXPECT_TRUE(result.binary) << result.error;
}

TEST_F(CudaCodegenTest, BuffersThatMayAliasAreNotRestrict) {
  // Note [Donated buffers]: an output written into its input's memory, alone and in a batch.
  Kernel single = contiguousScale("single", ScalarType::Float, 4096);
  Kernel first = contiguousScale("first", ScalarType::Float, 4096);
  Kernel second = contiguousScale("second", ScalarType::Float, 1000);
  for (Kernel* k : {&single, &first, &second}) {
    k->buffers[0].may_alias = k->buffers[1].may_alias = true;
  }
  const std::string source = renderCuda({&single}, {{&first, &second}}).source;
  EXPECT_EQ(source.find("__restrict__"), std::string::npos) << source;
  EXPECT_NE(source.find("const float* b0"), std::string::npos) << source;
  EXPECT_NE(source.find("float* b1"), std::string::npos) << source;
  CudaCompileResult result = compileCuda(source, kHopper);
  EXPECT_TRUE(result.binary) << result.error;
  Kernel plain = contiguousScale("plain", ScalarType::Float, 4096);
  EXPECT_NE(renderCuda({&plain}).source.find("float* __restrict__ b1"), std::string::npos);
}

TEST_F(CudaCodegenTest, GoldenSources) {
  std::vector<Kernel> kernels = {
      contiguousScale("scale_bf16", ScalarType::BFloat16, 4096),
      rowReduction("row_max", ReduceKind::kMax, ScalarType::Float, 64, 1000),
      rowReduction("short_row_sum", ReduceKind::kSum, ScalarType::Int, 77, 100),
      rowReduction("row_argmin", ReduceKind::kArgMin, ScalarType::Half, 8, 20000),
      twoReductions("variance_rows", 512, 3000)};
  std::string source = renderCuda(pointers(kernels)).source;
  const std::string prelude =
      "// codegen version " + std::to_string(kCudaCodegenVersion) + "\n" + detail::cudaPrelude();
  ASSERT_EQ(source.compare(0, prelude.size(), prelude), 0);
  testing::expectMatchesGolden("cuda_kernels.cu", source.substr(prelude.size()));
}

TEST_F(CudaCodegenTest, CompileErrorCarriesTheLogAndTheKeptSource) {
  CudaCompileResult result =
      compileCuda("extern \"C\" __global__ void broken() { undefined_name(); }", kHopper);
  EXPECT_FALSE(result.binary);
  EXPECT_NE(result.error.find("undefined_name"), std::string::npos) << result.error;
  size_t at = result.error.find("source: ");
  ASSERT_NE(at, std::string::npos) << result.error;
  EXPECT_TRUE(fs::exists(result.error.substr(at + 8))) << result.error;
}

TEST_F(CudaCodegenTest, CubinIsStoredInThePrivateDiskCacheWithItsChecksum) {
  Kernel k = contiguousScale("cached_scale", ScalarType::Float, 1024);
  CudaCompileResult result = compileCuda(renderCuda({&k}).source, kHopper);
  ASSERT_TRUE(result.binary) << result.error;
  fs::path cubin = fs::path(root_->path()) / "cache" / "cuda" / (result.binary->key + ".cubin");
  EXPECT_TRUE(fs::exists(cubin));
  EXPECT_TRUE(fs::exists(cubin.string() + ".fnv64"));
  EXPECT_EQ(fs::file_size(cubin), result.binary->image.size());
  CudaCompileResult again = compileCuda(renderCuda({&k}).source, kHopper);
  EXPECT_TRUE(again.disk_hit);
  EXPECT_EQ(again.binary->image, result.binary->image);
}

TEST_F(CudaCodegenTest, AnArchitectureNvrtcDoesNotKnowGetsPtx) {
  Kernel k = contiguousScale("future_scale", ScalarType::Float, 1024);
  CudaCompileResult result = compileCuda(renderCuda({&k}).source, 990);
  ASSERT_TRUE(result.binary) << result.error;
  EXPECT_TRUE(result.binary->ptx);
  EXPECT_NE(result.binary->image.find(".entry future_scale"), std::string::npos);
}

}  // namespace
}  // namespace lazyfuse
