// The facts of one physical device that the shader selector and the compute
// context need (limits, subgroups, features), read straight from the driver.
#pragma once

#include "coli/probe/device_profile.h"
#include "gpu/vulkan_loader.h"

namespace coli::vulkan {

// `api_version` is the device's apiVersion: structures promoted in 1.2/1.3
// are only chained when the device reports that version.
VulkanDevice read_device_facts(const vk::InstanceFunctions& fn, VkPhysicalDevice device, std::uint32_t api_version,
                               bool has_subgroup_size_control_extension);

}  // namespace coli::vulkan
