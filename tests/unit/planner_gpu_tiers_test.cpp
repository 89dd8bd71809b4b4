// The VRAM tier (field note 4): a backend's host copies per VRAM slot are
// priced, and the plan fits the RAM headroom by shrinking the tier or is
// refused; experts are ranked for VRAM by the usage history; the plan file
// carries the tier; the Vulkan decoder's VRAM is its own layout; `auto`
// takes the GPU only when measurements say it is faster.
#include <gtest/gtest.h>

#include <algorithm>

#include "coli/experts/usage_history.h"
#include "coli/planner/plan.h"
#include "coli/planner/plan_io.h"
#include "coli/planner/speed.h"
#include "coli/probe/profile_io.h"
#include "planner_fixtures.h"

namespace coli::planner {
namespace {

constexpr std::uint64_t kGiB = 1ull << 30;

// Field note 4's CUDA path: a packed int4 mirror and an unpacked int8 copy per
// slot (~4.5 MB per expert instead of ~1.7 MB), as a made-up backend the
// engine could run that holds experts only (dense weights stay in RAM).
BackendMemory two_host_copies() {
  BackendMemory b = backend::vulkan_backend_memory({.kind = backend::BackendKind::vulkan, .name = "vulkan"});
  b.name = "two-copy";
  b.engine_runs_experts = true;
  b.whole_decoder = false;
  b.staging_slots = 2;
  b.host_copies = {{"packed int4 mirror", 1.0}, {"unpacked int8 copy", 1.65}};
  return b;
}

std::uint64_t sum_lines(const Plan& plan, const std::string& prefix) {
  std::uint64_t total = 0;
  for (const MemoryLine& l : plan.memory.lines) total += l.component.rfind(prefix, 0) == 0 ? l.bytes : 0;
  return total;
}

TEST(PlannerGpuTier, HostCopiesArePricedAndTheTierShrinksToFitTheRam) {
  const ModelFootprint fp = qwen3();
  PlanRequest request;
  request.gpu = "0";
  request.ram = 16 * kGiB;
  request.backend = two_host_copies();
  auto plan = make_plan(h200(), fp, request);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const int all = static_cast<int>(fp.moe_layer_count()) * fp.n_experts;
  // 6144 experts x 2.5 MB x 2.65 host copies = 40 GB: far past 16 GiB, so the tier shrinks.
  EXPECT_GT(plan->gpu.vram_slots(), 0);
  EXPECT_LT(plan->gpu.vram_slots(), all);
  EXPECT_NE(plan->gpu.reason.find("host copies"), std::string::npos) << plan->gpu.reason;
  const std::uint64_t copies = sum_lines(*plan, "GPU host copy");
  const auto expected = static_cast<std::uint64_t>(static_cast<double>(plan->gpu.vram_slots()) *
                                                   static_cast<double>(fp.expert().record_stride) * 2.65);
  EXPECT_NEAR(static_cast<double>(copies), static_cast<double>(expected), 2.0 * plan->gpu.vram_slots());
  EXPECT_LE(plan->planned_ram_bytes() + plan->margin.bytes, 16 * kGiB);
  // The same tier with one more slot would not fit: the tier is as large as the RAM allows.
  EXPECT_GT(plan->planned_ram_bytes() + plan->margin.bytes + fp.expert().record_stride * 3, 16 * kGiB - 400 * (1ull << 20));
}

TEST(PlannerGpuTier, VulkanDecoderHoldsEveryExpertAndTheDenseWeightsInVram) {
  const ModelFootprint fp = qwen3();
  PlanRequest request;
  request.gpu = "0";
  request.ram = 16 * kGiB;
  auto plan = make_plan(h200(), fp, request);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->gpu.vram_slots(), static_cast<int>(fp.moe_layer_count()) * fp.n_experts);
  EXPECT_TRUE(plan->gpu.engine_runs_it && plan->gpu.whole_decoder);
  EXPECT_EQ(sum_lines(*plan, "GPU host copy"), 0u);
  EXPECT_EQ(sum_lines(*plan, "expert cache"), 0u) << "no host expert cache when VRAM holds every expert";
  EXPECT_EQ(plan->memory.find("KV cache")->bytes, 0u);
  EXPECT_EQ(plan->memory.find("GPU KV cache")->bytes, fp.kv_bytes_per_position * static_cast<std::uint64_t>(plan->ctx));
  EXPECT_EQ(plan->memory.find("GPU dense weights")->bytes, fp.gpu_dense_bytes);
  EXPECT_EQ(plan->memory.find("dense weights")->bytes, fp.embedding_held_bytes) << "the host keeps the embedding only";
  EXPECT_LE(plan->memory.total(Tier::vram), plan->gpu.vram_headroom_bytes);
  EXPECT_NE(plan->memory.find("GPU driver (host)")->formula.find("NVIDIA"), std::string::npos)
      << "the H200's measured driver share, not the vendor-neutral assumption";
}

TEST(PlannerGpuTier, NothingFitsIsRefusedWithTheNumbers) {
  PlanRequest request;
  request.gpu = "0";
  request.ram = 3 * kGiB;  // below the dense weights alone
  request.backend = two_host_copies();
  auto plan = make_plan(h200(), qwen3(), request);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.error().message.find("does not fit"), std::string::npos) << plan.error().message;
}

