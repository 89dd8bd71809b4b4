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

namespace {

// By UUID when both sides have one, else by index and model name.
template <class Device>
std::optional<int> find_in(const std::vector<Device>& devices, const GpuIdentity& id) {
  if (!id.chosen()) return std::nullopt;
  if (!id.uuid.empty()) {
    for (std::size_t i = 0; i < devices.size(); ++i) {
      if (devices[i].uuid == id.uuid) return static_cast<int>(i);
    }
    // This side may have dropped its UUIDs (an exported profile): fall back to index and model.
    const bool uuids_known = !devices.empty() && !devices.front().uuid.empty();
    if (uuids_known) return std::nullopt;
  }
  const auto at = static_cast<std::size_t>(id.index);
  if (at < devices.size() && devices[at].name == id.name) return id.index;
  return std::nullopt;
}

}  // namespace

std::optional<int> find_gpu(const GpuFacts& gpus, const GpuIdentity& id) { return find_in(gpus.vulkan, id); }

GpuIdentity cuda_identity(const GpuFacts& gpus, int index) {
  const CudaDevice& device = gpus.cuda.at(static_cast<std::size_t>(index));
  return GpuIdentity{index, device.uuid, device.name};
}

std::optional<int> find_cuda_gpu(const GpuFacts& gpus, const GpuIdentity& id) { return find_in(gpus.cuda, id); }

}  // namespace coli
