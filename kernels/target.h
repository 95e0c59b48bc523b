#pragma once

// Note [Targets]
// A target is the hardware a plan's fused kernels are compiled for and run on: the CPU (C++
// through the system compiler, kernels/cpu_target.cpp) and a CUDA GPU (CUDA C++ through NVRTC,
// kernels/cuda_target.cpp). The tests add a third, CUDA emulation, which runs the CUDA rendering
// on the CPU (test/targets/). Each is an object behind this interface, found by name in one
// registry: the plan compiler (backend/plan_compiler.cpp) picks one for each new graph, lowers the
// graph once for it (its capabilities say how: which ops it leaves to ATen, whether kernels are
// batched), and asks it to compile; the plan runner (kernels/plan_runner.cpp) runs the compiled
// kernels through it; CUDA graph replay (backend/plan_replay.cpp) asks it for a replay graph.
// Nothing here knows the backend, and nothing outside a target's own files knows which target
// it is.
//
// To add a target: implement Target (capabilities, available, compile, allocate and
// synchronize where torch's allocator and a no-op do not fit, and newCapture and beginReplay
// when it has graph replay) and CompiledKernels (launch, and launchBatch when it has batch
// kernels), register it (a built-in target in registry() of kernels/target.cpp; one in a library
// linked in whole with LF_REGISTER_TARGET in its file), and name it in chooseTarget
// (backend/plan_compiler.cpp). docs/design.md section 4c walks through it.

#include "kernels/fused_runner.h"
#include "lowering/execution_plan.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lazyfuse {

struct CapturedLaunch;
class PlanCapture;
class Target;

/// What a target can do; the plan compiler lowers and the runner schedules by these.
struct TargetCapabilities {
  /// How plans are lowered for it: which ops stay ATen calls (Note [Ops left to ATen on a
  /// target]) and which dialect its kernels are rendered in.
  KernelTarget lowering = KernelTarget::kCpu;
  /// Kernels that differ only in sizes are batched into one launch (Note [Kernel batches]).
  bool kernel_batches = false;
  /// Recurring plans may be captured once and replayed (Note [CUDA graph replay]).
  bool graph_replay = false;
  /// Elements a vectorized kernel moves per access (the CPU: the compiler's choice, 0).
  int vector_width = 0;
  /// Shared memory a block may use, 0 where there are no blocks.
  size_t shared_memory_bytes = 0;
};

/// A plan's fused kernels compiled for one target.
class CompiledKernels {
 public:
  virtual ~CompiledKernels() = default;
  /// The target they were compiled for; it allocates their outputs.
  virtual const Target& target() const = 0;
  /// Runs fused kernel `index` of `plan` over the plan's values.
  virtual void launch(const ExecutionPlan& plan, size_t index, const Graph& graph,
                      PlanValues& values) const = 0;
  /// Runs kernel batch `index` of `plan` as one launch; false when the target has no batch
  /// kernels (the runner then launches the members one by one).
  virtual bool launchBatch(const ExecutionPlan& plan, size_t index, const Graph& graph,
                           PlanValues& values) const;
  /// The compiled code an ahead-of-time package carries for these kernels, each shared object
  /// with the names of the functions the plan runs from it (Note [Kernels in a package]); empty
  /// for targets whose code a package does not carry (it is compiled where the package runs).
  virtual std::vector<std::pair<std::string, std::vector<std::string>>> packagedCode() const {
    return {};
  }
};

/// One run of a plan captured for replay; see Note [CUDA graph replay].
class ReplayGraph {
 public:
  virtual ~ReplayGraph() = default;
  /// Ends the capture; throws on failure (the capture is then over).
  virtual void end() = 0;
  /// Ends a capture that failed; never throws.
  virtual void abort() noexcept = 0;
  /// True when the captured run computed its outputs (the first replay is then not needed).
  virtual bool ranWhileCapturing() const = 0;
  /// Gives the captured launch its current arguments; false when the target cannot.
  virtual bool updateLaunch(const CapturedLaunch& launch) = 0;
  /// Runs the captured work again.
  virtual void replay() = 0;
  /// The stream every replay must run on, when the target has streams.
  virtual std::optional<c10::Stream> stream() const { return std::nullopt; }
};

/// What compiling a plan's kernels gave.
struct CompileOutcome {
  std::shared_ptr<const CompiledKernels> kernels;  // null when compiling failed
  std::string error;                               // why, when it failed
  bool disk_hit = false;                           // loaded from a cache, nothing compiled
  /// Of the plan's kernels: how many were compiled, loaded from a compile cache, and run with
  /// functions compiled before (`dynamic` of those with other constants as arguments);
  /// `generalized`: the compiled ones that are generic (Note [Shape-generic kernels]).
  int64_t compiled = 0, disk = 0, reused = 0, dynamic = 0, generalized = 0;
  std::vector<std::string> recompiles;  // why each generic kernel was compiled, for the log
};

/// Receives the source a target renders (extension and text), for LAZYFUSE_DUMP.
using SourceDump = std::function<void(const char* ext, const std::string& source)>;

class Target {
 public:
  virtual ~Target() = default;
  /// The registry name: "cpu", "cuda", "cuda-emulated".
  virtual const char* name() const = 0;
  virtual TargetCapabilities capabilities() const = 0;
  /// Whether it can compile and run here (a compiler; NVRTC and a driver); `why` when not.
  virtual bool available(std::string* why) const = 0;
  /// Compiles `plan`'s fused kernels (and batches) for `device`; `dump`, when set, gets the
  /// rendered source.
  virtual CompileOutcome compile(const ExecutionPlan& plan, c10::Device device,
                                 const SourceDump& dump) const = 0;
  /// Memory for a kernel output of `sizes` and `strides` on `device` (torch's allocator for the
  /// device; the CPU targets take it from the buffer pool, Note [Buffer pool]).
  virtual at::Tensor allocate(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              c10::ScalarType dtype, c10::Device device) const;
  /// Waits until the work queued on `device` is done (lazyfuse.wait()); the CPU has no queue.
  virtual void synchronize(c10::Device device) const;
  /// The capture a replayable run reports its launches to (Note [CUDA graph replay]).
  virtual std::unique_ptr<PlanCapture> newCapture() const;
  /// Starts capturing the current thread's work on `device` for replay, into `capture` (made by
  /// newCapture, and current while the run is captured); throws when it cannot. Only for
  /// targets whose capabilities have graph_replay.
  virtual std::unique_ptr<ReplayGraph> beginReplay(PlanCapture& capture, c10::Device device) const;
};

/// Registers `target` under its name; returns true (for LF_REGISTER_TARGET).
bool registerTarget(std::unique_ptr<Target> target);
/// The target registered as `name`, or null.
const Target* findTarget(const std::string& name);
/// The names of every registered target.
std::vector<std::string> targetNames();

#define LF_REGISTER_TARGET(Type)                  \
  static const bool lf_target_registered_##Type = \
      ::lazyfuse::registerTarget(std::make_unique<Type>())

}  // namespace lazyfuse
