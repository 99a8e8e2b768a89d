#pragma once
// Random identifiers from the kernel's generator (getrandom(2)): unguessable, unique across machines.
#include <cstddef>
#include <string>

namespace ddprun {

/// A random RFC 4122 version-4 UUID in its text form, e.g. "1b4e28ba-2fa1-41d2-883f-0016d3cca427" (what
/// Python's str(uuid.uuid4()) gives, as torchrun uses for --standalone). Throws ddprun::Error when the
/// kernel has no randomness to give.
std::string randomUuid();

/// `bytes` random bytes as lower-case hex digits (2 per byte). Throws ddprun::Error like randomUuid().
std::string randomHex(size_t bytes);

}  // namespace ddprun
