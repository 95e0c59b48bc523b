// Cutting traces that no sync ends. See Note [Automatic step boundaries].
#include "backend/step_boundaries.h"

#include "backend/graph_executor.h"
#include "backend/lazy_tensor.h"
#include "lazy_ir/config.h"
#include "lazy_ir/metrics.h"

#include <ATen/record_function.h>

#include <mutex>
#include <vector>

namespace lazyfuse {
namespace {

constexpr size_t kFirstCheck = 64;                 // the first history length searched for a period
constexpr size_t kMaxHistory = size_t{1} << 16;    // at this length the older half is dropped
constexpr size_t kCheckPastCap = size_t{1} << 14;  // searches past the cap, every this many ops
constexpr int64_t kMinOpsPerCut = 256;             // a cut at a period takes at least this many ops

struct Tracker {
  std::mutex mutex;
  std::vector<HashValue> signatures;  // every op since the program's last sync
  std::vector<int64_t> live;          // live lazy tensors as each of them started
  size_t next_check = kFirstCheck;
  int64_t since_cut = 0;  // ops since the last sync
  int64_t limit = -1;     // LAZYFUSE_TRACE_LIMIT, read at each sync of the program
  int64_t period = 0;     // ops per step; 0 while none is known
  int64_t stride = 0;     // ops between two cuts at the period
  int64_t until_cut = 0;  // ops to record before the next cut at the period
  bool cutting = false;   // a cut's sync is running

  void forgetPeriod() {
    period = 0;
    stride = 0;
    until_cut = 0;
  }
};

Tracker& tracker() {
  static Tracker* t = new Tracker();
  return *t;
}

/// The shortest period that the last half of `s` repeats at least twice; 0 if none.
size_t findPeriod(const std::vector<HashValue>& s) {
  const size_t n = s.size();
  for (size_t p = 1; p <= n / 4; ++p) {
    size_t i = n;
    while (i > n / 2 && s[i - 1] == s[i - 1 - p]) --i;
    if (i == n / 2) return p;
  }
  return 0;
}

/// Searches the history for a period, and schedules the cuts at it (Tracker locked).
void searchPeriod(Tracker& t) {
  const size_t n = t.signatures.size();
  const size_t p = findPeriod(t.signatures);
  if (p == 0) return;
  size_t best = n - p;  // the op of the last period at which the fewest tensors were alive
  for (size_t j = n - p; j < n; ++j) {
    if (t.live[j] < t.live[best]) best = j;
  }
  t.period = static_cast<int64_t>(p);
  t.stride = t.period * ((kMinOpsPerCut + t.period - 1) / t.period);
  t.until_cut = static_cast<int64_t>(best + p - n);  // the same op of the next period
}

/// Syncs every live tensor for `t`'s rules, outside its lock.
void cut(std::unique_lock<std::mutex>& lock, bool at_period) {
  Tracker& t = tracker();
  t.cutting = true;
  t.since_cut = 0;
  lock.unlock();
  (at_period ? metrics::step_cuts : metrics::trace_limit_cuts).add();
  struct Done {
    ~Done() {
      std::lock_guard<std::mutex> guard(tracker().mutex);
      tracker().cutting = false;
    }
  } done;
  RECORD_FUNCTION(at_period ? "lazyfuse::step_cut" : "lazyfuse::trace_limit_cut",
                  std::vector<c10::IValue>());
  syncData(livePendingData());
}

}  // namespace

int64_t beforeRecording() {
  Tracker& t = tracker();
  std::unique_lock<std::mutex> lock(t.mutex);
  if (t.limit < 0) t.limit = config::traceLimit();
  if (!t.cutting && t.limit != 0) {
    if (t.period > 0 && t.until_cut == 0) {
      t.until_cut = t.stride;
      cut(lock, /*at_period=*/true);
    } else if (t.since_cut >= t.limit) {
      cut(lock, /*at_period=*/false);
    }
  }
  return liveDataCount();
}

void afterRecording(HashValue signature, int64_t live_tensors) {
  Tracker& t = tracker();
  std::lock_guard<std::mutex> lock(t.mutex);
  ++t.since_cut;
  const size_t n = t.signatures.size();
  if (t.period > 0) {
    if (signature == t.signatures[n - static_cast<size_t>(t.period)]) {
      --t.until_cut;
    } else {
      t.forgetPeriod();  // another phase of the program: search again
    }
  }
  t.signatures.push_back(signature);
  t.live.push_back(live_tensors);
  if (t.signatures.size() == kMaxHistory) {
    t.signatures.erase(t.signatures.begin(), t.signatures.begin() + kMaxHistory / 2);
    t.live.erase(t.live.begin(), t.live.begin() + kMaxHistory / 2);
    t.next_check = kMaxHistory / 2 + kCheckPastCap;
  }
  if (t.signatures.size() < t.next_check) return;
  t.next_check = t.next_check < kMaxHistory ? t.next_check * 2 : t.next_check + kCheckPastCap;
  if (t.period == 0) searchPeriod(t);
}

void noteSync() {
  Tracker& t = tracker();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (t.cutting) return;
  t.signatures.clear();
  t.live.clear();
  t.next_check = kFirstCheck;
  t.since_cut = 0;
  t.limit = config::traceLimit();
  t.forgetPeriod();
}

}  // namespace lazyfuse
