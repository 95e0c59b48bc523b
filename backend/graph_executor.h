#pragma once

// Sync: cut the trace at the requested values, hash the graph, find or build its plan, run it,
// and turn the requested values into buffers on the hardware device.

#include "backend/lazy_tensor.h"
#include "lazy_ir/graph.h"

#include <c10/util/ArrayRef.h>

#include <string>

namespace lazyfuse {

/// Materializes every pending entry of `data` with one graph execution. First takes the results
/// of an asynchronous step in flight, and raises its error if it failed (Note [Asynchronous
/// steps]).
void syncData(c10::ArrayRef<c10::intrusive_ptr<LazyData>> data);
/// Syncs every live lazy tensor and starts a new trace; with LAZYFUSE_ASYNC, may return while the
/// step runs on the worker thread (Note [Asynchronous steps]).
void syncLiveTensors();
/// Waits for work queued on the hardware device, and for an asynchronous step in flight (raising
/// its error if it failed).
void waitDevice();
/// The buffer of a lazy tensor (raw or wrapped), syncing it first if it is pending.
at::Tensor materialize(const at::Tensor& tensor);

/// The graph the given lazy tensors would sync, printed as text or dot, or the plan lowering
/// makes of it ("plan": its fused kernels and extern calls); nothing runs or compiles.
std::string dumpGraph(c10::ArrayRef<at::Tensor> tensors, const std::string& format);
size_t graphCacheSize();
void clearGraphCache();

}  // namespace lazyfuse
