// macOS CPU facts from sysctl: hw.nperflevels and hw.perflevelN.* (logicalcpu,
// physicalcpu, name, l1/l2 cache sizes), machdep.cpu.brand_string, hw.optional.*
// ISA flags, hw.memsize. The parser is platform-independent so Linux tests
// replay recorded `sysctl -a`-style text ("name: value" per line).
#pragma once

#include <string>
#include <string_view>

#include "coli/base/result.h"
#include "coli/probe/device_profile.h"

namespace coli::probe {

// `source_name` is recorded as topology_source ("sysctl:<file>" or "sysctl:live")
// and named in errors. Fills everything CpuFacts holds, isa and usable
// included (on macOS all CPUs are usable: no affinity, no cgroups).
Result<CpuFacts> cpu_facts_from_sysctl(std::string_view sysctl_text, const std::string& source_name);

// hw.memsize from the same text; nullopt when absent.
std::optional<std::uint64_t> memsize_from_sysctl(std::string_view sysctl_text);

#if defined(__APPLE__)
// Reads the live values through sysctlbyname and renders them in the same text form.
Result<std::string> read_live_sysctl_text();
#endif

}  // namespace coli::probe
