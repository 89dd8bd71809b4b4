// Sizes, counts and offsets read from a file are hostile until checked: these
// say when arithmetic on them would wrap, instead of wrapping (nullopt).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace coli {

inline std::optional<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

inline std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// The product of all `factors` (1 for none), or nullopt when it passes 2^64.
inline std::optional<std::uint64_t> checked_product(std::span<const std::uint64_t> factors) {
  std::uint64_t product = 1;
  for (std::uint64_t factor : factors) {
    if (__builtin_mul_overflow(product, factor, &product)) return std::nullopt;
  }
  return product;
}

// [offset, offset + length) lies inside [begin, end): false too when the end wraps.
inline bool range_within(std::uint64_t offset, std::uint64_t length, std::uint64_t begin, std::uint64_t end) {
  const std::optional<std::uint64_t> range_end = checked_add(offset, length);
  return offset >= begin && range_end && *range_end <= end;
}

}  // namespace coli
