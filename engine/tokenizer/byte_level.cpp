#include "byte_level.h"

#include <array>

#include "unicode_text.h"

namespace coli::bpe {
namespace {

// Bytes GPT-2 keeps as themselves: '!'..'~', '¡'..'¬', '®'..'ÿ'. The other 68
// take U+0100, U+0101, ... in byte order.
bool maps_to_itself(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

const std::array<char32_t, 256>& byte_table() {
  static const auto table = [] {
    std::array<char32_t, 256> t{};
    char32_t next_shifted = 0x100;
    for (unsigned b = 0; b < 256; ++b) t[b] = maps_to_itself(b) ? b : next_shifted++;
    return t;
  }();
  return table;
}

}  // namespace

char32_t byte_to_code_point(unsigned char byte) { return byte_table()[byte]; }

std::optional<unsigned char> code_point_to_byte(char32_t code_point) {
  if (code_point < 0x100) {
    if (maps_to_itself(code_point)) return static_cast<unsigned char>(code_point);
    return std::nullopt;
  }
  if (code_point >= 0x100 + 68) return std::nullopt;
  // The shifted bytes are the non-self bytes in increasing order.
  unsigned index = code_point - 0x100;
  for (unsigned b = 0; b < 256; ++b) {
    if (!maps_to_itself(b) && index-- == 0) return static_cast<unsigned char>(b);
  }
  return std::nullopt;
}

std::string encode_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, byte_to_code_point(static_cast<unsigned char>(c)));
  return out;
}

std::optional<std::string> decode_byte_level(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t pos = 0; pos < text.size();) {
    const DecodedChar c = decode_utf8(text, pos);
    const auto byte = code_point_to_byte(c.code_point);
    if (!byte) return std::nullopt;
    out += static_cast<char>(*byte);
    pos += c.length;
  }
  return out;
}

}  // namespace coli::bpe
