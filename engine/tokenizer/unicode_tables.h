// The canonical data NFC needs from the Unicode Character Database, sorted
// (generated: unicode_tables.cpp).
#pragma once

#include <span>

namespace coli::bpe {

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
// For NFC (Hangul syllables are computed, not listed).
std::span<const CombiningClassRange> combining_classes();   // non-zero classes only
std::span<const Decomposition> canonical_decompositions();  // one level; apply recursively
std::span<const Composition> primary_composites();          // pairs NFC recomposes

}  // namespace coli::bpe
