// Every kernel function of the table (Note [Kernel functions]) against its reference: one kernel
// per function and argument type it takes, rendered for the CPU target and compiled together,
// runs over sample values (zeros of both signs, subnormals, values near and far past overflow,
// infinities, NaN, integer extremes; every pair of them for a binary function) and must give
// what the row's ATen reference gives on the same values in eager. A new row is covered with no
// edit here.
#include "kernels/cpu_codegen.h"
#include "kernels/cpu_compiler.h"
#include "lowering/kernel_functions.h"
#include "test/cpp/kernel_test_builder.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace lazyfuse {
namespace {

namespace fs = std::filesystem;
using c10::ScalarType;

const ScalarType kTypes[] = {ScalarType::Float, ScalarType::Double, ScalarType::Byte,
                             ScalarType::Char,  ScalarType::Int,    ScalarType::Long,
                             ScalarType::Bool};

bool isFloating(ScalarType dtype) {
  return dtype == ScalarType::Float || dtype == ScalarType::Double;
}

/// The sample values of `dtype`, as a 1-d tensor of that type.
at::Tensor samples(ScalarType dtype) {
  const double inf = std::numeric_limits<double>::infinity();
  if (isFloating(dtype)) {
    std::vector<double> values = {
        0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 2.5, 3.0, 0.75, -7.25, 100.0, -100.0,
        // Subnormal in float.
        1e-40, -1e-40,
        // Near where exp, sinh and cosh overflow or underflow in float and in double, and far
        // beyond: eager's vectorized and scalar loops differ there (sinh(89) is inf in one,
        // finite in the other), and a kernel must give one of the two.
        88.5, 88.8, -88.8, 89.5, -89.5, -104.0, 710.0, -710.0, -746.0, 1e10, -1e10, 1e30, -1e30,
        3e38, -3e38,
        // Not finite.
        inf, -inf, std::numeric_limits<double>::quiet_NaN()};
    if (dtype == ScalarType::Double) values.insert(values.end(), {1e-310, -1e-310});
    at::Tensor t = at::empty({static_cast<int64_t>(values.size())}, at::kDouble);
    std::copy(values.begin(), values.end(), t.data_ptr<double>());
    return t.to(dtype);
  }
  std::vector<int64_t> values = {0, 1, -1, 2, -2, 3, 7, -7, 100, -100, 127, -128, 255};
  if (dtype == ScalarType::Bool) values = {0, 1};
  if (dtype == ScalarType::Int || dtype == ScalarType::Long) {
    values.insert(values.end(),
                  {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()});
  }
  if (dtype == ScalarType::Long) {
    values.insert(values.end(),
                  {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()});
  }
  at::Tensor t = at::empty({static_cast<int64_t>(values.size())}, at::kLong);
  std::copy(values.begin(), values.end(), t.data_ptr<int64_t>());
  return t.to(dtype);  // wraps into the narrower integer types
}

/// One case: kernel function `fn` over arguments of type `dtype`.
struct Case {
  const KernelFunction* fn;
  ScalarType dtype;
  std::vector<at::Tensor> args;  // each of the kernel's points' arguments, in order
  Kernel kernel;
};

Case makeCase(const KernelFunction& fn, ScalarType dtype) {
  Case c{&fn, dtype, {}, {}};
  at::Tensor s = samples(dtype);
  const int64_t n = s.numel();
  if (fn.arity == 1) {
    c.args = {s};
  } else {
    c.args = {s.repeat_interleave(n), s.repeat({n})};  // every pair (s[i], s[j])
  }
  const int64_t points = c.args[0].numel();
  testing::KernelBuilder b(std::string("fn_") + fn.name + "_" + c10::toString(dtype), {points});
  std::vector<int32_t> values;
  for (int i = 0; i < fn.arity; ++i) {
    values.push_back(b.load(b.buffer(dtype, false), dtype, ixVar(0)));
  }
  const ScalarType result = fn.result == FnResult::kBool ? ScalarType::Bool : dtype;
  const int32_t out = b.buffer(result, true);
  b.store(b.fn(fn.name, result, values), out, ixVar(0));
  c.kernel = b.k;
  return c;
}

/// Whether `got` is `want` up to a few units in the last place of a floating type `T`; NaN
/// equals NaN, and a zero must have the sign of the reference's.
template <class T>
bool closeEnough(double got, double want) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (got == want) return got != 0 || std::signbit(got) == std::signbit(want);
  if (std::isinf(got) || std::isinf(want)) return false;
  const double ulp = std::numeric_limits<T>::epsilon();
  const double subnormal = std::numeric_limits<T>::denorm_min();
  return std::fabs(got - want) <= 16 * ulp * std::fabs(want) + 16 * subnormal;
}

