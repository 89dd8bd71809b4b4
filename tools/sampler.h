// Picking the next token from the logits, in llama.cpp's order: the repeat
// penalty over the last tokens, then (when sampling) top-k and min-p on the
// penalised logits, then temperature and top-p (nucleus), a seeded draw;
// greedy at temperature 0. Non-finite logits never win (a NaN compares false
// both ways and would otherwise break the sort and the nucleus walk); a pick
// always returns a token inside the vocabulary.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "coli/base/result.h"

namespace coli::tools {

struct SamplingOptions {
  double temperature = 0;  // 0 = greedy; finite, >= 0
  double top_p = 1;        // (0, 1]: the smallest set of tokens holding this much probability (at least one)
  std::uint64_t seed = 0;
  int top_k = 0;               // the k most probable tokens only; 0 = all
  double min_p = 0;            // [0, 1]: tokens at least min_p x the most probable's probability
  double repeat_penalty = 1;   // > 0: a logit of a recent token is divided by it (multiplied when negative); 1 = off
  int repeat_last_n = 64;      // how many of the last tokens (the prompt's included) it looks at
};

// Errors name the option and the value (NaN, negative, top_p outside (0, 1]).
Status check_sampling(const SamplingOptions& options);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {}
  // Errors: empty logits, or no finite logit (the model computed garbage).
  Result<std::int32_t> pick(std::span<const float> logits);
  // A token of the context (the prompt's, then each generated one), for the repeat penalty.
  void accept(std::int32_t token);

 private:
  using Logit = std::pair<float, std::int32_t>;  // (logit, token)
  const std::vector<Logit>& highest_logits(std::span<const float> logits, std::size_t k, double floor);

  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::int32_t> recent_;   // the last repeat_last_n tokens
  std::vector<float> penalised_;       // scratch: the logits after the penalty
  std::vector<Logit> top_;             // scratch: top-k's heap
};

}  // namespace coli::tools
