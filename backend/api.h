#pragma once

namespace lazyfuse {

/// Raises if torch's TorchScript lazy backend has taken over the Lazy key (or was registered
/// with torch's lazy core before lazyfuse). See Note [torch._lazy on lazyfuse].
void checkBackend();
/// Syncs every live lazy tensor, starts a new trace and counts the step (MarkStep).
void runMarkStep();

}  // namespace lazyfuse
