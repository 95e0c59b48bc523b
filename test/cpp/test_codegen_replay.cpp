// Codegen replay: a fixed corpus of recorded graphs (pointwise, broadcasts, views, reductions,
// row groups, split reductions, extern calls between kernels, kernel batches) lowered for both
// targets, with their plans and their CPU and CUDA sources compared with checked-in files in
// test/golden/replay/. A change to lowering or rendering that changes generated code fails here
// unless it updates the files in the same commit (LAZYFUSE_UPDATE_GOLDEN=1, then review the
// diff). The older goldens of test_compiled_plans.cpp, test_cuda_codegen.cpp and
// test_kernel_batches.cpp pin hand-built kernels and a few plans; this corpus pins what real
// recorded graphs render to.
#include "kernels/cpu_row_groups.h"
#include "kernels/cuda_codegen.h"
#include "kernels/detail/cpu_dialect.h"
#include "kernels/detail/cuda_dialect.h"
#include "lowering/pipeline.h"
#include "lowering/print_plan.h"
#include "test/cpp/golden.h"
#include "test/cpp/partition_graphs.h"
#include "test/cpp/recorded_case.h"

#include <ATen/ops/randn.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

namespace lazyfuse {
namespace {

using namespace testing_case;

/// `source` without the prelude every source of its target starts with.
std::string withoutPrelude(const std::string& source, const std::string& prelude) {
  EXPECT_EQ(source.compare(0, prelude.size(), prelude), 0) << "source lacks its prelude";
  return source.substr(std::min(prelude.size(), source.size()));
}

void expectReplays(const std::string& name, const std::function<Case()>& make) {
  Case c = make(), again = make();
  ASSERT_FALSE(c.plan.kernels.empty()) << name << " has no fused kernel";
  // Two recordings of the same program lower and render byte-identically.
  EXPECT_EQ(printPlan(c.graph, c.plan), printPlan(again.graph, again.plan));
  EXPECT_EQ(renderCppProgram(c.plan).source, renderCppProgram(again.plan).source);
  const std::string cpu_prelude =
      "// codegen version " + std::to_string(kCpuCodegenVersion) + "\n" + detail::cpuPrelude();
  testing::expectMatchesGolden("replay/" + name + ".cpu.plan.txt", printPlan(c.graph, c.plan));
  testing::expectMatchesGolden("replay/" + name + ".cpp",
                               withoutPrelude(renderCppProgram(c.plan).source, cpu_prelude));
  // As the CUDA target lowers it: kernel batches, and what only the CPU leaves to ATen fused.
  const ExecutionPlan cuda =
      lowerGraph(c.graph, /*fuse=*/true, /*batch=*/true, KernelTarget::kCuda);
  const std::string cuda_prelude =
      "// codegen version " + std::to_string(kCudaCodegenVersion) + "\n" + detail::cudaPrelude();
  const CudaPlanKernels inputs = cudaPlanKernels(cuda);
  testing::expectMatchesGolden("replay/" + name + ".cuda.plan.txt", printPlan(c.graph, cuda));
  testing::expectMatchesGolden(
      "replay/" + name + ".cu",
      withoutPrelude(renderCuda(inputs.kernels, inputs.batches).source, cuda_prelude));
}

std::vector<at::Tensor> viewsChain(const std::vector<at::Tensor>& in) {
  // A transpose, a slice with a step, a narrow of the last dim and an expand, read in one kernel.
  at::Tensor t = in[0].t().slice(0, 0, 8, 2);  // [4, 6] from [6, 8]
  return {(t + in[1].narrow(1, 1, 6)).exp() * in[2].expand({4, 6})};
}

std::vector<at::Tensor> columnSum(const std::vector<at::Tensor>& in) {
  // A weight gradient's reduction: a tall input summed down its columns.
  return {(in[0] * 2).sum({0})};
}

std::vector<at::Tensor> wideSum(const std::vector<at::Tensor>& in) {
  // Enough elements into one value that the CUDA target splits the reduction across blocks.
  return {(in[0] * in[0] + 1).log().sum(), in[0].amax()};
}

std::vector<at::Tensor> sameOpOnSizes(const std::vector<at::Tensor>& in) {
  // Independent kernels that differ only in sizes: one batch on the CUDA target.
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : in) out.push_back((t * 0.9 + 0.1).tanh());
  return out;
}

TEST(CodegenReplay, PointwiseChain) {
  expectReplays("pointwise_chain", [] { return record(chainInputs(), pointwiseChain); });
}

TEST(CodegenReplay, Broadcast) {
  expectReplays("broadcast", [] { return record(broadcastInputs(), broadcastChain); });
}

TEST(CodegenReplay, Views) {
  expectReplays("views", [] {
    return record({at::randn({6, 8}), at::randn({4, 8}), at::randn({6})}, viewsChain);
  });
}

TEST(CodegenReplay, ReshapeOfComputedValue) {
  expectReplays("reshape", [] { return record(viewInputs(), reshapedAdd); });
}

TEST(CodegenReplay, RowReduction) {
  expectReplays("row_sum_exp", [] { return record(rowsInputs(), sumExp); });
}

TEST(CodegenReplay, Softmax) {
  expectReplays("softmax", [] { return record(rowsInputs(), softmax); });
}

TEST(CodegenReplay, SoftmaxRowGroup) {
  expectReplays("softmax_composite", [] { return record(rowsInputs(), softmaxComposite); });
}

TEST(CodegenReplay, LayerNorm) {
  expectReplays("layer_norm", [] { return layerNormCase(4, 3, 40); });
}

TEST(CodegenReplay, ExternCallBetweenKernels) {
  expectReplays("linear_clamp", [] { return record(linearInputs(), linearClamp); });
}

TEST(CodegenReplay, SplitColumnReduction) {
  expectReplays("column_sum", [] { return record({at::randn({4096, 48})}, columnSum); });
}

TEST(CodegenReplay, SplitFullReduction) {
  expectReplays("wide_sum", [] { return record({at::randn({1 << 20})}, wideSum); });
}

TEST(CodegenReplay, KernelBatch) {
  expectReplays("batch", [] {
    return record({at::randn({100}), at::randn({37, 3}), at::randn({5, 4, 2}), at::randn({999})},
                  sameOpOnSizes);
  });
}

}  // namespace
}  // namespace lazyfuse
