// Disk read bandwidth on the filesystem of a directory (where the model
// lives): sequential and random reads of expert-sized blocks (1-16 MiB) at
// queue depths 1..8, and random 16 KiB reads (a read's latency) at the same
// depths, O_DIRECT where the filesystem allows it; and random reads in
// batches through the engine's own I/O pool (what a layer's misses wait).
#pragma once

#include <cstdint>
#include <filesystem>

#include "coli/base/result.h"
#include "coli/probe/device_profile.h"
#include "measure/memory_bandwidth.h"

namespace coli::probe {

struct DiskBandwidthOptions {
  double budget_seconds = 10;
  std::uint64_t file_bytes = 0;  // 0 = derive from free space and budget
};

// Creates (and always removes) a temporary file in `directory`. Errors name
// the directory and say what to do (e.g. choose another with --disk-dir).
Result<DiskBandwidth> measure_disk_bandwidth(const std::filesystem::path& directory,
                                             const DiskBandwidthOptions& options, const ProgressFn& progress);

}  // namespace coli::probe
