#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

namespace coli::tools {

Status check_sampling(const SamplingOptions& options) {
  if (!std::isfinite(options.temperature) || options.temperature < 0) {
    return make_error("--temperature " + std::to_string(options.temperature) + " must be a finite number >= 0 (0 = greedy)");
  }
  if (!std::isfinite(options.top_p) || options.top_p <= 0 || options.top_p > 1) {
    return make_error("--top-p " + std::to_string(options.top_p) + " must be in (0, 1] (1 = every token)");
  }
  return Ok{};
}

Result<std::int32_t> Sampler::pick(std::span<const float> logits) {
  std::size_t best = logits.size();
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (std::isfinite(logits[i]) && (best == logits.size() || logits[i] > logits[best])) best = i;
  }
  if (best == logits.size()) return make_error("the model produced no finite logit: its weights or the run are broken");
  if (options_.temperature <= 0) return static_cast<std::int32_t>(best);
  const double peak = logits[best];
  std::vector<std::pair<double, std::int32_t>> candidates;
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) continue;
    const double p = std::exp((logits[i] - peak) / options_.temperature);
    candidates.emplace_back(p, static_cast<std::int32_t>(i));
    total += p;
  }
  std::sort(candidates.begin(), candidates.end(), std::greater<>());
  // The nucleus: the most probable tokens until top_p of the mass, at least one.
  double kept = candidates.front().first;
  std::size_t count = 1;
  while (count < candidates.size() && kept < options_.top_p * total) kept += candidates[count++].first;
  double target = std::uniform_real_distribution<double>(0, kept)(rng_);
  for (std::size_t i = 0; i < count; ++i) {
    target -= candidates[i].first;
    if (target <= 0) return candidates[i].second;
  }
  return candidates[count - 1].second;
}

}  // namespace coli::tools
