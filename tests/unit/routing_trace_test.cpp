// The routing trace the engine records for the planner's cache replay: passes
// and ids stay aligned, a failed pass leaves nothing half-recorded, and the
// window keeps the most recent tokens.
#include <gtest/gtest.h>

#include <vector>

#include "coli/experts/routing_trace.h"

namespace coli::experts {
namespace {

std::vector<int> ids(std::span<const int> s) { return {s.begin(), s.end()}; }

// One pass of `tokens` tokens at both layers of a 2-layer, top-1 trace,
// token t of the pass routed to expert first + t.
void run_pass(RoutingTrace& trace, int tokens, int first) {
  trace.begin_pass(tokens);
  for (int layer = 0; layer < trace.n_layers(); ++layer)
    for (int t = 0; t < tokens; ++t) trace.record(layer, std::vector<int>{first + t});
}

TEST(RoutingTrace, RecordsPassesAndEachLayersIdsInOrder) {
  auto trace = RoutingTrace::create(2, 1, 8);
  ASSERT_TRUE(trace.ok());
  run_pass(*trace, 3, 10);
  run_pass(*trace, 1, 20);
  EXPECT_EQ(trace->tokens(), 4);
  EXPECT_EQ(ids(trace->pass_tokens()), (std::vector<int>{3, 1}));
  EXPECT_EQ(ids(trace->layer(1)), (std::vector<int>{10, 11, 12, 20}));
  EXPECT_TRUE(trace->layer(2).empty());
  EXPECT_FALSE(RoutingTrace::create(0, 1).ok());
  EXPECT_FALSE(RoutingTrace::create(1, 0).ok());
  EXPECT_FALSE(RoutingTrace::create(1, 1, 0).ok());
}

TEST(RoutingTrace, AnUnfinishedPassIsNeitherCountedNorKept) {
  auto trace = RoutingTrace::create(2, 1, 8);
  run_pass(*trace, 2, 0);
  trace->begin_pass(2);
  trace->record(0, std::vector<int>{5});  // the forward failed after one token of layer 0
  EXPECT_EQ(trace->tokens(), 2);
  EXPECT_EQ(ids(trace->layer(0)), (std::vector<int>{0, 1}));
  run_pass(*trace, 1, 7);
  EXPECT_EQ(ids(trace->pass_tokens()), (std::vector<int>{2, 1}));
  EXPECT_EQ(ids(trace->layer(0)), (std::vector<int>{0, 1, 7}));
}

TEST(RoutingTrace, TheWindowKeepsTheNewestTokensCuttingTheOldestPass) {
  auto trace = RoutingTrace::create(2, 1, 4);
  run_pass(*trace, 3, 0);
  run_pass(*trace, 2, 10);
  const RoutingTrace window = trace->window();
  EXPECT_EQ(ids(window.pass_tokens()), (std::vector<int>{2, 2}));
  EXPECT_EQ(ids(window.layer(0)), (std::vector<int>{1, 2, 10, 11}));
  // A long session trims as it records: never more than two windows.
  for (int i = 0; i < 50; ++i) run_pass(*trace, 1, i);
  EXPECT_LE(trace->tokens(), 8);
  EXPECT_EQ(ids(trace->window().layer(1)), (std::vector<int>{46, 47, 48, 49}));
}

// A prompt longer than the window is kept by its last tokens as it is
// recorded: the trace never holds more than three windows of ids (two before
// a trim, one pass), which the plan prices as the engine's routing record.
TEST(RoutingTrace, APassLongerThanTheWindowKeepsItsLastTokens) {
  auto trace = RoutingTrace::create(2, 1, 4);
  run_pass(*trace, 10, 100);
  EXPECT_EQ(ids(trace->pass_tokens()), (std::vector<int>{4}));
  EXPECT_EQ(ids(trace->layer(1)), (std::vector<int>{106, 107, 108, 109}));
  EXPECT_EQ(RoutingTrace::bytes_held(48, 8, 2048), 3ull * 2048 * 4 * (48 * 8 + 2));
}

// Each pass keeps its first KV position: cut at its front by the window, it
// starts that many positions later; appended, it keeps its own; read from
// a file, one a pass or none (older histories: unknown).
TEST(RoutingTrace, EachPassKeepsItsFirstPosition) {
  auto trace = RoutingTrace::create(2, 1, 4);
  trace->begin_pass(3, 0);
  for (int layer = 0; layer < 2; ++layer)
    for (int t = 0; t < 3; ++t) trace->record(layer, std::vector<int>{t});
  trace->begin_pass(1, 3);
  for (int layer = 0; layer < 2; ++layer) trace->record(layer, std::vector<int>{9});
  run_pass(*trace, 1, 7);  // no position given: unknown
  EXPECT_EQ(ids(trace->pass_starts()), (std::vector<int>{0, 3, kUnknownStart}));
  const RoutingTrace window = trace->window();  // 5 tokens in a window of 4: the prompt's first is cut
  EXPECT_EQ(ids(window.pass_tokens()), (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(ids(window.pass_starts()), (std::vector<int>{1, 3, kUnknownStart}));
  auto longer = RoutingTrace::create(1, 1, 4);
  longer->begin_pass(6, 10);  // longer than the window: its last 4 tokens, from position 12
  for (int t = 0; t < 6; ++t) longer->record(0, std::vector<int>{t});
  EXPECT_EQ(ids(longer->pass_starts()), (std::vector<int>{12}));
  auto read = RoutingTrace::create(1, 1, 4);
  EXPECT_TRUE(read->assign({1, 1}, {{0, 1}}, {5, 6}).ok());
  EXPECT_EQ(ids(read->pass_starts()), (std::vector<int>{5, 6}));
  EXPECT_TRUE(read->assign({1, 1}, {{0, 1}}).ok());
  EXPECT_EQ(ids(read->pass_starts()), (std::vector<int>{kUnknownStart, kUnknownStart}));
  EXPECT_FALSE(read->assign({1, 1}, {{0, 1}}, {5}).ok()) << "one position a pass";
  EXPECT_FALSE(read->assign({1, 1}, {{0, 1}}, {5, -2}).ok());
}

TEST(RoutingTrace, AppendFollowsTheOlderTraceWithinTheWindow) {
  auto older = RoutingTrace::create(2, 1, 4);
  auto newer = RoutingTrace::create(2, 1, 4);
  run_pass(*older, 3, 0);
  run_pass(*newer, 2, 10);
  ASSERT_TRUE(older->append(*newer).ok());
  EXPECT_EQ(ids(older->layer(1)), (std::vector<int>{1, 2, 10, 11}));
  auto other = RoutingTrace::create(3, 1, 4);
  EXPECT_FALSE(older->append(*other).ok());
  EXPECT_EQ(older->tokens(), 4);
}

TEST(RoutingTrace, AssignRefusesIdsThatDoNotMatchThePasses) {
  auto trace = RoutingTrace::create(2, 2, 4);
  EXPECT_TRUE(trace->assign({1, 1}, {{0, 1, 2, 3}, {4, 5, 6, 7}}).ok());
  EXPECT_FALSE(trace->assign({1, 1}, {{0, 1, 2}, {4, 5, 6, 7}}).ok());
  EXPECT_FALSE(trace->assign({0, 2}, {{0, 1, 2, 3}, {4, 5, 6, 7}}).ok());
  EXPECT_FALSE(trace->assign({5}, {std::vector<int>(10, 0), std::vector<int>(10, 0)}).ok()) << "past the window";
  EXPECT_FALSE(trace->assign({1}, {{0, 1}}).ok()) << "one layer short";
  EXPECT_EQ(ids(trace->layer(1)), (std::vector<int>{4, 5, 6, 7})) << "refused assignments change nothing";
}

}  // namespace
}  // namespace coli::experts
