// Kernel batches: which kernels of a plan batchKernels gathers, and in what order (Note [Kernel
// batches]); the CUDA kernel of a batch (Note [CUDA kernel batches]) compiles with NVRTC, also
// with a table beyond the 4 KB of classic kernel parameters, and renders as its golden source.
#include "kernels/cuda_api.h"
#include "kernels/cuda_codegen.h"
#include "kernels/cuda_compiler.h"
#include "kernels/detail/cuda_dialect.h"
#include "lowering/passes.h"
#include "lowering/print_plan.h"
#include "test/cpp/golden.h"
#include "test/cpp/kernel_test_builder.h"

#include <gtest/gtest.h>

namespace lazyfuse {
namespace {

using c10::ScalarType;
using testing::KernelBuilder;

/// out0 = a * p0 + s[0] and out1 = exp(a) - b over `domain`, every buffer contiguous but the
/// scalar s; `flat` false reads b transposed (a kernel that cannot batch).
Kernel axpy(const std::string& name, std::vector<int64_t> domain, bool flat = true) {
  KernelBuilder b(name, domain);
  int32_t a = b.buffer(ScalarType::Float, false), c = b.buffer(ScalarType::Float, false);
  int32_t s = b.buffer(ScalarType::Float, false);
  int32_t out0 = b.buffer(ScalarType::Float, true), out1 = b.buffer(ScalarType::Half, true);
  int32_t p = b.param(true);
  IxPtr at = ixFlatIndex(domain);
  IxPtr other = flat || domain.size() != 2 ? at : ixOffset({ixVar(1), ixVar(0)}, {domain[0], 1});
  int32_t x = b.load(a, ScalarType::Float, at), y = b.load(c, ScalarType::Float, other);
  int32_t z = b.load(s, ScalarType::Float, ixConst(0));
  int32_t scale = b.op(KOp::kParam, ScalarType::Float, {}, p);
  b.store(b.fn("add", ScalarType::Float, {b.fn("mul", ScalarType::Float, {x, scale}), z}), out0,
          at);
  b.store(b.fn("sub", ScalarType::Float, {b.fn("exp", ScalarType::Float, {x}), y}), out1, at);
  return b.k;
}

/// A plan over temporaries: kernel k reads temps `reads[k]` and writes temps `writes[k]`.
struct PlanBuilder {
  ExecutionPlan plan;
  void kernel(Kernel k, std::vector<int32_t> reads, std::vector<int32_t> writes) {
    FusedKernel fused;
    fused.kernel = std::move(k);
    size_t read = 0, write = 0;
    for (const KBuffer& buffer : fused.kernel.buffers) {
      BufferBinding binding;
      binding.temp = true;
      binding.slot = buffer.output ? writes.at(write++) : reads.at(read++);
      fused.buffers.push_back(binding);
    }
    for (size_t p = 0; p < fused.kernel.params.size(); ++p) fused.params.push_back({});
    PlanStep step;
    step.kind = StepKind::kFusedKernel;
    step.kernel = static_cast<int32_t>(plan.kernels.size());
    plan.kernels.push_back(std::move(fused));
    plan.steps.push_back(step);
  }
  void externCall() { plan.steps.push_back(PlanStep{}); }
};

/// Each step as a list of kernel names, a batch as its members.
std::vector<std::vector<std::string>> stepsOf(const ExecutionPlan& plan) {
  std::vector<std::vector<std::string>> steps;
  for (const PlanStep& step : plan.steps) {
    steps.emplace_back();
    if (step.kind == StepKind::kExternCall) steps.back().push_back("extern");
    if (step.kind == StepKind::kFusedKernel) {
      steps.back().push_back(plan.kernels[step.kernel].kernel.name);
    }
    if (step.kind == StepKind::kKernelBatch) {
      for (int32_t k : plan.batches[step.batch].kernels) {
        steps.back().push_back(plan.kernels[k].kernel.name);
      }
    }
  }
  return steps;
}

using Steps = std::vector<std::vector<std::string>>;

TEST(KernelBatchTest, KernelsThatDifferOnlyInSizesAndBindingsBatch) {
  EXPECT_EQ(batchKey(axpy("a", {4, 5})), batchKey(axpy("b", {7})));
  EXPECT_EQ(batchKey(axpy("a", {4, 5})), batchKey(axpy("c", {2, 3, 4})));
  EXPECT_EQ(batchKey(axpy("a", {4, 5}, /*flat=*/false)), "") << "a transposed read";
  KernelBuilder reduce("r", {4});
  int32_t in = reduce.buffer(ScalarType::Float, false),
          out = reduce.buffer(ScalarType::Float, true);
  int32_t x = reduce.load(in, ScalarType::Float, ixAdd(ixMul(ixVar(0), ixConst(8)), ixRVar(0)), 0);
  reduce.store(reduce.reduce(ReduceKind::kSum, {8}, x, ScalarType::Float), out, ixVar(0));
  EXPECT_EQ(batchKey(reduce.k), "") << "a reduction";
  EXPECT_EQ(batchKey(axpy("empty", {0, 3})), "") << "no points";
  // One point: every index is 0, whether it was the point's or element 0 (the scalar s).
  EXPECT_NE(batchKey(axpy("one", {1, 1})), batchKey(axpy("b", {7})));
  EXPECT_NE(batchKey(axpy("one", {1, 1})).find("@?"), std::string::npos);
  Kernel other = axpy("d", {7});
  other.instrs[4].fn = "add";  // a different function
  EXPECT_NE(batchKey(other), batchKey(axpy("b", {7})));
}

TEST(KernelBatchTest, IndependentKernelsBatchAndDependentOnesFollow) {
  PlanBuilder b;
  b.kernel(axpy("k0", {4, 5}), {0, 1, 2}, {10, 11});
  b.kernel(axpy("k1", {7}), {10, 1, 2}, {12, 13});  // reads k0's output
  b.kernel(axpy("k2", {9}), {3, 4, 2}, {14, 15});
  b.kernel(axpy("k3", {3, 3}, /*flat=*/false), {3, 4, 2}, {16, 17});
  b.kernel(axpy("k4", {6}), {12, 4, 2}, {18, 19});  // reads k1's output
  b.kernel(axpy("k5", {5}), {5, 6, 2}, {20, 21});
  b.externCall();
  b.kernel(axpy("k6", {5}), {5, 6, 2}, {22, 23});  // alone between extern steps
  b.externCall();
  b.kernel(axpy("k9", {1}), {5, 6, 2}, {28, 29});  // one point: joins the next batch
  b.kernel(axpy("k7", {8}), {5, 6, 2}, {24, 25});
  b.kernel(axpy("k8", {2}), {5, 6, 2}, {26, 27});
  Graph graph = Graph::fromRoots({});
  ASSERT_TRUE(batchKernels(graph, b.plan));
  EXPECT_EQ(stepsOf(b.plan), (Steps{{"k0", "k2", "k5"},
                                    {"k3"},
                                    {"k1"},
                                    {"k4"},
                                    {"extern"},
                                    {"k6"},
                                    {"extern"},
                                    {"k7", "k8", "k9"}}));
  EXPECT_EQ(stepValues(graph, b.plan, b.plan.steps[0]).size(), 0u) << "temporaries only";
}

TEST(KernelBatchTest, OnlyKernelsOfOneLevelBatch) {
  PlanBuilder chain;
  chain.kernel(axpy("k0", {4}), {0, 1, 2}, {10, 11});
  chain.kernel(axpy("k1", {6}), {10, 1, 2}, {12, 13});
  Graph graph = Graph::fromRoots({});
  EXPECT_FALSE(batchKernels(graph, chain.plan));
  EXPECT_EQ(stepsOf(chain.plan), (Steps{{"k0"}, {"k1"}}));
  PlanBuilder b;
  b.kernel(axpy("k0", {4}), {0, 1, 2}, {10, 11});
  b.kernel(axpy("k1", {6}), {10, 1, 2}, {12, 13});
  b.kernel(axpy("k2", {7}), {11, 1, 2}, {14, 15});
  b.kernel(axpy("k3", {8}), {3, 1, 2}, {16, 17});
  EXPECT_TRUE(batchKernels(graph, b.plan));
  // k3 reads nothing of the run and nothing reads it: it joins the larger level.
  EXPECT_EQ(stepsOf(b.plan), (Steps{{"k0"}, {"k1", "k2", "k3"}}));
  const std::string text = printPlan(graph, b.plan);
  EXPECT_NE(text.find("batches=1)\n  0: kernel k0"), std::string::npos) << text;
}

TEST(KernelBatchTest, UpdatesWaitForTheReductionOneOfThemReads) {
  // An optimizer's updates, one of which reads a gradient a kernel of the run computes: all
  // three run after it, in one batch, rather than two of them before it and one after.
  PlanBuilder b;
  b.kernel(axpy("grad", {3, 3}, /*flat=*/false), {0, 1, 2}, {10, 11});
  b.kernel(axpy("u0", {4}), {10, 1, 2}, {12, 13});
  b.kernel(axpy("u1", {6}), {3, 1, 2}, {14, 15});
  b.kernel(axpy("u2", {7}), {4, 1, 2}, {16, 17});
  Graph graph = Graph::fromRoots({});
  EXPECT_TRUE(batchKernels(graph, b.plan));
  EXPECT_EQ(stepsOf(b.plan), (Steps{{"grad"}, {"u0", "u1", "u2"}}));
}

/// Three independent axpy updates over one domain in one kernel, as the partitioner fuses
/// them: each reads its own a and b, all share the scalar s and one parameter.
Kernel threeUpdates(const std::string& name, std::vector<int64_t> domain) {
  KernelBuilder b(name, domain);
  IxPtr at = ixFlatIndex(domain);
  int32_t s = b.buffer(ScalarType::Float, false), p = b.param(true);
  int32_t z = b.load(s, ScalarType::Float, ixConst(0));
  int32_t scale = b.op(KOp::kParam, ScalarType::Float, {}, p);
  std::vector<int32_t> values, outs;
  for (int i = 0; i < 3; ++i) {
    int32_t a = b.buffer(ScalarType::Float, false), c = b.buffer(ScalarType::Float, false);
    int32_t x = b.load(a, ScalarType::Float, at), y = b.load(c, ScalarType::Float, at);
    values.push_back(
        b.fn("add", ScalarType::Float,
             {b.fn("mul", ScalarType::Float, {x, scale}), b.fn("mul", ScalarType::Float, {y, z})}));
  }
  for (int32_t v : values) b.store(v, b.buffer(ScalarType::Float, true), at);
  return b.k;
}

TEST(KernelBatchTest, KernelsOfIndependentEqualUpdatesSplitAndBatch) {
  PlanBuilder b;
  b.kernel(threeUpdates("three", {4, 5}), {0, 1, 2, 3, 4, 5, 6}, {10, 11, 12});
  Kernel one = threeUpdates("one", {7});
  one.stores.resize(1);  // a kernel of one update (unused loads stay)
  b.kernel(one, {0, 21, 22, 23, 24, 25, 26}, {30, 31, 32});
  Graph graph = Graph::fromRoots({});
  ASSERT_TRUE(batchKernels(graph, b.plan));
  ASSERT_EQ(stepsOf(b.plan), (Steps{{"three_part0", "three_part1", "three_part2", "one"}}));
  for (const FusedKernel& k : b.plan.kernels) {
    EXPECT_EQ(k.kernel.buffers.size(), 4u) << k.kernel.name << ": s, a, b, the output";
    EXPECT_EQ(k.kernel.params.size(), 1u);
    EXPECT_EQ(k.buffers.size(), 4u);
  }
  // Part 1 binds the second update's temporaries, the shared scalar and parameter.
  const FusedKernel& part1 = b.plan.kernels[1];
  std::vector<int32_t> slots;
  for (const BufferBinding& binding : part1.buffers) slots.push_back(binding.slot);
  EXPECT_EQ(slots, (std::vector<int32_t>{3, 4, 0, 11})) << "a, b, s, then the output";
}

class CudaBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!nvrtc(&why)) GTEST_SKIP() << why;
  }
};

