// A bounded window of the most recent routings: each forward pass's token
// count and, per MoE layer, every token's top_k expert ids in order. The
// usage history carries it so the planner can replay the engine's own
// expert cache (SlotPolicy: pins, LRU, prefill rounds) over real routings:
// reuse distances are exact for a token-by-token LRU only, and say nothing
// of pins taking slots or of a prefill round leasing its experts together
// (a Qwen3-30B-shaped prompt read 1688 experts at cap 64, 2041 with 32
// pins, where the distances said 1356 for both).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "coli/base/result.h"

namespace coli::experts {

// Tokens a trace keeps: a 512-token prompt, a 512-token context and their
// decodes fit; older passes are dropped first.
inline constexpr int kRoutingTraceTokens = 2048;

// A pass's first KV position where it was not recorded (histories before
// format version 8): a decode run after it cannot be told to start a fresh
// context or to go on its own.
inline constexpr int kUnknownStart = -1;

class RoutingTrace {
 public:
  RoutingTrace() = default;
  // Errors: a dimension < 1, max_tokens < 1.
  static Result<RoutingTrace> create(int n_layers, int top_k, int max_tokens = kRoutingTraceTokens);

  // The engine, as it runs: a forward pass of `tokens` tokens at KV
  // positions first_position.. begins (0: a fresh context), then
  // each layer's `tokens` routings follow (record, one token's choices at a
  // time, in token order). A pass whose layers were left incomplete (a
  // failed forward) is dropped when the next begins. A pass longer than the
  // window keeps its last max_tokens tokens.
  void begin_pass(int tokens, int first_position = kUnknownStart);
  void record(int layer, std::span<const int> experts);

  // What a recording trace holds at most (the planner's memory line): ids
  // for three windows (two before a trim, and a pass), reserved at its
  // first pass, and as many pass counts.
  static std::uint64_t bytes_held(int n_layers, int top_k, int max_tokens = kRoutingTraceTokens);

  // The most recent max_tokens tokens of every complete pass (a pass cut at
  // its front when it straddles the window's start).
  RoutingTrace window() const;
  // `newer` after this one, windowed. Errors: another shape (nothing changes).
  Status append(const RoutingTrace& newer);
  // Replaces the contents with passes, per-layer ids and, when known, each
  // pass's first position (empty: kUnknownStart for all) read from a file.
  // Errors (nothing changes): a pass < 1 token, a layer whose ids are not
  // top_k per token of the passes, more than max_tokens tokens, starts not
  // one per pass or below kUnknownStart.
  Status assign(std::vector<int> pass_tokens, std::vector<std::vector<int>> layer_ids, std::vector<int> pass_starts = {});

  int n_layers() const { return static_cast<int>(ids_.size()); }
  int top_k() const { return top_k_; }
  int max_tokens() const { return max_tokens_; }
  int tokens() const;  // over complete passes
  bool empty() const { return tokens() == 0; }
  // Complete passes, oldest first.
  std::span<const int> pass_tokens() const;
  // Their first KV positions (kUnknownStart where not recorded), one per pass.
  std::span<const int> pass_starts() const;
  // A layer's ids over the complete passes: top_k per token.
  std::span<const int> layer(int layer) const;

 private:
  RoutingTrace(int n_layers, int top_k, int max_tokens);
  bool open_pass_complete() const;
  void drop_open_pass();
  void drop_front(int tokens);

  int top_k_ = 1;
  int max_tokens_ = kRoutingTraceTokens;
  std::vector<int> passes_;             // token counts; the last one may still be recording
  std::vector<int> starts_;             // each pass's first KV position (kept tokens only), or kUnknownStart
  int passes_total_ = 0;                // their sum (read at every pass; the engine records thousands)
  bool open_ = false;                   // the last pass is still recording
  int skip_ = 0;                        // the open pass's first tokens, beyond the window
  std::vector<int> seen_;               // [layer]: the open pass's tokens recorded (skipped ones included)
  std::vector<std::vector<int>> ids_;   // [layer]: top_k ids a token
};

}  // namespace coli::experts
