// coli-sweep's pure parts: the grid from a device profile and a model
// footprint, the planned configuration in it, ranking, and the renderings.
#include <gtest/gtest.h>

#include <cmath>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "coli/probe/profile_io.h"
#include "sweep_grid.h"
#include "sweep_report.h"
#include "measure/retime.h"
#include "sweep_retime.h"
#include "read_round_settle.h"

namespace coli::bench {
namespace {

const std::string kConfigs = std::string(COLI_FIXTURES_DIR) + "/model-configs/";

planner::ModelFootprint olmoe() {
  auto fp = planner::read_footprint(kConfigs + "OLMoE-1B-7B-0924.json", WeightFormat::q4_g64,
                                    DenseFormat::q8_row);
  EXPECT_TRUE(fp.ok()) << (fp.ok() ? "" : fp.error().message);
  return *fp;
}

DeviceProfile h200_profile() {
  auto p = load_profile(std::string(COLI_FIXTURES_DIR) + "/../../profiles/h200-xeon-16c.toml");
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
  return *p;
}

// Two P-cores with SMT siblings (0,1) (2,3) and four single-PU E-cores 8-11.
CpuFacts hybrid_cpu() {
  CpuFacts cpu;
  CpuKind e;
  e.rank = 0;
  for (int pu = 8; pu < 12; ++pu) e.core_pus.push_back(CpuSet({pu}));
  e.pus = *CpuSet::parse("8-11");
  e.cores = 4;
  CpuKind p;
  p.rank = 1;
  p.core_pus = {CpuSet({0, 1}), CpuSet({2, 3})};
  p.pus = *CpuSet::parse("0-3");
  p.cores = 2;
  cpu.kinds = {e, p};
  cpu.usable.pus = *CpuSet::parse("0-3,8-11");
  return cpu;
}

std::vector<std::string> labels(const std::vector<ThreadSet>& sets) {
  std::vector<std::string> out;
  for (const ThreadSet& s : sets) out.push_back(s.label + "=" + s.pus.to_list());
  return out;
}

TEST(SweepGrid, ThreadSetsOfTheH200ProfileDoubleUpToEveryCore) {
  const auto sets = thread_sets_from_profile(h200_profile().cpu);
  EXPECT_EQ(labels(sets), (std::vector<std::string>{"1t k0=0", "2t k0=0-1", "4t k0=0-3", "8t k0=0-7", "16t k0=0-15"}));
}

TEST(SweepGrid, ThreadSetsPerKindWithAndWithoutSmtThenAllKinds) {
  const auto sets = thread_sets_from_profile(hybrid_cpu());
  EXPECT_EQ(labels(sets), (std::vector<std::string>{"1t k1=0", "2t k1+smt=0-1", "2t k1=0,2", "4t k1+smt=0-3", "1t k0=8",
                                                    "2t k0=8-9", "4t k0=8-11", "6t all=0,2,8-11",
                                                    "8t all+smt=0-3,8-11"}));
}

TEST(SweepGrid, ThreadSetsKeepToUsableCpusAndTheQuota) {
  CpuFacts cpu = hybrid_cpu();
  cpu.usable.pus = *CpuSet::parse("0,2,8");
  cpu.usable.quota_cpus = 2.0;
  EXPECT_EQ(labels(thread_sets_from_profile(cpu)), (std::vector<std::string>{"1t k1=0", "2t k1=0,2", "1t k0=8"}));
}

TEST(SweepGrid, KernelsFollowTheIsaFlags) {
  EXPECT_EQ(kernels_from_isa(h200_profile().cpu.isa), (std::vector<std::string>{"", "avx2", "avx512", "avx512vnni", "amx"}));
  EXPECT_EQ(kernels_from_isa({"avx2", "f16c", "fma"}), (std::vector<std::string>{"", "avx2"}));
  EXPECT_EQ(kernels_from_isa({"avx2", "fma"}), (std::vector<std::string>{""}));  // no F16C: not the engine's AVX2
  EXPECT_EQ(kernels_from_isa({"neon"}), (std::vector<std::string>{""}));
}

// Issue 12: "auto" is the engine's choice; naming that variant too runs it once.
TEST(SweepGrid, AutoResolvesToTheEnginesVariantAndDuplicatesMerge) {
  const ResolvedKernels same = resolve_kernels({"", "avx2", "scalar"}, "avx2");
  EXPECT_EQ(same.kernels, (std::vector<std::string>{"avx2", "scalar"}));
  ASSERT_EQ(same.merged.size(), 1u);
  EXPECT_NE(same.merged[0].find("auto and avx2 are avx2 (auto: the engine's choice"), std::string::npos) << same.merged[0];
  const ResolvedKernels auto_second = resolve_kernels({"avx512", ""}, "avx512");
  EXPECT_EQ(auto_second.kernels, (std::vector<std::string>{"avx512"}));
  ASSERT_EQ(auto_second.merged.size(), 1u);
  EXPECT_NE(auto_second.merged[0].find("avx512 and auto are avx512"), std::string::npos) << auto_second.merged[0];
  const ResolvedKernels distinct = resolve_kernels({"", "scalar"}, "avx2");
  EXPECT_EQ(distinct.kernels, (std::vector<std::string>{"avx2", "scalar"}));
  EXPECT_TRUE(distinct.merged.empty());
}

TEST(SweepGrid, GridCombinesAndDropsPinsThatEqualOff) {
  const auto fp = olmoe();
  GridSpec spec;
  spec.thread_sets = {{"1t k0", CpuSet({0})}, {"2t k0", CpuSet({0, 1})}};
  spec.caps = {fp.n_experts, 16, 8};
  spec.pins = {false, true};
  spec.kernels = {"", "avx2"};
  auto grid = build_grid(fp, spec);
  ASSERT_TRUE(grid.ok()) << grid.error().message;
  // cap 8 = top_k leaves no room for a pin, and with every expert resident
  // none is ever evicted: pins on equals off at both.
  EXPECT_EQ(grid->size(), 2u * (1 + 2 + 1) * 2);
  for (const SweepConfig& c : *grid) {
    EXPECT_FALSE(c.planned);
    if (c.cap == 8 || c.cap == fp.n_experts) {
      EXPECT_EQ(c.pins, 0);
    }
    EXPECT_GE(c.round_tokens, 1);
  }
  EXPECT_TRUE(std::any_of(grid->begin(), grid->end(), [](const SweepConfig& c) { return c.cap == 16 && c.pins > 0; }));
  EXPECT_EQ(config_label(grid->front(), fp.n_experts), "1t k0 | cap all | pins 0 | auto");
}

TEST(SweepGrid, CapsAreSlotCountsWithAllTheExpertCount) {
  auto caps = parse_caps({"all", "16", "8"}, 64, "--caps");
  ASSERT_TRUE(caps.ok()) << caps.error().message;
  EXPECT_EQ(*caps, (std::vector<int>{64, 16, 8}));
  for (const char* bad : {"0", "65", "many", "-1"}) {
    auto refused = parse_caps({bad}, 64, "--caps");
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.error().message.find("--caps: '" + std::string(bad) + "' is not 'all' or a slot count in [1, 64]"),
              std::string::npos) << refused.error().message;
  }
}

TEST(SweepGrid, BadGridsAreErrors) {
  const auto fp = olmoe();
  GridSpec spec{{{"1t", CpuSet({0})}}, {4}, {false}, {""}, 64};
  auto below_top_k = build_grid(fp, spec);
  ASSERT_FALSE(below_top_k.ok());
  EXPECT_NE(below_top_k.error().message.find("top_k 8"), std::string::npos) << below_top_k.error().message;
  spec.caps = {65};
  EXPECT_FALSE(build_grid(fp, spec).ok());
  spec.caps = {fp.n_experts};
  spec.kernels = {"sse9"};
  EXPECT_FALSE(build_grid(fp, spec).ok());
  spec.kernels = {""};
  spec.thread_sets.clear();
  auto empty = build_grid(fp, spec);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("no thread set"), std::string::npos);
}

