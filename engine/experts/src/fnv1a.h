// FNV-1a 64-bit: a small, dependency-free checksum for identities and for
// detecting corrupt usage-history files (not a cryptographic hash).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace coli::experts::detail {

class Fnv1a64 {
 public:
  void add(std::string_view bytes) {
    for (const char c : bytes) {
      hash_ ^= static_cast<unsigned char>(c);
      hash_ *= 0x100000001b3ULL;
    }
  }
  std::uint64_t value() const { return hash_; }
  std::string hex() const {
    char buffer[17];
    std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(hash_));
    return buffer;
  }

 private:
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
};

}  // namespace coli::experts::detail
