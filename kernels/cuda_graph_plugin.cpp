// liblazyfuse_cuda_graphs.so: torch's CUDA graph capture behind a C interface. It is the one part
// of lazyfuse linked with torch's CUDA libraries, and liblazyfuse.so loads it with dlopen only
// when a plan is captured on a GPU, so that the main library loads where there is no CUDA. See
// Note [CUDA graph replay] in backend/plan_replay.cpp.
//
// Each function returns null on success, else an error message valid until the next call on the
// same thread.

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <exception>
#include <string>

namespace {

struct CapturedGraph {
  explicit CapturedGraph(c10::cuda::CUDAStream previous_stream)
      : graph(/*keep_graph=*/true), previous(previous_stream) {}
  at::cuda::CUDAGraph graph;
  c10::cuda::CUDAStream previous;  // the thread's current stream before the capture
};

thread_local std::string last_error;

const char* failure(const std::exception& e) {
  const auto* error = dynamic_cast<const c10::Error*>(&e);
  last_error = error ? error->what_without_backtrace() : e.what();
  return last_error.c_str();
}

}  // namespace

extern "C" {

/// Starts capturing on a stream of torch's pool, made the current stream of `device`.
__attribute__((visibility("default"))) const char* lazyfuse_graph_begin(int device,
                                                                        void** graph_out) {
  *graph_out = nullptr;
  CapturedGraph* captured = nullptr;
  try {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    captured = new CapturedGraph(c10::cuda::getCurrentCUDAStream());
    c10::cuda::setCurrentCUDAStream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false));
    // Thread-local mode: only this thread's unsafe calls (a synchronizing copy) end the capture.
    captured->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
  } catch (const std::exception& e) {
    if (captured) {
      c10::cuda::setCurrentCUDAStream(captured->previous);
      delete captured;
    }
    return failure(e);
  }
  *graph_out = captured;
  return nullptr;
}

/// Ends the capture, instantiates the graph and restores the current stream.
__attribute__((visibility("default"))) const char* lazyfuse_graph_end(void* graph,
                                                                      void** exec_out) {
  auto* captured = static_cast<CapturedGraph*>(graph);
  *exec_out = nullptr;
  const char* error = nullptr;
  try {
    captured->graph.capture_end();
    captured->graph.instantiate();
    *exec_out = captured->graph.raw_cuda_graph_exec();
  } catch (const std::exception& e) {
    error = failure(e);
  }
  c10::cuda::setCurrentCUDAStream(captured->previous);
  return error;
}

/// Ends a failed capture (its error ignored) and restores the current stream.
__attribute__((visibility("default"))) void lazyfuse_graph_abort(void* graph) {
  auto* captured = static_cast<CapturedGraph*>(graph);
  try {
    captured->graph.capture_end();
  } catch (const std::exception&) {
  }
  c10::cuda::setCurrentCUDAStream(captured->previous);
}

/// Launches the graph on the current stream.
__attribute__((visibility("default"))) const char* lazyfuse_graph_replay(void* graph) {
  try {
    static_cast<CapturedGraph*>(graph)->graph.replay();
  } catch (const std::exception& e) {
    return failure(e);
  }
  return nullptr;
}

__attribute__((visibility("default"))) void lazyfuse_graph_free(void* graph) {
  delete static_cast<CapturedGraph*>(graph);
}

}  // extern "C"
