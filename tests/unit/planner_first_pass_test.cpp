// A process's first prompt: the memory plan's prompt-sized lines as fresh
// pages at the profile's first-touch cost (planner/first_pass.h).
#include <gtest/gtest.h>

#include "coli/planner/first_pass.h"
#include "coli/planner/memory_preview.h"
#include "coli/planner/plan.h"
#include "planner_fixtures.h"

namespace coli::planner {
namespace {

DeviceProfile with_fresh_page_us(double us) {
  DeviceProfile p = measured_profile(20);
  p.measurements.memory->fresh_page_us = us;
  return p;
}

Plan cpu_plan(const DeviceProfile& profile, const ModelFootprint& fp, KvType kv_type = KvType::f16) {
  PlanRequest request;
  request.threads = 8;
  request.gpu = "none";
  request.ctx = 4096;
  request.prompt_tokens = 512;
  request.kv_type = kv_type;
  auto plan = make_plan(profile, fp, request);
  EXPECT_TRUE(plan.ok()) << (plan.ok() ? "" : plan.error().message);
  return *plan;
}

TEST(FirstPass, FreshPagesAtTheProfilesCostPerPage) {
  const ModelFootprint fp = qwen3();
  const DeviceProfile profile = with_fresh_page_us(2.0);
  const FirstPassCost cost = first_pass_cost(profile, fp, cpu_plan(profile, fp), 512);
  ASSERT_TRUE(cost.priced) << cost.inputs;
  const double pages = static_cast<double>((cost.fresh_bytes + kFreshPageBytes - 1) / kFreshPageBytes);
  EXPECT_DOUBLE_EQ(cost.seconds, pages * 2e-6);
  EXPECT_NE(cost.inputs.find("KV rows of 512 positions"), std::string::npos) << cost.inputs;
  EXPECT_NE(cost.inputs.find("2.00 us"), std::string::npos) << cost.inputs;
  // The prompt's hidden states alone (2 buffers x 512 x hidden x 4 B) and its KV rows are in it.
  const std::uint64_t kv = kv_cache_bytes(fp.config, 512, KvType::f16);
  EXPECT_GT(cost.fresh_bytes, 2ull * 512 * fp.config.hidden_size * 4 + kv);

  const FirstPassCost slower = first_pass_cost(with_fresh_page_us(6.0), fp, cpu_plan(profile, fp), 512);
  EXPECT_EQ(slower.fresh_bytes, cost.fresh_bytes);
  EXPECT_DOUBLE_EQ(slower.seconds, 3 * cost.seconds);
}

// The KV rows are the prompt's positions at the plan's KV type: f32 rows
// cost twice f16's, everything else alike.
TEST(FirstPass, KvRowsAreThePromptsPositionsAtThePlansType) {
  const ModelFootprint fp = qwen3();
  const DeviceProfile profile = with_fresh_page_us(1.0);
  const FirstPassCost f16 = first_pass_cost(profile, fp, cpu_plan(profile, fp, KvType::f16), 300);
  const FirstPassCost f32 = first_pass_cost(profile, fp, cpu_plan(profile, fp, KvType::f32), 300);
  EXPECT_EQ(f32.fresh_bytes - f16.fresh_bytes, kv_cache_bytes(fp.config, 300, KvType::f16));
}

// A longer prompt touches more: its hidden states and KV rows at least.
TEST(FirstPass, GrowsWithThePrompt) {
  const ModelFootprint fp = qwen3();
  const DeviceProfile profile = with_fresh_page_us(1.0);
  const Plan plan = cpu_plan(profile, fp);
  const FirstPassCost short_prompt = first_pass_cost(profile, fp, plan, 256);
  const FirstPassCost long_prompt = first_pass_cost(profile, fp, plan, 1024);
  EXPECT_GE(long_prompt.fresh_bytes - short_prompt.fresh_bytes,
            2ull * 768 * fp.config.hidden_size * 4 + kv_cache_bytes(fp.config, 768, KvType::f16));
  // A prompt past the context is priced at the context (the run refuses it anyway).
  EXPECT_EQ(first_pass_cost(profile, fp, plan, 100000).fresh_bytes, first_pass_cost(profile, fp, plan, plan.ctx).fresh_bytes);
}

TEST(FirstPass, AProfileWithoutTheFigureIsNotPriced) {
  const ModelFootprint fp = qwen3();
  const DeviceProfile profile = with_fresh_page_us(0);
  const FirstPassCost cost = first_pass_cost(profile, fp, cpu_plan(profile, fp), 512);
  EXPECT_FALSE(cost.priced);
  EXPECT_EQ(cost.seconds, 0);
  EXPECT_NE(cost.inputs.find("fresh_page_us"), std::string::npos) << cost.inputs;
  EXPECT_DOUBLE_EQ(first_pass_tok_per_s(1000, 512, cost), 1000);
}

TEST(FirstPass, SlowsThePromptByItsSeconds) {
  FirstPassCost cost;
  cost.priced = true;
  cost.seconds = 0.5;
  EXPECT_DOUBLE_EQ(first_pass_tok_per_s(1000, 500, cost), 500);  // 0.5 s warm + 0.5 s of fresh pages
  EXPECT_DOUBLE_EQ(first_pass_tok_per_s(0, 500, cost), 0) << "no prediction stays none";
}

}  // namespace
}  // namespace coli::planner
