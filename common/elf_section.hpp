#pragma once
// How ddprun learns, before it starts anything, what a program supports: a marker section the program links in
// (".ddprun_forkserver": common/forkserver.hpp; ".ddprun_rank_replace": worker/rank_replacement.hpp;
// ".ddprun_spare_rank": common/spare_rank.hpp).
#include <string>

namespace ddprun {

/// Whether `program` (a path) is a 64-bit ELF file with a section named `name`; false for anything else (a
/// script, an unreadable file).
bool hasElfSection(const std::string& program, const char* name);

}  // namespace ddprun
