// NFC = canonical decomposition, canonical ordering of combining marks, then
// canonical composition (Unicode Standard Annex #15).
#include "nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "unicode_tables.h"
#include "unicode_text.h"

namespace coli::bpe {
namespace {

// Hangul syllables decompose and compose arithmetically (UAX #15, 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr char32_t kSCount = kLCount * kNCount;

// An invalid byte travels as this flag plus the byte: a starter that never
// decomposes or composes.
constexpr char32_t kRawByteFlag = 0x80000000;

bool is_hangul_syllable(char32_t cp) { return cp >= kSBase && cp < kSBase + kSCount; }

std::uint32_t combining_class(char32_t cp) {
  const auto ranges = combining_classes();
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](char32_t v, const CombiningClassRange& r) { return v < r.first; });
  return (it != ranges.begin() && cp <= std::prev(it)->last) ? std::prev(it)->combining_class : 0;
}

const Decomposition* find_decomposition(char32_t cp) {
  const auto table = canonical_decompositions();
  auto it = std::lower_bound(table.begin(), table.end(), cp,
                             [](const Decomposition& d, char32_t v) { return d.code_point < v; });
  return (it != table.end() && it->code_point == cp) ? &*it : nullptr;
}

bool is_composition_second(char32_t cp) {
  static const std::vector<char32_t> seconds = [] {
    std::vector<char32_t> s;
    for (const Composition& c : primary_composites()) s.push_back(c.second);
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
    return s;
  }();
  return std::binary_search(seconds.begin(), seconds.end(), cp);
}

// True when NFC could change text containing cp (a fast, conservative test).
bool may_change(char32_t cp) {
  if (cp < 0x300) return false;  // nothing below U+0300 decomposes, combines or reorders
  if (cp >= kLBase && cp < kLBase + 0x100) return true;  // Hangul jamo compose
  if (is_hangul_syllable(cp)) return true;               // LV + T composes
  return combining_class(cp) != 0 || find_decomposition(cp) != nullptr || is_composition_second(cp);
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if ((cp & kRawByteFlag) != 0) {
    out.push_back(cp);
  } else if (is_hangul_syllable(cp)) {
    const char32_t index = cp - kSBase;
    out.push_back(kLBase + index / kNCount);
    out.push_back(kVBase + (index % kNCount) / kTCount);
    if (index % kTCount != 0) out.push_back(kTBase + index % kTCount);
  } else if (const Decomposition* d = find_decomposition(cp)) {
    decompose(d->first, out);
    if (d->second != 0) decompose(d->second, out);
  } else {
    out.push_back(cp);
  }
}

std::uint32_t class_of(char32_t cp) { return (cp & kRawByteFlag) != 0 ? 0 : combining_class(cp); }

// Stable sort of each run of non-starters by combining class.
void reorder_marks(std::vector<char32_t>& cps) {
  for (std::size_t i = 0; i < cps.size();) {
    if (class_of(cps[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < cps.size() && class_of(cps[end]) != 0) ++end;
    std::stable_sort(cps.begin() + i, cps.begin() + end,
                     [](char32_t a, char32_t b) { return class_of(a) < class_of(b); });
    i = end;
  }
}

// The primary composite of (first, second), or 0.
char32_t compose_pair(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (is_hangul_syllable(first) && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const auto table = primary_composites();
  auto it = std::lower_bound(table.begin(), table.end(), std::pair(first, second),
                             [](const Composition& c, std::pair<char32_t, char32_t> v) {
                               return c.first != v.first ? c.first < v.first : c.second < v.second;
                             });
  return (it != table.end() && it->first == first && it->second == second) ? it->composite : 0;
}

std::vector<char32_t> compose(const std::vector<char32_t>& cps) {
  std::vector<char32_t> out;
  std::size_t starter = SIZE_MAX;  // index in `out` of the last starter
  std::uint32_t last_class = 0;    // class of the last character after it
  for (char32_t cp : cps) {
    const std::uint32_t cls = class_of(cp);
    const bool adjacent = starter != SIZE_MAX && starter + 1 == out.size();
    const bool blocked = !adjacent && (last_class == 0 || last_class >= cls);
    if (starter != SIZE_MAX && !blocked && (cp & kRawByteFlag) == 0) {
      if (const char32_t composite = compose_pair(out[starter], cp)) {
        out[starter] = composite;
        continue;
      }
    }
    if (cls == 0) starter = (cp & kRawByteFlag) != 0 ? SIZE_MAX : out.size();
    last_class = cls;
    out.push_back(cp);
  }
  return out;
}

}  // namespace

std::string to_nfc(std::string_view text) {
  std::vector<char32_t> units;
  bool changeable = false;
  for (std::size_t pos = 0; pos < text.size();) {
    const DecodedChar c = decode_utf8(text, pos);
    if (c.code_point == kInvalidCodePoint) {
      units.push_back(kRawByteFlag | static_cast<unsigned char>(text[pos]));
    } else {
      units.push_back(c.code_point);
      changeable = changeable || may_change(c.code_point);
    }
    pos += c.length;
  }
  if (!changeable) return std::string(text);

  std::vector<char32_t> decomposed;
  decomposed.reserve(units.size());
  for (char32_t cp : units) decompose(cp, decomposed);
  reorder_marks(decomposed);
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : compose(decomposed)) {
    if ((cp & kRawByteFlag) != 0) {
      out += static_cast<char>(cp & 0xFF);
    } else {
      append_utf8(out, cp);
    }
  }
  return out;
}

}  // namespace coli::bpe
