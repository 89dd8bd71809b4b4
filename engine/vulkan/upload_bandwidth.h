// Host-to-device upload bandwidth of every Vulkan device, through the same
// StorageBuffer::upload the engine uses (on a discrete GPU: a host-visible
// staging buffer copied to device-local memory with vkCmdCopyBuffer; on
// lavapipe and integrated GPUs: a copy into mapped memory, or the staging
// path when forced, so CI exercises what discrete GPUs do).
#pragma once

#include <string>
#include <vector>

#include "coli/probe/device_profile.h"

namespace coli::vulkan {

struct UploadResult {
  std::string status;  // "2 devices", or why nothing was measured
  std::vector<UploadBandwidthPoint> points;
};

// Blocks of `block_bytes`, repeated within `budget_seconds` shared by the
// devices. Never throws; a missing loader or device becomes the status.
UploadResult measure_vulkan_uploads(std::size_t block_bytes, double budget_seconds, bool force_staging = false);

}  // namespace coli::vulkan
