#pragma once
// Opening a file that a user named for appending (the worker's --metrics-file), where other users may write too: in
// a sticky world-writable directory (/tmp) another user may have put a symbolic link or a FIFO at that name. A link
// on the way is followed only as the kernel's fs.protected_symlinks would (Documentation/admin-guide/sysctl/fs.rst:
// in a sticky world-writable directory, only a link owned by this user or by the directory's owner), whatever that
// setting is on this host; the file is opened without waiting (O_NONBLOCK, so a FIFO never blocks) and must be a
// regular file or a character device (/dev/null, a terminal).
#include <string>

namespace ddprun {

/// Opens (creating it 0644 when missing) the regular file or character device at `path` for appending; returns its
/// descriptor, close-on-exec. Throws IoError ("PATH: cannot open it for appending: REASON"): a link that
/// fs.protected_symlinks' rule refuses, a FIFO, a directory, a block device or socket, or the open's own error.
int openForAppend(const std::string& path);

}  // namespace ddprun
