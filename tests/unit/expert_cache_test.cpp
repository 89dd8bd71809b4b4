// Expert cache, round planning and the slab: field-notes.md failure #1 (pins
// starving the cache until a slot in use was recycled) as regression tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "coli/experts/aligned_slab.h"
#include "coli/experts/expert_cache.h"
#include "coli/experts/round_planner.h"

namespace coli::experts {
namespace {

ExpertCache make_cache(int n_experts, int top_k, int cap, std::vector<int> pins, std::size_t bytes = 64) {
  auto cache = ExpertCache::create({0, n_experts, top_k, cap, std::move(pins), bytes, 64});
  EXPECT_TRUE(cache.ok()) << cache.error().message;
  return std::move(cache).value();
}

// Runs one round, filling each load with its expert id; returns the plan.
RoundPlan run_round(ExpertCache& cache, std::vector<int> experts) {
  auto plan = cache.begin_round(experts);
  EXPECT_TRUE(plan.ok()) << plan.error().message;
  if (!plan.ok()) return {};
  for (const SlotLoad& load : plan->loads) std::memcpy(load.destination.data(), &load.expert, sizeof(int));
  cache.end_round();
  return *plan;
}

TEST(ExpertCache, RetiredSlotsAreNeverUsedAgainAndPinsStay) {
  auto created = ExpertCache::create({0, 16, 2, 8, {5}, 8192, 4096});  // page-aligned slots, as the engine's
  ASSERT_TRUE(created.ok()) << created.error().message;
  ExpertCache cache = std::move(created).value();
  run_round(cache, {0, 1, 2});
  run_round(cache, {3, 4});
  ASSERT_EQ(cache.evictable_slots(), 7);
  auto released = cache.retire_slots(4);
  ASSERT_TRUE(released.ok()) << released.error().message;
  EXPECT_EQ(*released, 4u * 8192) << "whole pages of four 8 KiB slots";
  EXPECT_EQ(cache.cap(), 4);
  EXPECT_EQ(cache.evictable_slots(), 3);
  EXPECT_TRUE(cache.is_pinned(5));
  // Empty slots go first, then the least recently used: 0, 1, 2 were evicted
  // only if empty slots ran out (2 empty of 7 evictable here).
  EXPECT_TRUE(cache.is_resident(3) && cache.is_resident(4));
  // Rounds keep working in the three slots left; four distinct misses do not fit.
  run_round(cache, {7, 8, 5});
  EXPECT_FALSE(cache.begin_round(std::vector<int>{9, 10, 11, 12}).ok());
  // Never below top_k evictable slots, never while a round is open.
  EXPECT_FALSE(cache.retire_slots(2).ok());
  ASSERT_TRUE(cache.begin_round(std::vector<int>{7}).ok());
  EXPECT_FALSE(cache.retire_slots(1).ok());
  cache.end_round();
  EXPECT_TRUE(cache.retire_slots(1).ok());
  EXPECT_EQ(cache.evictable_slots(), 2);
}

TEST(AlignedSlab, EverySlotStartsOnTheAlignment) {
  for (std::size_t alignment : {std::size_t{64}, std::size_t{4096}}) {
    auto slab = AlignedSlab::allocate(5, 1000, alignment);
    ASSERT_TRUE(slab.ok()) << slab.error().message;
    EXPECT_EQ(slab->slot_stride() % alignment, 0u);
    EXPECT_GE(slab->slot_stride(), 1000u);
    for (std::size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(slab->slot(i).data()) % alignment, 0u);
      EXPECT_EQ(slab->slot(i).size(), 1000u);
    }
  }
  EXPECT_FALSE(AlignedSlab::allocate(5, 1000, 48).ok());
  EXPECT_FALSE(AlignedSlab::allocate(0, 1000, 64).ok());
  EXPECT_FALSE(AlignedSlab::allocate(2, SIZE_MAX / 2, 64).ok());
}

TEST(RoundPlanner, RefusesShapesThatCannotWorkWithMessagesThatSayWhatToChange) {
  struct Case { CacheShape shape; const char* says; };
  const Case cases[] = {
      {{64, 2, 8, 8}, "pin at most 6"},    // pins == cap
      {{64, 2, 8, 9}, "pin at most 6"},    // pins > cap
      {{64, 4, 3, 0}, "raise cap to at least 4"},  // cap < top_k
      {{8, 2, 8, 9}, "more pins than experts"},
      {{8, 9, 8, 0}, "top_k cannot exceed n_experts"},
      {{0, 2, 8, 0}, "n_experts must be >= 1"},
      {{8, 2, 0, 0}, "cap must be >= 1"},
      {{8, 2, 4, -1}, "pins cannot be negative"},
  };
  for (const Case& c : cases) {
    auto valid = validate_cache_shape(c.shape);
    ASSERT_FALSE(valid.ok()) << c.says;
    EXPECT_NE(valid.error().message.find(c.says), std::string::npos) << valid.error().message;
  }
  const CacheShape shapes[] = {{64, 2, 8, 0}, {64, 2, 8, 7}};
  auto planner = RoundPlanner::create(shapes);
  ASSERT_FALSE(planner.ok());
  EXPECT_NE(planner.error().message.find("layer 1"), std::string::npos) << planner.error().message;
}

TEST(RoundPlanner, ClampsCapAboveExpertCountAndThenAnyRoundFits) {
  auto valid = validate_cache_shape({8, 2, 20, 8});  // every expert pinned: fine, nothing ever misses
  ASSERT_TRUE(valid.ok()) << valid.error().message;
  EXPECT_TRUE(valid->cap_clamped());
  EXPECT_EQ(valid->shape.cap, 8);
  const CacheShape shapes[] = {{8, 2, 20, 3}};
  EXPECT_EQ(RoundPlanner::create(shapes)->tokens_per_round(512), 512);
}

TEST(RoundPlanner, FieldFailureRoundIsShrunkToWhatTheEvictableSlotsHold) {
  // Field failure #1: cap 8, 6 pins, top_k 2, a prefill round of 4 tokens.
  const CacheShape shapes[] = {{64, 2, 8, 6}};
  auto planner = RoundPlanner::create(shapes);
  ASSERT_TRUE(planner.ok()) << planner.error().message;
  EXPECT_EQ(max_distinct_unpinned(shapes[0], 4), 8);  // > cap - pins = 2
  EXPECT_EQ(planner->tokens_per_round(4), 1);
  const std::string why = planner->explain_limit(4);
  for (const char* part : {"layer 0", "cap 8", "pins 6", "raise cap to 14"})
    EXPECT_NE(why.find(part), std::string::npos) << why;
  EXPECT_EQ(planner->split_prefill(4, 4), (std::vector<TokenRange>{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(planner->explain_limit(1), "");
}

TEST(RoundPlanner, TheTightestLayerSetsTheRoundAndSplitCoversThePrefill) {
  const CacheShape shapes[] = {{64, 2, 40, 0}, {64, 2, 16, 4}, {64, 2, 64, 10}};
  auto planner = RoundPlanner::create(shapes);
  ASSERT_TRUE(planner.ok());
  EXPECT_EQ(planner->tokens_per_round(100), 6);  // layer 1: (16 - 4) / 2
  EXPECT_EQ(planner->tokens_per_round(3), 3);
  EXPECT_NE(planner->explain_limit(100).find("layer 1"), std::string::npos);
  const auto rounds = planner->split_prefill(20, 100);
  EXPECT_EQ(rounds, (std::vector<TokenRange>{{0, 6}, {6, 12}, {12, 18}, {18, 20}}));
  EXPECT_TRUE(planner->split_prefill(0, 8).empty());
}

TEST(ExpertCache, EvictsTheLeastRecentlyUsedUnpinnedExpert) {
  ExpertCache cache = make_cache(16, 1, 3, {});
  for (int e : {0, 1, 2}) run_round(cache, {e});
  EXPECT_EQ(cache.lru_order(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(run_round(cache, {0}).hits, 1);
  EXPECT_EQ(cache.lru_order(), (std::vector<int>{1, 2, 0}));
  const RoundPlan plan = run_round(cache, {3});
  ASSERT_EQ(plan.loads.size(), 1u);
  EXPECT_FALSE(cache.is_resident(1));
  EXPECT_EQ(cache.lru_order(), (std::vector<int>{2, 0, 3}));
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 4u);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.stats().bytes_loaded, 4u * 64u);
}

TEST(ExpertCache, HitsAreLeasedBeforeAnyVictimIsChosen) {
  // 0 is least recently used. A round needing {9, 0}: a cache that picked a
  // victim for 9 before leasing 0 would recycle 0's slot (failure #1).
  ExpertCache cache = make_cache(16, 2, 3, {});
  for (int e : {0, 1, 2}) run_round(cache, {e});
  auto plan = cache.begin_round(std::vector<int>{9, 0});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->loads.size(), 1u);
  EXPECT_EQ(plan->loads[0].expert, 9);
  EXPECT_NE(cache.slot_of(9), cache.slot_of(0));
  EXPECT_TRUE(cache.is_resident(0));
  EXPECT_FALSE(cache.is_resident(1));  // the LRU among the *unleased* slots went
  cache.end_round();
  EXPECT_FALSE(cache.slot_of(0).has_value());  // slots are meaningful only while leased
}

TEST(ExpertCache, PinsAreNeverEvictedAndLoadOnceIntoTheirOwnSlots) {
  ExpertCache cache = make_cache(32, 2, 6, {5, 6});
  const RoundPlan warm = run_round(cache, {5, 6});
  ASSERT_EQ(warm.loads.size(), 2u);
  const int slot5 = warm.loads[0].slot, slot6 = warm.loads[1].slot;
  for (int round = 0; round < 200; ++round) {
    const RoundPlan plan = run_round(cache, {(round * 7) % 32, (round * 7 + 3) % 32});
    for (const SlotLoad& load : plan.loads) {
      EXPECT_NE(load.slot, slot5);
      EXPECT_NE(load.slot, slot6);
    }
    EXPECT_TRUE(cache.is_resident(5) && cache.is_resident(6));
  }
  EXPECT_TRUE(cache.is_pinned(5));
  EXPECT_FALSE(cache.is_pinned(7));
}

TEST(ExpertCache, FieldFailureRoundIsRefusedAndLeavesTheCacheUsable) {
  ExpertCache cache = make_cache(64, 2, 8, {0, 1, 2, 3, 4, 5});
  const std::vector<int> four_tokens = {10, 11, 12, 13, 14, 15, 16, 17};  // 8 distinct misses
  auto refused = cache.begin_round(four_tokens);
  ASSERT_FALSE(refused.ok());
  for (const char* part : {"8 distinct", "cap 8", "6 pinned", "RoundPlanner"})
    EXPECT_NE(refused.error().message.find(part), std::string::npos) << refused.error().message;
  EXPECT_FALSE(cache.in_round());
  // Rounds sized by the planner (one token: exactly top_k evictable) work,
  // including ones that mix pinned experts with misses.
  for (std::size_t t = 0; t < four_tokens.size(); t += 2) {
    const RoundPlan plan = run_round(cache, {four_tokens[t], four_tokens[t + 1]});
    EXPECT_EQ(plan.loads.size(), 2u);
    EXPECT_NE(plan.loads[0].slot, plan.loads[1].slot);
  }
  EXPECT_EQ(run_round(cache, {0, 16, 17, 3}).hits, 2);  // pins 0,3 not yet loaded; 16,17 resident
}

TEST(ExpertCache, RefusesMisuseWithoutChangingState) {
  EXPECT_FALSE(ExpertCache::create({0, 8, 2, 4, {1, 1}, 64, 64}).ok());
  EXPECT_FALSE(ExpertCache::create({0, 8, 2, 4, {9}, 64, 64}).ok());
  EXPECT_FALSE(ExpertCache::create({0, 8, 2, 4, {}, 0, 64}).ok());
  ExpertCache cache = make_cache(8, 2, 4, {});
  EXPECT_FALSE(cache.begin_round(std::vector<int>{1, 8}).ok());
  EXPECT_FALSE(cache.in_round());
  ASSERT_TRUE(cache.begin_round(std::vector<int>{1, 2}).ok());
  EXPECT_FALSE(cache.begin_round(std::vector<int>{3}).ok());
  cache.end_round();
  EXPECT_EQ(cache.stats().rounds, 1u);
}

TEST(ExpertCache, AbortedLoadsAreNeverServedLater) {
  ExpertCache cache = make_cache(16, 2, 4, {7});
  run_round(cache, {1});
  ASSERT_TRUE(cache.begin_round(std::vector<int>{1, 2, 7}).ok());
  cache.abort_round();
  EXPECT_TRUE(cache.is_resident(1));   // a hit: its bytes were valid before
  EXPECT_FALSE(cache.is_resident(2));  // half-filled: forgotten
  EXPECT_FALSE(cache.is_resident(7));  // pinned, still unloaded: loads next time
  EXPECT_EQ(run_round(cache, {2, 7}).loads.size(), 2u);
}

// Thousands of random rounds over random shapes within the invariant: a slot
// leased by a round is never handed to another expert in that round, every
// needed expert is resident with its own bytes while the round is open, and
// pins keep their slots. Oversized rounds are either served correctly or
// refused with the cache unchanged.
TEST(ExpertCache, RandomRoundsNeverRecycleALeasedSlot) {
  std::mt19937 rng(20240611);
  const auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int rounds_checked = 0, refused = 0;
  for (int shape_index = 0; shape_index < 300; ++shape_index) {
    const int n_experts = uniform(2, 48), top_k = uniform(1, std::min(6, n_experts));
    const int cap = uniform(top_k, n_experts + 2);
    const int max_pins = std::min(cap, n_experts) >= n_experts ? n_experts : std::min(cap, n_experts) - top_k;
    std::vector<int> ids(static_cast<std::size_t>(n_experts));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    const std::vector<int> pins(ids.begin(), ids.begin() + uniform(0, max_pins));
    ExpertCache cache = make_cache(n_experts, top_k, cap, pins, sizeof(int));
    const CacheShape shape{n_experts, top_k, cap, static_cast<int>(pins.size())};
    const int tokens_limit = RoundPlanner::create(std::span(&shape, 1))->tokens_per_round(64);
    std::vector<int> pinned_slot(static_cast<std::size_t>(n_experts), -1);

    for (int round = 0; round < 40; ++round) {
      const bool oversized = uniform(0, 9) == 0;
      const int tokens = oversized ? uniform(1, 64) : uniform(1, tokens_limit);
      std::vector<int> routed;  // top_k distinct experts per token, skewed to low ids for hits
      for (int t = 0; t < tokens; ++t) {
        std::vector<int> choice;
        while (static_cast<int>(choice.size()) < top_k) {
          const int e = std::min(uniform(0, n_experts - 1), uniform(0, n_experts - 1));
          if (std::find(choice.begin(), choice.end(), e) == choice.end()) choice.push_back(e);
        }
        routed.insert(routed.end(), choice.begin(), choice.end());
      }
      const std::vector<int> lru_before = cache.lru_order();
      auto plan = cache.begin_round(routed);
      if (!plan.ok()) {
        ASSERT_TRUE(oversized) << "a planner-sized round was refused: " << plan.error().message;
        EXPECT_EQ(cache.lru_order(), lru_before);
        ++refused;
        continue;
      }
      // Each distinct expert holds its own leased slot; loads only target
      // slots no other expert of the round holds.
      std::set<int> distinct(routed.begin(), routed.end()), slots;
      for (const int e : distinct) {
        const auto slot = cache.slot_of(e);
        ASSERT_TRUE(slot.has_value());
        ASSERT_TRUE(slots.insert(*slot).second) << "two experts share slot " << *slot;
        if (cache.is_pinned(e)) {
          if (pinned_slot[static_cast<std::size_t>(e)] < 0) pinned_slot[static_cast<std::size_t>(e)] = *slot;
          ASSERT_EQ(*slot, pinned_slot[static_cast<std::size_t>(e)]);
        }
      }
      ASSERT_EQ(plan->distinct, static_cast<int>(distinct.size()));
      ASSERT_EQ(plan->hits + static_cast<int>(plan->loads.size()), plan->distinct);
      for (const SlotLoad& load : plan->loads) {
        ASSERT_EQ(cache.slot_of(load.expert), load.slot);
        std::memcpy(load.destination.data(), &load.expert, sizeof(int));
      }
      // The guard that aborted the field process, as a test: every expert
      // the round needs is served with its own bytes.
      for (const int e : distinct) {
        int stored = -1;
        std::memcpy(&stored, cache.expert_data(e).data(), sizeof(int));
        ASSERT_EQ(stored, e) << "cache served expert " << stored << " for requested expert " << e;
      }
      if (uniform(0, 19) == 0) cache.abort_round();
      else cache.end_round();
      for (const int pin : pins) ASSERT_TRUE(cache.is_pinned(pin));
      ++rounds_checked;
    }
  }
  EXPECT_GT(rounds_checked, 10000);
  EXPECT_GT(refused, 0);  // the oversized rounds did exercise the refusal path
}

}  // namespace
}  // namespace coli::experts
