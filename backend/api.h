#pragma once

namespace lazyfuse {

/// Raises if torch's TorchScript lazy backend has taken over the Lazy key.
void checkBackend();

}  // namespace lazyfuse
