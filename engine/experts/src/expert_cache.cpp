#include "coli/experts/expert_cache.h"

#include <string>
#include <utility>

namespace coli::experts {

Result<ExpertCache> ExpertCache::create(const ExpertCacheConfig& config) {
  auto policy = SlotPolicy::create(config);
  if (!policy) return policy.error();
  auto storage = HostSlabStorage::create(static_cast<std::size_t>(policy->cap()), config.expert_bytes, config.alignment);
  if (!storage) return make_error("layer " + std::to_string(config.layer) + " " + storage.error().message);
  return ExpertCache(std::move(*policy), std::move(*storage));
}

Result<ExpertCache> ExpertCache::create(SlotPolicy policy, std::unique_ptr<SlotStorage> storage) {
  const std::string where = "layer " + std::to_string(policy.layer()) + " expert cache: ";
  if (!storage) return make_error(where + "no slot storage");
  if (storage->slot_count() < static_cast<std::size_t>(policy.cap())) {
    return make_error(where + "the storage holds " + std::to_string(storage->slot_count()) + " slots but the cache has " +
                      std::to_string(policy.cap()));
  }
  if (storage->slot_bytes() < policy.expert_bytes()) {
    return make_error(where + "storage slots of " + std::to_string(storage->slot_bytes()) +
                      " bytes cannot hold an expert of " + std::to_string(policy.expert_bytes()));
  }
  return ExpertCache(std::move(policy), std::move(storage));
}

ExpertCache::ExpertCache(SlotPolicy policy, std::unique_ptr<SlotStorage> storage)
    : policy_(std::move(policy)), storage_(std::move(storage)) {}

Result<RoundPlan> ExpertCache::begin_round(std::span<const int> experts_needed) {
  auto plan = policy_.begin_round(experts_needed);
  if (!plan) return plan;
  for (SlotLoad& load : plan->loads) load.destination = storage_->host_slot(static_cast<std::size_t>(load.slot));
  return plan;
}

Result<std::uint64_t> ExpertCache::retire_slots(int count) {
  auto slots = policy_.retire_slots(count);
  if (!slots) return slots.error();
  std::uint64_t released = 0;
  for (const int slot : *slots) released += storage_->retire(static_cast<std::size_t>(slot));
  return released;
}

std::span<const std::byte> ExpertCache::expert_data(int expert) const {
  const auto slot = policy_.slot_of(expert);
  if (!slot) return {};
  return std::as_const(*storage_).host_slot(static_cast<std::size_t>(*slot));
}

}  // namespace coli::experts
