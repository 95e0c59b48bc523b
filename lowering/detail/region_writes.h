#pragma once

#include "lowering/execution_plan.h"

#include <cstdint>
#include <vector>

namespace lazyfuse::detail {

/// The index_copy writes into a region of a value that `graph` records as scatters of views
/// (Note [Region writes]). Fills, per node position, `region_of` (the index of the write whose
/// outermost scatter the node is, or -1) and `absorbed` (the node is an inner scatter or the
/// index_copy of a write: no step computes it).
std::vector<RegionWrite> findRegionWrites(const Graph& graph, std::vector<int32_t>& region_of,
                                          std::vector<bool>& absorbed);

}  // namespace lazyfuse::detail
