#include "backend/write_aliasing.h"

#include "backend/detail/stand_ins.h"
#include "backend/device.h"
#include "backend/lazy_tensor.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/List.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string_view>
#include <utility>
#include <vector>

namespace lazyfuse {
namespace {

// Note [Overlapping writes]
// Eager refuses some writes into memory the call also reads or writes elsewhere, with a
// RuntimeError starting "unsupported operation": a written tensor with a zero stride over more
// than one element (at::has_internal_overlap), or one that overlaps an input
// (at::assert_no_partial_overlap, at::assert_no_overlap). Which ops check, and which overlaps
// they allow, is eager's choice op by op: every TensorIterator op refuses a partial overlap of an
// output and an input but allows the same tensor (`x[1:].add_(x[:-1])` raises, `x.add_(x)` does
// not); cat, index_select, take, masked_select and kthvalue refuse even a full overlap; gather a
// full one with its input and a partial one with its index; bernoulli's out= only its own
// internal overlap; reductions and mm check nothing. The checks that run on Meta and on CPU
// stand-ins (Note [In-place result casts]) never see it: each stand-in has memory of its own,
// and most meta kernels of out= ops (Python references) make no overlap check at all.
// So the memory a lazy call touches is modelled as eager's: tensors share memory when their
// FunctionalTensorWrappers share a storage (views of one base, as functionalization tracks
// them), at the byte range their reported sizes, strides and storage offset give
// (Note [View geometry]). Only when a written tensor may overlap another tensor of the call, or
// itself (writeAliasingOf; most calls stop after comparing storages), the call runs once on the
// CPU on stand-ins that share memory exactly as the lazy tensors do (one zeroed buffer per
// storage, each tensor a strided view into it), and eager's own kernel makes its own checks.
// Its stand-in values are made up (zeros: in range as an index), so of what it raises only the
// overlap errors are eager's for sure; any other error is left to the other checks. A random op
// draws from a generator of its own. A call that passes is remembered under its metadata and
// aliasing. Calls whose stand-ins would exceed kMaxProbeBytes are not checked (as with Note
// [Eager's errors]). Pinned by test_out_checks.py::test_overlap_*.
constexpr int64_t kMaxProbeBytes = int64_t{1} << 25;

/// Where one tensor argument (or list element) of a call lies in its storage, in bytes.
struct Extent {
  const c10::StorageImpl* storage = nullptr;
  const c10::TensorImpl* impl = nullptr;
  int64_t begin = 0;
  int64_t end = 0;
  size_t arg = 0;
  int64_t element = -1;  // index in a list argument; -1 for a tensor argument
  bool written = false;
};

/// A call's extents: a few, except for foreach calls.
using Extents = c10::SmallVector<Extent, 8>;

/// Calls `fn(tensor, element)` on each tensor of `v`, with its index in a list or -1.
template <typename Fn>
void forEachElement(const c10::IValue& v, Fn fn) {
  if (v.isTensor()) return fn(v.toTensor(), int64_t{-1});
  if (!v.isList()) return;
  int64_t element = 0;
  for (const c10::IValue& e : v.toListRef()) {
    if (e.isTensor()) fn(e.toTensor(), element);
    ++element;
  }
}

/// at::has_internal_overlap(t) == MemOverlap::Yes.
bool overlapsItself(const at::Tensor& t) {
  if (t.numel() == 0) return false;  // no element is written twice
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1 && t.stride(d) == 0) return true;
  }
  return false;
}

/// The extents of the call's functional lazy tensors (an empty one's is empty); sets `any` when a
/// written one overlaps itself. An out= tensor's reaches to the end of its storage: the op may
/// resize it before it checks (gather(x, 0, i[1:], out=i[:1]) overlaps once out has 2 elements).
Extents extentsOf(const c10::OperatorHandle& op, const OpTraits& traits,
                  const torch::jit::Stack& args, WriteAliasing& aliasing) {
  Extents extents;
  const std::vector<c10::Argument>& schema_args = op.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const bool out = schema_args[i].is_out();
    forEachElement(args[i], [&](const at::Tensor& t, int64_t element) {
      if (!hasFunctionalStorage(t)) return;
      const bool written = traits.written[i] != 0;
      if (written && overlapsItself(t)) aliasing.any = aliasing.overlaps_itself = true;
      const int64_t item = static_cast<int64_t>(t.element_size());
      const int64_t begin = storageOffsetOf(t) * item;
      int64_t end = endElement(t) * item;
      if (written && out) end = std::numeric_limits<int64_t>::max();
      extents.push_back({storageOf(t), t.unsafeGetTensorImpl(), begin, end, i, element, written});
    });
  }
  return extents;
}

