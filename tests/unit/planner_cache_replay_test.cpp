// The engine's expert cache replayed over a usage history's routing trace:
// hand-counted hits and misses of tiny traces (LRU, pins, prefill rounds),
// and the speed prediction reading them.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "coli/planner/cache_replay.h"
#include "coli/planner/deciders.h"
#include "coli/planner/speed.h"
#include "planner_fixtures.h"

namespace coli::planner {
namespace {

// A history of `key`'s shape holding `passes` (each a list of its tokens'
// routings, every layer alike), counted and traced, each pass at its first
// position in `starts` (none: unknown, as before format 8).
experts::UsageHistory recorded(const experts::UsageHistoryKey& key, const std::vector<std::vector<std::vector<int>>>& passes,
                               const std::vector<int>& starts = {}) {
  auto history = experts::UsageHistory::create(key);
  EXPECT_TRUE(history.ok());
  auto trace = experts::RoutingTrace::create(key.n_layers, key.top_k);
  std::size_t tokens = 0;
  for (std::size_t i = 0; i < passes.size(); ++i) {
    const auto& pass = passes[i];
    trace->begin_pass(static_cast<int>(pass.size()), starts.empty() ? experts::kUnknownStart : starts[i]);
    for (int layer = 0; layer < key.n_layers; ++layer) {
      for (const auto& experts : pass) {
        trace->record(layer, experts);
        EXPECT_TRUE(history->record(layer, experts).ok());
      }
    }
    tokens += pass.size();
  }
  history->add_tokens(tokens);
  EXPECT_TRUE(history->add_trace(*trace).ok());
  return std::move(history).value();
}

// A history of one layer of `n` experts, top_k 1: each pass's routings
// counted and traced (at `starts`, as recorded() takes them).
experts::UsageHistory traced(int n, const std::vector<std::vector<int>>& passes, int layers = 1,
                             const std::vector<int>& starts = {}) {
  std::vector<std::vector<std::vector<int>>> routed;
  for (const auto& pass : passes) {
    routed.emplace_back();
    for (const int expert : pass) routed.back().push_back({expert});
  }
  return recorded({layers, n, 1, "replay-test"}, routed, starts);
}

ModelFootprint demo_model() {
  auto fp = read_footprint(std::filesystem::path(COLI_FIXTURES_DIR) / "models" / "tiny-demo", WeightFormat::q4_g64,
                           DenseFormat::source);
  EXPECT_TRUE(fp.ok()) << (fp.ok() ? "" : fp.error().message);
  return *fp;
}

// The demo model's history key.
experts::UsageHistoryKey demo_key(const ModelFootprint& fp) {
  return {static_cast<int>(fp.moe_layer_count()), fp.n_experts, fp.top_k, "tiny-test"};
}

// A history of the demo model's `tokens` generated tokens, token t routed at
// every layer to cycle[t % size], counted and traced.
experts::UsageHistory generated(const ModelFootprint& fp, const std::vector<std::vector<int>>& cycle, int tokens = 64) {
  std::vector<std::vector<std::vector<int>>> passes;
  for (int token = 0; token < tokens; ++token) passes.push_back({cycle[static_cast<std::size_t>(token) % cycle.size()]});
  return recorded(demo_key(fp), passes);
}

// The demo model's CPU plan at `cap` with no pins.
Plan cpu_plan(const ModelFootprint& fp, int cap) {
  PlanRequest request;
  request.gpu = "none";
  request.cap = cap;
  auto made = make_plan(measured_profile(10), fp, request);
  EXPECT_TRUE(made.ok()) << (made.ok() ? "" : made.error().message);
  Plan plan = *made;
  plan.pins = 0;
  return plan;
}

// Generated tokens 0 1 0 1 2 0 through 2 LRU slots: the warming pass leaves
// [2 0]; then 0 hits, 1 misses, 0 and 1 hit, 2 and 0 miss: 3 of 6. With
// one pin (expert 0, the most used) the one LRU slot holds 2: 1 misses, 1
// hits, 2 misses; 0 always hits: 2 of 6.
TEST(CacheReplay, DecodeTokensMissAsTheEnginesLruAndPinsDo) {
  const auto history = traced(4, {{0}, {1}, {0}, {1}, {2}, {0}});
  const auto lru = replay_expert_cache(history, 2, 0, 512);
  ASSERT_TRUE(lru.has_value());
  EXPECT_DOUBLE_EQ(*lru->decode_misses_per_layer_token(), 3.0 / 6);
  EXPECT_FALSE(lru->prompt_misses_per_layer_token().has_value()) << "no prompt in the trace";
  const auto pinned = replay_expert_cache(history, 2, 1, 512);
  ASSERT_TRUE(pinned.has_value());
  EXPECT_DOUBLE_EQ(*pinned->decode_misses_per_layer_token(), 2.0 / 6);
  EXPECT_DOUBLE_EQ(*replay_expert_cache(history, 4, 0, 512)->decode_misses_per_layer_token(), 0.0);
  // The tokens one at a time: 3 rounds missed nothing, 3 missed one.
  EXPECT_EQ(CacheReplay::shares(lru->decode_runs.rounds_missing), (std::vector<double>{0.5, 0.5}));
}

// A prompt of 0 0 1 1 2 2 3 3 with 2 slots runs in rounds of 2 tokens (the
// RoundPlanner's (cap - pins) / top_k): each round leases one distinct expert
// and misses it (the warming pass left 2 3, and LRU order evicts them before
// their use). A round of 0 0 reads expert 0 once, where a reuse distance
// counts the second 0 a hit of its own.
TEST(CacheReplay, PromptRoundsLeaseTheirDistinctExpertsOnce) {
  const auto history = traced(4, {{0, 0, 1, 1, 2, 2, 3, 3}});
  const auto replay = replay_expert_cache(history, 2, 0, 512);
  ASSERT_TRUE(replay.has_value());
  EXPECT_EQ(replay->round_tokens, 2);
  EXPECT_DOUBLE_EQ(*replay->distinct_per_round(), 1.0);
  EXPECT_DOUBLE_EQ(*replay->prompt_misses_per_layer_token(), 4.0 / 8);
  const auto rounds_of_4 = replay_expert_cache(history, 4, 0, 4);
  EXPECT_DOUBLE_EQ(*rounds_of_4->distinct_per_round(), 2.0);
  EXPECT_DOUBLE_EQ(*rounds_of_4->prompt_misses_per_layer_token(), 0.0) << "every expert resident after the warming pass";
}

// Rounds of 4 tokens (cap 4, top_k 1) over 0 0 0 1 | 2 3 3 3: each round
// has an expert of three rows and one of one, counted once (the warming
// pass is not): half the rounds' experts carry one row, half three.
TEST(CacheReplay, PromptRoundsCountTheRowsOfEachExpert) {
  const auto history = traced(4, {{0, 0, 0, 1, 2, 3, 3, 3}});
  const auto replay = replay_expert_cache(history, 4, 0, 4);
  ASSERT_TRUE(replay.has_value());
  EXPECT_EQ(replay->round_tokens, 4);
  EXPECT_EQ(replay->prompt_expert_rows, (std::vector<double>{0, 2, 0, 2}));
  EXPECT_EQ(replay->expert_rows_shares(), (std::vector<double>{0, 0.5, 0, 0.5}));
  EXPECT_TRUE(replay_expert_cache(traced(4, {{0}, {1}}), 2, 0, 512)->expert_rows_shares().empty()) << "no prompt, no rounds";
}

// Rounds of 2 tokens (cap 4, top_k 1) over 0 1 | 0 2 | 3 3 | 1 0, each
// round's experts in id order: 0 and 1 are first uses; then 0 a round
// later, after 1 (distance 1), and 2 a first use; 3 (two rows) a first
// use; then 0 after 2 and 3 (distance 2), and 1 after 2, 3 and this
// round's 0 (distance 3). The last place (4 experts) counts first uses. A
// second prompt starts over: its layer ran the whole model in between.
TEST(CacheReplay, PromptRoundsCountHowRecentlyTheirLayerRanEachExpert) {
  const auto history = traced(4, {{0, 1, 0, 2, 3, 3, 1, 0}, {1, 0}});
  const auto replay = replay_expert_cache(history, 4, 0, 2);
  ASSERT_TRUE(replay.has_value());
  ASSERT_EQ(replay->round_tokens, 2);
  ASSERT_EQ(replay->prompt_expert_reuse.size(), 3u);
  EXPECT_EQ(replay->prompt_expert_reuse[1], (std::vector<double>{0, 1, 1, 1, 5})) << "the second prompt's 0 and 1 are first uses";
  EXPECT_EQ(replay->prompt_expert_reuse[2], (std::vector<double>{0, 0, 0, 0, 1}));
  const auto& reuse = replay->prompt_expert_reuse;
  EXPECT_DOUBLE_EQ(CacheReplay::reused_share(reuse, 1, 0.5), 0.0);
  EXPECT_DOUBLE_EQ(CacheReplay::reused_share(reuse, 1, 1.0), 1.0 / 8);
  EXPECT_DOUBLE_EQ(CacheReplay::reused_share(reuse, 1, 3.0), 3.0 / 8);
  EXPECT_DOUBLE_EQ(CacheReplay::reused_share(reuse, 1, 100.0), 3.0 / 8) << "a first use is never within";
  EXPECT_DOUBLE_EQ(CacheReplay::reused_share(reuse, 2, 100.0), 0.0);
  EXPECT_DOUBLE_EQ(CacheReplay::reused_share(reuse, 5, 100.0), 0.0) << "no expert of five rows";
}

// Prompts 0 0 0 0 0 0 | 1 1 1 1 1 1 through one slot (rounds of one token):
// each prompt's first round misses (the slot holds the other prompt's
// expert), the rest hit. A prompt's own rate is its rounds' by place: 1
// read a token for one token, 0.5 for two, the mean (2 of 12) for six;
// places past the trace's longest prompt take the mean.
TEST(CacheReplay, AShortPromptIsPricedByThePromptsOpeningRounds) {
  const auto replay = replay_expert_cache(traced(4, {{0, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}}), 1, 0, 512);
  ASSERT_TRUE(replay.has_value());
  ASSERT_EQ(replay->round_tokens, 1);
  EXPECT_EQ(replay->prompt_rounds.misses, (std::vector<double>{2, 0, 0, 0, 0, 0}));
  EXPECT_EQ(replay->prompt_rounds.tokens, (std::vector<double>{2, 2, 2, 2, 2, 2}));
  EXPECT_DOUBLE_EQ(*replay->prompt_misses_per_layer_token(), 2.0 / 12);
  EXPECT_DOUBLE_EQ(*replay->prompt_misses_per_layer_token(1), 1.0);
  EXPECT_DOUBLE_EQ(*replay->prompt_misses_per_layer_token(2), 0.5);
  EXPECT_DOUBLE_EQ(*replay->prompt_misses_per_layer_token(6), 2.0 / 12);
  EXPECT_DOUBLE_EQ(*replay->prompt_misses_per_layer_token(12), (1 + 6 * (2.0 / 12)) / 12);
  // Its rounds' batches: the full rounds' (2 of 12 missed one) scaled to its misses a round.
  EXPECT_EQ(CacheReplay::shares(replay->prompt_rounds_missing), (std::vector<double>{10.0 / 12, 2.0 / 12}));
  const auto one = replay->prompt_batches(1), two = replay->prompt_batches(2), six = replay->prompt_batches(6);
  EXPECT_NEAR(one[0], 0.0, 1e-12);
  EXPECT_NEAR(one[1], 1.0, 1e-12);
  EXPECT_NEAR(two[1], 0.5, 1e-12);
  EXPECT_NEAR(six[1], 2.0 / 12, 1e-12);
}

// Prompt 0 0 then decode 1 1 1, twice over, through one slot: each run's
// first decode token misses (the slot holds the prompt's 0), the next two
// hit. A run of one token reads 1 a token, of three a third; a run of six
// reads the first place's 1 and the settled 0 five times over.
TEST(CacheReplay, ADecodeRunIsPricedByItsTokensPlaces) {
  const auto replay = replay_expert_cache(traced(4, {{0, 0}, {1}, {1}, {1}, {0, 0}, {1}, {1}, {1}}), 1, 0, 512);
  ASSERT_TRUE(replay.has_value());
  EXPECT_EQ(replay->decode_runs.places.misses, (std::vector<double>{2, 0, 0}));
  EXPECT_EQ(replay->decode_runs.places.tokens, (std::vector<double>{2, 2, 2}));
  EXPECT_DOUBLE_EQ(*replay->decode_misses_per_layer_token(), 2.0 / 6);
  EXPECT_DOUBLE_EQ(*replay->decode_misses_per_layer_token({1}), 1.0);
  EXPECT_DOUBLE_EQ(*replay->decode_misses_per_layer_token({3}), 1.0 / 3);
  EXPECT_DOUBLE_EQ(*replay->decode_misses_per_layer_token({6}), 1.0 / 6);
}

// Through one slot: prompt 0 0 at position 0 and a reply 0 0 0 after it
// (positions 2-4: the slot holds its prompt's expert, every token hits),
// then prompt 1 1 and a fresh context's decode 2 2 2 (positions 0-2: its
// first token misses). A run is priced by the trace's runs that start as
// it does; a trace without positions (format 7) prices both by all runs.
TEST(CacheReplay, ADecodeAfterItsOwnPromptIsPricedApartFromAFreshOne) {
  const std::vector<std::vector<int>> passes = {{0, 0}, {0}, {0}, {0}, {1, 1}, {2}, {2}, {2}};
  const auto replay = replay_expert_cache(traced(4, passes, 1, {0, 2, 3, 4, 0, 0, 1, 2}), 1, 0, 512);
  ASSERT_TRUE(replay.has_value());
  EXPECT_EQ(replay->in_context_decode_runs.places.misses, (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(replay->fresh_decode_runs.places.misses, (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(replay->decode_runs.places.misses, (std::vector<double>{1, 0, 0}));
  EXPECT_DOUBLE_EQ(*replay->decode_misses_per_layer_token({1, DecodeStart::in_context}), 0.0);
  EXPECT_DOUBLE_EQ(*replay->decode_misses_per_layer_token({1, DecodeStart::fresh}), 1.0);
  EXPECT_DOUBLE_EQ(*replay->decode_misses_per_layer_token({1, DecodeStart::any}), 0.5);
  EXPECT_DOUBLE_EQ(*replay->decode_misses_per_layer_token({kTracedDecodeRun, DecodeStart::fresh}), 1.0 / 3);
  EXPECT_NE(replay->decode_runs_text({kTracedDecodeRun, DecodeStart::fresh}).find("runs that start a fresh context (3 tokens)"), std::string::npos);
  // Their misses come in the batches of their own kind's rounds, scaled to the run's misses.
  auto expect_shares = [](const std::vector<double>& shares, const std::vector<double>& want) {
    ASSERT_EQ(shares.size(), want.size());
    for (std::size_t m = 0; m < want.size(); ++m) EXPECT_NEAR(shares[m], want[m], 1e-12) << "index " << m;
  };
  expect_shares(replay->decode_batches({kTracedDecodeRun, DecodeStart::fresh}), {2.0 / 3, 1.0 / 3});
  expect_shares(replay->decode_batches({1, DecodeStart::fresh}), {0, 1});
  expect_shares(replay->decode_batches({1, DecodeStart::in_context}), {1});
  expect_shares(replay->decode_batches({1, DecodeStart::any}), {0.5, 0.5});
  const auto unknown = replay_expert_cache(traced(4, passes), 1, 0, 512);
  EXPECT_DOUBLE_EQ(*unknown->decode_misses_per_layer_token({1, DecodeStart::in_context}), 0.5);
  EXPECT_TRUE(unknown->in_context_decode_runs.places.tokens.empty());
  EXPECT_NE(unknown->decode_runs_text({kTracedDecodeRun, DecodeStart::in_context})
                .find("no decode runs that follow their own context (it keeps no positions"),
            std::string::npos);
}

// Through one slot: a reply after a 2-token prompt of expert 0 reads
// nothing (0 0 at positions 2-3), one after an 8-token prompt of expert 1
// reads its own expert 2 once (2 2 at positions 8-9). A reply is priced by
// the runs after its own context where the trace has it, between the two
// that bracket it by log ratio (after 3 tokens: log(3/2) / log(8/2) = 0.29
// of the way from 2 to 8, so its first token misses 0.29), outside them by
// the nearest; with no context given, by all of them.
TEST(CacheReplay, AReplyIsPricedByTheRunsAfterTheContextsAroundItsOwn) {
  const std::vector<std::vector<int>> passes = {{0, 0}, {0}, {0}, std::vector<int>(8, 1), {2}, {2}};
  const auto replay = replay_expert_cache(traced(4, passes, 1, {0, 2, 3, 0, 8, 9}), 1, 0, 512);
  ASSERT_TRUE(replay.has_value());
  ASSERT_EQ(replay->in_context_runs_after.size(), 2u);
  EXPECT_EQ(replay->in_context_runs_after.at(2).places.misses, (std::vector<double>{0, 0}));
  EXPECT_EQ(replay->in_context_runs_after.at(8).places.misses, (std::vector<double>{1, 0}));
  auto first_token = [&](int context) { return *replay->decode_misses_per_layer_token({1, DecodeStart::in_context, context}); };
  EXPECT_DOUBLE_EQ(first_token(2), 0.0);
  EXPECT_DOUBLE_EQ(first_token(8), 1.0);
  EXPECT_NEAR(first_token(3), std::log(1.5) / std::log(4.0), 1e-12);
  EXPECT_NEAR(first_token(6), std::log(3.0) / std::log(4.0), 1e-12);
  EXPECT_DOUBLE_EQ(first_token(1), 0.0) << "below every traced context: the nearest";
  EXPECT_DOUBLE_EQ(first_token(64), 1.0) << "above every traced context: the nearest";
  EXPECT_DOUBLE_EQ(*replay->decode_misses_per_layer_token({2, DecodeStart::in_context, 6}), std::log(3.0) / std::log(4.0) / 2)
      << "its second token reads nothing after either";
  EXPECT_DOUBLE_EQ(*replay->decode_misses_per_layer_token({1, DecodeStart::in_context}), 0.5);
  EXPECT_NE(replay->decode_runs_text({1, DecodeStart::in_context, 6})
                .find("runs that follow their own context of 2 and 8 tokens (this run's 6 between them, weighted 0.21 and "
                      "0.79 by log ratio) (4 tokens)"),
            std::string::npos)
      << replay->decode_runs_text({1, DecodeStart::in_context, 6});
  EXPECT_NE(replay->decode_runs_text({1, DecodeStart::in_context, 64}).find("of 8 tokens (nearest this run's 64) (2 tokens)"),
            std::string::npos)
      << replay->decode_runs_text({1, DecodeStart::in_context, 64});
  // The clustering blends alike: after 8 tokens half the layer-rounds miss one expert, after 2 none do.
  const std::vector<double> batches = replay->decode_batches({1, DecodeStart::in_context, 6});
  ASSERT_GE(batches.size(), 2u);
  EXPECT_NEAR(batches[1], first_token(6), 1e-12) << "its one miss a token comes in rounds of one";
}

// Two fresh decode runs back to back (positions 0 1, then 0 1 again: a new
// context) are two runs, each from place 0; without positions they read
// as one run of four.
TEST(CacheReplay, ADecodeRunEndsWhereItsPositionsStartAgain) {
  const std::vector<std::vector<int>> passes = {{3}, {3}, {1}, {1}};
  const auto replay = replay_expert_cache(traced(4, passes, 1, {0, 1, 0, 1}), 1, 0, 512);
  ASSERT_TRUE(replay.has_value());
  EXPECT_EQ(replay->fresh_decode_runs.places.tokens, (std::vector<double>{2, 2}));
  EXPECT_EQ(replay->fresh_decode_runs.places.misses, (std::vector<double>{2, 0}));
  EXPECT_NE(replay->decode_runs_text({kTracedDecodeRun, DecodeStart::in_context}).find("no decode runs that follow their own context: priced by all"),
            std::string::npos)
      << "positions kept, none of that kind";
  EXPECT_EQ(replay_expert_cache(traced(4, passes), 1, 0, 512)->decode_runs.places.tokens, (std::vector<double>{1, 1, 1, 1}));
}

TEST(CacheReplay, NothingToReplayOrACacheThatCannotRunGivesNothing) {
  auto empty = experts::UsageHistory::create({1, 4, 1, "replay-test"});
  EXPECT_FALSE(replay_expert_cache(*empty, 2, 0, 512).has_value()) << "a version 3 history has no trace";
  const auto history = traced(4, {{0}, {1}});
  EXPECT_FALSE(replay_expert_cache(history, 0, 0, 512).has_value());
  EXPECT_FALSE(replay_expert_cache(history, 2, 2, 512).has_value()) << "pins leave no slot for a token's expert";
  const auto replay = replay_expert_cache(history, 2, 0, 512);
  EXPECT_NE(replay->describe(2, 0).find("routing trace (2 tokens: 0 in prompts, 2 generated)"), std::string::npos)
      << replay->describe(2, 0);
}

// Two 8-token prompts, one routing every token to {0, 1} and one to {2,
// 3}, through 2 slots (rounds of one token): each prompt reads its two
// experts in its first round and none after. A one-token prompt is priced
// at its opening round's 2 reads a layer, not at an eighth of them (the
// 8-token mean), and the 8-token prompt at the same 2; each waits for them
// once.
TEST(PlanSpeed, AShortPromptReadsWhatThePromptsFirstRoundsRead) {
  const ModelFootprint fp = demo_model();
  const std::vector<std::vector<int>> a(8, {0, 1}), b(8, {2, 3});
  const auto history = recorded(demo_key(fp), {a, b});
  const Plan plan = cpu_plan(fp, 2);
  ASSERT_EQ(plan.prefill_round_tokens, 1);
  const double layers = static_cast<double>(fp.moe_layer_count());
  const SpeedPrediction one = predict_speed(measured_profile(10), fp, plan, &history, kPlanMeanDepth, 1);
  ASSERT_TRUE(one.available) << one.unavailable;
  EXPECT_DOUBLE_EQ(one.prefill_disk_reads, 2 * layers);
  const SpeedPrediction eight = predict_speed(measured_profile(10), fp, plan, &history, kPlanMeanDepth, 8);
  EXPECT_NEAR(eight.prefill_disk_reads, 2 * layers, 1e-9);
  // And waits for them: the one-token prompt's round reads both at every
  // layer, where the full rounds' clustering alone (one round in eight
  // reading two) priced an eighth of that wait.
  const double one_wait = term_seconds(one.prefill_terms, "memory: experts from disk");
  const double eight_wait = term_seconds(eight.prefill_terms, "memory: experts from disk") * 8;
  EXPECT_GT(one_wait, 0.0);
  EXPECT_NEAR(one_wait, eight_wait, 0.25 * eight_wait) << "the same reads, waited for once";
}

// Prompts routed to {0, 1}, each followed by 3 decode tokens routed to
// {2, 3}, through 2 slots: a run's first token reads both experts at every
// layer, the next two none. A 64-token run reads them once (its first
// place), a 3-token run as the trace's runs, and the plan's own figure (no
// run given) at the trace's mean.
TEST(PlanSpeed, ALongerDecodeRunSettlesAfterItsFirstTokens) {
  const ModelFootprint fp = demo_model();
  const double layers = static_cast<double>(fp.moe_layer_count());
  const std::vector<std::vector<int>> prompt(2, {0, 1}), token(1, {2, 3});
  const auto history = recorded(demo_key(fp), {prompt, token, token, token, prompt, token, token, token});
  const Plan plan = cpu_plan(fp, 2);
  const SpeedPrediction mean = predict_speed(measured_profile(10), fp, plan, &history);
  ASSERT_TRUE(mean.available) << mean.unavailable;
  EXPECT_NEAR(mean.decode_disk_reads, layers * 2.0 / 3, 1e-12) << "2 reads a layer in every 3-token run";
  const SpeedPrediction three = predict_speed(measured_profile(10), fp, plan, &history, kPlanMeanDepth, kPlanPrompt, {3});
  EXPECT_NEAR(three.decode_disk_reads, layers * 2.0 / 3, 1e-12);
  const SpeedPrediction long_run = predict_speed(measured_profile(10), fp, plan, &history, kPlanMeanDepth, kPlanPrompt, {64});
  EXPECT_NEAR(long_run.decode_disk_reads, layers * 2.0 / 64, 1e-12);
  // With positions: a reply after its own prompt {0, 1} reads nothing; a fresh context's run after it, 2 at its first token.
  const std::vector<std::vector<int>> reply_token(1, {0, 1});
  const auto placed = recorded(demo_key(fp), {prompt, reply_token, reply_token, reply_token, prompt, token, token, token},
                               {0, 2, 3, 4, 0, 0, 1, 2});
  const SpeedPrediction reply = predict_speed(measured_profile(10), fp, plan, &placed, 4, 2, {3, DecodeStart::in_context});
  EXPECT_NEAR(reply.decode_disk_reads, 0.0, 1e-12);
  EXPECT_NE(reply.hit_rate_inputs.find("runs that follow their own context (3 tokens)"), std::string::npos) << reply.hit_rate_inputs;
  const SpeedPrediction fresh = predict_speed(measured_profile(10), fp, plan, &placed, 1, 2, {3, DecodeStart::fresh});
  EXPECT_NEAR(fresh.decode_disk_reads, layers * 2.0 / 3, 1e-12);
  EXPECT_LT(fresh.decode_tok_per_s, reply.decode_tok_per_s) << "the fresh run's reads are waited for";
}

// The speed model prices a streaming CPU plan's misses by the replay: the
// same routings, pinned, read more (the pins take LRU slots the cycle
// needed), which the reuse distances cannot tell apart.
TEST(PlanSpeed, AReplayedTracePricesPinsThatTakeLruSlots) {
  const ModelFootprint fp = demo_model();
  const int k = fp.top_k;
  // Generated tokens cycling through experts {0,1}, {2,3}, {4,5}, with {0,1} twice as often.
  const auto history = generated(fp, {{0, 1}, {2, 3}, {0, 1}, {4, 5}});
  Plan plan = cpu_plan(fp, 6);
  const SpeedPrediction lru = predict_speed(measured_profile(10), fp, plan, &history);
  ASSERT_TRUE(lru.available) << lru.unavailable;
  EXPECT_DOUBLE_EQ(lru.hit_rate, 1.0) << "three pairs in 6 slots: every routing hits";
  EXPECT_NE(lru.hit_rate_inputs.find("replayed through the engine's cache (cap 6, 0 pins"), std::string::npos)
      << lru.hit_rate_inputs;
  // Pinning {0,1} leaves 4 LRU slots for {2,3} and {4,5}: still every routing hits.
  plan.pins = 2;
  EXPECT_DOUBLE_EQ(predict_speed(measured_profile(10), fp, plan, &history).hit_rate, 1.0);
  // At cap 5 with 3 pins ({0,1} and 2, the lowest id of the tie) experts 3, 4 and 5 share 2 LRU slots: each
  // {2,3} token reads 3 and each {4,5} token one of its pair, 2 misses of every 8 routings.
  plan.cap = 5, plan.pins = 3, plan.prefill_round_tokens = 1;
  const SpeedPrediction pinned = predict_speed(measured_profile(10), fp, plan, &history);
  ASSERT_TRUE(pinned.available) << pinned.unavailable;
  EXPECT_DOUBLE_EQ(pinned.hit_rate, 1.0 - 2.0 / (4 * k));
  EXPECT_LT(pinned.decode_tok_per_s, lru.decode_tok_per_s);
}

// Generated tokens of the demo model (top 2) through 2 slots, one miss a
// token either way: {0,1} {0,2} alternating misses one expert every token;
// {0,1} {0,1} {2,3} {2,3} misses two every other token. The binomial spread
// of one miss rate prices both alike; the replay's rounds request two reads
// together, which this disk serves faster than two one after another.
TEST(PlanSpeed, MissesThatComeTogetherAreReadTogether) {
  const ModelFootprint fp = demo_model();
  const auto one_at_a_time = generated(fp, {{0, 1}, {0, 2}});
  const auto two_together = generated(fp, {{0, 1}, {0, 1}, {2, 3}, {2, 3}});
  const Plan plan = cpu_plan(fp, 2);
  const SpeedPrediction single = predict_speed(measured_profile(10), fp, plan, &one_at_a_time);
  const SpeedPrediction paired = predict_speed(measured_profile(10), fp, plan, &two_together);
  ASSERT_TRUE(single.available && paired.available);
  EXPECT_DOUBLE_EQ(single.hit_rate, 0.5);
  EXPECT_DOUBLE_EQ(paired.hit_rate, 0.5);
  auto disk_term = [](const SpeedPrediction& s) {
    for (const SpeedTerm& t : s.decode_terms)
      if (t.name == "experts from disk") return t.seconds;
    return -1.0;
  };
  EXPECT_GT(disk_term(single), 0.0);
  EXPECT_LT(disk_term(paired), disk_term(single)) << "two reads at once cost less than one read on each of two tokens";
  EXPECT_NE(paired.decode_inputs.find("as many at once as the replay's tokens missed"), std::string::npos)
      << paired.decode_inputs;
}

// The tuning phase's stream points on 8 threads of `cpu_kernel`: `gbs` at each rows per expert (0: none).
DeviceProfile streaming_profile(double one_row_gbs, double two_row_gbs, double four_row_gbs = 0,
                                const char* cpu_kernel = "avx512vnni") {
  DeviceProfile profile = measured_profile(10);
  KernelTuning tuning{cpu_kernel, 1ull << 30, 1, "", {}};
  auto add = [&](const char* kernel, int rows, double gbs) {
    if (gbs > 0) tuning.points.push_back(point_on_8_threads(kernel, 1024, 24 * rows, 3 * 24 * rows, {3, gbs, gbs, gbs, 0}, {3, 1e3, 1e3, 1e3, 0}));
  };
  add("expert_q4_prefill_stream1", 1, one_row_gbs);
  add("expert_q4_prefill_stream", 2, two_row_gbs);
  add("expert_q4_prefill_stream4", 4, four_row_gbs);
  profile.measurements.kernel_tuning = tuning;
  return profile;
}

// A prompt round streams an expert of one row faster than one of two: the
// demo model's rounds of 2 tokens (cap 4, top 2) routed {0,1} {0,2} give
// each round expert 0 with two rows and two experts with one, so with one
// row at 20 GB/s and two at 10 the records stream at 1 / (2/3 / 20 + 1/3 /
// 10) = 15 GB/s: the experts' RAM term a third below the two-row figure's.
TEST(PlanSpeed, APromptRoundsRecordsStreamAtTheirExpertsRows) {
  const ModelFootprint fp = demo_model();
  std::vector<std::vector<int>> routes;
  for (int round = 0; round < 32; ++round) {
    const int first = 2 * round % 6;
    routes.push_back({first, first + 1}), routes.push_back({first, first + 2});
  }
  const auto history = recorded(demo_key(fp), {routes});
  const Plan plan = cpu_plan(fp, 4);
  auto predicted = [&](double one_row_gbs, double two_row_gbs) {
    const SpeedPrediction s = predict_speed(streaming_profile(one_row_gbs, two_row_gbs), fp, plan, &history);
    EXPECT_TRUE(s.available) << s.unavailable;
    return s;
  };
  const SpeedPrediction mixed = predicted(20, 10);
  EXPECT_NE(mixed.prefill_inputs.find("streamed at 20.0 / 10.0 GB/s at 1 / 2 rows on each expert (expert_q4_prefill_stream1, "
                                      "_stream, measured at 8 threads) (the replay's rows per expert: 67% with one, 1.3 on "
                                      "average; 15.0 GB/s over them)"),
            std::string::npos)
      << mixed.prefill_inputs;
  auto ram_term = [](const SpeedPrediction& s) { return term_seconds(s.prefill_terms, "memory: weights from RAM"); };
  const double at_10 = ram_term(predicted(0, 10)), at_20 = ram_term(predicted(0, 20));
  EXPECT_GT(at_10, at_20);
  EXPECT_NEAR(ram_term(mixed), at_10 - 2 * (at_10 - at_20) / 3, 1e-12) << "the experts' share at 15 GB/s: 2/3 of it at 10";
  EXPECT_NEAR(ram_term(predicted(20, 0)), at_20, 1e-12) << "one point prices every round";
}

// A prompt round's records that their layer read a round before stream at
// the warm points' rate. The demo model at cap 4 runs rounds of 2 tokens;
// routed {0,1} {0,2} every round, each round has expert 0 with two rows
// and experts 1 and 2 with one, each read again after the round's other
// two (far within 23 of the probe's 3.2 MiB records: 73.3 MiB) but in the
// first round. With warm points of 40 / 20 GB/s beside fresh ones of 20 /
// 10, the RAM term is 31/32 of the term at 40 / 20 fresh and 1/32 of the
// term at 20 / 10.
TEST(PlanSpeed, ARecordItsLayerReadARoundBeforeStreamsAtTheWarmRate) {
  const ModelFootprint fp = demo_model();
  std::vector<std::vector<int>> routes;
  for (int round = 0; round < 32; ++round) routes.push_back({0, 1}), routes.push_back({0, 2});
  const auto history = recorded(demo_key(fp), {routes});
  const Plan plan = cpu_plan(fp, 4);
  auto ram_term = [&](const DeviceProfile& profile, std::string* inputs = nullptr) {
    const SpeedPrediction s = predict_speed(profile, fp, plan, &history);
    EXPECT_TRUE(s.available) << s.unavailable;
    if (inputs) *inputs = s.prefill_inputs;
    return term_seconds(s.prefill_terms, "memory: weights from RAM");
  };
  DeviceProfile warm = streaming_profile(20, 10);
  auto add_warm = [&](const char* kernel, int rows, double gbs) {
    warm.measurements.kernel_tuning->points.push_back(
        point_on_8_threads(kernel, 1024, 24 * rows, 3 * 24 * rows, {3, gbs, gbs, gbs, 0}, {3, 1e3, 1e3, 1e3, 0}));
  };
  add_warm("expert_q4_prefill_stream_warm1", 1, 40);
  add_warm("expert_q4_prefill_stream_warm", 2, 20);
  std::string inputs;
  const double at_warm = ram_term(warm, &inputs), fresh = ram_term(streaming_profile(20, 10)),
               fast = ram_term(streaming_profile(40, 20));
  EXPECT_NEAR(at_warm, 31.0 / 32 * fast + 1.0 / 32 * fresh, 1e-9 * fresh);
  EXPECT_NE(inputs.find("; a record its layer read within the last 73.3 MiB of records: 40.0 / 20.0 GB/s "
                        "(expert_q4_prefill_stream_warm1, _warm, _warm4)"),
            std::string::npos)
      << inputs;
  EXPECT_NE(inputs.find("97% read again within"), std::string::npos) << inputs;

  // A re-read slower than a fresh read (noise) is priced as fresh.
  DeviceProfile noisy = streaming_profile(20, 10);
  noisy.measurements.kernel_tuning->points.push_back(
      point_on_8_threads("expert_q4_prefill_stream_warm1", 1024, 24, 72, {3, 15, 15, 15, 0}, {3, 1e3, 1e3, 1e3, 0}));
  EXPECT_NEAR(ram_term(noisy), fresh, 1e-12 * fresh);
}

// amx computes an expert of four rows or more in tiles of 16 (its 4-row
// point pays a whole tile) and one of fewer on avx512vnni's GEMM, whose
// cost grows with its rows. The demo model at cap 6 runs rounds of 3
// tokens; routed {0,1} {0,2} {0,3}, each round has expert 0 with three rows
// and three experts with one. At 20 / 10 / 2 GB/s for 1 / 2 / 4 rows, an
// amx profile prices the 3-row record from the vnni points (1.5x the 2-row
// seconds per byte: 6.67 GB/s), so the records stream at 1 / (3/4 / 20 +
// 1/4 / 6.67) = 13.3 GB/s; a vnni profile, one kernel throughout, between
// its 2- and 4-row points (3.33 GB/s): 8.9 GB/s.
TEST(PlanSpeed, AnAmxRoundsSmallExpertsArePricedByTheKernelTheyRun) {
  const ModelFootprint fp = demo_model();
  std::vector<std::vector<int>> routes;
  for (int round = 0; round < 32; ++round) routes.push_back({0, 1}), routes.push_back({0, 2}), routes.push_back({0, 3});
  const auto history = recorded(demo_key(fp), {routes});
  const Plan plan = cpu_plan(fp, 6);
  ASSERT_EQ(plan.prefill_round_tokens, 3);
  auto inputs = [&](const char* cpu_kernel) {
    const SpeedPrediction s = predict_speed(streaming_profile(20, 10, 2, cpu_kernel), fp, plan, &history);
    EXPECT_TRUE(s.available) << s.unavailable;
    return s.prefill_inputs;
  };
  const std::string amx = inputs("amx"), vnni = inputs("avx512vnni");
  EXPECT_NE(amx.find("amx from 4 rows, fewer on avx512vnni's GEMM: each priced by its own kernel's points (the replay's "
                     "rows per expert: 75% with one, 1.5 on average; 13.3 GB/s over them)"),
            std::string::npos)
      << amx;
  EXPECT_NE(vnni.find("measured at 8 threads) (the replay's rows per expert: 75% with one, 1.5 on average; 8.9 GB/s over them)"),
            std::string::npos)
      << vnni;
}

}  // namespace
}  // namespace coli::planner
