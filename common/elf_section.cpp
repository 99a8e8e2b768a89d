#include "common/elf_section.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace ddprun {
namespace {

/// At most this many section or program headers are read (real binaries have tens).
constexpr size_t kMaxHeaders = 4096;
/// A section read whole (a string table, the dynamic symbols) may be at most this long: python3.11's are ~100 KB.
constexpr uint64_t kMaxSection = 16 << 20;
/// Symbols are read this many at a time.
constexpr size_t kSymbolChunk = 4096;

/// An ELF file opened as untrusted, read with bounds.
class ElfFile {
 public:
  explicit ElfFile(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY);
    if (fd_ < 0) {
      why_ = std::string("it cannot be opened: ") + std::strerror(errno);
      return;
    }
    if (::fstat(fd_, &info_) != 0 || !S_ISREG(info_.st_mode)) {
      why_ = "it is not a regular file";
      return;
    }
    if (!read(0, &header_, sizeof header_) || std::memcmp(header_.e_ident, ELFMAG, SELFMAG) != 0 ||
        header_.e_ident[EI_CLASS] != ELFCLASS64) {
      why_ = "it is not a 64-bit ELF file";
      return;
    }
    ok_ = true;
  }
  ~ElfFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;

  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  const Elf64_Ehdr& header() const { return header_; }
  ino_t inode() const { return info_.st_ino; }

  /// `size` bytes at `offset`, all inside the file.
  bool read(uint64_t offset, void* out, uint64_t size) const {
    const auto fileSize = static_cast<uint64_t>(info_.st_size);
    if (offset > fileSize || size > fileSize - offset) return false;
    return ::pread(fd_, out, size, static_cast<off_t>(offset)) == static_cast<ssize_t>(size);
  }
  /// The section headers; empty when they do not fit the bounds.
  std::vector<Elf64_Shdr> sections() const {
    if (header_.e_shentsize != sizeof(Elf64_Shdr) || header_.e_shnum == 0 || header_.e_shnum > kMaxHeaders) return {};
    std::vector<Elf64_Shdr> sections(header_.e_shnum);
    if (!read(header_.e_shoff, sections.data(), sections.size() * sizeof(Elf64_Shdr))) return {};
    return sections;
  }
  /// A whole section's bytes; nullopt when it is larger than kMaxSection or outside the file.
  std::optional<std::string> section(const Elf64_Shdr& section) const {
    if (section.sh_size > kMaxSection) return std::nullopt;
    std::string bytes(section.sh_size, '\0');
    if (!read(section.sh_offset, bytes.data(), bytes.size())) return std::nullopt;
    return bytes;
  }

 private:
  int fd_ = -1;
  struct stat info_ {};
  Elf64_Ehdr header_{};
  bool ok_ = false;
  std::string why_;
};

}  // namespace

bool hasElfSection(const std::string& program, const char* name) {
  const ElfFile file(program);
  if (!file.ok()) return false;
  const auto sections = file.sections();
  if (sections.empty() || file.header().e_shstrndx >= sections.size()) return false;
  const auto table = file.section(sections[file.header().e_shstrndx]);
  if (!table) return false;
  for (const Elf64_Shdr& section : sections) {
    if (section.sh_name < table->size() && std::strcmp(table->c_str() + section.sh_name, name) == 0) return true;
  }
  return false;
}

bool readDynamicSymbols(const std::string& path, std::optional<ino_t> inode, std::map<std::string, uint64_t>& symbols,
                        uint64_t& lowestLoad, std::string& why) {
  const ElfFile file(path);
  if (!file.ok()) {
    why = file.why();
    return false;
  }
  if (inode && file.inode() != *inode) {
    why = "the file there is no longer the one mapped";
    return false;
  }
  const Elf64_Ehdr& header = file.header();
  if (header.e_phentsize != sizeof(Elf64_Phdr) || header.e_phnum > kMaxHeaders) {
    why = "its program headers are out of bounds";
    return false;
  }
  lowestLoad = UINT64_MAX;
  for (unsigned i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment{};
    if (!file.read(header.e_phoff + i * sizeof(segment), &segment, sizeof(segment))) {
      why = "its program headers are out of bounds";
      return false;
    }
    if (segment.p_type == PT_LOAD) lowestLoad = std::min<uint64_t>(lowestLoad, segment.p_vaddr & ~uint64_t{0xfff});
  }
  const auto sections = file.sections();
  for (const Elf64_Shdr& section : sections) {
    if (section.sh_type != SHT_DYNSYM || section.sh_link >= sections.size()) continue;
    const auto names = file.section(sections[section.sh_link]);
    if (!names || section.sh_size > kMaxSection) {
      why = "its dynamic symbols are out of bounds";
      return false;
    }
    const uint64_t count = section.sh_size / sizeof(Elf64_Sym);
    std::vector<Elf64_Sym> chunk;
    for (uint64_t first = 0; first < count; first += chunk.size()) {
      chunk.resize(std::min<uint64_t>(kSymbolChunk, count - first));
      if (!file.read(section.sh_offset + first * sizeof(Elf64_Sym), chunk.data(), chunk.size() * sizeof(Elf64_Sym))) {
        why = "its dynamic symbols are out of bounds";
        return false;
      }
      for (const Elf64_Sym& symbol : chunk) {
        if (symbol.st_shndx == SHN_UNDEF || symbol.st_name >= names->size()) continue;
        const auto found = symbols.find(names->c_str() + symbol.st_name);
        if (found != symbols.end() && found->second == 0) found->second = symbol.st_value;
      }
    }
  }
  if (sections.empty()) why = "it has no section headers";
  return !sections.empty();
}

}  // namespace ddprun