TEST(SweepGrid, ThePlannedConfigurationIsMarkedOrAdded) {
  const auto fp = olmoe();
  const DeviceProfile profile = h200_profile();
  GridSpec spec{thread_sets_from_profile(profile.cpu), {fp.n_experts}, {false}, {""}, 64};
  auto grid = build_grid(fp, spec);
  ASSERT_TRUE(grid.ok());
  planner::Plan plan;
  plan.threads = 16;
  plan.cap = fp.n_experts;
  plan.pins = 0;
  plan.prefill_round_tokens = 64;
  const SweepConfig planned = planned_config(plan, profile, spec.thread_sets);
  EXPECT_EQ(planned.threads.label, "16t k0");
  // And back: the plan a grid configuration runs under (runtime::options_from_plan's input).
  plan.io_threads = 3;
  const planner::Plan back = plan_of_config(plan, planned);
  EXPECT_EQ(back.threads, 16);
  EXPECT_EQ(back.compute_pus, planned.threads.pus);
  EXPECT_EQ(back.cap, fp.n_experts);
  EXPECT_EQ(back.io_threads, 3);
  const std::size_t before = grid->size();
  const std::size_t index = add_planned(*grid, planned);
  EXPECT_EQ(grid->size(), before);
  EXPECT_TRUE((*grid)[index].planned);
  EXPECT_EQ(std::count_if(grid->begin(), grid->end(), [](const SweepConfig& c) { return c.planned; }), 1);

  plan.threads = 3;  // not the profile's recommendation, not a grid set
  const SweepConfig other = planned_config(plan, profile, spec.thread_sets);
  EXPECT_EQ(other.threads.pus.to_list(), "0-2");
  EXPECT_EQ(other.threads.label, "3t plan");
  EXPECT_EQ(add_planned(*grid, other), before);
  EXPECT_TRUE(grid->back().planned);
}

// Issue 18: experts spread over several GPUs are a placement of their own,
// labelled by their GPUs; the configuration's plan carries each GPU's share
// (what coli run gives the engine), and a planned expert-parallel plan is
// that placement.
TEST(SweepGrid, ExpertParallelPlacementsCarryTheirGpus) {
  const auto fp = olmoe();
  planner::Plan ep_plan;
  ep_plan.n_experts = fp.n_experts;
  ep_plan.threads = 1;
  ep_plan.cap = fp.n_experts;
  ep_plan.prefill_round_tokens = 64;
  ep_plan.gpu.backend = "cuda";
  ep_plan.gpu.whole_decoder = true;
  ep_plan.gpu.vram_experts.assign(16, fp.n_experts);  // the two GPUs' sum: every expert
  ep_plan.expert_parallel.gpus.resize(2);
  ep_plan.expert_parallel.gpus[0].ordinal = 1;
  ep_plan.expert_parallel.gpus[1].ordinal = 0;
  ep_plan.expert_parallel.expert_gpu.assign(16, std::vector<int>(static_cast<std::size_t>(fp.n_experts), 1));
  const GpuPlacement placement = expert_parallel_placement(ep_plan);
  EXPECT_EQ(placement.label, "cuda gpus 1,0");
  EXPECT_TRUE(placement.all_in_vram);
  GridSpec spec{{{"1t", CpuSet({0})}}, {fp.n_experts}, {false}, {""}, 64};
  spec.placements = {GpuPlacement{}, placement};
  auto grid = build_grid(fp, spec);
  ASSERT_TRUE(grid.ok()) << grid.error().message;
  ASSERT_EQ(grid->size(), 2u);
  EXPECT_EQ(config_label((*grid)[1], fp.n_experts), "1t | cap all | pins 0 | auto | cuda gpus 1,0");
  planner::Plan base;
  EXPECT_EQ(plan_of_config(base, (*grid)[1]).expert_parallel, ep_plan.expert_parallel);
  EXPECT_FALSE(plan_of_config(ep_plan, (*grid)[0]).expert_parallel.active()) << "the CPU placement drops the base plan's GPUs";
  SweepConfig planned = planned_config(ep_plan, h200_profile(), spec.thread_sets);
  EXPECT_EQ(planned.gpu.label, "cuda gpus 1,0");
  EXPECT_EQ(add_planned(*grid, planned), 1u);
}

