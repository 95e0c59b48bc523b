// Donated buffers (Note [Donated buffers]): which kernel outputs planDonations lets write into
// the memory of which inputs, in plans recorded on the lazy device and lowered with fusion; and
// when a run takes that memory.
#include "kernels/cpu_codegen.h"
#include "kernels/cpu_compiler.h"
#include "kernels/cpu_row_groups.h"
#include "kernels/plan_runner.h"
#include "lowering/passes.h"
#include "lowering/print_plan.h"
#include "test/cpp/partition_graphs.h"
#include "test/cpp/recorded_case.h"
#include "test/cpp/temp_dir.h"

#include <ATen/ops/allclose.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <stdlib.h>

namespace lazyfuse {
namespace {

using namespace testing_case;

/// "%<output> <- %<input>" for each donation of `k`, in order.
std::vector<std::string> donations(const FusedKernel& k) {
  std::vector<std::string> pairs;
  for (const Donation& d : k.donations) {
    const BufferBinding& out = k.buffers.at(d.output);
    const BufferBinding& in = k.buffers.at(d.input);
    pairs.push_back("%" + std::to_string(out.value.position) + " <- %" +
                    std::to_string(in.value.position));
    EXPECT_TRUE(k.kernel.buffers.at(d.output).may_alias);
    EXPECT_TRUE(k.kernel.buffers.at(d.input).may_alias);
    EXPECT_TRUE(out.meta == in.meta);
  }
  return pairs;
}

/// "%<output> <- %<input>" for a graph output taking the memory of a device-data input.
std::string pair(const Case& c, size_t output, size_t data) {
  return "%" + std::to_string(c.graph.outputs().at(output).position) + " <- %" +
         std::to_string(c.graph.dataPositions().at(data));
}

/// Buffers marked may_alias in `k`.
int aliasing(const FusedKernel& k) {
  int n = 0;
  for (const KBuffer& b : k.kernel.buffers) n += b.may_alias;
  return n;
}

TEST(PlanDonationsTest, ElementwiseOutputTakesItsInput) {
  Case c = record(chainInputs(), pointwiseChain);
  auto kernels = kernelSteps(c.plan);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(donations(*kernels[0]), std::vector<std::string>{pair(c, 0, 0)});
  EXPECT_EQ(aliasing(*kernels[0]), 2);
}

TEST(PlanDonationsTest, BroadcastInputsAreNotTaken) {
  Case c = record(broadcastInputs(), broadcastChain);
  for (const FusedKernel* k : kernelSteps(c.plan)) {
    EXPECT_TRUE(donations(*k).empty());
    EXPECT_EQ(aliasing(*k), 0);
  }
}

TEST(PlanDonationsTest, OnlyTheInputReadAtTheStoredIndexIsTaken) {
  // in[0] [6, 4] is read transposed, in[1] [4, 6] as the output is written.
  Case c = record(viewInputs(), transposedAdd);
  auto kernels = kernelSteps(c.plan);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(donations(*kernels[0]), std::vector<std::string>{pair(c, 0, 1)});
}

TEST(PlanDonationsTest, InputReadAtTwoIndicesIsNotTaken) {
  Case c =
      record({at::randn({5, 5})}, [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
        return {in[0] * 2 + in[0].t()};
      });
  auto kernels = kernelSteps(c.plan);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_TRUE(donations(*kernels[0]).empty());
}

TEST(PlanDonationsTest, GraphOutputsAreNotTakenAndAnInputOnlyOnce) {
  // a = exp(x) and b = 2a + x: both outputs could take x, which only one gets, and b cannot
  // take a, which the graph returns.
  Case c = record(chainInputs(), [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
    at::Tensor a = in[0].exp();
    return {a, a * 2 + in[0]};
  });
  auto kernels = kernelSteps(c.plan);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(donations(*kernels[0]), std::vector<std::string>{pair(c, 0, 0)});
}

TEST(PlanDonationsTest, NoDeviceDataDonationBeforeAnExternCall) {
  // clamp_min(mm(x * 0.5, w) + b): the kernel after the matmul may take the matmul's result (an
  // intermediate it reads last); the kernel before it may not take x.
  Case c = record(linearInputs(), linearClamp);
  ASSERT_EQ(countExterns(c.plan), 1);
  bool after_extern = false;
  int donated = 0;
  for (const PlanStep& step : c.plan.steps) {
    if (step.kind == StepKind::kExternCall) after_extern = true;
    if (step.kind != StepKind::kFusedKernel) continue;
    const FusedKernel& k = c.plan.kernels.at(step.kernel);
    if (!after_extern) {
      EXPECT_TRUE(donations(k).empty());
    }
    if (after_extern) donated += static_cast<int>(donations(k).size());
  }
  EXPECT_EQ(donated, 1);
}

TEST(PlanDonationsTest, BetweenExternCallsOnlyIntermediatesAreTaken) {
  // mm(clamp_min(mm(x, w) * 2 + x, 0), w): the kernel between the matmuls may take the first
  // matmul's result, which a rerun computes again, but not x, which it could not.
  Case c = record({at::randn({8, 8}), at::randn({8, 8})},
                  [](const std::vector<at::Tensor>& in) -> std::vector<at::Tensor> {
                    at::Tensor h = at::clamp_min(at::mm(in[0], in[1]) * 2 + in[0], 0);
                    return {at::mm(h, in[1])};
                  });
  ASSERT_EQ(countExterns(c.plan), 2);
  const int64_t first_mm = positionOf(c.graph, "aten::mm");
  ASSERT_GE(first_mm, 0);
  std::vector<std::string> taken;
  for (const FusedKernel* k : kernelSteps(c.plan)) {
    for (const std::string& d : donations(*k)) taken.push_back(d);
  }
  ASSERT_EQ(taken.size(), 1u) << printPlan(c.graph, c.plan);
  EXPECT_NE(taken[0].find("<- %" + std::to_string(first_mm)), std::string::npos) << taken[0];
}

TEST(PlanDonationsTest, KernelsWithReductionsTakeNothing) {
  Case c = record(rowsInputs(), softmaxComposite);
  int donated = 0;
  for (const FusedKernel* k : kernelSteps(c.plan)) {
    if (!k->kernel.reductions.empty()) {
      EXPECT_TRUE(donations(*k).empty());
    }
    donated += static_cast<int>(donations(*k).size());
  }
  // The last kernel, without reductions, reads x a last time at the index it writes.
  EXPECT_EQ(donated, 1);
}

// --- at run time: the memory is taken only when nothing but the plan holds it ---

class DonationRunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = std::make_unique<testing::TempDir>("lf-donation-test");
    ASSERT_TRUE(root_->made());
  }
  static void TearDownTestSuite() { root_.reset(); }
  void SetUp() override {
    if (!cpuCompilerAvailable()) GTEST_SKIP() << "no C++ compiler";
    root_->useAsCacheDir();
  }

