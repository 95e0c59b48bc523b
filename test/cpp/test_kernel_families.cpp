// Kernel families on the CUDA targets (Note [Shape-generic kernels]): a graph recorded at three
// widths renders, from the second on, generic functions that NVRTC compiles for an H100, and
// the third width renders the very source of the second.
#include "kernels/cuda_compiler.h"
#include "kernels/cuda_kernel_families.h"
#include "lowering/pipeline.h"
#include "test/cpp/recorded_case.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/softmax.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lazyfuse {
namespace {

using namespace testing_case;

std::vector<at::Tensor> softmaxChain(const std::vector<at::Tensor>& in) {
  return {at::softmax(in[0] * in[1], -1).exp(), (in[0] + 1).sin()};
}

/// The CUDA rendering of the chain over [64, width].
CudaSource renderAt(int64_t width) {
  Case c = record({at::randn({64, width}), at::randn({width})}, softmaxChain);
  const ExecutionPlan plan =
      lowerGraph(c.graph, /*fuse=*/true, /*batch=*/true, KernelTarget::kCuda);
  const CudaPlanKernels inputs = cudaPlanKernels(plan);
  return renderCuda(inputs.kernels, inputs.batches);
}

size_t argumentsOf(const CudaSource& source) {
  size_t count = 0;
  for (const CudaLaunchShape& shape : source.kernels) {
    count += shape.arguments.size() + shape.vector_arguments.size();
  }
  return count;
}

TEST(KernelFamiliesTest, GenericCudaFunctionsCompileWithNvrtcAndServeLaterWidths) {
  KernelFamilies families;
  const auto mode = config::DynamicShapes::kAuto;
  CudaFamilySource first = cudaFamilySource(renderAt(300), mode, families);
  EXPECT_EQ(argumentsOf(first.source), 0u);  // the first of each family is specialized
  EXPECT_EQ(first.reused, 0);
  cudaFamiliesCompiled(first, families);

  CudaFamilySource second = cudaFamilySource(renderAt(420), mode, families);
  EXPECT_GT(argumentsOf(second.source), 0u);
  EXPECT_GT(second.generalized, 0);
  EXPECT_FALSE(second.recompiles.empty());
  const CudaCompileResult compiled = compileCuda(second.source.source, 90);
  ASSERT_TRUE(compiled.binary) << compiled.error;
  cudaFamiliesCompiled(second, families);

  CudaFamilySource third = cudaFamilySource(renderAt(500), mode, families);
  EXPECT_EQ(third.source.source, second.source.source);
  EXPECT_EQ(third.reused, static_cast<int64_t>(third.source.kernels.size()));
  EXPECT_GT(third.dynamic, 0);
  EXPECT_TRUE(third.recompiles.empty());
  // The constants that became arguments are this width's.
  bool found = false;
  for (const CudaLaunchShape& shape : third.source.kernels) {
    for (int64_t value : shape.arguments) found = found || value == 500;
  }
  EXPECT_TRUE(found);
}

TEST(KernelFamiliesTest, DynamicPolicyIsGenericFromTheFirstWidthAndCompilesWithNvrtc) {
  KernelFamilies families;
  const auto mode = config::DynamicShapes::kDynamic;
  CudaFamilySource first = cudaFamilySource(renderAt(300), mode, families);
  EXPECT_GT(argumentsOf(first.source), 0u);
  const CudaCompileResult compiled = compileCuda(first.source.source, 90);
  ASSERT_TRUE(compiled.binary) << compiled.error;
  cudaFamiliesCompiled(first, families);
  CudaFamilySource second = cudaFamilySource(renderAt(420), mode, families);
  EXPECT_EQ(second.source.source, first.source.source);
  EXPECT_EQ(second.reused, static_cast<int64_t>(second.source.kernels.size()));
}

TEST(KernelFamiliesTest, StaticPolicyRendersEveryWidthSpecialized) {
  KernelFamilies families;
  const auto mode = config::DynamicShapes::kStatic;
  CudaFamilySource first = cudaFamilySource(renderAt(300), mode, families);
  cudaFamiliesCompiled(first, families);
  CudaFamilySource second = cudaFamilySource(renderAt(420), mode, families);
  EXPECT_EQ(argumentsOf(second.source), 0u);
  EXPECT_EQ(second.reused, 0);
  EXPECT_NE(second.source.source, first.source.source);
}

}  // namespace
}  // namespace lazyfuse
