// The Vulkan GEMV path against the CPU reference, on whatever Vulkan device
// exists (lavapipe in CI). Shapes are small so the suite stays well under a
// minute on two CPU cores.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <string>

#include "coli/shaders/selection.h"
#include "vulkan/compute_context.h"
#include "vulkan/compute_pipeline.h"
#include "vulkan/gemv_check.h"
#include "vulkan/gemv_runner.h"
#include "vulkan/gpu_selftest.h"

namespace coli::vulkan {
namespace {


constexpr std::uint32_t k16KiB = 16 * 1024;

// The quantised matrix and x of one test case, and the check of a GPU result.
struct Case {
  WeightFormat format;
  kernels::Q8RowMatrix q8;
  kernels::Q4G64Matrix q4;
  std::vector<float> x;

  Case(WeightFormat f, int rows, int cols) : format(f), x(random_values(static_cast<std::size_t>(cols), 99)) {
    const std::vector<float> matrix = random_values(static_cast<std::size_t>(rows) * cols, 1000u + rows * 31u + cols);
    if (format == WeightFormat::q8_row) q8 = kernels::quantize_q8_row(matrix, rows, cols);
    if (format == WeightFormat::q4_g64) q4 = kernels::quantize_q4_g64(matrix, rows, cols);
  }
  GemvWeights weights() const { return format == WeightFormat::q8_row ? gemv_weights(q8) : gemv_weights(q4); }
  shaders::GemvShape shape() const {
    const GemvWeights w = weights();
    return {format, static_cast<std::uint32_t>(w.rows), static_cast<std::uint32_t>(w.cols)};
  }
  GemvComparison compare(std::span<const float> y) const {
    return format == WeightFormat::q8_row ? compare_with_reference(q8, x, y) : compare_with_reference(q4, x, y);
  }
};

std::string describe(const Case& c, std::string_view variant, const shaders::GemvSpec& spec) {
  const GemvWeights w = c.weights();
  return std::string(variant) + " " + std::to_string(w.rows) + "x" + std::to_string(w.cols) + " WG=" +
         std::to_string(spec.workgroup_size) + " RPW=" + std::to_string(spec.rows_per_workgroup) +
         " X_TILE=" + std::to_string(spec.x_tile);
}

// Runs `variant` with `spec` and expects the reference's result.
void expect_matches(ComputeContext& context, const Case& c, const shaders::ShaderVariant& variant,
                    const shaders::GemvSpec& spec) {
  SCOPED_TRACE(describe(c, variant.name, spec));
  auto runner = GemvRunner::create(context, c.weights(), variant, spec);
  ASSERT_TRUE(runner) << runner.error().message;
  auto y = (*runner)->run(c.x);
  ASSERT_TRUE(y) << y.error().message;
  const GemvComparison comparison = c.compare(*y);
  EXPECT_TRUE(comparison.passed) << "error " << comparison.max_relative_error << " > " << comparison.tolerance
                                 << " at row " << comparison.worst_row;
}

class VulkanGemvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto listing = list_vulkan_devices();
    if (!listing) GTEST_SKIP() << "no Vulkan: " << listing.error().message;
    if (listing->devices.empty()) GTEST_SKIP() << "no Vulkan device behind " << listing->loader;
  }
  static std::unique_ptr<ComputeContext> make_context(std::uint32_t limit = 0, bool staging = false) {
    auto context = ComputeContext::create({.device_index = 0, .shared_memory_limit_bytes = limit,
                                           .force_staging = staging});
    EXPECT_TRUE(context) << context.error().message;
    return context ? std::move(*context) : nullptr;
  }
};

TEST_F(VulkanGemvTest, EveryFittingVariantMatchesTheReference) {
  auto context = make_context();
  ASSERT_TRUE(context);
  // Rows not a multiple of any workgroup's rows; cols not a multiple of the
  // tile (the selector's X_TILE is the largest power of two <= cols), q8 rows
  // starting mid-word (odd cols), and a single-tile / single-group case.
  const Case cases[] = {{WeightFormat::q8_row, 37, 1000}, {WeightFormat::q8_row, 129, 1001},
                        {WeightFormat::q8_row, 16, 64},   {WeightFormat::q8_row, 5, 4160},
                        {WeightFormat::q4_g64, 37, 960},  {WeightFormat::q4_g64, 129, 2048},
                        {WeightFormat::q4_g64, 16, 64},   {WeightFormat::q4_g64, 5, 4160}};
  for (const Case& c : cases) {
    int ran = 0;
    for (const shaders::ShaderVariant& variant : shaders::gemv_catalogue()) {
      if (variant.format != c.format) continue;
      auto fitted = shaders::select_gemv_variant(context->facts(), c.shape(), {.force_variant = std::string(variant.name)});
      if (!fitted) {
        EXPECT_NE(fitted.error().message.find("B"), std::string::npos) << fitted.error().message;
        continue;
      }
      expect_matches(*context, c, variant, fitted->spec);
      ++ran;
    }
    EXPECT_GE(ran, 1) << "no variant fits " << context->facts().name;
  }
}