  /// Runs `c`'s plan as the CPU target does, with every device-data input free when `free`.
  static std::vector<at::Tensor> run(const Case& c, bool free, DonationState& donation) {
    CpuCompileResult program = compileCppProgram(renderCppProgram(c.plan));
    EXPECT_TRUE(program.module) << program.error;
    if (!program.module) return {};
    const std::vector<CpuKernelFn>& functions = program.module->functions;
    donation.free_data.assign(c.graph.nodes().size(), free ? 1 : 0);
    return runPlan(
        c.plan, c.graph,
        [&](size_t index, const Graph& g, PlanValues& v) {
          runCpuKernel(c.plan, index, functions, g, v);
        },
        {}, &donation);
  }

  /// The device-data buffer of `c`'s first input.
  static const at::Tensor& input(const Case& c) {
    return c.graph.nodes().at(c.graph.dataPositions().at(0))->data();
  }

  static std::unique_ptr<testing::TempDir> root_;
};

std::unique_ptr<testing::TempDir> DonationRunTest::root_;

TEST_F(DonationRunTest, OutputTakesTheMemoryOfAFreeInput) {
  Case c = record(chainInputs(), pointwiseChain);
  const void* address = input(c).data_ptr();
  DonationState donation;
  std::vector<at::Tensor> got = run(c, /*free=*/true, donation);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(donation.donated, 1);
  EXPECT_EQ(got[0].data_ptr(), address);
  EXPECT_TRUE(at::allclose(got[0], c.expected[0], 1e-5, 1e-6));
}

TEST_F(DonationRunTest, InputHeldElsewhereKeepsItsMemory) {
  Case c = record(chainInputs(), pointwiseChain);
  const at::Tensor held = input(c);  // as a live tensor sharing the buffer would
  const at::Tensor before = held.clone();
  DonationState donation;
  std::vector<at::Tensor> got = run(c, /*free=*/true, donation);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(donation.donated, 0);
  EXPECT_NE(got[0].data_ptr(), held.data_ptr());
  EXPECT_TRUE(at::equal(held, before));
  EXPECT_TRUE(at::allclose(got[0], c.expected[0], 1e-5, 1e-6));
}

TEST_F(DonationRunTest, StorageSharedWithAnotherTensorIsNotTaken) {
  Case c = record(chainInputs(), pointwiseChain);
  const at::Tensor view = input(c).view({-1});  // another tensor on the same storage
  const at::Tensor before = view.clone();
  DonationState donation;
  run(c, /*free=*/true, donation);
  EXPECT_EQ(donation.donated, 0);
  EXPECT_TRUE(at::equal(view, before));
}

TEST_F(DonationRunTest, InputReachedFromOutsideTheGraphIsNotTaken) {
  Case c = record(chainInputs(), pointwiseChain);
  const at::Tensor before = input(c).clone();
  DonationState donation;
  run(c, /*free=*/false, donation);
  EXPECT_EQ(donation.donated, 0);
  EXPECT_TRUE(at::equal(input(c), before));
}

}  // namespace
}  // namespace lazyfuse
