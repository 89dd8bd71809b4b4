// The .coli_usage text format (see usage_history.h): write, and a strict read
// that turns every kind of bad file into an Error.
#include <charconv>
#include <cmath>
#include <string>

#include "coli/base/files.h"
#include "coli/base/text.h"
#include "coli/experts/usage_history.h"
#include "fnv1a.h"

namespace coli::experts {
namespace {

constexpr std::string_view kMagic = "coli-usage-history";
constexpr std::string_view kChecksumPrefix = "checksum fnv1a64:";

void append_number(std::string& out, double value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);  // shortest exact round trip
  out.append(buffer, result.ptr);
}

// "key value" -> value, or nullopt when the line has another key.
std::optional<std::string_view> field(std::string_view line, std::string_view key) {
  if (!starts_with(line, key) || line.size() <= key.size() || line[key.size()] != ' ') return std::nullopt;
  return line.substr(key.size() + 1);
}

std::optional<double> parse_count(std::string_view text) {
  const auto value = parse_double(text);
  if (!value || !std::isfinite(*value) || *value < 0.0) return std::nullopt;
  return value;
}

}  // namespace

std::string UsageHistory::serialize() const {
  std::string out;
  out += std::string(kMagic) + "\n";
  out += "format_version " + std::to_string(kUsageHistoryVersion) + "\n";
  out += "n_layers " + std::to_string(key_.n_layers) + "\n";
  out += "n_experts " + std::to_string(key_.n_experts) + "\n";
  out += "top_k " + std::to_string(key_.top_k) + "\n";
  out += "model " + key_.model_identity + "\n";
  out += "total_tokens ";
  append_number(out, total_tokens_);
  out += "\n";
  for (int layer = 0; layer < key_.n_layers; ++layer) {
    out += "layer " + std::to_string(layer);
    for (const double count : layer_counts(layer)) {
      out += ' ';
      append_number(out, count);
    }
    out += "\n";
  }
  for (int layer = 0; layer < key_.n_layers; ++layer) {
    out += "reuse " + std::to_string(layer);
    for (const double count : layer_reuse(layer)) {
      out += ' ';
      append_number(out, count);
    }
    out += "\n";
  }
  detail::Fnv1a64 checksum;
  checksum.add(out);
  out += std::string(kChecksumPrefix) + checksum.hex() + "\n";
  return out;
}

