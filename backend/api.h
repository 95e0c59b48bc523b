#pragma once

namespace lazyfuse {

/// Raises if torch's TorchScript lazy backend has taken over the Lazy key (or was registered
/// with torch's lazy core before lazyfuse). See Note [torch._lazy on lazyfuse].
void checkBackend();
/// Syncs every live lazy tensor and starts a new trace (after checkBackend()).
void syncAllLive();
/// syncAllLive(), then counts the step (MarkStep).
void runMarkStep();
/// Seeds the default generator of the hardware device, the one random lazy ops draw from.
void manualSeed(int64_t seed);

}  // namespace lazyfuse
