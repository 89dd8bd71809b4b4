// The engine's own expert cache replayed over the usage history's routing
// trace (experts::RoutingTrace): for a plan's cap, pins and prefill round,
// how many of a decode token's and of a prompt's experts the engine reads,
// and how many distinct experts a prompt round leases. The replay runs the
// engine's experts::SlotPolicy (pins from the same history, LRU, a round's
// union leased at once) and sizes rounds with its RoundPlanner, so a plan
// is priced by the cache it will run with, not by a model of one.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "coli/experts/usage_history.h"

namespace coli::planner {

// Decode runs `tokens` tokens (kTracedDecodeRun: the trace's own runs, what
// a plan's one decode figure assumes).
inline constexpr int kTracedDecodeRun = -1;
// Where a decode run begins: at a fresh context's first position (llama-
// bench's tg at depth 0), after tokens of its own context (a reply after its
// prompt, tg at depth d), or either (the trace's runs pooled: a plan's one
// figure). Their reads differ: a run after its own prompt reuses the experts
// the prompt leased, a fresh one leaves the previous sequence's.
enum class DecodeStart { any, fresh, in_context };
// How long a run's context is where it is not known (a plan's one figure).
inline constexpr int kAnyContext = -1;
struct DecodeRun {
  int tokens = kTracedDecodeRun;
  DecodeStart start = DecodeStart::any;
  // in_context: the tokens before the run (a reply's prompt, tg's depth).
  // The traced runs after that context price it, or after the two that
  // bracket it (CacheReplay::in_context_runs_after): a 16-token prompt
  // leases fewer experts than a 512-token one, and its reply reads more of
  // its own. kAnyContext: all in-context runs.
  int context = kAnyContext;
};

// A replay's misses by place (index 0: a prompt's first round, a decode
// run's first token): over all layers and passes, and the tokens there
// (counted once, not per layer).
struct PlaceCounts {
  std::vector<double> misses, tokens;
  void add_misses(std::size_t place, double count);
  void add_tokens(std::size_t place, double count);
  bool seen(std::size_t place) const { return place < tokens.size() && tokens[place] > 0; }
  double total_tokens() const;
  // Misses a token at `place` makes at one layer (seen places only).
  double per_layer_token(std::size_t place, int layers) const { return misses[place] / (tokens[place] * layers); }
  bool operator==(const PlaceCounts&) const = default;
};

// One kind of decode run's tokens: misses by place in the run, and
// layer-rounds by how many experts they missed together (index m).
struct DecodeCounts {
  PlaceCounts places;
  std::vector<double> rounds_missing;
  bool operator==(const DecodeCounts&) const = default;
};

struct CacheReplay {
  int layers = 0;
  int round_tokens = 0;     // the round the engine runs (RoundPlanner::tokens_per_round)
  double decode_tokens = 0;                     // single-token passes (their misses: decode_runs)
  double prompt_tokens = 0, prompt_misses = 0;  // passes of several tokens; misses over all layers
  double full_rounds = 0, full_round_distinct = 0;  // prompt rounds of round_tokens tokens, over all layers
  // How many layer-rounds missed m experts at once (index m): a decode
  // token's, and a prompt round's (full rounds only). Misses cluster (a
  // token whose routing moved misses several experts of a layer together),
  // which a binomial spread of the mean miss rate does not show, and a
  // batch of reads costs the disk less than as many reads one by one.
  // (The decode tokens' are kept by kind of run in DecodeCounts::rounds_missing.)
  std::vector<double> prompt_rounds_missing;
  // How many of the full prompt rounds' distinct experts (over all layers)
  // carried r of the round's rows (index r): an expert with one row streams
  // its record at about twice the GB/s of one with two, and rounds with pins
  // (fewer tokens) have more of them.
  std::vector<double> prompt_expert_rows;
  // The same experts by rows (first index) and by how recently their layer
  // ran them in the same pass (second index: the other experts the layer
  // ran since, its LRU stack distance; the last place, n_experts, a first
  // use in the pass). A prompt's rounds at one layer run back to back, so a
  // popular expert's record is read again a round later, partly from the
  // cache (the warm stream points price it). Experts of a round in id order,
  // as a resident layer's slots run.
  std::vector<std::vector<double>> prompt_expert_reuse;
  // Of `reuse`'s experts (prompt_expert_reuse) with `rows` rows, the share
  // the layer ran within the last `within` other experts (0 without such experts).
  static double reused_share(const std::vector<std::vector<double>>& reuse, int rows, double within);
  // Per round of a prompt pass by its place (index 0: the pass's first
  // round). A prompt's opening rounds meet the cache the passes before it
  // left; its later rounds, the experts its own rounds leased.
  PlaceCounts prompt_rounds;
  // Decode tokens by their place in their run (single-token passes at
  // consecutive positions; index 0: the run's first) and their rounds by
  // misses: every run's, the runs' that start a fresh context (first
  // position 0) and those that go on their own context. Runs of a trace
  // without first positions (histories before version 8) are in the first
  // only. The first tokens leave the prompt's experts for the decode's own;
  // later ones reuse what the run before them read.
  DecodeCounts decode_runs, fresh_decode_runs, in_context_decode_runs;
  // The in-context runs by the tokens before them (their first position).
  // A reply after a context the trace has not seen is priced by the two
  // nearest that bracket it, weighted by log ratio (a context of 100
  // between 16 and 512: 0.47 and 0.53), outside them by the nearest.
  std::map<int, DecodeCounts> in_context_runs_after;