// GPU placements multiply the grid (one per placement), label it, and go
// into the plan a configuration runs; a CPU placement takes the GPU tier
// away. (The whole-layer tier itself is planner::whole_layer_split's,
// tested with the planner.)
TEST(SweepGrid, GpuPlacementsAreADimensionOfTheGrid) {
  const auto fp = olmoe();
  planner::GpuTier tier;
  tier.backend = "cuda";
  tier.vram_headroom_bytes = 2ull << 30;
  tier.vram_experts.assign(16, 40);  // 40 of 64 experts of every layer in VRAM
  EXPECT_EQ(placement_label(tier, "expert"), "cuda 2.0 GiB expert");
  planner::GpuTier whole_tier = tier;  // the first 6 layers' experts on the CPU
  for (int l = 0; l < 16; ++l) whole_tier.vram_experts[static_cast<std::size_t>(l)] = l < 6 ? 0 : fp.n_experts;

  GridSpec spec{{{"1t", CpuSet({0})}}, {fp.n_experts}, {false}, {""}, 64};
  spec.placements = {GpuPlacement{}, gpu_placement(tier, "expert", fp.n_experts), gpu_placement(whole_tier, "layer", fp.n_experts)};
  EXPECT_FALSE(spec.placements[1].all_in_vram);
  auto grid = build_grid(fp, spec);
  ASSERT_TRUE(grid.ok()) << grid.error().message;
  ASSERT_EQ(grid->size(), 3u);
  EXPECT_EQ(config_label((*grid)[0], fp.n_experts), "1t | cap all | pins 0 | auto");
  EXPECT_EQ(config_label((*grid)[2], fp.n_experts), "1t | cap all | pins 0 | auto | cuda 2.0 GiB layer");
  EXPECT_FALSE((*grid)[1].same_knobs((*grid)[2]));
  planner::Plan base;
  base.gpu = tier;
  EXPECT_EQ(plan_of_config(base, (*grid)[0]).gpu.backend, "cpu") << "the CPU placement drops the base plan's tier";
  EXPECT_EQ(plan_of_config(base, (*grid)[2]).gpu.vram_experts, whole_tier.vram_experts);
  // The planned configuration carries its own tier, and matches the per-expert placement of its budget.
  base.threads = 1;
  base.cap = fp.n_experts;
  base.prefill_round_tokens = 64;
  SweepConfig planned = planned_config(base, h200_profile(), spec.thread_sets);
  EXPECT_EQ(planned.gpu.label, "cuda 2.0 GiB expert");
  // Every expert in VRAM: the host cache's cap does nothing, so the caps are one configuration, and a
  // planned configuration with another cap is that one.
  planner::GpuTier all = tier;
  all.vram_experts.assign(16, fp.n_experts);
  spec.placements = {gpu_placement(all, "expert", fp.n_experts)};
  spec.caps = {fp.n_experts, 16};
  auto merged = build_grid(fp, spec);
  ASSERT_TRUE(merged.ok()) << merged.error().message;
  EXPECT_EQ(merged->size(), 1u) << "one configuration for every cap";
  base.gpu = all;
  base.n_experts = fp.n_experts;
  base.cap = 8;
  EXPECT_EQ(add_planned(*merged, planned_config(base, h200_profile(), spec.thread_sets)), 0u);
  EXPECT_EQ(merged->size(), 1u);
  spec.placements.clear();
  auto empty = build_grid(fp, spec);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("no expert placement"), std::string::npos);
}

TEST(SweepReport, MedianSpreadAndRank) {
  const MetricStats odd = metric_stats({3, 1, 2});
  EXPECT_DOUBLE_EQ(odd.median, 2);
  EXPECT_DOUBLE_EQ(odd.spread, 1);
  EXPECT_DOUBLE_EQ(metric_stats({4, 1, 2, 3}).median, 2.5);

  std::vector<ConfigSummary> s(4);
  s[0].decode.median = 10, s[1].decode.median = 20, s[2].decode.median = 15, s[3].decode.median = 15;
  s[0].prefill.median = 50, s[1].prefill.median = 40, s[2].prefill.median = 30, s[3].prefill.median = 5;
  const Ranking decode = rank_planned(s, 2, Metric::decode);
  EXPECT_EQ(decode.rank, 2);  // ties share the better rank
  EXPECT_EQ(decode.of, 4);
  EXPECT_EQ(decode.best, 1u);
  EXPECT_DOUBLE_EQ(decode.percent_of_best, 75);
  const Ranking prefill = rank_planned(s, 2, Metric::prefill);
  EXPECT_EQ(prefill.rank, 3);
  EXPECT_DOUBLE_EQ(prefill.percent_of_best, 60);
  EXPECT_EQ(order_by(s, Metric::decode), (std::vector<std::size_t>{1, 2, 3, 0}));
  // A planned configuration that is the best is exactly 100%, never a
  // rounding above it (100 * x / x exceeds 100 for x = 214.80156371896743).
  s[1].decode.median = 214.80156371896743;
  EXPECT_EQ(rank_planned(s, 1, Metric::decode).percent_of_best, 100.0);
}

// A run of `config` in `repeat` that decoded `decode` tok/s (1 token in 1 / decode s).
RunRecord decoded(std::size_t config, int repeat, double decode) {
  RunRecord run;
  run.config = config, run.repeat = repeat;
  run.decode_tokens = 1, run.decode_seconds = 1 / decode;
  return run;
}

TEST(SweepReport, PairedStandingComparesRunsOfOneRepeat) {
  // The machine halves its speed in repeat 1. By medians over the repeats
  // the planned configuration (0) is 60 / 70 = 86% of config 1, which it
  // beats in two of three repeats (a paired median of 105%); it trails
  // config 2 by the same 9% in every repeat.
  const std::vector<RunRecord> runs{decoded(0, 0, 100), decoded(1, 0, 95), decoded(2, 0, 110),
                                    decoded(0, 1, 50),  decoded(1, 1, 45), decoded(2, 1, 55),
                                    decoded(0, 2, 60),  decoded(1, 2, 70), decoded(2, 2, 66)};
  const PairedStanding p = paired_standing(runs, 3, 0, Metric::decode);
  ASSERT_TRUE(p.available);
  EXPECT_EQ(p.rival, 2u) << "the configuration the planned one trails most";
  EXPECT_NEAR(p.percent, 100.0 / 1.1, 1e-9);
  EXPECT_EQ(p.repeats, 3);
  EXPECT_EQ(p.ahead, 0);
  const std::vector<RunRecord> two{runs[0], runs[1], runs[3], runs[4], runs[6], runs[7]};
  const PairedStanding against_1 = paired_standing(two, 2, 0, Metric::decode);
  EXPECT_NEAR(against_1.percent, 100 * 100.0 / 95, 1e-9);
  EXPECT_EQ(against_1.ahead, 2);
  EXPECT_NEAR(rank_planned(summarize(2, two), 0, Metric::decode).percent_of_best, 100 * 60.0 / 70, 1e-9);
  // Only repeats both ran count; a configuration alone has no standing.
  const PairedStanding one_common = paired_standing({runs[0], runs[1], runs[5]}, 3, 0, Metric::decode);
  EXPECT_EQ(one_common.repeats, 1);
  EXPECT_EQ(one_common.rival, 1u);
  EXPECT_FALSE(paired_standing({runs[0], runs[3]}, 1, 0, Metric::decode).available);
  EXPECT_FALSE(paired_standing(runs, 3, 0, Metric::prefill).available) << "no prefill was measured";
}

TEST(SweepReport, RepeatNoiseIsTheMedianAndWidestSpread) {
  std::vector<ConfigSummary> s(4);
  s[0].decode.spread = 0.10, s[1].decode.spread = 0.40, s[2].decode.spread = 0.20, s[3].decode.spread = 0.90;
  for (ConfigSummary& c : s) c.repeats = 3;
  s[3].repeats = 1;  // one run has no spread to speak of
  const RepeatNoise n = repeat_noise(s, Metric::decode);
  EXPECT_EQ(n.configs, 3);
  EXPECT_DOUBLE_EQ(n.median_spread, 0.20);
  EXPECT_DOUBLE_EQ(n.widest_spread, 0.40);
  EXPECT_EQ(n.widest, 1u);
  EXPECT_EQ(repeat_noise(std::vector<ConfigSummary>(2), Metric::prefill).configs, 0);
}

