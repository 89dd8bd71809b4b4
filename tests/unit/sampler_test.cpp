// coli run's next-token sampler on the inputs that broke it (issue 12): top_p
// 0 and NaN options are refused by name; NaN and infinite logits never win
// and never make it read past the candidates; greedy is the finite argmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "sampler.h"

namespace coli::tools {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Sampler, RefusesOptionsOutsideTheirRangeByName) {
  EXPECT_FALSE(check_sampling({0, 0, 1}).ok());  // top_p 0 used to read before the candidates
  EXPECT_NE(check_sampling({0, 0, 1}).error().message.find("--top-p"), std::string::npos);
  EXPECT_FALSE(check_sampling({std::nan(""), 1, 1}).ok());
  EXPECT_NE(check_sampling({std::nan(""), 1, 1}).error().message.find("--temperature"), std::string::npos);
  EXPECT_FALSE(check_sampling({0.7, std::nan(""), 1}).ok());
  EXPECT_FALSE(check_sampling({-1, 1, 1}).ok());
  EXPECT_FALSE(check_sampling({0.7, 1.5, 1}).ok());
  EXPECT_TRUE(check_sampling({0.7, 0.9, 1}).ok());
}

TEST(Sampler, GreedyIsTheFiniteArgmax) {
  Sampler greedy({0, 1, 1});
  const std::vector<float> logits{1, kNaN, 3, kInf, 2};
  auto picked = greedy.pick(logits);
  ASSERT_TRUE(picked.ok());
  EXPECT_EQ(*picked, 2);
}

TEST(Sampler, NonFiniteLogitsNeverWinAndTinyTopPKeepsOneToken) {
  Sampler sampler({0.8, 1e-9, 42});  // the smallest nucleus: the most probable token alone
  const std::vector<float> logits{kNaN, 0.5f, 4, -kInf, kInf, 1};
  for (int i = 0; i < 200; ++i) {
    auto picked = sampler.pick(logits);
    ASSERT_TRUE(picked.ok());
    EXPECT_EQ(*picked, 2);
  }
  Sampler wide({1.5, 1, 7});
  for (int i = 0; i < 500; ++i) {
    auto picked = wide.pick(logits);
    ASSERT_TRUE(picked.ok());
    EXPECT_TRUE(*picked == 1 || *picked == 2 || *picked == 5) << *picked;
  }
}

// top_p 1 draws from every token without ordering them (a sort of the whole
// vocabulary each token cost more than a small model's forward pass): the
// frequencies still follow the probabilities. Logits 0 and ln 3 at
// temperature 1 are 1 : 3; the seed fixes the draws, so the bounds are not flaky.
TEST(Sampler, FullNucleusDrawsInProportionWithoutSorting) {
  Sampler sampler({1.0, 1.0, 11});
  const std::vector<float> logits{0.0f, std::log(3.0f)};
  int ones = 0;
  constexpr int kDraws = 4000;
  for (int i = 0; i < kDraws; ++i) ones += *sampler.pick(logits) == 1;
  EXPECT_NEAR(static_cast<double>(ones) / kDraws, 0.75, 0.03);
}

// The nucleus past the first 64 candidates it sorts: 100 equally likely
// tokens and 4900 unlikely ones (e^-30 each); top_p 0.95 keeps 96 of the 100
// (95 fall short of 0.95 of the total by the tail's tiny mass; ties go to the
// higher index, as the full sort ordered them), never the rest.
TEST(Sampler, NucleusLargerThanTheFirstSortedBlockKeepsExactlyItsTokens) {
  std::vector<float> logits(5000, 0.0f);
  for (int i = 0; i < 100; ++i) logits[static_cast<std::size_t>(i)] = 30.0f;
  Sampler sampler({1.0, 0.95, 3});
  int lowest = 5000, highest = -1;
  for (int i = 0; i < 3000; ++i) {
    const int picked = *sampler.pick(logits);
    lowest = std::min(lowest, picked), highest = std::max(highest, picked);
  }
  EXPECT_EQ(lowest, 4);
  EXPECT_EQ(highest, 99);
}

TEST(Sampler, NoFiniteLogitIsAnError) {
  Sampler sampler({0.8, 0.9, 1});
  EXPECT_FALSE(sampler.pick(std::vector<float>{kNaN, kInf}).ok());
  EXPECT_FALSE(sampler.pick(std::vector<float>{}).ok());
}

SamplingOptions sampling(double temperature, int top_k, double min_p, double penalty = 1) {
  SamplingOptions o;
  o.temperature = temperature;
  o.seed = 7;
  o.top_k = top_k;
  o.min_p = min_p;
  o.repeat_penalty = penalty;
  return o;
}

