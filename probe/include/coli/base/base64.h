// Base64 (RFC 4648, standard alphabet, '=' padding): files carried inside a
// JSON index (a container's tokenizer). Decoding is strict: a wrong length,
// a character outside the alphabet or padding in the middle is refused.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace coli {

std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace coli
