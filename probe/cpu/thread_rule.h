// The thread rule used until measured self-tuning replaces it: a pure
// function of CPU facts, tested with made-up machines.
//   one kind:       one thread per usable physical core
//   several kinds:  the usable cores of every kind except rank 0 (the
//                   lowest-performance / efficiency kind)
//   never SMT siblings; capped by the cgroup CPU quota (rounded down, >= 1)
#pragma once

#include "coli/probe/device_profile.h"

namespace coli::probe {

ThreadRecommendation recommend_threads(const CpuFacts& cpu);

}  // namespace coli::probe
