#include "test/targets/cuda_emulation.h"

#include "kernels/cuda_graph.h"
#include "kernels/cuda_runner.h"
#include "kernels/detail/cuda_dialect.h"
#include "lazy_ir/check.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <thread>

namespace lazyfuse {
namespace {

// Note [CUDA emulation]
// The shim below turns CUDA C++ into host C++: __global__/__device__ vanish, threadIdx and
// blockIdx are thread-locals, __shared__ arrays become function statics (blocks run one after
// another, so a static is exactly one block's shared memory), __syncthreads is a barrier of the
// block's threads, and a warp shuffle writes each lane's value to a slot, waits for the warp,
// reads the source lane's slot, and waits again. Each block runs with one OS thread per CUDA
// thread (a pool of threads made once per process, and again in a forked child), so the
// lock-step the kernels rely on is real synchronization here. That lock-step is an invariant of
// the renderer: every lane of a group reaches every shuffle (Note [CUDA kernel structure]); a
// kernel that let part of a warp skip one would deadlock here, and be wrong on a GPU. Grids are
// kept small (kEmulatedMaxBlocks) so the grid-stride loops are exercised. Launches are serialized:
// the shim's state is global.
constexpr int kEmulatedMaxBlocks = 3;
constexpr unsigned kEmulatedBlock = 256;

const char* const kShim = R"LF(// lazyfuse CUDA emulation shim
#include <math.h>
#include <pthread.h>
#include <unistd.h>
#include <string.h>
#define LF_CUDA_EMULATION 1
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __grid_constant__
#define __shared__ static
struct lf_emu_dim3 { unsigned x, y, z; };
static thread_local lf_emu_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0};
static lf_emu_dim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
static pthread_barrier_t lf_emu_block_barrier, lf_emu_warp_barrier[32];
static unsigned long long lf_emu_slot[1024];
static inline void __syncthreads() { pthread_barrier_wait(&lf_emu_block_barrier); }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline unsigned atomicAdd(unsigned* at, unsigned v) {
  return __atomic_fetch_add(at, v, __ATOMIC_SEQ_CST);
}
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned int i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int i; memcpy(&i, &f, 4); return i; }
static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }
// Half conversions in integer arithmetic, as PTX's cvt does them (round to nearest even): g++ 12
// may drop a float -> _Float16 -> float round trip it vectorizes (its C++ excess precision).
static inline float lf_emu_h2f(unsigned short h) {
  const unsigned int sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    return __uint_as_float(__float_as_uint((float)mantissa * 5.9604644775390625e-8f) | sign);
  }
  const unsigned int biased = exponent == 31 ? 0xffu : exponent + 112u;
  return __uint_as_float(sign | (biased << 23) | (mantissa << 13));
}
static inline unsigned short lf_emu_f2h(float f) {
  const unsigned int bits = __float_as_uint(f);
  const unsigned int sign = (bits >> 16) & 0x8000u, magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  if (magnitude >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // 65520 and up: inf
  if (magnitude < 0x38800000u) {  // below 2^-14: a multiple of 2^-24, rounded to nearest even
    return (unsigned short)(sign | (unsigned int)rintf(__uint_as_float(magnitude) * 16777216.0f));
  }
  const unsigned int rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
  return (unsigned short)(sign | ((rounded - 0x38000000u) >> 13));
}
/// Lane `src` of the caller's warp (width-lane segments as CUDA's width argument).
template <class T> static T lf_emu_exchange(T v, int src) {
  const unsigned t = threadIdx.x, warp = t / 32;
  memcpy(&lf_emu_slot[t], &v, sizeof(T));
  pthread_barrier_wait(&lf_emu_warp_barrier[warp]);
  T r = v;
  if (src >= 0 && src < 32) memcpy(&r, &lf_emu_slot[warp * 32 + src], sizeof(T));
  pthread_barrier_wait(&lf_emu_warp_barrier[warp]);
  return r;
}
template <class T> static T __shfl_down_sync(unsigned, T v, int d) {
  const int lane = (int)(threadIdx.x % 32);
  return lf_emu_exchange(v, lane + d < 32 ? lane + d : lane);
}
template <class T> static T __shfl_sync(unsigned, T v, int src, int width) {
  const int lane = (int)(threadIdx.x % 32);
  return lf_emu_exchange(v, lane / width * width + src % width);
}
/// Runs entry(ctx, t) for t < threads on as many threads at once, and returns when all return;
/// given by lazyfuse (one pool per process, see runEmulatedCudaKernel).
typedef void (*lf_emu_runner)(unsigned threads, void (*entry)(void*, unsigned), void* ctx);
static unsigned lf_emu_current_block;
template <class F> static void lf_emu_launch(lf_emu_runner runner, unsigned grid, unsigned block,
                                             F body) {
  gridDim.x = grid;
  blockDim.x = block;
  pthread_barrier_init(&lf_emu_block_barrier, 0, block);
  for (unsigned w = 0; w < block / 32; ++w) pthread_barrier_init(&lf_emu_warp_barrier[w], 0, 32);
  for (unsigned b = 0; b < grid; ++b) {
    lf_emu_current_block = b;
    runner(block, [](void* f, unsigned t) {
      blockIdx.x = lf_emu_current_block;
      threadIdx.x = t;
      (*(F*)f)();
    }, &body);
  }
  pthread_barrier_destroy(&lf_emu_block_barrier);
  for (unsigned w = 0; w < block / 32; ++w) pthread_barrier_destroy(&lf_emu_warp_barrier[w]);
}
)LF";

