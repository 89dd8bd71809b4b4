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
  std::string gpu;                      // "" = CPU only
  std::vector<VariantChoice> variants;  // one per expert shape when a GPU is chosen
  std::string reason;
  bool operator==(const GpuDecision&) const = default;
};

// `gpu`: "none", "auto" (the first Vulkan device with a fitting variant for
// every shape), or a device index ("0"). Errors: an unknown index, a forced
// device on which some shape has no fitting variant (named), or no Vulkan
// device in the profile when one is demanded.
Result<GpuDecision> decide_gpu(const DeviceProfile& profile, const model::ModelConfig& config, ExpertFormat experts,
                               const std::string& gpu);

}  // namespace coli::planner
