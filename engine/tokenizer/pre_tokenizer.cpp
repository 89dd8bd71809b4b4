#include "pre_tokenizer.h"

#include <cstdint>

#include "unicode_text.h"

namespace coli::bpe {
namespace {

// The text decoded once: code point, class and byte offset per character.
class CharView {
 public:
  explicit CharView(std::string_view text) {
    for (std::size_t pos = 0; pos < text.size();) {
      const DecodedChar c = decode_utf8(text, pos);
      code_points_.push_back(c.code_point);
      classes_.push_back(c.code_point == kInvalidCodePoint ? kOther : char_class(c.code_point));
      offsets_.push_back(pos);
      pos += c.length;
    }
    offsets_.push_back(text.size());
  }

  std::size_t size() const { return code_points_.size(); }
  std::size_t offset(std::size_t i) const { return offsets_[i]; }
  char32_t at(std::size_t i) const { return i < size() ? code_points_[i] : kInvalidCodePoint; }
  bool is(std::size_t i, CharClass c) const { return i < size() && classes_[i] == c; }
  bool letter(std::size_t i) const { return is(i, kLetter); }
  bool number(std::size_t i) const { return is(i, kNumber); }
  bool space(std::size_t i) const { return is(i, kWhitespace); }
  bool other(std::size_t i) const { return is(i, kOther); }  // [^\s\p{L}\p{N}]
  bool newline(std::size_t i) const { return at(i) == U'\r' || at(i) == U'\n'; }

  // End of the run of characters of class `c` starting at i.
  std::size_t run_end(std::size_t i, CharClass c) const {
    while (is(i, c)) ++i;
    return i;
  }

 private:
  std::vector<char32_t> code_points_;
  std::vector<CharClass> classes_;
  std::vector<std::size_t> offsets_;
};

constexpr std::size_t kNoMatch = 0;  // a match always ends after its start

// Simple case folding as far as the contraction letters need it: ASCII, and
// U+017F LATIN SMALL LETTER LONG S, which Unicode folds to 's'.
char32_t fold_case(char32_t c) {
  if (c >= U'A' && c <= U'Z') return c + 32;
  return c == U'\u017F' ? U's' : c;
}

// 's|'t|'re|'ve|'m|'ll|'d, optionally ignoring case.
std::size_t match_contraction(const CharView& s, std::size_t pos, bool ignore_case) {
  if (s.at(pos) != U'\'') return kNoMatch;
  const auto fold = [&](std::size_t i) { return ignore_case ? fold_case(s.at(i)) : s.at(i); };
  const char32_t a = fold(pos + 1);
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return pos + 2;
  const char32_t b = fold(pos + 2);
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return pos + 3;
  return kNoMatch;
}

// " ?X+" for a class X: an optional leading space, then at least one X.
std::size_t match_space_then_run(const CharView& s, std::size_t pos, CharClass c) {
  const std::size_t start = (s.at(pos) == U' ' && s.is(pos + 1, c)) ? pos + 1 : pos;
  return s.is(start, c) ? s.run_end(start, c) : kNoMatch;
}

// \s+(?!\S): the whitespace run, less its last character when that one is
// followed by a non-space (so " word" keeps its space); fails on a lone space.
std::size_t match_trailing_space(const CharView& s, std::size_t pos) {
  if (!s.space(pos)) return kNoMatch;
  const std::size_t end = s.run_end(pos, kWhitespace);
  if (end == s.size()) return end;
  return end - pos >= 2 ? end - 1 : kNoMatch;
}

std::size_t match_gpt2(const CharView& s, std::size_t pos) {
  if (std::size_t end = match_contraction(s, pos, false)) return end;
  if (std::size_t end = match_space_then_run(s, pos, kLetter)) return end;
  if (std::size_t end = match_space_then_run(s, pos, kNumber)) return end;
  if (std::size_t end = match_space_then_run(s, pos, kOther)) return end;
  if (std::size_t end = match_trailing_space(s, pos)) return end;
  return s.run_end(pos, kWhitespace);  // \s+ (kNoMatch when not a space)
}

std::size_t match_qwen2(const CharView& s, std::size_t pos) {
  if (std::size_t end = match_contraction(s, pos, true)) return end;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (s.letter(pos)) return s.run_end(pos, kLetter);
  if (!s.newline(pos) && !s.number(pos) && s.letter(pos + 1)) return s.run_end(pos + 1, kLetter);
  // \p{N}: digits one at a time
  if (s.number(pos)) return pos + 1;
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  if (std::size_t end = match_space_then_run(s, pos, kOther)) {
    while (s.newline(end)) ++end;
    return end;
  }
  // \s*[\r\n]+: whitespace up to and including its last line break
  if (s.space(pos)) {
    const std::size_t run = s.run_end(pos, kWhitespace);
    for (std::size_t i = run; i > pos; --i) {
      if (s.newline(i - 1)) return i;
    }
  }
  if (std::size_t end = match_trailing_space(s, pos)) return end;
  return s.run_end(pos, kWhitespace);
}

}  // namespace

void split_words(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& words) {
  const CharView chars(text);
  for (std::size_t pos = 0; pos < chars.size();) {
    std::size_t end = kind == PreTokenizer::kQwen2 ? match_qwen2(chars, pos) : match_gpt2(chars, pos);
    if (end == kNoMatch) end = pos + 1;  // unreachable: every class has a rule
    words.push_back(text.substr(chars.offset(pos), chars.offset(end) - chars.offset(pos)));
    pos = end;
  }
}

}  // namespace coli::bpe
