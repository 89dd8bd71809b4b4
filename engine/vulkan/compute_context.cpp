#include "vulkan/compute_context.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "gpu/vulkan_probe.h"
#include "coli/base/clock.h"

namespace coli::vulkan {
namespace {

// A hung or lost device must become an error, not a process stuck forever.
constexpr std::uint64_t kFenceTimeoutNs = 60ull * 1000 * 1000 * 1000;

bool has_extension(const std::vector<VkExtensionProperties>& extensions, const char* name) {
  return std::any_of(extensions.begin(), extensions.end(),
                     [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

// A bare instance for listing and for contexts; `portability` is set when the
// loader offers VK_KHR_portability_enumeration (MoltenVK needs it).
// The version instances are created with: the loader's, at most 1.3.
std::uint32_t instance_api_version(const vk::Loader& loader) {
  std::uint32_t version = VK_API_VERSION_1_0;
  if (loader.vkEnumerateInstanceVersion) loader.vkEnumerateInstanceVersion(&version);
  return std::min<std::uint32_t>(version, VK_API_VERSION_1_3);
}

Result<VkInstance> make_instance(const vk::Loader& loader) {
  const std::uint32_t version = instance_api_version(loader);
  if (version < VK_API_VERSION_1_1) {
    return make_error("the Vulkan loader " + loader.library + " supports only Vulkan 1.0; coli needs 1.1 or newer");
  }
  std::vector<const char*> extensions;
  VkInstanceCreateFlags flags = 0;
  if (loader.vkEnumerateInstanceExtensionProperties) {
    std::uint32_t count = 0;
    loader.vkEnumerateInstanceExtensionProperties(nullptr, &count, nullptr);
    std::vector<VkExtensionProperties> available(count);
    loader.vkEnumerateInstanceExtensionProperties(nullptr, &count, available.data());
    available.resize(count);
    if (has_extension(available, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
      extensions.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
      flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "coli";
  app.pEngineName = "coli";
  app.apiVersion = version;
  VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.flags = flags;
  info.pApplicationInfo = &app;
  info.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  VkInstance instance = VK_NULL_HANDLE;
  if (VkResult r = loader.vkCreateInstance(&info, nullptr, &instance); r != VK_SUCCESS) {
    return vulkan_call_failed("vkCreateInstance", r);
  }
  return instance;
}

// For when the instance table failed to load (some other function missing).
void destroy_instance_directly(const vk::Loader& loader, VkInstance instance) {
  auto destroy = reinterpret_cast<PFN_vkDestroyInstance>(loader.vkGetInstanceProcAddr(instance, "vkDestroyInstance"));
  if (destroy) destroy(instance, nullptr);
}

Result<std::vector<VkPhysicalDevice>> physical_devices(const vk::InstanceFunctions& fn, VkInstance instance) {
  std::uint32_t count = 0;
  if (VkResult r = fn.vkEnumeratePhysicalDevices(instance, &count, nullptr); r != VK_SUCCESS) {
    return vulkan_call_failed("vkEnumeratePhysicalDevices", r);
  }
  std::vector<VkPhysicalDevice> devices(count);
  VkResult r = fn.vkEnumeratePhysicalDevices(instance, &count, devices.data());
  if (r != VK_SUCCESS && r != VK_INCOMPLETE) return vulkan_call_failed("vkEnumeratePhysicalDevices", r);
  devices.resize(count);
  return devices;
}

}  // namespace

Error vulkan_call_failed(const char* call, VkResult result) {
  return make_error(std::string(call) + " failed: " + vk::result_name(result));
}

Result<DeviceListing> list_vulkan_devices() {
  auto loader = vk::Loader::open();
  if (!loader) return loader.error();
  auto instance = make_instance(**loader);
  if (!instance) return instance.error();
  DeviceListing listing{(*loader)->library, {}};
  auto fn = vk::InstanceFunctions::load(**loader, *instance);
  if (!fn) {
    destroy_instance_directly(**loader, *instance);
    return fn.error();
  }
  auto devices = physical_devices(*fn, *instance);
  if (devices) {
    for (VkPhysicalDevice device : *devices) {
      VkPhysicalDeviceProperties properties{};
      fn->vkGetPhysicalDeviceProperties(device, &properties);
      listing.devices.emplace_back(properties.deviceName);
    }
  }
  fn->vkDestroyInstance(*instance, nullptr);
  if (!devices) return devices.error();
  return listing;
}

Result<std::unique_ptr<ComputeContext>> ComputeContext::create(const ContextOptions& options) {
  std::unique_ptr<ComputeContext> context(new ComputeContext());
  if (Status status = context->init(options); !status) return status.error();
  return context;
}

Status ComputeContext::init(const ContextOptions& options) {
  auto loader = vk::Loader::open();
  if (!loader) return loader.error();
  loader_ = *loader;
  if (Status s = create_instance(); !s) return s;
  if (Status s = pick_physical_device(options.device_index); !s) return s;
  real_shared_memory_bytes_ = facts_.max_compute_shared_memory_bytes;
  if (options.shared_memory_limit_bytes > 0) {
    facts_.max_compute_shared_memory_bytes = std::min(real_shared_memory_bytes_, options.shared_memory_limit_bytes);
  }
  uses_staging_ = uses_staging_ || options.force_staging;
  if (Status s = create_device(); !s) return s;
  return create_command_objects();
}

Status ComputeContext::create_instance() {
  auto instance = make_instance(*loader_);
  if (!instance) return instance.error();
  instance_ = *instance;
  auto fn = vk::InstanceFunctions::load(*loader_, instance_);
  if (!fn) {
    destroy_instance_directly(*loader_, instance_);
    instance_ = VK_NULL_HANDLE;
    return fn.error();
  }
  instance_fn_ = *fn;
  return Ok{};
}

Status ComputeContext::pick_physical_device(int index) {
  auto devices = physical_devices(instance_fn_, instance_);
  if (!devices) return devices.error();
  if (devices->empty()) return make_error("no Vulkan device: the loader " + loader_->library + " found no driver");
  if (index < 0 || index >= static_cast<int>(devices->size())) {
    return make_error("no Vulkan device " + std::to_string(index) + ": there are " + std::to_string(devices->size()));
  }
  device_index_ = index;
  physical_ = (*devices)[static_cast<std::size_t>(index)];
  VkPhysicalDeviceProperties properties{};
  instance_fn_.vkGetPhysicalDeviceProperties(physical_, &properties);
  device_api_version_ = properties.apiVersion;
  if (device_api_version_ < VK_API_VERSION_1_1) {
    return make_error(std::string("Vulkan device ") + properties.deviceName + " supports only Vulkan 1.0; coli needs 1.1");
  }
  facts_ = probe::describe_vulkan_device(instance_fn_, physical_, instance_api_version(*loader_));
  instance_fn_.vkGetPhysicalDeviceMemoryProperties(physical_, &memory_properties_);

  std::uint32_t family_count = 0;
  instance_fn_.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &family_count, nullptr);
  std::vector<VkQueueFamilyProperties> families(family_count);
  instance_fn_.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &family_count, families.data());
  // Prefer a compute family without graphics (a dedicated compute queue);
  // any compute family will do.
  int chosen = -1;
  for (std::uint32_t i = 0; i < family_count; ++i) {
    if (!(families[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
    if (chosen < 0 || !(families[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) chosen = static_cast<int>(i);
    if (!(families[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) break;
  }
  if (chosen < 0) return make_error("Vulkan device " + facts_.name + " has no compute queue");
  queue_family_ = static_cast<std::uint32_t>(chosen);
  const std::uint32_t valid_bits = families[queue_family_].timestampValidBits;
  if (valid_bits > 0 && properties.limits.timestampPeriod > 0) {
    timestamp_period_ns_ = properties.limits.timestampPeriod;
    timestamp_mask_ = valid_bits >= 64 ? ~0ull : ((1ull << valid_bits) - 1);
  }
  // Staging when device-local memory the host cannot map exists: that is
  // where a discrete GPU's HBM/VRAM is.
  for (std::uint32_t i = 0; i < memory_properties_.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags flags = memory_properties_.memoryTypes[i].propertyFlags;
    if ((flags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && !(flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
      uses_staging_ = true;
    }
  }
  return Ok{};
}

Status ComputeContext::create_device() {
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue_info{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  queue_info.queueFamilyIndex = queue_family_;
  queue_info.queueCount = 1;
  queue_info.pQueuePriorities = &priority;

  std::vector<const char*> extensions;
  // Only what the shaders may use and the device has: subgroup size control,
  // so a variant can pin its subgroup size. The GEMV shaders read 32-bit
  // words, so no 8/16-bit storage feature is requested.
  VkPhysicalDeviceSubgroupSizeControlFeatures size_control{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
  void* features_chain = nullptr;
  // Buffer device addresses (core in 1.2) let the decoder's kernels take
  // every buffer as a push constant: one pipeline layout, no descriptor sets.
  VkPhysicalDeviceVulkan12Features vulkan12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  if (device_api_version_ >= VK_API_VERSION_1_2) {
    VkPhysicalDeviceFeatures2 query{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    query.pNext = &vulkan12;
    instance_fn_.vkGetPhysicalDeviceFeatures2(physical_, &query);
    const bool addresses = vulkan12.bufferDeviceAddress == VK_TRUE;
    vulkan12 = VkPhysicalDeviceVulkan12Features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    if (addresses) {
      vulkan12.bufferDeviceAddress = VK_TRUE;
      features_chain = &vulkan12;
      device_addresses_ = true;
    }
  }
  if (facts_.subgroup_size_control) {
    size_control.subgroupSizeControl = VK_TRUE;
    size_control.computeFullSubgroups = facts_.compute_full_subgroups ? VK_TRUE : VK_FALSE;
    size_control.pNext = features_chain;
    features_chain = &size_control;
    if (device_api_version_ < VK_API_VERSION_1_3) extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    subgroup_size_control_enabled_ = true;
  }
  std::uint32_t count = 0;
  instance_fn_.vkEnumerateDeviceExtensionProperties(physical_, nullptr, &count, nullptr);
  std::vector<VkExtensionProperties> available(count);
  instance_fn_.vkEnumerateDeviceExtensionProperties(physical_, nullptr, &count, available.data());
  available.resize(count);
  // A portability driver (MoltenVK) must have its subset extension enabled.
  if (has_extension(available, "VK_KHR_portability_subset")) extensions.push_back("VK_KHR_portability_subset");

  VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  info.pNext = features_chain;
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &queue_info;
  info.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  if (VkResult r = instance_fn_.vkCreateDevice(physical_, &info, nullptr, &device_); r != VK_SUCCESS) {
    device_ = VK_NULL_HANDLE;
    return vulkan_call_failed("vkCreateDevice", r);
  }
  auto fn = vk::DeviceFunctions::load(instance_fn_, device_);
  if (!fn) {
    // Without its table the device cannot be destroyed through it; use the
    // loader's entry point instead.
    auto destroy = reinterpret_cast<PFN_vkDestroyDevice>(instance_fn_.vkGetDeviceProcAddr(device_, "vkDestroyDevice"));
    if (destroy) destroy(device_, nullptr);
    device_ = VK_NULL_HANDLE;
    return fn.error();
  }
  device_fn_ = *fn;
  device_fn_.vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
  if (device_addresses_) {
    get_buffer_address_ = reinterpret_cast<PFN_vkGetBufferDeviceAddress>(
        instance_fn_.vkGetDeviceProcAddr(device_, "vkGetBufferDeviceAddress"));
    device_addresses_ = get_buffer_address_ != nullptr;
  }
  return Ok{};
}

Status ComputeContext::create_command_objects() {
  VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool_info.queueFamilyIndex = queue_family_;
  if (VkResult r = device_fn_.vkCreateCommandPool(device_, &pool_info, nullptr, &command_pool_); r != VK_SUCCESS) {
    return vulkan_call_failed("vkCreateCommandPool", r);
  }
  VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  alloc.commandPool = command_pool_;
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = 1;
  if (VkResult r = device_fn_.vkAllocateCommandBuffers(device_, &alloc, &command_buffer_); r != VK_SUCCESS) {
    return vulkan_call_failed("vkAllocateCommandBuffers", r);
  }
  VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  if (VkResult r = device_fn_.vkCreateFence(device_, &fence_info, nullptr, &fence_); r != VK_SUCCESS) {
    return vulkan_call_failed("vkCreateFence", r);
  }
  if (has_timestamps()) {
    VkQueryPoolCreateInfo query_info{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    query_info.queryType = VK_QUERY_TYPE_TIMESTAMP;
    query_info.queryCount = 2;
    if (VkResult r = device_fn_.vkCreateQueryPool(device_, &query_info, nullptr, &timestamp_pool_); r != VK_SUCCESS) {
      return vulkan_call_failed("vkCreateQueryPool", r);
    }
  }
  return Ok{};
}

ComputeContext::~ComputeContext() {
  if (device_) {
    device_fn_.vkDeviceWaitIdle(device_);
    if (timestamp_pool_) device_fn_.vkDestroyQueryPool(device_, timestamp_pool_, nullptr);
    if (fence_) device_fn_.vkDestroyFence(device_, fence_, nullptr);
    if (command_pool_) device_fn_.vkDestroyCommandPool(device_, command_pool_, nullptr);
    device_fn_.vkDestroyDevice(device_, nullptr);
  }
  if (instance_ && instance_fn_.vkDestroyInstance) instance_fn_.vkDestroyInstance(instance_, nullptr);
}

Result<std::uint32_t> ComputeContext::find_memory_type(std::uint32_t type_bits, VkMemoryPropertyFlags required) const {
  for (std::uint32_t i = 0; i < memory_properties_.memoryTypeCount; ++i) {
    if ((type_bits & (1u << i)) && (memory_properties_.memoryTypes[i].propertyFlags & required) == required) return i;
  }
  return make_error("Vulkan device " + facts_.name + " has no memory type with flags " + std::to_string(required) +
                    " for this buffer");
}

Status ComputeContext::submit_and_wait(const std::function<void(VkCommandBuffer)>& record) {
  if (VkResult r = device_fn_.vkResetCommandBuffer(command_buffer_, 0); r != VK_SUCCESS) {
    return vulkan_call_failed("vkResetCommandBuffer", r);
  }
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  if (VkResult r = device_fn_.vkBeginCommandBuffer(command_buffer_, &begin); r != VK_SUCCESS) {
    return vulkan_call_failed("vkBeginCommandBuffer", r);
  }
  record(command_buffer_);
  if (VkResult r = device_fn_.vkEndCommandBuffer(command_buffer_); r != VK_SUCCESS) {
    return vulkan_call_failed("vkEndCommandBuffer", r);
  }
  if (VkResult r = device_fn_.vkResetFences(device_, 1, &fence_); r != VK_SUCCESS) {
    return vulkan_call_failed("vkResetFences", r);
  }
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &command_buffer_;
  if (VkResult r = device_fn_.vkQueueSubmit(queue_, 1, &submit, fence_); r != VK_SUCCESS) {
    return vulkan_call_failed("vkQueueSubmit", r);
  }
  if (VkResult r = device_fn_.vkWaitForFences(device_, 1, &fence_, VK_TRUE, kFenceTimeoutNs); r != VK_SUCCESS) {
    return vulkan_call_failed("vkWaitForFences", r);
  }
  return Ok{};
}

Result<double> ComputeContext::submit_timed(const std::function<void(VkCommandBuffer)>& record) {
  if (!has_timestamps()) {
    const auto start = std::chrono::steady_clock::now();
    if (Status s = submit_and_wait(record); !s) return s.error();
    return coli::seconds_since(start);
  }
  Status submitted = submit_and_wait([&](VkCommandBuffer cmd) {
    device_fn_.vkCmdResetQueryPool(cmd, timestamp_pool_, 0, 2);
    device_fn_.vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, timestamp_pool_, 0);
    record(cmd);
    device_fn_.vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timestamp_pool_, 1);
  });
  if (!submitted) return submitted.error();
  return read_timestamps();
}

Result<double> ComputeContext::read_timestamps() {
  std::uint64_t ticks[2] = {0, 0};
  if (VkResult r = device_fn_.vkGetQueryPoolResults(device_, timestamp_pool_, 0, 2, sizeof ticks, ticks,
                                                    sizeof(std::uint64_t),
                                                    VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
      r != VK_SUCCESS) {
    return vulkan_call_failed("vkGetQueryPoolResults", r);
  }
  // Masking handles counters narrower than 64 bits that wrapped in between.
  const std::uint64_t elapsed = (ticks[1] - ticks[0]) & timestamp_mask_;
  return static_cast<double>(elapsed) * timestamp_period_ns_ * 1e-9;
}

}  // namespace coli::vulkan

namespace coli::vulkan {

VkDeviceAddress ComputeContext::buffer_address(VkBuffer buffer) const {
  VkBufferDeviceAddressInfo info{VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
  info.buffer = buffer;
  return get_buffer_address_ ? get_buffer_address_(device_, &info) : 0;
}

std::uint64_t ComputeContext::heap_budget_bytes(std::uint32_t memory_type) const {
  const std::uint32_t heap = memory_properties_.memoryTypes[memory_type].heapIndex;
  if (!facts_.memory_budget) return memory_properties_.memoryHeaps[heap].size;
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  VkPhysicalDeviceMemoryProperties2 properties{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
  properties.pNext = &budget;
  instance_fn_.vkGetPhysicalDeviceMemoryProperties2(physical_, &properties);
  // The budget is what may still be allocated plus what this process holds.
  const std::uint64_t held = budget.heapUsage[heap];
  return budget.heapBudget[heap] > held ? budget.heapBudget[heap] - held : 0;
}

}  // namespace coli::vulkan