TEST(Sampler, RefusesTopKMinPAndPenaltyOutsideTheirRange) {
  for (const auto& [bad, name] : {std::pair{sampling(0.7, -1, 0), "--top-k"}, {sampling(0.7, 0, 1.5), "--min-p"},
                                  {sampling(0.7, 0, std::nan("")), "--min-p"}, {sampling(0.7, 0, 0, 0), "--repeat-penalty"},
                                  {sampling(0.7, 0, 0, -kInf), "--repeat-penalty"}}) {
    const Status s = check_sampling(bad);
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_NE(s.error().message.find(name), std::string::npos) << s.error().message;
  }
  SamplingOptions last_n = sampling(0.7, 0, 0);
  last_n.repeat_last_n = -1;
  EXPECT_FALSE(check_sampling(last_n).ok());
  EXPECT_TRUE(check_sampling(sampling(0.7, 40, 0.05, 1.1)).ok());
}

// top-k 2 at a high temperature: only the two largest logits are ever drawn,
// and both are.
TEST(Sampler, TopKDrawsOnlyTheKMostProbable) {
  Sampler sampler(sampling(5.0, 2, 0));
  const std::vector<float> logits{0.1f, 3, 0.2f, 2.9f, 0.3f, kNaN};
  std::vector<int> seen(logits.size(), 0);
  for (int i = 0; i < 400; ++i) {
    auto picked = sampler.pick(logits);
    ASSERT_TRUE(picked.ok());
    ++seen[static_cast<std::size_t>(*picked)];
  }
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[3], 0);
  EXPECT_EQ(seen[1] + seen[3], 400) << "a token outside the top 2 was drawn";
}

// top-k over a large vocabulary, selected on the logits in one pass: the
// drawn tokens are exactly the k highest finite logits (a tie at the k-th
// place goes to the higher token id; NaN and infinities never enter), found
// here by sorting every logit.
TEST(Sampler, TopKOverALargeVocabularyKeepsTheKHighestLogits) {
  std::vector<float> logits(20000);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 7919) % 1000) / 100.0f;  // ties
  logits[3] = kNaN, logits[5] = kInf, logits[7] = -kInf;
  const int k = 6;
  std::vector<std::pair<float, int>> finite;
  for (std::size_t i = 0; i < logits.size(); ++i)
    if (std::isfinite(logits[i])) finite.emplace_back(logits[i], static_cast<int>(i));
  std::sort(finite.begin(), finite.end(), std::greater<>());
  std::vector<int> expected;
  for (int i = 0; i < k; ++i) expected.push_back(finite[static_cast<std::size_t>(i)].second);
  ASSERT_EQ(finite[k - 1].first, finite[k].first) << "the made-up logits must tie at the k-th place";
  Sampler sampler(sampling(1000.0, k, 0));
  std::vector<int> seen(logits.size(), 0);
  for (int i = 0; i < 3000; ++i) {
    auto picked = sampler.pick(logits);
    ASSERT_TRUE(picked.ok());
    ++seen[static_cast<std::size_t>(*picked)];
  }
  int drawn = 0;
  for (const int token : expected) {
    EXPECT_GT(seen[static_cast<std::size_t>(token)], 0) << "token " << token << " of the top " << k << " never drawn";
    drawn += seen[static_cast<std::size_t>(token)];
  }
  EXPECT_EQ(drawn, 3000) << "a token outside the top " << k << " was drawn";
}

// min-p 0.1 on the untempered probabilities: exp(-1) = 0.37 of the best stays,
// exp(-5) = 0.007 goes, however high the temperature.
TEST(Sampler, MinPDropsTokensFarBelowTheBest) {
  Sampler sampler(sampling(10.0, 0, 0.1));
  const std::vector<float> logits{0, -1, -5};
  std::vector<int> seen(3, 0);
  for (int i = 0; i < 400; ++i) ++seen[static_cast<std::size_t>(*sampler.pick(logits))];
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_EQ(seen[2], 0);
}

// llama.cpp's repeat penalty: a recent token's positive logit is divided by
// it and a negative one multiplied; greedy sees the penalised logits; only
// the last repeat_last_n tokens count.
TEST(Sampler, RepeatPenaltyLowersRecentTokensOnly) {
  SamplingOptions options = sampling(0, 0, 0, 1.2);
  options.repeat_last_n = 2;
  Sampler sampler(options);
  const std::vector<float> logits{2.0f, 1.9f, -0.5f, -0.55f};
  EXPECT_EQ(*sampler.pick(logits), 0);
  sampler.accept(0);  // 2.0 / 1.2 = 1.67 < 1.9
  EXPECT_EQ(*sampler.pick(logits), 1);
  sampler.accept(1);  // both penalised: 1.67 vs 1.58
  EXPECT_EQ(*sampler.pick(logits), 0);
  sampler.accept(2);
  sampler.accept(3);  // 0 and 1 fell out of the last 2
  EXPECT_EQ(*sampler.pick(logits), 0);
  const std::vector<float> negative{-0.5f, -0.55f};
  Sampler negatives(options);
  negatives.accept(0);  // -0.5 x 1.2 = -0.6 < -0.55
  EXPECT_EQ(*negatives.pick(negative), 1);
}

}  // namespace
}  // namespace coli::tools