TEST(SweepReport, TokenMismatchNamesBothConfigurationsAndWhere) {
  const std::vector<std::vector<std::int32_t>> reference{{1, 2, 3}, {4, 5, 6}};
  EXPECT_FALSE(token_mismatch(reference, "a", reference, "b").has_value());
  auto differs = token_mismatch({{1, 2, 3}, {4, 9, 6}}, "2t k0 | cap 16", reference, "1t k0 | cap all");
  ASSERT_TRUE(differs.has_value());
  EXPECT_EQ(*differs, "'2t k0 | cap 16' and '1t k0 | cap all' differ on decode test 1 at generated token 1: 9 vs 5");
  auto shorter = token_mismatch({{1, 2, 3}, {4, 5}}, "a", reference, "b");
  ASSERT_TRUE(shorter.has_value());
  EXPECT_NE(shorter->find("token 2: (end) vs 6"), std::string::npos) << *shorter;
  EXPECT_TRUE(token_mismatch({{1, 2, 3}}, "a", reference, "b").has_value());
}

SweepReport two_config_report() {
  SweepReport r;
  r.model = "m<&>.coli";
  r.n_experts = 64;
  r.prompt_tokens = 4, r.decode_tokens = 2, r.repeats = 2;
  r.depths = {0, 512};
  r.grid = {{{"1t k0", CpuSet({0})}, std::nullopt, 64, 0, 64, "", false}, {{"2t k0", CpuSet({0, 1})}, std::nullopt, 16, 4, 32, "avx2", true}};
  r.planned = 1;
  for (int repeat = 0; repeat < 2; ++repeat) {
    for (std::size_t c = 0; c < 2; ++c) {
      RunRecord run;
      run.config = c, run.repeat = repeat;
      run.prefill_tokens = 4, run.prefill_seconds = 0.1 * static_cast<double>(c + 1 + repeat);
      run.decode_tokens = 2, run.decode_seconds = 0.2 / static_cast<double>(c + 1);
      run.depth_tok_s = {10.0 * static_cast<double>(c + 1) + repeat, 5.0 * static_cast<double>(c + 1)};
      run.expert_hits = 3, run.expert_misses = 1;
      r.runs.push_back(run);
    }
  }
  r.summaries = summarize(2, r.runs);
  return r;
}

TEST(SweepReport, SummariesFollowTheRuns) {
  const SweepReport r = two_config_report();
  EXPECT_DOUBLE_EQ(r.summaries[1].decode.median, 20);
  EXPECT_DOUBLE_EQ(r.summaries[0].prefill.median, 30);  // 40 and 20 tok/s
  EXPECT_DOUBLE_EQ(r.summaries[0].hit_rate, 0.75);
  EXPECT_EQ(r.summaries[0].repeats, 2);
  ASSERT_EQ(r.summaries[1].decode_at_depth.size(), 2u);
  EXPECT_DOUBLE_EQ(r.summaries[1].decode_at_depth[0].median, 20.5);  // 20 and 21 tok/s at depth 0
  EXPECT_DOUBLE_EQ(r.summaries[1].decode_at_depth[1].median, 10);
}

TEST(SweepReport, TableHasADecodeColumnPerDepth) {
  const std::string table = sweep_table(two_config_report());
  EXPECT_NE(table.find("tg@d0  tg@d512\n"), std::string::npos) << table;
  EXPECT_NE(table.find("  20.50    10.00\n"), std::string::npos) << table;
  EXPECT_NE(table.find("prefill: pp4; decode: tg2 over every depth"), std::string::npos) << table;
}

