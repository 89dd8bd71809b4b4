#include "coli/base/stream_prefetch.h"

#include <cstdlib>

namespace coli {

std::size_t stream_prefetch_bytes_from(const char* value) {
  constexpr std::size_t kMost = std::size_t{1} << 20;
  if (value == nullptr || *value == '\0') return kDefaultStreamPrefetchBytes;
  char* end = nullptr;
  const unsigned long long bytes = std::strtoull(value, &end, 10);
  return *end == '\0' && bytes <= kMost ? static_cast<std::size_t>(bytes) : kDefaultStreamPrefetchBytes;
}

std::size_t stream_prefetch_bytes() {
  static const std::size_t bytes = stream_prefetch_bytes_from(std::getenv("COLI_PREFETCH_BYTES"));
  return bytes;
}

}  // namespace coli
