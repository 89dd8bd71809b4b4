// The CUDA self-test (coli-probe --gpu-selftest, next to the Vulkan one): on
// each CUDA device, the decoder's own matvec kernel (kernels/cuda
// decoder::matvec) for q8_row and q4_g64 at the MoE decode shapes, checked
// against the scalar CPU reference and timed over a weight pool larger than
// the L2 cache. The results go to the profile as GpuKernelResult with backend
// "cuda" (variant "cuda_matvec_<format>", device_index the CUDA ordinal), so
// `coli-plan --gpu auto` can choose the CUDA decoder by measurement and the
// speed model has its VRAM term.
#pragma once

#include <vector>

#include "coli/probe/device_profile.h"

namespace coli::cuda {

struct CudaSelftestOptions {
  std::vector<std::pair<int, int>> shapes = {{1024, 2048}, {2048, 1024}, {4096, 4096}};  // rows x cols
  std::uint64_t pool_bytes = 512ull << 20;  // weights timed round-robin: past a 60 MB L2
  double seconds_per_case = 0.3;
  std::uint64_t seed = 1;
};

// One result per (device, format, shape); a device-level line (variant "")
// when there is no driver or device, or a device cannot be used. Never fails.
std::vector<GpuKernelResult> run_cuda_selftest(const CudaSelftestOptions& options = {});

}  // namespace coli::cuda
