#pragma once

// lazyfuse's own functionalization of the common view ops on lazy tensors: see Note [Lazy view
// kernels] in view_kernels.cpp.

#include <ATen/FunctionalStorageImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>

namespace lazyfuse {

struct LazyViewOp;

/// An int or SymInt argument's value, or nothing when it is symbolic or of another type.
std::optional<int64_t> intOf(const c10::IValue& v);

/// The view op's entry in lazyfuse's table of view kernels, or null when PyTorch's
/// functionalization kernel serves it.
const LazyViewOp* lazyViewOpFor(const c10::OperatorHandle& op);

/// Functionalizes the call on the stack (a view of a lazy tensor, `num_args` arguments) as
/// PyTorch's kernel would, without its reference output on Meta. False, with the stack untouched,
/// for a call it leaves to PyTorch's kernel (not a functional tensor, views reapplied, symbolic
/// sizes, sizes eager's `view` refuses).
bool takeLazyView(const LazyViewOp& view, size_t num_args, torch::jit::Stack* stack);

/// as_strided or as_strided_ (`in_place`; 4 arguments on the stack) of a lazy functional tensor
/// that is a view, or whose value is not laid out as its storage, taken from its storage's base as
/// eager takes it from the storage (Note [as_strided of a view], in storage_views.cpp). False, with
/// the stack untouched, for the calls PyTorch's kernel serves right.
bool takeAsStridedOfView(torch::jit::Stack* stack, bool in_place);

/// as_strided_scatter of such a tensor on its storage, as eager does (Note [as_strided_scatter of
/// a view], in storage_views.cpp): on Functionalize, for lazy calls.
void registerAsStridedScatterKernel(torch::Library& functionalize_lib);

/// Whether `meta` is the ViewMeta of a view made by takeAsStridedOfView (whose writes run on
/// memory).
bool isStorageAsStridedViewMeta(const at::functionalization::ViewMeta& meta);

/// Whether `meta` is the ViewMeta of an expand made by takeLazyView (whose inverse sums).
bool isLazyExpandViewMeta(const at::functionalization::ViewMeta& meta);

}  // namespace lazyfuse
