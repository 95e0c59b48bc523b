#pragma once

// Note [Loop graph]
// Lowering turns each ATen node of a Graph into nodes of a LoopGraph: tensors defined by what
// their value is at an index (define-by-run closures over a LoopContext), which the
// partitioner then groups into kernels. A loop node is
//   kBuffer   a tensor that exists in memory: a graph input or an output of an ATen call
//   kCompute  value(index) computed from other loop nodes at some indices (pointwise ops, and
//             views, which only remap the index; broadcasting is index math)
//   kReduce   value(index) folds its input over reduced dimensions; always written to memory
// Views and scatters are index functions inside the kernels that use them, never copies.

#include "lazy_ir/graph.h"
#include "lazy_ir/hash.h"
#include "lowering/kernel_builder.h"

#include <functional>
#include <unordered_map>
#include <vector>

namespace lazyfuse {

using LoopId = int32_t;
class LoopContext;
using ComputeFn = std::function<KValue(LoopContext&, const std::vector<IxPtr>& index)>;

struct LoopNode {
  enum Kind : uint8_t { kBuffer, kCompute, kReduce };
  Kind kind = kBuffer;
  bool is_view = false;  // kCompute that only remaps its input's index (free to recompute)
  bool remaps = false;   // reads an input at another index than its own (views, scatters)
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> sizes;
  std::vector<LoopId> inputs;
  ComputeFn compute;      // kCompute, kReduce
  NodeRef source;         // kBuffer: the graph value it holds
  int32_t position = -1;  // the graph node it was lowered from
};

/// What a kernel body can ask while it is being built.
class LoopContext {
 public:
  virtual ~LoopContext() = default;
  virtual KernelBuilder& ops() = 0;
  /// The value of loop node `id` at `index` (inlined, or loaded when it is in memory).
  virtual KValue at(LoopId id, const std::vector<IxPtr>& index) = 0;
  /// Parameter `k` of graph node `position` (a Scalar or a CPU scalar tensor) as `dtype`; entry
  /// `element` of it when it is a Scalar[].
  virtual KValue param(int32_t position, int32_t k, c10::ScalarType dtype,
                       int32_t element = -1) = 0;
};

/// A loop node's value at an index inside one reduction scope: what kernel bodies memoize.
struct LoopValueKey {
  LoopId id = -1;
  int32_t scope = -1;
  std::vector<IxPtr> index;
  bool operator==(const LoopValueKey& other) const {
    return id == other.id && scope == other.scope && ixSame(index, other.index);
  }
};

struct LoopValueKeyHash {
  size_t operator()(const LoopValueKey& key) const {
    return static_cast<size_t>(
        hashCombine(hashCombine(ixHash(key.index), static_cast<HashValue>(key.id)),
                    static_cast<HashValue>(key.scope)));
  }
};

using LoopValueMemo = std::unordered_map<LoopValueKey, KValue, LoopValueKeyHash>;

struct LoopGraph {
  std::vector<LoopNode> nodes;
  LoopId add(LoopNode node) {
    nodes.push_back(std::move(node));
    return static_cast<LoopId>(nodes.size() - 1);
  }
  const LoopNode& operator[](LoopId id) const { return nodes.at(id); }
};

}  // namespace lazyfuse
