#include "kernels/cuda_graph.h"

#include <dlfcn.h>

#include <mutex>

#include "lazy_ir/check.h"

namespace lazyfuse {
namespace {

thread_local PlanCapture* current_capture = nullptr;

/// The plugin's functions (see kernels/cuda_graph_plugin.cpp).
struct GraphPlugin {
  const char* (*begin)(int, void**) = nullptr;
  const char* (*end)(void*, void**) = nullptr;
  void (*abort)(void*) = nullptr;
  const char* (*replay)(void*) = nullptr;
  void (*free)(void*) = nullptr;
};

/// The plugin, loaded from the folder of the library this code is in; null with `why` set when
/// it is missing or does not load.
const GraphPlugin* graphPlugin(std::string* why) {
  struct Loaded {
    GraphPlugin plugin;
    bool ok = false;
    std::string why;
  };
  static const Loaded loaded = [] {
    Loaded result;
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(&graphPlugin), &info) || !info.dli_fname) {
      result.why = "cannot tell where liblazyfuse is";
      return result;
    }
    std::string dir = info.dli_fname;
    dir = dir.substr(0, dir.find_last_of('/') + 1);
    const std::string path = dir + "liblazyfuse_cuda_graphs.so";
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* error = dlerror();
      result.why = path + " does not load: " + (error ? error : "unknown error");
      return result;
    }
    GraphPlugin& p = result.plugin;
    p.begin = reinterpret_cast<decltype(p.begin)>(dlsym(handle, "lazyfuse_graph_begin"));
    p.end = reinterpret_cast<decltype(p.end)>(dlsym(handle, "lazyfuse_graph_end"));
    p.abort = reinterpret_cast<decltype(p.abort)>(dlsym(handle, "lazyfuse_graph_abort"));
    p.replay = reinterpret_cast<decltype(p.replay)>(dlsym(handle, "lazyfuse_graph_replay"));
    p.free = reinterpret_cast<decltype(p.free)>(dlsym(handle, "lazyfuse_graph_free"));
    result.ok = p.begin && p.end && p.abort && p.replay && p.free;
    if (!result.ok) result.why = path + " lacks a function lazyfuse needs";
    return result;
  }();
  if (why) *why = loaded.why;
  return loaded.ok ? &loaded.plugin : nullptr;
}

}  // namespace

CapturedLaunch& PlanCapture::addLaunch() {
  launches_.push_back(std::make_unique<CapturedLaunch>());
  return *launches_.back();
}

void PlanCapture::keep(const at::Tensor& tensor) {
  if (!records_steps_ || !tensor.defined() || !tensor.has_storage()) return;
  if (external.count(tensor.storage().unsafeGetStorageImpl())) return;
  kept_.push_back(tensor);
}

void PlanCapture::replaySteps() const {
  for (const std::function<void()>& step : steps_) step();
}

CapturedLaunch& recordBatchLaunch(PlanCapture& capture, int32_t batch, size_t first,
                                  const CudaBatchShape& shape, void* function,
                                  CudaBatchLaunch&& launch) {
  CapturedLaunch& record = capture.addLaunch();
  record.batch = batch;
  record.first = first;
  record.count = static_cast<size_t>(launch.table[0]);
  record.batch_shape = &shape;
  record.function = function;
  record.grid = static_cast<unsigned>(launch.blocks);
  record.block = static_cast<unsigned>(shape.block);
  record.table = std::move(launch.table);
  return record;
}

PlanCapture* currentCapture() { return current_capture; }

CaptureScope::CaptureScope(PlanCapture* capture) : previous_(current_capture) {
  current_capture = capture;
}

CaptureScope::~CaptureScope() { current_capture = previous_; }

std::unique_ptr<CudaGraph> CudaGraph::begin(c10::Device device) {
  std::string why;
  const GraphPlugin* plugin = graphPlugin(&why);
  LF_CHECK(plugin != nullptr, "CUDA graph capture is not available: ", why);
  std::unique_ptr<CudaGraph> graph(new CudaGraph());
  const char* error = plugin->begin(device.index(), &graph->handle_);
  LF_CHECK(error == nullptr, "CUDA graph capture did not start: ", error);
  graph->capturing_ = true;
  return graph;
}

CudaGraph::~CudaGraph() {
  if (!handle_) return;
  const GraphPlugin* plugin = graphPlugin(nullptr);
  if (capturing_) plugin->abort(handle_);
  plugin->free(handle_);
}

void CudaGraph::end() {
  void* exec = nullptr;
  capturing_ = false;
  const char* error = graphPlugin(nullptr)->end(handle_, &exec);
  LF_CHECK(error == nullptr, "CUDA graph capture failed: ", error);
  exec_ = static_cast<CuGraphExec>(exec);
}

void CudaGraph::abort() noexcept {
  if (!capturing_) return;
  capturing_ = false;
  graphPlugin(nullptr)->abort(handle_);
}

void CudaGraph::replay() {
  const char* error = graphPlugin(nullptr)->replay(handle_);
  LF_CHECK(error == nullptr, "CUDA graph replay failed: ", error);
}

bool CudaGraph::updateLaunch(const CapturedLaunch& launch) {
  const CudaDriverApi* api = cudaDriver();
  if (!api || !api->cuGraphExecKernelNodeSetParams_v2 || !launch.node || !exec_) return false;
  CuKernelNodeParams params;
  params.func = static_cast<CuFunction>(launch.function);
  params.grid_x = launch.grid;
  params.block_x = launch.block;
  void* table = const_cast<int64_t*>(launch.table.data());
  params.kernel_params = launch.batch >= 0 ? &table : const_cast<void**>(launch.args.args.data());
  return api->cuGraphExecKernelNodeSetParams_v2(exec_, launch.node, &params) == 0;
}

bool cudaGraphPluginAvailable(std::string* why) { return graphPlugin(why) != nullptr; }

CuGraphNode lastCapturedNode(void* stream) {
  const CudaDriverApi* api = cudaDriver();
  if (!api || !api->cuStreamGetCaptureInfo_v3) return nullptr;
  int status = 0;
  unsigned long long id = 0;
  CuGraph graph = nullptr;
  const CuGraphNode* dependencies = nullptr;
  const void* edges = nullptr;
  size_t count = 0;
  if (api->cuStreamGetCaptureInfo_v3(static_cast<CuStream>(stream), &status, &id, &graph,
                                     &dependencies, &edges, &count) != 0 ||
      status != kCuStreamCaptureStatusActive || count != 1) {
    return nullptr;
  }
  return dependencies[0];
}

}  // namespace lazyfuse
