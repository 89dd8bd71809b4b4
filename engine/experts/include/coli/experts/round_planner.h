// How many prefill tokens one round may route through a layer's expert cache
// without the cache having to recycle a slot the round still uses
// (field-notes.md failure #1).
//
// The rule, per layer: the distinct *unpinned* experts one round can touch,
//   min(n_experts - n_pins, top_k * tokens_per_round),
// must fit in the evictable slots, cap - n_pins. Pinned experts are always
// resident (hits), so they need no evictable slot; this is the field note's
// `cap - pinned >= min(n_experts, top_k * tokens)` made exact for pins.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "coli/base/result.h"

namespace coli::experts {

// One layer's cache dimensions, as the plan gives them.
struct CacheShape {
  int n_experts = 0;  // routed experts in the layer
  int top_k = 0;      // experts each token is routed to
  int cap = 0;        // cache slots
  int n_pins = 0;     // slots held by pinned experts
};

// A half-open token range [begin, end) of a prefill.
struct TokenRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
  bool operator==(const TokenRange&) const = default;
};

// Checks a shape before anything runs. Decisions:
//  - cap > n_experts is clamped to n_experts (extra slots could never be
//    used; clamping only saves memory) and the returned shape says so;
//  - everything else that cannot work is an error that names the values and
//    says what to change: n_experts/top_k/cap < 1, top_k > n_experts,
//    n_pins < 0, n_pins > n_experts, and a cache that cannot hold even one
//    token's experts (cap - n_pins < min(top_k, n_experts - n_pins); this
//    covers cap < top_k and n_pins >= cap whenever cap < n_experts).
struct ValidatedShape {
  CacheShape shape;           // with cap clamped
  int requested_cap = 0;      // cap before clamping
  bool cap_clamped() const { return shape.cap != requested_cap; }
};
Result<ValidatedShape> validate_cache_shape(const CacheShape& shape);

// Largest distinct set of unpinned experts a round of `tokens` can touch.
int max_distinct_unpinned(const CacheShape& shape, int tokens);

// Pure round sizing for one or more layers (built from validated shapes only).
class RoundPlanner {
 public:
  // Validates every layer's shape; the first bad one is the error (its index
  // is named in the message).
  static Result<RoundPlanner> create(std::span<const CacheShape> layer_shapes);

  // The most tokens a round may hold so every layer's distinct unpinned
  // experts fit its evictable slots: min(requested, floor((cap - pins)/top_k))
  // over layers, unlimited (= requested) for layers that hold every expert.
  // Always >= 1 for requested >= 1 (validation guarantees one token fits).
  int tokens_per_round(int requested) const;

  // Why the round is smaller than requested (empty when it is not): names the
  // limiting layer, cap, pins, top_k, and what to change to allow more.
  std::string explain_limit(int requested) const;

  // Splits a prefill of total_tokens into consecutive rounds of at most
  // tokens_per_round(requested) tokens. Empty for total_tokens <= 0.
  std::vector<TokenRange> split_prefill(int total_tokens, int requested) const;

  const std::vector<ValidatedShape>& layers() const { return layers_; }

 private:
  explicit RoundPlanner(std::vector<ValidatedShape> layers) : layers_(std::move(layers)) {}
  int layer_limit(int layer, int requested) const;

  std::vector<ValidatedShape> layers_;
};

}  // namespace coli::experts
