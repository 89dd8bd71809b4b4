#include "vulkan/device_facts.h"

#include <cstdio>

namespace coli::vulkan {
namespace {

std::string device_type_name(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

std::vector<std::string> subgroup_operation_names(VkSubgroupFeatureFlags flags) {
  const std::pair<VkSubgroupFeatureFlagBits, const char*> names[] = {
      {VK_SUBGROUP_FEATURE_BASIC_BIT, "basic"},
      {VK_SUBGROUP_FEATURE_VOTE_BIT, "vote"},
      {VK_SUBGROUP_FEATURE_ARITHMETIC_BIT, "arithmetic"},
      {VK_SUBGROUP_FEATURE_BALLOT_BIT, "ballot"},
      {VK_SUBGROUP_FEATURE_SHUFFLE_BIT, "shuffle"},
      {VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT, "shuffle_relative"},
      {VK_SUBGROUP_FEATURE_CLUSTERED_BIT, "clustered"},
      {VK_SUBGROUP_FEATURE_QUAD_BIT, "quad"},
  };
  std::vector<std::string> out;
  for (const auto& [bit, name] : names) {
    if (flags & bit) out.emplace_back(name);
  }
  return out;
}

}  // namespace

VulkanDevice read_device_facts(const vk::InstanceFunctions& fn, VkPhysicalDevice device, std::uint32_t api_version,
                               bool has_subgroup_size_control_extension) {
  const bool size_control_known = api_version >= VK_API_VERSION_1_3 || has_subgroup_size_control_extension;

  VkPhysicalDeviceSubgroupSizeControlProperties size_control{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
  VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  if (size_control_known) subgroup.pNext = &size_control;
  VkPhysicalDeviceProperties2 properties{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &subgroup};
  fn.vkGetPhysicalDeviceProperties2(device, &properties);

  VkPhysicalDeviceSubgroupSizeControlFeatures size_control_features{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
  VkPhysicalDevice16BitStorageFeatures storage16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
  VkPhysicalDeviceVulkan12Features vulkan12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  storage16.pNext = api_version >= VK_API_VERSION_1_2 ? static_cast<void*>(&vulkan12) : nullptr;
  size_control_features.pNext = &storage16;
  VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  features.pNext = size_control_known ? static_cast<void*>(&size_control_features) : static_cast<void*>(&storage16);
  fn.vkGetPhysicalDeviceFeatures2(device, &features);

  const VkPhysicalDeviceLimits& limits = properties.properties.limits;
  VulkanDevice facts;
  facts.name = properties.properties.deviceName;
  facts.vendor_id = properties.properties.vendorID;
  facts.device_id = properties.properties.deviceID;
  facts.type = device_type_name(properties.properties.deviceType);
  char version[48];
  std::snprintf(version, sizeof version, "%u.%u.%u", VK_API_VERSION_MAJOR(api_version),
                VK_API_VERSION_MINOR(api_version), VK_API_VERSION_PATCH(api_version));
  facts.api_version = version;
  facts.driver_version = properties.properties.driverVersion;
  facts.max_compute_shared_memory_bytes = limits.maxComputeSharedMemorySize;
  facts.max_workgroup_invocations = limits.maxComputeWorkGroupInvocations;
  facts.max_workgroup_size.assign(limits.maxComputeWorkGroupSize, limits.maxComputeWorkGroupSize + 3);
  facts.max_workgroup_count.assign(limits.maxComputeWorkGroupCount, limits.maxComputeWorkGroupCount + 3);
  facts.max_storage_buffer_range = limits.maxStorageBufferRange;
  facts.subgroup_size = subgroup.subgroupSize;
  const bool size_control_usable = size_control_known && size_control_features.subgroupSizeControl;
  facts.subgroup_size_control = size_control_usable;
  facts.compute_full_subgroups = size_control_known && size_control_features.computeFullSubgroups;
  facts.min_subgroup_size = size_control_usable ? size_control.minSubgroupSize : subgroup.subgroupSize;
  facts.max_subgroup_size = size_control_usable ? size_control.maxSubgroupSize : subgroup.subgroupSize;
  if (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) {
    facts.subgroup_operations = subgroup_operation_names(subgroup.supportedOperations);
  }
  facts.storage_buffer_16bit = storage16.storageBuffer16BitAccess;
  if (api_version >= VK_API_VERSION_1_2) {
    facts.shader_int8 = vulkan12.shaderInt8;
    facts.shader_float16 = vulkan12.shaderFloat16;
    facts.storage_buffer_8bit = vulkan12.storageBuffer8BitAccess;
  }
  return facts;
}

}  // namespace coli::vulkan
