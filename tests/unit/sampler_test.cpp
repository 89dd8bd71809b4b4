// coli run's next-token sampler on the inputs that broke it (issue 12): top_p
// 0 and NaN options are refused by name; NaN and infinite logits never win
// and never make it read past the candidates; greedy is the finite argmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
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

}  // namespace
}  // namespace coli::tools
