// Memory facts and the headroom the planner may use: /proc/meminfo, cgroup v2
// (memory.max/current/stat, walking ancestor groups) and cgroup v1
// (memory.limit_in_bytes/usage_in_bytes/stat), cross-checked against the
// topology's NUMA total. Each number records where it came from and whether
// it was believed.
#pragma once

#include <cstdint>
#include <optional>

#include "coli/base/files.h"
#include "coli/base/result.h"
#include "coli/probe/device_profile.h"

namespace coli::probe {

// `numa_total_bytes`: sum of NUMA node memory from the topology source, used
// only as a cross-check (hwloc under-reports on some VMs). Errors only when
// /proc/meminfo is missing or unreadable (naming the path).
Result<MemoryFacts> read_memory_facts(const SystemRoot& root, std::optional<std::uint64_t> numa_total_bytes);

// Facts for a machine described only by a total (macOS replay: hw.memsize).
MemoryFacts memory_facts_from_total(std::uint64_t total_bytes, const std::string& origin);

}  // namespace coli::probe
