#pragma once

// Compiles rendered C++ into a shared object with the system compiler, loads it with dlopen, and
// keeps it in a disk cache so a second process compiles nothing.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lazyfuse {

using CpuKernelFn = void (*)(int64_t begin, int64_t end, void* const* buffers,
                             const int64_t* iparams, const double* fparams);

/// A loaded shared object and the kernels resolved from it; unloading is left to process exit.
struct CpuModule {
  void* handle = nullptr;
  std::vector<CpuKernelFn> functions;  // in the order of the names asked for
  std::string path;                    // the cached shared object
};

struct CpuCompileResult {
  std::shared_ptr<const CpuModule> module;  // null when compiling failed (see `error`)
  bool disk_hit = false;                    // loaded from the disk cache, nothing compiled
  std::string error;                        // compiler output, path of the source kept for it
};

/// True when a C++ compiler was found ($LAZYFUSE_CXX, else $CXX, else c++/g++ on PATH).
bool cpuCompilerAvailable();
/// The compiler and the flags compileCpp compiles a source with (without the source, the output
/// and the link flags), for tests and tools that look at what the compiler makes of a kernel;
/// empty when there is no compiler.
std::vector<std::string> cpuCompileCommand();
/// The first line of the compiler's `--version`; "" when there is no compiler.
std::string cpuCompilerVersion();
/// The libmvec functions the prelude may declare `omp declare simd` (Note [CPU prelude]):
/// 2 with glibc >= 2.35 on x86-64, 1 with glibc >= 2.22, else 0.
int libmvecLevel();

/// The shared object for `source` from the disk cache, or compiled and stored there, with
/// `names` resolved. Never throws for a compile failure: `module` is null and `error` says why.
CpuCompileResult compileCpp(const std::string& source, const std::vector<std::string>& names);

/// Loads a shared object whose bytes an ahead-of-time package holds (Note [Kernels in a
/// package] in kernels/cpu_kernel_families.cpp) from a private temporary file, and resolves
/// `names`; never needs a compiler. `module` is null and `error` says why when that fails.
CpuCompileResult loadCpuModuleBytes(const std::string& bytes,
                                    const std::vector<std::string>& names);
/// The bytes of the shared object at `path` (a loaded module's); "" when it cannot be read.
std::string readCpuModuleBytes(const std::string& path);
/// The lines of /proc/cpuinfo that say what -march=native targets: a shared object compiled on
/// a CPU with other lines may not run on this one.
std::string cpuIdentity();
/// The disk cache folder: $LAZYFUSE_CACHE_DIR, else $XDG_CACHE_HOME/lazyfuse, else
/// ~/.cache/lazyfuse; created private to the user (0700).
std::string cacheDirectory();

}  // namespace lazyfuse
