// What `coli perplexity` computes, as pure functions: llama-perplexity's
// windows over a text's tokens, the negative log-likelihood of a token under
// a row of logits, and against a base model's logits the KL divergence and
// top-1 agreement, summarised as llama-perplexity --kl-divergence does.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace coli::tools {

// Non-overlapping windows of `ctx` tokens (a tail shorter than ctx is left
// out); in each, the tokens at positions first_scored.. ctx-1 are scored,
// each from the logits of the position before it (the first half is context).
struct PerplexityWindows {
  int ctx = 0;
  int count = 0;         // windows
  int first_scored = 0;  // ctx / 2 + 1
  int scored_per_window() const { return ctx - first_scored; }
};
PerplexityWindows perplexity_windows(std::size_t tokens, int ctx);

// -log softmax(logits)[target], in double precision.
double negative_log_likelihood(std::span<const float> logits, std::int32_t target);

// KL(base || model) of the two rows' softmax distributions, in nats (0 for
// equal rows), and whether their most likely tokens agree.
struct TokenDivergence {
  double kld = 0;
  bool same_top1 = true;
};
TokenDivergence token_divergence(std::span<const float> base_logits, std::span<const float> model_logits);

// Running sums over the scored tokens.
class PerplexityTally {
 public:
  void add(double nll, const TokenDivergence* divergence = nullptr, double base_nll = 0);
  std::size_t tokens() const { return nll_.size(); }
  double perplexity() const;
  // JSON result (schema_version 1): tokens, mean_nll, perplexity and, with a
  // base, base_perplexity, mean/median/p99/max KLD and top-1 agreement.
  nlohmann::json summary() const;

 private:
  std::vector<double> nll_, base_nll_, kld_;
  std::size_t same_top1_ = 0;
};

}  // namespace coli::tools
