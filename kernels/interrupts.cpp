#include "kernels/interrupts.h"

#include "kernels/python_plugin.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>

namespace lazyfuse {

// Note [Interrupting a sync]
// A sync may compile for seconds and run for longer. Python handles Ctrl-C by setting a flag in
// its C signal handler and raising KeyboardInterrupt when its main thread next runs Python code,
// which a sync (called with the GIL released, from an op) does not do until it returns. So a
// sync polls: while it compiles (cpu_compiler.cpp waits for the compiler 50 ms at a time) and
// between the steps of a plan (plan_runner.cpp), pollInterrupt() asks whether the user wants
// to stop, at most every 100 ms, and only once the sync has run for 100 ms, so that the short
// syncs of a training loop never ask (asking takes the GIL, which another Python thread may
// hold for up to its switch interval). A single kernel or ATen call is not cut short, and a
// CUDA graph capture is not interrupted (it runs nothing).
//
// Asking is Python's business, and liblazyfuse.so does not link Python (a LibTorch program
// loads it too). Inside a Python process, the first poll on the main thread (where Python
// handles signals) loads liblazyfuse_python.so from beside this library: its check takes the
// GIL and SIGINT's pending mark (PyOS_InterruptOccurred). With Python's default SIGINT handler
// it throws KeyboardInterrupt as torch's python_error, which torch's bindings restore as the
// Python exception when it reaches them; it runs no Python handler, since a program's own
// (a SIGTERM handler that saves a checkpoint) could start a second sync in the middle of this
// one, so those, and SIGINT under a handler of the program's, stay pending until the sync
// returns. pollInterrupt() wraps the exception in SyncInterrupted so our own handlers can tell
// an interrupt from a failure, and syncData unwraps it.
//
// What the sync leaves: a compile that was stopped ends the compiler's process group (SIGTERM,
// so that gcc removes its temporary files, then SIGKILL) and removes its own files; nothing was
// cached. A plan stops only before it writes into an input's memory (Note [Donated buffers]):
// until then it has changed nothing, so its tensors stay pending and the next sync computes
// them, and an interrupt never costs a tensor its value. Once a plan has written into an input
// (in a training step, the optimizer's updates, which come last), it runs to its end.

namespace {

std::atomic<InterruptCheck> installed{nullptr};

constexpr auto kFirstPoll = std::chrono::milliseconds(100);
constexpr auto kPollEvery = std::chrono::milliseconds(100);

struct Window {
  int depth = 0;
  int paused = 0;  // NoInterrupts scopes
  std::chrono::steady_clock::time_point next;
};
thread_local Window window;

bool onMainThread() { return static_cast<pid_t>(syscall(SYS_gettid)) == getpid(); }

/// Python's check, from liblazyfuse_python.so, or nullptr outside Python (or when the plugin
/// was not built: then a sync is not interrupted).
InterruptCheck pythonCheck() {
  static const auto check =
      reinterpret_cast<InterruptCheck>(pythonPluginFunction("lazyfuse_check_python_signals"));
  return check;
}

}  // namespace

void setInterruptCheck(InterruptCheck check) { installed.store(check, std::memory_order_relaxed); }

InterruptibleSync::InterruptibleSync() {
  if (window.depth++ == 0) window.next = std::chrono::steady_clock::now() + kFirstPoll;
}

InterruptibleSync::~InterruptibleSync() { --window.depth; }

NoInterrupts::NoInterrupts() { ++window.paused; }

NoInterrupts::~NoInterrupts() { --window.paused; }

void pollInterrupt() {
  if (window.depth == 0 || window.paused > 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < window.next) return;
  window.next = now + kPollEvery;
  InterruptCheck check = installed.load(std::memory_order_relaxed);
  if (check == nullptr && onMainThread()) check = pythonCheck();
  if (check == nullptr) return;
  try {
    check();
  } catch (...) {
    throw SyncInterrupted(std::current_exception());
  }
}

}  // namespace lazyfuse
