#include "kernels/cpu_compiler.h"

#include "kernels/cpu_codegen.h"
#include "kernels/detail/cpu_disk_cache.h"
#include "kernels/interrupts.h"
#include "lazy_ir/config.h"

#include <c10/util/hash.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>

#if defined(__GLIBC__)
#include <gnu/libc-version.h>
#endif

extern char** environ;

namespace lazyfuse {
namespace {

struct Compiler {
  std::string path;     // absolute, or as given when it holds a '/'
  std::string version;  // first line of `<path> --version`
};

bool isExecutable(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

/// `name` as the shell would find it: a path when it holds a '/', else the first on $PATH.
std::string resolveProgram(const std::string& name) {
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return isExecutable(name) ? name : "";
  std::stringstream dirs(config::searchPath());
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (isExecutable(candidate)) return candidate;
  }
  return "";
}

/// Ends the process group of `pid` (which it leads) and reaps `pid`: SIGTERM first, so that gcc
/// removes its temporary files, then SIGKILL after 200 ms. See Note [Interrupting a sync].
void stopProcessGroup(pid_t pid) {
  kill(-pid, SIGTERM);
  for (int waited_ms = 0; waited_ms < 200; waited_ms += 10) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return;
    usleep(10 * 1000);
  }
  kill(-pid, SIGKILL);
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

/// Runs `argv` (no shell) with stdout and stderr captured into `output`; returns the exit
/// status, or -1 when the program could not be started or did not exit normally.
int runProgram(const std::vector<std::string>& argv, std::string& output) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    output = std::string("pipe failed: ") + std::strerror(errno);
    return -1;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  // Its own process group, so that an interrupt stops the compiler's children too (Note
  // [Interrupting a sync]).
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  pid_t pid = -1;
  int spawned = posix_spawn(&pid, argv[0].c_str(), &actions, &attributes, args.data(), environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (spawned != 0) {
    close(fds[0]);
    output = "cannot run " + argv[0] + ": " + std::strerror(spawned);
    return -1;
  }
  char buffer[4096];
  try {
    for (;;) {
      // Waits 50 ms at a time, so that Ctrl-C stops a long compile (Note [Interrupting a sync]).
      pollInterrupt();
      pollfd ready{fds[0], POLLIN, 0};
      const int polled = poll(&ready, 1, 50);
      if (polled == 0 || (polled < 0 && errno == EINTR)) continue;  // a signal ends the wait
      ssize_t n = read(fds[0], buffer, sizeof(buffer));
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) break;
      output.append(buffer, static_cast<size_t>(n));
    }
  } catch (...) {
    close(fds[0]);
    stopProcessGroup(pid);
    throw;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// The compiler: $LAZYFUSE_CXX, else $CXX, else c++ or g++ on PATH; the first that runs.
const Compiler* findCompiler() {
  static const Compiler* const found = []() -> const Compiler* {
    for (const std::string& name : config::compilerCandidates()) {
      std::string path = resolveProgram(name);
      std::string output;
      if (path.empty() || runProgram({path, "--version"}, output) != 0) continue;
      return new Compiler{path, output.substr(0, output.find('\n'))};
    }
    return nullptr;
  }();
  return found;
}

// Note [CPU compile flags]
// Not -ffast-math: NaN, infinities and signed zeros must behave as in eager. -ffp-contract=off
// because eager rounds after every op and a fused multiply-add would not. -fwrapv makes signed
// overflow wrap, as eager's integer ops do; -fno-math-errno lets calls to sqrt and libmvec be
// vectorized; -fopenmp-simd honours `omp simd` without an OpenMP runtime. -fno-builtin-sin/cos:
// GCC merges sin and cos of one value into one call of scalar sincosf, which has no vector form
// it can call, and the whole loop then runs one element at a time (rotary embeddings compute
// exactly that); as plain functions, each goes to its libmvec variant (Note [CPU prelude]).
// Not -fno-trapping-math, though GCC vectorizes floorf & co only with it: it also folds
// (float)(long)x into truncf(x), which changes the result for NaN and out-of-range values; the
// prelude computes floor, ceil, trunc and round itself instead (Note [CPU prelude]).
// -fno-tree-loop-distribute-patterns: a block loop that only copies a load into its array
// (Note [Half blocks]) became a call of memcpy per block of 256, which made a float-to-half
// conversion kernel 1.3-1.5x slower than eager's. The vectorization of every kernel function
// is pinned by test_vectorized_loops.cpp (Note [Vectorized CPU loops]).
const std::vector<std::string>& compileFlags() {
  static const std::vector<std::string> flags = [] {
    std::vector<std::string> f;
    for (const char* flag :
         {"-O3", "-march=native", "-fPIC", "-shared", "-fopenmp-simd", "-fno-math-errno", "-fwrapv",
          "-fno-semantic-interposition", "-ffp-contract=off", "-fno-tree-loop-distribute-patterns",
          "-fno-builtin-sin", "-fno-builtin-sinf", "-fno-builtin-cos", "-fno-builtin-cosf"}) {
      f.push_back(flag);
    }
    f.push_back("-DLF_MVEC=" + std::to_string(libmvecLevel()));
    return f;
  }();
  return flags;
}

std::vector<std::string> linkFlags() {
  if (libmvecLevel() > 0) return {"-lmvec", "-lm"};
  return {"-lm"};
}

/// The lines of /proc/cpuinfo that say what -march=native will target.
std::string cpuIdentity() {
  static const std::string identity = [] {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::map<std::string, std::string> first;
    std::string line;
    while (std::getline(cpuinfo, line)) {
      std::string key = line.substr(0, line.find(':'));
      while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
      bool wanted = key == "model name" || key == "flags" || key == "Features" ||
                    key == "CPU implementer" || key == "CPU part";
      if (wanted && !first.count(key)) first[key] = line;
    }
    std::string text;
    for (const auto& entry : first) text += entry.second + "\n";
    return text;
  }();
  return identity;
}

// Note [CPU kernel cache key]
// A shared object is found again by the SHA-1 of everything that changes the code the compiler
// makes: the source, the compiler's path and version line, every flag, kCpuCodegenVersion and
// the CPU (the lines of /proc/cpuinfo -march=native depends on). Nothing else is in the key.
std::string cacheKey(const std::string& source, const Compiler& compiler) {
  std::string text = source;
  for (const std::string& part : {compiler.path, compiler.version}) text += '\0' + part;
  for (const std::string& flag : compileFlags()) text += '\0' + flag;
  for (const std::string& flag : linkFlags()) text += '\0' + flag;
  text += '\0' + std::to_string(kCpuCodegenVersion) + '\0' + cpuIdentity();
  return c10::sha1(text).str();
}

/// The folder to compile into: the cache folder when it is private to us, else a private
/// temporary folder for this process (see Note [CPU disk cache]); "" when neither exists.
std::string workingDirectory() {
  std::string dir = cacheDirectory();
  if (detail::isPrivateDirectory(dir)) return dir;
  return detail::privateTempDirectory();
}

/// Compiles `source` into `so_path`; "" on success, else the error for CpuCompileResult.
std::string compileInto(const std::string& source, const Compiler& compiler, const std::string& dir,
                        const std::string& key, const std::string& so_path) {
  std::string src = detail::makeTempFile(dir, key + ".cpp.");
  std::string tmp_so = detail::makeTempFile(dir, key + ".so.");
  if (src.empty() || tmp_so.empty() || !detail::writeFile(src, source)) {
    if (!src.empty()) unlink(src.c_str());
    if (!tmp_so.empty()) unlink(tmp_so.c_str());
    return "cannot write a temporary file in " + dir + ": " + std::strerror(errno);
  }
  std::vector<std::string> argv = {compiler.path};
  for (const std::string& flag : compileFlags()) argv.push_back(flag);
  for (const std::string& arg :
       {std::string("-x"), std::string("c++"), src, std::string("-o"), tmp_so}) {
    argv.push_back(arg);
  }
  for (const std::string& flag : linkFlags()) argv.push_back(flag);
  std::string output;
  int status = -1;
  try {
    status = runProgram(argv, output);
  } catch (...) {  // interrupted: nothing of this compile stays
    unlink(src.c_str());
    unlink(tmp_so.c_str());
    throw;
  }
  if (status == 0) {
    unlink(src.c_str());
    if (detail::storeVerified(tmp_so, so_path)) return "";
    unlink(tmp_so.c_str());
    return "cannot store " + so_path + ": " + std::strerror(errno);
  }
  unlink(tmp_so.c_str());
  // Keep the source under a stable name next to the cache entry so the error can point at it.
  std::string kept = dir + "/" + key + ".cpp";
  if (rename(src.c_str(), kept.c_str()) != 0) kept = src;
  return "C++ kernel compile failed (" + compiler.path + ", exit " + std::to_string(status) +
         "), source kept at " + kept + ":\n" + output;
}

/// dlopen's `so_path` and resolves `names`; the error text when that fails.
std::string resolve(void* handle, const std::string& so_path, const std::vector<std::string>& names,
                    CpuModule& module) {
  module.handle = handle;
  module.path = so_path;
  for (const std::string& name : names) {
    void* symbol = dlsym(handle, name.c_str());
    if (!symbol) return "kernel function '" + name + "' not found in " + so_path;
    module.functions.push_back(reinterpret_cast<CpuKernelFn>(symbol));
  }
  return "";
}

struct LoadedModules {
  std::mutex mutex;
  std::map<std::string, void*> handles;  // shared object path -> dlopen handle
};

LoadedModules& loadedModules() {
  static LoadedModules* const modules = new LoadedModules();  // never destroyed: see CpuModule
  return *modules;
}

}  // namespace

int libmvecLevel() {
#if defined(__GLIBC__) && defined(__x86_64__)
  int major = 0, minor = 0;
  if (std::sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor) != 2) return 0;
  if (major > 2 || (major == 2 && minor >= 35)) return 2;
  return major == 2 && minor >= 22 ? 1 : 0;
#else
  return 0;
#endif
}

bool cpuCompilerAvailable() { return findCompiler() != nullptr; }

std::vector<std::string> cpuCompileCommand() {
  const Compiler* compiler = findCompiler();
  if (compiler == nullptr) return {};
  std::vector<std::string> argv = {compiler->path};
  for (const std::string& flag : compileFlags()) argv.push_back(flag);
  return argv;
}

std::string cpuCompilerVersion() {
  const Compiler* compiler = findCompiler();
  return compiler == nullptr ? std::string() : compiler->version;
}

std::string cacheDirectory() {
  std::string dir = config::cacheDirectory();
  detail::makeDirectories(dir);
  return dir;
}

// Note [CPU module map]
// A process dlopens one shared object once: the map is keyed by the cache entry's path (the
// folder and the key), so a second compileCpp of the same source neither compiles nor reads the
// disk. Each call resolves its own names, so callers may ask for different ones. `disk_hit`
// means this call compiled nothing (the entry was on disk or already loaded). The lock is held
// while compiling, so two threads never build the same entry twice.
CpuCompileResult compileCpp(const std::string& source, const std::vector<std::string>& names) {
  CpuCompileResult result;
  const Compiler* compiler = findCompiler();
  if (!compiler) {
    result.error = "no C++ compiler found ($LAZYFUSE_CXX, $CXX, c++ or g++ on PATH)";
    return result;
  }
  std::string dir = workingDirectory();
  if (dir.empty()) {
    result.error = "no private folder to compile in (cache folder " + cacheDirectory() + ")";
    return result;
  }
  std::string key = cacheKey(source, *compiler);
  std::string so_path = dir + "/" + key + ".so";
  LoadedModules& loaded = loadedModules();
  std::lock_guard<std::mutex> guard(loaded.mutex);
  void* handle = loaded.handles.count(so_path) ? loaded.handles[so_path] : nullptr;
  if (!handle && detail::loadVerified(so_path)) {
    handle = dlopen(so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  result.disk_hit = handle != nullptr;
  if (!handle) {
    result.error = compileInto(source, *compiler, dir, key, so_path);
    if (!result.error.empty()) return result;
    handle = dlopen(so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      result.error = "cannot load " + so_path + ": " + (why ? why : "unknown dlopen error");
      return result;
    }
  }
  loaded.handles[so_path] = handle;
  auto module = std::make_shared<CpuModule>();
  result.error = resolve(handle, so_path, names, *module);
  if (result.error.empty()) result.module = std::move(module);
  return result;
}

namespace {

/// A file descriptor holding `bytes` in memory (memfd), else a private temporary file holding
/// them, unlinked at once; -1 when neither works.
int bytesDescriptor(const std::string& bytes) {
  int fd = memfd_create("lazyfuse-package", MFD_CLOEXEC);
  if (fd < 0) {
    std::string dir = detail::privateTempDirectory();
    std::string path = dir.empty() ? "" : detail::makeTempFile(dir, "lf-package-");
    if (path.empty()) return -1;
    fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    unlink(path.c_str());
    if (fd < 0) return -1;
  }
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return -1;
    }
    done += static_cast<size_t>(n);
  }
  return fd;
}

}  // namespace

CpuCompileResult loadCpuModuleBytes(std::shared_ptr<const std::string> bytes,
                                    const std::vector<std::string>& names) {
  CpuCompileResult result;
  const int fd = bytesDescriptor(*bytes);
  if (fd < 0) {
    result.error =
        "cannot hold a packaged kernel library in memory or a private temporary "
        "file: " +
        std::string(std::strerror(errno));
    return result;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  close(fd);  // the mapping stays
  if (!handle) {
    const char* why = dlerror();
    result.error = "cannot load a packaged kernel library: " + std::string(why ? why : "unknown");
    return result;
  }
  auto module = std::make_shared<CpuModule>();
  result.error = resolve(handle, "a packaged kernel library", names, *module);
  module->path.clear();
  module->bytes = std::move(bytes);
  result.disk_hit = true;
  if (result.error.empty()) result.module = std::move(module);
  return result;
}

std::string cpuModuleBytes(const CpuModule& module) {
  if (module.bytes) return *module.bytes;
  std::string bytes;
  return detail::readOwnedFile(module.path, bytes) ? bytes : std::string();
}

std::string cpuKernelAbi() {
  return cpuIdentity() + "codegen " + std::to_string(kCpuCodegenVersion) + "\nlibmvec " +
         std::to_string(libmvecLevel()) + "\n";
}

}  // namespace lazyfuse
