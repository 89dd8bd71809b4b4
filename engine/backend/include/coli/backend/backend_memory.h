// A backend's memory as plain data, for the planner (which links this
// without any GPU library): the representation it keeps per expert slot on
// the device, the host copies it keeps per device slot, its upload staging
// and its driver's share of host RAM. Field note 4 (a backend keeping an
// unpacked and a packed host copy per slot: 69 GB of RAM for a 23 GB model)
// becomes a priced line instead of an OOM kill. Each backend states its own
// as a function of its props; the planner never keeps a table of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coli/backend/backend_props.h"

namespace coli::backend {

// One copy a backend keeps in host RAM for each expert slot it holds in VRAM.
struct HostCopy {
  std::string name;                  // "packed int4 mirror", "unpacked int8 copy"
  double bytes_per_record_byte = 1;  // its size relative to the container record
  bool operator==(const HostCopy&) const = default;
};

struct BackendMemory {
  std::string name;                       // "vulkan"
  bool engine_runs_experts = false;       // this build's `coli run` computes experts on it
  double vram_bytes_per_record_byte = 1;  // 1: records stay packed in VRAM
  std::vector<HostCopy> host_copies;      // per VRAM slot, in RAM
  int staging_slots = 2;                  // host-visible upload ring, in record strides
  std::uint64_t driver_host_bytes = 0;    // RAM the driver maps into the process (libraries, context)
  std::string driver_host_basis;          // where that number comes from
  // Measured by a running backend (Backend::memory()): bytes of expert slot
  // storage it allocated (before any retire). 0 in a planner's description.
  std::uint64_t slot_bytes_allocated = 0;
  bool operator==(const BackendMemory&) const = default;
};

// The CPU: expert slots are the RAM cache itself (one packed record each),
// no host copies, no staging, no driver.
BackendMemory cpu_backend_memory(const BackendProps& props);
// What engine/vulkan holds: packed records in device-local buffers, no host
// mirror, a two-slot staging ring. The driver's host share is measured for
// lavapipe (44 MiB of LLVM mapped); vendor drivers are taken as 256 MiB
// until a GPU run measures them.
BackendMemory vulkan_backend_memory(const BackendProps& props);

}  // namespace coli::backend
