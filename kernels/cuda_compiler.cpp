#include "kernels/cuda_compiler.h"

#include "kernels/cpu_compiler.h"
#include "kernels/cuda_api.h"
#include "kernels/cuda_codegen.h"
#include "kernels/detail/cpu_disk_cache.h"

#include <c10/util/hash.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

namespace lazyfuse {
namespace {

// Note [CUDA kernel cache key]
// A binary is found again by the SHA-1 of the source, the target (sm_XY for a cubin, compute_XY
// for PTX), NVRTC's version, the NVRTC options and kCudaCodegenVersion: everything that changes
// the code NVRTC makes, nothing else. On disk it is `<cache>/cuda/<key>.cubin` (or `.ptx`) with
// the checksum file of Note [CPU disk cache], written and verified the same way.

/// Every architecture NVRTC can make a cubin for, ascending.
std::vector<int> supportedArchs(const NvrtcApi& api) {
  int count = 0;
  if (api.nvrtcGetNumSupportedArchs(&count) != 0 || count <= 0) return {};
  std::vector<int> archs(static_cast<size_t>(count));
  if (api.nvrtcGetSupportedArchs(archs.data()) != 0) return {};
  std::sort(archs.begin(), archs.end());
  return archs;
}

/// `sm_<arch>` when NVRTC knows the architecture, else PTX for the newest one it knows (the
/// driver compiles PTX for newer GPUs).
std::string targetFor(const NvrtcApi& api, int arch, bool& ptx) {
  std::vector<int> archs = supportedArchs(api);
  ptx = std::find(archs.begin(), archs.end(), arch) == archs.end();
  if (!ptx) return "sm_" + std::to_string(arch);
  int best = archs.empty() ? arch : archs.back();
  for (int a : archs) {
    if (a <= arch) best = a;
  }
  return "compute_" + std::to_string(best);
}

const std::vector<std::string>& nvrtcOptions() {
  // No contraction of a * b + c into one fma: each op rounds, as eager's separate kernels do
  // (the CPU compiler's -ffp-contract=off).
  static const std::vector<std::string> options = {"--std=c++17", "--fmad=false"};
  return options;
}

std::string cacheKey(const NvrtcApi& api, const std::string& source, const std::string& target) {
  std::string text = source + '\0' + target + '\0' + std::to_string(api.major) + "." +
                     std::to_string(api.minor) + '\0' + std::to_string(kCudaCodegenVersion);
  for (const std::string& option : nvrtcOptions()) text += '\0' + option;
  return c10::sha1(text).str();
}

bool readFile(const std::string& path, std::string& bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  bytes = buffer.str();
  return static_cast<bool>(in);
}

std::string programLog(const NvrtcApi& api, NvrtcProgram program) {
  size_t size = 0;
  if (api.nvrtcGetProgramLogSize(program, &size) != 0 || size <= 1) return "";
  std::string log(size, '\0');
  if (api.nvrtcGetProgramLog(program, log.data()) != 0) return "";
  log.resize(size - 1);
  return log;
}

/// Runs NVRTC; the image, or "" with `error` set.
std::string runNvrtc(const NvrtcApi& api, const std::string& source, const std::string& target,
                     bool ptx, std::string& error) {
  NvrtcProgram program = nullptr;
  if (NvrtcResult rc =
          api.nvrtcCreateProgram(&program, source.c_str(), "lazyfuse.cu", 0, nullptr, nullptr);
      rc != 0) {
    error = "nvrtcCreateProgram failed: " + nvrtcErrorText(api, rc);
    return "";
  }
  std::vector<std::string> options = nvrtcOptions();
  options.push_back("--gpu-architecture=" + target);
  std::vector<const char*> argv;
  for (const std::string& option : options) argv.push_back(option.c_str());
  NvrtcResult rc = api.nvrtcCompileProgram(program, static_cast<int>(argv.size()), argv.data());
  std::string image;
  if (rc != 0) {
    error = "nvrtcCompileProgram failed (" + target + "): " + nvrtcErrorText(api, rc) + "\n" +
            programLog(api, program);
  } else {
    size_t size = 0;
    auto getSize = ptx ? api.nvrtcGetPTXSize : api.nvrtcGetCUBINSize;
    auto get = ptx ? api.nvrtcGetPTX : api.nvrtcGetCUBIN;
    if (getSize(program, &size) == 0 && size > 0) {
      image.resize(size);
      if (get(program, image.data()) != 0) image.clear();
    }
    if (image.empty()) error = "NVRTC produced no " + std::string(ptx ? "PTX" : "cubin");
  }
  api.nvrtcDestroyProgram(&program);
  return image;
}

/// Stores `image` as `path` through a temporary file and its checksum; false on failure.
bool storeImage(const std::string& dir, const std::string& key, const std::string& image,
                const std::string& path) {
  std::string tmp = detail::makeTempFile(dir, key + ".tmp.");
  if (tmp.empty()) return false;
  if (detail::writeFile(tmp, image) && detail::storeVerified(tmp, path)) return true;
  unlink(tmp.c_str());
  return false;
}

/// Writes the source of a failed compile to `<dir>/<key>.cu` for the error to point at.
std::string keepSource(const std::string& dir, const std::string& key, const std::string& source) {
  std::string tmp = detail::makeTempFile(dir, key + ".cu.");
  std::string kept = dir + "/" + key + ".cu";
  if (!tmp.empty() && detail::writeFile(tmp, source) && rename(tmp.c_str(), kept.c_str()) == 0) {
    return kept;
  }
  if (!tmp.empty()) unlink(tmp.c_str());
  return "(not kept: cannot write in " + dir + ")";
}

struct Compiled {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const CudaBinary>> binaries;  // key -> image
};

Compiled& compiled() {
  static Compiled* const instance = new Compiled();
  return *instance;
}

}  // namespace

CudaCompileResult compileCuda(const std::string& source, int arch) {
  CudaCompileResult result;
  const NvrtcApi* api = nvrtc(&result.error);
  if (!api) return result;
  bool ptx = false;
  std::string target = targetFor(*api, arch, ptx);
  std::string key = cacheKey(*api, source, target);
  Compiled& cache = compiled();
  std::lock_guard<std::mutex> guard(cache.mutex);
  if (auto it = cache.binaries.find(key); it != cache.binaries.end()) {
    result.binary = it->second;
    result.disk_hit = true;
    return result;
  }
  std::string dir = cacheDirectory() + "/cuda";
  bool private_dir = detail::makeDirectories(dir) && detail::isPrivateDirectory(dir);
  std::string path = dir + "/" + key + (ptx ? ".ptx" : ".cubin");
  auto binary = std::make_shared<CudaBinary>();
  binary->ptx = ptx;
  binary->key = key;
  if (private_dir && detail::loadVerified(path) && readFile(path, binary->image)) {
    result.disk_hit = true;
  } else {
    binary->image = runNvrtc(*api, source, target, ptx, result.error);
    if (binary->image.empty()) {
      result.error += "\nsource: " +
                      keepSource(private_dir ? dir : detail::privateTempDirectory(), key, source);
      return result;
    }
    if (private_dir) storeImage(dir, key, binary->image, path);
  }
  result.error.clear();
  cache.binaries[key] = binary;
  result.binary = std::move(binary);
  return result;
}

}  // namespace lazyfuse
