// The .coli_usage text format (see usage_history.h): write, and a strict read
// that turns every kind of bad file into an Error.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

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

// "<tag> <i> <v_0> ... <v_{width-1}>" for each row i of `values` (row-major).
void append_rows(std::string& out, std::string_view tag, std::span<const double> values, size_t width) {
  for (size_t row = 0; row * width < values.size(); ++row) {
    out += std::string(tag) + " " + std::to_string(row);
    for (const double value : values.subspan(row * width, width)) {
      out += ' ';
      append_number(out, value);
    }
    out += "\n";
  }
}

// The rows append_rows wrote, from `lines` into `values`; the error text
// names the line. `values_are` ends the malformed message's description of
// a row, `value_name` precedes a value's index in the bad-value message.
std::optional<std::string> parse_rows(std::span<const std::string_view> lines, std::string_view tag, std::span<double> values,
                                      size_t width, std::string_view values_are, std::string_view value_name) {
  for (size_t row = 0; row < lines.size(); ++row) {
    const std::vector<std::string_view> parts = split(lines[row], ' ');
    const std::string where = std::string(tag) + " line " + std::to_string(row);
    if (parts.size() != width + 2 || parts[0] != tag ||
        parse_int(parts[1]) != std::optional<std::int64_t>(static_cast<std::int64_t>(row)))
      return where + " is malformed (want '" + std::string(tag) + " " + std::to_string(row) + "' and " +
             std::to_string(width) + " counts" + std::string(values_are) + ")";
    for (size_t i = 0; i < width; ++i) {
      const auto value = parse_count(parts[i + 2]);
      if (!value) return where + ": " + std::string(value_name) + std::to_string(i) + " is not a finite number >= 0";
      values[row * width + i] = *value;
    }
  }
  return std::nullopt;
}

void append_ints(std::string& out, std::span<const int> values) {
  for (const int value : values) out += ' ' + std::to_string(value);
  out += '\n';
}

// "trace_passes <n> <tokens...>", "trace_starts <n> <first positions...>",
// then "trace <i> <ids...>" per layer.
void append_trace(std::string& out, const RoutingTrace& trace) {
  const auto passes = trace.pass_tokens();
  out += "trace_passes " + std::to_string(passes.size());
  append_ints(out, passes);
  out += "trace_starts " + std::to_string(passes.size());
  append_ints(out, trace.pass_starts());
  for (int layer = 0; layer < trace.n_layers(); ++layer) {
    out += "trace " + std::to_string(layer);
    append_ints(out, trace.layer(layer));
  }
}

// The integers after `tag` (and, for a per-layer line, its index `row`),
// each in [low, high]; the error names the line.
Result<std::vector<int>> parse_ints(std::string_view line, std::string_view tag, std::optional<int> row, int low, int high) {
  std::vector<std::string_view> parts = split(line, ' ');
  const std::string where = std::string(tag) + (row ? " line " + std::to_string(*row) : std::string(" line"));
  const size_t skip = row ? 2 : 1;
  if (parts.size() < skip || parts[0] != tag ||
      (row && parse_int(parts[1]) != std::optional<std::int64_t>(*row)))
    return make_error(where + " is malformed (want '" + std::string(tag) + (row ? " " + std::to_string(*row) : "") + " ...')");
  std::vector<int> values;
  values.reserve(parts.size() - skip);
  for (size_t i = skip; i < parts.size(); ++i) {
    const auto value = parse_int(parts[i]);
    if (!value || *value < low || *value > high)
      return make_error(where + ": value " + std::to_string(i - skip) + " is not an integer in " + std::to_string(low) +
                        ".." + std::to_string(high));
    values.push_back(static_cast<int>(*value));
  }
  return values;
}

// A "<tag> <n> <values...>" line of the trace: the values, n of them, each in [low, high].
Result<std::vector<int>> parse_counted_ints(std::string_view line, std::string_view tag, int low, int high) {
  auto values = parse_ints(line, tag, std::nullopt, low, high);
  if (!values) return values.error();
  if (values->empty() || (*values)[0] != static_cast<int>(values->size()) - 1)
    return make_error(std::string(tag) + " line: the first value must count the values that follow");
  values->erase(values->begin());
  return values;
}

