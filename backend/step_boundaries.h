#pragma once

// Note [Automatic step boundaries]
// A loop that never syncs (no mark_step, no read) would grow its trace without bound: every
// parameter update reads the one before, so the whole history stays pending, and the graph that
// finally runs is as long as the loop (a 200-step MLP loop: 40 s to compile, against 0.12 s
// with a mark_step per step). Two rules cut the trace by syncing every live tensor, as
// mark_step does, without the program asking:
//   - A repeated step. Every recorded op leaves a signature (the op and its inputs' metadata,
//     the key of the meta cache) in a history that a sync of the program's own clears. At
//     histories of 64, 128, 256, ... ops (and every 16,384 ops past the cap of 65,536) the
//     tracker looks for the shortest period P whose repetition explains the history's last half
//     (at least two whole periods). Found, it cuts at the same point of every later period:
//     before the op at which the fewest lazy tensors were alive during the last period (in a
//     training loop, the start of the forward pass, when last step's activations and gradients
//     are gone), every k periods with k the fewest whose ops reach kMinOpsPerCut, so that a
//     short step (a pointwise update, `x = x * a + b`) still fuses many steps into one graph.
//     Every later graph then has the same structure and is served by the graph cache: such a
//     loop runs as fast as one that calls mark_step. An op that breaks the period (another
//     phase of the program) forgets it, and the search starts again.
//   - A bound: LAZYFUSE_TRACE_LIMIT ops recorded since the last sync (10,000 by default) cut the
//     trace wherever they end, so a loop whose steps never repeat (its sizes change) stays
//     bounded too. LAZYFUSE_TRACE_LIMIT=0 turns both rules off.
// A program that syncs anything itself (mark_step, `loss.item()` each step, a print) keeps its
// own rhythm: each of its syncs clears the history and the count towards the bound, so a loop
// that reads a value every step is never cut. (One that reads only a value unrelated to its
// growing trace is not bounded either: the rules see syncs, not the trace's size.)
// The cuts are counted as StepCuts and TraceLimitCuts. They happen at the entry of the Lazy
// kernel of the next op, before it reads its inputs, on whatever thread records (autograd's
// too), and never inside a sync.

#include "lazy_ir/hash.h"

#include <cstdint>

namespace lazyfuse {

/// Called as an op starts recording, before it reads its inputs: cuts the trace when a rule of
/// Note [Automatic step boundaries] says so. Returns the number of live lazy tensors, for
/// afterRecording.
int64_t beforeRecording();
/// Called once the op is in the trace, with its signature and beforeRecording's count.
void afterRecording(HashValue signature, int64_t live_tensors);
/// Called by every sync that computes something: unless it is a cut's, the program syncs on its
/// own, so the history and the count towards the bound start over.
void noteSync();

}  // namespace lazyfuse
