// UTF-8 decoding and the three character classes the pre-tokenisers test.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace coli::bpe {

// Bit flags; a code point has at most one of them (Unicode keeps L, N and
// White_Space disjoint), and "other" is none.
enum CharClass : std::uint8_t {
  kOther = 0,
  kLetter = 1,
  kNumber = 2,
  kWhitespace = 4,
};

CharClass char_class(char32_t code_point);

// Marks a byte that does not start a valid UTF-8 sequence; such bytes are
// decoded one at a time and classed as "other".
inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFF;

struct DecodedChar {
  char32_t code_point;  // kInvalidCodePoint for a malformed byte
  std::uint32_t length; // bytes consumed, >= 1
};

// Decodes the character starting at text[pos] (pos < text.size()). Rejects
// overlong forms, surrogates and values above U+10FFFF, like a strict decoder.
DecodedChar decode_utf8(std::string_view text, std::size_t pos);

void append_utf8(std::string& out, char32_t code_point);

// Length of the UTF-8 sequence a lead byte announces; 0 for a continuation
// byte or a byte that can never start a sequence.
std::uint32_t utf8_sequence_length(unsigned char lead);

}  // namespace coli::bpe
