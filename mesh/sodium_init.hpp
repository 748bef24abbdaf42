#pragma once
// libsodium must be initialised before use; sodium_init() is idempotent and thread-safe, so every
// entry point that needs randomness or key conversion calls this rather than relying on a global
// constructor.

namespace brigade::mesh {
void ensure_sodium_initialized();
}  // namespace brigade::mesh
