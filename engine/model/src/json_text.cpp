#include "json_text.h"

#include <set>

namespace coli::model::detail {
namespace {

struct TextPosition {
  std::size_t line = 1;
  std::size_t column = 1;
};

// nlohmann reports the byte index (1-based) of the last character it read.
TextPosition position_of(std::string_view text, std::size_t byte) {
  TextPosition where;
  const std::size_t end = std::min(byte > 0 ? byte - 1 : 0, text.size());
  for (std::size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++where.line;
      where.column = 1;
    } else {
      ++where.column;
    }
  }
  return where;
}

// Drops nlohmann's "[json.exception...] parse error at line X, column Y: "
// prefix; the position is printed in coli's own format.
std::string reason_of(const nlohmann::json::parse_error& error) {
  std::string message = error.what();
  const std::size_t column = message.find("column ");
  if (column != std::string::npos) {
    const std::size_t colon = message.find(": ", column);
    if (colon != std::string::npos) return message.substr(colon + 2);
  }
  const std::size_t bracket = message.find("] ");
  return bracket == std::string::npos ? message : message.substr(bracket + 2);
}

}  // namespace

Result<ParsedJson> parse_json_text(std::string_view text, std::string_view source) {
  ParsedJson parsed;
  std::set<std::string> seen_keys;
  auto watch_top_level_keys = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& node) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1) {
      const std::string key = node.get<std::string>();
      if (!seen_keys.insert(key).second) parsed.duplicate_top_level_keys.push_back(key);
    }
    return true;
  };
  try {
    parsed.value = nlohmann::json::parse(text.begin(), text.end(), watch_top_level_keys);
  } catch (const nlohmann::json::parse_error& error) {
    const TextPosition where = position_of(text, error.byte);
    return make_error(std::string(source) + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) +
                      ": invalid JSON: " + reason_of(error) + " (fix or re-download the file)");
  } catch (const nlohmann::json::exception& error) {
    // Out of range (a number like 1e309) and the like: still a broken file, never an abort.
    return make_error(std::string(source) + ": invalid JSON: " + error.what() + " (fix or re-download the file)");
  }
  return parsed;
}

std::string format_shape(const std::vector<std::uint64_t>& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

std::string describe_json_value(const nlohmann::json& value, std::size_t limit) {
  std::string text = value.dump();
  if (text.size() > limit) text = text.substr(0, limit) + "...";
  return text;
}

}  // namespace coli::model::detail
