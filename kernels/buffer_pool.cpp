#include "kernels/buffer_pool.h"

#include "lazy_ir/check.h"
#include "lazy_ir/config.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/Allocator.h>

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace lazyfuse {
namespace {

// Note [Buffer pool]
// A plan's outputs and temporaries are fresh tensors each time it runs. Large ones used to come
// from glibc, which maps allocations of 32 MiB and more afresh each time and gives smaller ones
// back when the heap shrinks: every step then paid a page fault per page of every large output
// and the kernel's zeroing of it, which cost more than the kernel itself for a lone pointwise
// op (a 4M-element float add: 1.14 ms a step against eager's 0.44 ms writing into `out=`).
// Buffers of at least kPooledBufferMin bytes therefore come from this pool: their size is
// rounded up (to 64 KiB, to 2 MiB from 4 MiB), and a freed buffer goes back to a free list of
// its rounded size, where the next step's buffer of that size finds it already mapped. Fresh
// blocks are 2 MiB aligned and marked MADV_HUGEPAGE, so with transparent huge pages in
// `madvise` mode (the common default) a first touch faults 2 MiB at a time (for the
// [64, 128, 1024] W3 block's three 32 MiB outputs, 46 ms of faults became 16 ms); torch's own
// allocator does the same when THP_MEM_ALLOC_ENABLE=1. The advice is a hint: its result is
// ignored.
//
// The pool keeps at most LAZYFUSE_BUFFER_POOL_MB (default 1024) of freed memory; a buffer freed
// beyond that goes back to the system. lazyfuse.empty_cache() frees all of it. The allocator is
// a c10::Allocator, so a pooled tensor behaves like any CPU tensor (resize_ reallocates through
// it; its storage can be shared, pickled, or held past the pool's last use: the pool itself is
// never destroyed). lazyfuse.buffer_pool_stats() counts the reuses (hits) and fresh blocks
// (misses).
constexpr size_t kHugePage = size_t{2} << 20;

size_t roundedSize(size_t bytes) {
  const size_t unit = bytes >= 2 * kHugePage ? kHugePage : size_t{64} << 10;
  return (bytes + unit - 1) / unit * unit;
}

size_t limitFromEnvironment() { return config::bufferPoolLimitBytes(); }

class BufferPool final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const size_t size = roundedSize(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* block = it->second.back();
        it->second.pop_back();
        cached_ -= size;
        ++hits_;
        return wrap(block, size);
      }
      ++misses_;
    }
    void* block = std::aligned_alloc(kHugePage, size);
    LF_CHECK(block != nullptr, "out of memory: a plan buffer of ", nbytes,
             " bytes could not be allocated");
    if (size >= 2 * kHugePage) madvise(block, size, MADV_HUGEPAGE);
    return wrap(block, size);
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  void release() {
    std::vector<void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& [size, list] : free_) blocks.insert(blocks.end(), list.begin(), list.end());
      free_.clear();
      cached_ = 0;
    }
    for (void* block : blocks) std::free(block);
  }

  size_t limit() const { return limit_; }

  BufferPoolStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {cached_, limit_, hits_, misses_};
  }

 private:
  /// The deleter's context: the DataPtr's deleter gets only this, not the data pointer.
  struct Block {
    void* data;
    size_t size;
  };

  static c10::DataPtr wrap(void* block, size_t size) {
    return {block, new Block{block, size}, &BufferPool::giveBack, c10::Device(c10::kCPU)};
  }

  static void giveBack(void* context);

  void keep(void* block, size_t size) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + size <= limit_) {
        free_[size].push_back(block);
        cached_ += size;
        return;
      }
    }
    std::free(block);
  }

  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  size_t hits_ = 0;
  size_t misses_ = 0;
  const size_t limit_ = limitFromEnvironment();
};

BufferPool& pool() {
  static BufferPool* instance = new BufferPool();  // never destroyed: tensors may outlive exit
  return *instance;
}

void BufferPool::giveBack(void* context) {
  const std::unique_ptr<Block> block(static_cast<Block*>(context));
  pool().keep(block->data, block->size);
}

}  // namespace

at::Tensor pooledEmptyStrided(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              c10::ScalarType dtype) {
  const size_t bytes = at::detail::computeStorageNbytes(sizes, strides, c10::elementSize(dtype));
  if (bytes < kPooledBufferMin || pool().limit() == 0) {
    return at::empty_strided(sizes, strides, at::TensorOptions().dtype(dtype));
  }
  return at::detail::empty_strided_generic(sizes, strides, &pool(),
                                           c10::DispatchKeySet(c10::DispatchKey::CPU), dtype);
}

void releaseCachedBuffers() { pool().release(); }

BufferPoolStats bufferPoolStats() { return pool().stats(); }

}  // namespace lazyfuse
