#include "common/elf_section.hpp"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <vector>

namespace ddprun {

bool hasElfSection(const std::string& program, const char* name) {
  std::ifstream in(program, std::ios::binary);
  Elf64_Ehdr header{};
  if (!in.read(reinterpret_cast<char*>(&header), sizeof header)) return false;
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_ident[EI_CLASS] != ELFCLASS64) return false;
  if (header.e_shentsize != sizeof(Elf64_Shdr) || header.e_shnum == 0 || header.e_shstrndx >= header.e_shnum) {
    return false;
  }
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  in.seekg(static_cast<std::streamoff>(header.e_shoff));
  if (!in.read(reinterpret_cast<char*>(sections.data()),
               static_cast<std::streamsize>(sections.size() * sizeof(Elf64_Shdr)))) {
    return false;
  }
  const Elf64_Shdr& names = sections[header.e_shstrndx];
  if (names.sh_size > (1 << 20)) return false;
  std::string table(names.sh_size, '\0');
  in.seekg(static_cast<std::streamoff>(names.sh_offset));
  if (!in.read(table.data(), static_cast<std::streamsize>(table.size()))) return false;
  for (const Elf64_Shdr& section : sections) {
    if (section.sh_name < table.size() && std::strcmp(table.c_str() + section.sh_name, name) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace ddprun
