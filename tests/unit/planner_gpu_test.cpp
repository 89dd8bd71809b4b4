// The planner's GPU and thread choices on recorded machines: field note 3 (a
// 48 KiB GPU never gets the 64 KiB variant) and field note 2 (a 3-tier CPU
// gets 6 threads, not 2).
#include <gtest/gtest.h>

#include <filesystem>

#include "coli/base/files.h"
#include "coli/planner/deciders.h"
#include "coli/planner/variant_decider.h"
#include "coli/probe/probe.h"
#include "coli/probe/profile_io.h"
#include "planner_fixtures.h"

namespace coli::planner {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = COLI_FIXTURES_DIR;
const fs::path kProfiles = fs::path(COLI_FIXTURES_DIR) / ".." / ".." / "profiles";

model::ModelConfig qwen3() {
  auto footprint = read_footprint(kFixtures / "model-configs" / "Qwen3-30B-A3B.json", WeightFormat::q4_g64,
                                  DenseFormat::source);
  EXPECT_TRUE(footprint.ok()) << (footprint.ok() ? "" : footprint.error().message);
  return footprint->config;
}

// The H200 machine's profile with its GPUs replaced by a recorded device.
DeviceProfile with_gpus(const std::string& fixture) {
  DeviceProfile profile = h200();
  auto text = read_text_file(kFixtures / "gpus" / fixture / "gpus.toml");
  EXPECT_TRUE(text.ok());
  auto gpus = parse_gpu_record(*text, fixture);
  EXPECT_TRUE(gpus.ok()) << (gpus.ok() ? "" : gpus.error().message);
  profile.gpus = *gpus;
  profile.measurements.gpu_kernels.clear();  // measured on the H200, not on this device
  return profile;
}

TEST(PlannerGpu, EveryVariantFitsItsDeviceAndTile64kNeverRunsBelow64KiB) {
  for (const char* fixture : {"nvidia-h200", "quadro-p2000", "moltenvk-apple", "amd-rdna", "intel-uma", "lavapipe"}) {
    SCOPED_TRACE(fixture);
    const DeviceProfile profile = with_gpus(fixture);
    for (WeightFormat format : {WeightFormat::q4_g64, WeightFormat::q8_row}) {
      auto decision = decide_gpu(profile, qwen3(), format, "auto");
      ASSERT_TRUE(decision.ok()) << decision.error().message;
      ASSERT_TRUE(decision->gpu.chosen()) << decision->reason;
      const std::uint32_t limit = profile.gpus.vulkan.front().max_compute_shared_memory_bytes;
      ASSERT_EQ(decision->variants.size(), 2u);
      for (const VariantChoice& choice : decision->variants) {
        EXPECT_LE(choice.shared_memory_bytes, limit) << choice.variant;
        if (limit < 65536) {
          EXPECT_EQ(choice.variant.find("tile64k"), std::string::npos) << choice.reason;
        }
      }
    }
  }
}

TEST(PlannerGpu, MeasuredVariantsWinOnTheMachineThatMeasuredThem) {
  // The H200 profile carries its self-test: q4 direct beat shmem_x at expert shapes.
  auto decision = decide_gpu(h200(), qwen3(), WeightFormat::q4_g64, "0");
  ASSERT_TRUE(decision.ok()) << decision.error().message;
  EXPECT_EQ(decision->gpu.name, "NVIDIA H200");
  EXPECT_EQ(decision->gpu.index, 0);
  for (const VariantChoice& choice : decision->variants) {
    EXPECT_EQ(choice.variant, "gemv_q4_g64_direct") << choice.shape << ": " << choice.reason;
    EXPECT_NE(choice.reason.find("fastest measured"), std::string::npos) << choice.reason;
  }
}

TEST(PlannerGpu, NoneUnknownAndAbsentDevicesAreClear) {
  auto none = decide_gpu(h200(), qwen3(), WeightFormat::q4_g64, "none");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->gpu.chosen());
  auto unknown = decide_gpu(h200(), qwen3(), WeightFormat::q4_g64, "3");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("has 1 Vulkan device"), std::string::npos) << unknown.error().message;
  DeviceProfile cpu_only = h200();
  cpu_only.gpus = {};
  cpu_only.gpus.vulkan_status = "no Vulkan loader (libvulkan.so.1 not found)";
  auto automatic = decide_gpu(cpu_only, qwen3(), WeightFormat::q4_g64, "auto");
  ASSERT_TRUE(automatic.ok());
  EXPECT_FALSE(automatic->gpu.chosen());
  EXPECT_NE(automatic->reason.find("no Vulkan loader"), std::string::npos) << automatic->reason;
}

