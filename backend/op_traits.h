#pragma once

// What the recorder needs to know about an operator, computed once per operator from its schema.

#include "backend/shape_functions.h"
#include "lazy_ir/hash.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lazyfuse {

/// How an op's outputs on the hardware device differ from what its meta kernel promises.
/// See Note [Aux outputs on the CPU].
enum class AuxOutputs : uint8_t {
  kSameAsMeta,
  kNormStats,       // on the CPU, the recorder corrects the statistics it returns
  kMaskedGrads,     // the recorder drops the gradients output_mask leaves out (CPU and CUDA)
  kEagerOnCpu,      // on the CPU, the op runs eagerly
  kCpuOnlyBuffer,   // off the CPU, the recorder empties the buffer only the CPU kernel fills
  kScalarLossOf1d,  // the recorder makes the unreduced loss of a 1-D input 0-dim, as eager's
};

/// How eager lays out an op's results where its meta kernel lays them out otherwise. See Note
/// [Meta layout corrections] in backend/meta_layout.cpp.
enum class MetaLayout : uint8_t {
  kAsMeta,
  kIterator,     // heaviside, logaddexp(2), logical_and/or/xor: TensorIterator's layout
  kContiguous,   // pow.Scalar: contiguous
  kLdexp,        // ldexp.Tensor: TensorIterator's layout over x and a contiguous y
  kAlpha,        // add.Tensor, sub.Tensor: Meta's layout with alpha 1
  kConvolution,  // convolution(_backward): the layout of the backend eager picks, reported only
};

struct OpTraits {
  std::string name;          // "aten::add.Tensor"
  std::string counter_name;  // "aten::add", the eager-fallback counter
  HashValue name_hash = 0;
  std::vector<uint32_t> position_args;  // positionArgsOf(name)
  /// Runs eagerly on the hardware device: data-dependent output shapes, non-tensor results, or
  /// no meta kernel. See Note [Data-dependent ops]. Atomic: markEager sets it while other threads
  /// record the op (every other field is fixed once computed).
  std::atomic<bool> eager{false};
  /// The meta kernel refuses a 0-dim CPU tensor next to Meta tensors (masked_fill's checks the
  /// value's device), so Meta inference gets a Meta copy of such a parameter.
  bool meta_scalars_on_meta = false;
  /// Scalars decide the output shape (arange, range): they are hashed constants, not params.
  bool scalars_are_constants = false;
  AuxOutputs aux_outputs = AuxOutputs::kSameAsMeta;
  MetaLayout meta_layout = MetaLayout::kAsMeta;
  /// Per schema argument: the op writes it (in-place and out= arguments).
  std::vector<uint8_t> written;
  /// For an in-place or out= op, the counter_name of the functional op that functionalization
  /// records in its place ("aten::mul" for mul_ and mul.out); empty for any other op.
  /// See Note [In-place result casts].
  std::string functional_name;
  /// For the out= variants of sum, prod, nansum, cumsum and cumprod, which eager computes in the
  /// out tensor's dtype when given none: the index of their dtype argument; -1 for any other op.
  int out_dtype_arg = -1;
  /// For a *_copy op that functionalization records in place of a view op (transpose_copy for
  /// transpose): that view op. See Note [View geometry].
  std::optional<c10::OperatorHandle> view_op;
  /// A *_scatter op (slice_scatter, ...): its result is its first argument with a part written.
  bool scatters_into_self = false;
  /// The device kernel's checks of this op do not depend on sizes, so a run on one-element
  /// stand-ins finds the errors the meta kernel misses. See Note [Eager's errors].
  bool probes_stand_ins = false;
  /// Its outputs' sizes follow from its inputs' by equalities, or by its shape function: Note
  /// [Size-generic meta].
  bool generic_meta = false;
  /// Its outputs' sizes from its arguments (Note [Shape functions]), or nullptr.
  ShapeFunction shape_function = nullptr;
  /// Per schema argument: the schema type is SymInt, SymInt? or SymInt[] (a size argument).
  std::vector<uint8_t> size_arg;
  /// Per schema return: the index of the written argument it returns, or -1.
  std::vector<int> returns_arg;
  /// Per schema argument: the schema type is Scalar / Scalar? (a parameter).
  std::vector<uint8_t> scalar_arg;
  /// Per schema argument: the schema type is Generator?.
  std::vector<uint8_t> generator_arg;
};

const OpTraits& traitsOf(const c10::OperatorHandle& op);
/// The name torch::Library::impl takes for an aten op: "add.Tensor" for aten::add.Tensor.
std::string implName(const c10::OperatorName& name);
/// True when the op writes one of its arguments (an in-place or out= op).
bool writesAnArgument(const OpTraits& traits);
/// Marks an operator as run eagerly from now on (its meta kernel turned out to be missing).
void markEager(const c10::OperatorHandle& op);

}  // namespace lazyfuse
