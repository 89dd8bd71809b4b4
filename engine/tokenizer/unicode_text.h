// UTF-8 decoding and encoding (NFC, the byte-level alphabet, the stream decoder).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace coli::bpe {

// Marks a byte that does not start a valid UTF-8 sequence; such bytes are
// decoded one at a time.
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
