// JSON parsing for model files with messages a user can act on: syntax errors
// give file:line:column, duplicate top-level keys (which nlohmann would merge
// silently, last one winning) are reported.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "coli/base/result.h"

namespace coli::model::detail {

struct ParsedJson {
  nlohmann::json value;
  std::vector<std::string> duplicate_top_level_keys;
};

// `source` prefixes messages ("config.json", "<file> header").
Result<ParsedJson> parse_json_text(std::string_view text, std::string_view source);

// "[1, 2, 3]" for shapes in messages.
std::string format_shape(const std::vector<std::uint64_t>& shape);

// Short JSON rendering of a value for messages, cut at `limit` characters.
std::string describe_json_value(const nlohmann::json& value, std::size_t limit = 40);

}  // namespace coli::model::detail