TEST(PlannerGpuTier, VramOverrideIsCheckedAndLimitsTheTier) {
  const ModelFootprint fp = qwen3();
  PlanRequest request;
  request.gpu = "0";
  request.vram = 4 * kGiB;
  auto plan = make_plan(h200(), fp, request);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_LE(plan->memory.total(Tier::vram), 4 * kGiB);
  // Dense weights, KV cache, activations and the reserve first; experts fill the rest.
  const std::uint64_t fixed = plan->memory.total(Tier::vram) - plan->memory.find("expert tier: VRAM slots")->bytes;
  const auto expected = static_cast<int>((4 * kGiB - fixed) / fp.expert().record_stride);
  EXPECT_GT(expected, 0);
  EXPECT_NEAR(plan->gpu.vram_slots(), expected, 1);
  request.vram = 4096 * kGiB;
  auto refused = make_plan(h200(), fp, request);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("--vram"), std::string::npos) << refused.error().message;
  request.gpu = "none";
  request.vram = 4 * kGiB;
  EXPECT_FALSE(make_plan(h200(), fp, request).ok());
}

TEST(PlannerGpuTier, AutoTakesTheGpuOnlyWhenMeasuredFaster) {
  PlanRequest request;  // gpu = "auto"
  auto plan = make_plan(h200(), qwen3(), request);  // the H200's self-test streams far faster than its RAM
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->gpu.backend, "vulkan");
  EXPECT_GT(plan->gpu.vram_slots(), 0);
  DeviceProfile unmeasured = h200();
  unmeasured.measurements.gpu_kernels.clear();
  auto cpu = make_plan(unmeasured, qwen3(), request);
  ASSERT_TRUE(cpu.ok()) << cpu.error().message;
  EXPECT_EQ(cpu->gpu.backend, "cpu");
  EXPECT_EQ(cpu->gpu.vram_slots(), 0);
  EXPECT_NE(cpu->decision("gpu")->reason.find("no measured GPU speed"), std::string::npos) << cpu->decision("gpu")->reason;
  DeviceProfile slow_gpu = h200();
  for (GpuKernelResult& r : slow_gpu.measurements.gpu_kernels) r.gb_per_s = {1, 0.5, 0.5, 0.5, 0};
  auto slow = make_plan(slow_gpu, qwen3(), request);
  ASSERT_TRUE(slow.ok()) << slow.error().message;
  EXPECT_EQ(slow->gpu.backend, "cpu") << slow->decision("gpu")->reason;
}