  // Expert reads a decode token of `run` makes at one layer, when the trace
  // has decode tokens: each token at the rate of the trace's decode tokens
  // of runs that start as `run` does (all runs where it has none of them)
  // at its place; places past the trace's longest run at the rate of the
  // later half of its places (the runs settled); a reply between two
  // traced contexts, each group's figure so, weighted. run.tokens < 1
  // (kTracedDecodeRun): the mean over the trace's runs. The Qwen3 shape's
  // grid trace (16-token runs) read 0.1-0.8 experts a layer at places 0-6
  // and 0.02-0.07 from place 7 on.
  std::optional<double> decode_misses_per_layer_token(DecodeRun run = {}) const;
  // The shares of `run`'s decode layer-rounds that miss m experts together
  // (index m): the clustering of the trace's runs that start as it does
  // (all runs where none do), scaled_to the run's own misses (above), so a
  // run's reads are priced in the batches they come in. Empty without
  // decode tokens.
  std::vector<double> decode_batches(DecodeRun run = {}) const;
  // Expert reads a prompt token makes at one layer, when the trace has prompts.
  std::optional<double> prompt_misses_per_layer_token() const;
  // The same for a prompt of `tokens`: each of its rounds at the rate of the
  // trace's prompts' rounds at that place, rounds past the trace's longest
  // prompt at the trace's mean (a 16-token prompt after a fresh preload read
  // 8.2 experts a layer where the mean over 512-token prompts priced 1.75).
  std::optional<double> prompt_misses_per_layer_token(int tokens) const;
  // Distinct experts a full prompt round leases at one layer, when the trace had one.
  std::optional<double> distinct_per_round() const;
  // The share of layer-rounds that missed m experts together (index m), or
  // empty when the trace has none of that kind.
  static std::vector<double> shares(const std::vector<double>& rounds_missing);
  // `shares` scaled to a mean of `misses` a round: the clustering kept, the
  // share of rounds that miss anything moved. Where `misses` needs more
  // than every round, every round misses, clustered alike.
  static std::vector<double> scaled_to(std::vector<double> shares, double misses);
  // The shares of a `tokens`-token prompt's layer-rounds that miss m experts
  // together: the full rounds' clustering scaled to that prompt's misses a
  // round (prompt_misses_per_layer_token(tokens)): a short prompt's rounds
  // meet the cache the pass before it left and miss more. tokens < 1: the
  // full rounds' own.
  std::vector<double> prompt_batches(int tokens) const;
  // The shares of prompt_expert_rows (index r: a round's experts with r rows), empty without full rounds.
  std::vector<double> expert_rows_shares() const { return shares(prompt_expert_rows); }
  // "the routing trace (N tokens: P prompt, D decode) replayed through the engine's cache ..."
  std::string describe(int cap, int pins) const;
  // Which of the trace's decode runs price `run`: "" for any, else "; ...
  // runs that start a fresh context" (or follow a context of N tokens), or
  // why all do.
  std::string decode_runs_text(DecodeRun run) const;

 private:
  // The trace's runs that price `run`: its kind's, or all where the trace
  // has none of its kind; a reply's by its context (one group of runs, or
  // two weighted by log ratio); `of` says which.
  struct PricedRuns {
    std::vector<std::pair<const DecodeCounts*, double>> groups;  // each with its weight (summing to 1)
    bool all_runs = false;
    std::string of;
    double tokens() const;  // the groups' traced tokens
  };
  PricedRuns decode_runs_of(DecodeRun run) const;
  // A run's misses a token and layer from the groups that price it (decode_misses_per_layer_token).
  double misses_of(const PricedRuns& priced, int tokens) const;
};

// The trace replayed twice through each MoE layer's cache: once to warm it
// (the state a long run leaves), then counted. nullopt when the history has
// no trace or the cache shape cannot run (validate_cache_shape's errors:
// the plan's deciders refuse those first). `pins`: per layer, the history's
// most used experts (experts::pins_from_history), as the engine takes them.
std::optional<CacheReplay> replay_expert_cache(const experts::UsageHistory& history, int cap, int pins,
                                               int requested_round_tokens);

}  // namespace coli::planner