TEST(SweepPrediction, SpearmanRanksWithTiesAndRefusesWhatHasNoOrder) {
  EXPECT_DOUBLE_EQ(*spearman_rank_correlation({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(*spearman_rank_correlation({1, 2, 3, 4}, {40, 30, 20, 10}), -1.0);
  // Ranks, not values: any increasing map of one side changes nothing.
  EXPECT_DOUBLE_EQ(*spearman_rank_correlation({1, 2, 3}, {1, 100, 101}), 1.0);
  // Ties share the mean rank: a = ranks 1, 2.5, 2.5, 4; b = 1, 2, 3, 4.
  // Pearson of those: covariance 4.5 / sqrt(4.5 * 5).
  EXPECT_NEAR(*spearman_rank_correlation({1, 5, 5, 9}, {1, 2, 3, 4}), 4.5 / std::sqrt(4.5 * 5), 1e-12);
  EXPECT_FALSE(spearman_rank_correlation({1}, {2}).has_value());
  EXPECT_FALSE(spearman_rank_correlation({3, 3, 3}, {1, 2, 3}).has_value());
  EXPECT_FALSE(spearman_rank_correlation({1, 2}, {1, 2, 3}).has_value());
}

TEST(SweepPrediction, QualityTakesTheWorstErrorAndSkipsWhatWasNotPredicted) {
  std::vector<ConfigSummary> s(3);
  s[0].decode.median = 100, s[1].decode.median = 50, s[2].decode.median = 80;
  s[0].prefill.median = 200, s[1].prefill.median = 100, s[2].prefill.median = 10;
  std::vector<ConfigPrediction> p(3);
  p[0] = {true, "", 110, 100};  // +10% decode, -50% prefill
  p[1] = {true, "", 40, 150};   // -20% decode, +50% prefill
  p[2] = {false, "no bandwidth", 0, 0};
  const PredictionQuality decode = prediction_quality(s, p, Metric::decode);
  EXPECT_EQ(decode.points, 2);
  EXPECT_NEAR(decode.worst_error, -0.2, 1e-12);
  EXPECT_EQ(decode.worst, 1u);
  EXPECT_NEAR(decode.mean_abs_error, 0.15, 1e-12);
  EXPECT_DOUBLE_EQ(*decode.rank_correlation, 1.0);  // 110 > 40 as 100 > 50
  const PredictionQuality prefill = prediction_quality(s, p, Metric::prefill);
  EXPECT_NEAR(std::abs(prefill.worst_error), 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(*prefill.rank_correlation, -1.0);  // 100 < 150 where 200 > 100
}

// The band: a measured median at either end counts inside; a band of no
// width (the probe timed each rate once) or none at all is left out.
TEST(SweepPrediction, BandStandingCountsWhatLiesInsideAndNamesTheRest) {
  std::vector<ConfigSummary> s(5);
  for (std::size_t i = 0; i < s.size(); ++i) s[i].decode.median = 100, s[i].prefill.median = 500;
  std::vector<ConfigPrediction> p(5, ConfigPrediction{true, "", 100, 500});
  auto band = [](ConfigPrediction& c, double lo, double hi) { c.band.decode_slowest = lo, c.band.decode_fastest = hi; };
  band(p[0], 90, 110);
  band(p[1], 100, 120);  // at its lower end
  band(p[2], 101, 130);  // above the measured: outside
  band(p[3], 100, 100);  // no width
  const BandStanding decode = band_standing(s, p, Metric::decode);  // p[4]: no band
  EXPECT_EQ(decode.points, 3);
  EXPECT_EQ(decode.inside, 2);
  EXPECT_EQ(decode.outside, std::vector<std::size_t>{2});
  EXPECT_EQ(band_standing(s, p, Metric::prefill).points, 0) << "no prefill band was made";
}

TEST(SweepPrediction, TableJsonAndCsvCarryThePredictionAndItsError) {
  SweepReport r = two_config_report();  // decode medians 10 and 20, prefill 30 and 20
  r.predictions = {{true, "", 12, 15}, {false, "no measured bandwidth", 0, 0}};
  const std::string table = sweep_table(r);
  EXPECT_NE(table.find("20%"), std::string::npos) << table;   // decode 12 vs 10
  EXPECT_NE(table.find("-50%"), std::string::npos) << table;  // prefill 15 vs 30
  EXPECT_NE(table.find("predicted vs measured over 1 configurations: worst error 20.0%"), std::string::npos) << table;
  const auto json = nlohmann::json::parse(sweep_json(r));
  EXPECT_NEAR(json["configs"][0]["predicted"]["decode_error"].get<double>(), 0.2, 1e-12);
  EXPECT_EQ(json["configs"][1]["predicted"]["unavailable"], "no measured bandwidth");
  EXPECT_EQ(json["prediction"]["decode"]["points"], 1);
  EXPECT_TRUE(json["prediction"]["decode"]["rank_correlation"].is_null());
  const std::string csv = sweep_csv(r);
  EXPECT_NE(csv.find(",15.000,12.000,\"cpu\"\n"), std::string::npos) << csv;
}

// --retime: each repeat's predictions from the figures timed before it; a
// configuration's re-timed prediction is their median, its error beside the
// stored profile's, and the drift of each repeat is printed.
TEST(SweepRetime, RepeatsPredictionsGiveTheirMedianAndItsError) {
  SweepReport r = two_config_report();  // decode medians 10 and 20
  r.predictions = {{true, "", 12, 15}, {true, "", 20, 20}};
  r.retimed = {{0, 9.5, "kind0:1c 0.80x (24 kernels)", {{true, "", 8, 27}, {true, "", 18, 22}}},
               {1, 9.0, "kind0:1c 1.00x (24 kernels)", {{true, "", 10, 33}, {false, "no bandwidth", 0, 0}}}};
  const std::vector<ConfigPrediction> retimed = retimed_predictions(r);
  ASSERT_EQ(retimed.size(), 2u);
  EXPECT_DOUBLE_EQ(retimed[0].decode_tok_s, 9);    // median of 8 and 10
  EXPECT_DOUBLE_EQ(retimed[0].prefill_tok_s, 30);  // of 27 and 33
  EXPECT_TRUE(retimed[1].available);               // the repeat that predicted it
  EXPECT_DOUBLE_EQ(retimed[1].decode_tok_s, 18);
  const std::string table = sweep_table(r);
  EXPECT_NE(table.find("repeat 1 (9.5 s): kind0:1c 0.80x (24 kernels)"), std::string::npos) << table;
  // The stored profile's worst decode error is +20% (12 against 10), the re-timed one's -10% (9 and 18 against 10 and 20).
  EXPECT_NE(table.find("decode:  predicted vs measured over 2 configurations: worst error 20.0%"), std::string::npos) << table;
  EXPECT_NE(table.find("decode, re-timed:  predicted vs measured over 2 configurations: worst error -10.0%"), std::string::npos)
      << table;
  const auto json = nlohmann::json::parse(sweep_json(r));
  EXPECT_NEAR(json["configs"][0]["predicted_retimed"]["decode_error"].get<double>(), -0.1, 1e-12);
  EXPECT_EQ(json["configs"][1]["predicted_retimed"]["repeats"].size(), 1u);
  EXPECT_EQ(json["retimed"]["repeats"][1]["drift"], "kind0:1c 1.00x (24 kernels)");
  // Prefill: 30 against a median of 30, and 22 against 16.7 (20 and 13.3 tok/s).
  EXPECT_NEAR(json["retimed"]["prediction"]["prefill"]["worst_error"].get<double>(), 22.0 / (50.0 / 3) - 1, 1e-12);
  r.retimed.clear();  // without --retime: neither the lines nor the keys
  EXPECT_EQ(sweep_table(r).find("re-timed"), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(sweep_json(r)).contains("retimed"));
}

KernelThroughputPoint tuned(const std::string& kernel, const std::string& set, const char* pus, double gb_per_s) {
  KernelThroughputPoint p;
  p.kernel = kernel, p.thread_set = set, p.pus = *CpuSet::parse(pus);
  p.threads = p.pus.size();
  p.gb_per_s.median = gb_per_s;
  return p;
}

// The re-timed points replace the profile's of the same kernel and PUs (a
// set the grid did not run keeps its own), OpenMP's costs those of the same
// team size; the drift is each set's median ratio over the kernels in both.
TEST(SweepRetime, RetimedPointsReplaceTheirOwnAndTheDriftIsTheirMedianRatio) {
  DeviceProfile profile;
  profile.measurements.kernel_tuning = KernelTuning{};
  profile.measurements.kernel_tuning->points = {tuned("expert_q4_decode", "kind0:1c", "0", 10),
                                                tuned("dense_q8_decode", "kind0:1c", "0", 20),
                                                tuned("greedy_sample", "kind0:1c", "0", 4),
                                                tuned("expert_q4_decode", "kind0:2c", "0-1", 18)};
  profile.measurements.parallel_overhead = ParallelOverhead{2000, {{1, 0.1, 0.1, 0.1}, {2, 2.0, 1.0, 1.0}}};
  probe::RetimedMeasurements now;
  now.kernels.points = {tuned("expert_q4_decode", "kind0:1c", "0", 8), tuned("dense_q8_decode", "kind0:1c", "0", 18),
                        tuned("greedy_sample", "kind0:1c", "0", 2), tuned("attention_prefill", "kind0:1c", "0", 5)};
  now.parallel.points = {{2, 3.0, 1.5, 1.5}};
  const DeviceProfile retimed = probe::with_retimed(profile, now);
  const auto& points = retimed.measurements.kernel_tuning->points;
  ASSERT_EQ(points.size(), 5u);  // four kept or replaced, one added
  EXPECT_DOUBLE_EQ(points[0].gb_per_s.median, 8);
  EXPECT_DOUBLE_EQ(points[3].gb_per_s.median, 18);  // kind0:2c was not re-timed
  EXPECT_EQ(points[4].kernel, "attention_prefill");
  EXPECT_DOUBLE_EQ(retimed.measurements.parallel_overhead->points[0].region_us, 0.1);
  EXPECT_DOUBLE_EQ(retimed.measurements.parallel_overhead->points[1].region_us, 3.0);
  // Ratios 0.8, 0.9 and 0.5 (attention_prefill has no point to compare): median 0.8.
  const std::vector<probe::SetDrift> drift = probe::kernel_drift(profile, now.kernels);
  ASSERT_EQ(drift.size(), 1u);
  EXPECT_EQ(drift[0].kernels, 3);
  EXPECT_DOUBLE_EQ(drift[0].ratio, 0.8);
  EXPECT_EQ(probe::drift_text(drift), "kind0:1c 0.80x (3 kernels)");
  EXPECT_EQ(probe::drift_text({}), "no kernel point of the profile was timed again");
}

// RAM bandwidth timed again replaces the profile's points of the same
// kernel, kind and thread count (the planner's ram_bandwidth reads them), and
// the drift names each read point against the profile's.
TEST(SweepRetime, RamBandwidthTimedAgainReplacesItsPointsAndSaysHowItMoved) {
  const auto point = [](const char* kernel, int kind, int threads, double gb_per_s) {
    MemoryBandwidthPoint p{kernel, kind, threads, {}, {}};
    p.gb_per_s.median = gb_per_s;
    return p;
  };
  DeviceProfile profile;
  probe::RetimedMeasurements now;
  EXPECT_EQ(probe::memory_drift_text(profile, now), "") << "the profile measured none";
  EXPECT_DOUBLE_EQ(probe::retime_memory_seconds(profile), 0.0) << "nothing to time";
  profile.measurements.memory = MemoryBandwidth{1 << 30, {point("read", -1, 1, 30), point("triad", -1, 1, 20),
                                                          point("read", -1, 8, 71), point("triad", -1, 8, 50)}};
  EXPECT_DOUBLE_EQ(probe::retime_memory_seconds(profile), 4.0) << "two points: the least";
  now.memory_note = "RAM bandwidth not timed again: memory bandwidth: memory headroom is unknown";
  EXPECT_EQ(probe::memory_drift_text(profile, now), "; " + now.memory_note);
  now.memory = MemoryBandwidth{1 << 30, {point("read", -1, 8, 80.5), point("triad", -1, 8, 55), point("read", -1, 16, 90)}};
  EXPECT_EQ(probe::memory_drift_text(profile, now), "; RAM read 8t 80.5 GB/s (was 71.0), 16t 90.0");
  EXPECT_EQ(probe::measurements_drift_text(profile, now), "; RAM read 8t 80.5 GB/s (was 71.0), 16t 90.0")
      << "no reads beside compute in the profile: RAM's line alone";
  const DeviceProfile retimed = probe::with_retimed(profile, now);
  const auto& points = retimed.measurements.memory->points;
  ASSERT_EQ(points.size(), 5u);  // four kept or replaced, one added
  EXPECT_DOUBLE_EQ(points[0].gb_per_s.median, 30) << "1 thread was not timed again";
  EXPECT_DOUBLE_EQ(points[2].gb_per_s.median, 80.5);
  EXPECT_DOUBLE_EQ(points[3].gb_per_s.median, 55);
  EXPECT_EQ(points[4].threads, 16);
  for (int n = 0; n < 40; ++n) profile.measurements.memory->points.push_back(point("read", -1, 2 + n, 40));
  EXPECT_DOUBLE_EQ(probe::retime_memory_seconds(profile), 8.0) << "at most 8 s";
}

// Reads beside compute timed again replace the point of their PUs, and the
// drift says where each stands now against the profile.
TEST(SweepRetime, ReadInterferenceTimedAgainReplacesItsSetAndSaysHowItMoved) {
  DeviceProfile profile;
  const auto point = [](const char* set, const char* pus, double slowdown) {
    auto cpus = CpuSet::parse(pus);
    return ReadInterferencePoint{set, cpus->size(), *cpus, 4, 30, 30 / (1 + slowdown), slowdown, 1000, 1000, 1};
  };
  probe::RetimedMeasurements now;
  EXPECT_EQ(probe::interference_drift_text(profile, now), "") << "the profile measured none";
  profile.measurements.read_interference =
      ReadInterference{"expert_q4_decode", 1 << 20, 4, true, "", {point("kind0:1c", "0", 0.10), point("kind0:2c", "0-1", 0.34)}};
  now.interference_note = "reads beside compute not timed again: the profile's disk directory /d is not on this machine";
  EXPECT_EQ(probe::interference_drift_text(profile, now), "; " + now.interference_note);
  now.interference = ReadInterference{"expert_q4_decode", 1 << 20, 4, true, "", {point("kind0:2c", "0-1", 0.20)}};
  EXPECT_EQ(probe::interference_drift_text(profile, now), "; beside reads kind0:2c 20% (was 34%)");
  EXPECT_EQ(probe::measurements_drift_text(profile, now), "; beside reads kind0:2c 20% (was 34%)") << "no RAM points in the profile";
  const DeviceProfile retimed = probe::with_retimed(profile, now);
  const auto& points = retimed.measurements.read_interference->points;
  ASSERT_EQ(points.size(), 2u);
  EXPECT_DOUBLE_EQ(points[0].slowdown, 0.10);  // kind0:1c was not timed again
  EXPECT_DOUBLE_EQ(points[1].slowdown, 0.20);
}

TEST(SweepRetime, ReadRoundDriftComparesOneReadRoundsOfTheSameSetting) {
  auto rounds = [](int team, int one_read_rounds, double seconds) {
    experts::ReadRounds r;
    r.record_bytes = 8192, r.io_threads = 4, r.compute_threads = team;
    r.add(2, 0.5);  // rounds of two reads are not compared
    for (int i = 0; i < one_read_rounds; ++i) r.add(1, seconds / one_read_rounds);
    return r;
  };
  const std::vector<experts::ReadRounds> before{rounds(8, 10, 1e-3), rounds(16, 4, 4e-4)};
  const std::vector<experts::ReadRounds> now{rounds(8, 5, 1.1e-3), rounds(2, 3, 3e-4)};
  EXPECT_EQ(read_round_drift(before, now), "; one-read rounds beside 8 threads 0.22 ms (were 0.10)")
      << "the 2-thread setting is new, the 16-thread one gone";
  EXPECT_EQ(read_round_drift({}, now), "");
  EXPECT_EQ(read_round_drift(before, std::vector<experts::ReadRounds>{rounds(8, 0, 0)}), "") << "no one-read round now";
}

// The recording's passes go on while a pass's mean round moved more than
// kSettledShare from the one before it (a virtual disk's host cache
// warming: the H200 box's demo model read 0.24 ms rounds first, 0.08-0.11
// in the grid's later runs).
TEST(SweepRun, ReadRoundsSettleWhenAPassIsWithinItsShareOfTheLast) {
  EXPECT_FALSE(rounds_settled(0, 1e-4)) << "a first pass has none before it";
  EXPECT_FALSE(rounds_settled(2.4e-4, 1.4e-4));
  EXPECT_TRUE(rounds_settled(1.1e-4, 1.0e-4));
  EXPECT_TRUE(rounds_settled(1.0e-4, 1.0e-4 * (1 + kSettledShare)));
  EXPECT_FALSE(rounds_settled(1.0e-4, 1.0e-4 * (1 + 2 * kSettledShare))) << "slower again moves too";
  EXPECT_FALSE(rounds_settled(1e-4, 0)) << "a pass without rounds settles nothing";
  experts::ReadRounds r;
  EXPECT_EQ(mean_round_seconds(r), 0.0);
  r.add(1, 1e-4), r.add(1, 3e-4), r.add(3, 5e-4, true);
  EXPECT_NEAR(mean_round_seconds(r), 3e-4, 1e-12) << "every round, of any reads, decode ones counted once";
}

// The planned configuration's predictions from the profile and re-timed, side by side.
TEST(SweepRetime, ThePlannedConfigurationsPredictionsSayWhatTheRetimingMoved) {
  EXPECT_EQ(planned_prediction_drift({51.5, 358.7}, {55.9, 354.0}),
            "; the planned configuration re-timed: decode 55.9 tok/s (profile 51.5, +8.5%), prefill 354.0 tok/s (profile 358.7, -1.3%)");
  EXPECT_EQ(planned_prediction_drift({0, 358.7}, {55.9, 354.0}), "") << "no decode figure from the profile";
  EXPECT_EQ(planned_prediction_drift({51.5, 358.7}, {55.9, 0}), "") << "no prefill figure re-timed";
}

// The sets a re-timing plan chooses between (probe/measure/retime.h): the
// probe's candidates of the profile's CPU that its kernel points cover, in
// the probe's order; every candidate where it has none (a quick profile);
// only those of --threads' count when given.
TEST(SweepRetime, TimedThreadSetsAreTheProfilesOwnOrEveryCandidate) {
  DeviceProfile profile;
  profile.cpu = hybrid_cpu();
  const std::vector<probe::ThreadCandidate> all = probe::tuning_candidates(profile.cpu);
  ASSERT_GE(all.size(), 3u);
  EXPECT_EQ(probe::timed_thread_sets(profile), all) << "no kernel point: every candidate";
  const probe::ThreadCandidate &first = all[0], &last = all.back();
  profile.measurements.kernel_tuning = KernelTuning{};
  profile.measurements.kernel_tuning->points = {tuned("expert_q4_decode", last.name, last.pus.to_list().c_str(), 10),
                                                tuned("dense_q8_decode", first.name, first.pus.to_list().c_str(), 20),
                                                tuned("expert_q4_decode", "elsewhere", "40-41", 5)};
  EXPECT_EQ(probe::timed_thread_sets(profile), (std::vector<probe::ThreadCandidate>{first, last}));
  std::vector<probe::ThreadCandidate> of_last_count{last};
  if (first.pus.size() == last.pus.size()) of_last_count.insert(of_last_count.begin(), first);
  EXPECT_EQ(probe::timed_thread_sets(profile, last.pus.size()), of_last_count);
  EXPECT_TRUE(probe::timed_thread_sets(profile, 999).empty());
}

TEST(SweepRetime, TheGridsCpuThreadSetsOnceEachInGridOrder) {
  const SweepReport r = two_config_report();
  std::vector<SweepConfig> grid = r.grid;
  grid.push_back(grid[0]);
  grid.back().gpu.all_in_vram = true;  // the CPU computes nothing of it
  grid.back().threads = {"4t k0", CpuSet({0, 1, 2, 3})};
  EXPECT_EQ(labels(grid_thread_sets(grid)), (std::vector<std::string>{"1t k0=0", "2t k0=0-1"}));
}

// The reads line: each configuration's records per token and pass beside
// the prediction's, and the I/O threads' own time per read, decode's and
// prefill's apart (a round's reads share the disk), beside the probe's.
TEST(SweepPrediction, ReadsLineSetsTheRunsReadTimesBesideTheProbes) {
  SweepReport r = two_config_report();  // config 1 streams: 1 decode miss a run
  for (RunRecord& run : r.runs) {
    run.read_seconds = 0.002 * static_cast<double>(run.expert_misses);
    run.prefill_misses = 3, run.prefill_read_seconds = 0.012;
  }
  ConfigPrediction streaming{true, "", 12, 15, 0.5, 3.0, 4};
  streaming.disk_read_seconds = 0.003;
  r.predictions = {{true, "", 12, 15}, streaming};
  const std::string table = sweep_table(r);
  EXPECT_NE(table.find("2t k0 | cap 16 | pins 4 | avx2: decode 0.50 per token (predicted 0.50), prefill 3.0 per pass "
                       "(predicted 3.0); a read 2.000 ms decoding, 4.000 ms in prefill (probed alone 3.000)"),
            std::string::npos)
      << table;
  const auto json = nlohmann::json::parse(sweep_json(r));
  EXPECT_DOUBLE_EQ(json["configs"][1]["runs"][0]["prefill_expert_read_seconds"].get<double>(), 0.012);
  EXPECT_DOUBLE_EQ(json["configs"][1]["predicted"]["disk_read_seconds"].get<double>(), 0.003);
}

// Decode at each depth, priced apart (a test at depth 0 starts a fresh
// context, a deeper one follows its prompt): each depth's error beside its
// measured median, and its reads a token beside the predicted ones.
TEST(SweepPrediction, EachDepthsDecodeStandsBesideItsOwnPrediction) {
  SweepReport r = two_config_report();
  for (RunRecord& run : r.runs)
    if (run.config == 1) run.depth_misses = {1, 0};
  ConfigPrediction streaming{true, "", 12, 15, 0.5, 3.0, 4};
  streaming.decode_tok_s_at_depth = {18, 11};
  streaming.decode_disk_reads_at_depth = {0.9, 0.1};
  r.predictions = {{true, "", 12, 15}, streaming};
  const std::string table = sweep_table(r);
  EXPECT_NE(table.find("tg@d0 predicted  tg@d512 predicted\n"), std::string::npos) << table;
  EXPECT_NE(table.find("  20.50      -12%    10.00       10%\n"), std::string::npos) << table;
  EXPECT_NE(table.find("decode 0.50 per token (predicted 0.50), at d0 1.00 (predicted 0.90), at d512 0.00 (predicted 0.10), "
                       "prefill"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("decode at d0: worst error -12.2% (2t k0 | cap 16 | pins 4 | avx2), mean |error| 12.2% over 1 "
                       "configurations\ndecode at d512: worst error 10.0%"),
            std::string::npos)
      << table;
  const auto json = nlohmann::json::parse(sweep_json(r));
  ASSERT_EQ(json["prediction"]["decode_at_depth"].size(), 2u);
  EXPECT_EQ(json["prediction"]["decode_at_depth"][1]["depth"], 512);
  EXPECT_NEAR(json["prediction"]["decode_at_depth"][1]["worst_error"].get<double>(), 0.1, 1e-12);
  EXPECT_EQ(json["configs"][1]["predicted"]["decode_tok_s_at_depth"], nlohmann::json({18.0, 11.0}));
  EXPECT_EQ(json["configs"][1]["predicted"]["decode_disk_reads_per_token_at_depth"], nlohmann::json({0.9, 0.1}));
}

// The rounds that read, from submission to the last landing: decode's by
// read count (summed over the repeats), prefill's as rounds of a mean
// size, with the compute thread's wake-ups after the landing, in the reads
// line and in each run's JSON.
TEST(SweepPrediction, ReadRoundsAreListedByReadCount) {
  SweepReport r = two_config_report();
  for (RunRecord& run : r.runs) {
    if (run.config != 1) continue;
    run.read_batches = {{1, 3, 0.009}, {2, 1, 0.004}};
    run.prefill_read_batches = {{2, 1, 0.006}, {4, 1, 0.010}};
    run.decode_wakes = {2, run.repeat == 0 ? 10e-6 : 30e-6};
  }
  r.predictions = {{true, "", 12, 15}, {true, "", 12, 15, 0.5, 3.0, 4}};
  const std::string table = sweep_table(r);
  EXPECT_NE(table.find("    rounds that read, submission to last landing: decoding: 1 read 6 x 3.00 ms, 2 reads 2 x "
                       "4.00 ms, 4 waited, woken 10.0 us after the landing; in prefill: 4 rounds of 3.0 reads, "
                       "8.00 ms a round\n"),
            std::string::npos)
      << table;
  const auto json = nlohmann::json::parse(sweep_json(r));
  const auto& first = json["configs"][1]["runs"][0];
  EXPECT_EQ(first["decode_read_batches"].size(), 2u);
  EXPECT_EQ(first["decode_read_batches"][1]["reads"], 2);
  EXPECT_EQ(first["decode_read_batches"][1]["rounds"], 1);
  EXPECT_DOUBLE_EQ(first["prefill_read_batches"][1]["seconds"].get<double>(), 0.010);
  EXPECT_EQ(first["decode_wakes"]["rounds"], 2);
  EXPECT_DOUBLE_EQ(first["decode_wakes"]["seconds"].get<double>(), 10e-6);
  EXPECT_EQ(first["prefill_wakes"]["rounds"], 0);
  EXPECT_TRUE(json["configs"][0]["runs"][0]["decode_read_batches"].empty());
}

TEST(SweepReport, RepeatsOnAnotherMachineAreNamedOncePerMismatch) {
  SweepReport r = two_config_report();
  EXPECT_EQ(sweep_table(r).find("not the profile's machine"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::parse(sweep_json(r))["machine_changes"].empty());
  const std::string moved = "cpu.model: profile AMD EPYC, this machine Oxide Virtual Turin-like Processor";
  r.machine_changes = {{0, moved}, {1, moved}};
  const std::string table = sweep_table(r);
  EXPECT_NE(table.find("not the profile's machine in repeat(s) 1, 2 (" + moved + ")"), std::string::npos) << table;
  EXPECT_EQ(table.find("not the profile's machine", table.find("not the profile's machine") + 1), std::string::npos);
  const auto json = nlohmann::json::parse(sweep_json(r));
  ASSERT_EQ(json["machine_changes"].size(), 2u);
  EXPECT_EQ(json["machine_changes"][1]["repeat"], 2);
  EXPECT_EQ(json["machine_changes"][1]["mismatch"], moved);
}

TEST(SpeedTests, LabelsAndContextFollowLlamaBench) {
  SpeedTests tests;  // defaults: pp512, tg64 at depths 0 and 512
  EXPECT_EQ(tests.prefill_label(), "pp512");
  EXPECT_EQ(tests.decode_label(512), "tg64 @ d512");
  EXPECT_EQ(tests.context(), 576);
  tests.depths = {0};
  EXPECT_EQ(tests.context(), 512);
  EXPECT_EQ(format_stats(metric_stats({3, 1, 2})), "2.00 [1.00 .. 3.00]");
}

TEST(SweepReport, CsvJsonAndSvgCarryEveryRunAndThePlannedMark) {
  const SweepReport r = two_config_report();
  const std::string csv = sweep_csv(r);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5);  // header + 2 configs x 2 repeats
  EXPECT_NE(csv.find("\"0-1\""), std::string::npos);        // a PU list with commas stays one field

  const auto json = nlohmann::json::parse(sweep_json(r));
  EXPECT_EQ(json["schema_version"], kSweepSchemaVersion);
  EXPECT_EQ(json["configs"].size(), 2u);
  EXPECT_TRUE(json["configs"][1]["planned"]);
  EXPECT_EQ(json["configs"][1]["runs"].size(), 2u);
  EXPECT_EQ(json["ranking"]["decode"]["rank"], 1);
  EXPECT_NEAR(json["ranking"]["prefill"]["percent_of_best"].get<double>(), 100.0 * (20 + 40.0 / 3) / 2 / 30, 1e-9);
  EXPECT_EQ(json["ranking"]["decode"]["paired"]["rival_config"], 0);
  EXPECT_EQ(json["ranking"]["decode"]["paired"]["repeats"], 2);
  EXPECT_EQ(json["ranking"]["decode"]["repeat_noise"]["configs"], 2);
  EXPECT_TRUE(json["token_check"]["passed"]);
  EXPECT_EQ(json["workload"]["depths"], nlohmann::json::array({0, 512}));
  EXPECT_EQ(json["configs"][0]["decode_at_depth"][1]["depth"], 512);
  EXPECT_EQ(json["configs"][0]["runs"][0]["decode_tok_s_at_depth"].size(), 2u);

  const std::string svg = sweep_svg(r);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("m&lt;&amp;&gt;.coli"), std::string::npos);
  std::size_t planned_bars = 0;
  for (std::size_t at = svg.find("class=\"planned\""); at != std::string::npos; at = svg.find("class=\"planned\"", at + 1))
    ++planned_bars;
  EXPECT_EQ(planned_bars, 2u);  // one in each panel
  EXPECT_NE(svg.find("(planned)"), std::string::npos);
}

}  // namespace
}  // namespace coli::bench
