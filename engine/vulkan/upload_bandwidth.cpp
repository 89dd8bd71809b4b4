#include "vulkan/upload_bandwidth.h"

#include <chrono>
#include <exception>
#include <vector>

#include "measure/stats.h"
#include "vulkan/storage_buffer.h"
#include "coli/base/clock.h"

namespace coli::vulkan {

UploadResult measure_vulkan_uploads(std::size_t block_bytes, double budget_seconds, bool force_staging) {
  UploadResult out;
  try {
    auto listing = list_vulkan_devices();
    if (!listing) return {"vulkan: " + listing.error().message, {}};
    const int count = static_cast<int>(listing->devices.size());
    if (count == 0) return {"vulkan: no device (the loader " + listing->loader + " found no driver)", {}};
    std::vector<std::byte> host(block_bytes, std::byte{0x5a});
    std::string failures;
    for (int index = 0; index < count; ++index) {
      ContextOptions options;
      options.device_index = index;
      options.force_staging = force_staging;
      auto context = ComputeContext::create(options);
      auto buffer = context ? StorageBuffer::create(**context, block_bytes) : Result<std::unique_ptr<StorageBuffer>>(context.error());
      if (!buffer) {
        failures += "; device " + std::to_string(index) + ": " + buffer.error().message;
        continue;
      }
      probe::RepeatPolicy policy;
      policy.max_total = std::chrono::duration<double>(budget_seconds / count);
      policy.min_total = std::chrono::duration<double>(0.5 * budget_seconds / count);
      bool failed = false;
      const SampleStats stats = probe::measure_repeatedly([&] {
        const auto start = std::chrono::steady_clock::now();
        if (!(*buffer)->upload(host.data(), block_bytes)) failed = true;
        return static_cast<double>(block_bytes) / coli::seconds_since(start) / 1e9;
      }, policy);
      if (failed) {
        failures += "; device " + std::to_string(index) + ": an upload failed";
        continue;
      }
      out.points.push_back({"vulkan", listing->devices[static_cast<std::size_t>(index)], index,
                            static_cast<std::uint64_t>(block_bytes), stats});
    }
    out.status = "vulkan: " + std::to_string(out.points.size()) + " of " + std::to_string(count) + " device(s) measured" + failures;
  } catch (const std::exception& error) {
    out.status = std::string("vulkan: upload measurement failed (") + error.what() + ")";
  }
  return out;
}

}  // namespace coli::vulkan
