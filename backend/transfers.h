#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

namespace lazyfuse {

/// Lazy kernel of _to_copy: to a non-lazy device it syncs and copies out, otherwise it records.
void toCopyKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);
/// Lazy kernel of copy and copy_: uploads a non-lazy source, copies out into a non-lazy target.
void copyKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);
/// Lazy kernel of lift_fresh: wraps a raw lazy tensor. See Note [Lifting constructed tensors].
at::Tensor liftFresh(const at::Tensor& self);
/// Functionalize kernel of copy_. See Note [Functionalizing copy_ across devices].
at::Tensor& functionalizeCopy(at::Tensor& self, const at::Tensor& src, bool non_blocking);

/// A lazy tensor over `tensor`'s memory when it lives on the hardware device (no copy), else a
/// copy of it on the lazy device. See Note [Sharing memory with the hardware device].
at::Tensor shareIntoLazy(const at::Tensor& tensor);
/// The value of lazy `tensor` as a tensor on the hardware device, sharing the memory of its
/// buffer where the buffer has the geometry `tensor` reports (no copy), else a copy. Syncs.
/// See Note [Sharing memory with the hardware device].
at::Tensor shareOutOfLazy(const at::Tensor& tensor);

/// Registers the kernels of Note [Tensors made like a lazy tensor on another device] on
/// `functionalize_lib` (aten, Functionalize).
void registerLikeOnDeviceKernels(torch::Library& functionalize_lib);

}  // namespace lazyfuse
