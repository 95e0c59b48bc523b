#pragma once

// Interrupting a sync (Ctrl-C): see Note [Interrupting a sync] in kernels/interrupts.cpp.

#include <exception>
#include <utility>

namespace lazyfuse {

/// Thrown out of a plan run or a kernel compile that the user interrupted. `cause` is what the
/// interrupt check threw (under Python, torch's python_error holding the KeyboardInterrupt);
/// syncData rethrows it once the sync's tensors are in order.
struct SyncInterrupted : std::exception {
  explicit SyncInterrupted(std::exception_ptr c) : cause(std::move(c)) {}
  const char* what() const noexcept override { return "lazyfuse: the sync was interrupted"; }
  std::exception_ptr cause;
};

/// A function that returns when the program may go on and throws when the user asked it to
/// stop. nullptr (the default) lets lazyfuse find Python's check by itself when it runs inside
/// Python; a C++ program or test may set its own.
using InterruptCheck = void (*)();
void setInterruptCheck(InterruptCheck check);

/// Marks, on this thread, the span of a sync: pollInterrupt() asks the check only inside one,
/// and only once the sync has run for a while (a short sync never asks).
class InterruptibleSync {
 public:
  InterruptibleSync();
  ~InterruptibleSync();
  InterruptibleSync(const InterruptibleSync&) = delete;
  InterruptibleSync& operator=(const InterruptibleSync&) = delete;
};

/// Within it, pollInterrupt() does not ask (a CUDA graph capture: it runs nothing).
class NoInterrupts {
 public:
  NoInterrupts();
  ~NoInterrupts();
  NoInterrupts(const NoInterrupts&) = delete;
  NoInterrupts& operator=(const NoInterrupts&) = delete;
};

/// Throws SyncInterrupted when the user asked to stop. Cheap (a clock read) between polls.
void pollInterrupt();

}  // namespace lazyfuse
