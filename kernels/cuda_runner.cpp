#include "kernels/cuda_runner.h"

#include "kernels/cuda_api.h"
#include "kernels/cuda_graph.h"
#include "lazy_ir/check.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace lazyfuse {
namespace {

const CudaDriverApi& driver() {
  std::string why;
  const CudaDriverApi* api = cudaDriver(&why);
  LF_CHECK(api != nullptr, "fused CUDA kernels need the CUDA driver: ", why);
  return *api;
}

/// Makes the device's primary context (the one torch's runtime uses) current on this thread.
/// Callers hold a c10::DeviceGuard for `device`, so a current context is that device's.
void makeContextCurrent(const CudaDriverApi& api, c10::Device device) {
  CuContext context = nullptr;
  LF_CU_CHECK(api, cuCtxGetCurrent(&context));
  if (context) return;
  CuDevice dev = 0;
  LF_CU_CHECK(api, cuDeviceGet(&dev, device.index()));
  LF_CU_CHECK(api, cuDevicePrimaryCtxRetain(&context, dev));
  LF_CU_CHECK(api, cuCtxSetCurrent(context));
}

int attribute(const CudaDriverApi& api, int which, c10::Device device) {
  CuDevice dev = 0;
  LF_CU_CHECK(api, cuDeviceGet(&dev, device.index()));
  int value = 0;
  LF_CU_CHECK(api, cuDeviceGetAttribute(&value, which, dev));
  return value;
}

/// The address of each buffer of `fused`, its outputs allocated on `device` (or donated) first.
std::vector<void*> kernelPointers(const FusedKernel& fused, const Graph& graph, PlanValues& values,
                                  c10::Device device) {
  std::vector<void*> pointers(fused.buffers.size(), nullptr);
  for (size_t i = 0; i < fused.buffers.size(); ++i) {
    const BufferBinding& b = fused.buffers[i];
    at::Tensor& slot = bindingSlot(b, graph, values);
    if (fused.kernel.buffers[i].output) slot = outputBuffer(fused, i, graph, values, device);
    LF_INTERNAL_ASSERT(slot.defined() && slot.device() == device, "kernel ", fused.kernel.name,
                       " reads a buffer that is not on ", device);
    pointers[i] = slot.data_ptr();
  }
  return pointers;
}

/// True when every buffer of `wide` in `pointers` is aligned to 4 of its elements.
bool alignedForVector(const Kernel& kernel, const std::vector<int32_t>& wide,
                      const std::vector<void*>& pointers) {
  for (int32_t b : wide) {
    const size_t bytes = 4 * c10::elementSize(kernel.buffers[b].dtype);
    if (reinterpret_cast<uintptr_t>(pointers[b]) % bytes != 0) return false;
  }
  return true;
}

/// A batch table's word for parameter `binding`: a float's bits (toLong() would throw on inf or
/// NaN), or the integer.
int64_t paramWord(const Graph& graph, const ParamBinding& binding) {
  const c10::Scalar value = paramValue(graph, binding);
  if (!binding.floating) return value.toLong();
  const double d = value.toDouble();
  int64_t word = 0;
  std::memcpy(&word, &d, sizeof(word));
  return word;
}

}  // namespace

