#include "coli/backend/backend_memory.h"

namespace coli::backend {
namespace {
constexpr std::uint64_t kMiB = 1024 * 1024;
}  // namespace

BackendMemory cpu_backend_memory(const BackendProps& props) {
  BackendMemory b;
  b.name = props.name.empty() ? "cpu" : props.name;
  b.engine_runs_experts = true;
  b.vram_bytes_per_record_byte = 1;  // a slot holds the packed record, in RAM
  b.staging_slots = 0;               // reads land in the slots themselves
  b.driver_host_basis = "no driver: the CPU backend is the engine's own code";
  return b;
}

BackendMemory vulkan_backend_memory([[maybe_unused]] const BackendProps& props) {
  // Nothing here depends on the device yet; a measured driver share or a
  // UMA device's single heap will read `props`.
  BackendMemory b;
  b.name = "vulkan";
  b.engine_runs_experts = false;  // engine/vulkan runs the GEMV self-test; coli run computes experts on the CPU
  b.vram_bytes_per_record_byte = 1;
  b.staging_slots = 2;
  b.driver_host_bytes = 256 * kMiB;
  b.driver_host_basis = "Vulkan driver mapped into the process: 44 MiB measured for lavapipe; 256 MiB assumed "
                        "for vendor drivers until a GPU run measures it";
  return b;
}

}  // namespace coli::backend
