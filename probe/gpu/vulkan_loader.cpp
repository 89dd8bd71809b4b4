#include "gpu/vulkan_loader.h"

#include <dlfcn.h>

#include <cstdlib>

namespace coli::vk {

Result<std::shared_ptr<const Loader>> Loader::open() {
  const char* override_path = std::getenv("COLI_VULKAN_LIBRARY");
  const std::string library = override_path && *override_path ? override_path : "libvulkan.so.1";
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* reason = ::dlerror();
    return make_error("no Vulkan loader (" + library + " not found: " + (reason ? reason : "unknown") +
                      "); Vulkan is off. Install libvulkan1 and a driver (e.g. mesa-vulkan-drivers) to use it");
  }
  std::shared_ptr<Loader> loader(new Loader());
  loader->handle_ = handle;
  loader->library = library;
  loader->vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(::dlsym(handle, "vkGetInstanceProcAddr"));
  if (!loader->vkGetInstanceProcAddr) return make_error(library + " has no vkGetInstanceProcAddr: not a Vulkan loader");
#define COLI_LOAD_GLOBAL(name) \
  loader->name = reinterpret_cast<PFN_##name>(loader->vkGetInstanceProcAddr(VK_NULL_HANDLE, #name));
  COLI_VK_GLOBAL_FUNCTIONS(COLI_LOAD_GLOBAL)
#undef COLI_LOAD_GLOBAL
  if (!loader->vkCreateInstance) return make_error(library + " does not provide vkCreateInstance");
  return std::shared_ptr<const Loader>(std::move(loader));
}

Loader::~Loader() {
  if (handle_) ::dlclose(handle_);
}

Result<InstanceFunctions> InstanceFunctions::load(const Loader& loader, VkInstance instance) {
  InstanceFunctions functions;
#define COLI_LOAD_INSTANCE(name)                                                                  \
  functions.name = reinterpret_cast<PFN_##name>(loader.vkGetInstanceProcAddr(instance, #name)); \
  if (!functions.name) return make_error("Vulkan instance function " #name " is missing");
  COLI_VK_INSTANCE_FUNCTIONS(COLI_LOAD_INSTANCE)
#undef COLI_LOAD_INSTANCE
  return functions;
}

Result<DeviceFunctions> DeviceFunctions::load(const InstanceFunctions& instance, VkDevice device) {
  DeviceFunctions functions;
#define COLI_LOAD_DEVICE(name)                                                              \
  functions.name = reinterpret_cast<PFN_##name>(instance.vkGetDeviceProcAddr(device, #name)); \
  if (!functions.name) return make_error("Vulkan device function " #name " is missing");
  COLI_VK_DEVICE_FUNCTIONS(COLI_LOAD_DEVICE)
#undef COLI_LOAD_DEVICE
  return functions;
}

std::string result_name(VkResult result) {
  switch (result) {
#define COLI_CASE(name) \
  case name:            \
    return #name " (" + std::to_string(static_cast<int>(result)) + ")";
    COLI_CASE(VK_SUCCESS)
    COLI_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    COLI_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    COLI_CASE(VK_ERROR_INITIALIZATION_FAILED)
    COLI_CASE(VK_ERROR_DEVICE_LOST)
    COLI_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    COLI_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    COLI_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    COLI_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    COLI_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    COLI_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    COLI_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
#undef COLI_CASE
    default:
      return "VkResult " + std::to_string(static_cast<int>(result));
  }
}

}  // namespace coli::vk
