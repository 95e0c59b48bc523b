// The fusion partitioner's plans compiled for the CPU target: the values they compute against
// eager CPU (their generated source is pinned by test_codegen_replay.cpp). The graphs are in
// partition_graphs.h.
// See Note [Fusion partitioning] in lowering/partition.cpp.
#include "kernels/cpu_codegen.h"
#include "kernels/cpu_compiler.h"
#include "kernels/cpu_row_groups.h"
#include "kernels/plan_runner.h"
#include "lowering/print_plan.h"
#include "test/cpp/partition_graphs.h"
#include "test/cpp/recorded_case.h"
#include "test/cpp/temp_dir.h"

#include <ATen/ops/allclose.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <stdlib.h>

namespace lazyfuse {
namespace {

using namespace testing_case;

// --- execution: the compiled plans compute what eager CPU does ---

class PartitionRunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = std::make_unique<testing::TempDir>("lf-partition-test");
    ASSERT_TRUE(root_->made());
  }
  static void TearDownTestSuite() { root_.reset(); }
  void SetUp() override {
    if (!cpuCompilerAvailable()) GTEST_SKIP() << "no C++ compiler";
    root_->useAsCacheDir();
  }

  static void expectRunsLikeEager(const Case& c, double rtol = 1e-5, double atol = 1e-6) {
    std::vector<const Kernel*> kernels;
    std::vector<std::string> names;
    for (const FusedKernel& k : c.plan.kernels) {
      kernels.push_back(&k.kernel);
      names.push_back(k.kernel.name);
    }
    ASSERT_FALSE(kernels.empty());
    CpuCompileResult compiled = compileCpp(renderCpp(kernels), names);
    ASSERT_TRUE(compiled.module) << compiled.error;
    expectOutputs(c, runPlan(c.plan, c.graph, compiled.module->functions), rtol, atol);
    // The same plan as the CPU target runs it, with its row groups (Note [CPU row groups]).
    CpuCompileResult program = compileCppProgram(renderCppProgram(c.plan));
    ASSERT_TRUE(program.module) << program.error;
    const std::vector<CpuKernelFn>& functions = program.module->functions;
    expectOutputs(c,
                  runPlan(c.plan, c.graph,
                          [&](size_t index, const Graph& g, PlanValues& v) {
                            runCpuKernel(c.plan, index, functions, g, v);
                          }),
                  rtol, atol);
  }

  static void expectOutputs(const Case& c, const std::vector<at::Tensor>& got, double rtol,
                            double atol) {
    ASSERT_EQ(got.size(), c.expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].sizes(), c.expected[i].sizes()) << i;
      EXPECT_EQ(got[i].scalar_type(), c.expected[i].scalar_type()) << i;
      EXPECT_TRUE(at::allclose(got[i], c.expected[i], rtol, atol))
          << "output " << i << "\n"
          << printPlan(c.graph, c.plan) << got[i] << "\nexpected\n"
          << c.expected[i];
    }
  }

  static std::unique_ptr<testing::TempDir> root_;
};

std::unique_ptr<testing::TempDir> PartitionRunTest::root_;

TEST_F(PartitionRunTest, PointwiseChain) {
  expectRunsLikeEager(record(chainInputs(), pointwiseChain));
}
TEST_F(PartitionRunTest, BroadcastChain) {
  expectRunsLikeEager(record(broadcastInputs(), broadcastChain));
}
TEST_F(PartitionRunTest, Diamond) { expectRunsLikeEager(record(chainInputs(), diamond)); }
TEST_F(PartitionRunTest, Views) {
  expectRunsLikeEager(record(viewInputs(), transposedAdd));
  expectRunsLikeEager(record(viewInputs(), reshapedAdd));
}
TEST_F(PartitionRunTest, ReductionWithPrologueAndEpilogue) {
  expectRunsLikeEager(record({at::randn({6, 9})}, sumExp));
}
TEST_F(PartitionRunTest, Softmax) { expectRunsLikeEager(record(rowsInputs(), softmax)); }
TEST_F(PartitionRunTest, SoftmaxComposite) {
  expectRunsLikeEager(record(rowsInputs(), softmaxComposite));
  expectRunsLikeEager(record(rowsInputs(), softmaxOverFirstRowSum));
}
TEST_F(PartitionRunTest, LargeFullSum) {
  expectRunsLikeEager(record({at::randn({300, 300})}, sumAll), 1e-4, 1e-4);
}
TEST_F(PartitionRunTest, ExternBoundary) {
  expectRunsLikeEager(record(linearInputs(), linearClamp), 1e-5, 1e-5);
}
TEST_F(PartitionRunTest, LayerNorm) { expectRunsLikeEager(layerNormCase(), 1e-5, 1e-5); }
TEST_F(PartitionRunTest, LayerNormRowGroup) {
  expectRunsLikeEager(layerNormCase(16, 20, 16), 1e-5, 1e-5);
}

}  // namespace
}  // namespace lazyfuse
