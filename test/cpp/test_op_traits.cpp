// OpTraits read by recording threads while another marks an op eager (markEager): the flag is
// the one field that changes after the traits are computed, and it is atomic. A stress test: the
// readers must see the op become eager and keep every other op as it was.
#include "backend/op_traits.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace lazyfuse {
namespace {

c10::OperatorHandle opNamed(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

TEST(OpTraits, MarkEagerWhileOtherThreadsRead) {
  // An op no recording in this test process uses, and ops read alongside it.
  const c10::OperatorHandle marked = opNamed("aten::_test_warn_in_autograd", "");
  const std::vector<c10::OperatorHandle> others = {
      opNamed("aten::add", "Tensor"), opNamed("aten::mul", "Tensor"), opNamed("aten::nonzero", ""),
      opNamed("aten::sum", "dim_IntList")};
  std::vector<bool> expected;
  for (const c10::OperatorHandle& op : others) expected.push_back(traitsOf(op).eager);
  ASSERT_FALSE(traitsOf(marked).eager);

  std::atomic<bool> start{false}, stop{false};
  std::atomic<int64_t> seen_eager{0}, wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      while (!start) std::this_thread::yield();
      while (!stop) {
        if (traitsOf(marked).eager) ++seen_eager;
        for (size_t i = 0; i < others.size(); ++i) {
          if (traitsOf(others[i]).eager != expected[i]) ++wrong;
        }
      }
    });
  }
  start = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  markEager(marked);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  stop = true;
  for (std::thread& reader : readers) reader.join();
  EXPECT_TRUE(traitsOf(marked).eager);
  EXPECT_GT(seen_eager.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_TRUE(traitsOf(opNamed("aten::nonzero", "")).eager);  // data-dependent from the start
}

}  // namespace
}  // namespace lazyfuse
