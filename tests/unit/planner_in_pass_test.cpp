// Issue 15: a pass's narrow expert batch costs more than back to back. The
// probe times expert_q4_prefill_narrow call after call; the engine's pass
// runs the batch once a layer, after the layer's projections, attention and
// token ops, and meanwhile the caches age its buffers (the 2-core VM's
// last-level cache kept 2 MiB 0.69 after 5 ms; the demo model's batch cost
// 1.4x its back-to-back figure in a VM pass). The idle copies of the point
// (kIdleGapsMs) time it after the team spun that long; the model prices the
// batch's row and dispatch costs at the layer's gap between them.
#include <gtest/gtest.h>

#include <cmath>

#include "coli/planner/plan.h"
#include "coli/planner/speed.h"
#include "measured_rates.h"
#include "planner_fixtures.h"

namespace coli::planner {
namespace {

constexpr double kPerExpert = 5e-6, kPerRow = 1e-6, kMacsPerSecond = 100e9;

// A call of made-up cost: 8 experts at kPerExpert each, kPerRow a routed row
// plus its multiply-adds at kMacsPerSecond, times `slower`.
void price(KernelThroughputPoint& p, double slower = 1.0) {
  const double rows = p.matrices / 3.0;
  const double call_s = slower * (8 * kPerExpert + rows * (kPerRow + 3.0 * p.rows * p.cols / kMacsPerSecond));
  p.tokens_per_s = {3, p.batch / call_s, p.batch / call_s, p.batch / call_s, 0};
}

// The expert prefill points on 8 threads: 2048-wide experts at 64 tokens
// each (_wide), 64-wide ones likewise (_narrow) and with one token
// (_single), and the narrow one's idle copies `idle1` and `idle4` times
// slower (none where 0).
DeviceProfile idle_profile(double idle1, double idle4) {
  DeviceProfile profile = measured_profile(10);
  profile.measurements.kernel_tuning = tuned_on_8_threads("expert_q4_prefill_wide", 1024, 64, 3 * 512, {}, {});
  auto& points = profile.measurements.kernel_tuning->points;
  KernelThroughputPoint narrow = points[0];
  narrow.kernel = "expert_q4_prefill_narrow", narrow.rows = 64, narrow.cols = 64;
  KernelThroughputPoint single = narrow;
  single.kernel = "expert_q4_prefill_single", single.batch = 1, single.matrices = 3 * 8;
  points.push_back(narrow), points.push_back(single);
  for (KernelThroughputPoint& p : points) price(p);
  for (const auto& [ms, slower] : {std::pair{kIdleGapsMs[0], idle1}, std::pair{kIdleGapsMs[1], idle4}}) {
    if (slower <= 0) continue;
    KernelThroughputPoint idle = narrow;
    idle.kernel = idle_point_name("expert_q4_prefill_narrow", ms);
    price(idle, slower);
    points.push_back(idle);
  }
  return profile;
}

measured::Team eight_threads() { return measured::Team{8, {}}; }

// Qwen3 resident on 8 threads, unpinned, from a made-up profile.
Plan resident_plan(const ModelFootprint& fp) {
  PlanRequest request;
  request.threads = 8;
  request.gpu = "none";
  auto made = make_plan(idle_profile(0, 0), fp, request);
  EXPECT_TRUE(made.ok()) << made.error().message;
  Plan plan = *made;
  plan.prefill_round_tokens = 512;  // every expert resident: the whole prompt is one round
  return plan;
}

TEST(PlanSpeed, IdlePointNamesCarryTheirGap) {
  EXPECT_EQ(idle_point_name("expert_q4_prefill_narrow", 4), "expert_q4_prefill_narrow_idle4ms");
  EXPECT_EQ(kIdleGapsMs[0], 1);
  EXPECT_EQ(kIdleGapsMs[1], 4);
}

// Back to back at no gap, 1.2x after 1 ms, 1.5x after 4 ms: linear between,
// held at 1.5 beyond the last.
TEST(PlanSpeed, NarrowBatchInPassFollowsTheIdleCopiesByItsGap) {
  const DeviceProfile profile = idle_profile(1.2, 1.5);
  EXPECT_NEAR(measured::narrow_batch_in_pass(profile, eight_threads(), 0).factor, 1.0, 1e-9);
  EXPECT_NEAR(measured::narrow_batch_in_pass(profile, eight_threads(), 0.5e-3).factor, 1.1, 1e-9);
  EXPECT_NEAR(measured::narrow_batch_in_pass(profile, eight_threads(), 2.5e-3).factor, 1.35, 1e-9);
  EXPECT_NEAR(measured::narrow_batch_in_pass(profile, eight_threads(), 40e-3).factor, 1.5, 1e-9);
  const std::string text = measured::narrow_batch_in_pass(profile, eight_threads(), 2.5e-3).text;
  EXPECT_NE(text.find("x 1.35 in the pass: its buffers idle 2.50 ms between two layers' batches "
                      "(expert_q4_prefill_narrow back to back 615 us a call, after 1 ms 738, after 4 ms 922, measured at 8 threads)"),
            std::string::npos)
      << text;
}

// An idle copy faster than back to back is noise (idling makes no call
// faster): never below 1. Without both copies (profiles before them) or with
// one timed on another team, 1 and nothing to say.
TEST(PlanSpeed, NarrowBatchInPassIsOneWithoutUsableIdleCopies) {
  EXPECT_EQ(measured::narrow_batch_in_pass(idle_profile(0.8, 0.9), eight_threads(), 5e-3).factor, 1.0);
  const auto none = measured::narrow_batch_in_pass(idle_profile(0, 0), eight_threads(), 5e-3);
  EXPECT_EQ(none.factor, 1.0);
  EXPECT_TRUE(none.text.empty());
  EXPECT_EQ(measured::narrow_batch_in_pass(idle_profile(1.2, 0), eight_threads(), 5e-3).factor, 1.0);
  DeviceProfile elsewhere = idle_profile(1.2, 1.5);
  KernelThroughputPoint& idle = elsewhere.measurements.kernel_tuning->points.back();
  idle.threads = 4, idle.pus = CpuSet({0, 1, 2, 3}), idle.thread_set = "kind0:4c";
  EXPECT_EQ(measured::narrow_batch_in_pass(elsewhere, eight_threads(), 5e-3).factor, 1.0);
}

// Qwen3 resident, the whole prompt one round a layer: each layer's batch
// follows the layer's projections (tens of ms at the made-up rate), past the
// 4 ms copy, so its rows and distinct experts cost 1.5x; the multiply-adds
// do not.
TEST(PlanSpeed, APassPaysItsBatchesRowAndDispatchCostsAtTheirGap) {
  const ModelFootprint fp = qwen3();
  Plan plan = resident_plan(fp);
  const SpeedPrediction back_to_back = predict_speed(idle_profile(0, 0), fp, plan);
  const SpeedPrediction in_pass = predict_speed(idle_profile(1.2, 1.5), fp, plan);
  ASSERT_TRUE(back_to_back.available && in_pass.available);
  const double macs = 3.0 * 2048 * 768 / kMacsPerSecond;
  EXPECT_NEAR(term_seconds(back_to_back.prefill_terms, "compute: expert GEMMs"), 48 * 8 * (kPerRow + macs), 1e-12);
  EXPECT_NEAR(term_seconds(in_pass.prefill_terms, "compute: expert GEMMs"), 48 * 8 * (1.5 * kPerRow + macs), 1e-12);
  EXPECT_NEAR(term_seconds(in_pass.prefill_terms, "compute: expert dispatch"),
              1.5 * term_seconds(back_to_back.prefill_terms, "compute: expert dispatch"), 1e-12);
  EXPECT_NE(in_pass.prefill_inputs.find("the batches' row and dispatch costs x 1.50 in the pass"), std::string::npos)
      << in_pass.prefill_inputs;
  EXPECT_EQ(back_to_back.prefill_inputs.find("in the pass"), std::string::npos);
}

// Rounds of 2 tokens: 256 a layer, run back to back, so only a layer's
// first finds its buffers aged: the factor spread over them.
TEST(PlanSpeed, OnlyALayersFirstRoundFindsItsBuffersAged) {
  const ModelFootprint fp = qwen3();
  Plan plan = resident_plan(fp);
  plan.cap = 16, plan.prefill_round_tokens = 2;
  const SpeedPrediction back_to_back = predict_speed(idle_profile(0, 0), fp, plan);
  const SpeedPrediction in_pass = predict_speed(idle_profile(1.2, 1.5), fp, plan);
  ASSERT_TRUE(back_to_back.available && in_pass.available);
  EXPECT_NEAR(term_seconds(in_pass.prefill_terms, "compute: expert dispatch"),
              (1.0 + 0.5 / 256) * term_seconds(back_to_back.prefill_terms, "compute: expert dispatch"), 1e-12);
  EXPECT_NE(in_pass.prefill_inputs.find("x 1.50 in the pass"), std::string::npos) << in_pass.prefill_inputs;
  EXPECT_NE(in_pass.prefill_inputs.find("a layer's first of 256.0 rounds"), std::string::npos) << in_pass.prefill_inputs;
}

}  // namespace
}  // namespace coli::planner