void notePair(const Extent& a, const Extent& b, WriteAliasing& aliasing) {
  if (!a.written && !b.written) return;
  aliasing.any = true;
  const bool same_element = a.element >= 0 && a.element == b.element;
  if (!same_element) aliasing.across_elements = true;
}

/// Compares the extents of one storage, sorted by begin and tensor: each with those that start
/// before it ends (few, unless much overlaps), and with the same tensor in another slot, which
/// eager finds the same even when it is empty (an out= it resizes first: cat((x, y), out=x)).
void sweepStorage(const Extent* first, const Extent* last, WriteAliasing& aliasing) {
  c10::SmallVector<const Extent*, 8> open;
  for (auto it = first; it != last; ++it) {
    const Extent& e = *it;
    if (it != first && std::prev(it)->impl == e.impl) notePair(*std::prev(it), e, aliasing);
    open.erase(std::remove_if(open.begin(), open.end(),
                              [&](const Extent* o) { return o->end <= e.begin; }),
               open.end());
    for (const Extent* o : open) notePair(*o, e, aliasing);
    open.push_back(&e);
  }
}

// ---- the check on CPU stand-ins that share memory as the lazy tensors do --------------------

/// Calls which passed the check, by key and aliasing.
CheckedCalls& checkedOverlaps() {
  static CheckedCalls* instance = new CheckedCalls();
  return *instance;
}

/// One zeroed CPU buffer per storage of the call's functional lazy tensors, in order of first
/// use, and the stand-ins that view them.
class SharedStandIns {
 public:
  /// Sizes the buffers; false when they (and the other stand-ins) would exceed kMaxProbeBytes.
  bool plan(const torch::jit::Stack& args) {
    int64_t other_bytes = 0;
    for (const c10::IValue& v : args) {
      forEachElement(v, [&](const at::Tensor& t, int64_t) {
        if (!t.defined() || !isLazy(t)) return;
        if (!hasFunctionalStorage(t)) {
          other_bytes += t.numel() * static_cast<int64_t>(t.element_size());
          return;
        }
        const int64_t end = t.numel() == 0 ? 0 : endElement(t) * t.element_size();
        Buffer& buffer = bufferOf(storageOf(t));
        buffer.bytes = std::max(buffer.bytes, end);
      });
    }
    int64_t bytes = other_bytes;
    for (const Buffer& b : buffers_) bytes += b.bytes;
    return bytes <= kMaxProbeBytes;
  }

  /// The key of the call's aliasing: which tensor is in each slot (by first slot), which storage
  /// it uses, and where in it.
  HashValue aliasingKey(HashValue h, const torch::jit::Stack& args) {
    std::vector<const c10::TensorImpl*> seen;
    for (const c10::IValue& v : args) {
      forEachElement(v, [&](const at::Tensor& t, int64_t) {
        if (!hasFunctionalStorage(t)) return;
        const auto it = std::find(seen.begin(), seen.end(), t.unsafeGetTensorImpl());
        h = hashCombine(h, static_cast<HashValue>(it - seen.begin()));
        if (it == seen.end()) seen.push_back(t.unsafeGetTensorImpl());
        h = hashCombine(h, static_cast<HashValue>(&bufferOf(storageOf(t)) - buffers_.data()));
        h = hashCombine(h, static_cast<HashValue>(storageOffsetOf(t)));
      });
    }
    return h;
  }

  c10::IValue standIn(const c10::IValue& v) {
    return standInArg(v, c10::kCPU, [&](const at::Tensor& t) { return standIn(t); });
  }

 private:
  struct Buffer {
    const c10::StorageImpl* storage = nullptr;
    int64_t bytes = 0;
    at::Tensor memory;  // bytes, made on first use
  };

  Buffer& bufferOf(const c10::StorageImpl* storage) {
    for (Buffer& b : buffers_) {
      if (b.storage == storage) return b;
    }
    buffers_.push_back({storage, 0, at::Tensor()});
    return buffers_.back();
  }