Result<UsageHistory> UsageHistory::parse(std::string_view text, const UsageHistoryKey& expected,
                                         std::string_view source) {
  const std::string name(source);
  const auto fail = [&](const std::string& why) { return make_error(name + ": " + why); };
  if (text.empty()) return fail("file is empty");
  const std::vector<std::string_view> lines = split_lines(text);
  if (lines.empty() || lines[0] != kMagic) return fail("not a coli usage history (first line is not '" + std::string(kMagic) + "')");
  const auto version_text = lines.size() > 1 ? field(lines[1], "format_version") : std::nullopt;
  const auto version = version_text ? parse_int(*version_text) : std::nullopt;
  if (!version) return fail("missing or malformed format_version line (truncated or corrupt)");
  if (*version != 1 && *version != kUsageHistoryVersion)  // version 1: the same without reuse lines
    return fail("format version " + std::to_string(*version) + ", this build reads versions 1 and " +
                std::to_string(kUsageHistoryVersion) + "; the next run writes a fresh history");

  // Integrity before meaning: a damaged file is reported as damaged, not as
  // whatever odd field the damage happens to produce.
  const size_t last_line_start = text.rfind('\n', text.size() - 2) + 1;  // npos + 1 == 0
  const std::string_view last_line = text.substr(last_line_start);
  if (text.back() != '\n' || !starts_with(last_line, kChecksumPrefix))
    return fail("truncated (no checksum line at the end)");
  detail::Fnv1a64 checksum;
  checksum.add(text.substr(0, last_line_start));
  if (trim(last_line.substr(kChecksumPrefix.size())) != checksum.hex())
    return fail("corrupt (checksum mismatch: the file was changed or damaged after it was written)");

  const auto header_int = [&](size_t line, std::string_view key) -> std::optional<std::int64_t> {
    if (line >= lines.size()) return std::nullopt;
    const auto value = field(lines[line], key);
    return value ? parse_int(*value) : std::nullopt;
  };
  const auto n_layers = header_int(2, "n_layers");
  const auto n_experts = header_int(3, "n_experts");
  const auto top_k = header_int(4, "top_k");
  const auto model = lines.size() > 5 ? field(lines[5], "model") : std::nullopt;
  const auto tokens_text = lines.size() > 6 ? field(lines[6], "total_tokens") : std::nullopt;
  const auto tokens = tokens_text ? parse_count(*tokens_text) : std::nullopt;
  if (!n_layers || !n_experts || !top_k || !model || !tokens) return fail("malformed header (lines 3-7)");

  if (*model != expected.model_identity)
    return fail("recorded for another model (identity " + std::string(*model) + ", this model is " +
                expected.model_identity + ")");
  const auto mismatch = [&](std::string_view what, std::int64_t found, int want) {
    return fail("recorded with " + std::string(what) + " " + std::to_string(found) + ", this model has " +
                std::to_string(want));
  };
  if (*n_layers != expected.n_layers) return mismatch("n_layers", *n_layers, expected.n_layers);
  if (*n_experts != expected.n_experts) return mismatch("n_experts", *n_experts, expected.n_experts);
  if (*top_k != expected.top_k) return mismatch("top_k", *top_k, expected.top_k);

  auto history = UsageHistory::create(expected);
  if (!history) return fail(history.error().message);
  history->total_tokens_ = *tokens;
  constexpr size_t kFirstLayerLine = 7;
  const size_t per_layer = *version == 1 ? 1 : 2;  // layer lines, then (version 2) reuse lines
  if (lines.size() != kFirstLayerLine + per_layer * static_cast<size_t>(expected.n_layers) + 1)
    return fail("expected " + std::to_string(per_layer * static_cast<size_t>(expected.n_layers)) +
                " layer and reuse lines, found " +
                std::to_string(static_cast<long long>(lines.size()) - static_cast<long long>(kFirstLayerLine) - 1));
  for (int layer = 0; layer < expected.n_layers; ++layer) {
    const std::vector<std::string_view> parts = split(lines[kFirstLayerLine + static_cast<size_t>(layer)], ' ');
    const std::string where = "layer line " + std::to_string(layer);
    if (parts.size() != static_cast<size_t>(expected.n_experts) + 2 || parts[0] != "layer" ||
        parse_int(parts[1]) != std::optional<std::int64_t>(layer))
      return fail(where + " is malformed (want 'layer " + std::to_string(layer) + "' and " +
                  std::to_string(expected.n_experts) + " counts)");
    for (int expert = 0; expert < expected.n_experts; ++expert) {
      const auto count = parse_count(parts[static_cast<size_t>(expert) + 2]);
      if (!count) return fail(where + ": count of expert " + std::to_string(expert) + " is not a finite number >= 0");
      history->counts_[history->index(layer, expert)] = *count;
    }
  }
  const size_t first_reuse_line = kFirstLayerLine + static_cast<size_t>(expected.n_layers);
  const auto width = static_cast<size_t>(expected.n_experts) + 1;
  for (int layer = 0; per_layer == 2 && layer < expected.n_layers; ++layer) {
    const std::vector<std::string_view> parts = split(lines[first_reuse_line + static_cast<size_t>(layer)], ' ');
    const std::string where = "reuse line " + std::to_string(layer);
    if (parts.size() != width + 2 || parts[0] != "reuse" || parse_int(parts[1]) != std::optional<std::int64_t>(layer))
      return fail(where + " is malformed (want 'reuse " + std::to_string(layer) + "' and " + std::to_string(width) +
                  " counts: distances 0.." + std::to_string(expected.n_experts - 1) + " and first uses)");
    for (size_t d = 0; d < width; ++d) {
      const auto count = parse_count(parts[d + 2]);
      if (!count) return fail(where + ": count " + std::to_string(d) + " is not a finite number >= 0");
      history->reuse_[static_cast<size_t>(layer) * width + d] = *count;
    }
  }
  return history;
}

Status UsageHistory::save(const std::filesystem::path& path) const { return write_file_atomically(path, serialize()); }

Result<UsageHistory> UsageHistory::load(const std::filesystem::path& path, const UsageHistoryKey& expected) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  return parse(*text, expected, path.string());
}

}  // namespace coli::experts
