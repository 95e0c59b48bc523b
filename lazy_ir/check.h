#pragma once

// Note [Two kinds of error]
// LF_CHECK is for what a user can cause: it raises a normal c10::Error (RuntimeError in Python).
// LF_INTERNAL_ASSERT is for our own bugs. Messages start lowercase and carry no trailing period.

#include <c10/util/Exception.h>

#define LF_CHECK(cond, ...) TORCH_CHECK((cond), __VA_ARGS__)
#define LF_CHECK_EQ(a, b, ...) \
  TORCH_CHECK((a) == (b), __VA_ARGS__, " (", #a, " = ", (a), ", ", #b, " = ", (b), ")")
#define LF_INTERNAL_ASSERT(cond, ...) \
  TORCH_INTERNAL_ASSERT((cond), "lazyfuse internal error: ", __VA_ARGS__)
