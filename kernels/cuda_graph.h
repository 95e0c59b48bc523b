#pragma once

// Capturing one run of a plan and replaying it (Note [CUDA graph replay] in
// backend/plan_replay.cpp). While a run is captured, the CUDA runners and the extern runner
// report to the thread's PlanCapture what they launch. On a GPU the launches go into a CUDA graph
// captured through the plugin liblazyfuse_cuda_graphs.so, the one part of lazyfuse that links
// torch's CUDA libraries (torch's capture does the work: a private memory pool, generator
// states). A target without a device graph (CUDA emulation, test/targets/) makes a capture that
// records steps: a list of closures run again on replay (Note [Targets]).

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "kernels/cuda_api.h"
#include "kernels/cuda_runner.h"

namespace lazyfuse {

/// One launch of a fused kernel or of a kernel batch made while a run was captured, with what
/// replay needs to give it new parameter values.
struct CapturedLaunch {
  int32_t kernel = -1;  // the plan kernel launched, or -1 for a launch of a batch
  int32_t batch = -1;   // the batch launched
  size_t first = 0;     // a batch launch runs members [first, first + count) of the batch
  size_t count = 0;
  const CudaBatchShape* batch_shape = nullptr;
  void* function = nullptr;  // CuFunction, or the emulated function; null: nothing launched
  unsigned grid = 0, block = 0;
  CudaLaunchArgs args;         // a kernel launch's arguments (args.args point into it)
  std::vector<int64_t> table;  // a batch launch's table
  CuGraphNode node = nullptr;  // the launch's node in the captured graph (GPU)
};

/// Gives `launch` the parameter values of `graph` (a graph of the plan it was captured from);
/// true when one changed.
bool refreshLaunchParams(const ExecutionPlan& plan, const Graph& graph, CapturedLaunch& launch);

/// What a run reports while it is captured: see CaptureScope.
class PlanCapture {
 public:
  /// `records_steps`: the run's work is kept as steps replay runs again (and the memory they
  /// use is kept alive here), rather than captured by a device graph.
  explicit PlanCapture(bool records_steps) : records_steps_(records_steps) {}
  bool recordsSteps() const { return records_steps_; }

  /// A new launch record, which never moves: the runner prepares its arguments in place.
  CapturedLaunch& addLaunch();
  std::vector<std::unique_ptr<CapturedLaunch>>& launches() { return launches_; }

  /// Recording steps: appends a step that replay runs again, in the order of the run.
  void addStep(std::function<void()> step) { steps_.push_back(std::move(step)); }
  /// Recording steps: keeps `tensor`'s memory for replay (a GPU keeps it in the graph's pool),
  /// unless it is the memory of an input replay finds anew each run (`external`).
  void keep(const at::Tensor& tensor);
  /// The storages replay takes from the run's inputs; a capture keeps none of them.
  std::unordered_set<const c10::StorageImpl*> external;
  /// Recording steps: runs the recorded steps again.
  void replaySteps() const;

 private:
  bool records_steps_;
  std::vector<std::unique_ptr<CapturedLaunch>> launches_;
  std::vector<std::function<void()>> steps_;
  std::vector<at::Tensor> kept_;
};

/// Records a launch of members [first, first + count) of kernel batch `batch` (the table's
/// count) made with `function`, taking the launch's table.
CapturedLaunch& recordBatchLaunch(PlanCapture& capture, int32_t batch, size_t first,
                                  const CudaBatchShape& shape, void* function,
                                  CudaBatchLaunch&& launch);

/// The capture this thread's run reports to, or null.
PlanCapture* currentCapture();

/// Makes `capture` the thread's capture for its lifetime.
class CaptureScope {
 public:
  explicit CaptureScope(PlanCapture* capture);
  ~CaptureScope();
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

 private:
  PlanCapture* previous_;
};

/// A CUDA graph captured on a GPU through the plugin library.
class CudaGraph {
 public:
  /// Starts capturing work of the current thread on `device` (on a stream of torch's pool, made
  /// current until end() or abort()); throws when capture is not available.
  static std::unique_ptr<CudaGraph> begin(c10::Device device);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  /// Ends the capture and instantiates the graph; throws on failure (the capture is then over).
  void end();
  /// Ends a capture that failed; never throws.
  void abort() noexcept;
  /// Launches the graph on torch's current stream.
  void replay();
  /// Gives the captured node of `launch` its current arguments; false when the driver cannot.
  bool updateLaunch(const CapturedLaunch& launch);

 private:
  CudaGraph() = default;
  void* handle_ = nullptr;  // the plugin's graph
  CuGraphExec exec_ = nullptr;
  bool capturing_ = false;
};

/// Whether the plugin library loads here (for the Python API and tests); `why` says why not.
bool cudaGraphPluginAvailable(std::string* why = nullptr);

/// The node the launch just made on `stream` added to the capture, or null where the driver
/// cannot tell.
CuGraphNode lastCapturedNode(void* stream);

}  // namespace lazyfuse
