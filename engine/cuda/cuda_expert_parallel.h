// The MoE decoder over the GPUs of one host (issue 18's expert
// parallelism): one CudaDecoder per GPU ("rank"), the dense weights
// replicated on each, each GPU holding only its share of every MoE layer's
// experts (DecoderModel::expert_gpu). Every rank runs the same attention and
// router; each computes only the choices whose expert it holds (rank 0 also
// those on no GPU, through the host's expert store, as a hybrid plan), and
// NCCL's all-reduce (sum) of each MoE layer's output, captured in every
// rank's CUDA graph, leaves every rank the same hidden state; rank 0's
// logits are the answer. Rank 0 runs on the calling thread (the engine's:
// its OpenMP team computes the host's experts, as with one GPU); every
// other rank has a host thread of its own replaying its graphs, bound to its
// GPU's local CPUs when given (rank_threads.h). Prefill batches end each MoE
// layer with the same all-reduce over the batch's rows.
//
// With one GPU and ExpertExchange::automatic there is no exchange (and no
// NCCL): the rank's decoder is the plain CudaDecoder's, same tokens and
// logits. A rank that fails aborts the communicators (the others stop
// waiting in their all-reduce) and the decoder refuses further forwards.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/gpu/gpu_decoder.h"

namespace coli::cuda {

class ExpertParallelDecoder final : public gpu::GpuDecoder {
 public:
  // Errors, before anything is allocated: no CUDA device or fewer than the
  // placement names, a GPU named twice, a placement of another model's
  // shape, no NCCL (or too old) where an exchange is needed, CPUs this
  // process may not use; then any rank's CudaDecoder error, with its rank.
  static Result<std::unique_ptr<ExpertParallelDecoder>> create(const gpu::DecoderModel& model);
  ~ExpertParallelDecoder() override;
  ExpertParallelDecoder(const ExpertParallelDecoder&) = delete;
  ExpertParallelDecoder& operator=(const ExpertParallelDecoder&) = delete;

  Status forward(std::span<const std::int32_t> tokens, int start_position, std::span<float> logits,
                 gpu::HostExperts* host) override;
  // The sum over the GPUs; device_memory() has each GPU's.
  const gpu::DecoderMemory& memory() const override;
  const std::vector<gpu::DecoderMemory>& device_memory() const;
  void add_routing_counts(std::vector<std::vector<std::uint64_t>>& counts) const override;
  std::vector<std::string> kernel_names() const override;
  bool hybrid() const override;
  std::string device_name() const override;
  int ranks() const;
  // "NCCL 2.27.3 (path)", or "none (one GPU)".
  std::string exchange() const;

 private:
  struct State;
  explicit ExpertParallelDecoder(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// The CUDA backend's decoder for `model`: the expert-parallel one when
// model.devices names any GPU, else CudaDecoder on device `gpu_index`.
Result<std::unique_ptr<gpu::GpuDecoder>> create_cuda_decoder(int gpu_index, const gpu::DecoderModel& model);

}  // namespace coli::cuda
