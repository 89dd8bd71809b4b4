// The GPU self-test (coli-probe --gpu-selftest): on each Vulkan device, for
// each shape and weight format, every catalogue variant that fits the device
// runs against the scalar CPU reference and is timed; variants that do not
// fit are recorded as skipped with the reason and never run.
//
// Reading the results:
//   variant ""            a device-level status, passed=false, note says why
//                         (no Vulkan loader, no device, device not usable,
//                         or no variant fits a shape)
//   note "skipped: ..."   did not fit; never reached the driver
//   note "chosen ..."     the variant the selector picks for this shape, with
//                         its reason (the selector's choice is also run)
//   gb_per_s.samples = 0  not timed (failed, skipped, or budget spent)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coli/probe/device_profile.h"
#include "coli/shaders/catalogue.h"
#include "vulkan/gemv_runner.h"

namespace coli::vulkan {

struct SelftestShape {
  int rows = 0;
  int cols = 0;
};

struct SelftestOptions {
  std::optional<int> device_index;  // nullopt: every Vulkan device
  // MoE decode shapes: an OLMoE-like expert's up/gate (1024 x 2048) and
  // down (2048 x 1024) projections, and a large dense matrix for bandwidth.
  std::vector<SelftestShape> shapes = {{1024, 2048}, {2048, 1024}, {4096, 4096}};
  std::vector<WeightFormat> formats = {WeightFormat::q8_row, WeightFormat::q4_g64};
  // Pretend each device allows at most this much shared memory (0: its own
  // limit), so a large GPU or CI also covers what a smaller device would run.
  std::uint32_t shared_memory_limit_bytes = 0;
  bool measure_bandwidth = true;
  // Once spent, remaining variants are still checked for correctness but no
  // longer timed (their note says so).
  double time_budget_seconds = 60;
  GemvTimingOptions timing{.min_weight_footprint_bytes = 256ull << 20};
  bool force_staging = false;  // see ContextOptions::force_staging
  std::uint64_t seed = 1;
};

std::vector<GpuKernelResult> run_gpu_selftest(const SelftestOptions& options);

// A fixed-width table for humans: device, variant, shape, shared memory,
// pass/fail with error, GB/s median (best), note.
std::string format_selftest_table(const std::vector<GpuKernelResult>& results);

}  // namespace coli::vulkan
