#pragma once

// An ExecutionPlan is what a Graph lowers to, and what the graph cache holds: an ordered list of
// steps. Today every ATen node is one extern step (its ATen kernel on the hardware device); fused
// kernels replace runs of steps in later stages of the compiler. A plan refers to nodes by their
// position, so it serves every graph with the same hash. See Note [What a graph hash covers].

#include "lazy_ir/graph.h"

#include <vector>

namespace lazyfuse {

enum class StepKind : uint8_t {
  kExternCall,  // run the ATen kernel of the node at `position` on the hardware device
};

struct PlanStep {
  StepKind kind = StepKind::kExternCall;
  uint32_t position = 0;
  /// Node positions whose buffers are dead after this step (last use, not a graph output).
  std::vector<uint32_t> release_after;
};

struct ExecutionPlan {
  HashValue graph_hash = 0;
  uint32_t num_nodes = 0;
  std::vector<PlanStep> steps;
};

}  // namespace lazyfuse