/// `extern "C" void lf_emu_<name>(unsigned grid, void** args)` calling kernel `name` with the
/// launch arguments unpacked as cuLaunchKernel would.
std::string launcher(const Kernel& kernel, const CudaLaunchShape& shape, const std::string& name,
                     size_t num_arguments) {
  std::string call = name + "(";
  size_t arg = 0;
  for (const KBuffer& buffer : kernel.buffers) {
    std::string type =
        std::string(buffer.output ? "" : "const ") + detail::cudaStorageType(buffer.dtype) + "*";
    call +=
        std::string(arg ? ", " : "") + "(" + type + ")*(void**)args[" + std::to_string(arg) + "]";
    ++arg;
  }
  for (const KParam& param : kernel.params) {
    call += std::string(arg ? ", " : "") + (param.floating ? "*(double*)" : "*(lf_i64*)") +
            "args[" + std::to_string(arg) + "]";
    ++arg;
  }
  if (shape.split > 1) {  // the workspace and the counters of a split reduction
    call += std::string(arg ? ", " : "") + "*(unsigned char**)args[" + std::to_string(arg) +
            "], *(unsigned int**)args[" + std::to_string(arg + 1) + "]";
    arg += 2;
  }
  for (size_t k = 0; k < num_arguments; ++k, ++arg) {  // a shape-generic function's constants
    call += std::string(arg ? ", " : "") + "*(lf_i64*)args[" + std::to_string(arg) + "]";
  }
  return "extern \"C\" void lf_emu_" + name +
         "(lf_emu_runner runner, unsigned grid, void** args) {\n  lf_emu_launch(runner, grid, " +
         std::to_string(shape.block) + ", [args] { " + call + "); });\n}\n";
}

/// `extern "C" void lf_emu_<name>(unsigned grid, void** args)` calling the kernel `name` of a
/// batch with its table, args[0].
std::string batchLauncher(const std::string& name, const std::string& table, int block) {
  return "extern \"C\" void lf_emu_" + name +
         "(lf_emu_runner runner, unsigned grid, void** args) {\n  lf_emu_launch(runner, grid, " +
         std::to_string(block) + ", [args] { " + name + "(*(const lf_tab_" + table +
         "*)args[0]); });\n}\n";
}

