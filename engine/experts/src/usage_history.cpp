#include "coli/experts/usage_history.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>

#include "fnv1a.h"

namespace coli::experts {

std::string usage_model_identity(std::string_view config_text, std::span<const std::string> tensor_names) {
  detail::Fnv1a64 hash;
  hash.add(config_text);
  for (const std::string& name : tensor_names) {
    hash.add(std::string_view("\0", 1));  // separator: {"ab","c"} != {"a","bc"}
    hash.add(name);
  }
  return "fnv1a64:" + hash.hex();
}

Result<UsageHistory> UsageHistory::create(UsageHistoryKey key) {
  if (key.n_layers < 1 || key.n_experts < 1 || key.top_k < 1)
    return make_error("usage history: n_layers, n_experts and top_k must be >= 1");
  if (key.top_k > key.n_experts) return make_error("usage history: top_k exceeds n_experts");
  if (key.model_identity.empty()) return make_error("usage history: empty model identity");
  const bool has_space = std::any_of(key.model_identity.begin(), key.model_identity.end(),
                                     [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; });
  if (has_space) return make_error("usage history: model identity '" + key.model_identity + "' contains whitespace");
  return UsageHistory(std::move(key));
}

UsageHistory::UsageHistory(UsageHistoryKey key)
    : key_(std::move(key)),
      counts_(static_cast<size_t>(key_.n_layers) * static_cast<size_t>(key_.n_experts), 0.0),
      reuse_(static_cast<size_t>(key_.n_layers) * (static_cast<size_t>(key_.n_experts) + 1), 0.0),
      decode_reuse_(reuse_.size(), 0.0),
      trace_(RoutingTrace::create(key_.n_layers, key_.top_k).value()) {}  // create() checked the key

size_t UsageHistory::index(int layer, int expert) const {
  return static_cast<size_t>(layer) * static_cast<size_t>(key_.n_experts) + static_cast<size_t>(expert);
}

Status UsageHistory::record(int layer, std::span<const int> experts) {
  if (layer < 0 || layer >= key_.n_layers)
    return make_error("usage history: layer " + std::to_string(layer) + " out of range (n_layers " +
                      std::to_string(key_.n_layers) + ")");
  for (const int expert : experts)
    if (expert < 0 || expert >= key_.n_experts)
      return make_error("usage history: expert " + std::to_string(expert) + " out of range (n_experts " +
                        std::to_string(key_.n_experts) + ")");
  for (const int expert : experts) counts_[index(layer, expert)] += 1.0;
  return Ok{};
}

Status UsageHistory::add_counts(const std::vector<std::vector<std::uint64_t>>& counts, std::uint64_t tokens) {
  if (counts.size() != static_cast<size_t>(key_.n_layers))
    return make_error("usage history: counts for " + std::to_string(counts.size()) + " layers, the history has " +
                      std::to_string(key_.n_layers));
  for (const auto& layer : counts)
    if (layer.size() != static_cast<size_t>(key_.n_experts))
      return make_error("usage history: counts for " + std::to_string(layer.size()) + " experts, the history has " +
                        std::to_string(key_.n_experts));
  for (int layer = 0; layer < key_.n_layers; ++layer)
    for (int expert = 0; expert < key_.n_experts; ++expert)
      counts_[index(layer, expert)] += static_cast<double>(counts[static_cast<size_t>(layer)][static_cast<size_t>(expert)]);
  add_tokens(tokens);
  return Ok{};
}

namespace {

// Adds [layer][distance] counts into a row-major table of `layers` x `width`.
Status add_distances(const std::vector<std::vector<std::uint64_t>>& reuse, int layers, size_t width,
                     std::vector<double>& into) {
  if (reuse.size() != static_cast<size_t>(layers) ||
      std::any_of(reuse.begin(), reuse.end(), [&](const auto& layer) { return layer.size() != width; }))
    return make_error("usage history: reuse distances of another shape (want " + std::to_string(layers) + " layers x " +
                      std::to_string(width) + " distances)");
  for (size_t layer = 0; layer < reuse.size(); ++layer)
    for (size_t d = 0; d < width; ++d) into[layer * width + d] += static_cast<double>(reuse[layer][d]);
  return Ok{};
}

}  // namespace

Status UsageHistory::add_reuse(const std::vector<std::vector<std::uint64_t>>& reuse) {
  return add_distances(reuse, key_.n_layers, static_cast<size_t>(key_.n_experts) + 1, reuse_);
}

Status UsageHistory::add_decode_reuse(const std::vector<std::vector<std::uint64_t>>& reuse) {
  return add_distances(reuse, key_.n_layers, static_cast<size_t>(key_.n_experts) + 1, decode_reuse_);
}

Status UsageHistory::add_trace(const RoutingTrace& trace) { return trace_.append(trace); }

namespace {
// The decode rounds are a subset of the rounds: as many read counts, none
// above the rounds of its count, seconds finite and (to rounding) within theirs.
Status check_decode_rounds(const ReadRounds& r) {
  if (r.decode_rounds.size() != r.rounds.size() || r.decode_seconds.size() != r.rounds.size())
    return make_error("usage history: decode rounds need " + std::to_string(r.rounds.size()) + " read counts");
  for (std::size_t m = 0; m < r.rounds.size(); ++m) {
    const double d = r.decode_seconds[m];
    if (r.decode_rounds[m] > r.rounds[m] || !std::isfinite(d) || d < 0.0 || d > r.seconds[m] * (1 + 1e-9) + 1e-12)
      return make_error("usage history: " + std::to_string(r.decode_rounds[m]) + " decode rounds of " + std::to_string(m) +
                        " reads (" + std::to_string(d) + " s) exceed the " + std::to_string(r.rounds[m]) +
                        " rounds of that count (" + std::to_string(r.seconds[m]) + " s) they are part of");
  }
  return Ok{};
}
}  // namespace

Status UsageHistory::set_read_rounds(const ReadRounds& rounds) {
  if (rounds.empty()) return Ok{};
  const bool sized = rounds.rounds.size() == ReadRounds::kLargest + 1 && rounds.seconds.size() == rounds.rounds.size();
  if (!sized || rounds.record_bytes == 0 || rounds.io_threads < 0 ||
      !std::all_of(rounds.seconds.begin(), rounds.seconds.end(), [](double s) { return std::isfinite(s) && s >= 0.0; }) ||
      !std::isfinite(rounds.wake_seconds) || rounds.wake_seconds < 0.0)
    return make_error("usage history: read rounds need a record size, an I/O thread count >= 0 and " +
                      std::to_string(ReadRounds::kLargest + 1) + " finite seconds >= 0, and wake-ups >= 0");
  if (Status s = check_decode_rounds(rounds); !s) return s;
  std::erase_if(read_round_sets_, [&](const ReadRounds& kept) { return kept.same_setting(rounds); });
  read_round_sets_.push_back(rounds);
  if (read_round_sets_.size() > kMaxReadRoundSets) read_round_sets_.erase(read_round_sets_.begin());
  return Ok{};
}

Status UsageHistory::merge(const UsageHistory& newer, double decay) {
  if (!(decay >= 0.0 && decay <= 1.0))  // also refuses NaN
    return make_error("usage history: decay " + std::to_string(decay) + " is outside [0, 1]");
  if (!(newer.key_ == key_))
    return make_error("usage history: cannot merge a run of model " + newer.key_.model_identity + " into one of " +
                      key_.model_identity + " (or their layer/expert/top_k shapes differ)");
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] = counts_[i] * decay + newer.counts_[i];
  for (size_t i = 0; i < reuse_.size(); ++i) reuse_[i] = reuse_[i] * decay + newer.reuse_[i];
  for (size_t i = 0; i < decode_reuse_.size(); ++i) decode_reuse_[i] = decode_reuse_[i] * decay + newer.decode_reuse_[i];
  total_tokens_ = total_tokens_ * decay + newer.total_tokens_;
  if (decay == 0.0) trace_ = newer.trace_;
  else if (Status s = trace_.append(newer.trace_); !s) return s;  // same key: same shape
  for (const ReadRounds& rounds : newer.read_round_sets_) {
    if (Status s = set_read_rounds(rounds); !s) return s;  // checked when newer took them
  }
  return Ok{};
}

