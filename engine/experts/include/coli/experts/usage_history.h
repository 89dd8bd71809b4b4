// Per-layer, per-expert routing counts recorded by the engine and read back by
// the next plan to choose pinned experts (design.md: .coli_usage).
//
// File format (text, one record per line, version kUsageHistoryVersion):
//   coli-usage-history
//   format_version 10
//   n_layers <int>  n_experts <int>  top_k <int>     (one per line)
//   model <identity, no whitespace>
//   total_tokens <double>
//   layer <i> <count_0> ... <count_{n_experts-1}>      (i = 0..n_layers-1)
//   reuse <i> <d_0> ... <d_{n_experts-1}> <first>       (version 2; i = 0..n_layers-1)
//   decode_reuse <i> <d_0> ... <first>                   (version 3; the same, decode tokens only)
//   trace_passes <n> <tokens_0> ... <tokens_{n-1}>       (version 4; the routing trace's passes, oldest first)
//   trace_starts <n> <first_0> ... <first_{n-1}>         (version 8; each pass's first KV position, -1 unknown)
//   trace <i> <expert ids, top_k a token, pass by pass>  (version 4; i = 0..n_layers-1)
//   read_rounds <compute_threads> <record_bytes> <io_threads> <n> <rounds_1> <seconds_1> ... <rounds_n> <seconds_n>
//               <waited> <wake_seconds> <d> <decode_rounds_1> <decode_seconds_1> ... <decode_rounds_d> <decode_seconds_d>
//               <calm_tokens> <calm_seconds> <waiting_tokens> <waiting_rounds> <waiting_seconds>
//                                                        (version 9: without the five token fields;
//                                                         version 8: without <d> and its pairs either; version 6: 0 to
//                                                         kMaxReadRoundSets lines, one per team, without <waited>
//                                                         <wake_seconds> either; version 5: exactly one, without
//                                                         <compute_threads> either)
//   checksum fnv1a64:<16 hex digits of every byte before this line>
// reuse: how many routings found their expert at LRU stack distance d (d
// other experts of the layer were used more recently; a token's choices are
// measured against the stack before that token), and how many were its first
// use. An LRU cache of C slots hits exactly the routings at d < C (Mattson),
// so the planner reads any cap's hit rate from it. decode_reuse counts only
// the routings of single-token passes (generated tokens): a prompt's routings
// and a generation's differ (a greedy decode often repeats its experts), and
// decode speed depends on the latter. trace: the most recent routings
// (routing_trace.h), which the planner replays through the engine's cache.
// trace_starts: where each pass began in its context, so a decode run that
// starts a context (first position 0) is told from one that follows its own
// prompt (they read different experts: the latter reuses the prompt's).
// read_rounds: the rounds of expert reads the latest run that read any made
// beside each compute team (and I/O pool and record size), by how many
// records each read, and their seconds (submission to the last landing):
// what a batch of m reads costs on this machine for this model's file,
// which the planner prefers to the probe's test file. Rounds depend on the
// team where compute and I/O threads share cores, so each team keeps its own.
// waited / wake_seconds: the rounds whose compute thread was still waiting
// at their last landing, and its wake-ups summed (ReadRounds). The decode
// pairs: the rounds of single-token passes alone (counted in the pairs
// before too), which the planner prices decode by.
// Version 1 files (no reuse lines), version 2 (no decode_reuse lines),
// version 3 (no trace), version 4 (no read_rounds), version 5 (one
// read_rounds line, its team not recorded: compute_threads 0), version 6
// (no wake-ups: waited 0), version 7 (no trace_starts: each -1) and
// version 8 (no decode rounds apart) still load.
// Counts are doubles because merging applies exponential decay. Loading never
// crashes: a missing, empty, foreign, truncated, corrupt, version-mismatched
// or other-model file is an Error the engine reports before ignoring it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/result.h"
#include "coli/experts/read_rounds.h"
#include "coli/experts/routing_trace.h"

namespace coli::experts {

inline constexpr int kUsageHistoryVersion = 10;

// Which model (and routing shape) a history belongs to.
struct UsageHistoryKey {
  int n_layers = 0;
  int n_experts = 0;
  int top_k = 0;
  std::string model_identity;  // e.g. usage_model_identity(config, tensor names)
  bool operator==(const UsageHistoryKey&) const = default;
};

// "fnv1a64:<hex>" over the config text and every tensor name (in order): a
// different checkpoint layout or config gives a different identity.
std::string usage_model_identity(std::string_view config_text, std::span<const std::string> tensor_names);

class UsageHistory {
 public:
  // Settings (team, pool, record size) whose read rounds a history keeps.
  static constexpr std::size_t kMaxReadRoundSets = 16;

  // Errors: a dimension < 1, top_k > n_experts, an identity that is empty or
  // contains whitespace (it must fit on one header line).
  static Result<UsageHistory> create(UsageHistoryKey key);