TEST_F(CudaBatchTest, ABatchRendersOneKernelOverATableAndCompilesForHopper) {
  // 600 members: more than one table holds, and a table far beyond 4 KB of parameters.
  std::vector<Kernel> kernels;
  for (int i = 0; i < 600; ++i) kernels.push_back(axpy("m" + std::to_string(i), {i + 1, 3}));
  std::vector<const Kernel*> members;
  for (const Kernel& k : kernels) members.push_back(&k);
  Kernel lone = axpy("lone", {4, 4}, /*flat=*/false);
  CudaSource source = renderCuda({&lone, nullptr}, {members});
  ASSERT_EQ(source.kernels.size(), 2u);
  EXPECT_EQ(source.kernels[1].name, "") << "a null kernel renders nothing";
  ASSERT_EQ(source.batches.size(), 1u);
  const CudaBatchShape& shape = source.batches[0];
  EXPECT_EQ(shape.name, "lf_batch0");
  EXPECT_EQ(shape.vector_name, "lf_batch0_v4");
  EXPECT_EQ(shape.vector_buffers, (std::vector<int32_t>{0, 1, 3, 4})) << "not the scalar s";
  // 5 buffers and 1 parameter, plus n and first: 8 words of 8 bytes a segment.
  EXPECT_EQ(shape.capacity, static_cast<int>((32000 - 16) / 64));
  EXPECT_EQ(cudaBatchTableWords(shape, 5, 1), 2u + 8u * shape.capacity);
  EXPECT_EQ(cudaBatchTableWord(shape, 2, 3), 2u + 2u * shape.capacity + 3u);
  EXPECT_EQ(source.source.find("m17"), std::string::npos) << "members are not rendered alone";
  CudaCompileResult result = compileCuda(source.source, 90);
  ASSERT_TRUE(result.binary) << result.error;
}

TEST_F(CudaBatchTest, GoldenSource) {
  Kernel a = axpy("a", {4, 5}), b = axpy("b", {3000}), c = axpy("c", {2, 3, 4});
  std::string source = renderCuda({}, {{&a, &b, &c}}).source;
  const std::string prelude =
      "// codegen version " + std::to_string(kCudaCodegenVersion) + "\n" + detail::cudaPrelude();
  ASSERT_EQ(source.compare(0, prelude.size(), prelude), 0);
  testing::expectMatchesGolden("cuda_batch.cu", source.substr(prelude.size()));
}

}  // namespace
}  // namespace lazyfuse
