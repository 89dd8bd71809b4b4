// Memory read and triad bandwidth per thread count and per CPU kind, with
// threads pinned to the PUs the engine would use.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "coli/base/result.h"
#include "coli/probe/device_profile.h"

namespace coli::probe {

using ProgressFn = std::function<void(std::string_view)>;

struct MemoryBandwidthOptions {
  double budget_seconds = 12;          // whole measurement, all points
  std::uint64_t max_buffer_bytes = 0;  // per array; 0 = derive from caches and headroom
};

// Bytes per array: 16 times the last-level cache (a hybrid CPU's shared L3
// once) within 64 MiB..2 GiB, at most `max_buffer_bytes` where given and
// three arrays within an eighth of the memory headroom. Errors: unknown
// headroom, or too little of it for 1 MiB arrays.
Result<std::uint64_t> memory_buffer_bytes(const CpuFacts& cpu, const MemoryFacts& memory, const MemoryBandwidthOptions& options);

Result<MemoryBandwidth> measure_memory_bandwidth(const CpuFacts& cpu, const MemoryFacts& memory,
                                                 const MemoryBandwidthOptions& options, const ProgressFn& progress);

}  // namespace coli::probe