// The trace lines into `trace`: trace_passes, trace_starts (version 8 on:
// `with_starts`), then one per layer.
Status parse_trace(std::span<const std::string_view> lines, const UsageHistoryKey& key, bool with_starts,
                   RoutingTrace& trace) {
  auto passes = parse_counted_ints(lines[0], "trace_passes", 0, kRoutingTraceTokens);
  if (!passes) return passes.error();
  std::vector<int> starts;
  if (with_starts) {
    auto read = parse_counted_ints(lines[1], "trace_starts", kUnknownStart, std::numeric_limits<int>::max());
    if (!read) return read.error();
    if (read->size() != passes->size())
      return make_error("trace_starts line: " + std::to_string(read->size()) + " first positions for " +
                        std::to_string(passes->size()) + " passes (one each)");
    starts = std::move(*read);
  }
  const std::size_t first_layer_line = with_starts ? 2 : 1;
  std::vector<std::vector<int>> ids;
  for (int layer = 0; layer < key.n_layers; ++layer) {
    auto row = parse_ints(lines[first_layer_line + static_cast<size_t>(layer)], "trace", layer, 0, key.n_experts - 1);
    if (!row) return row.error();
    ids.push_back(std::move(*row));
  }
  return trace.assign(std::move(*passes), std::move(ids), std::move(starts));
}

// "read_rounds <compute_threads> <record_bytes> <io_threads> <n> <rounds_1>
// <seconds_1> ... <rounds_n> <seconds_n> <waited> <wake_seconds> <d>
// <decode_rounds_1> <decode_seconds_1> ... <decode_rounds_d>
// <decode_seconds_d> <calm_tokens> <calm_seconds> <waiting_tokens>
// <waiting_rounds> <waiting_seconds>": n (d) the largest read count with a
// round (a decode round; 0: none).
void append_read_rounds(std::string& out, const ReadRounds& r) {
  std::size_t n = 0;
  for (std::size_t m = 1; m < r.rounds.size(); ++m) n = r.rounds[m] > 0 ? m : n;
  out += "read_rounds " + std::to_string(r.compute_threads) + " " + std::to_string(r.record_bytes) + " " +
         std::to_string(r.io_threads) + " " + std::to_string(n);
  for (std::size_t m = 1; m <= n; ++m) {
    out += " " + std::to_string(r.rounds[m]) + " ";
    append_number(out, r.seconds[m]);
  }
  out += " " + std::to_string(r.waited) + " ";
  append_number(out, r.wake_seconds);
  std::size_t d = 0;
  for (std::size_t m = 1; m < r.decode_rounds.size(); ++m) d = r.decode_rounds[m] > 0 ? m : d;
  out += " " + std::to_string(d);
  for (std::size_t m = 1; m <= d; ++m) {
    out += " " + std::to_string(r.decode_rounds[m]) + " ";
    append_number(out, r.decode_seconds[m]);
  }
  out += " " + std::to_string(r.calm_tokens) + " ";
  append_number(out, r.calm_seconds);
  out += " " + std::to_string(r.waiting_tokens) + " " + std::to_string(r.waiting_rounds) + " ";
  append_number(out, r.waiting_seconds);
  out += "\n";
}

// `count` pairs of a round count and its seconds from parts[at] on into
// `rounds` and `seconds` (index 1 up); the error names the read count of
// the first pair that does not parse, and `what` rounds they are.
Status parse_round_pairs(std::span<const std::string_view> parts, std::size_t at, std::size_t count,
                         std::vector<std::uint64_t>& rounds, std::vector<double>& seconds, const std::string& what) {
  for (std::size_t m = 1; m <= count; ++m) {
    const auto n = parse_int(parts[at + 2 * (m - 1)]);
    const auto s = parse_count(parts[at + 2 * (m - 1) + 1]);
    if (!n || *n < 0 || *n > (std::int64_t{1} << 50) || !s)
      return make_error("read_rounds line: " + what + " of " + std::to_string(m) +
                        " reads need a whole count and seconds >= 0");
    rounds[m] = static_cast<std::uint64_t>(*n), seconds[m] = *s;
  }
  return Ok{};
}

