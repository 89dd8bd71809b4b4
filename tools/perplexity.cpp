#include "perplexity.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace coli::tools {

namespace {

// log sum exp of a row, in double precision.
double log_sum_exp(std::span<const float> logits) {
  const double peak = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - peak);
  return peak + std::log(sum);
}

double mean(const std::vector<double>& values) {
  return values.empty() ? 0.0 : std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

// The value below which `share` of the sorted values lie (nearest rank).
double quantile(std::vector<double> values, double share) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<std::size_t>(std::ceil(share * static_cast<double>(values.size())));
  return values[std::clamp<std::size_t>(rank, 1, values.size()) - 1];
}

}  // namespace

PerplexityWindows perplexity_windows(std::size_t tokens, int ctx) {
  PerplexityWindows w;
  w.ctx = ctx;
  w.count = ctx > 2 ? static_cast<int>(tokens / static_cast<std::size_t>(ctx)) : 0;
  w.first_scored = ctx / 2 + 1;
  return w;
}

double negative_log_likelihood(std::span<const float> logits, std::int32_t target) {
  return log_sum_exp(logits) - static_cast<double>(logits[static_cast<std::size_t>(target)]);
}

TokenDivergence token_divergence(std::span<const float> base, std::span<const float> model) {
  const double base_lse = log_sum_exp(base), model_lse = log_sum_exp(model);
  double kld = 0;
  for (std::size_t i = 0; i < base.size(); ++i) {
    const double log_p = base[i] - base_lse, log_q = model[i] - model_lse;
    kld += std::exp(log_p) * (log_p - log_q);
  }
  const auto top = [](std::span<const float> row) { return std::max_element(row.begin(), row.end()) - row.begin(); };
  return {std::max(0.0, kld), top(base) == top(model)};  // rounding can leave -1e-17 for equal rows
}

void PerplexityTally::add(double nll, const TokenDivergence* divergence, double base_nll) {
  nll_.push_back(nll);
  if (!divergence) return;
  base_nll_.push_back(base_nll);
  kld_.push_back(divergence->kld);
  same_top1_ += divergence->same_top1 ? 1 : 0;
}

double PerplexityTally::perplexity() const { return std::exp(mean(nll_)); }

nlohmann::json PerplexityTally::summary() const {
  nlohmann::json out = {{"schema_version", 1}, {"tokens", nll_.size()}, {"mean_nll", mean(nll_)}, {"perplexity", perplexity()}};
  if (kld_.empty()) return out;
  out["base_perplexity"] = std::exp(mean(base_nll_));
  out["kld"] = {{"mean", mean(kld_)}, {"median", quantile(kld_, 0.5)}, {"p99", quantile(kld_, 0.99)},
                {"max", *std::max_element(kld_.begin(), kld_.end())}};
  out["top1_agreement"] = static_cast<double>(same_top1_) / static_cast<double>(kld_.size());
  return out;
}

}  // namespace coli::tools
