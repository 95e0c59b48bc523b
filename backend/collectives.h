#pragma once

// torch.distributed collectives on lazy tensors: see Note [Collectives on lazy tensors] in
// backend/collectives.cpp.

#include "lazy_ir/graph.h"

namespace lazyfuse {

/// Whether `graph` runs a recorded collective: such a graph runs in the program's thread, once
/// per sync (never as an asynchronous step or a CUDA graph replay).
bool hasCollectives(const Graph& graph);

/// Kernels of FSDP2's copy ops (fsdp::all_gather_copy_in & co.) for lazy tensors: Note [FSDP2's
/// copy ops on lazy tensors] in backend/fsdp_ops.cpp.
void registerFsdpKernels();

}  // namespace lazyfuse