std::string read_rounds_format(std::int64_t version) {
  return std::string("read_rounds line is malformed (want 'read_rounds ") + (version >= 6 ? "<compute_threads> " : "") +
         "<record_bytes> <io_threads> <n>' and n pairs of a round count and seconds, n at most " +
         std::to_string(ReadRounds::kLargest) + (version >= 7 ? ", then <waited> <wake_seconds>" : "") +
         (version >= 9 ? ", then <d> and d such pairs of the decode rounds" : "") +
         (version >= 10 ? ", then <calm_tokens> <calm_seconds> <waiting_tokens> <waiting_rounds> <waiting_seconds>" : "") +
         ")";
}

// A read_rounds line into `rounds` (version 5's has no compute_threads,
// version 6's no waited and wake_seconds, version 8's no decode pairs,
// version 9's no generated tokens); the error names the line.
Status parse_read_rounds(std::string_view line, std::int64_t version, ReadRounds& rounds) {
  const std::vector<std::string_view> parts = split(line, ' ');
  const std::size_t first = version >= 6 ? 2 : 1;  // index of record_bytes
  const auto whole = [&](std::size_t i, std::int64_t low, std::int64_t high) -> std::optional<std::int64_t> {
    const auto v = i < parts.size() ? parse_int(parts[i]) : std::nullopt;
    return v && *v >= low && *v <= high ? v : std::nullopt;
  };
  const auto team = version >= 6 ? whole(1, 0, 4096) : std::optional<std::int64_t>(0);
  const auto bytes = whole(first, 0, std::int64_t{1} << 40), threads = whole(first + 1, 0, 4096);
  const auto n = whole(first + 2, 0, static_cast<std::int64_t>(ReadRounds::kLargest));
  const std::size_t wakes = version >= 7 ? 2 : 0;  // waited, wake_seconds
  const std::size_t after_pairs = n ? first + 3 + 2 * static_cast<std::size_t>(*n) : 0;
  const auto d = version >= 9 ? whole(after_pairs + wakes, 0, static_cast<std::int64_t>(ReadRounds::kLargest))
                              : std::optional<std::int64_t>(0);
  const std::size_t decode_fields = version >= 9 && d ? 1 + 2 * static_cast<std::size_t>(*d) : 0;
  const std::size_t tokens_at = after_pairs + wakes + decode_fields, token_fields = version >= 10 ? 5 : 0;
  if (parts.empty() || parts[0] != "read_rounds" || !team || !bytes || !threads || !n || !d ||
      parts.size() != tokens_at + token_fields)
    return make_error(read_rounds_format(version));
  ReadRounds out;
  out.compute_threads = static_cast<int>(*team);
  out.record_bytes = static_cast<std::uint64_t>(*bytes), out.io_threads = static_cast<int>(*threads);
  if (Status s = parse_round_pairs(parts, first + 3, static_cast<std::size_t>(*n), out.rounds, out.seconds, "rounds"); !s)
    return s;
  if (wakes) {
    const auto waited = whole(after_pairs, 0, std::int64_t{1} << 50);
    const auto wake = parse_count(parts[after_pairs + 1]);
    if (!waited || !wake) return make_error("read_rounds line: the waited rounds need a whole count and seconds >= 0");
    out.waited = static_cast<std::uint64_t>(*waited), out.wake_seconds = *wake;
  }
  if (Status s = parse_round_pairs(parts, after_pairs + wakes + 1, static_cast<std::size_t>(*d), out.decode_rounds,
                                   out.decode_seconds, "decode rounds");
      !s)
    return s;
  if (token_fields) {
    const auto calm = whole(tokens_at, 0, std::int64_t{1} << 50), waiting = whole(tokens_at + 2, 0, std::int64_t{1} << 50);
    const auto token_rounds = whole(tokens_at + 3, 0, std::int64_t{1} << 50);
    const auto calm_s = parse_count(parts[tokens_at + 1]), waiting_s = parse_count(parts[tokens_at + 4]);
    if (!calm || !waiting || !token_rounds || !calm_s || !waiting_s || (*waiting > 0) != (*token_rounds > 0) ||
        *token_rounds < *waiting || static_cast<std::uint64_t>(*token_rounds) > out.waited)
      return make_error("read_rounds line: the generated tokens need whole counts, each waiting token at least one "
                        "waited round and those rounds among <waited>, and seconds >= 0");
    out.calm_tokens = static_cast<std::uint64_t>(*calm), out.calm_seconds = *calm_s;
    out.waiting_tokens = static_cast<std::uint64_t>(*waiting), out.waiting_rounds = static_cast<std::uint64_t>(*token_rounds);
    out.waiting_seconds = *waiting_s;
  }
  if (!out.empty() && out.record_bytes == 0) return make_error("read_rounds line: rounds without a record size");
  rounds = std::move(out);
  return Ok{};
}

