#pragma once

// Where the tensors an in-place or out= call writes share memory with the call's other tensors,
// and eager's checks of that. See Note [Overlapping writes].

#include "backend/op_traits.h"
#include "lazy_ir/hash.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace lazyfuse {

/// How the lazy tensors a call writes may share memory with its other tensors.
struct WriteAliasing {
  /// A written tensor may overlap a tensor in another argument slot, or itself (a zero stride).
  bool any = false;
  /// A written element of a tensor list may overlap a tensor of another element (another index
  /// of a list, or a tensor argument that is not in a list): a foreach op's order matters.
  bool across_elements = false;
  /// A written tensor overlaps itself: a zero stride over more than one element (an expand).
  bool overlaps_itself = false;
};

/// Whether `t` is a lazy tensor under a FunctionalTensorWrapper with a storage: its storage is
/// the one every alias of it shares (Note [Overlapping writes]).
bool hasFunctionalStorage(const at::Tensor& t);
const c10::StorageImpl* storageOf(const at::Tensor& t);
/// One past the last element `t` reaches, in elements from the start of its storage (its
/// storage offset when it has no element).
int64_t endElement(const at::Tensor& t);

/// Finds the shared memory of a call's functional lazy tensors from their storages, sizes,
/// strides and storage offsets, as eager's byte ranges would. Cheap when nothing is shared.
WriteAliasing writeAliasingOf(const c10::OperatorHandle& op, const OpTraits& traits,
                              const torch::jit::Stack& args);

/// For a call whose written tensors may overlap (`aliasing.any`), raises eager's "unsupported
/// operation" error when eager refuses the overlap (Note [Writes into expanded tensors]). `key`
/// is the call's metadata without its aliasing; a call that passes eager's checks is remembered
/// under it and its aliasing, and not run on stand-ins again.
void checkOverlapsLikeEager(const c10::OperatorHandle& op, const OpTraits& traits,
                            const torch::jit::Stack& args, const WriteAliasing& aliasing,
                            HashValue key);

}  // namespace lazyfuse