bool refreshLaunchParams(const ExecutionPlan& plan, const Graph& graph, CapturedLaunch& launch) {
  bool changed = false;
  auto update = [&changed](int64_t& slot, int64_t word) {
    changed = changed || slot != word;
    slot = word;
  };
  if (launch.kernel >= 0) {
    const FusedKernel& fused = plan.kernels.at(launch.kernel);
    for (size_t p = 0; p < fused.params.size(); ++p) {
      const int64_t word = paramWord(graph, fused.params[p]);
      if (!fused.params[p].floating) {
        update(launch.args.ints[p], word);
        continue;
      }
      int64_t old = 0;
      std::memcpy(&old, &launch.args.floats[p], sizeof(old));
      update(old, word);
      std::memcpy(&launch.args.floats[p], &old, sizeof(old));
    }
  } else if (launch.batch >= 0) {
    const KernelBatch& batch = plan.batches.at(launch.batch);
    for (size_t s = 0; s < launch.count; ++s) {
      const FusedKernel& fused = plan.kernels.at(batch.kernels.at(launch.first + s));
      const size_t num_buffers = fused.buffers.size();
      for (size_t p = 0; p < fused.params.size(); ++p) {
        update(launch.table.at(cudaBatchTableWord(*launch.batch_shape, 2 + num_buffers + p, s)),
               paramWord(graph, fused.params[p]));
      }
    }
  }
  return changed;
}

int cudaArch(c10::Device device) {
  const CudaDriverApi& api = driver();
  return attribute(api, kCuDeviceAttributeComputeCapabilityMajor, device) * 10 +
         attribute(api, kCuDeviceAttributeComputeCapabilityMinor, device);
}

namespace {

// Note [Loaded CUDA modules]
// Plans of new sizes render a source NVRTC compiled before (Note [Shape-generic kernels]), so many
// plans share one binary. Each binary is loaded once per device (cuModuleLoadData, then each
// function and its occupancy looked up once) and stays loaded for the process, as before; a plan's
// CudaModule holds that module's handles with its own launch shapes. Loading a module for every
// plan cost a new size a module load and kept one more copy of the same code on the device.
struct LoadedModule {
  CuModule module = nullptr;
  std::map<std::string, CuFunction> functions;
  std::map<std::pair<std::string, int>, int> max_blocks;  // (function, block) -> blocks
};

struct LoadedModules {
  std::mutex mutex;
  std::map<std::pair<std::string, c10::DeviceIndex>, LoadedModule> entries;  // (binary key, device)
};

LoadedModules& loadedModules() {
  static LoadedModules* const instance = new LoadedModules();
  return *instance;
}

}  // namespace

std::shared_ptr<const CudaModule> loadCudaModule(const CudaBinary& binary, const CudaSource& source,
                                                 c10::Device device) {
  const CudaDriverApi& api = driver();
  c10::DeviceGuard guard(device);
  makeContextCurrent(api, device);
  LoadedModules& loaded = loadedModules();
  std::lock_guard<std::mutex> lock(loaded.mutex);
  LoadedModule fresh;
  // A binary without a key (none of the compiler's) is loaded for this plan alone.
  LoadedModule& entry = binary.key.empty() ? fresh : loaded.entries[{binary.key, device.index()}];
  if (entry.module == nullptr)
    LF_CU_CHECK(api, cuModuleLoadData(&entry.module, binary.image.data()));
  const int sms = attribute(api, kCuDeviceAttributeMultiprocessorCount, device);
  auto result = std::make_shared<CudaModule>();
  result->device = device;
  result->module = entry.module;
  auto function = [&](const std::string& name) -> void* {
    if (name.empty()) return nullptr;
    auto it = entry.functions.find(name);
    if (it != entry.functions.end()) return it->second;
    CuFunction f = nullptr;
    LF_CU_CHECK(api, cuModuleGetFunction(&f, entry.module, name.c_str()));
    entry.functions.emplace(name, f);
    return f;
  };
  for (const CudaLaunchShape& shape : source.kernels) {
    CudaKernelHandle handle;
    handle.shape = shape;
    handle.function = function(shape.name);
    handle.vector_function = function(shape.vector_name);
    if (handle.function) {
      auto [it, added] = entry.max_blocks.try_emplace({shape.name, shape.block}, 0);
      if (added) {
        int per_sm = 0;
        LF_CU_CHECK(api, cuOccupancyMaxActiveBlocksPerMultiprocessor(
                             &per_sm, static_cast<CuFunction>(handle.function), shape.block, 0));
        it->second = std::max(1, per_sm) * std::max(1, sms);
      }
      handle.max_blocks = it->second;
    }
    result->kernels.push_back(std::move(handle));
  }
  for (const CudaBatchShape& shape : source.batches) {
    result->batches.push_back(
        CudaBatchHandle{function(shape.name), function(shape.vector_name), shape});
  }
  return result;
}

