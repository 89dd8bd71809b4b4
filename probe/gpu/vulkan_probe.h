// Vulkan facts: every physical device's real limits (shared memory,
// subgroups, features, heaps), read through the run-time loaded loader.
// A shader that declares more workgroup memory than the device allows can
// lose the device, and some drivers accept such a pipeline without error, so
// these numbers are what kernels are checked against before they are built.
#pragma once

#include <string>
#include <vector>

#include "coli/probe/device_profile.h"
#include "gpu/vulkan_loader.h"

namespace coli::probe {

struct VulkanProbeResult {
  std::string status;  // "1 device", "no Vulkan loader (...)", "no Vulkan device (...)"
  std::vector<VulkanDevice> devices;
};

// Creates an instance (the loader's highest version, at least 1.1), reads
// every physical device, destroys the instance. Never creates a logical
// device, never throws: every failure becomes `status` with no devices.
VulkanProbeResult probe_vulkan();

// Every fact of one physical device; `instance_api` is the version the
// instance was created with (structures beyond it are not chained). The
// compute backend uses this too, so the selector sees what the profile records.
VulkanDevice describe_vulkan_device(const vk::InstanceFunctions& fn, VkPhysicalDevice physical,
                                    std::uint32_t instance_api);

// ---- pure pieces, exposed for tests

// "basic", "vote", ... for the VkSubgroupFeatureFlags bits, in bit order.
std::vector<std::string> subgroup_operation_names(VkSubgroupFeatureFlags operations);

// Heaps with their budgets (nullptr: no VK_EXT_memory_budget). A budget
// above the heap size is clamped to it and flagged budget_clamped.
std::vector<VulkanMemoryHeap> memory_heaps(const VkPhysicalDeviceMemoryProperties& memory,
                                           const VkPhysicalDeviceMemoryBudgetPropertiesEXT* budget);

// Unified memory: the device is integrated or a CPU, and some device-local
// heap is reachable through a memory type that is both DEVICE_LOCAL and
// HOST_VISIBLE, so the host can write weights where the device reads them
// without a staging copy. Discrete GPUs with resizable BAR also expose such
// types over their VRAM, which is why the device type is required too.
bool has_unified_memory(const VkPhysicalDeviceMemoryProperties& memory, VkPhysicalDeviceType type);

// "1.3.230" from a packed VK_MAKE_API_VERSION value.
std::string vulkan_version_text(std::uint32_t version);

// "discrete", "integrated", "virtual", "cpu", "other".
std::string device_type_name(VkPhysicalDeviceType type);

// 32 lowercase hex digits, no dashes.
std::string uuid_hex(const std::uint8_t (&uuid)[VK_UUID_SIZE]);

}  // namespace coli::probe
