// The planner against the field failures (shared/docs/field-notes.md), with
// real model configs and made-up or captured device profiles.
#include <gtest/gtest.h>

#include <string>

#include "coli/experts/round_planner.h"
#include "coli/planner/plan.h"
#include "coli/probe/profile_io.h"

namespace coli::planner {
namespace {

constexpr std::uint64_t kGiB = 1ull << 30;
const std::string kConfigs = std::string(COLI_FIXTURES_DIR) + "/model-configs/";

ModelFootprint footprint(const std::string& file, WeightFormat experts = WeightFormat::q4_g64,
                         DenseFormat dense = DenseFormat::source) {
  auto fp = read_footprint(kConfigs + file, experts, dense);
  EXPECT_TRUE(fp.ok()) << (fp.ok() ? "" : fp.error().message);
  return *fp;
}

// A box with `cpus` usable cores of one kind and `headroom` bytes of RAM.
DeviceProfile made_up_profile(std::uint64_t headroom, int cpus = 8, std::string rule = "single-kind-physical-cores") {
  DeviceProfile p;
  p.cpu.usable.pus = *CpuSet::parse("0-" + std::to_string(cpus - 1));
  p.memory.headroom_bytes = headroom;
  p.memory.headroom_source = "cgroup v2 memory.max headroom";
  p.threads.decode_threads = p.threads.prefill_threads = cpus;
  p.threads.rule = std::move(rule);
  p.threads.reason = "made up for a test";
  return p;
}

DeviceProfile h200_profile() {
  auto p = load_profile(std::string(COLI_FIXTURES_DIR) + "/../../profiles/h200-xeon-16c.toml");
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
  return *p;
}

bool mentions(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The field-note-1 rule, checked independently of the planner's own search.
void expect_round_fits(const Plan& plan, const ModelFootprint& fp) {
  const int distinct = std::min(fp.n_experts - plan.pins, fp.top_k * plan.prefill_round_tokens);
  EXPECT_GE(plan.cap - plan.pins, distinct) << "cap " << plan.cap << " pins " << plan.pins;
}

TEST(PlannerFootprint, Qwen3RecordsMatchTheConverterLayout) {
  const ModelFootprint fp = footprint("Qwen3-30B-A3B.json");
  // int4: 3 parts of 768x2048 nibbles + one f16 scale per 64 weights.
  EXPECT_EQ(fp.q4_g64.record_bytes, 3ull * 768 * 2048 / 2 + 3ull * 768 * 2048 / 64 * 2);
  EXPECT_EQ(fp.q4_g64.record_stride % 4096, 0u);
  EXPECT_EQ(fp.q8_row.record_bytes, 3ull * 768 * 2048 + (768 + 768 + 2048) * 4);
  EXPECT_EQ(fp.q8_row.record_stride, 4734976u);  // 4732928 rounded up to 4096
  EXPECT_EQ(fp.moe_layer_count(), 48u);
  EXPECT_EQ(fp.expert_source_bytes, 3ull * 768 * 2048 * 2);
  // A Qwen3-30B-A3B-class int4 container is ~17 GB.
  EXPECT_GT(fp.container_bytes, 17'000'000'000ull);
  EXPECT_LT(fp.container_bytes, 19'000'000'000ull);
}

TEST(PlannerFootprint, DenseFormatsQuantiseProjectionsOnly) {
  const ModelFootprint src = footprint("Qwen1.5-MoE-A2.7B.json", WeightFormat::q4_g64, DenseFormat::source);
  const ModelFootprint q8 = footprint("Qwen1.5-MoE-A2.7B.json", WeightFormat::q4_g64, DenseFormat::q8_row);
  EXPECT_LT(q8.dense_held_bytes, src.dense_held_bytes);
  auto component = [&](const ModelFootprint& fp, const std::string& role) {
    for (const DenseComponent& c : fp.dense) {
      if (c.role == role) return c;
    }
    ADD_FAILURE() << "no dense component " << role;
    return DenseComponent{};
  };
  for (const char* kept : {"embedding", "router", "layer norm"}) {  // never quantised
    const DenseComponent c = component(src, kept);
    EXPECT_GT(c.source_bytes, 0u) << kept;
    EXPECT_EQ(c.q8_row_bytes, c.source_bytes) << kept;
    EXPECT_EQ(c.q4_g64_bytes, c.source_bytes) << kept;
  }
  for (const char* quantised : {"shared expert", "lm_head", "attention"}) {
    const DenseComponent c = component(src, quantised);
    EXPECT_LT(c.q8_row_bytes, c.source_bytes) << quantised;
    EXPECT_LT(c.q4_g64_bytes, c.q8_row_bytes) << quantised;
    EXPECT_EQ(component(q8, quantised).held_bytes, c.q8_row_bytes) << quantised;
  }
  EXPECT_EQ(src.dense.front().source_bytes, 151936ull * 2048 * 2);  // embed_tokens in bf16
}

TEST(PlannerMemory, KvCacheIsF32KAndVOfTheWholeContext) {
  const ModelFootprint fp = footprint("Qwen3-30B-A3B.json");
  MemoryKnobs knobs;
  knobs.cap = 16;
  knobs.pins = 4;
  knobs.ctx = 4096;
  const MemoryPreview preview = preview_memory(fp, knobs);
  EXPECT_EQ(preview.find("KV cache")->bytes, 48ull * 4096 * 4 * 128 * 2 * 4);
  EXPECT_EQ(preview.find("expert cache: pinned slots")->bytes, 48ull * 4 * fp.q4_g64.record_stride);
  EXPECT_EQ(preview.find("expert cache: evictable slots")->bytes, 48ull * 12 * fp.q4_g64.record_stride);
  for (const MemoryLine& line : preview.lines) EXPECT_FALSE(line.formula.empty()) << line.component;
  EXPECT_EQ(preview.total(Tier::vram), 0u);
  EXPECT_EQ(preview.total(Tier::disk), fp.container_bytes);
}

TEST(PlannerMargin, GrowsWithThePlanNotAFlatConstant) {
  const SafetyMargin small = decide_safety_margin(4 * kGiB, 8, 4);
  const SafetyMargin large = decide_safety_margin(100 * kGiB, 8, 4);
  EXPECT_GE(small.bytes, 256ull << 20);
  EXPECT_LT(small.bytes, 300ull << 20);
  EXPECT_GE(large.bytes, 2 * kGiB);  // 2% of 100 GiB
  EXPECT_TRUE(mentions(large.reason, "page tables"));
}

// Field note 1: pins from the usage history would leave too few evictable slots.
TEST(PlannerScenario, HistoryPinsThatWouldStarveTheCacheAreShrunk) {
  const ModelFootprint fp = footprint("Qwen3-30B-A3B.json");
  PlanRequest request;
  request.cap = 64;
  request.history_pins = 100;
  auto plan = make_plan(h200_profile(), fp, request);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->pins, 32);                 // 64 - 32 slots keep half of the 8-token round
  EXPECT_EQ(plan->prefill_round_tokens, 4);
  EXPECT_TRUE(mentions(plan->decision("pins")->reason, "usage history suggests 100"));
  expect_round_fits(*plan, fp);
}

// A pin keeps an expert from eviction: with every expert resident nothing
// is evicted, so the history's pins are not taken (coli-sweep's "pins on"
// at cap all was the same run as pins off, and ranked apart by noise alone).
TEST(PlannerScenario, EveryExpertResidentTakesNoPins) {
  const ModelFootprint fp = footprint("Qwen3-30B-A3B.json");
  auto choice = decide_pins_and_round(fp, fp.n_experts, fp.n_experts, false, 512);
  ASSERT_TRUE(choice.ok()) << choice.error().message;
  EXPECT_EQ(choice->pins, 0);
  EXPECT_EQ(choice->round_tokens, 512);
  EXPECT_TRUE(mentions(choice->reason, "every expert is resident")) << choice->reason;
  auto forced = decide_pins_and_round(fp, fp.n_experts, 16, true, 512);  // asked for by name: kept
  ASSERT_TRUE(forced.ok()) << forced.error().message;
  EXPECT_EQ(forced->pins, 16);
}

TEST(PlannerScenario, ForcedPinsShrinkTheRoundOrAreRefused) {
  const ModelFootprint fp = footprint("Qwen3-30B-A3B.json");
  PlanRequest request;
  request.cap = 64;
  request.pins = 40;
  auto plan = make_plan(h200_profile(), fp, request);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->pins, 40);
  EXPECT_EQ(plan->prefill_round_tokens, 3);  // (64 - 40) / top_k 8
  EXPECT_TRUE(mentions(plan->decision("prefill_round_tokens")->reason, "shrunk from 512 to 3"));
  expect_round_fits(*plan, fp);

  request.pins = 60;  // 4 evictable slots cannot hold one token's 8 experts
  auto refused = make_plan(h200_profile(), fp, request);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(mentions(refused.error().message, "--pin 60")) << refused.error().message;
  EXPECT_TRUE(mentions(refused.error().message, "pin at most 56")) << refused.error().message;
}

// The showcase: H200 box, --ram 16G, Qwen3-30B-A3B-class int4 model.
TEST(PlannerScenario, RamLimitOnTheH200StreamsExpertsAndFits) {
  const ModelFootprint fp = footprint("Qwen3-30B-A3B.json");
  PlanRequest request;
  request.ram = 16 * kGiB;
  request.gpu = "none";  // the CPU engine's RAM plan (the GPU decoder would hold every expert in VRAM)
  auto plan = make_plan(h200_profile(), fp, request);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_TRUE(plan->streaming());
  EXPECT_GE(plan->cap, fp.top_k);
  EXPECT_LE(plan->planned_ram_bytes() + plan->margin.bytes, 16 * kGiB);
  EXPECT_EQ(plan->threads, 16);
  EXPECT_TRUE(mentions(plan->decision("threads")->reason, "rule: single-kind-physical-cores"));
  expect_round_fits(*plan, fp);
  // The cap is the largest that fits: one more slot per layer is refused.
  request.cap = plan->cap + 1;
  auto bigger = make_plan(h200_profile(), fp, request);
  ASSERT_FALSE(bigger.ok());
  EXPECT_TRUE(mentions(bigger.error().message, "use --cap " + std::to_string(plan->cap) + " or less"))
      << bigger.error().message;
  // Without the limit every expert is resident.
  auto unlimited = make_plan(h200_profile(), fp, PlanRequest{.gpu = "none"});
  ASSERT_TRUE(unlimited.ok()) << unlimited.error().message;
  EXPECT_FALSE(unlimited->streaming());
}

// Field notes 4 and 5: a RAM-limited box either fits with its margin or is refused with numbers.
TEST(PlannerScenario, RamLimitedBoxFitsWithMarginOrIsRefused) {
  int fitted = 0, streamed = 0, refused = 0;
  for (const char* file : {"Qwen3-30B-A3B.json", "OLMoE-1B-7B-0924.json", "Mixtral-8x7B-v0.1.json", "Qwen1.5-MoE-A2.7B.json"}) {
    for (WeightFormat format : {WeightFormat::q4_g64, WeightFormat::q8_row}) {
      const ModelFootprint fp = footprint(file, format);
      for (std::uint64_t headroom : {4 * kGiB, 8 * kGiB, 24 * kGiB}) {
        auto plan = make_plan(made_up_profile(headroom), fp, PlanRequest{});
        if (!plan.ok()) {
          EXPECT_TRUE(mentions(plan.error().message, "headroom")) << plan.error().message;
          ++refused;
          continue;
        }
        EXPECT_LE(plan->planned_ram_bytes() + plan->margin.bytes, headroom) << file;
        expect_round_fits(*plan, fp);
        ++fitted;
        streamed += plan->streaming() ? 1 : 0;
      }
    }
  }
  // The grid spans all three outcomes: resident, streaming, refused.
  EXPECT_GT(fitted - streamed, 0);
  EXPECT_GT(streamed, 0);
  EXPECT_GT(refused, 0);
}

TEST(PlannerScenario, CgroupEightGiBQwen3StreamsAndMixtralIsRefusedWithNumbers) {
  auto qwen = make_plan(made_up_profile(8 * kGiB), footprint("Qwen3-30B-A3B.json"), PlanRequest{});
  ASSERT_TRUE(qwen.ok()) << qwen.error().message;
  EXPECT_TRUE(qwen->streaming());

  auto mixtral = make_plan(made_up_profile(8 * kGiB), footprint("Mixtral-8x7B-v0.1.json"), PlanRequest{});
  ASSERT_FALSE(mixtral.ok());
  const std::string& why = mixtral.error().message;
  EXPECT_TRUE(mentions(why, "cap = top_k = 2")) << why;
  EXPECT_TRUE(mentions(why, "headroom is 8.00 GiB (cgroup v2 memory.max headroom)")) << why;
  EXPECT_TRUE(mentions(why, "or free")) << why;
}

TEST(PlannerScenario, RefusalSaysWhatToChange) {
  PlanRequest request;
  request.ctx = 40960;  // 7.5 GiB of KV cache alone
  auto q8 = make_plan(made_up_profile(8 * kGiB), footprint("Qwen3-30B-A3B.json", WeightFormat::q8_row), request);
  ASSERT_FALSE(q8.ok());
  EXPECT_TRUE(mentions(q8.error().message, "lower --ctx to")) << q8.error().message;
  EXPECT_TRUE(mentions(q8.error().message, "use int4 experts")) << q8.error().message;

  request.ram = 6 * kGiB;
  request.ctx = 4096;
  request.gpu = "none";
  auto limited = make_plan(h200_profile(), footprint("Mixtral-8x7B-v0.1.json"), request);
  ASSERT_FALSE(limited.ok());
  EXPECT_TRUE(mentions(limited.error().message, "raise --ram")) << limited.error().message;
}

// Issue 12: a refusal carries its numbers (coli-plan --json prints them).
TEST(PlannerScenario, RefusalCarriesNeededAndAvailableBytesAndAdvice) {
  auto outcome = plan_or_refusal(made_up_profile(8 * kGiB), footprint("Mixtral-8x7B-v0.1.json"), PlanRequest{});
  const auto* refusal = std::get_if<Refusal>(&outcome);
  ASSERT_NE(refusal, nullptr);
  EXPECT_TRUE(refusal->does_not_fit);
  ASSERT_EQ(refusal->tiers.size(), 1u);
  EXPECT_EQ(refusal->tiers[0].tier, Tier::ram);
  EXPECT_EQ(refusal->tiers[0].available_bytes, 8 * kGiB);
  EXPECT_GT(refusal->tiers[0].needed_bytes, refusal->tiers[0].available_bytes);
  ASSERT_FALSE(refusal->advice.empty());
  EXPECT_TRUE(mentions(refusal->advice.back(), "or free")) << refusal->advice.back();
  EXPECT_TRUE(mentions(refusal->message, refusal->advice.back())) << refusal->message;

  PlanRequest below_top_k;  // refused, but not for memory: no numbers to give
  below_top_k.cap = 1;
  auto cap = plan_or_refusal(made_up_profile(8 * kGiB), footprint("Qwen3-30B-A3B.json"), below_top_k);
  ASSERT_NE(std::get_if<Refusal>(&cap), nullptr);
  EXPECT_FALSE(std::get<Refusal>(cap).does_not_fit);
  EXPECT_TRUE(std::get<Refusal>(cap).tiers.empty());
}

// Issue 12: every numeric decision has its number beside the text.
TEST(PlannerScenario, DecisionsCarryNumbersBesideTheirText) {
  auto plan = make_plan(made_up_profile(8 * kGiB), footprint("Qwen3-30B-A3B.json"), PlanRequest{});
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const Decision* cap = plan->decision("cap");
  ASSERT_NE(cap, nullptr);
  EXPECT_EQ(cap->number, plan->cap);
  EXPECT_EQ(cap->unit, "slots");
  EXPECT_EQ(plan->decision("ram")->number, static_cast<std::int64_t>(plan->headroom_bytes));
  EXPECT_EQ(plan->decision("ram")->unit, "bytes");
  EXPECT_EQ(plan->decision("margin")->number, static_cast<std::int64_t>(plan->margin.bytes));
  EXPECT_EQ(plan->decision("threads")->number, plan->threads);
  EXPECT_EQ(plan->decision("ctx")->number, plan->ctx);
  EXPECT_FALSE(plan->decision("kernel")->number.has_value());  // a name, not a number
}

// Field note 2 lives in the probe; the plan takes its recommendation and says what kind it was.
TEST(PlannerThreads, ProfileRecommendationWithItsBasis) {
  auto three_tier = decide_threads(made_up_profile(8 * kGiB, 12, "all-but-efficiency-kind"), std::nullopt);
  ASSERT_TRUE(three_tier.ok());
  EXPECT_EQ(three_tier->threads, 12);
  EXPECT_EQ(three_tier->basis, "rule");
  auto measured = decide_threads(made_up_profile(8 * kGiB, 12, "measured-best-decode"), std::nullopt);
  ASSERT_TRUE(measured.ok());
  EXPECT_EQ(measured->basis, "measured");
}

// A profile whose threads came from the tuning phase: basis "measured", the
// figures carried into the reason, and a prefill set that differs is named.
TEST(PlannerThreads, TuningPhaseChoiceIsMeasuredWithItsFigures) {
  DeviceProfile p = made_up_profile(8 * kGiB, 16, "measured-kernel-throughput");
  p.threads.decode_threads = 8;
  p.threads.decode_pus = *CpuSet::parse("0-7");
  p.threads.prefill_threads = 16;
  p.threads.prefill_pus = *CpuSet::parse("0-15");
  p.threads.reason = "decode on kind0:8c (8 threads, 41.2 tokens/s per layer, 98.5% of the best, kind0:16c)";
  auto choice = decide_threads(p, std::nullopt);
  ASSERT_TRUE(choice.ok()) << choice.error().message;
  EXPECT_EQ(choice->threads, 8);
  EXPECT_EQ(choice->basis, "measured");
  EXPECT_TRUE(mentions(choice->reason, "on PUs 0-7, measured by coli-probe")) << choice->reason;
  EXPECT_TRUE(mentions(choice->reason, "41.2 tokens/s per layer")) << choice->reason;
  EXPECT_TRUE(mentions(choice->reason, "prefill measured best on 16 threads (PUs 0-15)")) << choice->reason;
  // The plan carries the prefill set to the engine (it ran decode's before).
  EXPECT_EQ(choice->prefill_threads, 16);
  EXPECT_EQ(choice->prefill_pus, *CpuSet::parse("0-15"));
  p.threads.rule = "single-kind-physical-cores";  // the tier rule: said so, no measurement claimed
  auto rule = decide_threads(p, std::nullopt);
  ASSERT_TRUE(rule.ok());
  EXPECT_EQ(rule->basis, "rule");
  EXPECT_EQ(rule->prefill_threads, 0) << "the tier rule measured nothing for prefill";
  EXPECT_FALSE(mentions(rule->reason, "measured by coli-probe")) << rule->reason;
}

TEST(PlannerOverrides, HarmfulOverridesAreRefusedWithTheReason) {
  const ModelFootprint fp = footprint("Qwen3-30B-A3B.json");
  const DeviceProfile h200 = h200_profile();
  auto refused = [&](PlanRequest r, const std::string& why) {
    auto plan = make_plan(h200, fp, r);
    ASSERT_FALSE(plan.ok()) << why;
    EXPECT_TRUE(mentions(plan.error().message, why)) << plan.error().message;
  };
  refused(PlanRequest{.threads = 0}, "--threads 0");
  refused(PlanRequest{.threads = 64}, "exceeds the 16 usable CPUs");
  refused(PlanRequest{.cap = 4}, "below top_k 8");
  refused(PlanRequest{.ram = 200 * kGiB}, "exceeds the measured headroom");
  refused(PlanRequest{.ctx = 100000}, "max_position_embeddings 40960");
  refused(PlanRequest{.ctx = 0}, "--ctx 0");

  auto clamped = make_plan(h200, fp, PlanRequest{.cap = 1000});
  ASSERT_TRUE(clamped.ok()) << clamped.error().message;
  EXPECT_EQ(clamped->cap, 128);
  EXPECT_TRUE(mentions(clamped->decision("cap")->reason, "clamped from --cap 1000"));
  auto obeyed = make_plan(h200, fp, PlanRequest{.threads = 8, .cap = 32, .pins = 8, .ctx = 8192});
  ASSERT_TRUE(obeyed.ok()) << obeyed.error().message;
  EXPECT_EQ(obeyed->threads, 8);
  EXPECT_EQ(obeyed->cap, 32);
  EXPECT_EQ(obeyed->pins, 8);
  EXPECT_EQ(obeyed->ctx, 8192);
  expect_round_fits(*obeyed, fp);
}

}  // namespace
}  // namespace coli::planner