unsigned cudaGridFor(int64_t points, const CudaLaunchShape& shape, int max_blocks) {
  const int64_t per_block = shape.block / shape.group;
  const int64_t needed = (points + per_block - 1) / per_block;
  return static_cast<unsigned>(std::clamp<int64_t>(needed, 1, std::max(1, max_blocks)));
}

void prepareCudaLaunch(const FusedKernel& fused, const CudaLaunchShape& shape, bool has_vector,
                       const Graph& graph, PlanValues& values, c10::Device device,
                       CudaLaunchArgs& launch) {
  const size_t num_buffers = fused.buffers.size(), num_params = fused.params.size();
  launch.pointers = kernelPointers(fused, graph, values, device);
  launch.ints.assign(num_params, 0);
  launch.floats.assign(num_params, 0);
  launch.args.clear();
  for (size_t i = 0; i < num_buffers; ++i) launch.args.push_back(&launch.pointers[i]);
  for (size_t p = 0; p < num_params; ++p) {
    const ParamBinding& binding = fused.params[p];
    const c10::Scalar s = paramValue(graph, binding);
    if (binding.floating) {
      launch.floats[p] = s.toDouble();
      launch.args.push_back(&launch.floats[p]);
    } else {
      launch.ints[p] = s.toLong();
      launch.args.push_back(&launch.ints[p]);
    }
  }
  launch.vector =
      has_vector && alignedForVector(fused.kernel, shape.vector_buffers, launch.pointers);
  launch.points = launch.vector ? shape.points / 4 : shape.points;
  if (shape.split > 1) {
    launch.workspace =
        at::empty({shape.workspace}, at::TensorOptions().dtype(at::kByte).device(device));
    launch.counters =
        at::zeros({shape.split_blocks}, at::TensorOptions().dtype(at::kInt).device(device));
    launch.split_pointers[0] = launch.workspace.data_ptr();
    launch.split_pointers[1] = launch.counters.data_ptr();
    launch.args.push_back(&launch.split_pointers[0]);
    launch.args.push_back(&launch.split_pointers[1]);
  }
  launch.constants = launch.vector ? shape.vector_arguments : shape.arguments;
  for (int64_t& constant : launch.constants) launch.args.push_back(&constant);
}

unsigned cudaGridFor(const CudaLaunchArgs& launch, const CudaLaunchShape& shape, int max_blocks) {
  if (shape.split > 1) return static_cast<unsigned>(shape.split_blocks * shape.split);
  return cudaGridFor(launch.points, shape, max_blocks);
}

std::vector<CudaBatchLaunch> prepareCudaBatchLaunches(const ExecutionPlan& plan,
                                                      const KernelBatch& batch,
                                                      const CudaBatchShape& shape,
                                                      const Graph& graph, PlanValues& values,
                                                      c10::Device device) {
  std::vector<CudaBatchLaunch> launches;
  const size_t capacity = static_cast<size_t>(shape.capacity);
  for (size_t first = 0; first < batch.kernels.size(); first += capacity) {
    const size_t count = std::min(capacity, batch.kernels.size() - first);
    CudaBatchLaunch launch;
    launch.vector = !shape.vector_name.empty();
    for (size_t s = 0; s < count; ++s) {
      const FusedKernel& fused = plan.kernels.at(batch.kernels[first + s]);
      const size_t num_buffers = fused.buffers.size();
      if (launch.table.empty()) {
        launch.table.assign(cudaBatchTableWords(shape, num_buffers, fused.params.size()), 0);
      }
      const int64_t n = domainNumel(fused.kernel);
      launch.table[cudaBatchTableWord(shape, 0, s)] = n;
      launch.table[cudaBatchTableWord(shape, 1, s)] = launch.blocks;
      launch.blocks += (n + shape.chunk - 1) / shape.chunk;
      const std::vector<void*> pointers = kernelPointers(fused, graph, values, device);
      for (size_t b = 0; b < num_buffers; ++b) {
        launch.table[cudaBatchTableWord(shape, 2 + b, s)] =
            static_cast<int64_t>(reinterpret_cast<uintptr_t>(pointers[b]));
      }
      for (size_t p = 0; p < fused.params.size(); ++p) {
        launch.table[cudaBatchTableWord(shape, 2 + num_buffers + p, s)] =
            paramWord(graph, fused.params[p]);
      }
      launch.vector =
          launch.vector && alignedForVector(fused.kernel, shape.vector_buffers, pointers);
    }
    launch.table[0] = static_cast<int64_t>(count);
    launch.table[1] = launch.blocks;
    launches.push_back(std::move(launch));
  }
  return launches;
}

