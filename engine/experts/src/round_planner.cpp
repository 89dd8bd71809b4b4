#include "coli/experts/round_planner.h"

#include <algorithm>

namespace coli::experts {
namespace {

std::string describe(const CacheShape& s) {
  return "n_experts " + std::to_string(s.n_experts) + ", top_k " + std::to_string(s.top_k) +
         ", cap " + std::to_string(s.cap) + ", pins " + std::to_string(s.n_pins);
}

}  // namespace

int max_distinct_unpinned(const CacheShape& shape, int tokens) {
  const long long routed = static_cast<long long>(shape.top_k) * std::max(tokens, 0);
  return static_cast<int>(std::min<long long>(shape.n_experts - shape.n_pins, routed));
}

Result<ValidatedShape> validate_cache_shape(const CacheShape& shape) {
  const std::string what = "expert cache (" + describe(shape) + "): ";
  if (shape.n_experts < 1) return make_error(what + "n_experts must be >= 1");
  if (shape.top_k < 1) return make_error(what + "top_k must be >= 1");
  if (shape.top_k > shape.n_experts) return make_error(what + "top_k cannot exceed n_experts; check the model config");
  if (shape.cap < 1) return make_error(what + "cap must be >= 1");
  if (shape.n_pins < 0) return make_error(what + "pins cannot be negative");
  if (shape.n_pins > shape.n_experts)
    return make_error(what + "more pins than experts; pin at most " + std::to_string(shape.n_experts));

  ValidatedShape valid{shape, shape.cap};
  valid.shape.cap = std::min(shape.cap, shape.n_experts);
  const int evictable = valid.shape.cap - shape.n_pins;
  const int one_token = max_distinct_unpinned(valid.shape, 1);
  if (evictable < one_token) {
    const int max_pins = std::max(0, valid.shape.cap - shape.top_k);
    return make_error(what + "only " + std::to_string(evictable) +
                      " evictable slot(s) but one token can need " + std::to_string(one_token) +
                      " unpinned experts; pin at most " + std::to_string(max_pins) + " or raise cap to at least " +
                      std::to_string(std::min(shape.n_experts, shape.n_pins + shape.top_k)));
  }
  return valid;
}

Result<RoundPlanner> RoundPlanner::create(std::span<const CacheShape> layer_shapes) {
  std::vector<ValidatedShape> layers;
  layers.reserve(layer_shapes.size());
  for (size_t i = 0; i < layer_shapes.size(); ++i) {
    auto valid = validate_cache_shape(layer_shapes[i]);
    if (!valid) return make_error("layer " + std::to_string(i) + ": " + valid.error().message);
    layers.push_back(*valid);
  }
  return RoundPlanner(std::move(layers));
}

int RoundPlanner::layer_limit(int layer, int requested) const {
  const CacheShape& s = layers_[static_cast<size_t>(layer)].shape;
  if (s.cap >= s.n_experts) return requested;  // every expert fits: any round does
  return std::min(requested, (s.cap - s.n_pins) / s.top_k);
}

int RoundPlanner::tokens_per_round(int requested) const {
  int tokens = std::max(requested, 1);
  for (size_t i = 0; i < layers_.size(); ++i) tokens = std::min(tokens, layer_limit(static_cast<int>(i), tokens));
  return tokens;
}

std::string RoundPlanner::explain_limit(int requested) const {
  const int tokens = tokens_per_round(requested);
  if (tokens >= requested) return {};
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (layer_limit(static_cast<int>(i), requested) != tokens) continue;
    const CacheShape& s = layers_[i].shape;
    const long long slots_needed = static_cast<long long>(s.n_pins) + max_distinct_unpinned(s, requested);
    return "prefill rounds hold " + std::to_string(tokens) + " token(s), not " + std::to_string(requested) +
           ": layer " + std::to_string(i) + " (" + describe(s) + ") has " + std::to_string(s.cap - s.n_pins) +
           " evictable slots and each token can need " + std::to_string(s.top_k) + " new experts; for " +
           std::to_string(requested) + " tokens raise cap to " + std::to_string(slots_needed) +
           " or pin fewer experts";
  }
  return {};  // unreachable: some layer set the limit
}

std::vector<TokenRange> RoundPlanner::split_prefill(int total_tokens, int requested) const {
  std::vector<TokenRange> rounds;
  const int step = tokens_per_round(requested);
  for (long long begin = 0; begin < total_tokens; begin += step)
    rounds.push_back({static_cast<int>(begin), static_cast<int>(std::min<long long>(total_tokens, begin + step))});
  return rounds;
}

}  // namespace coli::experts
