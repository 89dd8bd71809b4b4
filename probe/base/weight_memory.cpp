#include "coli/base/weight_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "coli/base/files.h"

namespace coli {
namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;

std::size_t page_size() { return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)); }

}  // namespace

bool weight_memory_huge_pages() {
  static const bool wanted = [] {
    const char* value = std::getenv("COLI_HUGE_PAGES");
    return value == nullptr || (std::strcmp(value, "off") != 0 && std::strcmp(value, "0") != 0);
  }();
  return wanted;
}

std::string transparent_huge_page_mode() {
  const Result<std::string> text = read_text_file("/sys/kernel/mm/transparent_hugepage/enabled");
  if (!text) return "unknown";
  const std::string& line = *text;
  // "always [madvise] never": the bracketed word is the mode in force.
  const auto open = line.find('['), close = line.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "unknown";
  return line.substr(open + 1, close - open - 1);
}

Result<WeightMemory> WeightMemory::allocate(std::size_t bytes, const std::string& what) {
  WeightMemory memory;
  if (bytes == 0) return memory;
  const std::size_t page = page_size();
  if (bytes > SIZE_MAX - 2 * kHugePage) return make_error(what + ": " + std::to_string(bytes) + " bytes overflow a mapping");
  const std::size_t mapped = (bytes + page - 1) / page * page;
  // Map a huge page more than needed and trim both ends, so the start is on a
  // 2 MiB boundary (a huge page can only back an aligned 2 MiB range).
  const std::size_t reserve = mapped + kHugePage;
  void* raw = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return make_error("cannot allocate " + std::to_string(bytes) + " bytes for " + what + ": " + std::strerror(errno));
  }
  const auto begin = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > begin) ::munmap(raw, aligned - begin);
  const std::uintptr_t end = begin + reserve;
  if (end > aligned + mapped) ::munmap(reinterpret_cast<void*>(aligned + mapped), end - (aligned + mapped));
  memory.data_ = reinterpret_cast<std::byte*>(aligned);
  memory.size_ = bytes;
  memory.mapped_ = mapped;
#ifdef MADV_HUGEPAGE
  if (weight_memory_huge_pages()) memory.advised_ = ::madvise(memory.data_, mapped, MADV_HUGEPAGE) == 0;
#endif
  return memory;
}

WeightMemory::WeightMemory(WeightMemory&& other) noexcept { *this = std::move(other); }

WeightMemory& WeightMemory::operator=(WeightMemory&& other) noexcept {
  if (this != &other) {
    release();
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(mapped_, other.mapped_);
    std::swap(advised_, other.advised_);
  }
  return *this;
}

WeightMemory::~WeightMemory() { release(); }

void WeightMemory::release() {
  if (data_ != nullptr) ::munmap(data_, mapped_);
  data_ = nullptr;
  size_ = mapped_ = 0;
  advised_ = false;
}

}  // namespace coli
