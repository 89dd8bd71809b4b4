// Picking the next token from the logits: greedy at temperature 0, else
// seeded temperature + top-p (nucleus) sampling. Non-finite logits never
// win (a NaN compares false both ways and would otherwise break the sort
// and the nucleus walk); a pick always returns a token inside the vocabulary.
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "coli/base/result.h"

namespace coli::tools {

struct SamplingOptions {
  double temperature = 0;  // 0 = greedy; finite, >= 0
  double top_p = 1;        // (0, 1]: the smallest set of tokens holding this much probability (at least one)
  std::uint64_t seed = 0;
};

// Errors name the option and the value (NaN, negative, top_p outside (0, 1]).
Status check_sampling(const SamplingOptions& options);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {}
  // Errors: empty logits, or no finite logit (the model computed garbage).
  Result<std::int32_t> pick(std::span<const float> logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace coli::tools
