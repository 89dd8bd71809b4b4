// runtime::options_from_plan: the one place a plan becomes engine knobs.
#include <gtest/gtest.h>

#include "coli/runtime/plan_options.h"

namespace coli::runtime {
namespace {

ModelShape shape_of(int layers, int experts, int top_k) {
  ModelShape shape;
  shape.moe_layers = layers;
  shape.experts = experts;
  shape.top_k = top_k;
  return shape;
}

planner::Plan plan_of(int cap, int n_experts) {
  planner::Plan plan;
  plan.threads = 3;
  plan.compute_pus = CpuSet({2, 4, 6});
  plan.cpu_kernel = "avx2";
  plan.cap = cap;
  plan.n_experts = n_experts;
  plan.prefill_round_tokens = 5;
  plan.ctx = 777;
  plan.io_threads = 2;
  plan.direct_io = false;
  plan.margin.bytes = 1000;
  plan.memory.lines.push_back({"expert cache", planner::Tier::ram, 50000, ""});
  return plan;
}

// Layer 0 prefers experts 5 then 1; layer 1 prefers 0 then 7.
experts::UsageHistory history_of(const ModelShape& shape) {
  auto history = experts::UsageHistory::create({shape.moe_layers, shape.experts, shape.top_k, "test-model"});
  EXPECT_TRUE(history.ok());
  std::vector<std::vector<std::uint64_t>> counts(2, std::vector<std::uint64_t>(8, 1));
  counts[0][5] = 90, counts[0][1] = 40, counts[1][0] = 70, counts[1][7] = 60;
  EXPECT_TRUE(history->add_counts(counts, 100).ok());
  return std::move(*history);
}

TEST(OptionsFromPlan, EveryKnobTheStreamingPlanDecides) {
  const ModelShape shape = shape_of(2, 8, 2);
  const experts::UsageHistory history = history_of(shape);
  planner::Plan plan = plan_of(5, 8);
  plan.pins = 2;
  auto options = options_from_plan(plan, shape, &history);
  ASSERT_TRUE(options.ok()) << options.error().message;
  EXPECT_EQ(options->threads, 3);
  EXPECT_EQ(options->compute_pus.to_list(), "2,4,6");
  EXPECT_EQ(options->cpu_kernel, "avx2");
  EXPECT_EQ(options->cache_capacity, 5);
  EXPECT_EQ(options->prefill_round_tokens, 5);
  EXPECT_EQ(options->max_context, 777);
  EXPECT_EQ(options->io_threads, 2);
  EXPECT_FALSE(options->direct_io);
  EXPECT_EQ(options->rss_limit_bytes, 51000u);  // the plan's RAM plus its margin
  // Pins as expert ids, the most used of each layer.
  ASSERT_EQ(options->pins.size(), 2u);
  EXPECT_EQ(options->pins[0], (std::vector<int>{5, 1}));
  EXPECT_EQ(options->pins[1], (std::vector<int>{0, 7}));
}

TEST(OptionsFromPlan, AllExpertsIsTheCapOfTheExpertCount) {
  const ModelShape shape = shape_of(2, 8, 2);
  auto options = options_from_plan(plan_of(8, 8), shape);
  ASSERT_TRUE(options.ok()) << options.error().message;
  // The same number the plan holds: a capacity of every expert, never a sentinel.
  EXPECT_EQ(options->cache_capacity, 8);
  EXPECT_GE(options->cache_capacity, shape.experts);
  EXPECT_TRUE(options->pins.empty());
  EXPECT_GE(ModelOptions{}.cache_capacity, shape.experts);  // unplanned default: every expert resident as well
}

TEST(OptionsFromPlan, RefusesPlansThatDoNotFitTheModel) {
  const ModelShape shape = shape_of(2, 8, 2);
  auto other_model = options_from_plan(plan_of(4, 16), shape);
  ASSERT_FALSE(other_model.ok());
  EXPECT_NE(other_model.error().message.find("16 experts per layer, the model has 8"), std::string::npos);
  auto below_top_k = options_from_plan(plan_of(1, 8), shape);
  ASSERT_FALSE(below_top_k.ok());
  EXPECT_NE(below_top_k.error().message.find("outside [top_k 2, 8 experts]"), std::string::npos);
  planner::Plan pinned = plan_of(6, 8);
  pinned.pins = 3;
  auto no_history = options_from_plan(pinned, shape);
  ASSERT_FALSE(no_history.ok());
  EXPECT_NE(no_history.error().message.find("no usage history"), std::string::npos);
}

}  // namespace
}  // namespace coli::runtime
