#include "coli/backend/backend_props.h"

#include <algorithm>

namespace coli::backend {

std::string_view backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::cpu: return "cpu";
    case BackendKind::vulkan: return "vulkan";
    case BackendKind::cuda: return "cuda";
  }
  return "?";
}

BackendProps cpu_props(const DeviceProfile& profile, std::string cpu_kernel, int threads) {
  BackendProps props;
  props.kind = BackendKind::cpu;
  props.name = "cpu";
  props.total_memory_bytes = profile.memory.total_bytes;
  props.free_memory_bytes = profile.memory.headroom_bytes;
  props.unified_memory = true;
  props.cpu_kernel = std::move(cpu_kernel);
  props.threads = std::max(1, threads);
  return props;
}

BackendProps vulkan_props(const VulkanDevice& device, int index) {
  BackendProps props;
  props.kind = BackendKind::vulkan;
  props.name = device.name;
  props.device_index = index;
  props.uuid = device.uuid;
  // The largest device-local heap: its budget (VK_EXT_memory_budget) is what
  // is free, its size the total.
  for (const VulkanMemoryHeap& heap : device.heaps) {
    if (!heap.device_local || heap.size_bytes <= props.total_memory_bytes) continue;
    props.total_memory_bytes = heap.size_bytes;
    props.free_memory_bytes = heap.budget_bytes.value_or(heap.size_bytes);
  }
  props.unified_memory = device.unified_memory;
  props.max_shared_memory_bytes = device.max_compute_shared_memory_bytes;
  props.subgroup_size = device.subgroup_size;
  return props;
}

BackendProps cuda_props(const CudaDevice& device) {
  BackendProps props;
  props.kind = BackendKind::cuda;
  props.name = device.name;
  props.device_index = device.ordinal;
  props.uuid = device.uuid;
  props.total_memory_bytes = device.total_memory_bytes;
  props.free_memory_bytes = device.free_memory_bytes;
  props.max_shared_memory_bytes = std::max(device.shared_memory_per_block_optin, device.shared_memory_per_block);
  props.subgroup_size = 32;  // a CUDA warp
  return props;
}

std::vector<BackendProps> backends_in_profile(const DeviceProfile& profile) {
  const std::string kernel = profile.measurements.kernel_tuning ? profile.measurements.kernel_tuning->cpu_kernel : "";
  std::vector<BackendProps> all{cpu_props(profile, kernel, profile.threads.decode_threads)};
  all.back().compute_pus = profile.threads.decode_pus;
  for (std::size_t i = 0; i < profile.gpus.vulkan.size(); ++i) {
    all.push_back(vulkan_props(profile.gpus.vulkan[i], static_cast<int>(i)));
  }
  for (const CudaDevice& device : profile.gpus.cuda) all.push_back(cuda_props(device));
  return all;
}

}  // namespace coli::backend
