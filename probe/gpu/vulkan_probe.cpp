#include "gpu/vulkan_probe.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <set>

namespace coli::probe {
namespace {

// Headers older than 1.3.255 lack VK_KHR_cooperative_matrix (Debian 12 ships
// 1.3.239). Its feature struct's layout and structure type number are fixed by
// the registry, so they can be declared here and chained on newer drivers.
#ifdef VK_KHR_cooperative_matrix
using CooperativeMatrixFeaturesKhr = VkPhysicalDeviceCooperativeMatrixFeaturesKHR;
constexpr VkStructureType kCooperativeMatrixFeaturesKhrType =
    VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR;
#else
struct CooperativeMatrixFeaturesKhr {
  VkStructureType sType;
  void* pNext;
  VkBool32 cooperativeMatrix;
  VkBool32 cooperativeMatrixRobustBufferAccess;
};
constexpr auto kCooperativeMatrixFeaturesKhrType = static_cast<VkStructureType>(1000506000);
#endif

// What one physical device may be asked about: an extension struct may only
// be chained when the device has the extension, a core struct only when the
// effective version (the lower of instance and device versions) includes it.
struct DeviceSupport {
  std::uint32_t effective_api = VK_API_VERSION_1_0;
  std::set<std::string> extensions;
  bool has(const char* extension) const { return extensions.count(extension) > 0; }
  bool core_or(std::uint32_t version, const char* extension) const {
    return effective_api >= version || has(extension);
  }
};

// Builds a pNext chain of structs that live in the caller's frame.
class Chain {
 public:
  Chain() = default;
  Chain(const Chain&) = delete;
  Chain& operator=(const Chain&) = delete;
  template <class Link>
  void add(Link& link) {
    *tail_ = &link;
    tail_ = &link.pNext;
  }
  void* head() const { return head_; }

