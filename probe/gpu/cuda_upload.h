// Host-to-device upload bandwidth of every CUDA device through the driver API
// (opened at run time like cuda_probe): a pinned host buffer (cuMemAllocHost)
// copied with cuMemcpyHtoD into device memory, repeated within a budget.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "coli/probe/device_profile.h"

namespace coli::probe {

struct CudaUploadResult {
  std::string status;  // "cuda: 1 of 1 device(s) measured", or why nothing was
  std::vector<UploadBandwidthPoint> points;
};

// Never throws; a missing driver or device becomes the status.
CudaUploadResult measure_cuda_uploads(std::size_t block_bytes, double budget_seconds);

}  // namespace coli::probe