TEST(PlannerGpu, ForcedVariantIsCheckedAgainstTheDevice) {
  // Field note 3 as an override: the 64 KiB variant on a 48 KiB device is refused with both numbers.
  const DeviceProfile p2000 = with_gpus("quadro-p2000");
  auto refused = decide_gpu(p2000, qwen3(), WeightFormat::q4_g64, "0", "gemv_q4_g64_tile64k");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("65536"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("49152"), std::string::npos) << refused.error().message;
  auto forced = decide_gpu(p2000, qwen3(), WeightFormat::q4_g64, "0", "gemv_q4_g64_direct");
  ASSERT_TRUE(forced.ok()) << forced.error().message;
  for (const VariantChoice& choice : forced->variants) EXPECT_EQ(choice.variant, "gemv_q4_g64_direct");
  EXPECT_FALSE(decide_gpu(p2000, qwen3(), WeightFormat::q4_g64, "none", "gemv_q4_g64_direct").ok());
}

TEST(PlannerKernel, WidestVariantTheIsaAllowsAndOverridesChecked) {
  DeviceProfile profile = h200();
  auto chosen = decide_cpu_kernel(profile, "");
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->variant, "amx");  // the H200 machine's Xeon lists amx_tile and amx_int8
  EXPECT_NE(chosen->reason.find("AMX tile state"), std::string::npos) << chosen->reason;
  // Without the AMX flags, the VNNI variant.
  DeviceProfile no_amx = profile;
  std::erase_if(no_amx.cpu.isa, [](const std::string& flag) { return flag.rfind("amx", 0) == 0; });
  EXPECT_EQ(decide_cpu_kernel(no_amx, "")->variant, "avx512vnni");
  EXPECT_FALSE(decide_cpu_kernel(no_amx, "amx").ok());
  // A made-up AVX2-only CPU (no AVX-512 flags).
  std::erase_if(profile.cpu.isa, [](const std::string& flag) { return flag.rfind("avx512", 0) == 0; });
  chosen = decide_cpu_kernel(profile, "");
  ASSERT_TRUE(chosen.ok());
  EXPECT_EQ(chosen->variant, "avx2");
  auto refused = decide_cpu_kernel(profile, "avx512");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("avx512f"), std::string::npos) << refused.error().message;
  EXPECT_FALSE(decide_cpu_kernel(profile, "sse9").ok());
  EXPECT_EQ(decide_cpu_kernel(profile, "exact")->variant, "exact");
  // No SIMD flags at all (an ARM board): the scalar kernels.
  profile.cpu.isa = {"neon", "asimd"};
  EXPECT_EQ(decide_cpu_kernel(profile, "")->variant, "scalar");
}

TEST(PlannerThreads, ThreeTierCpuGetsSixThreadsNotTwo) {
  ProbeOptions options;
  options.quick = true;
  options.sysctl_file = kFixtures / "machines" / "apple-m-3tier" / "sysctl.txt";
  auto profile = run_probe(options);
  ASSERT_TRUE(profile.ok()) << profile.error().message;
  auto threads = decide_threads(*profile, std::nullopt);
  ASSERT_TRUE(threads.ok()) << threads.error().message;
  EXPECT_EQ(threads->threads, 6) << threads->reason;
}

}  // namespace
}  // namespace coli::planner
