// Cutting traces that no sync ends. See Note [Automatic step boundaries].
#include "backend/step_boundaries.h"

#include "backend/graph_executor.h"
#include "backend/lazy_tensor.h"
#include "lazy_ir/config.h"
#include "lazy_ir/metrics.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>

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
  std::vector<HashValue> signatures;  // the latest ops since the program's last sync
  size_t next_check = kFirstCheck;
  int64_t since_sync = 0;  // ops since the program's own last sync
  int64_t rhythm = 0;      // ops between the program's last two syncs
  int64_t since_cut = 0;   // ops since the last sync, the program's or a cut's
  int64_t limit = -1;      // LAZYFUSE_TRACE_LIMIT, read at each sync of the program
  int64_t period = 0;      // ops per step; 0 while none is known
  int64_t stride = 0;      // ops between two cuts at the period
  int64_t until_cut = 0;   // ops to record before the next cut at the period
  bool cutting = false;    // a cut's sync is running

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

/// Searches the history for a step, and schedules the cuts at it (Tracker locked).
void searchPeriod(Tracker& t) {
  const size_t p = findPeriod(t.signatures);
  if (p == 0) return;
  t.period = static_cast<int64_t>(p);
  t.stride = t.period * ((kMinOpsPerCut + t.period - 1) / t.period);
  t.until_cut = 0;  // from the next op on, the op at which the step was found
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
  try {
    syncLiveTensors();  // on a worker thread with LAZYFUSE_ASYNC: Note [Asynchronous steps]
  } catch (c10::Error& e) {
    // It surfaces at whatever op was being recorded: say where it comes from.
    e.add_context(
        "raised by a sync lazyfuse started itself, to cut a trace no sync of the program ended "
        "(Note [Automatic step boundaries]; LAZYFUSE_TRACE_LIMIT=0 turns these cuts off), or by "
        "the step before it, run asynchronously (Note [Asynchronous steps])");
    throw;
  }
}

}  // namespace

void beforeRecording() {
  Tracker& t = tracker();
  std::unique_lock<std::mutex> lock(t.mutex);
  if (t.limit < 0) t.limit = config::traceLimit();
  if (!t.cutting && t.limit != 0) {
    if (t.period > 0 && t.until_cut <= 0) {
      t.until_cut = t.stride;
      // A program that syncs on its own marks its own steps: no cut before it has gone twice
      // as long without a sync as it went last time (and a whole stride).
      if (t.since_sync >= t.stride && t.since_sync > 2 * t.rhythm) {
        cut(lock, /*at_period=*/true);  // unlocks
        return;
      }
    }
    if (t.since_cut >= t.limit) cut(lock, /*at_period=*/false);
  }
}

void afterRecording(HashValue signature) {
  Tracker& t = tracker();
  std::lock_guard<std::mutex> lock(t.mutex);
  ++t.since_cut;
  ++t.since_sync;
  const size_t n = t.signatures.size();
  if (t.period > 0) {
    if (signature == t.signatures[n - static_cast<size_t>(t.period)]) {
      --t.until_cut;
    } else {
      t.forgetPeriod();  // another phase of the program: search again
    }
  }
  t.signatures.push_back(signature);
  if (t.signatures.size() == kMaxHistory) {
    t.signatures.erase(t.signatures.begin(), t.signatures.begin() + kMaxHistory / 2);
    t.next_check -= kMaxHistory / 2;
  }
  const size_t size = t.signatures.size();
  if (size < t.next_check) return;
  t.next_check = size < kMaxHistory / 2 ? 2 * size : size + kCheckPastCap;
  if (t.period == 0) searchPeriod(t);
}

void noteSync() {
  Tracker& t = tracker();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (t.cutting) return;
  if (t.since_sync > 0) t.rhythm = t.since_sync;  // mark_step notes twice
  t.since_sync = 0;
  t.since_cut = 0;
  t.signatures.clear();
  t.next_check = kFirstCheck;
  t.forgetPeriod();
  t.limit = config::traceLimit();
}

}  // namespace lazyfuse
