// Which of a hybrid prefill batch's experts outside VRAM go up to the GPU
// and which the CPU computes (issue 14): per expert, by its token count,
// from what copying one record up and computing one choice on the CPU cost
// in this run so far. Plain C++ (tests run it without a device).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "coli/gpu/gpu_decoder.h"

namespace coli::cuda {

enum class HostExpertPlace { unused, upload, cpu };

// Seconds measured so far; 0 = not measured yet.
struct HostExpertCosts {
  double upload_per_expert = 0;  // one record read from the host store and copied up (the GPU's compute apart)
  double cpu_per_choice = 0;     // one token's expert FFN on the CPU, within a batch
  double cpu_per_layer = 0;      // what using the CPU at all costs a layer: its input rows down, the wait for them

  // A new measurement weighs as much as everything before it (the store's
  // cache warms, the batch sizes change).
  static double blend(double before, double measured) { return before > 0 ? 0.5 * (before + measured) : measured; }
};

// tokens[i]: the batch's choices of host expert i (0: unused). Measured
// mode: copied up unless its tokens take the CPU less time than the copy,
// and only where the copies the CPU saves the layer outweigh the layer's
// fixed cost of using the CPU. Until a cost is measured, the expert with
// the fewest tokens goes to the CPU (measuring it cheaply) and the others
// go up.
inline std::vector<HostExpertPlace> place_host_experts(std::span<const int> tokens, const HostExpertCosts& costs,
                                                       gpu::HostExpertMode mode) {
  std::vector<HostExpertPlace> out(tokens.size(), HostExpertPlace::unused);
  const bool measured = costs.upload_per_expert > 0 && costs.cpu_per_choice > 0;
  std::size_t fewest = tokens.size();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] <= 0) continue;
    if (fewest == tokens.size() || tokens[i] < tokens[fewest]) fewest = i;
    const bool cpu = mode == gpu::HostExpertMode::cpu ||
                     (mode == gpu::HostExpertMode::measured && measured &&
                      tokens[i] * costs.cpu_per_choice < costs.upload_per_expert);
    out[i] = cpu ? HostExpertPlace::cpu : HostExpertPlace::upload;
  }
  if (mode == gpu::HostExpertMode::measured && measured) {
    double saved = 0;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (out[i] == HostExpertPlace::cpu) saved += costs.upload_per_expert - tokens[i] * costs.cpu_per_choice;
    }
    if (saved <= costs.cpu_per_layer) std::replace(out.begin(), out.end(), HostExpertPlace::cpu, HostExpertPlace::upload);
  }
  if (mode == gpu::HostExpertMode::measured && !measured && fewest < tokens.size()) {
    const auto used = std::count_if(tokens.begin(), tokens.end(), [](int t) { return t > 0; });
    if (costs.cpu_per_choice <= 0 && (used > 1 || costs.upload_per_expert > 0)) out[fewest] = HostExpertPlace::cpu;
  }
  return out;
}

}  // namespace coli::cuda
