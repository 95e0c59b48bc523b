#pragma once

// Note [Automatic step boundaries]
// A loop that never syncs (no mark_step, no read) would grow its trace without bound: every
// parameter update reads the one before, so the whole history stays pending, and the graph that
// finally runs is as long as the loop (a 200-step MLP loop: 45 s to compile, against 0.12 s
// with a mark_step per step). Two rules cut the trace by syncing every live tensor, as
// mark_step does, without the program asking:
//   - A repeated step. Every recorded op leaves a signature (the op and its inputs' metadata,
//     the key of the meta cache) in a history that each sync of the program's own clears (at
//     most the latest 65,536 ops). At histories of 64, 128, 256, ... ops (and every 16,384 ops
//     past 32,768) the tracker looks for the shortest period P whose repetition explains the
//     history's last half (at least two whole periods). Found, it cuts the trace before the op
//     that follows, and then every k periods, k the fewest periods whose ops reach
//     kMinOpsPerCut, so that a short step (a pointwise update, `x = x * a + b`) still fuses
//     many steps into one graph. The cuts fall at the same op of the step each time, so every
//     later graph has the same structure and is served by the graph cache: such a loop runs as
//     fast as one that calls mark_step. An op that breaks the period (another phase of the
//     program, or the end of a stack of equal layers that a search inside one step took for
//     the step) forgets it, and the search goes on.
//   - A bound: LAZYFUSE_TRACE_LIMIT ops recorded since the last sync (10,000 by default) cut the
//     trace wherever they end, so a loop whose steps never repeat (its sizes change) stays
//     bounded too. LAZYFUSE_TRACE_LIMIT=0 turns both rules off.
// A program that syncs on its own (mark_step, `loss.item()` each step, a print) keeps its own
// rhythm: no cut at a period comes before the program has gone twice as many ops without a
// sync as between its last two syncs, and each of its syncs restarts the count towards the
// bound. So a loop that reads a value or calls mark_step every step is not cut after its first
// step, however long its steps and however many equal layers they hold (a period found inside
// a step, of equal layers or their per-parameter optimizer updates, is not acted on). Its
// first step may be cut there, before the tracker knows its rhythm; those graphs compile once. (A
// program that reads only a value unrelated to its growing trace is not bounded either: the rules
// see syncs, not the trace's size.) Steps of more than 16,384 ops are not found; such a loop is cut
// at the bound only. The cuts are counted as StepCuts and TraceLimitCuts. They happen at the entry
// of the Lazy kernel of the next op, before it reads its inputs, on whatever thread records
// (autograd's too), and never inside a sync; a cut whose graph fails raises at that op.

#include "lazy_ir/hash.h"

#include <cstdint>

namespace lazyfuse {

/// Called as an op starts recording, before it reads its inputs: cuts the trace when a rule of
/// Note [Automatic step boundaries] says so.
void beforeRecording();
/// Called once the op is in the trace, with its signature.
void afterRecording(HashValue signature);
/// Called by every sync that computes something: unless it is a cut's, the program syncs on its
/// own, which skips the cuts at the period for a while and restarts the count towards the bound.
void noteSync();

}  // namespace lazyfuse