TEST(PlannerGpuTier, HistoryRanksExpertsByReadsSoHotLayersGetMoreSlots) {
  const ModelFootprint fp = qwen3();
  const int layers = static_cast<int>(fp.moe_layer_count());
  auto history = experts::UsageHistory::create({layers, fp.n_experts, fp.top_k, "test"});
  ASSERT_TRUE(history.ok());
  // Layer 0 routes to 8 experts only; every other layer spreads over all 128.
  for (int token = 0; token < 512; ++token) {
    for (int l = 0; l < layers; ++l) {
      std::vector<int> chosen;
      for (int i = 0; i < 8; ++i) chosen.push_back(l == 0 ? i : (token * 8 + i) % fp.n_experts);
      ASSERT_TRUE(history->record(l, chosen).ok());
    }
  }
  history->add_tokens(512);
  PlanRequest request;
  request.gpu = "0";
  request.vram = 6 * kGiB;  // beside the dense weights and KV cache, room for a few hundred experts, not all
  request.history = &*history;
  auto plan = make_plan(h200(), fp, request);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_EQ(plan->gpu.vram_experts.size(), static_cast<std::size_t>(layers));
  // Layer 0's 8 experts carry all its reads: they go first; no more of layer 0 is worth a slot
  // than the uniform layers get.
  EXPECT_GE(plan->gpu.vram_experts[0], 8);
  EXPECT_GT(plan->gpu.vram_share, static_cast<double>(plan->gpu.vram_slots()) / (layers * fp.n_experts));
  // Uniform routing spreads the same slots evenly.
  request.history = nullptr;
  auto uniform = make_plan(h200(), fp, request);
  ASSERT_TRUE(uniform.ok());
  const auto [low, high] = std::minmax_element(uniform->gpu.vram_experts.begin(), uniform->gpu.vram_experts.end());
  EXPECT_LE(*high - *low, 1);
}

TEST(PlannerGpuTier, PlanFileCarriesTheTierAndRoundTrips) {
  PlanRequest request;
  request.gpu = "0";
  request.ram = 16 * kGiB;
  request.backend = two_host_copies();
  auto plan = make_plan(h200(), qwen3(), request);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  PlanFile file;
  file.profile_fingerprint = "fnv1a64:0000000000000001";
  file.model_identity = "fnv1a64:0000000000000002";
  file.top_k = 8;
  file.plan = *plan;
  file.speed = predict_speed(h200(), qwen3(), *plan);
  auto parsed = parse_plan(plan_to_toml(file), "p.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->plan.gpu.device, plan->gpu.device);
  EXPECT_EQ(parsed->plan.gpu.lines, plan->gpu.lines);
  EXPECT_EQ(parsed->plan.gpu.vram_experts, plan->gpu.vram_experts);
  EXPECT_EQ(parsed->plan.gpu, plan->gpu);
  EXPECT_EQ(parsed->plan.compute_pus, plan->compute_pus);
  // A hand edit that places experts beyond the recorded VRAM headroom is refused.
  std::string text = plan_to_toml(file);
  const std::string key = "vram_headroom_bytes = ";
  const auto at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  text.replace(at + key.size(), text.find('\n', at) - at - key.size(), "1");
  auto broken = parse_plan(text, "p.toml");
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.error().message.find("vram_headroom_bytes"), std::string::npos) << broken.error().message;
}

// Two identical recorded GPUs (the H200's record twice, as on a two-GPU host;
// the second has half the memory free): same name, told apart by index and UUID.
DeviceProfile two_identical_gpus() {
  DeviceProfile profile = h200();
  VulkanDevice second = profile.gpus.vulkan.at(0);
  second.uuid = "00000000000000000000000000000002";
  for (VulkanMemoryHeap& heap : second.heaps) {
    if (heap.budget_bytes) *heap.budget_bytes /= 2;
  }
  profile.gpus.vulkan.push_back(second);
  return profile;
}

Result<Plan> plan_on_gpu(const DeviceProfile& profile, const std::string& gpu) {
  PlanRequest request;
  request.gpu = gpu;
  return make_plan(profile, qwen3(), request);
}

PlanFile file_of(const DeviceProfile& profile, const Plan& plan) {
  PlanFile file;
  file.profile_fingerprint = profile.fingerprint;
  file.model_identity = "id";
  file.top_k = qwen3().top_k;
  file.plan = plan;
  file.speed = predict_speed(profile, qwen3(), file.plan);
  return file;
}

// The plan as a schema-2 writer wrote it: no GPU index, no UUID.
std::string without_gpu_identity(std::string text) {
  for (const std::string key : {"device_index = ", "device_uuid = "}) {
    const auto at = text.find("\n" + key);
    EXPECT_NE(at, std::string::npos) << key;
    if (at != std::string::npos) text.erase(at + 1, text.find('\n', at + 1) - at);
  }
  return text;
}

