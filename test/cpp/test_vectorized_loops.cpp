// Note [Vectorized CPU loops]
// A fused CPU kernel is fast only while the compiler vectorizes its point loop: one scalar call
// inside it (sincosf, floorf under trapping math, a branch next to a libmvec call, a _Float16
// conversion) turns the whole loop scalar, and a 10-op chain fell to 0.3x eager that way while
// every value stayed right. This test renders a corpus of kernels (every kernel function of
// the table of Note [Kernel functions] over Float, some again over Half and BFloat16 buffers,
// Double, integer and Bool ones, broadcast loads, floating `where`s), compiles them with the
// flags compileCpp uses plus GCC's vectorization report (-fopt-info-vec-optimized), and
// requires the report to name each kernel's `omp simd` loop as vectorized. The functions that
// have no vector implementation to call say why in their row's cpu_scalar; the test holds them
// to it, so the row (and docs/kernel_sweep.md) is updated when one changes.
#include "kernels/cpu_codegen.h"
#include "kernels/cpu_compiler.h"
#include "lowering/kernel_builder.h"
#include "lowering/kernel_functions.h"
#include "test/cpp/kernel_test_builder.h"
#include "test/cpp/temp_dir.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace lazyfuse {
namespace {

using c10::ScalarType;
using Builder = testing::KernelBuilder;

const std::vector<std::string> kIntFunctions = {
    "neg",         "abs",         "add",        "sub",         "mul", "maximum", "minimum",
    "bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor", "eq",  "lt"};
const std::vector<std::string> kBoolFunctions = {"logical_not", "logical_and", "logical_or",
                                                 "logical_xor"};

/// Why the loop of kernel function `fn` over Float stays scalar (its row's cpu_scalar), or
/// nullptr.
const char* scalarReason(const std::string& fn) {
  const KernelFunction* row = findKernelFunction(fn);
  return row ? row->cpu_scalar : nullptr;
}

/// How a kernel of the corpus reads its inputs over a [64, 64] domain.
enum class Layout { kContiguous, kTransposed, kBroadcast };

struct Case {
  std::string name;  // the kernel's C name
  std::string fn;
  ScalarType dtype;  // of the buffers
  Layout layout;
  Kernel kernel;
};

ScalarType computeType(ScalarType dtype) {
  return dtype == ScalarType::Half || dtype == ScalarType::BFloat16 ? ScalarType::Float : dtype;
}

Case makeCase(const std::string& fn, ScalarType dtype, Layout layout, const std::string& name) {
  Builder b(name, {64, 64});
  const ScalarType compute = computeType(dtype);
  const IxPtr flat = ixOffset({ixVar(0), ixVar(1)}, {64, 1});
  const IxPtr transposed = ixOffset({ixVar(0), ixVar(1)}, {1, 64});
  const IxPtr row = ixVar(1);
  std::vector<int32_t> args;
  for (int i = 0; i < kernelFunctionArity(fn); ++i) {
    const int32_t in = b.buffer(dtype, false);
    IxPtr index = flat;
    if (layout == Layout::kTransposed) index = transposed;
    if (layout == Layout::kBroadcast && i == 0) index = row;
    args.push_back(b.load(in, compute, index));
  }
  const ScalarType result = returnsBool(fn) ? ScalarType::Bool : compute;
  int32_t value = b.fn(fn, result, args);
  // A 3-op chain around it, as fused code has: the function's loop must stay vectorized there.
  if (result != ScalarType::Bool && compute != ScalarType::Bool) {
    value = b.fn("add", result, {b.fn("mul", result, {value, args[0]}), args.back()});
  }
  const int32_t out = b.buffer(returnsBool(fn) ? ScalarType::Bool : dtype, true);
  b.store(value, out, flat);
  return Case{name, fn, dtype, layout, b.k};
}

/// where(c, sqrt(a) / b, a) over `dtype` buffers, its condition `a < b` or, `invariant`, a
/// float parameter compared with 0 (the same at every point, as the fused Adam step's weight
/// decay): Note [Branch-free selects].
Case makeWhereCase(ScalarType dtype, bool invariant, const std::string& name) {
  Builder b(name, {64, 64});
  const ScalarType compute = computeType(dtype);
  const IxPtr flat = ixOffset({ixVar(0), ixVar(1)}, {64, 1});
  const int32_t x = b.load(b.buffer(dtype, false), compute, flat);
  const int32_t y = b.load(b.buffer(dtype, false), compute, flat);
  const int32_t cond =
      invariant ? b.fn("ne", ScalarType::Bool,
                       {b.op(KOp::kParam, compute, {}, b.param(true)), b.constant(compute, 0)})
                : b.fn("lt", ScalarType::Bool, {x, y});
  const int32_t picked = b.fn("div", compute, {b.fn("sqrt", compute, {x}), y});
  const int32_t value = b.op(KOp::kWhere, compute, {cond, picked, x});
  b.store(value, b.buffer(dtype, true), flat);
  return Case{name, "where", dtype, Layout::kContiguous, b.k};
}

std::vector<Case> corpus() {
  std::vector<Case> cases;
  auto add = [&](const std::string& fn, ScalarType dtype, Layout layout) {
    const std::string name = "vec_" + std::to_string(cases.size()) + "_" + fn;
    cases.push_back(makeCase(fn, dtype, layout, name));
  };
  for (const KernelFunction& fn : kernelFunctions()) {
    if (!fnAcceptsType(fn.args, ScalarType::Float)) continue;
    add(fn.name, ScalarType::Float, Layout::kContiguous);
  }
  for (ScalarType half : {ScalarType::Half, ScalarType::BFloat16}) {
    for (const char* fn : {"add", "mul", "div", "exp", "sin", "cos", "tanh", "sigmoid", "floor",
                           "maximum", "sqrt", "log", "erf", "lt"}) {
      add(fn, half, Layout::kContiguous);
    }
  }
  for (const char* fn : {"add", "exp", "sin", "sqrt", "maximum", "floor", "pow"}) {
    add(fn, ScalarType::Double, Layout::kContiguous);
  }
  for (ScalarType dtype : {ScalarType::Float, ScalarType::Double, ScalarType::BFloat16}) {
    for (bool invariant : {false, true}) {
      const std::string name = "vec_" + std::to_string(cases.size()) + "_where";
      cases.push_back(makeWhereCase(dtype, invariant, name));
    }
  }
  for (const std::string& fn : kIntFunctions) add(fn, ScalarType::Int, Layout::kContiguous);
  for (const std::string& fn : kBoolFunctions) add(fn, ScalarType::Bool, Layout::kContiguous);
  // Not kTransposed: a load whose index steps 64 elements per point is a gather, which GCC 12
  // leaves scalar under some -march=native tunings (znver3 here) and not others, so it is no
  // property of the renderer; docs/kernel_sweep.md reports its speed.
  for (Layout layout : {Layout::kBroadcast}) {
    for (const char* fn : {"add", "exp", "sin", "floor", "maximum", "sigmoid"}) {
      add(fn, ScalarType::Float, layout);
      add(fn, ScalarType::BFloat16, layout);
    }
  }
  return cases;
}

/// Line numbers (1-based) of each kernel's `omp simd` loop in `source`, by kernel name.
std::map<std::string, std::vector<int>> simdLoops(const std::string& source) {
  std::map<std::string, std::vector<int>> loops;
  std::istringstream in(source);
  std::string line, current;
  bool pragma = false;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t fn = line.find("extern \"C\" void ");
    if (fn != std::string::npos) {
      const size_t start = fn + 16;
      current = line.substr(start, line.find('(', start) - start);
    }
    if (pragma && line.find("for (") != std::string::npos) loops[current].push_back(number);
    pragma = line.find("#pragma omp simd") != std::string::npos;
  }
  return loops;
}

