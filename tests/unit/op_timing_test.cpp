// The op-level time breakdown: the accounting on made-up times, and the
// engine's use of it (every category a forward pass runs is marked, the
// tokens do not change, off means no record at all). Nothing here is timed:
// only which categories received time and how the table is shaped.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "coli/runtime/op_timing.h"
#include "engine_test_support.h"

namespace coli {
namespace {

using runtime::Op;
using runtime::OpTimes;

TEST(OpTimes, OtherIsThePassTimeNoCategoryClaimed) {
  OpTimes times;
  times.add(Op::experts, 0.006);
  times.add(Op::attention_core, 0.002);
  times.add(Op::other, 0.0005);
  times.add_pass(0.010, 2);
  EXPECT_DOUBLE_EQ(times.seconds(Op::experts), 0.006);
  EXPECT_NEAR(times.seconds(Op::other), 0.002, 1e-12);  // 0.0005 marked + 0.0015 unclaimed
  EXPECT_EQ(times.tokens(), 2);
  EXPECT_EQ(times.passes(), 1);
  times.clear();
  EXPECT_EQ(times.tokens(), 0);
  EXPECT_DOUBLE_EQ(times.seconds(Op::experts), 0);
}

TEST(OpTimes, TableHasOneRowPerCategoryInMsPerToken) {
  OpTimes times;
  times.add(Op::lm_head, 0.004);
  times.add_pass(0.008, 4);
  const std::string table = runtime::op_times_table(times, "decode at depth 0");
  EXPECT_NE(table.find("decode at depth 0: 1 pass(es), 4 token(s), 2.000 ms per token"), std::string::npos) << table;
  for (std::size_t i = 0; i < runtime::kOpCount; ++i) {
    EXPECT_NE(table.find(std::string(runtime::op_name(static_cast<Op>(i)))), std::string::npos) << i;
  }
  EXPECT_NE(table.find("| lm_head                        |       1.0000 |   50.0% |"), std::string::npos) << table;
}

TEST(OpTimes, BatchLogHasAVersionedHeaderAndOneLineABatch) {
  OpTimes times;
  times.add_batch({0, 0.5, {{7, 1}}});
  EXPECT_FALSE(times.batches().empty());
  times.keep_batches(true);
  times.clear();  // forgets the batches, keeps keeping them
  EXPECT_TRUE(times.batches().empty());
  EXPECT_TRUE(times.keeps_batches());
  times.add_batch({3, 0.00125, {{12, 2}, {5, 1}}});
  times.add_batch({4, 0.002, {{1, 6}}});
  const std::string log = runtime::expert_batch_log(times, 3342336);
  EXPECT_EQ(log, "# coli expert batch log, schema " + std::to_string(runtime::kExpertBatchLogSchema) +
                     "\n# record_bytes 3342336\n# moe_layer seconds expert:rows ...\n"
                     "3 0.001250000 12:2 5:1\n4 0.002000000 1:6\n");
}

// Every (token, expert) routing of a prompt is one row of one kept batch, at
// its MoE layer; batches are kept only when asked.
TEST(OpTiming, KeptBatchesHoldEveryRoutedRowOfThePass) {
  const Reference ref = load_reference(fs::path(COLI_FIXTURES_DIR) / "models" / "qwen2_moe", "reference");
  const fs::path container = converted_fixture("qwen2_moe", WeightFormat::q8_row);
  runtime::ModelOptions options;
  options.max_context = 64;
  options.op_timing = true;
  auto model = runtime::MoeModel::load(container, options);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const runtime::ModelShape shape = model->shape();
  std::vector<float> logits(static_cast<std::size_t>(model->vocab_size()));
  ASSERT_TRUE(model->forward(ref.prompt, 0, logits).ok());
  EXPECT_TRUE(model->op_times()->batches().empty());

  model->reset();
  model->op_times()->keep_batches(true);
  ASSERT_TRUE(model->forward(ref.prompt, 0, logits).ok());
  std::vector<int> rows_per_layer(static_cast<std::size_t>(shape.moe_layers), 0);
  for (const runtime::ExpertBatchTiming& batch : model->op_times()->batches()) {
    ASSERT_GE(batch.moe_layer, 0);
    ASSERT_LT(batch.moe_layer, shape.moe_layers);
    EXPECT_GE(batch.seconds, 0);
    std::vector<int> seen;
    for (const auto& [expert, rows] : batch.expert_rows) {
      EXPECT_GE(expert, 0);
      EXPECT_LT(expert, shape.experts);
      EXPECT_GE(rows, 1);
      EXPECT_LE(rows, static_cast<int>(ref.prompt.size()));
      EXPECT_EQ(std::count(seen.begin(), seen.end(), expert), 0) << "an expert twice in one batch";
      seen.push_back(expert);
      rows_per_layer[static_cast<std::size_t>(batch.moe_layer)] += rows;
    }
  }
  for (int rows : rows_per_layer) EXPECT_EQ(rows, static_cast<int>(ref.prompt.size()) * shape.top_k);
}

TEST(OpTiming, EngineMarksEveryCategoryItRunsAndKeepsTheTokens) {
  const Reference ref = load_reference(fs::path(COLI_FIXTURES_DIR) / "models" / "qwen2_moe", "reference");
  const fs::path container = converted_fixture("qwen2_moe", WeightFormat::q8_row);
  runtime::ModelOptions options;
  options.max_context = 64;
  const EngineRun plain = run_model(container, options, ref, true);
  options.op_timing = true;
  const EngineRun timed = run_model(container, options, ref, true);
  EXPECT_EQ(timed.tokens, plain.tokens);

  auto model = runtime::MoeModel::load(container, options);
  ASSERT_TRUE(model.ok()) << model.error().message;
  OpTimes* times = model->op_times();
  ASSERT_NE(times, nullptr);
  std::vector<float> logits(static_cast<std::size_t>(model->vocab_size()));
  ASSERT_TRUE(model->forward(ref.prompt, 0, logits).ok());
  EXPECT_EQ(times->passes(), 1);
  EXPECT_EQ(times->tokens(), static_cast<std::int64_t>(ref.prompt.size()));
  // qwen2_moe has a shared expert, so every category but I/O wait (all resident) and other runs.
  for (Op op : {Op::attention_qkv, Op::attention_core, Op::attention_output, Op::norm_rope, Op::router, Op::experts,
                Op::dense_mlp, Op::lm_head}) {
    EXPECT_GT(times->seconds(op), 0) << runtime::op_name(op);
  }
  double categories = 0;
  for (std::size_t i = 0; i < runtime::kOpCount; ++i) categories += times->seconds(static_cast<Op>(i));
  EXPECT_NEAR(categories, times->pass_seconds(), 1e-9);  // other closes the sum

  options.op_timing = false;
  auto untimed = runtime::MoeModel::load(container, options);
  ASSERT_TRUE(untimed.ok());
  EXPECT_EQ(untimed->op_times(), nullptr);
}

}  // namespace
}  // namespace coli
