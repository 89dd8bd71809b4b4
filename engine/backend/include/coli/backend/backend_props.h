// What a compute backend is: plain data read from the device profile (the
// probe measured it once; nothing here queries a driver again). Compare
// ggml's backend device props: those are fetched through a global registry
// of function tables at run time; here the profile *is* the registry, so a
// plan, a test or a replayed machine sees exactly the devices the engine will.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/cpu_set.h"
#include "coli/probe/device_profile.h"

namespace coli::backend {

enum class BackendKind { cpu, vulkan, cuda };

std::string_view backend_kind_name(BackendKind kind);  // "cpu", "vulkan", "cuda"

struct BackendProps {
  BackendKind kind = BackendKind::cpu;
  std::string name;                           // "cpu" or the device's name
  int device_index = 0;                       // Vulkan physical device / CUDA ordinal; 0 for the CPU
  std::string uuid;                           // 32 hex digits; "" for the CPU
  std::uint64_t total_memory_bytes = 0;       // device memory (the CPU: MemTotal)
  std::uint64_t free_memory_bytes = 0;        // at probe time (the CPU: the profile's RAM headroom)
  bool unified_memory = false;                // device memory is host memory (the CPU; UMA GPUs)
  std::uint32_t max_shared_memory_bytes = 0;  // per workgroup / block; 0 for the CPU
  std::uint32_t subgroup_size = 0;            // 0 for the CPU
  // The CPU only: the kernel variant ("scalar", "avx2", "avx512",
  // "avx512vnni", or "exact": f32 activations on de-quantised weights), the
  // compute thread count and the PUs they are pinned to (empty: unpinned).
  std::string cpu_kernel;
  int threads = 1;
  CpuSet compute_pus;
  bool operator==(const BackendProps&) const = default;
};

// The CPU as the profile describes it, running `cpu_kernel` on `threads`.
BackendProps cpu_props(const DeviceProfile& profile, std::string cpu_kernel, int threads);
// Device `index` of the profile's Vulkan list / CUDA list.
BackendProps vulkan_props(const VulkanDevice& device, int index);
BackendProps cuda_props(const CudaDevice& device);
// Every backend the profile offers: the CPU first (its tuned kernel and
// recommended decode threads), then each Vulkan device, then each CUDA one.
std::vector<BackendProps> backends_in_profile(const DeviceProfile& profile);

}  // namespace coli::backend
