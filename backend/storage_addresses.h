#pragma once

// Addresses of lazy storages: see Note [Addresses of lazy storages] in storage_addresses.cpp.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace lazyfuse {

/// Gives the storage of the FunctionalTensorWrapper `wrapper` an address of its own when it has
/// none (a null data pointer).
void giveStorageAnAddress(const at::Tensor& wrapper);

/// Registers, for a view op (its first result aliases an input, not written), a lazy-only
/// Functionalize kernel that runs PyTorch's and then puts its results' storage addresses in
/// order. Returns whether `op` is one.
bool registerViewAddressKernel(const c10::OperatorHandle& op, torch::Library& functionalize_lib);

/// Registers the lazy-only kernels of set_ with a storage: a lazy storage has no memory, so only a
/// tensor's own storage is taken (as_strided_), any other refused.
void registerStorageKernels(torch::Library& functionalize_lib);

}  // namespace lazyfuse
