// coli-sweep --retime: the profile's CPU measurements timed again before each
// repeat of the grid, so the grid's runs are also predicted from the machine
// as it is while they run. A shared VM's speed moves 20-48% within minutes
// (docs/benchmarks.md, session 26): a prediction from a probe taken before
// that cannot hold within 10%, and the error against the re-timed points
// says what the model gets wrong apart from the machine's drift. Pure: the
// measuring is in sweep_run.h (retime_measurements).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "coli/experts/read_rounds.h"
#include "coli/probe/device_profile.h"
#include "sweep_grid.h"

namespace coli::bench {

// The CPU figures timed again: the tuning phase's kernel points for the
// grid's thread sets and OpenMP's fixed costs for their team sizes.
struct RetimedMeasurements {
  KernelTuning kernels;
  ParallelOverhead parallel;
};

// The grid's distinct CPU thread sets (a planned prefill set too), in grid order.
std::vector<ThreadSet> grid_thread_sets(const std::vector<SweepConfig>& grid);

// `profile` with the re-timed figures in place of its own: a kernel point is
// replaced where one of the same kernel and PUs was re-timed, a parallel
// overhead point where one of the same team size was; the rest are kept.
DeviceProfile with_retimed(const DeviceProfile& profile, const RetimedMeasurements& retimed);

// How far one thread set's kernel points moved since the probe: the median
// over its kernels of re-timed GB/s / the profile's (1.0: unchanged, 0.8:
// the machine runs them 20% slower now), over `kernels` points present in both.
struct SetDrift {
  std::string thread_set;  // the re-timed points' name ("kind0:2c")
  int threads = 0;
  int kernels = 0;
  double ratio = 0;
};
std::vector<SetDrift> kernel_drift(const DeviceProfile& profile, const KernelTuning& retimed);
std::string drift_text(const std::vector<SetDrift>& drift);  // "kind0:1c 0.78x (31 kernels), kind0:2c 0.95x (31 kernels)"

// How far the engine's read rounds moved: per setting (record size, I/O
// pool, team) in both lists with one-read rounds, the mean seconds of a
// one-read round before and now: "; one-read rounds beside 8 threads
// 0.22 ms (were 0.10)", or "" where no setting is in both.
std::string read_round_drift(std::span<const experts::ReadRounds> before, std::span<const experts::ReadRounds> now);

}  // namespace coli::bench