/// The threads emulated blocks run on: made once, reused by every launch (launches are
/// serialized), each waiting between a start and an end barrier.
class BlockThreads {
 public:
  explicit BlockThreads(unsigned size) : size_(size) {
    pthread_barrier_init(&start_, nullptr, size + 1);
    pthread_barrier_init(&end_, nullptr, size + 1);
    for (unsigned t = 0; t < size; ++t) {
      std::thread([this, t] { work(t); }).detach();
    }
  }
  /// See lf_emu_runner in the shim.
  static void run(unsigned threads, void (*entry)(void*, unsigned), void* ctx) {
    BlockThreads& pool = instance();
    LF_INTERNAL_ASSERT(threads <= pool.size_, "an emulated block of ", threads, " threads");
    pool.active_ = threads;
    pool.entry_ = entry;
    pool.ctx_ = ctx;
    pthread_barrier_wait(&pool.start_);
    pthread_barrier_wait(&pool.end_);
  }
  static std::mutex& launchMutex() {
    static std::mutex* const mutex = new std::mutex();
    return *mutex;
  }

 private:
  /// The pool of this process: a forked child has the parent's pool object but none of its
  /// threads, so it makes its own (the parent's object is left alone).
  static BlockThreads& instance() {
    static BlockThreads* pool = nullptr;
    static pid_t owner = 0;
    if (!pool || owner != getpid()) {
      pool = new BlockThreads(kEmulatedBlock);  // lives with the process
      owner = getpid();
    }
    return *pool;
  }
  void work(unsigned t) {
    for (;;) {
      pthread_barrier_wait(&start_);
      if (t < active_) entry_(ctx_, t);
      pthread_barrier_wait(&end_);
    }
  }
  const unsigned size_;
  pthread_barrier_t start_, end_;
  unsigned active_ = 0;
  void (*entry_)(void*, unsigned) = nullptr;
  void* ctx_ = nullptr;
};

}  // namespace

std::shared_ptr<const CudaEmulatedModule> compileCudaEmulation(
    const std::vector<const Kernel*>& kernels, const CudaSource& rendered, std::string& error,
    bool& disk_hit) {
  std::string source = std::string(kShim) + rendered.source + "\n";
  std::vector<std::string> names;
  // Kernels that run one function share its launcher.
  auto add = [&](const std::string& text, const std::string& name) {
    const std::string entry = "lf_emu_" + name;
    if (std::find(names.begin(), names.end(), entry) != names.end()) return;
    source += text;
    names.push_back(entry);
  };
  for (size_t i = 0; i < kernels.size(); ++i) {
    const CudaLaunchShape& shape = rendered.kernels[i];
    if (!kernels[i]) continue;
    add(launcher(*kernels[i], shape, shape.name, shape.arguments.size()), shape.name);
    if (shape.vector_name.empty()) continue;
    add(launcher(*kernels[i], shape, shape.vector_name, shape.vector_arguments.size()),
        shape.vector_name);
  }
  for (const CudaBatchShape& shape : rendered.batches) {
    add(batchLauncher(shape.name, shape.name, shape.block), shape.name);
    if (shape.vector_name.empty()) continue;
    add(batchLauncher(shape.vector_name, shape.name, shape.block), shape.vector_name);
  }
  CpuCompileResult compiled = compileCpp(source, names);
  disk_hit = compiled.disk_hit;
  if (!compiled.module) {
    error = compiled.error;
    return nullptr;
  }
  auto module = std::make_shared<CudaEmulatedModule>();
  module->module = compiled.module;
  auto take = [&](const std::string& name) -> CudaEmulatedFn {
    if (name.empty()) return nullptr;
    const size_t at = static_cast<size_t>(std::find(names.begin(), names.end(), "lf_emu_" + name) -
                                          names.begin());
    // The compiled function has the emulated kernel's signature, not CpuKernelFn's; the cast
    // goes through void(*)() as function pointer casts between unrelated types must.
    using Untyped = void (*)();
    return reinterpret_cast<CudaEmulatedFn>(
        reinterpret_cast<Untyped>(compiled.module->functions.at(at)));
  };
  for (size_t i = 0; i < kernels.size(); ++i) {
    const CudaLaunchShape& shape = rendered.kernels[i];
    CudaEmulatedKernel k;
    k.shape = shape;
    if (kernels[i]) {
      k.function = take(shape.name);
      k.vector_function = take(shape.vector_name);
    }
    module->kernels.push_back(k);
  }
  for (const CudaBatchShape& shape : rendered.batches) {
    CudaEmulatedBatch g;
    g.shape = shape;
    g.function = take(shape.name);
    g.vector_function = take(shape.vector_name);
    module->batches.push_back(g);
  }
  return module;
}