// The read_rounds lines (`lines`, after the trace) into `history`: version
// 5 has exactly one, version 6 up to kMaxReadRoundSets.
Status parse_read_round_sets(std::span<const std::string_view> lines, std::int64_t version, UsageHistory& history) {
  for (const std::string_view line : lines) {
    ReadRounds rounds;
    if (Status s = parse_read_rounds(line, version, rounds); !s) return s;
    if (Status s = history.set_read_rounds(rounds); !s) return make_error("read_rounds line: " + s.error().message);
  }
  return Ok{};
}

// The damage a file shows before its meaning is read: truncation (no
// checksum line at the end) or a checksum mismatch; nullopt when intact.
// Integrity before meaning: a damaged file is reported as damaged, not as
// whatever odd field the damage happens to produce.
std::optional<std::string> damage(std::string_view text) {
  const size_t last_line_start = text.rfind('\n', text.size() - 2) + 1;  // npos + 1 == 0
  const std::string_view last_line = text.substr(last_line_start);
  if (text.back() != '\n' || !starts_with(last_line, kChecksumPrefix)) return "truncated (no checksum line at the end)";
  detail::Fnv1a64 checksum;
  checksum.add(text.substr(0, last_line_start));
  if (trim(last_line.substr(kChecksumPrefix.size())) != checksum.hex())
    return "corrupt (checksum mismatch: the file was changed or damaged after it was written)";
  return std::nullopt;
}

struct Header {
  double total_tokens = 0;  // the rest of the header is the expected key, checked
};

