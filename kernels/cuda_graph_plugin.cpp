// liblazyfuse_cuda_graphs.so: torch's CUDA graph capture behind a C interface. It is the one part
// of lazyfuse linked with torch's CUDA libraries, and liblazyfuse.so loads it with dlopen only
// when a plan is captured on a GPU, so that the main library loads where there is no CUDA. See
// Note [CUDA graph replay] in backend/plan_replay.cpp.
//
// Each function returns null on success, else an error message valid until the next call on the
// same thread.

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <exception>
#include <string>

namespace {

struct CapturedGraph {
  CapturedGraph(c10::DeviceIndex device_index, c10::cuda::CUDAStream previous_stream)
      : graph(/*keep_graph=*/true),
        device(device_index),
        pool(at::cuda::graph_pool_handle()),
        previous(previous_stream),
        stream(previous_stream) {}
  at::cuda::CUDAGraph graph;
  c10::DeviceIndex device;
  at::cuda::MempoolId_t pool;      // the capture's private memory pool
  c10::cuda::CUDAStream previous;  // the thread's current stream before the capture
  c10::cuda::CUDAStream stream;    // the stream the capture runs on
};

thread_local std::string last_error;

const char* failure(const std::exception& e) {
  const auto* error = dynamic_cast<const c10::Error*>(&e);
  last_error = error ? error->what_without_backtrace() : e.what();
  return last_error.c_str();
}

template <class F>
void ignoringErrors(F f) {
  try {
    f();
  } catch (const std::exception&) {
  }
}

/// Leaves a capture that failed as if it never began. torch's capture_end gives the allocators
/// their pools back only once it has ended the capture well: after a failure they would stay in
/// capture mode for the process (and the pool would never be freed). Each step is done if it is
/// still to do; the others fail, and are ignored.
void undoCapture(CapturedGraph& captured) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(captured.stream.stream(), &status) == cudaSuccess &&
      status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(captured.stream.stream(), &graph);
    if (graph) cudaGraphDestroy(graph);
  }
  (void)cudaGetLastError();  // the failed capture's error is not the next call's
  ignoringErrors(
      [&] { c10::cuda::CUDACachingAllocator::endAllocateToPool(captured.device, captured.pool); });
  ignoringErrors([&] { at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(captured.pool); });
  ignoringErrors(
      [&] { c10::cuda::CUDACachingAllocator::releasePool(captured.device, captured.pool); });
  ignoringErrors([&] { at::getHostAllocator(at::kCUDA)->release_pool(captured.pool); });
}

}  // namespace

extern "C" {

/// Starts capturing on a stream of torch's pool, made the current stream of `device`.
__attribute__((visibility("default"))) const char* lazyfuse_graph_begin(int device,
                                                                        void** graph_out) {
  *graph_out = nullptr;
  CapturedGraph* captured = nullptr;
  try {
    const auto index = static_cast<c10::DeviceIndex>(device);
    c10::cuda::CUDAGuard guard(index);
    captured = new CapturedGraph(index, c10::cuda::getCurrentCUDAStream(index));
    captured->stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
    c10::cuda::setCurrentCUDAStream(captured->stream);
    // Thread-local mode: only this thread's unsafe calls (a synchronizing copy) end the capture.
    captured->graph.capture_begin(captured->pool, cudaStreamCaptureModeThreadLocal);
  } catch (const std::exception& e) {
    if (captured) {
      undoCapture(*captured);
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
  c10::cuda::CUDAGuard guard(captured->device);
  bool ended = false;
  try {
    captured->graph.capture_end();
    ended = true;
    captured->graph.instantiate();
    *exec_out = captured->graph.raw_cuda_graph_exec();
  } catch (const std::exception& e) {
    error = failure(e);
    if (!ended) undoCapture(*captured);
  }
  c10::cuda::setCurrentCUDAStream(captured->previous);
  return error;
}

/// Ends a failed capture (its error ignored) and restores the current stream.
__attribute__((visibility("default"))) void lazyfuse_graph_abort(void* graph) {
  auto* captured = static_cast<CapturedGraph*>(graph);
  c10::cuda::CUDAGuard guard(captured->device);
  c10::cuda::setCurrentCUDAStream(captured->stream);  // where torch's capture_end looks for it
  try {
    captured->graph.capture_end();
  } catch (const std::exception&) {
    undoCapture(*captured);
  }
  c10::cuda::setCurrentCUDAStream(captured->previous);
}

/// Launches the graph on the current stream.
__attribute__((visibility("default"))) const char* lazyfuse_graph_replay(void* graph) {
  try {
    auto* captured = static_cast<CapturedGraph*>(graph);
    c10::cuda::CUDAGuard guard(captured->device);
    captured->graph.replay();
  } catch (const std::exception& e) {
    return failure(e);
  }
  return nullptr;
}

__attribute__((visibility("default"))) void lazyfuse_graph_free(void* graph) {
  delete static_cast<CapturedGraph*>(graph);
}

}  // extern "C"
