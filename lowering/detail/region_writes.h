#pragma once

#include "lowering/execution_plan.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace lazyfuse::detail {

/// The index_copy writes into a region of a value that `graph` records as scatters of views
/// (Note [Region writes]). Fills, per node position, `region_of` (the index of the write whose
/// outermost scatter the node is, or -1) and `absorbed` (the node is an inner scatter or the
/// index_copy of a write: no step computes it).
std::vector<RegionWrite> findRegionWrites(const Graph& graph, std::vector<int32_t>& region_of,
                                          std::vector<bool>& absorbed);

/// Appends to `written` the nodes `write` computes (its scatters and its index_copy or copy),
/// and to `views` the views of its base that its chain names, some more than once.
void regionWriteNodes(const Graph& graph, const RegionWrite& write, std::vector<uint32_t>& written,
                      std::vector<uint32_t>& views);

}  // namespace lazyfuse::detail

namespace lazyfuse {

/// The size and stride of the dimension a select, slice or narrow view starts in.
struct StartDim {
  int64_t size = 0;
  int64_t stride = 0;
};

/// Applies the select, slice or narrow view at `position` to a view of a buffer (`sizes`,
/// `strides`, `offset` in its elements), as ATen places it, and returns the dimension it starts
/// in as it was before; nullopt for any other node.
std::optional<StartDim> applyStartView(const Graph& graph, uint32_t position,
                                       std::vector<int64_t>& sizes, std::vector<int64_t>& strides,
                                       int64_t& offset);

}  // namespace lazyfuse
