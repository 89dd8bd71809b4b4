// The whole decoder on a Vulkan device (lavapipe in CI) against the
// transformers references and the CPU engine: the four architectures, f32
// experts to 1e-4 with the same 32 greedy tokens, int8/int4 experts against
// transformers on the de-quantised weights, one prefill call in chunks,
// hybrid plans (half the experts computed on the CPU), a device whose shared
// memory is pretended down to 16 KiB, and int8/int4 dense projections against
// the CPU engine's exact path. Without a Vulkan device the
// tests skip, unless COLI_REQUIRE_VULKAN=1 (CI sets it) makes that a failure.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "engine_test_support.h"
#include "vulkan/compute_context.h"

namespace coli {
namespace {

// Skips (or fails under COLI_REQUIRE_VULKAN=1) when no Vulkan device exists.
bool vulkan_device_present(std::string& why) {
  auto listing = vulkan::list_vulkan_devices();
  if (!listing) why = "no Vulkan: " + listing.error().message;
  else if (listing->devices.empty()) why = "no Vulkan device behind " + listing->loader;
  return listing && !listing->devices.empty();
}

#define REQUIRE_VULKAN()                                                          \
  do {                                                                            \
    std::string why;                                                              \
    if (!vulkan_device_present(why)) {                                            \
      const char* required = std::getenv("COLI_REQUIRE_VULKAN");                  \
      if (required && std::string(required) == "1") FAIL() << why;                \
      GTEST_SKIP() << why;                                                        \
    }                                                                             \
  } while (0)

runtime::ModelOptions gpu_options() {
  runtime::ModelOptions options;
  options.backend = "vulkan";
  options.cpu_kernel = "exact";  // hybrid layers compute f32 activations on the CPU, as the GPU does
  return options;
}

class VulkanEngine : public testing::TestWithParam<std::string> {
 protected:
  fs::path dir() const { return fs::path(COLI_FIXTURES_DIR) / "models" / GetParam(); }
};

TEST_P(VulkanEngine, F32MatchesTransformersAndTheCpuEngine) {
  REQUIRE_VULKAN();
  const Reference ref = load_reference(dir(), "reference");
  const fs::path container = converted_fixture(GetParam(), WeightFormat::f32);
  const EngineRun gpu = run_model(container, gpu_options(), ref);
  const EngineRun cpu = run_model(container, {}, ref);
  ASSERT_EQ(gpu.prompt_logits.size(), ref.prompt.size());
  for (std::size_t i = 0; i < ref.prompt.size(); ++i) {
    const std::span<const float> expected(ref.logits.data() + i * ref.vocab, ref.vocab);
    EXPECT_LT(max_relative_error(gpu.prompt_logits[i], expected), 1e-4) << "prompt position " << i;
  }
  EXPECT_LT(gpu.worst_generated_error, 1e-4);
  EXPECT_EQ(gpu.tokens, ref.generated);
  EXPECT_EQ(gpu.tokens, cpu.tokens);
}

TEST_P(VulkanEngine, QuantisedExpertsMatchTransformersOnDequantisedWeights) {
  REQUIRE_VULKAN();
  for (const auto& [format, name] : kQuantisedReferences) {
    SCOPED_TRACE(name);
    const Reference ref = load_reference(dir(), name);
    const EngineRun run = run_model(converted_fixture(GetParam(), format), gpu_options(), ref);
    EXPECT_LT(run.worst_generated_error, 1e-4);
    EXPECT_EQ(run.tokens, ref.generated);
  }
}

TEST_P(VulkanEngine, OnePrefillCallInChunksGivesTheSameTokens) {
  REQUIRE_VULKAN();
  const Reference ref = load_reference(dir(), "reference");
  runtime::ModelOptions options = gpu_options();
  options.gpu_batch_tokens = 5;  // 12 prompt tokens: chunks of 5, 5 and 2 (batched and single-token kernels)
  const EngineRun run = run_model(converted_fixture(GetParam(), WeightFormat::f32), options, ref, true);
  ASSERT_EQ(run.prompt_logits.size(), 1u);
  const std::span<const float> expected(ref.logits.data() + (ref.prompt.size() - 1) * ref.vocab, ref.vocab);
  EXPECT_LT(max_relative_error(run.prompt_logits[0], expected), 1e-4);
  EXPECT_EQ(run.tokens, ref.generated);
}

TEST_P(VulkanEngine, HybridPlansComputeTheOtherExpertsOnTheCpu) {
  REQUIRE_VULKAN();
  const Reference ref = load_reference(dir(), "reference");
  const fs::path container = converted_fixture(GetParam(), WeightFormat::f32);
  runtime::ModelOptions options = gpu_options();
  options.vram_experts = {{0, 2, 4, 6}, {7, 1}};  // 2 MoE layers of 8 experts: half, then a quarter in VRAM
  options.cache_capacity = 4;                     // the CPU's share streams through a small cache
  options.prefill_round_tokens = 2;
  const EngineRun run = run_model(container, options, ref, true);
  EXPECT_LT(run.worst_generated_error, 1e-4);
  EXPECT_EQ(run.tokens, ref.generated);
}

TEST_P(VulkanEngine, SixteenKibOfSharedMemoryGivesTheSameTokens) {
  REQUIRE_VULKAN();
  const Reference ref = load_reference(dir(), "reference_q4");
  runtime::ModelOptions options = gpu_options();
  options.gpu_shared_memory_limit = 16 * 1024;
  const EngineRun run = run_model(converted_fixture(GetParam(), WeightFormat::q4_g64), options, ref, true);
  EXPECT_EQ(run.tokens, ref.generated);
}

// Quantised dense projections (attention, lm_head; coli convert --dense): the
// GPU's q8_row and q4_g64 matvecs against the CPU engine's exact path, which
// computes the same f32 activations on the de-quantised weights.
TEST_P(VulkanEngine, QuantisedDenseWeightsMatchTheCpuExactPath) {
  REQUIRE_VULKAN();
  const Reference ref = load_reference(dir(), "reference_q8");
  for (DenseFormat dense : {DenseFormat::q8_row, DenseFormat::q4_g64}) {
    SCOPED_TRACE(std::string(dense_format_name(dense)));
    const fs::path container = scratch_dir() / (GetParam() + "_dense_" + std::string(dense_format_name(dense)) + ".coli");
    auto report = convert::convert_model(dir(), container, WeightFormat::q8_row, dense);
    ASSERT_TRUE(report.ok()) << report.error().message;
    runtime::ModelOptions cpu = f32_kv_options();  // the GPU decoder keeps f32 KV
    cpu.cpu_kernel = "exact";
    const EngineRun expected = run_model(container, cpu, ref);
    const EngineRun gpu = run_model(container, gpu_options(), ref);
    ASSERT_EQ(gpu.prompt_logits.size(), expected.prompt_logits.size());
    for (std::size_t i = 0; i < gpu.prompt_logits.size(); ++i) {
      EXPECT_LT(max_relative_error(gpu.prompt_logits[i], expected.prompt_logits[i]), 1e-4) << "prompt position " << i;
    }
    EXPECT_EQ(gpu.tokens, expected.tokens);
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, VulkanEngine, testing::Values("qwen3_moe", "olmoe", "mixtral", "qwen2_moe"));

}  // namespace
}  // namespace coli
