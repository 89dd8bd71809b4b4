// OpenMP's fixed costs per team size: an empty region's fork and join, one
// barrier, and the extra of a region whose threads all read floats the
// calling thread has just written (the hidden state between decode steps:
// 8 KiB and 256 B).
// Medians of many repetitions (a region: of 64-region blocks' means, as a
// pass pays them); well under a second in all.
#pragma once

#include <vector>

#include "coli/probe/device_profile.h"

namespace coli::probe {

// Each figure the median of this many timings (the probe's; coli-sweep --retime's).
inline constexpr int kParallelOverheadRepetitions = 2000;

// One point per team size in `threads` (each >= 1), `repetitions` (>= 10) per figure.
ParallelOverhead measure_parallel_overhead(const std::vector<int>& threads, int repetitions);

// 1, 2, 4, ... below `usable_cpus`, then `usable_cpus` itself.
std::vector<int> parallel_overhead_team_sizes(int usable_cpus);

}  // namespace coli::probe
