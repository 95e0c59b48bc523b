// Note [CPU loop parts] (kernels/cpu_loop_parts.cpp): a row loop whose independent computations
// touch more than kPartBuffers buffers runs them in parts, one loop after another over the same
// points, each computation whole in one part, and a store into a donated input's memory in the
// part that reads that input.
#include "kernels/cpu_codegen.h"
#include "kernels/cpu_compiler.h"
#include "kernels/detail/cpu_loop_parts.h"
#include "test/cpp/kernel_test_builder.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace lazyfuse {
namespace {

using c10::ScalarType;
using Builder = testing::KernelBuilder;

using testing::countOccurrences;

std::vector<bool> allInner(const Kernel& k) { return std::vector<bool>(k.instrs.size(), true); }

/// The part each store and each instruction is in; every instruction in exactly one part.
std::vector<size_t> partOfStores(const std::vector<detail::CpuLoopPart>& parts, size_t stores) {
  std::vector<size_t> part(stores, SIZE_MAX);
  for (size_t p = 0; p < parts.size(); ++p) {
    for (size_t s = 0; s < stores; ++s) {
      if (!parts[p].stores[s]) continue;
      EXPECT_EQ(part[s], SIZE_MAX) << "store " << s << " in two parts";
      part[s] = p;
    }
  }
  return part;
}

// out_i = a_i * (i + 1) + b_i for 12 independent i over [3, 300]: 36 buffers, 3 per computation.
TEST(CpuLoopPartsTest, IndependentComputationsSplitIntoPartsOfFewBuffers) {
  const int64_t rows = 3, cols = 300, n = 12;
  Builder k("loop_parts", {rows, cols});
  const IxPtr flat = ixOffset({ixVar(0), ixVar(1)}, {cols, 1});
  for (int64_t i = 0; i < n; ++i) {
    const int32_t a = k.buffer(ScalarType::Float, false), b = k.buffer(ScalarType::Float, false);
    const int32_t out = k.buffer(ScalarType::Float, true);
    const int32_t x = k.fn("mul", ScalarType::Float,
                           {k.load(a, ScalarType::Float, flat),
                            k.constant(ScalarType::Float, static_cast<double>(i + 1))});
    k.store(k.fn("add", ScalarType::Float, {x, k.load(b, ScalarType::Float, flat)}), out, flat);
  }
  const std::vector<detail::CpuLoopPart> parts = detail::cpuLoopParts(k.k, allInner(k.k));
  ASSERT_EQ(parts.size(), 3u);  // 5 computations (15 buffers) per part
  const std::vector<size_t> part = partOfStores(parts, n);
  for (size_t p = 0; p < parts.size(); ++p) {
    std::set<int32_t> buffers;
    for (size_t i = 0; i < k.k.instrs.size(); ++i) {
      if (parts[p].instrs[i] && k.k.instrs[i].op == KOp::kLoad)
        buffers.insert(k.k.instrs[i].buffer);
    }
    for (size_t s = 0; s < static_cast<size_t>(n); ++s) {
      if (part[s] == p) buffers.insert(k.k.stores[s].buffer);
    }
    EXPECT_LE(buffers.size(), detail::kPartBuffers);
  }
  for (size_t i = 0; i < k.k.instrs.size(); ++i) {
    size_t in = 0;
    for (const auto& p : parts) in += p.instrs[i];
    EXPECT_EQ(in, 1u) << "instruction " << i;
  }

  if (!cpuCompilerAvailable()) GTEST_SKIP() << "no C++ compiler";
  const std::string source = renderCpp({&k.k});
  EXPECT_EQ(countOccurrences(source, "for (lf_i64 v1 = lo; v1 < hi; ++v1)"), 3u) << source;
  const CpuCompileResult result = compileCpp(source, {k.k.name});
  ASSERT_TRUE(result.module) << result.error;
  std::vector<std::vector<float>> data(3 * n, std::vector<float>(rows * cols, 0.0f));
  std::vector<void*> pointers;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t e = 0; e < rows * cols; ++e) {
      data[3 * i][e] = static_cast<float>(e % 17) - 8.0f;
      data[3 * i + 1][e] = static_cast<float>(i * 1000 + e);
    }
    for (int64_t j = 0; j < 3; ++j) pointers.push_back(data[3 * i + j].data());
  }
  const int64_t points = rows * cols, mid = points / 2 + 7;  // two threads, split mid-row
  result.module->functions.at(0)(0, mid, pointers.data(), nullptr, nullptr);
  result.module->functions.at(0)(mid, points, pointers.data(), nullptr, nullptr);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t e = 0; e < rows * cols; ++e) {
      ASSERT_EQ(data[3 * i + 2][e], data[3 * i][e] * static_cast<float>(i + 1) + data[3 * i + 1][e])
          << i << " " << e;
    }
  }
}

// A store into its donor's memory stays in the part of every load of that donor, even a load
// that is its own instruction in another computation: `first = a + 1` may take a's memory, and
// `second = a * 3` must read a before it is overwritten.
TEST(CpuLoopPartsTest, StoreIntoDonorMemoryStaysWithTheDonorsLoads) {
  const int64_t cols = 1000;
  Builder k("loop_parts_donor", {cols});
  const IxPtr flat = ixVar(0);
  const int32_t a = k.buffer(ScalarType::Float, false);
  const int32_t first = k.buffer(ScalarType::Float, true);
  k.store(k.fn("add", ScalarType::Float,
               {k.load(a, ScalarType::Float, flat), k.constant(ScalarType::Float, 1)}),
          first, flat);
  k.k.buffers[first].may_alias = k.k.buffers[a].may_alias = true;
  k.k.buffers[first].donor = a;
  // Eight independent copies (16 buffers) between the two computations that read a.
  for (int i = 0; i < 8; ++i) {
    const int32_t in = k.buffer(ScalarType::Float, false), out = k.buffer(ScalarType::Float, true);
    k.store(k.load(in, ScalarType::Float, flat), out, flat);
  }
  const int32_t second = k.buffer(ScalarType::Float, true);
  k.store(k.fn("mul", ScalarType::Float,
               {k.load(a, ScalarType::Float, flat), k.constant(ScalarType::Float, 3)}),
          second, flat);
  const std::vector<detail::CpuLoopPart> parts = detail::cpuLoopParts(k.k, allInner(k.k));
  ASSERT_GE(parts.size(), 2u);
  const std::vector<size_t> part = partOfStores(parts, k.k.stores.size());
  EXPECT_EQ(part.front(), part.back());

  if (!cpuCompilerAvailable()) GTEST_SKIP() << "no C++ compiler";
  const CpuCompileResult result = compileCpp(renderCpp({&k.k}), {k.k.name});
  ASSERT_TRUE(result.module) << result.error;
  std::vector<float> av(cols), copies(16 * cols, 1.0f), second_v(cols);
  for (int64_t e = 0; e < cols; ++e) av[e] = static_cast<float>(e);
  std::vector<void*> pointers = {av.data(), av.data()};  // `first` takes a's memory
  for (int i = 0; i < 16; ++i) pointers.push_back(copies.data() + i * cols);
  pointers.push_back(second_v.data());
  result.module->functions.at(0)(0, cols, pointers.data(), nullptr, nullptr);
  for (int64_t e = 0; e < cols; ++e) {
    ASSERT_EQ(av[e], static_cast<float>(e) + 1) << e;
    ASSERT_EQ(second_v[e], static_cast<float>(e) * 3) << e;
  }
}

}  // namespace
}  // namespace lazyfuse