// Lines 3-7 (n_layers, n_experts, top_k, model, total_tokens), checked
// against the model this history is loaded for; the error says which differs.
Result<Header> parse_header(std::span<const std::string_view> lines, const UsageHistoryKey& expected) {
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
  if (!n_layers || !n_experts || !top_k || !model || !tokens) return make_error("malformed header (lines 3-7)");
  if (*model != expected.model_identity)
    return make_error("recorded for another model (identity " + std::string(*model) + ", this model is " +
                      expected.model_identity + ")");
  const auto mismatch = [&](std::string_view what, std::int64_t found, int want) {
    return make_error("recorded with " + std::string(what) + " " + std::to_string(found) + ", this model has " +
                      std::to_string(want));
  };
  if (*n_layers != expected.n_layers) return mismatch("n_layers", *n_layers, expected.n_layers);
  if (*n_experts != expected.n_experts) return mismatch("n_experts", *n_experts, expected.n_experts);
  if (*top_k != expected.top_k) return mismatch("top_k", *top_k, expected.top_k);
  return Header{*tokens};
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
  append_rows(out, "layer", counts_, static_cast<size_t>(key_.n_experts));
  append_rows(out, "reuse", reuse_, static_cast<size_t>(key_.n_experts) + 1);
  append_rows(out, "decode_reuse", decode_reuse_, static_cast<size_t>(key_.n_experts) + 1);
  append_trace(out, trace_);
  for (const ReadRounds& rounds : read_round_sets_) append_read_rounds(out, rounds);
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
  // Version 1: no reuse lines; version 2: no decode_reuse lines.
  if (*version < 1 || *version > kUsageHistoryVersion)
    return fail("format version " + std::to_string(*version) + ", this build reads versions 1 to " +
                std::to_string(kUsageHistoryVersion) + "; the next run writes a fresh history");
  if (auto damaged = damage(text)) return fail(*damaged);
  auto header = parse_header(lines, expected);
  if (!header) return fail(header.error().message);

  auto history = UsageHistory::create(expected);
  if (!history) return fail(history.error().message);
  history->total_tokens_ = header->total_tokens;
  constexpr size_t kFirstLayerLine = 7;
  // Layer lines, then reuse (2), decode_reuse (3) and trace (4, after its
  // trace_passes line and, from 8, its trace_starts line) lines, then one
  // read_rounds line (5) or one per setting, none to kMaxReadRoundSets (6).
  const auto per_layer = static_cast<size_t>(std::min<std::int64_t>(*version, 4));
  const size_t trace_heads = *version >= 8 ? 2 : *version >= 4 ? 1 : 0;
  const size_t fixed_lines = per_layer * static_cast<size_t>(expected.n_layers) + trace_heads;
  const size_t found = lines.size() - std::min(lines.size(), kFirstLayerLine + 1);
  const size_t most_rounds = *version >= 6 ? kMaxReadRoundSets : *version == 5 ? 1 : 0;
  const size_t least_rounds = *version == 5 ? 1 : 0;
  if (found < fixed_lines + least_rounds || found > fixed_lines + most_rounds)
    return fail("expected " + std::to_string(fixed_lines + least_rounds) +
                (most_rounds > least_rounds ? " to " + std::to_string(fixed_lines + most_rounds) : std::string()) +
                " layer, reuse, trace and read_rounds lines, found " + std::to_string(found));
  const auto layers = static_cast<size_t>(expected.n_layers), experts = static_cast<size_t>(expected.n_experts);
  const auto rows = std::span<const std::string_view>(lines).subspan(kFirstLayerLine, found);
  if (auto bad = parse_rows(rows.first(layers), "layer", history->counts_, experts, "", "count of expert "))
    return fail(*bad);
  const std::string reuse_values = ": distances 0.." + std::to_string(experts - 1) + " and first uses";
  if (per_layer >= 2) {
    if (auto bad = parse_rows(rows.subspan(layers, layers), "reuse", history->reuse_, experts + 1, reuse_values, "count "))
      return fail(*bad);
  }
  if (per_layer >= 3) {
    if (auto bad = parse_rows(rows.subspan(2 * layers, layers), "decode_reuse", history->decode_reuse_, experts + 1,
                              reuse_values, "count "))
      return fail(*bad);
  }
  if (per_layer >= 4) {
    if (Status s = parse_trace(rows.subspan(3 * layers, layers + trace_heads), expected, trace_heads == 2, history->trace_); !s)
      return fail(s.error().message);
  }
  if (Status s = parse_read_round_sets(rows.subspan(fixed_lines), *version, *history); !s) return fail(s.error().message);
  return history;
}

Status UsageHistory::save(const std::filesystem::path& path) const { return write_file_atomically(path, serialize()); }

Result<UsageHistory> UsageHistory::load(const std::filesystem::path& path, const UsageHistoryKey& expected) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  return parse(*text, expected, path.string());
}

Result<std::optional<UsageHistory>> UsageHistory::load_if_present(const std::filesystem::path& path,
                                                                  const UsageHistoryKey& expected) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<UsageHistory>();
  auto loaded = load(path, expected);
  if (!loaded) return loaded.error();
  return std::optional(std::move(*loaded));
}

}  // namespace coli::experts
