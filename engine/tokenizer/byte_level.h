// GPT-2's byte-to-unicode alphabet: every byte is shown as a printable code
// point (0x20 ' ' -> U+0120 'Ġ', 0x0A -> U+010A 'Ċ', printable Latin-1 bytes
// as themselves), so vocabulary files can hold arbitrary bytes as text.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace coli::bpe {

char32_t byte_to_code_point(unsigned char byte);
std::optional<unsigned char> code_point_to_byte(char32_t code_point);

// Bytes -> their byte-level text (UTF-8 of the mapped code points).
std::string encode_byte_level(std::string_view bytes);
// Byte-level text -> bytes; nullopt when a character is outside the alphabet.
std::optional<std::string> decode_byte_level(std::string_view text);

}  // namespace coli::bpe