/// Runs `command` through the shell; its standard output and error, and its exit status.
std::string runCommand(const std::string& command, int& status) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    status = -1;
    return output;
  }
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  status = pclose(pipe);
  return output;
}

TEST(VectorizedLoopsTest, EveryKernelFunctionLoopIsVectorized) {
  if (!cpuCompilerAvailable()) GTEST_SKIP() << "no C++ compiler";
  const std::string version = cpuCompilerVersion();
  if (version.find("clang") != std::string::npos) {
    GTEST_SKIP() << "the vectorization report is GCC's; the compiler is " << version;
  }
  const std::vector<Case> cases = corpus();
  std::vector<const Kernel*> kernels;
  for (const Case& c : cases) kernels.push_back(&c.kernel);
  const std::string source = renderCpp(kernels);
  const std::map<std::string, std::vector<int>> loops = simdLoops(source);

  std::string src, command, report;
  int status = 0;
  {
    const testing::TempDir dir("lf-vectorized");
    ASSERT_TRUE(dir.made());
    src = dir.path() + "/corpus.cpp";
    std::ofstream(src) << source;
    for (const std::string& arg : cpuCompileCommand()) command += arg + " ";
    // -fno-ipa-icf: GCC would fold kernels of the same code into one (div and div_by_scalar are
    // the same on the CPU), and report the loop of the one it keeps only.
    command += "-fno-ipa-icf -fopt-info-vec-optimized -c -x c++ " + src + " -o " + dir.path() +
               "/corpus.o";
    report = runCommand(command, status);
  }
  ASSERT_EQ(status, 0) << command << "\n" << report;

  std::set<int> vectorized;
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(src + ":", 0) != 0 || line.find("loop vectorized") == std::string::npos) {
      continue;
    }
    vectorized.insert(std::atoi(line.c_str() + src.size() + 1));
  }
  int checked = 0;
  for (const Case& c : cases) {
    auto it = loops.find(c.name);
    ASSERT_TRUE(it != loops.end() && !it->second.empty()) << "no omp simd loop in " << c.name;
    bool all = true;
    // GCC names a loop by the line of its `for` or, for a loop it versioned, the body's first.
    for (int line : it->second) {
      all = all && (vectorized.count(line) > 0 || vectorized.count(line + 1) > 0);
    }
    const bool scalar_expected =
        scalarReason(c.fn) != nullptr && computeType(c.dtype) != ScalarType::Int;
    if (scalar_expected) {
      EXPECT_FALSE(all) << c.name << " is vectorized now: clear " << c.fn
                        << "'s cpu_scalar in the kernel function table and take it off "
                           "docs/kernel_sweep.md's list";
    } else {
      EXPECT_TRUE(all) << c.name << " (" << c.fn << " over " << c.dtype
                       << ") is not vectorized; its source:\n"
                       << renderCpp({&c.kernel});
    }
    ++checked;
  }
  EXPECT_GE(checked, 100);
}

}  // namespace
}  // namespace lazyfuse
