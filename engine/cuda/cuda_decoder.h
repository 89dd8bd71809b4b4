// The whole MoE decoder on one CUDA device (issue 14): the embedding row
// looked up on the host and copied up, then every layer on the GPU (RMSNorm,
// q/k/v, clip, q/k norms, RoPE, attention over an f32 KV cache in VRAM,
// o-proj, the router's softmax and top-k writing ExpertChoice{slot, weight}
// on the device, the routed experts' gate/up and weighted down, the shared
// expert), the final norm and the lm_head; logits copied back once per call.
//
// One token's step is captured once into a CUDA graph on a non-default
// stream and replayed for every token: the position is read from device
// memory, so the same graph serves every position. A prompt of several
// tokens runs in batches (cuda_prefill.h: matrix-matrix launches, experts
// grouped by slot on the device; at hybrid layers the host's experts are
// copied up or computed on the CPU, cuda_hybrid_prefill.h).
//
// Hybrid plans (experts outside VRAM) as the Vulkan decoder runs them: a
// hybrid MoE layer ends a graph segment after its routing, the host computes
// the choices whose expert has no VRAM slot (HostExperts: the engine's RAM
// cache and disk), and the next segment copies its rows up and combines them
// with the device's, in routing order. That costs a host wait per hybrid
// layer and token.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/gpu/gpu_decoder.h"

namespace coli::cuda {

class MoeReduce;  // cuda_step.h

// What one GPU of an expert-parallel decoder is told besides its model
// (whose vram_experts are its own share): the experts the other GPUs
// compute, and how each MoE layer's output is summed across the GPUs.
struct ExpertRank {
  std::vector<std::vector<int>> remote;  // per MoE layer; empty: none
  MoeReduce* reduce = nullptr;           // null: one GPU, no exchange
  bool answers = true;                   // false: forward() leaves out the head (rank 0's logits are the answer)
};

class CudaDecoder final : public gpu::GpuDecoder {
 public:
  // Uploads weights and the planned experts to CUDA device `device_index`.
  // Errors: no driver or device (with the runtime's reason), a shape or
  // format the kernels cannot take (named), a failed CUDA call (named).
  static Result<std::unique_ptr<CudaDecoder>> create(int device_index, const gpu::DecoderModel& model);
  // One rank of the expert-parallel decoder (cuda_expert_parallel.h):
  // prepare() uploads and allocates (no collective), then capture() runs
  // the first step and captures the graphs, on every rank at once (their
  // all-reduces wait for each other).
  static Result<std::unique_ptr<CudaDecoder>> prepare(int device_index, const gpu::DecoderModel& model,
                                                      const ExpertRank& rank);
  Status capture();
  ~CudaDecoder() override;
  CudaDecoder(const CudaDecoder&) = delete;
  CudaDecoder& operator=(const CudaDecoder&) = delete;

  Status forward(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits,
                 gpu::HostExperts* host) override;
  const gpu::DecoderMemory& memory() const override;
  void add_routing_counts(std::vector<std::vector<std::uint64_t>>& counts) const override;
  std::vector<std::string> kernel_names() const override;
  bool hybrid() const override;
  std::string device_name() const override;

 private:
  struct State;
  explicit CudaDecoder(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace coli::cuda
