// A minimal Vulkan compute backend: one instance, one physical device, one
// logical device with one compute queue. Everything the GEMV runner needs and
// nothing more. The loader is opened at run time, so every function here
// degrades to a Result error ("no Vulkan loader ...", "no Vulkan device ...")
// on machines without Vulkan; nothing here crashes or exits.
//
// Lifetime: buffers and pipelines made from a context keep a pointer to it;
// the context must outlive them (destroy them first).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/probe/device_profile.h"
#include "gpu/vulkan_loader.h"

namespace coli::vulkan {

// "vkCreateDevice failed: VK_ERROR_OUT_OF_DEVICE_MEMORY (-2)".
Error vulkan_call_failed(const char* call, VkResult result);

struct ContextOptions {
  int device_index = 0;  // index in vkEnumeratePhysicalDevices order
  // Pretend the device allows at most this many bytes of shared memory per
  // workgroup (0: its own maxComputeSharedMemorySize). Lets a large GPU, or
  // CI on lavapipe, exercise the choices a smaller device would get.
  std::uint32_t shared_memory_limit_bytes = 0;
  // Use device-local buffers with staging copies even where host-visible
  // memory would do, so lavapipe tests the path discrete GPUs take.
  bool force_staging = false;
};

// What the driver reports, for listing devices without creating any.
struct DeviceListing {
  std::string loader;                // the library that was opened
  std::vector<std::string> devices;  // names, in enumeration order
};
Result<DeviceListing> list_vulkan_devices();

class ComputeContext {
 public:
  static Result<std::unique_ptr<ComputeContext>> create(const ContextOptions& options);
  ~ComputeContext();
  ComputeContext(const ComputeContext&) = delete;
  ComputeContext& operator=(const ComputeContext&) = delete;

  const vk::DeviceFunctions& fn() const { return device_fn_; }
  VkDevice device() const { return device_; }
  int device_index() const { return device_index_; }

  // The device as the shader selector sees it: the probe's facts, with
  // max_compute_shared_memory_bytes lowered to the pretended limit if any.
  const VulkanDevice& facts() const { return facts_; }
  std::uint32_t real_shared_memory_bytes() const { return real_shared_memory_bytes_; }
  bool shared_memory_pretended() const { return facts_.max_compute_shared_memory_bytes != real_shared_memory_bytes_; }

  // True when storage buffers live in device-local memory that the host
  // cannot map, filled through a staging copy (discrete GPUs: HBM speed).
  bool uses_staging() const { return uses_staging_; }
  bool has_timestamps() const { return timestamp_period_ns_ > 0; }
  double timestamp_period_ns() const { return timestamp_period_ns_; }
  // Subgroup size control was enabled on the device (variants may pin a size).
  bool subgroup_size_control_enabled() const { return subgroup_size_control_enabled_; }

  // Buffer device addresses are enabled (Vulkan 1.2 bufferDeviceAddress):
  // what the decoder's kernels need (engine/vulkan/decoder).
  bool device_addresses_enabled() const { return device_addresses_; }
  VkDeviceAddress buffer_address(VkBuffer buffer) const;
  VkQueue queue() const { return queue_; }
  std::uint32_t queue_family() const { return queue_family_; }
  const VkPhysicalDeviceMemoryProperties& memory_properties() const { return memory_properties_; }
  // VK_EXT_memory_budget's budget of the heap behind `memory_type` (the
  // heap's size where the extension is absent): what this process may still
  // allocate there.
  std::uint64_t heap_budget_bytes(std::uint32_t memory_type) const;

  // Index of a memory type allowed by `type_bits` with all `required` flags.
  Result<std::uint32_t> find_memory_type(std::uint32_t type_bits, VkMemoryPropertyFlags required) const;

  // Records commands with `record`, submits them on the compute queue and
  // waits for the fence.
  Status submit_and_wait(const std::function<void(VkCommandBuffer)>& record);
  // As submit_and_wait, and returns the seconds the recorded commands took:
  // GPU timestamps around them, or CPU wall time around the submit when the
  // queue has no timestamps.
  Result<double> submit_timed(const std::function<void(VkCommandBuffer)>& record);

 private:
  ComputeContext() = default;
  Status init(const ContextOptions& options);
  Status create_instance();
  Status pick_physical_device(int index);
  Status create_device();
  Status create_command_objects();
  Result<double> read_timestamps();

  std::shared_ptr<const vk::Loader> loader_;
  VkInstance instance_ = VK_NULL_HANDLE;
  vk::InstanceFunctions instance_fn_{};
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  std::uint32_t device_api_version_ = 0;
  VkPhysicalDeviceMemoryProperties memory_properties_{};
  std::uint32_t queue_family_ = 0;
  VkDevice device_ = VK_NULL_HANDLE;
  vk::DeviceFunctions device_fn_{};
  VkQueue queue_ = VK_NULL_HANDLE;
  VkCommandPool command_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer command_buffer_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkQueryPool timestamp_pool_ = VK_NULL_HANDLE;
  double timestamp_period_ns_ = 0;  // 0: no timestamps on the compute queue
  std::uint64_t timestamp_mask_ = 0;
  int device_index_ = 0;
  VulkanDevice facts_;
  std::uint32_t real_shared_memory_bytes_ = 0;
  bool uses_staging_ = false;
  bool subgroup_size_control_enabled_ = false;
  bool device_addresses_ = false;
  PFN_vkGetBufferDeviceAddress get_buffer_address_ = nullptr;
};

}  // namespace coli::vulkan
