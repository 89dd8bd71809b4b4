// coli-probe --gpu-selftest's CUDA half (engine/cuda/cuda_selftest.h): on a
// CUDA device every case matches the CPU reference and is timed; without one
// the result is a single status line that says why (and a profile holding it
// reads back: tests/unit/profile_io_test.cpp). Device cases skip without a
// device unless COLI_REQUIRE_CUDA=1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cuda/cuda_kernels.h"
#include "cuda/cuda_selftest.h"
#include "cuda_test_support.h"

namespace coli::cuda {
namespace {

CudaSelftestOptions small() {
  CudaSelftestOptions options;
  options.shapes = {{256, 512}, {512, 256}};
  options.pool_bytes = 8ull << 20;
  options.seconds_per_case = 0.02;
  return options;
}

TEST(CudaSelftest, EveryCaseMatchesTheReferenceAndIsTimed) {
  REQUIRE_CUDA();
  const kernels::cuda::CudaDeviceCount count = kernels::cuda::cuda_device_count();
  const auto results = run_cuda_selftest(small());
  ASSERT_EQ(results.size(), static_cast<std::size_t>(count.devices) * 2 * 2);  // formats x shapes per device
  for (const GpuKernelResult& r : results) {
    EXPECT_EQ(r.backend, "cuda");
    EXPECT_TRUE(r.passed) << r.variant << " " << r.rows << "x" << r.cols << ": " << r.note;
    EXPECT_LT(r.max_relative_error, 1e-3) << r.variant;
    EXPECT_GT(r.gb_per_s.median, 0) << r.variant;
    EXPECT_GE(r.device_index, 0);
    EXPECT_FALSE(r.device.empty());
  }
}

TEST(CudaSelftest, WithoutADeviceOneLineSaysWhy) {
  const kernels::cuda::CudaDeviceCount count = kernels::cuda::cuda_device_count();
  if (count.devices > 0) GTEST_SKIP() << "a CUDA device is present; the device test covers it";
  const auto results = run_cuda_selftest(small());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].backend, "cuda");
  EXPECT_TRUE(results[0].variant.empty());
  EXPECT_FALSE(results[0].passed);
  EXPECT_NE(results[0].note.find(count.reason), std::string::npos) << results[0].note;
}

}  // namespace
}  // namespace coli::cuda
