#pragma once
// The orphan guard's other side: the guardian process's whole life (orphan_guard.hpp says what it is for).

namespace ddprun::launcher {

/// Reads ddprun's messages from `readEnd` until end-of-file (ddprun exited or was killed), then kills every
/// process group still registered and removes the empty directories it was told of; exits the process with 0.
/// Messages are lines: "+PGID" registers a group, "-PGID" unregisters it, "dPATH" names a directory to prune.
/// Ignores every signal that would end or stop it (only the pipe's EOF ends it); faults keep their default.
[[noreturn]] void runOrphanGuardian(int readEnd);

}  // namespace ddprun::launcher
