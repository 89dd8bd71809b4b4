// coli perplexity's arithmetic on rows small enough to check by hand:
// llama-perplexity's windows, the NLL of a token, the KL divergence (0 for a
// model against itself, the closed form for two known distributions), top-1
// agreement and the summary's quantiles.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "perplexity.h"

namespace coli::tools {
namespace {

TEST(Perplexity, WindowsAreLlamaPerplexitysNonOverlappingHalves) {
  const PerplexityWindows w = perplexity_windows(1000, 256);
  EXPECT_EQ(w.count, 3);  // the 232-token tail is left out
  EXPECT_EQ(w.first_scored, 129);
  EXPECT_EQ(w.scored_per_window(), 127);
  EXPECT_EQ(perplexity_windows(100, 256).count, 0);
}

TEST(Perplexity, TheNllOfAUniformRowIsLogOfTheVocabulary) {
  const std::vector<float> uniform(50, 3.0f);
  EXPECT_NEAR(negative_log_likelihood(uniform, 7), std::log(50.0), 1e-12);
  const std::vector<float> sure = {0, 100, 0};
  EXPECT_NEAR(negative_log_likelihood(sure, 1), 0, 1e-12);
}

TEST(Perplexity, KlDivergenceIsZeroAgainstItselfAndTheClosedFormOtherwise) {
  const std::vector<float> row = {1.5f, -2.0f, 0.25f, 3.0f};
  const TokenDivergence self = token_divergence(row, row);
  EXPECT_EQ(self.kld, 0.0);
  EXPECT_TRUE(self.same_top1);
  // p = (1/2, 1/2), q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3).
  const std::vector<float> p = {0, 0};
  const std::vector<float> q = {0, static_cast<float>(std::log(3.0))};
  const TokenDivergence d = token_divergence(p, q);
  EXPECT_NEAR(d.kld, 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0), 1e-7);
  const std::vector<float> flipped = {1, 0};
  EXPECT_FALSE(token_divergence(flipped, q).same_top1);
}

TEST(Perplexity, TheSummaryHasTheMeanNllItsExponentialAndTheKldQuantiles) {
  PerplexityTally tally;
  for (int i = 1; i <= 100; ++i) {
    const TokenDivergence divergence{i / 100.0, i % 4 != 0};
    tally.add(std::log(2.0), &divergence, std::log(4.0));
  }
  const nlohmann::json s = tally.summary();
  EXPECT_EQ(s["schema_version"], 1);
  EXPECT_EQ(s["tokens"], 100);
  EXPECT_NEAR(s["perplexity"].get<double>(), 2.0, 1e-12);
  EXPECT_NEAR(s["base_perplexity"].get<double>(), 4.0, 1e-12);
  EXPECT_NEAR(s["kld"]["mean"].get<double>(), 0.505, 1e-12);
  EXPECT_NEAR(s["kld"]["median"].get<double>(), 0.50, 1e-12);
  EXPECT_NEAR(s["kld"]["p99"].get<double>(), 0.99, 1e-12);
  EXPECT_NEAR(s["kld"]["max"].get<double>(), 1.0, 1e-12);
  EXPECT_NEAR(s["top1_agreement"].get<double>(), 0.75, 1e-12);
  PerplexityTally alone;
  alone.add(1.0);
  EXPECT_FALSE(alone.summary().contains("kld"));
}

}  // namespace
}  // namespace coli::tools
