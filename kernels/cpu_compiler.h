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
  std::vector<CpuKernelFn> functions;        // in the order of the names asked for
  std::string path;                          // the cached shared object ("" when loaded from bytes)
  std::shared_ptr<const std::string> bytes;  // its bytes, when it came from a package
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
/// package] in kernels/cpu_kernel_families.cpp), from memory (or a private temporary file,
/// removed at once), and resolves `names`; never needs a compiler. `module` is null and `error`
/// says why when that fails.
CpuCompileResult loadCpuModuleBytes(std::shared_ptr<const std::string> bytes,
                                    const std::vector<std::string>& names);
/// The bytes of a loaded module: a package's, or its cache entry's; "" when they cannot be read.
std::string cpuModuleBytes(const CpuModule& module);
/// What a compiled CPU kernel depends on besides its source: the CPU (the lines of
/// /proc/cpuinfo -march=native reads), the codegen version and the libmvec level. A shared
/// object built where this differs may not run here.
std::string cpuKernelAbi();
/// The disk cache folder: $LAZYFUSE_CACHE_DIR, else $XDG_CACHE_HOME/lazyfuse, else
/// ~/.cache/lazyfuse; created private to the user (0700).
std::string cacheDirectory();

}  // namespace lazyfuse
