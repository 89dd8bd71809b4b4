// Issue 15: reads slow the compute beside them where the team holds every
// core (the 2-core VM's OLMoE shape at 2 threads: 21.9 ms a streaming token
// against 18.9 resident, 0.8 of it waiting). The speed model slows the
// compute a layer's reads overlap by the probe's measured share.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "coli/planner/plan.h"
#include "coli/experts/usage_history.h"
#include "coli/planner/speed.h"
#include "planner_fixtures.h"

namespace coli::planner {
namespace {

// The tiny demo model at cap 4 of 8 (uniform: each of a layer's 2
// routings misses by half) on a made-up machine: RAM at `ram_gbs` with no
// kernel points (experts stream at the RAM rate), the engine's pool reading
// a batch of k records of b bytes in 60 us + 20 us per further read + k b /
// 1 GB/s, and 8 threads.
struct StreamingPlan {
  ModelFootprint fp;
  DeviceProfile profile;
  Plan plan;
  double batch_s(int k) const {
    return 60e-6 + 20e-6 * (k - 1) + k * static_cast<double>(fp.expert().record_stride) / 1e9;
  }
};

StreamingPlan streaming_setup(double ram_gbs) {
  auto fp = read_footprint(std::filesystem::path(COLI_FIXTURES_DIR) / "models" / "tiny-demo", WeightFormat::q4_g64,
                           DenseFormat::source);
  EXPECT_TRUE(fp.ok()) << fp.error().message;
  DeviceProfile profile = measured_profile(ram_gbs);
  profile.measurements.kernel_tuning.reset();
  for (const double block : {16384.0, 1048576.0})
    for (const int k : {1, 2, 4, 8}) {
      const double gbs = k * block / (60e-6 + 20e-6 * (k - 1) + k * block / 1e9) / 1e9;
      profile.measurements.disk->points.push_back({kEnginePoolPattern, static_cast<std::uint64_t>(block), k, {1, gbs, gbs, gbs, 0}});
    }
  profile.measurements.disk->engine_io_threads = 4;
  PlanRequest request;
  request.cap = 4;
  request.threads = 8;
  request.gpu = "none";  // the CPU engine's reads
  auto plan = make_plan(profile, *fp, request);
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  return {*fp, profile, *plan};
}

ReadInterference interference(double slowdown, double progress = 1.0, int threads = 8) {
  std::vector<int> pus(static_cast<std::size_t>(threads));
  for (int i = 0; i < threads; ++i) pus[static_cast<std::size_t>(i)] = i;
  const double alone = 30, beside = alone / (1 + slowdown);
  return {"expert_q4_decode", 1 << 20, 4, true, "", {{"kind0:8c", threads, CpuSet(pus), 4, alone, beside, slowdown, 1000, 1000 * progress, progress}}};
}

// One miss (half the layers) reads for batch_s(1) beside one resident
// expert's compute (record / RAM rate): the overlap is the shorter of the
// two; two misses (a quarter) leave nothing resident to overlap.
TEST(PlanSpeed, ComputeBesideReadsSlowsByTheMeasuredShare) {
  const double ram_gbs = 0.3;
  StreamingPlan s = streaming_setup(ram_gbs);
  ASSERT_EQ(s.plan.threads, 8);
  const double layers = s.fp.moe_layer_count();
  const double compute_s = static_cast<double>(s.fp.expert().record_bytes) / (ram_gbs * 1e9);
  ASSERT_LT(compute_s, s.batch_s(1)) << "the read outlasts the compute beside it";
  const SpeedPrediction without = predict_speed(s.profile, s.fp, s.plan);
  ASSERT_TRUE(without.available) << without.unavailable;
  ASSERT_NEAR(without.hit_rate, 0.5, 1e-12);
  EXPECT_EQ(term_seconds(without.decode_terms, "compute beside reads"), 0.0) << "a profile without the measurement";

  s.profile.measurements.read_interference = interference(0.4);
  const SpeedPrediction with = predict_speed(s.profile, s.fp, s.plan);
  EXPECT_NEAR(term_seconds(with.decode_terms, "compute beside reads"), layers * 0.5 * compute_s * 0.4, 1e-12);
  // The wait for what outlasts the compute is unchanged.
  EXPECT_NEAR(term_seconds(with.decode_terms, "experts from disk"), term_seconds(without.decode_terms, "experts from disk"), 1e-15);
  EXPECT_NEAR(1 / with.decode_tok_per_s - 1 / without.decode_tok_per_s, layers * 0.5 * compute_s * 0.4, 1e-12);
  EXPECT_NE(with.decode_inputs.find("compute 40.0% slower while a read is in flight, the read at 100% of its speed alone (expert_q4_decode on kind0:8c"),
            std::string::npos) << with.decode_inputs;
  // A prompt's rounds overlap their reads too, slowed the same way.
  const double prompt_beside = term_seconds(with.prefill_terms, "compute beside reads");
  EXPECT_GT(prompt_beside, 0.0);
  EXPECT_NEAR(1 / with.prefill_tok_per_s - 1 / without.prefill_tok_per_s, prompt_beside, 1e-12);
  s.profile.measurements.read_interference = interference(0.8);
  EXPECT_NEAR(term_seconds(predict_speed(s.profile, s.fp, s.plan).prefill_terms, "compute beside reads"), 2 * prompt_beside, 1e-12);
}

// Compute shorter than the read overlaps whole; a read shorter than the
// compute overlaps only for its own time.
TEST(PlanSpeed, OnlyTheComputeARoundOverlapsIsSlowed) {
  const double ram_gbs = 0.01;  // one expert's compute far outlasts a read
  StreamingPlan s = streaming_setup(ram_gbs);
  s.profile.measurements.read_interference = interference(1.0);
  const double layers = s.fp.moe_layer_count();
  ASSERT_GT(static_cast<double>(s.fp.expert().record_bytes) / (ram_gbs * 1e9), s.batch_s(1));
  const SpeedPrediction p = predict_speed(s.profile, s.fp, s.plan);
  EXPECT_NEAR(term_seconds(p.decode_terms, "compute beside reads"), layers * 0.5 * s.batch_s(1), 1e-12);
  EXPECT_NEAR(term_seconds(p.decode_terms, "experts from disk"), layers * 0.25 * s.batch_s(2), 1e-12);
}

// Where the reads get half their speed beside the team's compute (no core
// to spare for the I/O threads), one expert's compute C hides C / 2 of a
// read, and the read is in flight for all of C while it lasts 2 x read.
TEST(PlanSpeed, ReadsSlowedBesideComputeHideLessOfTheirTime) {
  const double ram_gbs = 0.3;
  StreamingPlan s = streaming_setup(ram_gbs);
  const double layers = s.fp.moe_layer_count();
  const double compute_s = static_cast<double>(s.fp.expert().record_bytes) / (ram_gbs * 1e9);
  ASSERT_LT(compute_s, s.batch_s(1));
  s.profile.measurements.read_interference = interference(0.2, 0.5);
  const SpeedPrediction p = predict_speed(s.profile, s.fp, s.plan);
  EXPECT_NEAR(term_seconds(p.decode_terms, "experts from disk"),
              layers * (0.5 * (s.batch_s(1) - 0.5 * compute_s) + 0.25 * s.batch_s(2)), 1e-12);
  EXPECT_NEAR(term_seconds(p.decode_terms, "compute beside reads"), layers * 0.5 * compute_s * 0.2, 1e-12);
  EXPECT_NE(p.decode_inputs.find("the read at 50% of its speed alone"), std::string::npos) << p.decode_inputs;
  // Reads measured faster beside the kernel than alone are noise: they hide no more than the compute's time.
  s.profile.measurements.read_interference = interference(0.2, 1.3);
  const SpeedPrediction faster = predict_speed(s.profile, s.fp, s.plan);
  EXPECT_NEAR(term_seconds(faster.decode_terms, "experts from disk"),
              layers * (0.5 * (s.batch_s(1) - compute_s) + 0.25 * s.batch_s(2)), 1e-12);
  EXPECT_NE(faster.decode_inputs.find("the reads faster beside it: noise, counted 100%"), std::string::npos);
}

// A usage history of `s`'s model whose routing is uniform (a hit rate of cap / n).
Result<experts::UsageHistory> uniform_history(const StreamingPlan& s) {
  const auto layers = static_cast<int>(s.fp.moe_layer_count());
  auto history = experts::UsageHistory::create({layers, s.fp.n_experts, s.fp.top_k, "tiny-test"});
  if (!history) return history.error();
  std::vector<std::vector<std::uint64_t>> uniform(static_cast<std::size_t>(layers),
                                                  std::vector<std::uint64_t>(static_cast<std::size_t>(s.fp.n_experts), 10));
  if (Status added = history->add_counts(uniform, 40); !added) return added.error();
  return history;
}

// The engine's rounds beside `s`'s team: three of one read (0.5 ms) and three of two (0.8 ms).
experts::ReadRounds three_rounds_each(const StreamingPlan& s) {
  experts::ReadRounds rounds;
  rounds.record_bytes = s.fp.expert().record_stride, rounds.io_threads = 4, rounds.compute_threads = s.plan.threads;
  for (int i = 0; i < 3; ++i) rounds.add(1, 0.5e-3), rounds.add(2, 0.8e-3);
  return rounds;
}

// The engine's own read rounds, timed while this team computed beside them
// (a usage history's), are as slow as the team left them: the reads'
// progress beside compute is already in them and is not applied again;
// the compute's slowdown still is, and so is the compute thread's measured
// wake-up after a round's last landing (the 2-core VM: 12 us at 1 thread).
TEST(PlanSpeed, ReadRoundsTimedBesideTheTeamCarryTheirOwnProgress) {
  const double ram_gbs = 0.3;
  StreamingPlan s = streaming_setup(ram_gbs);
  s.profile.measurements.read_interference = interference(0.2, 0.5);
  const double layers = s.fp.moe_layer_count();
  const double compute_s = static_cast<double>(s.fp.expert().record_bytes) / (ram_gbs * 1e9);
  auto history = uniform_history(s);
  ASSERT_TRUE(history.ok()) << history.error().message;
  experts::ReadRounds rounds = three_rounds_each(s);
  rounds.add_wake(10e-6), rounds.add_wake(10e-6);  // too few to price
  ASSERT_TRUE(history->set_read_rounds(rounds).ok());
  const SpeedPrediction p = predict_speed(s.profile, s.fp, s.plan, &*history);
  ASSERT_NEAR(p.hit_rate, 0.5, 1e-12);
  EXPECT_NEAR(term_seconds(p.decode_terms, "experts from disk"), layers * (0.5 * (0.5e-3 - compute_s) + 0.25 * 0.8e-3), 1e-12);
  EXPECT_NEAR(term_seconds(p.decode_terms, "compute beside reads"), layers * 0.5 * compute_s * 0.2, 1e-12);
  EXPECT_NE(p.decode_inputs.find("the engine's rounds were timed beside this team"), std::string::npos) << p.decode_inputs;
  // Three rounds that waited for their last read, 10 us each to run again:
  // every layer that waits pays it beside its reads.
  rounds.add_wake(10e-6);
  ASSERT_TRUE(history->set_read_rounds(rounds).ok());
  const SpeedPrediction woken = predict_speed(s.profile, s.fp, s.plan, &*history);
  EXPECT_NEAR(term_seconds(woken.decode_terms, "experts from disk"),
              layers * (0.5 * (0.5e-3 - compute_s + 10e-6) + 0.25 * (0.8e-3 + 10e-6)), 1e-12);
  EXPECT_NE(woken.decode_inputs.find("the compute thread ran again 10.0 us after a round's last read landed (mean of 3 rounds"),
            std::string::npos) << woken.decode_inputs;
}

// A generated token that waited for a round computes slower after it (the
// 2-core VM's lm_head ran 10-25% slower after a one-miss token's thread slept):
// the engine files its tokens by the rounds they waited for, and each
// decode layer that waits pays what a waiting token computed beyond a calm
// one, per waited round. A prompt's rounds do not; fewer than 5 tokens on
// either side price nothing, nor does a waiting token measured faster.
TEST(PlanSpeed, AWaitedRoundsSlowerComputeIsPricedPerWaitedRound) {
  const double ram_gbs = 0.3;
  StreamingPlan s = streaming_setup(ram_gbs);
  const double layers = s.fp.moe_layer_count();
  const double compute_s = static_cast<double>(s.fp.expert().record_bytes) / (ram_gbs * 1e9);
  auto history = uniform_history(s);
  ASSERT_TRUE(history.ok()) << history.error().message;
  experts::ReadRounds rounds = three_rounds_each(s);
  for (int i = 0; i < 10; ++i) rounds.add_wake(0);
  // 5 calm tokens of 1 ms, 4 waiting ones of 1.3 ms with 2 waited rounds each: too few.
  for (int i = 0; i < 5; ++i) rounds.add_token(1e-3, 0);
  for (int i = 0; i < 4; ++i) rounds.add_token(1.3e-3, 2);
  ASSERT_TRUE(history->set_read_rounds(rounds).ok());
  const SpeedPrediction few = predict_speed(s.profile, s.fp, s.plan, &*history);
  const double bare = layers * (0.5 * (0.5e-3 - compute_s) + 0.25 * 0.8e-3);
  EXPECT_NEAR(term_seconds(few.decode_terms, "experts from disk"), bare, 1e-12);
  EXPECT_EQ(few.decode_inputs.find("after a round it waited for"), std::string::npos) << few.decode_inputs;
  // A fifth waiting token: 0.3 ms over 2 rounds, 150 us a waited round.
  rounds.add_token(1.3e-3, 2);
  ASSERT_TRUE(history->set_read_rounds(rounds).ok());
  const SpeedPrediction priced = predict_speed(s.profile, s.fp, s.plan, &*history);
  EXPECT_NEAR(term_seconds(priced.decode_terms, "experts from disk"),
              layers * (0.5 * (0.5e-3 - compute_s + 150e-6) + 0.25 * (0.8e-3 + 150e-6)), 1e-12);
  EXPECT_NE(priced.decode_inputs.find("a generated token computed 150.0 us longer a waited round (5 tokens that waited, "
                                      "2.00 rounds each, against 5 that did not"),
            std::string::npos) << priced.decode_inputs;
  EXPECT_NEAR(term_seconds(priced.prefill_terms, "experts from disk"), term_seconds(few.prefill_terms, "experts from disk"),
              1e-15) << "a prompt's rounds pay no token's resume";
  // Waiting tokens measured faster: noise, nothing priced.
  experts::ReadRounds faster = rounds;
  faster.waiting_seconds = 5 * 0.9e-3;
  ASSERT_TRUE(history->set_read_rounds(faster).ok());
  const SpeedPrediction noise = predict_speed(s.profile, s.fp, s.plan, &*history);
  EXPECT_NEAR(term_seconds(noise.decode_terms, "experts from disk"), bare, 1e-12);
  EXPECT_NE(noise.decode_inputs.find("faster: noise, counted 0"), std::string::npos) << noise.decode_inputs;
}

// A kernel the probe timed faster beside reads is noise: no term, and the
// plan says so; nor does a plan whose experts all stay resident pay any.
TEST(PlanSpeed, ReadInterferenceBelowZeroOrWithoutReadsCostsNothing) {
  StreamingPlan s = streaming_setup(0.3);
  s.profile.measurements.read_interference = interference(-0.1);
  const SpeedPrediction faster = predict_speed(s.profile, s.fp, s.plan);
  EXPECT_EQ(term_seconds(faster.decode_terms, "compute beside reads"), 0.0);
  EXPECT_NE(faster.decode_inputs.find("the kernel faster beside them: noise, counted 0"), std::string::npos) << faster.decode_inputs;
  s.profile.measurements.read_interference = interference(0.5);
  Plan resident = s.plan;
  resident.cap = s.fp.n_experts;
  const SpeedPrediction all = predict_speed(s.profile, s.fp, resident);
  EXPECT_EQ(term_seconds(all.decode_terms, "compute beside reads"), 0.0);
  EXPECT_EQ(term_seconds(all.prefill_terms, "compute beside reads"), 0.0);
}

}  // namespace
}  // namespace coli::planner