void runEmulatedCudaKernel(const FusedKernel& fused, const CudaEmulatedModule& module, size_t index,
                           const Graph& graph, PlanValues& values) {
  const CudaEmulatedKernel& k = module.kernels.at(index);
  PlanCapture* capture = currentCapture();
  CudaLaunchArgs local;
  CapturedLaunch* record = capture ? &capture->addLaunch() : nullptr;
  CudaLaunchArgs& launch = record ? record->args : local;
  prepareCudaLaunch(fused, k.shape, k.vector_function != nullptr, graph, values,
                    c10::Device(c10::DeviceType::CPU), launch);
  if (launch.points == 0) return;
  LF_INTERNAL_ASSERT(k.shape.block <= static_cast<int>(kEmulatedBlock), "blocks of ", k.shape.block,
                     " threads");
  CudaEmulatedFn function = launch.vector ? k.vector_function : k.function;
  const unsigned grid = cudaGridFor(launch, k.shape, kEmulatedMaxBlocks);
  {
    std::lock_guard<std::mutex> guard(BlockThreads::launchMutex());
    function(&BlockThreads::run, grid, launch.args.data());
  }
  if (!record) return;
  record->kernel = static_cast<int32_t>(index);
  record->function = reinterpret_cast<void*>(function);
  record->grid = grid;
  record->block = static_cast<unsigned>(k.shape.block);
  capture->addStep([record] {
    // A GPU replays the zeroing of a split reduction's counters as a captured memset.
    if (record->args.counters.defined()) record->args.counters.zero_();
    std::lock_guard<std::mutex> guard(BlockThreads::launchMutex());
    reinterpret_cast<CudaEmulatedFn>(record->function)(&BlockThreads::run, record->grid,
                                                       record->args.args.data());
  });
}

size_t runEmulatedCudaBatch(const ExecutionPlan& plan, size_t batch,
                            const CudaEmulatedModule& module, const Graph& graph,
                            PlanValues& values) {
  const CudaEmulatedBatch& g = module.batches.at(batch);
  std::vector<CudaBatchLaunch> launches = prepareCudaBatchLaunches(
      plan, plan.batches.at(batch), g.shape, graph, values, c10::Device(c10::DeviceType::CPU));
  LF_INTERNAL_ASSERT(g.shape.block <= static_cast<int>(kEmulatedBlock), "blocks of ", g.shape.block,
                     " threads");
  PlanCapture* capture = currentCapture();
  size_t first = 0;
  for (CudaBatchLaunch& launch : launches) {
    CudaEmulatedFn function = launch.vector ? g.vector_function : g.function;
    {
      std::lock_guard<std::mutex> guard(BlockThreads::launchMutex());
      void* table = launch.table.data();
      function(&BlockThreads::run, static_cast<unsigned>(launch.blocks), &table);
    }
    const size_t count = static_cast<size_t>(launch.table[0]);
    if (capture) {
      CapturedLaunch* r = &recordBatchLaunch(*capture, static_cast<int32_t>(batch), first, g.shape,
                                             reinterpret_cast<void*>(function), std::move(launch));
      capture->addStep([r] {
        std::lock_guard<std::mutex> guard(BlockThreads::launchMutex());
        void* table = r->table.data();
        reinterpret_cast<CudaEmulatedFn>(r->function)(&BlockThreads::run, r->grid, &table);
      });
    }
    first += count;
  }
  return launches.size();
}

}  // namespace lazyfuse
