#pragma once

// Note [Two kinds of error]
// LF_CHECK is for what a user can cause: it raises a normal c10::Error (RuntimeError in Python).
// LF_INTERNAL_ASSERT is for our own bugs. Messages start lowercase and carry no trailing period.
//
// Note [Loud lowering errors]
// A lowering declines an op it cannot fuse by returning false, or by reading an argument of
// another form than it knows (an IValue conversion raises): the op then runs as its ATen kernel
// between fused ones. An LF_INTERNAL_ASSERT in lowering or codegen is never taken for a decline:
// the sync fails with a message naming the graph, and the op when its lowering raised it
// (recognised by its prefix, kInternalErrorPrefix). LAZYFUSE_DUMP=ir writes the graph's IR before
// it is lowered. Pinned by test_graph.cpp's InternalErrorInALoweringFailsLoudly.

#include <c10/util/Exception.h>

namespace lazyfuse {
inline constexpr const char* kInternalErrorPrefix = "lazyfuse internal error: ";
}  // namespace lazyfuse

#define LF_CHECK(cond, ...) TORCH_CHECK((cond), __VA_ARGS__)
#define LF_CHECK_EQ(a, b, ...) \
  TORCH_CHECK((a) == (b), __VA_ARGS__, " (", #a, " = ", (a), ", ", #b, " = ", (b), ")")
#define LF_INTERNAL_ASSERT(cond, ...) \
  TORCH_INTERNAL_ASSERT((cond), ::lazyfuse::kInternalErrorPrefix, __VA_ARGS__)