TEST(PlannerGpuIdentity, TwoIdenticalGpusAreTwoGpus) {
  const DeviceProfile profile = two_identical_gpus();
  ASSERT_EQ(profile.gpus.vulkan[0].name, profile.gpus.vulkan[1].name);
  auto first = plan_on_gpu(profile, "0");
  auto second = plan_on_gpu(profile, "1");
  ASSERT_TRUE(first.ok()) << first.error().message;
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_EQ(first->gpu.device.gpu.index, 0);
  EXPECT_EQ(first->gpu.device.gpu.uuid, profile.gpus.vulkan[0].uuid);
  EXPECT_EQ(second->gpu.device.gpu.index, 1);
  EXPECT_EQ(second->gpu.device.gpu.uuid, "00000000000000000000000000000002");
  // The tier is sized from the chosen GPU's memory, not from the last one of that name.
  EXPECT_LT(second->gpu.vram_headroom_bytes, first->gpu.vram_headroom_bytes);

  // The plan file records both, and reads them back.
  const std::string text = plan_to_toml(file_of(profile, *second));
  EXPECT_NE(text.find("device_index = 1\n"), std::string::npos);
  EXPECT_NE(text.find("device_uuid = '00000000000000000000000000000002'"), std::string::npos);
  auto back = parse_plan(text, "two.toml");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->plan.gpu.device.gpu, second->gpu.device.gpu);
}

TEST(PlannerGpuIdentity, FoundByUuidOrByIndexAndModelWhenExported) {
  const DeviceProfile profile = two_identical_gpus();
  const GpuIdentity second = vulkan_identity(profile.gpus, 1);
  EXPECT_EQ(find_gpu(profile.gpus, second), 1);
  // The same GPUs enumerated in the other order here: the UUID follows the device.
  GpuFacts swapped = profile.gpus;
  std::swap(swapped.vulkan[0], swapped.vulkan[1]);
  EXPECT_EQ(find_gpu(swapped, second), 0);
  // An exported profile has no UUIDs: index and model must agree.
  GpuIdentity exported = second;
  exported.uuid.clear();
  EXPECT_EQ(find_gpu(profile.gpus, exported), 1);
  GpuFacts no_uuids = profile.gpus;
  for (VulkanDevice& d : no_uuids.vulkan) d.uuid.clear();
  EXPECT_EQ(find_gpu(no_uuids, second), 1);
  exported.name = "Another GPU";
  EXPECT_FALSE(find_gpu(profile.gpus, exported).has_value());
  // A GPU this machine does not have (its UUID is unknown here).
  GpuIdentity elsewhere = second;
  elsewhere.uuid = "ffffffffffffffffffffffffffffffff";
  EXPECT_FALSE(find_gpu(profile.gpus, elsewhere).has_value());
}

TEST(PlannerGpuIdentity, ASchema2PlanWithAGpuIsRefusedWithReplan) {
  const DeviceProfile profile = two_identical_gpus();
  auto plan = plan_on_gpu(profile, "1");
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  auto old = parse_plan(without_gpu_identity(plan_to_toml(file_of(profile, *plan))), "old.toml");
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.error().message.find("old.toml"), std::string::npos) << old.error().message;
  EXPECT_NE(old.error().message.find("gpu.device_index"), std::string::npos) << old.error().message;
  EXPECT_NE(old.error().message.find("re-plan"), std::string::npos) << old.error().message;

  // A schema-2 plan without a GPU has nothing to tell apart: still read.
  auto cpu = plan_on_gpu(profile, "none");
  ASSERT_TRUE(cpu.ok()) << cpu.error().message;
  PlanFile cpu_file = file_of(profile, *cpu);
  cpu_file.schema_version = 2;
  auto cpu_back = parse_plan(without_gpu_identity(plan_to_toml(cpu_file)), "cpu.toml");
  ASSERT_TRUE(cpu_back.ok()) << cpu_back.error().message;
  EXPECT_FALSE(cpu_back->plan.gpu.device.gpu.chosen());
}

}  // namespace
}  // namespace coli::planner
