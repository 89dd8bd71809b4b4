// Code point classes from the Unicode Character Database, as sorted,
// non-overlapping inclusive ranges (generated: unicode_tables.cpp).
#pragma once

#include <span>

namespace coli::bpe {

struct CodepointRange {
  char32_t first;
  char32_t last;
};

struct CombiningClassRange {
  char32_t first;
  char32_t last;
  char32_t combining_class;  // canonical combining class, 1..254
};

struct Decomposition {  // sorted by code_point
  char32_t code_point;
  char32_t first;
  char32_t second;  // 0 for a singleton decomposition
};

struct Composition {  // sorted by (first, second)
  char32_t first;
  char32_t second;
  char32_t composite;
};

extern const char* const kUnicodeVersion;
std::span<const CodepointRange> letter_ranges();      // general category L*
std::span<const CodepointRange> number_ranges();      // general category N*
std::span<const CodepointRange> whitespace_ranges();  // property White_Space
// For NFC (Hangul syllables are computed, not listed).
std::span<const CombiningClassRange> combining_classes();   // non-zero classes only
std::span<const Decomposition> canonical_decompositions();  // one level; apply recursively
std::span<const Composition> primary_composites();          // pairs NFC recomposes

}  // namespace coli::bpe
