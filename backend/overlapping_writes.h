#pragma once

// Note [Writes into views that overlap themselves]
// A view whose elements share memory (x.unfold(0, 3, 1), x.as_strided((3, 3), (1, 1)),
// x.expand(2, 3)) makes an in-place write a sequence of memory writes in eager: each element of
// the view is read, computed and written in turn, so `x.unfold(0, 3, 1).add_(1)` adds 1 to x[k]
// once per window holding it, and `x.unfold(0, 2, 1)[...] = v` leaves the last write of each
// element. Functionalization cannot express that: it computes the view's new values from its
// old ones and hands them back to the base through the view's inverse (unfold's sums
// overlapping windows, expand's sums expanded elements), which gives other numbers. So a write
// into a lazy view that may overlap itself is done as eager does it, on memory: the sync that
// makes its base's value, the base laid out in a buffer of the hardware device as eager lays it
// out in its storage, the op run by ATen on strided views into that buffer (every tensor of the
// call in the same storage is one), and the buffer's new contents made the base's new value,
// from which every view of it is regenerated. Eager's errors and warnings come from its own
// kernel (it refuses most writes into a zero stride, allows fill_, zero_, masked_fill_ with a
// warning). Such a write is a sync point, like an op whose result depends on data. A write into
// any view made through unfold, expand or an as_strided of another view (and views of them)
// takes the same path, even when the written elements do not overlap: the inverses of those views
// do not put a view's elements back where they came from (unfold's sums overlapping windows and
// zeroes the elements no window covers, `x.unfold(0, 2, 2).add_(1)` on 5 elements;
// functionalization refuses to write through an as_strided that follows another view). A write
// into an as_strided of the base itself (no view of it) that does not overlap itself is
// functionalized as any view's.
// Pinned by
// test_views_mutation.py::test_write_into_overlapping_view_* and test_write_through_*.

#include "backend/op_traits.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace lazyfuse {

/// The written tensor through which a call's write must run on memory (Note [Writes into views
/// that overlap themselves]); undefined when the call is not one for writeOnMemory. It is one:
/// every written argument a single functional lazy tensor of one storage, one of them
/// overlapping itself or made through unfold, expand or as_strided, and every return one of
/// them (a tensor list that overlaps itself keeps the error of Note [Writes into expanded
/// tensors]).
at::Tensor writtenOnMemory(const OpTraits& traits, const torch::jit::Stack& args);

/// Runs the call (its arguments at the end of `stack`) on memory, through `written` (from
/// writtenOnMemory), leaving its results on `stack`.
void writeOnMemory(const c10::OperatorHandle& op, const OpTraits& traits, const at::Tensor& written,
                   torch::jit::Stack* stack);

}  // namespace lazyfuse
