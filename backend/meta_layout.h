#pragma once

// Where eager lays out an op's results otherwise than its meta kernel does, and the correction
// the recorder applies to Meta's results. See Note [Meta layout corrections].

#include "backend/op_traits.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>

#include <optional>
#include <vector>

namespace lazyfuse {

/// The correction `op`'s Meta results need to be laid out as eager's, kAsMeta for most ops.
MetaLayout metaLayoutOf(const c10::OperatorHandle& op);

/// The index of `alpha` in a call of add.Tensor or sub.Tensor (`layout` kAlpha) whose alpha is not
/// the integer 1: on Meta such a call lays its result out otherwise than eager does.
std::optional<size_t> layoutChangingAlpha(MetaLayout layout, const torch::jit::Stack& args);

/// Lays out `results`, the Meta results of a call with the Meta arguments `meta_args` of an op
/// whose correction is `layout`, as eager's kernels lay them out (sizes and dtypes unchanged). A
/// call TensorIterator refuses keeps Meta's layout. kAlpha and kConvolution are not applied here.
void correctMetaLayout(MetaLayout layout, const torch::jit::Stack& meta_args,
                       std::vector<at::Tensor>& results);

}  // namespace lazyfuse
