#pragma once

// Size-generic results of meta inference: see Note [Size-generic meta] in meta_templates.cpp.

#include "backend/op_traits.h"
#include "backend/shape_functions.h"
#include "lazy_ir/hash.h"
#include "lazy_ir/node.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace lazyfuse {
namespace detail {
class CallRecorder;
}

/// What a call's outputs may depend on, sizes aside: its generic key, and its inputs' sizes.
struct CallShapes {
  HashValue generic = 0;
  std::vector<std::vector<int64_t>> inputs;  // the lazy tensor arguments' sizes, in order
  std::optional<ShapeList> computed;         // the outputs' sizes from the op's shape function
};

/// Whether the outputs of `op` follow from its inputs' sizes by equalities (pointwise ops,
/// reductions, softmax, matrix products) or by its shape function (views, cat, LayerNorm: Note
/// [Shape functions]): the ops whose meta results may be generalized.
bool hasSizeGenericMeta(const c10::OperatorHandle& op, const OpTraits& traits);

/// The call's generic key and input sizes (after CallRecorder::scan, which moved CPU tensors the
/// call may take to lazy), or nullopt when its results are not generalized: the op is not
/// eligible, an input is not contiguous, a size is 0, or the op's shape function declines.
std::optional<CallShapes> callShapes(const OpTraits& traits, const torch::jit::Stack& args);

/// The attrs of a call of these shapes built from a confirmed template, with `key` (the meta-cache
/// key) in its hash; nullptr when there is none or the sizes break one of its equalities.
/// `recorder` gives the call's argument slots.
std::shared_ptr<const AtenCallAttrs> fromMetaTemplate(const CallShapes& shapes, HashValue key,
                                                      const detail::CallRecorder& recorder);

/// Adds what meta inference gave for a call of these shapes to its template.
void observeMeta(const CallShapes& shapes, std::shared_ptr<const AtenCallAttrs> attrs);

}  // namespace lazyfuse
