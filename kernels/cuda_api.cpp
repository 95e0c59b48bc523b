#include "kernels/cuda_api.h"

#include "lazy_ir/check.h"
#include "lazy_ir/config.h"

#include <c10/core/CPUAllocator.h>

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace lazyfuse {
namespace {

// Note [Finding NVRTC and the driver]
// NVRTC is looked for, in order: $LAZYFUSE_NVRTC (a path); the CUDA libraries that came with
// torch (the nvidia-* wheels beside torch: site-packages/nvidia/cu13/lib, or
// nvidia/cuda_nvrtc/lib for CUDA 12 wheels), so the NVRTC is the one torch was built with;
// $CUDA_HOME/lib64 and /usr/local/cuda/lib64; then the loader's own search for libnvrtc.so.13,
// libnvrtc.so.12, libnvrtc.so. The driver is libcuda.so.1, which only a GPU machine has. Every
// symbol is resolved when the library is loaded: a library missing one is skipped, so a call
// through the tables never meets a null pointer.

/// The folder of torch's libc10.so, found from the address of one of its functions.
std::string torchLibDirectory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&c10::GetCPUAllocator), &info) == 0 || !info.dli_fname) {
    return "";
  }
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

std::vector<std::string> nvrtcCandidates() {
  std::vector<std::string> candidates;
  if (std::string env = config::nvrtcLibrary(); !env.empty()) candidates.push_back(env);
  if (std::string torch_lib = torchLibDirectory(); !torch_lib.empty()) {
    candidates.push_back(torch_lib + "/../../nvidia/cu13/lib/libnvrtc.so.13");
    candidates.push_back(torch_lib + "/../../nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
  }
  for (const std::string& path : config::cudaToolkitNvrtc()) candidates.push_back(path);
  for (const char* name :
       {"/usr/local/cuda/lib64/libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) {
    candidates.push_back(name);
  }
  return candidates;
}

/// Resolves `name` into `slot`; false when the library lacks it.
template <class Fn>
bool bind(void* handle, Fn& slot, const char* name) {
  slot = reinterpret_cast<Fn>(dlsym(handle, name));
  return slot != nullptr;
}

bool bindNvrtc(void* h, NvrtcApi& api) {
  return bind(h, api.nvrtcVersion, "nvrtcVersion") &&
         bind(h, api.nvrtcGetErrorString, "nvrtcGetErrorString") &&
         bind(h, api.nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs") &&
         bind(h, api.nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs") &&
         bind(h, api.nvrtcCreateProgram, "nvrtcCreateProgram") &&
         bind(h, api.nvrtcDestroyProgram, "nvrtcDestroyProgram") &&
         bind(h, api.nvrtcCompileProgram, "nvrtcCompileProgram") &&
         bind(h, api.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize") &&
         bind(h, api.nvrtcGetProgramLog, "nvrtcGetProgramLog") &&
         bind(h, api.nvrtcGetCUBINSize, "nvrtcGetCUBINSize") &&
         bind(h, api.nvrtcGetCUBIN, "nvrtcGetCUBIN") &&
         bind(h, api.nvrtcGetPTXSize, "nvrtcGetPTXSize") && bind(h, api.nvrtcGetPTX, "nvrtcGetPTX");
}

bool bindDriver(void* h, CudaDriverApi& api) {
  return bind(h, api.cuInit, "cuInit") && bind(h, api.cuDriverGetVersion, "cuDriverGetVersion") &&
         bind(h, api.cuGetErrorString, "cuGetErrorString") &&
         bind(h, api.cuDeviceGet, "cuDeviceGet") &&
         bind(h, api.cuDeviceGetAttribute, "cuDeviceGetAttribute") &&
         bind(h, api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
         bind(h, api.cuCtxGetCurrent, "cuCtxGetCurrent") &&
         bind(h, api.cuCtxSetCurrent, "cuCtxSetCurrent") &&
         bind(h, api.cuModuleLoadData, "cuModuleLoadData") &&
         bind(h, api.cuModuleGetFunction, "cuModuleGetFunction") &&
         bind(h, api.cuOccupancyMaxActiveBlocksPerMultiprocessor,
              "cuOccupancyMaxActiveBlocksPerMultiprocessor") &&
         bind(h, api.cuLaunchKernel, "cuLaunchKernel");
}

struct Loaded {
  const NvrtcApi* nvrtc = nullptr;
  const CudaDriverApi* driver = nullptr;
  std::string why;
};

const Loaded& loadedNvrtc() {
  static const Loaded loaded = [] {
    Loaded result;
    std::string tried;
    for (const std::string& path : nvrtcCandidates()) {
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) continue;
      auto* api = new NvrtcApi();  // lives as long as the process, as the library does
      api->path = path;
      if (!bindNvrtc(handle, *api) || api->nvrtcVersion(&api->major, &api->minor) != 0) {
        tried += " " + path + " (incomplete)";
        delete api;
        dlclose(handle);
        continue;
      }
      result.nvrtc = api;
      return result;
    }
    result.why =
        "NVRTC not found (set LAZYFUSE_NVRTC, or install torch's nvidia-* CUDA wheels or "
        "the CUDA toolkit)" +
        tried;
    return result;
  }();
  return loaded;
}

const Loaded& loadedDriver() {
  static const Loaded loaded = [] {
    Loaded result;
    void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      result.why = "no CUDA driver (libcuda.so.1 cannot be loaded): no GPU on this machine";
      return result;
    }
    auto* api = new CudaDriverApi();
    api->path = "libcuda.so.1";
    if (!bindDriver(handle, *api)) {
      result.why = "the CUDA driver lacks a function lazyfuse needs";
      delete api;
      return result;
    }
    if (CuResult rc = api->cuInit(0); rc != 0) {
      result.why = "cuInit failed: " + cuErrorText(*api, rc) + " (no usable GPU)";
      delete api;
      return result;
    }
    api->cuDriverGetVersion(&api->version);
    bind(handle, api->cuStreamGetCaptureInfo_v3, "cuStreamGetCaptureInfo_v3");
    bind(handle, api->cuGraphExecKernelNodeSetParams_v2, "cuGraphExecKernelNodeSetParams_v2");
    result.driver = api;
    return result;
  }();
  return loaded;
}

}  // namespace

const NvrtcApi* nvrtc(std::string* why) {
  const Loaded& loaded = loadedNvrtc();
  if (why) *why = loaded.why;
  return loaded.nvrtc;
}

const CudaDriverApi* cudaDriver(std::string* why) {
  const Loaded& loaded = loadedDriver();
  if (why) *why = loaded.why;
  return loaded.driver;
}

std::string nvrtcDescription() {
  std::string why;
  const NvrtcApi* api = nvrtc(&why);
  if (!api) return why;
  return "NVRTC " + std::to_string(api->major) + "." + std::to_string(api->minor) + " (" +
         api->path + ")";
}

std::string cudaDriverDescription() {
  std::string why;
  const CudaDriverApi* api = cudaDriver(&why);
  if (!api) return why;
  return "CUDA driver " + std::to_string(api->version / 1000) + "." +
         std::to_string(api->version % 1000 / 10);
}

std::string nvrtcErrorText(const NvrtcApi& api, NvrtcResult result) {
  const char* text = api.nvrtcGetErrorString(result);
  return (text ? text : "unknown NVRTC error") + std::string(" (") + std::to_string(result) + ")";
}

std::string cuErrorText(const CudaDriverApi& api, CuResult result) {
  const char* text = nullptr;
  if (api.cuGetErrorString(result, &text) != 0 || !text) text = "unknown CUDA driver error";
  return text + std::string(" (") + std::to_string(result) + ")";
}

}  // namespace lazyfuse
