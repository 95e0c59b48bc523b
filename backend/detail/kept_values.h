#pragma once

// What a sync (backend/graph_executor.cpp) keeps of a graph's values, and which device data it
// may donate (backend/kept_values.cpp). See Note [Values a sync keeps for later].

#include "backend/lazy_tensor.h"
#include "lazy_ir/graph.h"

#include <cstdint>
#include <vector>

namespace lazyfuse::detail {

/// How many references to each node of `graph` the graph itself, `roots` and the targets (the
/// LazyData `roots` came from, each counted once) account for.
std::vector<size_t> internalUses(const Graph& graph, const std::vector<Value>& roots,
                                 const std::vector<LazyData*>& targets);

/// For each node position of `graph`, whether it is device data the run may donate; see
/// kept_values.cpp.
std::vector<uint8_t> freeDataInputs(const Graph& graph, const std::vector<size_t>& internal);

/// The op nodes of `graph` that something outside it still reaches; their values are kept.
std::vector<uint32_t> nodesToKeep(const Graph& graph, const std::vector<size_t>& internal);

/// Makes every output of the nodes at `keep` a graph output (after the roots), and returns, per
/// node, the graph output index of each of its outputs.
std::vector<std::vector<size_t>> addKeptOutputs(Graph& graph, const std::vector<uint32_t>& keep);

}  // namespace lazyfuse::detail
