#include "coli/probe/device_profile.h"

namespace coli {

std::string GpuIdentity::describe() const {
  if (!chosen()) return "no GPU";
  return "GPU " + std::to_string(index) + " (" + name + (uuid.empty() ? "" : ", uuid " + uuid) + ")";
}

GpuIdentity vulkan_identity(const GpuFacts& gpus, int index) {
  const VulkanDevice& device = gpus.vulkan.at(static_cast<std::size_t>(index));
  return GpuIdentity{index, device.uuid, device.name};
}

std::optional<int> find_gpu(const GpuFacts& gpus, const GpuIdentity& id) {
  if (!id.chosen()) return std::nullopt;
  if (!id.uuid.empty()) {
    for (std::size_t i = 0; i < gpus.vulkan.size(); ++i) {
      if (gpus.vulkan[i].uuid == id.uuid) return static_cast<int>(i);
    }
    // This side may have dropped its UUIDs (an exported profile): fall back to index and model.
    const bool uuids_known = !gpus.vulkan.empty() && !gpus.vulkan.front().uuid.empty();
    if (uuids_known) return std::nullopt;
  }
  const auto at = static_cast<std::size_t>(id.index);
  if (at < gpus.vulkan.size() && gpus.vulkan[at].name == id.name) return id.index;
  return std::nullopt;
}

}  // namespace coli
