// CPU topology through hwloc: packages, cores, PUs, caches per kind, NUMA
// nodes and CPU kinds. Reads the live machine, or an hwloc XML file
// (lstopo --of xml) so tests replay real and spec-built machines.
#pragma once

#include <filesystem>
#include <optional>

#include "coli/base/result.h"
#include "coli/probe/device_profile.h"

namespace coli::probe {

// Fills arch, vendor, model, packages, cores, pus, kinds (ranked), caches,
// numa_nodes and topology_source. Leaves isa and usable to their own readers.
// `xml`: nullopt = live machine. Errors name the XML file and hwloc's reason.
Result<CpuFacts> read_hwloc_topology(const std::optional<std::filesystem::path>& xml);

}  // namespace coli::probe
