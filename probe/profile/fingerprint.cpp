// The hardware fingerprint: a hash of what makes two machines the same for
// tuning purposes. Only stable identity goes in (CPU model, kinds, counts,
// ISA, RAM total rounded to GiB), never free memory, dates or host names.
#include <cstdio>
#include <string>

#include "coli/probe/fleet.h"
#include "coli/probe/profile_io.h"

namespace coli {
namespace {

std::uint64_t fnv1a64(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string fingerprint_basis(const DeviceProfile& profile) {
  const CpuFacts& cpu = profile.cpu;
  std::string basis = "arch=" + cpu.arch + ";vendor=" + cpu.vendor + ";model=" + cpu.model +
                      ";packages=" + std::to_string(cpu.packages) + ";cores=" + std::to_string(cpu.cores) +
                      ";pus=" + std::to_string(cpu.pus) + ";kinds=";
  for (const CpuKind& kind : cpu.kinds) {
    basis += "[" + std::to_string(kind.rank) + ":" + kind.core_type + ":" + std::to_string(kind.cores) + "c:" +
             kind.pus.to_list() + "]";
  }
  basis += ";isa=";
  for (const std::string& flag : cpu.isa) basis += flag + ",";
  // Kernels reserve slightly different amounts; a GiB is coarse enough to be
  // stable across boots and fine enough to tell a 24 GiB box from a 32 GiB one.
  const std::uint64_t gib = (profile.memory.total_bytes + (1ull << 29)) >> 30;
  basis += ";ram_gib=" + std::to_string(gib);
  // GPU models, not driver versions or free memory (fleet classes add drivers).
  for (const VulkanDevice& gpu : profile.gpus.vulkan) {
    char ids[32];
    std::snprintf(ids, sizeof ids, "%04x:%04x", gpu.vendor_id, gpu.device_id);
    basis += ";vk=" + gpu.name + "@" + ids;
  }
  for (const CudaDevice& gpu : profile.gpus.cuda) {
    basis += ";cuda=" + gpu.name + "@sm_" + std::to_string(gpu.compute_capability_major) +
             std::to_string(gpu.compute_capability_minor);
  }
  // How several GPUs are wired (paths, link counts, NUMA nodes; never bus ids
  // or bandwidths): only with 2+, so one-GPU fingerprints stay as they were.
  if (profile.gpus.cuda.size() >= 2) {
    basis += ";cuda_numa=";
    for (const CudaDevice& gpu : profile.gpus.cuda) basis += std::to_string(gpu.numa_node) + ",";
    basis += ";cuda_links=";
    for (const GpuLink& link : profile.gpus.links) {
      basis += std::to_string(link.a) + "-" + std::to_string(link.b) + ":" + link.path + "x" + std::to_string(link.nvlinks) + ",";
    }
  }
  return basis;
}

}  // namespace

std::string fleet::fnv1a64_hex(std::string_view text) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a64(text)));
  return hex;
}

void assign_fingerprint(DeviceProfile& profile) {
  profile.fingerprint_basis = fingerprint_basis(profile);
  profile.fingerprint = "fnv1a64:" + fleet::fnv1a64_hex(profile.fingerprint_basis);
}

}  // namespace coli
