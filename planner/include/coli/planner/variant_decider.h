// Which GPU (if any) runs the expert GEMV, and which shader variant for each
// expert shape: the shader selector (shaders/selection.h) applied to the
// profile's recorded GPU facts, preferring what the profile's self-test
// measured. Never a variant the device cannot fit (field note 3).
#pragma once

#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/planner/footprint.h"
#include "coli/probe/device_profile.h"

namespace coli::planner {

struct VariantChoice {
  std::string shape;    // "gate/up 768x2048", "down 2048x768"
  std::string variant;  // catalogue name
  std::uint32_t shared_memory_bytes = 0;
  std::string reason;   // the selector's reason
  bool operator==(const VariantChoice&) const = default;
};

struct GpuDecision {
  GpuIdentity gpu;                      // index + UUID (+ name); !gpu.chosen() = CPU only
  std::vector<VariantChoice> variants;  // one per expert shape when a GPU is chosen
  std::string reason;
  bool operator==(const GpuDecision&) const = default;
};

// `gpu`: "none", "auto" (the first Vulkan device with a fitting variant for
// every shape), or a device index ("0"): the Vulkan physical-device index,
// so of two identical GPUs "1" is the second. Errors: an unknown index, a forced
// device on which some shape has no fitting variant (named), or no Vulkan
// device in the profile when one is demanded.
// `force_variant` (--gpu-variant): that catalogue variant for every shape,
// refused with both numbers where it does not fit (field note 3).
Result<GpuDecision> decide_gpu(const DeviceProfile& profile, const model::ModelConfig& config, WeightFormat experts,
                               const std::string& gpu, const std::string& force_variant = "");

// ---------------------------------------------------------------- CPU kernel

struct CpuKernelChoice {
  std::string variant;  // kernels/cpu names: "avx512vnni", "avx512", "avx2", "scalar", or "exact"
  std::string reason;
  bool operator==(const CpuKernelChoice&) const = default;
};

// The widest SIMD variant the profile's ISA flags allow (the coli-sweep on
// the H200 machine: avx512vnni 93.8 tok/s vs avx2 86.0 resident decode), or
// --kernel, refused when the profile's CPU lacks its instructions.
Result<CpuKernelChoice> decide_cpu_kernel(const DeviceProfile& profile, const std::string& override_kernel);

}  // namespace coli::planner
