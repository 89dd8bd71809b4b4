#include "cuda/expert_parallel.h"

#include <algorithm>
#include <string>

namespace coli::cuda {

RankExperts rank_experts(const std::vector<std::vector<int>>& expert_gpu, std::span<const int> devices, int rank) {
  RankExperts out;
  const int ordinal = devices[static_cast<std::size_t>(rank)];
  const std::size_t layers = expert_gpu.size();
  out.vram.resize(layers);
  out.host.resize(layers);
  out.remote.resize(layers);
  for (std::size_t l = 0; l < layers; ++l) {
    for (std::size_t e = 0; e < expert_gpu[l].size(); ++e) {
      const int gpu = expert_gpu[l][e];
      const int id = static_cast<int>(e);
      if (gpu == ordinal) {
        out.vram[l].push_back(id);
      } else if (gpu == kOnHost && rank == 0) {
        out.host[l].push_back(id);
      } else {
        out.remote[l].push_back(id);
      }
    }
  }
  return out;
}

namespace {

std::string device_list(std::span<const int> devices) {
  std::string out;
  for (int d : devices) out += (out.empty() ? "" : ",") + std::to_string(d);
  return out;
}

Status check_devices(std::span<const int> devices, int visible_devices) {
  if (devices.empty()) return make_error("the expert-parallel placement names no CUDA device (devices is empty)");
  for (std::size_t r = 0; r < devices.size(); ++r) {
    const int d = devices[r];
    if (d < 0 || d >= visible_devices) {
      return make_error("the expert-parallel placement puts rank " + std::to_string(r) + " on CUDA device " +
                        std::to_string(d) + ", but this machine has " + std::to_string(visible_devices) +
                        " CUDA device(s): re-plan on this machine, or set CUDA_VISIBLE_DEVICES to show them");
    }
    if (std::find(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(r), d) !=
        devices.begin() + static_cast<std::ptrdiff_t>(r)) {
      return make_error("the expert-parallel placement names CUDA device " + std::to_string(d) +
                        " for two ranks; each rank needs its own GPU (NCCL refuses one GPU twice): re-plan");
    }
  }
  return Ok{};
}

}  // namespace

Status check_expert_placement(std::span<const int> devices, const std::vector<std::vector<int>>& expert_gpu,
                              int moe_layers, int experts, int visible_devices) {
  if (Status s = check_devices(devices, visible_devices); !s) return s;
  if (expert_gpu.size() != static_cast<std::size_t>(moe_layers)) {
    return make_error("expert_gpu lists " + std::to_string(expert_gpu.size()) + " MoE layers; the model has " +
                      std::to_string(moe_layers) + ": re-plan for this model");
  }
  std::vector<int> held(devices.size(), 0);
  for (std::size_t l = 0; l < expert_gpu.size(); ++l) {
    if (expert_gpu[l].size() != static_cast<std::size_t>(experts)) {
      return make_error("expert_gpu of MoE layer " + std::to_string(l) + " places " + std::to_string(expert_gpu[l].size()) +
                        " experts; the model has " + std::to_string(experts) + " per layer: re-plan for this model");
    }
    for (std::size_t e = 0; e < expert_gpu[l].size(); ++e) {
      const int gpu = expert_gpu[l][e];
      if (gpu == kOnHost) continue;
      const auto rank = std::find(devices.begin(), devices.end(), gpu);
      if (rank == devices.end()) {
        return make_error("expert_gpu puts expert " + std::to_string(e) + " of MoE layer " + std::to_string(l) +
                          " on CUDA device " + std::to_string(gpu) + ", which the placement's devices (" +
                          device_list(devices) + ") do not list (-1: the host): re-plan");
      }
      ++held[static_cast<std::size_t>(rank - devices.begin())];
    }
  }
  for (std::size_t r = 1; r < held.size(); ++r) {  // rank 0 always runs: it answers with the logits
    if (held[r] == 0) {
      return make_error("rank " + std::to_string(r) + " (CUDA device " + std::to_string(devices[r]) +
                        ") holds no expert: drop that GPU from the placement or give it a share");
    }
  }
  return Ok{};
}

}  // namespace coli::cuda
