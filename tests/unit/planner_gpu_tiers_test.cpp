// The VRAM tier (field note 4): a backend's host copies per VRAM slot are
// priced, and the plan fits the RAM headroom by shrinking the tier or is
// refused; experts are ranked for VRAM by the usage history; the plan file
// carries the tier; `auto` never picks a backend the engine cannot run.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "coli/experts/usage_history.h"
#include "coli/planner/plan.h"
#include "coli/planner/plan_io.h"
#include "coli/planner/speed.h"
#include "coli/probe/profile_io.h"

namespace coli::planner {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = COLI_FIXTURES_DIR;
constexpr std::uint64_t kGiB = 1ull << 30;

ModelFootprint qwen3() {
  auto fp = read_footprint(kFixtures / "model-configs" / "Qwen3-30B-A3B.json", ExpertFormat::q4_g64, DenseFormat::source);
  EXPECT_TRUE(fp.ok()) << (fp.ok() ? "" : fp.error().message);
  return *fp;
}

DeviceProfile h200() {
  auto profile = load_profile(kFixtures / ".." / ".." / "profiles" / "h200-xeon-16c.toml");
  EXPECT_TRUE(profile.ok()) << (profile.ok() ? "" : profile.error().message);
  return *profile;
}

// Field note 4's CUDA path: a packed int4 mirror and an unpacked int8 copy per
// slot (~4.5 MB per expert instead of ~1.7 MB), as a made-up backend the
// engine could run.
BackendMemory two_host_copies() {
  BackendMemory b = backend::vulkan_backend_memory({.kind = backend::BackendKind::vulkan, .name = "vulkan"});
  b.name = "two-copy";
  b.engine_runs_experts = true;
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

TEST(PlannerGpuTier, PackedBackendHoldsEveryExpertWithoutHostCopies) {
  const ModelFootprint fp = qwen3();
  PlanRequest request;
  request.gpu = "0";
  request.ram = 16 * kGiB;
  auto plan = make_plan(h200(), fp, request);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->gpu.vram_slots(), static_cast<int>(fp.moe_layer_count()) * fp.n_experts);
  EXPECT_EQ(sum_lines(*plan, "GPU host copy"), 0u);
  EXPECT_EQ(plan->cap, fp.top_k) << "RAM slots beyond top_k serve nothing when VRAM holds every expert";
  EXPECT_LE(plan->memory.total(Tier::vram), plan->gpu.vram_headroom_bytes);
  EXPECT_FALSE(plan->gpu.engine_runs_it);
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
  const auto expected = static_cast<int>((4 * kGiB - plan->gpu.vram_reserve_bytes - 7 * (1ull << 20)) /
                                         fp.expert().record_stride);
  EXPECT_NEAR(plan->gpu.vram_slots(), expected, 1);
  request.vram = 4096 * kGiB;
  auto refused = make_plan(h200(), fp, request);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("--vram"), std::string::npos) << refused.error().message;
  request.gpu = "none";
  request.vram = 4 * kGiB;
  EXPECT_FALSE(make_plan(h200(), fp, request).ok());
}

TEST(PlannerGpuTier, AutoKeepsExpertsOnTheCpuWhileTheEngineCannotRunThem) {
  PlanRequest request;  // gpu = "auto"
  auto plan = make_plan(h200(), qwen3(), request);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->gpu.vram_slots(), 0);
  EXPECT_EQ(plan->gpu.backend, "cpu");
  ASSERT_NE(plan->decision("gpu"), nullptr);
  EXPECT_NE(plan->decision("gpu")->reason.find("CPU only"), std::string::npos) << plan->decision("gpu")->reason;
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
  request.vram = 2 * kGiB;  // room for a few hundred experts, not all
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

}  // namespace
}  // namespace coli::planner