  // Counts one routing of each listed expert at `layer` (a token's top_k
  // choices, or a whole batch's). Errors on a layer or expert out of range;
  // nothing is counted then.
  Status record(int layer, std::span<const int> experts);
  // Adds whole routing counts ([layer][expert], e.g. MoeModel::routing_counts)
  // and the tokens they came from. Errors on counts of another shape;
  // nothing is counted then.
  Status add_counts(const std::vector<std::vector<std::uint64_t>>& counts, std::uint64_t tokens);
  // Adds reuse-distance counts ([layer][distance 0..n_experts-1, then first
  // uses], e.g. MoeModel::reuse_distances). Errors on another shape.
  Status add_reuse(const std::vector<std::vector<std::uint64_t>>& reuse);
  // The same for the decode tokens' routings alone (MoeModel::decode_reuse_distances).
  Status add_decode_reuse(const std::vector<std::vector<std::uint64_t>>& reuse);
  // Appends a run's routing trace (MoeModel::routing_trace), keeping the
  // window's most recent tokens. Errors on another shape.
  Status add_trace(const RoutingTrace& trace);
  // A run's expert-read rounds (ModelStats::expert_read_rounds): they
  // replace the rounds of the same setting (ReadRounds::same_setting) and
  // keep the others; beyond kMaxReadRoundSets the oldest setting goes. A run
  // that read nothing leaves the ones recorded before. Errors: a round count
  // or seconds that is not finite and >= 0, rounds without a record size,
  // more decode rounds (or seconds) of a read count than rounds of it.
  Status set_read_rounds(const ReadRounds& rounds);
  // Tokens the recorded routings came from (for rates and decay).
  void add_tokens(std::uint64_t tokens) { total_tokens_ += static_cast<double>(tokens); }

  // Folds a newer run in: this = this * decay + newer, counts and tokens;
  // the newer trace follows this one's (decay 0: the newer trace alone);
  // the newer run's read rounds replace these of their setting (the disk
  // as it is now), as set_read_rounds.
  // decay 1 keeps everything, 0 keeps only the newer run. Errors: decay
  // outside [0, 1], or a newer run of another key (nothing changes then).
  Status merge(const UsageHistory& newer, double decay);

  const UsageHistoryKey& key() const { return key_; }
  double total_tokens() const { return total_tokens_; }
  double count(int layer, int expert) const;              // 0 when out of range
  std::span<const double> layer_counts(int layer) const;  // empty when out of range
  std::span<const double> layer_reuse(int layer) const;   // n_experts + 1 values; empty when out of range
  std::span<const double> layer_decode_reuse(int layer) const;  // the same, decode tokens only
  const RoutingTrace& trace() const { return trace_; }          // empty before version 4
  // Per setting, the oldest first; none before version 5 or a run that read.
  std::span<const ReadRounds> read_round_sets() const { return read_round_sets_; }

  std::string serialize() const;
  // `source` names the file in messages. The header must match `expected`.
  static Result<UsageHistory> parse(std::string_view text, const UsageHistoryKey& expected,
                                    std::string_view source = "usage history");
  // Atomic (write_file_atomically): a crash leaves the old file or the new one.
  Status save(const std::filesystem::path& path) const;
  static Result<UsageHistory> load(const std::filesystem::path& path, const UsageHistoryKey& expected);
  // Where a history may be (a model's MODEL.usage): nullopt where nothing is
  // at `path`, an error where something is and does not load for `expected`.
  static Result<std::optional<UsageHistory>> load_if_present(const std::filesystem::path& path,
                                                             const UsageHistoryKey& expected);

 private:
  explicit UsageHistory(UsageHistoryKey key);
  size_t index(int layer, int expert) const;

  UsageHistoryKey key_;
  double total_tokens_ = 0;
  std::vector<double> counts_;  // [layer][expert], row-major
  std::vector<double> reuse_;   // [layer][distance 0..n_experts-1, first use], row-major
  std::vector<double> decode_reuse_;  // the same, decode tokens only
  RoutingTrace trace_;
  std::vector<ReadRounds> read_round_sets_;  // distinct settings, the latest set last
};

// Mattson's LRU stack per MoE layer: the engine hands it each token's
// choices and it counts their reuse distances (UsageHistory::add_reuse).
class ReuseDistances {
 public:
  ReuseDistances(int n_layers, int n_experts);
  // One token's choices at `layer` (ids in range, checked by the caller's
  // router); `decode`: a generated token's (counted in decode_counts too).
  void record(int layer, std::span<const int> experts, bool decode = false);
  const std::vector<std::vector<std::uint64_t>>& counts() const { return counts_; }
  const std::vector<std::vector<std::uint64_t>>& decode_counts() const { return decode_counts_; }

 private:
  // Per layer: each expert's last use on the layer's clock (0 = never), the
  // LRU stack as times: an expert's depth is the count of later ones.
  std::vector<std::vector<std::uint64_t>> last_use_;
  std::vector<std::uint64_t> clock_;
  std::vector<std::vector<std::uint64_t>> counts_, decode_counts_;
};

// The `n_pins` most used experts of a layer, most used first, ties to the
// lower id. Experts never routed to are not pinned (a pin must earn its
// slot), so fewer than n_pins may come back. Errors: layer out of range,
// n_pins < 0.
Result<std::vector<int>> pins_from_history(const UsageHistory& history, int layer, int n_pins);
// pins_from_history for every layer of the history, in layer order.
Result<std::vector<std::vector<int>>> pins_for_every_layer(const UsageHistory& history, int n_pins);

}  // namespace coli::experts
