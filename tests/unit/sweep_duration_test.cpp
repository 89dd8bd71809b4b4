// coli-sweep's own duration from its predictions (sweep_duration.h), with
// made-up predictions: nothing is timed.
#include "sweep_duration.h"

#include <gtest/gtest.h>

namespace coli::bench {
namespace {

ConfigPrediction predicted(double prefill_tok_s, double decode_tok_s) {
  ConfigPrediction p;
  p.available = true;
  p.prefill_tok_s = prefill_tok_s;
  p.decode_tok_s = decode_tok_s;
  return p;
}

SpeedTests pp512_tg16_at_0_and_512() {
  SpeedTests tests;
  tests.prefill_tokens = 512;
  tests.decode_tokens = 16;
  tests.depths = {0, 512};
  return tests;
}

TEST(SweepDuration, APassIsTheWarmUpThePromptTheDepthsPrefillsAndTheirDecodes) {
  // 512 tokens at 256 tok/s: 2 s each for the warm-up, the prompt and depth 512's prefill;
  // 2 x 16 decode tokens at 16 tok/s: 2 s. Timed: the prompt and the decodes.
  auto run = estimate_run(pp512_tg16_at_0_and_512(), 0.5, predicted(256, 16));
  ASSERT_TRUE(run);
  EXPECT_DOUBLE_EQ(run->timed_seconds, 4.0);
  EXPECT_DOUBLE_EQ(run->pass_seconds, 8.0);
  EXPECT_EQ(run->passes, 1);
  EXPECT_DOUBLE_EQ(run->seconds(), 8.0);
}

TEST(SweepDuration, ShortPassesRepeatUntilTheMinimumIsTimedAndNoMoreThanTheMost) {
  // 512 at 51200 tok/s (10 ms) and 32 decode tokens at 3200 tok/s (10 ms): 20 ms timed a pass.
  auto run = estimate_run(pp512_tg16_at_0_and_512(), 0.5, predicted(51200, 3200));
  ASSERT_TRUE(run);
  EXPECT_DOUBLE_EQ(run->timed_seconds, 0.02);
  EXPECT_EQ(run->passes, 25);
  auto capped = estimate_run(pp512_tg16_at_0_and_512(), 60, predicted(51200, 3200));
  ASSERT_TRUE(capped);
  EXPECT_EQ(capped->passes, kMaxPasses);
  auto once = estimate_run(pp512_tg16_at_0_and_512(), 0, predicted(51200, 3200));
  ASSERT_TRUE(once);
  EXPECT_EQ(once->passes, 1);
}

TEST(SweepDuration, ARepeatSumsItsRunsNamesTheLongestAndLeavesOutUnpredictedOnes) {
  ConfigPrediction missing;
  missing.unavailable = "the profile lacks a point";
  const std::vector<ConfigPrediction> grid{predicted(256, 16), missing, predicted(128, 8)};
  const RepeatEstimate repeat = estimate_repeat(pp512_tg16_at_0_and_512(), 0.5, grid);
  EXPECT_DOUBLE_EQ(repeat.seconds, 8.0 + 16.0);
  EXPECT_EQ(repeat.slowest, 2u);
  EXPECT_DOUBLE_EQ(repeat.slowest_seconds, 16.0);
  ASSERT_EQ(repeat.unpredicted.size(), 1u);
  EXPECT_EQ(repeat.unpredicted[0], 1u);
  const std::string text = describe_repeat(repeat, {"a", "b", "slow one"});
  EXPECT_NE(text.find("about 24 s"), std::string::npos) << text;
  EXPECT_NE(text.find("the longest run: slow one, 16 s"), std::string::npos) << text;
  EXPECT_NE(text.find("1 configuration(s) without a prediction"), std::string::npos) << text;
}

TEST(SweepDuration, ReTimingAddsEachSetsTimeRamBandwidthsAndEachRecordersTwoPasses) {
  // Passes of 8 s (pp 256 tok/s, tg 16 tok/s) and 16 s (128, 8); an unpredicted recorder adds nothing.
  const std::vector<ConfigPrediction> recorders{predicted(256, 16), ConfigPrediction{}, predicted(128, 8)};
  EXPECT_DOUBLE_EQ(estimate_retime(pp512_tg16_at_0_and_512(), 4.0, 2, 0.0, recorders), 2 * 4.0 + 2 * 8.0 + 2 * 16.0);
  EXPECT_DOUBLE_EQ(estimate_retime(pp512_tg16_at_0_and_512(), 4.0, 3, 0.0, {}), 12.0);
  EXPECT_DOUBLE_EQ(estimate_retime(pp512_tg16_at_0_and_512(), 4.0, 3, 6.0, {}), 18.0) << "RAM bandwidth's seconds on top";
  RepeatEstimate repeat = estimate_repeat(pp512_tg16_at_0_and_512(), 0.5, {predicted(256, 16), predicted(128, 8)});
  repeat.retime_seconds = 56;
  EXPECT_DOUBLE_EQ(repeat.total(), 80.0);
  const std::string text = describe_repeat(repeat, {"a", "b"});
  EXPECT_NE(text.find("about 80 s by the predictions (the runs' passes 24 s, re-timing 56 s;"), std::string::npos) << text;
}

TEST(SweepDuration, AGridWithoutPredictionsSaysItHasNoEstimate) {
  const RepeatEstimate repeat = estimate_repeat(pp512_tg16_at_0_and_512(), 0.5, {ConfigPrediction{}, ConfigPrediction{}});
  EXPECT_DOUBLE_EQ(repeat.seconds, 0.0);
  EXPECT_EQ(describe_repeat(repeat, {"a", "b"}), "no estimate of the grid's time: none of its 2 configuration(s) has a prediction");
}

TEST(SweepDuration, AZeroSpeedIsNoEstimate) {
  EXPECT_FALSE(estimate_run(pp512_tg16_at_0_and_512(), 0.5, predicted(0, 16)));
  EXPECT_FALSE(estimate_run(pp512_tg16_at_0_and_512(), 0.5, ConfigPrediction{}));
}

TEST(SweepDuration, ARepeatStartsOnlyWhenItEndsWithinTheLimit) {
  EXPECT_TRUE(repeat_fits(0, 1e9, 1e9));  // no limit
  EXPECT_TRUE(repeat_fits(2, 60, 60));    // ends at the limit
  EXPECT_FALSE(repeat_fits(2, 60, 61));
  EXPECT_FALSE(repeat_fits(0.5, 0, 31));
}

TEST(SweepDuration, DurationsReadInTheirOwnUnit) {
  EXPECT_EQ(format_duration(6.94), "6.9 s");
  EXPECT_EQ(format_duration(58.2), "58 s");
  EXPECT_EQ(format_duration(138), "2.3 min");
  EXPECT_EQ(format_duration(5400), "1.5 h");
}

}  // namespace
}  // namespace coli::bench
