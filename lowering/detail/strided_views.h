#pragma once

#include "lowering/kernel_emitter.h"

#include <optional>

namespace lazyfuse {

/// Graph value `value`, whose loop node is `id`, as a strided view of another graph value's
/// buffer, when it is one: a chain of views and renames (t, permute, detach, ...) that reads,
/// at every index, one root value at an affine index with non-negative strides. A root the
/// kernels would not otherwise write qualifies only if writing it costs no more than writing the
/// view. The strides assume the root laid out as its meta says, as every plan value is. See
/// Note [Strided views of buffers].
std::optional<StridedView> stridedViewOf(const Graph& graph, const Partition& partition, LoopId id,
                                         NodeRef value);

}  // namespace lazyfuse
