#pragma once
// Reading ELF files that another program names: how ddprun learns, before it starts anything, what a program
// supports (a marker section it links in: ".ddprun_forkserver": common/forkserver.hpp; ".ddprun_rank_replace":
// worker/rank_replacement.hpp; ".ddprun_spare_rank": common/spare_rank.hpp), and where a running interpreter keeps its
// state (the dynamic symbols of a mapped python3.11 or libpython: launcher/watch/evidence/python_position.hpp).
// Every file is opened as untrusted (untrusted_file.hpp: never blocks on a FIFO or device, regular files only) and
// every read is bounded by constants and the file's own size, never by a size the file claims.
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace ddprun {

/// Whether `program` (a path) is a 64-bit ELF file with a section named `name`; false for anything else (a
/// script, an unreadable file).
bool hasElfSection(const std::string& program, const char* name);

/// Fills the entries of `symbols` (names mapped to 0) with their values in `path`'s dynamic symbol table (as
/// linked), and `lowestLoad` with the lowest address its loadable segments are linked at. `inode`, when given, is the
/// inode the file must have (the one /proc/PID/maps names): a path replaced since it was mapped is refused.
/// Returns false, with `why` set, when the file is no readable 64-bit ELF file within the bounds.
bool readDynamicSymbols(const std::string& path, std::optional<ino_t> inode, std::map<std::string, uint64_t>& symbols,
                        uint64_t& lowestLoad, std::string& why);

}  // namespace ddprun