double UsageHistory::count(int layer, int expert) const {
  if (layer < 0 || layer >= key_.n_layers || expert < 0 || expert >= key_.n_experts) return 0.0;
  return counts_[index(layer, expert)];
}

std::span<const double> UsageHistory::layer_counts(int layer) const {
  if (layer < 0 || layer >= key_.n_layers) return {};
  return std::span<const double>(counts_).subspan(index(layer, 0), static_cast<size_t>(key_.n_experts));
}

std::span<const double> UsageHistory::layer_decode_reuse(int layer) const {
  if (layer < 0 || layer >= key_.n_layers) return {};
  const auto width = static_cast<size_t>(key_.n_experts) + 1;
  return std::span<const double>(decode_reuse_).subspan(static_cast<size_t>(layer) * width, width);
}

std::span<const double> UsageHistory::layer_reuse(int layer) const {
  if (layer < 0 || layer >= key_.n_layers) return {};
  const auto width = static_cast<size_t>(key_.n_experts) + 1;
  return std::span<const double>(reuse_).subspan(static_cast<size_t>(layer) * width, width);
}

ReuseDistances::ReuseDistances(int n_layers, int n_experts)
    : last_use_(static_cast<size_t>(n_layers), std::vector<std::uint64_t>(static_cast<size_t>(n_experts), 0)),
      clock_(static_cast<size_t>(n_layers), 0),
      counts_(static_cast<size_t>(n_layers), std::vector<std::uint64_t>(static_cast<size_t>(n_experts) + 1, 0)),
      decode_counts_(counts_) {}

