// The memory of the CPU target's large plan buffers, reused step after step. See Note [Buffer
// pool] in kernels/buffer_pool.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

namespace lazyfuse {

/// A CPU tensor of these sizes and strides, uninitialized. Buffers of at least
/// kPooledBufferMin bytes take memory freed by earlier buffers of the same rounded size when
/// there is some (no page fault, no zeroing by the kernel), else fresh memory marked for huge
/// pages; smaller ones come from torch's CPU allocator.
at::Tensor pooledEmptyStrided(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              c10::ScalarType dtype);

/// Frees the cached memory of the pool (lazyfuse.empty_cache()).
void releaseCachedBuffers();

struct BufferPoolStats {
  size_t cached_bytes = 0;  // freed memory the pool keeps for reuse
  size_t limit_bytes = 0;   // the most it keeps (LAZYFUSE_BUFFER_POOL_MB)
  size_t hits = 0;          // buffers that reused freed memory
  size_t misses = 0;        // buffers that took fresh memory
};
BufferPoolStats bufferPoolStats();

constexpr size_t kPooledBufferMin = size_t{1} << 20;

}  // namespace lazyfuse
