// The Vulkan loader, opened at run time (dlopen "libvulkan.so.1"), so every
// coli binary starts on machines without it and says "no Vulkan loader"
// instead of failing to start. Function tables are X-macro lists: add a name
// to the list and it is loaded everywhere.
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <memory>
#include <string>

#include "coli/base/result.h"

namespace coli::vk {

#define COLI_VK_GLOBAL_FUNCTIONS(X) \
  X(vkCreateInstance)               \
  X(vkEnumerateInstanceVersion)     \
  X(vkEnumerateInstanceExtensionProperties)

#define COLI_VK_INSTANCE_FUNCTIONS(X)            \
  X(vkDestroyInstance)                           \
  X(vkEnumeratePhysicalDevices)                  \
  X(vkGetPhysicalDeviceProperties)               \
  X(vkGetPhysicalDeviceProperties2)              \
  X(vkGetPhysicalDeviceFeatures2)                \
  X(vkGetPhysicalDeviceMemoryProperties)         \
  X(vkGetPhysicalDeviceMemoryProperties2)        \
  X(vkGetPhysicalDeviceQueueFamilyProperties)    \
  X(vkEnumerateDeviceExtensionProperties)        \
  X(vkCreateDevice)                              \
  X(vkGetDeviceProcAddr)

#define COLI_VK_DEVICE_FUNCTIONS(X)     \
  X(vkDestroyDevice)                    \
  X(vkGetDeviceQueue)                   \
  X(vkQueueSubmit)                      \
  X(vkQueueWaitIdle)                    \
  X(vkDeviceWaitIdle)                   \
  X(vkCreateBuffer)                     \
  X(vkDestroyBuffer)                    \
  X(vkGetBufferMemoryRequirements)      \
  X(vkAllocateMemory)                   \
  X(vkFreeMemory)                       \
  X(vkBindBufferMemory)                 \
  X(vkMapMemory)                        \
  X(vkUnmapMemory)                      \
  X(vkCreateShaderModule)               \
  X(vkDestroyShaderModule)              \
  X(vkCreateDescriptorSetLayout)        \
  X(vkDestroyDescriptorSetLayout)       \
  X(vkCreatePipelineLayout)             \
  X(vkDestroyPipelineLayout)            \
  X(vkCreateComputePipelines)           \
  X(vkDestroyPipeline)                  \
  X(vkCreateDescriptorPool)             \
  X(vkDestroyDescriptorPool)            \
  X(vkAllocateDescriptorSets)           \
  X(vkUpdateDescriptorSets)             \
  X(vkCreateCommandPool)                \
  X(vkDestroyCommandPool)               \
  X(vkAllocateCommandBuffers)           \
  X(vkBeginCommandBuffer)               \
  X(vkEndCommandBuffer)                 \
  X(vkResetCommandBuffer)               \
  X(vkCmdBindPipeline)                  \
  X(vkCmdBindDescriptorSets)            \
  X(vkCmdPushConstants)                 \
  X(vkCmdDispatch)                      \
  X(vkCmdPipelineBarrier)               \
  X(vkCmdResetQueryPool)                \
  X(vkCmdWriteTimestamp)                \
  X(vkCreateQueryPool)                  \
  X(vkDestroyQueryPool)                 \
  X(vkGetQueryPoolResults)              \
  X(vkCreateFence)                      \
  X(vkDestroyFence)                     \
  X(vkResetFences)                      \
  X(vkWaitForFences)                    \
  X(vkCmdCopyBuffer)

#define COLI_VK_DECLARE_MEMBER(name) PFN_##name name = nullptr;

// The loader library and its global entry points. Keep it alive as long as
// any instance made from it.
class Loader {
 public:
  // Opens the loader: $COLI_VULKAN_LIBRARY if set, else libvulkan.so.1.
  // The error says which file could not be opened and that Vulkan is then off.
  static Result<std::shared_ptr<const Loader>> open();
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  COLI_VK_GLOBAL_FUNCTIONS(COLI_VK_DECLARE_MEMBER)
  std::string library;  // what was opened

 private:
  Loader() = default;
  void* handle_ = nullptr;
};

struct InstanceFunctions {
  COLI_VK_INSTANCE_FUNCTIONS(COLI_VK_DECLARE_MEMBER)
  // Loads every function of the list; an error names the first one missing.
  static Result<InstanceFunctions> load(const Loader& loader, VkInstance instance);
};

struct DeviceFunctions {
  COLI_VK_DEVICE_FUNCTIONS(COLI_VK_DECLARE_MEMBER)
  static Result<DeviceFunctions> load(const InstanceFunctions& instance, VkDevice device);
};

// "VK_ERROR_INCOMPATIBLE_DRIVER (-9)" for messages.
std::string result_name(VkResult result);

}  // namespace coli::vk
