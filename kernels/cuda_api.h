#pragma once

// NVRTC and the CUDA driver API, loaded with dlopen behind our own tables of function pointers,
// so that liblazyfuse.so links neither and loads where there is no GPU or no CUDA at all.
// See Note [Finding NVRTC and the driver].

#include <cstddef>
#include <string>

namespace lazyfuse {

// Opaque handles and the few enum values we use, spelled as the CUDA headers define them.
using NvrtcResult = int;
using NvrtcProgram = struct _nvrtcProgram*;
using CuResult = int;
using CuDevice = int;
using CuContext = struct CUctx_st*;
using CuModule = struct CUmod_st*;
using CuFunction = struct CUfunc_st*;
using CuStream = struct CUstream_st*;
using CuGraph = struct CUgraph_st*;
using CuGraphNode = struct CUgraphNode_st*;
using CuGraphExec = struct CUgraphExec_st*;

/// CUDA_KERNEL_NODE_PARAMS (its _v2 layout, CUDA 12 and later), for cuGraphExecKernelNodeSetParams.
struct CuKernelNodeParams {
  CuFunction func = nullptr;
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned block_x = 1, block_y = 1, block_z = 1;
  unsigned shared_bytes = 0;
  void** kernel_params = nullptr;
  void** extra = nullptr;
  void* kern = nullptr;  // CUkernel, used when func is null
  CuContext ctx = nullptr;
};

constexpr int kCuStreamCaptureStatusActive = 1;

constexpr int kCuDeviceAttributeMultiprocessorCount = 16;
constexpr int kCuDeviceAttributeComputeCapabilityMajor = 75;
constexpr int kCuDeviceAttributeComputeCapabilityMinor = 76;

struct NvrtcApi {
  std::string path;  // the library that was loaded
  int major = 0, minor = 0;
  NvrtcResult (*nvrtcVersion)(int*, int*) = nullptr;
  const char* (*nvrtcGetErrorString)(NvrtcResult) = nullptr;
  NvrtcResult (*nvrtcGetNumSupportedArchs)(int*) = nullptr;
  NvrtcResult (*nvrtcGetSupportedArchs)(int*) = nullptr;
  NvrtcResult (*nvrtcCreateProgram)(NvrtcProgram*, const char*, const char*, int,
                                    const char* const*, const char* const*) = nullptr;
  NvrtcResult (*nvrtcDestroyProgram)(NvrtcProgram*) = nullptr;
  NvrtcResult (*nvrtcCompileProgram)(NvrtcProgram, int, const char* const*) = nullptr;
  NvrtcResult (*nvrtcGetProgramLogSize)(NvrtcProgram, size_t*) = nullptr;
  NvrtcResult (*nvrtcGetProgramLog)(NvrtcProgram, char*) = nullptr;
  NvrtcResult (*nvrtcGetCUBINSize)(NvrtcProgram, size_t*) = nullptr;
  NvrtcResult (*nvrtcGetCUBIN)(NvrtcProgram, char*) = nullptr;
  NvrtcResult (*nvrtcGetPTXSize)(NvrtcProgram, size_t*) = nullptr;
  NvrtcResult (*nvrtcGetPTX)(NvrtcProgram, char*) = nullptr;
};

struct CudaDriverApi {
  std::string path;
  int version = 0;  // cuDriverGetVersion: 1000 * major + 10 * minor
  CuResult (*cuInit)(unsigned) = nullptr;
  CuResult (*cuDriverGetVersion)(int*) = nullptr;
  CuResult (*cuGetErrorString)(CuResult, const char**) = nullptr;
  CuResult (*cuDeviceGet)(CuDevice*, int) = nullptr;
  CuResult (*cuDeviceGetAttribute)(int*, int, CuDevice) = nullptr;
  CuResult (*cuDevicePrimaryCtxRetain)(CuContext*, CuDevice) = nullptr;
  CuResult (*cuCtxGetCurrent)(CuContext*) = nullptr;
  CuResult (*cuCtxSetCurrent)(CuContext) = nullptr;
  CuResult (*cuModuleLoadData)(CuModule*, const void*) = nullptr;
  CuResult (*cuModuleGetFunction)(CuFunction*, CuModule, const char*) = nullptr;
  CuResult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int*, CuFunction, int, size_t) = nullptr;
  CuResult (*cuLaunchKernel)(CuFunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CuStream, void**, void**) = nullptr;
  // Optional: null where the driver lacks them (before CUDA 12.3), and then captured CUDA graphs
  // are replayed only with the parameter values they were captured with. See Note [CUDA graph
  // replay] in backend/plan_replay.cpp.
  CuResult (*cuStreamGetCaptureInfo_v3)(CuStream, int*, unsigned long long*, CuGraph*,
                                        const CuGraphNode**, const void**, size_t*) = nullptr;
  CuResult (*cuGraphExecKernelNodeSetParams_v2)(CuGraphExec, CuGraphNode,
                                                const CuKernelNodeParams*) = nullptr;
};

/// NVRTC, loaded once per process; null when it cannot be found (`why` says where we looked).
const NvrtcApi* nvrtc(std::string* why = nullptr);
/// The CUDA driver with cuInit done; null where there is no driver or no GPU (`why` says which).
const CudaDriverApi* cudaDriver(std::string* why = nullptr);

/// "NVRTC 13.0 (<path>)", or why there is none; for logs and the Python API.
std::string nvrtcDescription();
/// "CUDA driver 13.0", or why there is no usable GPU.
std::string cudaDriverDescription();

/// The message of an NVRTC / driver result code.
std::string nvrtcErrorText(const NvrtcApi& api, NvrtcResult result);
std::string cuErrorText(const CudaDriverApi& api, CuResult result);

}  // namespace lazyfuse

/// Checks a driver call; a failure is a user-visible error (a launch on a broken device, out of
/// resources), raised as a c10::Error with the driver's message (Note [Two kinds of error]).
#define LF_CU_CHECK(api, call)                                                                  \
  do {                                                                                          \
    ::lazyfuse::CuResult lf_cu_result = (api).call;                                             \
    LF_CHECK(lf_cu_result == 0, #call " failed: ", ::lazyfuse::cuErrorText(api, lf_cu_result)); \
  } while (0)