  /// One stand-in per lazy tensor: eager tells the same tensor in two slots (is_same) from two
  /// views of the same memory.
  at::Tensor standIn(const at::Tensor& t) {
    if (!t.defined() || !isLazy(t)) return t;
    for (const auto& [impl, stand_in] : stand_ins_) {
      if (impl == t.unsafeGetTensorImpl()) return stand_in;
    }
    stand_ins_.emplace_back(t.unsafeGetTensorImpl(), makeStandIn(t));
    return stand_ins_.back().second;
  }

  at::Tensor makeStandIn(const at::Tensor& t) {
    const auto options = at::TensorOptions().dtype(t.scalar_type());
    if (!hasFunctionalStorage(t)) return at::zeros(t.sizes(), options);
    Buffer& buffer = bufferOf(storageOf(t));
    if (!buffer.memory.defined()) buffer.memory = at::zeros({buffer.bytes}, at::kByte);
    return at::empty({0}, options)
        .set_(buffer.memory.storage(), storageOffsetOf(t), t.sizes(), t.strides());
  }

  // Few: vectors keep the order of first use.
  std::vector<Buffer> buffers_;
  std::vector<std::pair<const c10::TensorImpl*, at::Tensor>> stand_ins_;
};

bool isOverlapError(const c10::Error& e) {
  return std::string_view(e.msg()).rfind("unsupported operation", 0) == 0;
}

/// Runs the call once on CPU stand-ins that share memory as its lazy tensors do, so that eager's
/// kernel raises its overlap errors. See Note [Overlapping writes].
void runEagerOverlapChecks(const c10::OperatorHandle& op, const OpTraits& traits,
                           const torch::jit::Stack& args, HashValue key) {
  SharedStandIns stand_ins;
  if (!stand_ins.plan(args)) return;
  key = stand_ins.aliasingKey(key, args);
  if (checkedOverlaps().passed(key)) return;
  torch::jit::Stack cpu;
  for (const c10::IValue& v : args) cpu.push_back(stand_ins.standIn(v));
  if (!givePrivateGenerators(op, traits, cpu)) return;
  DropWarnings drop;
  c10::WarningUtils::WarningHandlerGuard quiet(&drop);
  try {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    op.callBoxed(cpu);
  } catch (const c10::Error& e) {
    if (isOverlapError(e)) throw;  // any other error may come from the made-up values
  }
  checkedOverlaps().notePassed(key);
}

}  // namespace

bool hasFunctionalStorage(const at::Tensor& t) {
  return t.defined() && isLazy(t) && at::functionalization::impl::isFunctionalTensor(t) &&
         t.unsafeGetTensorImpl()->has_storage();
}

const c10::StorageImpl* storageOf(const at::Tensor& t) {
  return t.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
}

int64_t endElement(const at::Tensor& t) {
  int64_t last = storageOffsetOf(t);
  if (t.numel() == 0) return last;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return last + 1;
}

WriteAliasing writeAliasingOf(const c10::OperatorHandle& op, const OpTraits& traits,
                              const torch::jit::Stack& args) {
  WriteAliasing aliasing;
  Extents extents = extentsOf(op, traits, args, aliasing);
  if (extents.size() < 2) return aliasing;
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    if (a.storage != b.storage) return std::less<>()(a.storage, b.storage);
    if (a.begin != b.begin) return a.begin < b.begin;
    return std::less<>()(a.impl, b.impl);
  });
  for (auto first = extents.begin(); first != extents.end();) {
    auto last = std::find_if(first, extents.end(),
                             [&](const Extent& e) { return e.storage != first->storage; });
    if (last - first > 1) sweepStorage(first, last, aliasing);
    first = last;
  }
  return aliasing;
}

// Note [Writes into expanded tensors]
// Eager lets a few in-place ops (fill_, zero_, masked_fill_, with a deprecation warning for the
// last) write into a tensor whose elements share memory, `x.expand(2, 3).zero_()`: each element
// of x is written twice, with the same value. Functionalization cannot express that (expand's
// inverse sums over the expanded dimensions), so such a write runs on memory once eager's own
// overlap checks have passed (Note [Writes into views that overlap themselves]). Only a write
// into a tensor list that overlaps itself, which that path does not take, raises an error of
// ours instead of wrong numbers (in writeKernel, after these checks). Pinned by
// test_write_errors.py::test_write_into_expanded_*.
void checkOverlapsLikeEager(const c10::OperatorHandle& op, const OpTraits& traits,
                            const torch::jit::Stack& args, const WriteAliasing& aliasing,
                            HashValue key) {
  if (aliasing.any) runEagerOverlapChecks(op, traits, args, key);
}

}  // namespace lazyfuse
