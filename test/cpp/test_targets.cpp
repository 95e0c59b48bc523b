// The targets behind the Target interface (Note [Targets]): the registry, what each says it can
// do, and the CPU target compiling and running a recorded plan as eager CPU computes it.
#include "kernels/cpu_row_groups.h"
#include "kernels/plan_runner.h"
#include "kernels/target.h"
#include "test/cpp/partition_graphs.h"
#include "test/cpp/recorded_case.h"
#include "test/cpp/temp_dir.h"

#include <ATen/ops/allclose.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <stdlib.h>

namespace lazyfuse {
namespace {

using namespace testing_case;

class FakeTarget final : public Target {
 public:
  const char* name() const override { return "cpu"; }
  TargetCapabilities capabilities() const override { return {}; }
  bool available(std::string*) const override { return false; }
  CompileOutcome compile(const ExecutionPlan&, c10::Device, const SourceDump&) const override {
    return {};
  }
};

TEST(Targets, RegistryHoldsTheProductionTargets) {
  std::vector<std::string> names = targetNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "cuda"), names.end());
  for (const std::string& name : names) {
    ASSERT_NE(findTarget(name), nullptr) << name;
    EXPECT_EQ(findTarget(name)->name(), name);
  }
  EXPECT_EQ(findTarget("no-such-target"), nullptr);
}

TEST(Targets, TwoTargetsOfOneNameAreRefused) {
  EXPECT_THROW(registerTarget(std::make_unique<FakeTarget>()), c10::Error);
  EXPECT_EQ(findTarget("cpu")->capabilities().lowering, KernelTarget::kCpu);
}

TEST(Targets, CapabilitiesSayHowPlansAreLowered) {
  const TargetCapabilities cpu = findTarget("cpu")->capabilities();
  EXPECT_EQ(cpu.lowering, KernelTarget::kCpu);
  EXPECT_FALSE(cpu.kernel_batches);
  EXPECT_FALSE(cpu.graph_replay);
  const TargetCapabilities cuda = findTarget("cuda")->capabilities();
  EXPECT_EQ(cuda.lowering, KernelTarget::kCuda);
  EXPECT_TRUE(cuda.kernel_batches);
  EXPECT_TRUE(cuda.graph_replay);
  EXPECT_GT(cuda.shared_memory_bytes, 0u);
}

TEST(Targets, CpuTargetAllocatesLaidOutAsAsked) {
  const Target& cpu = *findTarget("cpu");
  at::Tensor t = cpu.allocate({3, 4}, {1, 3}, at::kHalf, c10::Device(c10::DeviceType::CPU));
  EXPECT_EQ(t.device(), c10::Device(c10::DeviceType::CPU));
  EXPECT_EQ(t.sizes(), at::IntArrayRef({3, 4}));
  EXPECT_EQ(t.strides(), at::IntArrayRef({1, 3}));
  EXPECT_EQ(t.scalar_type(), at::kHalf);
  cpu.synchronize(c10::Device(c10::DeviceType::CPU));  // nothing queued on the CPU
}

TEST(Targets, UnavailableTargetSaysWhy) {
  for (const std::string& name : targetNames()) {
    std::string why;
    if (!findTarget(name)->available(&why)) {
      EXPECT_FALSE(why.empty()) << name;
    }
  }
}

TEST(Targets, CpuTargetCompilesAndRunsAPlan) {
  const Target& cpu = *findTarget("cpu");
  if (!cpu.available(nullptr)) GTEST_SKIP() << "no C++ compiler";
  const testing::TempDir dir("lf-target-test");
  ASSERT_TRUE(dir.made());
  dir.useAsCacheDir();
  Case c = record(chainInputs(), pointwiseChain);
  ASSERT_FALSE(c.plan.kernels.empty());
  std::string dumped, ext;
  CompileOutcome outcome =
      cpu.compile(c.plan, c10::Device(c10::DeviceType::CPU),
                  [&](const char* e, const std::string& source) { ext = e, dumped = source; });
  ASSERT_TRUE(outcome.kernels) << outcome.error;
  EXPECT_EQ(ext, ".cpp");
  EXPECT_EQ(dumped, renderCppProgram(c.plan).source);
  EXPECT_EQ(&outcome.kernels->target(), &cpu);
  std::vector<at::Tensor> got = runPlan(c.plan, c.graph, outcome.kernels.get());
  ASSERT_EQ(got.size(), c.expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(at::allclose(got[i], c.expected[i], 1e-5, 1e-6)) << i;
  }
  // The same plan again: its module comes from the cache, nothing is compiled.
  EXPECT_TRUE(cpu.compile(c.plan, c10::Device(c10::DeviceType::CPU), {}).disk_hit);
}

}  // namespace
}  // namespace lazyfuse