void ReuseDistances::record(int layer, std::span<const int> experts, bool decode) {
  std::vector<std::uint64_t>& last_use = last_use_[static_cast<size_t>(layer)];
  std::vector<std::uint64_t>& counts = counts_[static_cast<size_t>(layer)];
  std::vector<std::uint64_t>& decode_counts = decode_counts_[static_cast<size_t>(layer)];
  // Distances against the stack before this token (its choices are used
  // together): an expert's depth is how many experts were used after it
  // last was, a count the compiler vectorises (the stack itself, searched,
  // erased from and shifted per token, cost a 128-expert layer 1 us).
  for (const int expert : experts) {
    const std::uint64_t mine = last_use[static_cast<size_t>(expert)];
    size_t d = counts.size() - 1;  // never used: beyond every depth
    if (mine > 0) {
      d = 0;
      for (const std::uint64_t other : last_use) d += other > mine ? 1 : 0;
    }
    ++counts[d];
    if (decode) ++decode_counts[d];
  }
  // Then the token's experts move to the top in their order: the first the most recent.
  std::uint64_t& clock = clock_[static_cast<size_t>(layer)];
  for (size_t i = 0; i < experts.size(); ++i) last_use[static_cast<size_t>(experts[i])] = clock + experts.size() - i;
  clock += experts.size();
}

Result<std::vector<int>> pins_from_history(const UsageHistory& history, int layer, int n_pins) {
  if (layer < 0 || layer >= history.key().n_layers)
    return make_error("pins_from_history: layer " + std::to_string(layer) + " out of range (n_layers " +
                      std::to_string(history.key().n_layers) + ")");
  if (n_pins < 0) return make_error("pins_from_history: n_pins must be >= 0");
  const std::span<const double> counts = history.layer_counts(layer);
  std::vector<int> experts(counts.size());
  std::iota(experts.begin(), experts.end(), 0);
  // Most used first; equal counts keep the lower id first.
  std::stable_sort(experts.begin(), experts.end(),
                   [&](int a, int b) { return counts[static_cast<size_t>(a)] > counts[static_cast<size_t>(b)]; });
  std::vector<int> pins;
  for (const int expert : experts) {
    if (static_cast<int>(pins.size()) == n_pins || counts[static_cast<size_t>(expert)] <= 0.0) break;
    pins.push_back(expert);
  }
  return pins;
}

Result<std::vector<std::vector<int>>> pins_for_every_layer(const UsageHistory& history, int n_pins) {
  std::vector<std::vector<int>> pins;
  for (int layer = 0; layer < history.key().n_layers; ++layer) {
    auto chosen = pins_from_history(history, layer, n_pins);
    if (!chosen) return chosen.error();
    pins.push_back(std::move(*chosen));
  }
  return pins;
}

}  // namespace coli::experts
