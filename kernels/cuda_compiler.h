#pragma once

// Compiles rendered CUDA C++ with NVRTC into a cubin for one GPU architecture (PTX where NVRTC
// is older than the GPU), and keeps the result in memory and in the disk cache, so a second
// process compiles nothing. Needs NVRTC only: it works, and is tested, where there is no GPU.

#include <memory>
#include <string>

namespace lazyfuse {

struct CudaBinary {
  std::string image;  // a cubin, or NUL-terminated PTX when `ptx`
  bool ptx = false;
  std::string key;  // the cache key (hex), unique per image
};

struct CudaCompileResult {
  std::shared_ptr<const CudaBinary> binary;  // null when compiling failed (see `error`)
  bool disk_hit = false;                     // nothing compiled: from memory or the disk cache
  std::string error;                         // NVRTC's log and the path of the kept source
};

/// The binary of `source` for compute capability `arch` (major * 10 + minor, e.g. 90), from
/// the caches or compiled by NVRTC. Never throws for a compile failure.
CudaCompileResult compileCuda(const std::string& source, int arch);

}  // namespace lazyfuse
