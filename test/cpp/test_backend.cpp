// The lazy device end to end through the dispatcher, from C++ (no Python meta kernels here).
#include "backend/graph_executor.h"
#include "lazy_ir/metrics.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/scalar_tensor.h>
#include <gtest/gtest.h>

namespace lazyfuse {
namespace {

int64_t metric(const std::string& name) {
  for (const auto& [n, v] : metricsSnapshot()) {
    if (n == name) return v;
  }
  return -1;
}

at::TensorOptions lazyOptions() { return at::TensorOptions().device(c10::DeviceType::Lazy); }

TEST(BackendTest, RecordsAndSyncsLikeEager) {
  at::Tensor a = at::randn({4, 5});
  at::Tensor b = at::randn({5, 3});
  at::Tensor la = a.to(c10::DeviceType::Lazy);
  at::Tensor lb = b.to(c10::DeviceType::Lazy);
  at::Tensor lc = at::relu(at::mm(la, lb) + 1);
  EXPECT_EQ(lc.device().type(), c10::DeviceType::Lazy);
  EXPECT_EQ(lc.sizes(), (std::vector<int64_t>{4, 3}));
  EXPECT_TRUE(at::allclose(lc.to(at::kCPU), at::relu(at::mm(a, b) + 1)));
}

TEST(BackendTest, SecondIdenticalStepHitsTheGraphCache) {
  at::Tensor w = at::ones({3, 3}, lazyOptions());
  for (int step = 0; step < 3; ++step) {
    w = w * 0.5 + static_cast<double>(step);
    int64_t cached = metric("CachedCompile");
    int64_t uncached = metric("UncachedCompile");
    syncLiveTensors();
    if (step > 1) {  // step 0 also fills the ones; steps 1 and 2 are the same graph
      EXPECT_EQ(metric("CachedCompile"), cached + 1);
      EXPECT_EQ(metric("UncachedCompile"), uncached);
    }
  }
  at::Tensor expected = at::ones({3, 3});
  for (int step = 0; step < 3; ++step) expected = expected * 0.5 + static_cast<double>(step);
  EXPECT_TRUE(at::allclose(w.to(at::kCPU), expected));
}

TEST(BackendTest, SameOpOnSameMetadataInfersOnMetaOnce) {
  at::Tensor x = at::randn({7, 2}).to(c10::DeviceType::Lazy);
  at::Tensor first = x.sin();
  int64_t misses = metric("MetaCacheMiss");
  at::Tensor second = x.sin();
  EXPECT_EQ(metric("MetaCacheMiss"), misses);
}

TEST(BackendTest, ShapeErrorRaisesAtTheOpAndKeepsTensors) {
  at::Tensor a = at::randn({2, 3});
  at::Tensor la = a.to(c10::DeviceType::Lazy);
  at::Tensor lb = at::randn({4, 5}).to(c10::DeviceType::Lazy);
  EXPECT_THROW(at::mm(la, lb), c10::Error);
  EXPECT_TRUE(at::allclose((la * 2).to(at::kCPU), a * 2));
}

TEST(BackendTest, NonScalarCpuTensorIsADeviceError) {
  at::Tensor la = at::randn({3}).to(c10::DeviceType::Lazy);
  try {
    (void)(la + at::randn({3}));
    FAIL() << "expected a device error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("same device"), std::string::npos) << e.what();
  }
  at::Tensor scalar = at::scalar_tensor(2.0);
  EXPECT_TRUE(at::allclose((la * scalar).to(at::kCPU), la.to(at::kCPU) * 2));
}

TEST(BackendTest, DumpsTheGraphWithoutRunningIt) {
  at::Tensor x = at::randn({2, 2}).to(c10::DeviceType::Lazy);
  at::Tensor y = x.exp() * 3;
  int64_t executed = metric("GraphsExecuted");
  std::string text = dumpGraph({y}, "text");
  EXPECT_NE(text.find("aten::exp"), std::string::npos) << text;
  EXPECT_NE(text.find("aten::mul"), std::string::npos) << text;
  EXPECT_EQ(metric("GraphsExecuted"), executed);
  EXPECT_THROW(dumpGraph({y}, "svg"), c10::Error);
}

}  // namespace
}  // namespace lazyfuse
