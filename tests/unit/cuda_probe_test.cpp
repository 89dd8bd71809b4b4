// CUDA probe: the missing-driver path (the dev VM and CI have no libcuda), and
// the attribute checks on real H200 values and on garbage.
#include "gpu/cuda_probe.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>

namespace coli::probe {
namespace {

class ScopedCudaLibrary {
 public:
  explicit ScopedCudaLibrary(const char* value) {
    if (const char* old = std::getenv(kName)) old_ = old;
    ::setenv(kName, value, 1);
  }
  ~ScopedCudaLibrary() {
    if (old_) {
      ::setenv(kName, old_->c_str(), 1);
    } else {
      ::unsetenv(kName);
    }
  }

 private:
  static constexpr const char* kName = "COLI_CUDA_LIBRARY";
  std::optional<std::string> old_;
};

bool notes_mention(const CudaDevice& device, const std::string& text) {
  for (const std::string& note : device.notes) {
    if (note.find(text) != std::string::npos) return true;
  }
  return false;
}

std::string all_notes(const CudaDevice& device) {
  std::string text;
  for (const std::string& note : device.notes) text += note + "\n";
  return text;
}

// What the driver reports for the project's H200 (driver 580, CUDA 13.0);
// shared-memory figures are Hopper's documented limits (227 KiB opt-in, 228 KiB per SM).
CudaRawAttributes h200() {
  CudaRawAttributes raw;
  raw.ordinal = 0;
  raw.name = "NVIDIA H200";
  raw.uuid = "1aae8f7ed3a26d45f270050811b3ef0a";
  raw.compute_capability_major = 9;
  raw.compute_capability_minor = 0;
  raw.multiprocessor_count = 132;
  raw.shared_memory_per_block = 49152;
  raw.shared_memory_per_block_optin = 232448;
  raw.shared_memory_per_multiprocessor = 233472;
  raw.l2_cache_size = 52428800;
  raw.total_memory_bytes = 143771ull << 20;
  raw.free_memory_bytes = 143156ull << 20;
  raw.driver_version = 13000;
  return raw;
}

TEST(CudaProbe, MissingDriverIsAStatusNotAFailure) {
  ScopedCudaLibrary env("/nonexistent/libcuda.so.1");
  const CudaProbeResult result = probe_cuda();
  EXPECT_EQ(result.status, "no CUDA driver (/nonexistent/libcuda.so.1 not found)");
  EXPECT_TRUE(result.devices.empty());
}

TEST(CudaProbe, DefaultLibraryOnThisMachine) {
  const CudaProbeResult result = probe_cuda();
  if (result.status == "no CUDA driver (libcuda.so.1 not found)") {
    EXPECT_TRUE(result.devices.empty());
    return;
  }
  // A machine with the driver: either devices, each with a name, or a reason.
  if (result.devices.empty()) {
    EXPECT_EQ(result.status.rfind("no CUDA device (", 0), 0u) << result.status;
  }
  for (const CudaDevice& device : result.devices) {
    EXPECT_FALSE(device.name.empty());
    EXPECT_GE(device.shared_memory_per_block_optin, device.shared_memory_per_block);
  }
}

TEST(CudaProbe, H200AttributesPassUnchanged) {
  const CudaDevice device = cuda_device_from_attributes(h200());
  EXPECT_TRUE(device.notes.empty()) << all_notes(device);
  EXPECT_EQ(device.name, "NVIDIA H200");
  EXPECT_EQ(device.uuid, "1aae8f7ed3a26d45f270050811b3ef0a");
  EXPECT_EQ(device.compute_capability_major, 9);
  EXPECT_EQ(device.compute_capability_minor, 0);
  EXPECT_EQ(device.sm_count, 132);
  EXPECT_EQ(device.shared_memory_per_block, 49152u);
  EXPECT_EQ(device.shared_memory_per_block_optin, 232448u);
  EXPECT_EQ(device.shared_memory_per_sm, 233472u);
  EXPECT_EQ(device.l2_bytes, 52428800u);
  EXPECT_EQ(device.total_memory_bytes, 143771ull << 20);
  EXPECT_EQ(device.free_memory_bytes, 143156ull << 20);
  EXPECT_EQ(device.driver_version, 13000);
}

TEST(CudaProbe, ZeroOptinFallsBackToTheDefault) {
  CudaRawAttributes raw = h200();
  raw.shared_memory_per_block_optin = 0;
  const CudaDevice device = cuda_device_from_attributes(raw);
  EXPECT_EQ(device.shared_memory_per_block_optin, 49152u);
  EXPECT_TRUE(notes_mention(device, "shared_memory_per_block_optin 0 is not plausible; using shared_memory_per_block 49152"))
      << all_notes(device);
  EXPECT_EQ(device.shared_memory_per_sm, 233472u);  // still plausible: kept
}

TEST(CudaProbe, GarbageIsClampedAndEveryFixIsNoted) {
  CudaRawAttributes raw = h200();
  raw.multiprocessor_count = -1;
  raw.shared_memory_per_block = 2ll << 30;  // 2 GiB per block
  raw.shared_memory_per_block_optin = 0;
  raw.shared_memory_per_multiprocessor = 16384;  // less than one block
  raw.l2_cache_size = -5;
  raw.free_memory_bytes = raw.total_memory_bytes + 1;
  raw.compute_capability_major = 0;
  const CudaDevice device = cuda_device_from_attributes(raw);
  EXPECT_EQ(device.sm_count, 0);
  EXPECT_EQ(device.shared_memory_per_block, 49152u);
  EXPECT_EQ(device.shared_memory_per_block_optin, 49152u);
  EXPECT_EQ(device.shared_memory_per_sm, 49152u);
  EXPECT_EQ(device.l2_bytes, 0u);
  EXPECT_EQ(device.free_memory_bytes, device.total_memory_bytes);
  EXPECT_EQ(device.compute_capability_major, 0);
  EXPECT_TRUE(notes_mention(device, "sm_count -1 is not plausible")) << all_notes(device);
  EXPECT_TRUE(notes_mention(device, "shared_memory_per_block 2147483648 is not plausible")) << all_notes(device);
  EXPECT_TRUE(notes_mention(device, "shared_memory_per_block_optin 0 is not plausible")) << all_notes(device);
  EXPECT_TRUE(notes_mention(device, "shared_memory_per_sm 16384 is not plausible (below shared_memory_per_block)"))
      << all_notes(device);
  EXPECT_TRUE(notes_mention(device, "l2_bytes -5")) << all_notes(device);
  EXPECT_TRUE(notes_mention(device, "free_memory_bytes")) << all_notes(device);
  EXPECT_TRUE(notes_mention(device, "compute_capability_major 0")) << all_notes(device);
  EXPECT_EQ(device.notes.size(), 7u) << all_notes(device);
}

TEST(CudaProbe, PerSmBelowOptinLowersTheOptin) {
  CudaRawAttributes raw = h200();
  raw.shared_memory_per_multiprocessor = 100 << 10;  // between the default and the opt-in
  const CudaDevice device = cuda_device_from_attributes(raw);
  EXPECT_EQ(device.shared_memory_per_sm, 100u << 10);
  EXPECT_EQ(device.shared_memory_per_block_optin, 100u << 10);
  EXPECT_TRUE(notes_mention(device, "shared_memory_per_block_optin 232448 is not plausible (above shared_memory_per_sm)"))
      << all_notes(device);
  EXPECT_EQ(device.notes.size(), 1u) << all_notes(device);
}

TEST(CudaProbe, ProbeNotesAreKept) {
  CudaRawAttributes raw = h200();
  raw.free_memory_bytes = 0;
  raw.notes.push_back("free memory not read (cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY); free_memory_bytes = 0");
  const CudaDevice device = cuda_device_from_attributes(raw);
  EXPECT_EQ(device.notes, raw.notes);
  EXPECT_EQ(device.free_memory_bytes, 0u);
}

TEST(CudaProbe, ErrorNames) {
  EXPECT_EQ(cuda_error_name(100), "CUDA_ERROR_NO_DEVICE");
  EXPECT_EQ(cuda_error_name(999), "CUDA_ERROR_UNKNOWN");
  EXPECT_EQ(cuda_error_name(12345), "CUDA error 12345");
}

}  // namespace
}  // namespace coli::probe