size_t runCudaBatch(const ExecutionPlan& plan, size_t batch, const CudaModule& module,
                    const Graph& graph, PlanValues& values) {
  const CudaBatchHandle& g = module.batches.at(batch);
  std::vector<CudaBatchLaunch> launches =
      prepareCudaBatchLaunches(plan, plan.batches.at(batch), g.shape, graph, values, module.device);
  c10::Stream stream =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(module.device);
  const CudaDriverApi& api = driver();
  c10::DeviceGuard guard(module.device);
  makeContextCurrent(api, module.device);
  PlanCapture* capture = currentCapture();
  size_t first = 0;
  for (CudaBatchLaunch& launch : launches) {
    void* table = launch.table.data();
    void* function = launch.vector ? g.vector_function : g.function;
    LF_CU_CHECK(
        api, cuLaunchKernel(static_cast<CuFunction>(function), static_cast<unsigned>(launch.blocks),
                            1, 1, static_cast<unsigned>(g.shape.block), 1, 1, 0,
                            static_cast<CuStream>(stream.native_handle()), &table, nullptr));
    const size_t count = static_cast<size_t>(launch.table[0]);
    if (capture) {
      recordBatchLaunch(*capture, static_cast<int32_t>(batch), first, g.shape, function,
                        std::move(launch))
          .node = lastCapturedNode(stream.native_handle());
    }
    first += count;
  }
  return launches.size();
}

void runCudaKernel(const FusedKernel& fused, const CudaModule& module, size_t index,
                   const Graph& graph, PlanValues& values) {
  const CudaKernelHandle& k = module.kernels.at(index);
  PlanCapture* capture = currentCapture();
  CudaLaunchArgs local;
  CapturedLaunch* record = capture ? &capture->addLaunch() : nullptr;
  CudaLaunchArgs& launch = record ? record->args : local;
  prepareCudaLaunch(fused, k.shape, k.vector_function != nullptr, graph, values, module.device,
                    launch);
  if (launch.points == 0) return;
  void* function = launch.vector ? k.vector_function : k.function;
  const unsigned grid = cudaGridFor(launch, k.shape, k.max_blocks);
  c10::Stream stream =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(module.device);
  const CudaDriverApi& api = driver();
  c10::DeviceGuard guard(module.device);
  makeContextCurrent(api, module.device);
  LF_CU_CHECK(api, cuLaunchKernel(static_cast<CuFunction>(function), grid, 1, 1,
                                  static_cast<unsigned>(k.shape.block), 1, 1, 0,
                                  static_cast<CuStream>(stream.native_handle()), launch.args.data(),
                                  nullptr));
  if (!record) return;
  record->kernel = static_cast<int32_t>(index);
  record->function = function;
  record->grid = grid;
  record->block = static_cast<unsigned>(k.shape.block);
  record->node = lastCapturedNode(stream.native_handle());
}

}  // namespace lazyfuse
