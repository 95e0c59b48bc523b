// Values that are strided views of another value's buffer (Note [Strided views of buffers]):
// which values the partitioner takes as kStridedView steps instead of writing them, and the
// strides and offsets it gives them.
#include "kernels/plan_runner.h"
#include "lowering/print_plan.h"
#include "test/cpp/recorded_case.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>

namespace lazyfuse {
namespace {

using namespace testing_case;

std::vector<const StridedView*> views(const ExecutionPlan& plan) {
  std::vector<const StridedView*> result;
  for (const PlanStep& step : plan.steps) {
    if (step.kind == StepKind::kStridedView) result.push_back(&plan.views.at(step.view));
  }
  return result;
}

/// Runs a plan that has no fused kernels and compares it with eager CPU.
void expectExternOnlyPlanRunsLikeEager(const Case& c) {
  ASSERT_TRUE(c.plan.kernels.empty()) << printPlan(c.graph, c.plan);
  std::vector<at::Tensor> outputs = runPlan(c.plan, c.graph, KernelLauncher{});
  ASSERT_EQ(outputs.size(), c.expected.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    EXPECT_TRUE(at::allclose(outputs[i], c.expected[i], 1e-5, 1e-6)) << "output " << i;
  }
}

TEST(StridedViewTest, TransposedWeightOfAMatmulIsAViewNotACopy) {
  Case c = record({at::randn({5, 6}), at::randn({4, 6})}, [](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{at::mm(in[0], in[1].t())};
  });
  ASSERT_EQ(views(c.plan).size(), 1u) << printPlan(c.graph, c.plan);
  const StridedView& view = *views(c.plan)[0];
  EXPECT_EQ(view.value.position, static_cast<uint32_t>(positionOf(c.graph, "aten::t_copy")));
  EXPECT_EQ(view.sizes, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(view.strides, (std::vector<int64_t>{1, 6}));
  EXPECT_EQ(view.offset, 0);
  EXPECT_EQ(countExterns(c.plan), 1);
  expectExternOnlyPlanRunsLikeEager(c);
}

TEST(StridedViewTest, SliceAndExpandOfInputsAreViewsWithOffsetAndZeroStride) {
  Case c = record({at::randn({5, 6}), at::randn({9, 4}), at::randn({6, 1})},
                  [](const std::vector<at::Tensor>& in) {
                    at::Tensor rows = in[1].narrow(0, 2, 6);  // offset 2 rows
                    at::Tensor broadcast = in[2].expand({6, 4});
                    return std::vector<at::Tensor>{at::mm(in[0], rows), at::mm(in[0], broadcast)};
                  });
  std::vector<const StridedView*> v = views(c.plan);
  ASSERT_EQ(v.size(), 2u) << printPlan(c.graph, c.plan);
  EXPECT_EQ(v[0]->strides, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(v[0]->offset, 8);
  EXPECT_EQ(v[1]->strides, (std::vector<int64_t>{1, 0}));
  expectExternOnlyPlanRunsLikeEager(c);
}

TEST(StridedViewTest, ComputedMatmulInputIsWrittenOnceInItsOwnLayout) {
  Case c = record({at::randn({5, 6}), at::randn({4, 6})}, [](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{at::mm(in[0], (in[1] * 2).t())};
  });
  ASSERT_EQ(views(c.plan).size(), 1u) << printPlan(c.graph, c.plan);
  ASSERT_EQ(kernelSteps(c.plan).size(), 1u);
  const int64_t scaled = positionOf(c.graph, "aten::mul.Tensor") >= 0
                             ? positionOf(c.graph, "aten::mul.Tensor")
                             : positionOf(c.graph, "aten::mul.Scalar");
  EXPECT_EQ(positions(buffers(*kernelSteps(c.plan)[0], /*output=*/true)),
            (std::vector<uint32_t>{static_cast<uint32_t>(scaled)}));
  EXPECT_EQ(views(c.plan)[0]->source.position, static_cast<uint32_t>(scaled));
}

TEST(StridedViewTest, SliceOfALargerComputedValueIsComputedAlone) {
  // Writing all of in[1] * 2 to view two of its rows would cost more than writing the rows.
  Case c = record({at::randn({5, 6}), at::randn({40, 4})}, [](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{at::mm(in[0], (in[1] * 2).narrow(0, 3, 6))};
  });
  EXPECT_TRUE(views(c.plan).empty()) << printPlan(c.graph, c.plan);
  ASSERT_EQ(kernelSteps(c.plan).size(), 1u);
  // The six rows, 24 elements (Note [Coalescing kernel domains]).
  EXPECT_EQ(kernelSteps(c.plan)[0]->kernel.domain, (std::vector<int64_t>{24}));
}

TEST(StridedViewTest, ReshapeThatMergesPermutedDimensionsIsWritten) {
  // permute then reshape reads through division: no strides describe it.
  Case c = record({at::randn({5, 3}), at::randn({2, 3, 4})}, [](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{at::mm(in[0], in[1].permute({1, 0, 2}).reshape({3, 8}))};
  });
  EXPECT_TRUE(views(c.plan).empty()) << printPlan(c.graph, c.plan);
  EXPECT_EQ(kernelSteps(c.plan).size(), 1u);
}

TEST(StridedViewTest, OutputThatRenamesAnotherOutputSharesItsBuffer) {
  Case c = record({at::randn({5, 6})}, [](const std::vector<at::Tensor>& in) {
    at::Tensor y = in[0] * 3;
    return std::vector<at::Tensor>{y, y.detach()};
  });
  ASSERT_EQ(views(c.plan).size(), 1u) << printPlan(c.graph, c.plan);
  ASSERT_EQ(kernelSteps(c.plan).size(), 1u);
  EXPECT_EQ(buffers(*kernelSteps(c.plan)[0], /*output=*/true).size(), 1u);
  EXPECT_EQ(views(c.plan)[0]->strides, (std::vector<int64_t>{6, 1}));
}

TEST(StridedViewTest, TransposedOutputIsWrittenInItsOwnLayout) {
  // The output must be laid out as its meta says (row-major), which a view of y is not.
  Case c = record({at::randn({5, 6})}, [](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{(in[0] * 3).t()};
  });
  EXPECT_TRUE(views(c.plan).empty()) << printPlan(c.graph, c.plan);
  EXPECT_EQ(kernelSteps(c.plan).size(), 1u);
}

TEST(StridedViewTest, BatchedMatmulOfPermutedInputRunsLikeEager) {
  Case c =
      record({at::randn({3, 5, 6}), at::randn({3, 4, 6})}, [](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{at::bmm(in[0], in[1].transpose(1, 2))};
      });
  ASSERT_EQ(views(c.plan).size(), 1u) << printPlan(c.graph, c.plan);
  EXPECT_EQ(views(c.plan)[0]->strides, (std::vector<int64_t>{24, 1, 6}));
  expectExternOnlyPlanRunsLikeEager(c);
}

}  // namespace
}  // namespace lazyfuse
