// The prediction's band: the same speed model on the probe's slowest and on
// its fastest rounds of every measured rate (planner/speed_band.h).
#include <gtest/gtest.h>

#include <filesystem>

#include "coli/planner/plan.h"
#include "coli/planner/speed.h"
#include "coli/planner/speed_band.h"
#include "planner_fixtures.h"

namespace coli::planner {
namespace {

// Each kind of measured rate takes its slowest or fastest round; a rate
// never measured (0 samples) keeps its zeros.
TEST(SpeedBand, EachRateTakesItsSlowestOrFastestRound) {
  DeviceProfile p = measured_profile(20);
  p.measurements.memory->points[2].gb_per_s = {5, 20, 26, 14, 0.6};
  p.measurements.disk->points[0].gb_per_s = {5, 0.5, 0.7, 0.3, 0.8};
  p.measurements.kernel_tuning =
      tuned_on_8_threads("expert_q4_decode", 1024, 1, 24, {5, 30, 33, 27, 0.2}, {5, 100, 110, 90, 0.2});
  p.measurements.kernel_tuning->points.push_back(
      point_on_8_threads("expert_q4_prefill", 1024, 64, 24, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}));
  p.measurements.uploads.push_back({"cuda", "gpu", 0, 1 << 20, {5, 50, 55, 40, 0.3}});

  const DeviceProfile slow = at_sample_bound(p, SampleBound::slowest);
  EXPECT_EQ(slow.measurements.memory->points[2].gb_per_s.median, 14);
  EXPECT_EQ(slow.measurements.disk->points[0].gb_per_s.median, 0.3);
  EXPECT_EQ(slow.measurements.kernel_tuning->points[0].gb_per_s.median, 27);
  EXPECT_EQ(slow.measurements.kernel_tuning->points[0].tokens_per_s.median, 90);
  EXPECT_EQ(slow.measurements.kernel_tuning->points[1].tokens_per_s.median, 0) << "never measured";
  EXPECT_EQ(slow.measurements.uploads[0].gb_per_s.median, 40);

  const DeviceProfile fast = at_sample_bound(p, SampleBound::fastest);
  EXPECT_EQ(fast.measurements.memory->points[2].gb_per_s.median, 26);
  EXPECT_EQ(fast.measurements.disk->points[0].gb_per_s.median, 0.7);
  EXPECT_EQ(fast.measurements.kernel_tuning->points[0].gb_per_s.median, 33);
  EXPECT_EQ(fast.measurements.kernel_tuning->points[0].tokens_per_s.median, 110);
  EXPECT_EQ(fast.measurements.uploads[0].gb_per_s.median, 55);
  EXPECT_EQ(p.measurements.memory->points[2].gb_per_s.median, 20) << "the profile itself is left alone";
}

struct ResidentPlan {
  ModelFootprint fp;
  Plan plan;
};

// The tiny demo model, every expert resident, 8 threads: decode reads its
// weights at the RAM rate of the 8-thread point.
ResidentPlan resident_plan(const DeviceProfile& profile) {
  auto fp = read_footprint(std::filesystem::path(COLI_FIXTURES_DIR) / "models" / "tiny-demo", WeightFormat::q4_g64,
                           DenseFormat::source);
  EXPECT_TRUE(fp.ok()) << fp.error().message;
  PlanRequest request;
  request.threads = 8;
  request.gpu = "none";
  auto plan = make_plan(profile, *fp, request);
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return {*fp, *plan};
}

// A machine whose RAM rate moved 14-26 GB/s around a median of 20 while it
// was probed: the band brackets the prediction, slower on the slow side;
// where every round measured the same, it closes on the prediction itself.
TEST(SpeedBand, BracketsThePredictionAndClosesOnASteadyMachine) {
  DeviceProfile p = measured_profile(20);
  p.measurements.kernel_tuning.reset();
  p.measurements.memory->points[2].gb_per_s = {5, 20, 26, 14, 0.6};
  const ResidentPlan r = resident_plan(p);
  const SpeedPrediction banded = predict_plan_speed_with_band(p, r.fp, r.plan);
  ASSERT_TRUE(banded.available) << banded.unavailable;
  ASSERT_TRUE(banded.band.made());
  EXPECT_LT(banded.band.decode_slowest, banded.decode_tok_per_s);
  EXPECT_GT(banded.band.decode_fastest, banded.decode_tok_per_s);
  EXPECT_LE(banded.band.prefill_slowest, banded.prefill_tok_per_s);
  EXPECT_GE(banded.band.prefill_fastest, banded.prefill_tok_per_s);

  p.measurements.memory->points[2].gb_per_s = {5, 20, 20, 20, 0};
  const SpeedPrediction steady = predict_plan_speed_with_band(p, r.fp, r.plan);
  EXPECT_EQ(steady.band.decode_slowest, steady.decode_tok_per_s);
  EXPECT_EQ(steady.band.decode_fastest, steady.decode_tok_per_s);
  EXPECT_EQ(steady.band.prefill_slowest, steady.prefill_tok_per_s);
  EXPECT_TRUE(banded.band.has_width());
  EXPECT_FALSE(steady.band.has_width());
}

// No prediction, no band.
TEST(SpeedBand, NoneWithoutAPrediction) {
  DeviceProfile p = measured_profile(20);
  const ResidentPlan r = resident_plan(p);
  p.measurements.memory.reset();
  const SpeedPrediction none = predict_plan_speed_with_band(p, r.fp, r.plan);
  ASSERT_FALSE(none.available);
  EXPECT_FALSE(none.band.made());
}

}  // namespace
}  // namespace coli::planner
