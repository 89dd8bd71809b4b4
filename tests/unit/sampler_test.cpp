// coli run's next-token sampler on the inputs that broke it (issue 12): top_p
// 0 and NaN options are refused by name; NaN and infinite logits never win
// and never make it read past the candidates; greedy is the finite argmax.
#include <gtest/gtest.h>

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

TEST(Sampler, NoFiniteLogitIsAnError) {
  Sampler sampler({0.8, 0.9, 1});
  EXPECT_FALSE(sampler.pick(std::vector<float>{kNaN, kInf}).ok());
  EXPECT_FALSE(sampler.pick(std::vector<float>{}).ok());
}

}  // namespace
}  // namespace coli::tools
