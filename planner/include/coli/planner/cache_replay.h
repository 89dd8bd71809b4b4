// The engine's own expert cache replayed over the usage history's routing
// trace (experts::RoutingTrace): for a plan's cap, pins and prefill round,
// how many of a decode token's and of a prompt's experts the engine reads,
// and how many distinct experts a prompt round leases. The replay runs the
// engine's experts::SlotPolicy (pins from the same history, LRU, a round's
// union leased at once) and sizes rounds with its RoundPlanner, so a plan
// is priced by the cache it will run with, not by a model of one.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "coli/experts/usage_history.h"

namespace coli::planner {

struct CacheReplay {
  int layers = 0;
  int round_tokens = 0;     // the round the engine runs (RoundPlanner::tokens_per_round)
  double decode_tokens = 0, decode_misses = 0;  // single-token passes; misses over all layers
  double prompt_tokens = 0, prompt_misses = 0;  // passes of several tokens; misses over all layers
  double full_rounds = 0, full_round_distinct = 0;  // prompt rounds of round_tokens tokens, over all layers
  // How many layer-rounds missed m experts at once (index m): a decode
  // token's, and a prompt round's (full rounds only). Misses cluster (a
  // token whose routing moved misses several experts of a layer together),
  // which a binomial spread of the mean miss rate does not show, and a
  // batch of reads costs the disk less than as many reads one by one.
  std::vector<double> decode_rounds_missing, prompt_rounds_missing;
  // How many of the full prompt rounds' distinct experts (over all layers)
  // carried r of the round's rows (index r): an expert with one row streams
  // its record at about twice the GB/s of one with two, and rounds with pins
  // (fewer tokens) have more of them.
  std::vector<double> prompt_expert_rows;
  // Per round of a prompt pass by its place (index 0: the pass's first
  // round): misses over all layers and passes, and tokens over the passes
  // that reached it. A prompt's opening rounds meet the cache the passes
  // before it left; its later rounds, the experts its own rounds leased.
  std::vector<double> prompt_round_misses, prompt_round_tokens;
  // Per decode token by its place in its run of single-token passes (index
  // 0: the first after a prompt, or the trace's start): misses over all
  // layers, and tokens. The first tokens leave the prompt's experts for the
  // decode's own; later ones reuse what the run before them read.
  std::vector<double> decode_place_misses, decode_place_tokens;

  // Expert reads a decode token makes at one layer, when the trace has decode tokens.
  std::optional<double> decode_misses_per_layer_token() const;
  // The mean over a run of `tokens` decode tokens, each at the rate of the
  // trace's decode tokens at its place; places past the trace's longest run
  // at the rate of the later half of its places (the runs settled). `tokens`
  // < 1 (kTracedDecodeRun): the trace's own runs, the mean above. The
  // Qwen3 shape's grid trace (16-token runs) read 0.1-0.8 experts a layer
  // at places 0-6 and 0.02-0.07 from place 7 on.
  std::optional<double> decode_misses_per_layer_token(int tokens) const;
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
  // The shares of prompt_expert_rows (index r: a round's experts with r rows), empty without full rounds.
  std::vector<double> expert_rows_shares() const { return shares(prompt_expert_rows); }
  // "the routing trace (N tokens: P prompt, D decode) replayed through the engine's cache ..."
  std::string describe(int cap, int pins) const;
};

// The trace replayed twice through each MoE layer's cache: once to warm it
// (the state a long run leaves), then counted. nullopt when the history has
// no trace or the cache shape cannot run (validate_cache_shape's errors:
// the plan's deciders refuse those first). `pins`: per layer, the history's
// most used experts (experts::pins_from_history), as the engine takes them.
std::optional<CacheReplay> replay_expert_cache(const experts::UsageHistory& history, int cap, int pins,
                                               int requested_round_tokens);

}  // namespace coli::planner