/// Whether element `i` of `got` is element `i` of `want` (integers exactly, floating values by
/// closeEnough).
bool agrees(const at::Tensor& got, const at::Tensor& want, int64_t i) {
  switch (got.scalar_type()) {
    case ScalarType::Float:
      return closeEnough<float>(got[i].item().toDouble(), want[i].item().toDouble());
    case ScalarType::Double:
      return closeEnough<double>(got[i].item().toDouble(), want[i].item().toDouble());
    default: return got[i].item().toLong() == want[i].item().toLong();
  }
}

/// The points where `got` differs from eager, described with their arguments (the first few).
/// Eager's vectorized loop and its scalar one (which takes a tensor shorter than two vectors)
/// disagree at some points: the sign of maximum(0, -0), fmod by a subnormal (NaN from the
/// vectorized loop). Where `got` differs from `want`, the reference of the whole tensor, the
/// point passes if it is the reference of that point alone.
std::string mismatches(const Case& c, const at::Tensor& got, const at::Tensor& want) {
  std::ostringstream out;
  int shown = 0;
  for (int64_t i = 0; i < got.numel() && shown < 8; ++i) {
    if (agrees(got, want, i)) continue;
    const at::Tensor a = c.args[0].narrow(0, i, 1), b = c.args.back().narrow(0, i, 1);
    const at::Tensor alone = c.fn->reference(a, b);
    if (agrees(got.narrow(0, i, 1), alone, 0)) continue;
    ++shown;
    out << "\n  " << c.fn->name << "(";
    for (size_t arg = 0; arg < c.args.size(); ++arg) {
      out << (arg ? ", " : "") << c.args[arg][i].item().toDouble();
    }
    out << ") over " << c.dtype << ": kernel " << got[i].item().toDouble() << ", eager "
        << want[i].item().toDouble() << " (alone: " << alone[0].item().toDouble() << ")";
  }
  return out.str();
}

TEST(KernelFunctionsTest, TableRowsAreWellFormed) {
  for (const KernelFunction& fn : kernelFunctions()) {
    EXPECT_EQ(findKernelFunction(fn.name), &fn) << fn.name;
    EXPECT_EQ(kernelFunctionArity(fn.name), fn.arity) << fn.name;
    EXPECT_TRUE(fn.cpu && *fn.cpu && fn.cuda && *fn.cuda && fn.reference) << fn.name;
    EXPECT_NE(std::string(fn.cpu).find(fn.name), std::string::npos) << fn.name;
    EXPECT_NE(std::string(fn.cuda).find(fn.name), std::string::npos) << fn.name;
    bool some_type = false;
    for (ScalarType dtype : kTypes) some_type = some_type || fnAcceptsType(fn.args, dtype);
    EXPECT_TRUE(some_type) << fn.name;
  }
  EXPECT_EQ(findKernelFunction("no_such_function"), nullptr);
}

TEST(KernelFunctionsTest, EveryFunctionMatchesItsReferenceOnTheCpu) {
  if (!cpuCompilerAvailable()) GTEST_SKIP() << "no C++ compiler";
  std::string dir = (fs::temp_directory_path() / "lf-functions-test-XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  setenv("LAZYFUSE_CACHE_DIR", (dir + "/cache").c_str(), /*overwrite=*/1);

  std::vector<Case> cases;
  for (const KernelFunction& fn : kernelFunctions()) {
    for (ScalarType dtype : kTypes) {
      if (fnAcceptsType(fn.args, dtype)) cases.push_back(makeCase(fn, dtype));
    }
  }
  std::vector<const Kernel*> kernels;
  std::vector<std::string> names;
  for (const Case& c : cases) {
    kernels.push_back(&c.kernel);
    names.push_back(c.kernel.name);
  }
  CpuCompileResult compiled = compileCpp(renderCpp(kernels), names);
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  ASSERT_TRUE(compiled.module) << compiled.error;

  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const at::Tensor& a = c.args[0];
    const at::Tensor& b = c.args.size() > 1 ? c.args[1] : c.args[0];
    const at::Tensor want = c.fn->reference(a, b);
    ASSERT_EQ(want.scalar_type(), c.fn->result == FnResult::kBool ? ScalarType::Bool : c.dtype)
        << c.fn->name << " over " << c.dtype << ": the reference's result type";
    at::Tensor got = at::empty_like(want);
    std::vector<void*> buffers;
    for (const at::Tensor& arg : c.args) buffers.push_back(arg.data_ptr());
    buffers.push_back(got.data_ptr());
    compiled.module->functions[k](0, a.numel(), buffers.data(), nullptr, nullptr);
    const std::string wrong = mismatches(c, got, want);
    EXPECT_TRUE(wrong.empty()) << c.kernel.name << " differs from eager:" << wrong;
  }
}

}  // namespace
}  // namespace lazyfuse
