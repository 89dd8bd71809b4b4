// The expert cache split in two: the slot policy (which expert is where) on
// its own, the host slab storage (bytes, and pages given back on retire),
// and the two joined by ExpertCache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "coli/experts/expert_cache.h"
#include "coli/experts/slot_policy.h"
#include "coli/experts/slot_storage.h"

namespace coli::experts {
namespace {

SlotPolicy make_policy(int n_experts, int top_k, int cap, std::vector<int> pins, std::size_t bytes) {
  auto policy = SlotPolicy::create({0, n_experts, top_k, cap, std::move(pins), bytes, 4096});
  EXPECT_TRUE(policy.ok()) << policy.error().message;
  return std::move(policy).value();
}

TEST(SlotPolicy, PlansSlotsWithoutAnyBytes) {
  SlotPolicy policy = make_policy(8, 2, 4, {6}, 8192);
  auto plan = policy.begin_round(std::vector<int>{1, 6, 1, 2});
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->distinct, 3);
  ASSERT_EQ(plan->loads.size(), 3u);  // the pin's first use is a load too
  for (const SlotLoad& load : plan->loads) {
    EXPECT_TRUE(load.destination.empty()) << "the policy hands out slots, never bytes";
    EXPECT_EQ(policy.slot_of(load.expert), load.slot);
  }
  EXPECT_EQ(policy.slot_of(6), 0) << "pins own the first slots";
  policy.end_round();
  EXPECT_EQ(policy.stats().bytes_loaded, 3u * 8192);
  EXPECT_TRUE(policy.is_resident(1) && policy.is_resident(2) && policy.is_resident(6));
}

TEST(SlotPolicy, RetiredSlotsAreNeverHandedOutAgain) {
  SlotPolicy policy = make_policy(16, 2, 6, {}, 4096);
  ASSERT_TRUE(policy.begin_round(std::vector<int>{0, 1}).ok());
  policy.end_round();
  auto retired = policy.retire_slots(3);
  ASSERT_TRUE(retired.ok()) << retired.error().message;
  ASSERT_EQ(retired->size(), 3u);
  EXPECT_EQ(policy.cap(), 3);
  for (int round = 0; round < 20; ++round) {
    const std::vector<int> experts{2 * round % 16, (2 * round + 1) % 16};
    auto plan = policy.begin_round(experts);
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    for (const SlotLoad& load : plan->loads) {
      EXPECT_EQ(std::count(retired->begin(), retired->end(), load.slot), 0) << "slot " << load.slot << " was retired";
    }
    policy.end_round();
  }
}

TEST(HostSlabStorage, RetireGivesThePagesBack) {
  auto created = HostSlabStorage::create(4, 3 * 4096, 4096);
  ASSERT_TRUE(created.ok()) << created.error().message;
  HostSlabStorage& storage = **created;
  EXPECT_EQ(storage.bytes_held(), 4u * 3 * 4096);
  for (std::size_t slot = 0; slot < 4; ++slot) std::memset(storage.host_slot(slot).data(), 0xab, storage.slot_bytes());
  EXPECT_EQ(storage.retire(2), 3u * 4096);
  EXPECT_EQ(storage.retire(2), 0u) << "a slot is given back once";
  EXPECT_EQ(storage.bytes_held(), 3u * 3 * 4096);
  // MADV_DONTNEED drops private anonymous pages: they read back as zeros.
  const auto retired = storage.host_slot(2);
  EXPECT_TRUE(std::all_of(retired.begin(), retired.end(), [](std::byte b) { return b == std::byte{0}; }));
  const auto kept = storage.host_slot(1);
  EXPECT_TRUE(std::all_of(kept.begin(), kept.end(), [](std::byte b) { return b == std::byte{0xab}; }));
}

TEST(ExpertCache, JoinsAPolicyWithStorageThatFitsIt) {
  auto small = HostSlabStorage::create(2, 8192, 4096);
  ASSERT_TRUE(small.ok());
  auto refused = ExpertCache::create(make_policy(8, 2, 4, {}, 8192), std::move(*small));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("holds 2 slots but the cache has 4"), std::string::npos);
  auto narrow = HostSlabStorage::create(4, 4096, 4096);
  ASSERT_TRUE(narrow.ok());
  EXPECT_FALSE(ExpertCache::create(make_policy(8, 2, 4, {}, 8192), std::move(*narrow)).ok());

  auto storage = HostSlabStorage::create(4, 8192, 4096);
  ASSERT_TRUE(storage.ok());
  auto cache = ExpertCache::create(make_policy(8, 2, 4, {}, 8192), std::move(*storage));
  ASSERT_TRUE(cache.ok()) << cache.error().message;
  auto plan = cache->begin_round(std::vector<int>{3, 5});
  ASSERT_TRUE(plan.ok());
  for (const SlotLoad& load : plan->loads) {
    ASSERT_EQ(load.destination.size(), 8192u);
    std::memcpy(load.destination.data(), &load.expert, sizeof(int));
  }
  int stored = -1;
  std::memcpy(&stored, cache->expert_data(5).data(), sizeof(int));
  EXPECT_EQ(stored, 5);
  cache->end_round();
  auto released = cache->retire_slots(2);
  ASSERT_TRUE(released.ok()) << released.error().message;
  EXPECT_EQ(*released, 2u * 8192);
  EXPECT_EQ(cache->storage().bytes_held(), 2u * 8192);
}

}  // namespace
}  // namespace coli::experts