TEST_F(VulkanGemvTest, SmallTilesAndOtherRowSplitsStillMatch) {
  auto context = make_context();
  ASSERT_TRUE(context);
  const Case q8(WeightFormat::q8_row, 37, 1000);  // 1000 = 15 tiles of 64 + 40
  const Case q4(WeightFormat::q4_g64, 37, 960);   // 960 = 3 tiles of 256 + 192
  for (const Case* c : {&q8, &q4}) {
    const char* shmem = c->format == WeightFormat::q8_row ? "gemv_q8_row_shmem_x" : "gemv_q4_g64_shmem_x";
    const char* direct = c->format == WeightFormat::q8_row ? "gemv_q8_row_direct" : "gemv_q4_g64_direct";
    for (std::uint32_t tile : {64u, 256u}) {
      expect_matches(*context, *c, *shaders::find_variant(shmem), {.workgroup_size = 128, .rows_per_workgroup = 8, .x_tile = tile});
      expect_matches(*context, *c, *shaders::find_variant(shmem), {.workgroup_size = 64, .rows_per_workgroup = 2, .x_tile = tile});
    }
    const std::uint32_t subgroup = std::max<std::uint32_t>(context->facts().max_subgroup_size, 1);
    for (std::uint32_t rows_per_group : {1u, 3u, 16u}) {
      expect_matches(*context, *c, *shaders::find_variant(direct),
                     {.workgroup_size = std::max<std::uint32_t>(64, subgroup), .rows_per_workgroup = rows_per_group});
    }
  }
}

TEST_F(VulkanGemvTest, PretendedSmallLimitChangesTheChoiceAndStillMatches) {
  auto real = make_context();
  auto small = make_context(k16KiB);
  ASSERT_TRUE(real && small);
  if (real->real_shared_memory_bytes() < 32 * 1024) GTEST_SKIP() << "the device itself has under 32 KiB";
  EXPECT_EQ(small->facts().max_compute_shared_memory_bytes, k16KiB);
  EXPECT_TRUE(small->shared_memory_pretended());
  for (WeightFormat format : {WeightFormat::q8_row, WeightFormat::q4_g64}) {
    const Case c(format, 33, 4160);  // wide enough that a 4096-float tile is wanted
    auto on_real = shaders::select_gemv_variant(real->facts(), c.shape());
    auto on_small = shaders::select_gemv_variant(small->facts(), c.shape());
    ASSERT_TRUE(on_real && on_small);
    EXPECT_LE(on_small->shared_memory_bytes, k16KiB);
    EXPECT_GT(on_real->shared_memory_bytes, k16KiB) << on_real->reason;
    EXPECT_TRUE(on_real->variant != on_small->variant || !(on_real->spec == on_small->spec))
        << on_real->reason << " vs " << on_small->reason;
    expect_matches(*small, c, *on_small->variant, on_small->spec);
  }
}

TEST_F(VulkanGemvTest, OversizedSharedMemoryIsRefusedBeforePipelineCreation) {
  auto small = make_context(k16KiB);
  ASSERT_TRUE(small);
  const Case c(WeightFormat::q8_row, 8, 4096);
  const shaders::ShaderVariant& shmem = *shaders::find_variant("gemv_q8_row_shmem_x");
  // 4096 + 128 floats = 16896 B: the real device (lavapipe: 32 KiB) would take
  // it, so only our check can refuse it.
  const shaders::GemvSpec spec{.workgroup_size = 128, .rows_per_workgroup = 8, .x_tile = 4096};
  auto runner = GemvRunner::create(*small, c.weights(), shmem, spec);
  ASSERT_FALSE(runner);
  EXPECT_NE(runner.error().message.find("refusing"), std::string::npos) << runner.error().message;
  EXPECT_NE(runner.error().message.find("16896"), std::string::npos) << runner.error().message;
  EXPECT_NE(runner.error().message.find("16384"), std::string::npos) << runner.error().message;

  PipelineDesc desc{.name = "oversized", .spirv = shmem.spirv, .storage_buffers = 4, .shared_memory_bytes = 16896};
  auto pipeline = ComputePipeline::create(*small, desc);
  ASSERT_FALSE(pipeline);
  EXPECT_NE(pipeline.error().message.find("16896 bytes of shared memory"), std::string::npos)
      << pipeline.error().message;

  // Against the device's own limit: the 64 KiB tile variant, where it does not fit.
  auto real = make_context();
  ASSERT_TRUE(real);
  if (real->real_shared_memory_bytes() < 65536) {
    const shaders::ShaderVariant& tile64k = *shaders::find_variant("gemv_q8_row_tile64k");
    auto refused = GemvRunner::create(*real, c.weights(), tile64k, tile64k.defaults);
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message.find("65536"), std::string::npos) << refused.error().message;
  }
}

