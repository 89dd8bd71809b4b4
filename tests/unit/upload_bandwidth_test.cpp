// Host-to-device upload bandwidth: Vulkan through the staging path discrete
// GPUs take (forced on lavapipe), and CUDA degrading to a status line.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "gpu/cuda_upload.h"
#include "vulkan/upload_bandwidth.h"

namespace coli {
namespace {

TEST(UploadBandwidth, VulkanStagingPathMeasuresEveryDevice) {
  const auto result = vulkan::measure_vulkan_uploads(4u << 20, 0.3, /*force_staging=*/true);
  if (result.points.empty() && result.status.find("no Vulkan loader") != std::string::npos) GTEST_SKIP() << result.status;
  ASSERT_FALSE(result.points.empty()) << result.status;
  EXPECT_NE(result.status.find("device(s) measured"), std::string::npos) << result.status;
  for (const auto& point : result.points) {
    EXPECT_EQ(point.backend, "vulkan");
    EXPECT_EQ(point.block_bytes, 4u << 20);
    EXPECT_GE(point.gb_per_s.samples, 1);
    EXPECT_GT(point.gb_per_s.median, 0.01);
    EXPECT_LE(point.gb_per_s.worst, point.gb_per_s.median);
  }
}

TEST(UploadBandwidth, MissingCudaDriverIsAStatusNotACrash) {
  ::setenv("COLI_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  const auto result = probe::measure_cuda_uploads(1u << 20, 0.1);
  ::unsetenv("COLI_CUDA_LIBRARY");
  EXPECT_TRUE(result.points.empty());
  EXPECT_NE(result.status.find("no CUDA driver (/nonexistent/libcuda.so.1"), std::string::npos) << result.status;
}

}  // namespace
}  // namespace coli