 private:
  void* head_ = nullptr;
  void** tail_ = &head_;
};

std::set<std::string> device_extensions(const vk::InstanceFunctions& fn, VkPhysicalDevice device) {
  std::uint32_t count = 0;
  if (fn.vkEnumerateDeviceExtensionProperties(device, nullptr, &count, nullptr) != VK_SUCCESS) return {};
  std::vector<VkExtensionProperties> properties(count);
  if (fn.vkEnumerateDeviceExtensionProperties(device, nullptr, &count, properties.data()) < VK_SUCCESS) return {};
  std::set<std::string> names;
  for (std::uint32_t i = 0; i < count && i < properties.size(); ++i) names.insert(properties[i].extensionName);
  return names;
}

std::vector<std::uint32_t> three(const std::uint32_t (&values)[3]) { return {values[0], values[1], values[2]}; }

// Identity, limits, subgroup properties and the host-pointer import alignment.
// Returns whether compute is a stage where a required subgroup size applies.
bool read_properties(const vk::InstanceFunctions& fn, VkPhysicalDevice physical, const DeviceSupport& support,
                     VulkanDevice& out) {
  VkPhysicalDeviceProperties2 properties{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  VkPhysicalDeviceIDProperties id{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
  VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceSubgroupSizeControlProperties size_control{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
  VkPhysicalDeviceExternalMemoryHostPropertiesEXT host_memory{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
  const bool core_1_1 = support.effective_api >= VK_API_VERSION_1_1;
  const bool has_driver = support.core_or(VK_API_VERSION_1_2, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
  const bool has_size_control = support.core_or(VK_API_VERSION_1_3, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  out.external_host_memory = support.has(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  Chain chain;
  if (core_1_1) {
    chain.add(id);
    chain.add(subgroup);
  }
  if (has_driver) chain.add(driver);
  if (has_size_control) chain.add(size_control);
  if (out.external_host_memory) chain.add(host_memory);
  properties.pNext = chain.head();
  fn.vkGetPhysicalDeviceProperties2(physical, &properties);

  const VkPhysicalDeviceProperties& p = properties.properties;
  out.name = p.deviceName;
  out.vendor_id = p.vendorID;
  out.device_id = p.deviceID;
  out.type = device_type_name(p.deviceType);
  out.api_version = vulkan_version_text(p.apiVersion);
  out.driver_version = p.driverVersion;
  if (has_driver) {
    out.driver_name = driver.driverName;
    out.driver_info = driver.driverInfo;
  }
  if (core_1_1) out.uuid = uuid_hex(id.deviceUUID);
  out.max_compute_shared_memory_bytes = p.limits.maxComputeSharedMemorySize;
  out.max_workgroup_invocations = p.limits.maxComputeWorkGroupInvocations;
  out.max_workgroup_size = three(p.limits.maxComputeWorkGroupSize);
  out.max_workgroup_count = three(p.limits.maxComputeWorkGroupCount);
  out.max_storage_buffer_range = p.limits.maxStorageBufferRange;
  if (core_1_1) {
    out.subgroup_size = subgroup.subgroupSize;
    // Operations are only usable in compute if compute is a supported stage.
    if (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) {
      out.subgroup_operations = subgroup_operation_names(subgroup.supportedOperations);
    }
  }
  // Without size control the device runs every compute shader at one size.
  out.min_subgroup_size = has_size_control ? size_control.minSubgroupSize : out.subgroup_size;
  out.max_subgroup_size = has_size_control ? size_control.maxSubgroupSize : out.subgroup_size;
  if (out.external_host_memory) out.min_imported_host_pointer_alignment = host_memory.minImportedHostPointerAlignment;
  return has_size_control && (size_control.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
}

// Feature bits. Size control counts only where compute may require a size.
void read_features(const vk::InstanceFunctions& fn, VkPhysicalDevice physical, const DeviceSupport& support,
                   bool compute_size_control_stage, VulkanDevice& out) {
  VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  VkPhysicalDevice16BitStorageFeatures storage16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
  VkPhysicalDevice8BitStorageFeatures storage8{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES};
  VkPhysicalDeviceShaderFloat16Int8Features float16_int8{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
  VkPhysicalDeviceShaderIntegerDotProductFeatures dot_product{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
  VkPhysicalDeviceSubgroupSizeControlFeatures size_control{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES};
  CooperativeMatrixFeaturesKhr matrix_khr{kCooperativeMatrixFeaturesKhrType, nullptr, VK_FALSE, VK_FALSE};
  VkPhysicalDeviceCooperativeMatrixFeaturesNV matrix_nv{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  const bool has16 = support.core_or(VK_API_VERSION_1_1, VK_KHR_16BIT_STORAGE_EXTENSION_NAME);
  const bool has8 = support.core_or(VK_API_VERSION_1_2, VK_KHR_8BIT_STORAGE_EXTENSION_NAME);
  const bool has_f16_i8 = support.core_or(VK_API_VERSION_1_2, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME);
  const bool has_dot = support.core_or(VK_API_VERSION_1_3, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
  const bool has_size_control = support.core_or(VK_API_VERSION_1_3, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  const bool has_matrix_khr = support.has("VK_KHR_cooperative_matrix");
  const bool has_matrix_nv = support.has(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  Chain chain;
  if (has16) chain.add(storage16);
  if (has8) chain.add(storage8);
  if (has_f16_i8) chain.add(float16_int8);
  if (has_dot) chain.add(dot_product);
  if (has_size_control) chain.add(size_control);
  if (has_matrix_khr) chain.add(matrix_khr);
  if (has_matrix_nv) chain.add(matrix_nv);
  features.pNext = chain.head();
  fn.vkGetPhysicalDeviceFeatures2(physical, &features);

  out.storage_buffer_16bit = has16 && storage16.storageBuffer16BitAccess;
  out.storage_buffer_8bit = has8 && storage8.storageBuffer8BitAccess;
  out.shader_float16 = has_f16_i8 && float16_int8.shaderFloat16;
  out.shader_int8 = has_f16_i8 && float16_int8.shaderInt8;
  out.integer_dot_product = has_dot && dot_product.shaderIntegerDotProduct;
  out.subgroup_size_control = has_size_control && compute_size_control_stage && size_control.subgroupSizeControl;
  out.compute_full_subgroups = has_size_control && size_control.computeFullSubgroups;
  out.cooperative_matrix =
      (has_matrix_khr && matrix_khr.cooperativeMatrix) || (has_matrix_nv && matrix_nv.cooperativeMatrix);
}

void read_memory(const vk::InstanceFunctions& fn, VkPhysicalDevice physical, const DeviceSupport& support,
                 VkPhysicalDeviceType type, VulkanDevice& out) {
  VkPhysicalDeviceMemoryProperties2 memory{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  out.memory_budget = support.has(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  if (out.memory_budget) memory.pNext = &budget;
  fn.vkGetPhysicalDeviceMemoryProperties2(physical, &memory);
  out.heaps = memory_heaps(memory.memoryProperties, out.memory_budget ? &budget : nullptr);
  out.unified_memory = has_unified_memory(memory.memoryProperties, type);
}


std::uint32_t loader_api_version(const vk::Loader& loader) {
  std::uint32_t version = VK_API_VERSION_1_0;  // a 1.0 loader lacks vkEnumerateInstanceVersion
  if (loader.vkEnumerateInstanceVersion && loader.vkEnumerateInstanceVersion(&version) != VK_SUCCESS) {
    version = VK_API_VERSION_1_0;
  }
  return VK_MAKE_API_VERSION(0, VK_API_VERSION_MAJOR(version), VK_API_VERSION_MINOR(version), 0);
}

bool loader_has_instance_extension(const vk::Loader& loader, const char* name) {
  std::uint32_t count = 0;
  if (loader.vkEnumerateInstanceExtensionProperties(nullptr, &count, nullptr) != VK_SUCCESS) return false;
  std::vector<VkExtensionProperties> extensions(count);
  if (loader.vkEnumerateInstanceExtensionProperties(nullptr, &count, extensions.data()) < VK_SUCCESS) return false;
  for (std::uint32_t i = 0; i < count && i < extensions.size(); ++i) {
    if (std::string(extensions[i].extensionName) == name) return true;
  }
  return false;
}

// Destroys the instance however the probe leaves (the loader outlives it).
struct InstanceGuard {
  const vk::Loader& loader;
  VkInstance instance = VK_NULL_HANDLE;
  ~InstanceGuard() {
    if (instance == VK_NULL_HANDLE) return;
    auto destroy =
        reinterpret_cast<PFN_vkDestroyInstance>(loader.vkGetInstanceProcAddr(instance, "vkDestroyInstance"));
    if (destroy) destroy(instance, nullptr);
  }
};

std::string device_count_text(std::size_t count) {
  return std::to_string(count) + (count == 1 ? " device" : " devices");
}

VulkanProbeResult probe_with(const vk::Loader& loader) {
  const std::uint32_t api = loader_api_version(loader);
  if (api < VK_API_VERSION_1_1) {
    return {"no usable Vulkan (the loader " + loader.library + " supports only Vulkan 1.0; coli needs 1.1)", {}};
  }
  VkApplicationInfo application{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  application.pApplicationName = "coli-probe";
  application.apiVersion = api;
  VkInstanceCreateInfo create{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  create.pApplicationInfo = &application;
  // MoltenVK and other portability drivers are only listed when asked for.
  const char* portability = "VK_KHR_portability_enumeration";
  if (loader_has_instance_extension(loader, portability)) {
    create.flags |= 0x00000001;  // VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR
    create.enabledExtensionCount = 1;
    create.ppEnabledExtensionNames = &portability;
  }
  InstanceGuard guard{loader};
  const VkResult created = loader.vkCreateInstance(&create, nullptr, &guard.instance);
  if (created == VK_ERROR_INCOMPATIBLE_DRIVER) {
    return {"no Vulkan device (vkCreateInstance: " + vk::result_name(created) + ")", {}};
  }
  if (created != VK_SUCCESS) return {"Vulkan unusable (vkCreateInstance: " + vk::result_name(created) + ")", {}};
  auto functions = vk::InstanceFunctions::load(loader, guard.instance);
  if (!functions) return {"Vulkan unusable (" + functions.error().message + ")", {}};

  std::uint32_t count = 0;
  VkResult listed = functions->vkEnumeratePhysicalDevices(guard.instance, &count, nullptr);
  std::vector<VkPhysicalDevice> physical(count);
  if (listed == VK_SUCCESS && count > 0) {
    listed = functions->vkEnumeratePhysicalDevices(guard.instance, &count, physical.data());
    physical.resize(count);
  }
  if (listed < VK_SUCCESS) return {"no Vulkan device (vkEnumeratePhysicalDevices: " + vk::result_name(listed) + ")", {}};
  if (physical.empty()) return {"no Vulkan device (the loader found no physical device)", {}};

  VulkanProbeResult result;
  for (VkPhysicalDevice device : physical) result.devices.push_back(describe_vulkan_device(*functions, device, api));
  result.status = device_count_text(result.devices.size());
  return result;
}

}  // namespace

VulkanDevice describe_vulkan_device(const vk::InstanceFunctions& fn, VkPhysicalDevice physical,
                                    std::uint32_t instance_api) {
  VkPhysicalDeviceProperties basic{};
  fn.vkGetPhysicalDeviceProperties(physical, &basic);
  DeviceSupport support;
  support.effective_api = std::min(VK_MAKE_API_VERSION(0, VK_API_VERSION_MAJOR(basic.apiVersion),
                                                       VK_API_VERSION_MINOR(basic.apiVersion), 0),
                                   instance_api);
  support.extensions = device_extensions(fn, physical);
  VulkanDevice device;
  const bool compute_size_control_stage = read_properties(fn, physical, support, device);
  read_features(fn, physical, support, compute_size_control_stage, device);
  read_memory(fn, physical, support, basic.deviceType, device);
  return device;
}

VulkanProbeResult probe_vulkan() {
  try {
    auto loader = vk::Loader::open();
    if (!loader) {
      const std::string& message = loader.error().message;
      return {message.rfind("no Vulkan loader", 0) == 0 ? message : "no Vulkan loader (" + message + ")", {}};
    }
    return probe_with(**loader);
  } catch (const std::exception& error) {
    return {std::string("Vulkan probe failed (") + error.what() + ")", {}};
  }
}

std::vector<std::string> subgroup_operation_names(VkSubgroupFeatureFlags operations) {
  static constexpr std::array<std::pair<VkSubgroupFeatureFlagBits, const char*>, 8> kNames{{
      {VK_SUBGROUP_FEATURE_BASIC_BIT, "basic"},
      {VK_SUBGROUP_FEATURE_VOTE_BIT, "vote"},
      {VK_SUBGROUP_FEATURE_ARITHMETIC_BIT, "arithmetic"},
      {VK_SUBGROUP_FEATURE_BALLOT_BIT, "ballot"},
      {VK_SUBGROUP_FEATURE_SHUFFLE_BIT, "shuffle"},
      {VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT, "shuffle_relative"},
      {VK_SUBGROUP_FEATURE_CLUSTERED_BIT, "clustered"},
      {VK_SUBGROUP_FEATURE_QUAD_BIT, "quad"},
  }};
  std::vector<std::string> names;
  for (const auto& [bit, name] : kNames) {
    if (operations & bit) names.emplace_back(name);
  }
  return names;
}

std::vector<VulkanMemoryHeap> memory_heaps(const VkPhysicalDeviceMemoryProperties& memory,
                                           const VkPhysicalDeviceMemoryBudgetPropertiesEXT* budget) {
  std::vector<VulkanMemoryHeap> heaps;
  for (std::uint32_t i = 0; i < memory.memoryHeapCount && i < VK_MAX_MEMORY_HEAPS; ++i) {
    VulkanMemoryHeap heap;
    heap.size_bytes = memory.memoryHeaps[i].size;
    heap.device_local = (memory.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
    if (budget) {
      heap.budget_clamped = budget->heapBudget[i] > heap.size_bytes;
      heap.budget_bytes = heap.budget_clamped ? heap.size_bytes : budget->heapBudget[i];
      heap.usage_bytes = budget->heapUsage[i];
    }
    heaps.push_back(heap);
  }
  return heaps;
}

bool has_unified_memory(const VkPhysicalDeviceMemoryProperties& memory, VkPhysicalDeviceType type) {
  if (type != VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU && type != VK_PHYSICAL_DEVICE_TYPE_CPU) return false;
  constexpr VkMemoryPropertyFlags kShared = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
  for (std::uint32_t i = 0; i < memory.memoryTypeCount && i < VK_MAX_MEMORY_TYPES; ++i) {
    const VkMemoryType& memory_type = memory.memoryTypes[i];
    if ((memory_type.propertyFlags & kShared) != kShared || memory_type.heapIndex >= memory.memoryHeapCount) continue;
    if (memory.memoryHeaps[memory_type.heapIndex].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) return true;
  }
  return false;
}

std::string vulkan_version_text(std::uint32_t version) {
  return std::to_string(VK_API_VERSION_MAJOR(version)) + "." + std::to_string(VK_API_VERSION_MINOR(version)) + "." +
         std::to_string(VK_API_VERSION_PATCH(version));
}

std::string device_type_name(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

std::string uuid_hex(const std::uint8_t (&uuid)[VK_UUID_SIZE]) {
  std::string text;
  char digits[3];
  for (std::uint8_t byte : uuid) {
    std::snprintf(digits, sizeof digits, "%02x", byte);
    text += digits;
  }
  return text;
}

}  // namespace coli::probe