TEST_F(VulkanGemvTest, StagingUploadsMatchToo) {
  auto context = make_context(0, /*staging=*/true);
  ASSERT_TRUE(context);
  EXPECT_TRUE(context->uses_staging());
  for (WeightFormat format : {WeightFormat::q8_row, WeightFormat::q4_g64}) {
    const Case c(format, 70, 1088);
    auto chosen = shaders::select_gemv_variant(context->facts(), c.shape());
    ASSERT_TRUE(chosen) << chosen.error().message;
    expect_matches(*context, c, *chosen->variant, chosen->spec);
  }
}

TEST_F(VulkanGemvTest, TimingReturnsBandwidthSamples) {
  auto context = make_context();
  ASSERT_TRUE(context);
  const Case c(WeightFormat::q4_g64, 64, 512);
  auto chosen = shaders::select_gemv_variant(context->facts(), c.shape());
  ASSERT_TRUE(chosen);
  GemvTimingOptions timing{.samples = 3, .target_sample_seconds = 0.002, .max_dispatches = 20,
                           .min_weight_footprint_bytes = 100000};
  const int copies = weight_copies_for(c.weights(), timing);
  EXPECT_GT(copies, 1);
  auto runner = GemvRunner::create(*context, c.weights(), *chosen->variant, chosen->spec, copies);
  ASSERT_TRUE(runner) << runner.error().message;
  auto stats = (*runner)->measure(timing);
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->samples, 3);
  EXPECT_GT(stats->median, 0);
  EXPECT_GE(stats->best, stats->median);
  EXPECT_LE(stats->worst, stats->median);
}

TEST_F(VulkanGemvTest, SelftestRunsEveryVariantOrSaysWhyNot) {
  SelftestOptions options;
  options.device_index = 0;
  options.shapes = {{40, 1024}, {72, 512}};
  options.timing = {.samples = 2, .target_sample_seconds = 0.002, .max_dispatches = 10};
  const std::vector<GpuKernelResult> results = run_gpu_selftest(options);
  std::set<std::string> chosen;  // "rows x cols format" with a chosen variant
  EXPECT_EQ(results.size(), options.shapes.size() * shaders::gemv_catalogue().size()) << format_selftest_table(results);
  for (const GpuKernelResult& r : results) {
    SCOPED_TRACE(r.variant + " " + std::to_string(r.rows) + "x" + std::to_string(r.cols) + ": " + r.note);
    ASSERT_FALSE(r.variant.empty());
    EXPECT_EQ(r.backend, "vulkan");
    if (r.note.rfind("skipped: ", 0) == 0) {
      EXPECT_FALSE(r.passed);
      EXPECT_EQ(r.gb_per_s.samples, 0);
      EXPECT_GT(r.shared_memory_bytes, 0u);  // on lavapipe only the 64 KiB variant is skipped
      continue;
    }
    EXPECT_TRUE(r.passed);
    EXPECT_LE(r.max_relative_error, gemv_tolerance(r.cols));
    EXPECT_EQ(r.gb_per_s.samples, 2);
    EXPECT_GT(r.gb_per_s.median, 0);
    if (r.note.rfind("chosen: ", 0) == 0) {
      EXPECT_TRUE(chosen.insert(std::to_string(r.rows) + "x" + std::to_string(r.cols) + r.variant.substr(0, 11)).second);
    }
  }
  EXPECT_EQ(chosen.size(), options.shapes.size() * 2) << format_selftest_table(results);
  EXPECT_NE(format_selftest_table(results).find("gemv_q4_g64_shmem_x"), std::string::npos);
}

TEST_F(VulkanGemvTest, DeviceIndexOutOfRangeIsAnError) {
  auto context = ComputeContext::create({.device_index = 99});
  ASSERT_FALSE(context);
  EXPECT_NE(context.error().message.find("no Vulkan device 99"), std::string::npos) << context.error().message;
}

// Sets an environment variable for one scope and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(VulkanWithoutLoader, EverythingSaysNoVulkan) {
  ScopedEnv env("COLI_VULKAN_LIBRARY", "/nonexistent/libvulkan.so.1");
  auto listing = list_vulkan_devices();
  ASSERT_FALSE(listing);
  EXPECT_NE(listing.error().message.find("no Vulkan"), std::string::npos) << listing.error().message;
  auto context = ComputeContext::create({});
  ASSERT_FALSE(context);
  EXPECT_NE(context.error().message.find("no Vulkan"), std::string::npos) << context.error().message;
  const std::vector<GpuKernelResult> results = run_gpu_selftest({});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].variant.empty());
  EXPECT_FALSE(results[0].passed);
  EXPECT_NE(results[0].note.find("no Vulkan"), std::string::npos) << results[0].note;
  EXPECT_NE(format_selftest_table(results).find("no Vulkan"), std::string::npos);
}

}  // namespace
}  // namespace coli::vulkan
