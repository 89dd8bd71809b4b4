// A profile's CPU figures timed again on this machine: the tuning phase's
// kernel points for some thread sets, OpenMP's fixed costs for their team
// sizes, and RAM bandwidth, put in place of the profile's own. A machine's
// speed moves after its probe (the H200 machine ran its kernels 14-18% away from the probe's
// figures minutes later, either way; the 2-core VM 22-29%), and a prediction
// from stale points carries that whole (docs/benchmarks.md, session 27).
// coli-plan --retime and coli-sweep --retime both use it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/probe/device_profile.h"
#include "measure/kernel_tuning.h"

namespace coli::probe {

struct RetimedMeasurements {
  KernelTuning kernels;
  ParallelOverhead parallel;
  // The sets' slowdown beside reads, where the profile measured it and its
  // disk directory is here; `interference_note` says why not otherwise.
  std::optional<ReadInterference> interference;
  std::string interference_note;
  // RAM bandwidth timed again with the profile's buffer size, where the
  // profile measured it; `memory_note` says why not otherwise.
  std::optional<MemoryBandwidth> memory;
  std::string memory_note;
};

// The seconds RAM bandwidth is timed again in: 0.75 s a read point the profile
// has (the probe's least), at least 4 (the first touch of buffers larger
// than a big last-level cache) and at most 8; 0 where it has no read
// point (then it is not timed again).
double retime_memory_seconds(const DeviceProfile& profile);

// The tuning phase over `sets` (seconds_per_set each, as the probe gives each
// set 4), OpenMP's fixed costs for their team sizes and, where the profile
// has them, the sets' slowdown beside reads (in the profile's disk
// directory) and RAM bandwidth (the H100 box's probe right after a 3.8 GB
// container was written read 71.0 GB/s at 8 threads where the machine's
// earlier probes read 80.5, and the kernels re-timed did not carry that to
// the terms priced by RAM reads). An error when `sets` is empty or the
// tuning fails.
Result<RetimedMeasurements> retime_measurements(const DeviceProfile& profile, const std::vector<ThreadCandidate>& sets,
                                                double seconds_per_set);

// The probe's candidates whose PUs the profile's kernel points cover, in the
// probe's order (the sets a plan predicts between), or every candidate where
// the profile has no kernel point (coli-probe --quick, or another class's
// profile re-validated here); `threads` > 0 keeps those of that many threads.
std::vector<ThreadCandidate> timed_thread_sets(const DeviceProfile& profile, int threads = 0);

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
// "; beside reads kind0:1c +12% (was +10%), kind0:2c +30% (was +34%)", or
// why they were not timed again; "" where the profile had none.
std::string interference_drift_text(const DeviceProfile& profile, const RetimedMeasurements& retimed);
// "; RAM read 1t 30.1 GB/s (was 34.5), 2t 41.0 (was 40.2)", or why it was
// not timed again; "" where the profile had none.
std::string memory_drift_text(const DeviceProfile& profile, const RetimedMeasurements& retimed);
// What moved besides the kernel points, as coli-plan and coli-sweep print it
// after their kernel drift: the reads beside compute, then RAM (the two above).
std::string measurements_drift_text(const DeviceProfile& profile, const RetimedMeasurements& retimed);

}  // namespace coli::probe
