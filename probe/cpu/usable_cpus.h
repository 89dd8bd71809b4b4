// The CPUs this process may actually run on: affinity mask, cgroup cpuset
// (v2 cpuset.cpus.effective, v1 cpuset.cpus) and CPU quota (v2 cpu.max,
// v1 cpu.cfs_quota_us / cpu.cfs_period_us), read through a SystemRoot so
// containers recorded elsewhere can be replayed.
#pragma once

#include "coli/base/files.h"
#include "coli/probe/device_profile.h"

namespace coli::probe {

// `machine_pus`: every PU the topology knows. Live: affinity from
// sched_getaffinity; replay: Cpus_allowed_list of <root>/proc/self/status
// (all PUs when absent). usable.pus = machine ∩ affinity ∩ cgroup cpuset.
UsableCpus read_usable_cpus(const SystemRoot& root, const CpuSet& machine_pus);

}  // namespace coli::probe
