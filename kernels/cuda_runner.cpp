#include "kernels/cuda_runner.h"

#include "kernels/cuda_api.h"
#include "lazy_ir/check.h"

#include <ATen/ops/empty_strided.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <mutex>

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

at::Tensor& bufferSlot(const BufferBinding& b, const Graph& graph, PlanValues& values) {
  if (b.temp) return values.temps.at(b.slot);
  auto& outputs = values.nodes.at(b.value.position);
  outputs.resize(std::max<size_t>(outputs.size(), graph.nodes()[b.value.position]->numOutputs()));
  return outputs.at(b.value.index);
}

}  // namespace

int cudaArch(c10::Device device) {
  const CudaDriverApi& api = driver();
  return attribute(api, kCuDeviceAttributeComputeCapabilityMajor, device) * 10 +
         attribute(api, kCuDeviceAttributeComputeCapabilityMinor, device);
}

std::shared_ptr<const CudaModule> loadCudaModule(const CudaBinary& binary,
                                                 const std::vector<CudaLaunchShape>& shapes,
                                                 c10::Device device) {
  const CudaDriverApi& api = driver();
  c10::DeviceGuard guard(device);
  makeContextCurrent(api, device);
  CuModule module = nullptr;
  LF_CU_CHECK(api, cuModuleLoadData(&module, binary.image.data()));
  const int sms = attribute(api, kCuDeviceAttributeMultiprocessorCount, device);
  auto result = std::make_shared<CudaModule>();
  result->device = device;
  result->module = module;
  for (const CudaLaunchShape& shape : shapes) {
    CudaKernelHandle handle;
    handle.shape = shape;
    CuFunction function = nullptr;
    LF_CU_CHECK(api, cuModuleGetFunction(&function, module, shape.name.c_str()));
    handle.function = function;
    if (!shape.vector_name.empty()) {
      CuFunction vector_function = nullptr;
      LF_CU_CHECK(api, cuModuleGetFunction(&vector_function, module, shape.vector_name.c_str()));
      handle.vector_function = vector_function;
    }
    int per_sm = 0;
    LF_CU_CHECK(api, cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, function, shape.block, 0));
    handle.max_blocks = std::max(1, per_sm) * std::max(1, sms);
    result->kernels.push_back(std::move(handle));
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
  launch.pointers.assign(num_buffers, nullptr);
  for (size_t i = 0; i < num_buffers; ++i) {
    const BufferBinding& b = fused.buffers[i];
    at::Tensor& slot = bufferSlot(b, graph, values);
    if (fused.kernel.buffers[i].output) {
      slot = at::empty_strided(b.meta.sizes, b.meta.strides,
                               at::TensorOptions().dtype(b.meta.dtype).device(device));
    }
    LF_INTERNAL_ASSERT(slot.defined() && slot.device() == device, "kernel ", fused.kernel.name,
                       " reads a buffer that is not on ", device);
    launch.pointers[i] = slot.data_ptr();
  }
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
  launch.vector = has_vector;
  for (int32_t b : shape.vector_buffers) {
    const size_t bytes = 4 * c10::elementSize(fused.kernel.buffers[b].dtype);
    launch.vector = launch.vector && reinterpret_cast<uintptr_t>(launch.pointers[b]) % bytes == 0;
  }
  launch.points = launch.vector ? shape.points / 4 : shape.points;
}

void runCudaKernel(const FusedKernel& fused, const CudaModule& module, size_t index,
                   const Graph& graph, PlanValues& values) {
  const CudaKernelHandle& k = module.kernels.at(index);
  CudaLaunchArgs launch;
  prepareCudaLaunch(fused, k.shape, k.vector_function != nullptr, graph, values, module.device,
                    launch);
  if (launch.points == 0) return;
  void* function = launch.vector ? k.vector_function : k.function;
  c10::Stream stream =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(module.device);
  const CudaDriverApi& api = driver();
  c10::DeviceGuard guard(module.device);
  makeContextCurrent(api, module.device);
  LF_CU_CHECK(api, cuLaunchKernel(static_cast<CuFunction>(function),
                                  cudaGridFor(launch.points, k.shape, k.max_blocks), 1, 1,
                                  static_cast<unsigned>(k.shape.block), 1, 1, 0,
                                  static_cast<CuStream>(stream.native_handle()),
                                  launch.args.data(), nullptr));
}

}  // namespace lazyfuse
