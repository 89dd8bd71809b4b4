// The host's half of a hybrid plan's prefill batch (issue 14): at each MoE
// layer with experts outside VRAM, the batch's choices come down, and each
// host expert its tokens chose is either copied up into the staging slab
// and computed there by the grouped GEMMs (its weights cross PCIe once for
// all its tokens), or computed by the CPU (its tokens' input rows down,
// their output rows up), as host_expert_split.h decides from what both cost
// in this run. The device's own experts run meanwhile; the layer's weighted
// sum follows on the stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "coli/gpu/gpu_decoder.h"
#include "cuda/cuda_prefill.h"
#include "cuda/host_expert_split.h"
#include "cuda/pinned.h"

namespace coli::cuda {

// What the host's experts cost and where they went, over the decoder's life.
struct HostBatchTally {
  std::uint64_t uploaded = 0, uploaded_bytes = 0, on_cpu = 0, cpu_choices = 0, layers = 0;
  HostExpertCosts costs;
  std::string describe() const;
};

class HybridBatch final : public BatchHostExperts {
 public:
  // Pinned buffers for `tokens`-token batches and staging passes of
  // batch.staging_records records (cuda_layout.h's hybrid_batch_pinned_bytes).
  static Result<std::unique_ptr<HybridBatch>> create(const gpu::DecoderModel& model, const CudaWeights& weights,
                                                     BatchBuffers& batch, cudaStream_t stream);
  ~HybridBatch() override;
  HybridBatch(const HybridBatch&) = delete;
  HybridBatch& operator=(const HybridBatch&) = delete;

  // Before a batch: the host store and where the launches are counted.
  void start(gpu::HostExperts* host, std::map<std::string, int>& launches, LaunchObserver* observer);
  Status send(int moe_layer, int tokens) override;
  Status complete(int moe_layer, int tokens) override;

  std::uint64_t pinned_bytes() const;
  const HostBatchTally& tally() const { return tally_; }

 private:
  HybridBatch(const gpu::DecoderModel& model, const CudaWeights& weights, BatchBuffers& batch, cudaStream_t stream)
      : model_(model), weights_(weights), batch_(batch), stream_(stream) {}
  // The staged experts' choices grouped by staging order, copied up.
  Status send_grouping(std::span<const int> staged, std::span<const int> host_index, std::span<const int> counts);
  Status upload(int moe_layer, std::span<const int> staged, int tokens);
  Status compute_on_cpu(int moe_layer, std::span<const HostExpertPlace> place, std::span<const int> host_index_of_choice,
                        int tokens);

  const gpu::DecoderModel& model_;
  const CudaWeights& weights_;
  BatchBuffers& batch_;
  cudaStream_t stream_;
  gpu::HostExperts* host_ = nullptr;
  std::map<std::string, int>* launches_ = nullptr;
  LaunchObserver* observer_ = nullptr;
  Pinned choices_, inputs_, rows_, order_, offsets_;
  Pinned bounce_[2];  // records on their way up: one filled while the other is copied
  cudaEvent_t bounce_free_[2] = {nullptr, nullptr};
  cudaEvent_t sent_ = nullptr;  // the layer's choices are in pinned memory
  cudaStream_t side_ = nullptr;  // the input rows' copy down, beside the device's own experts
  HostBatchTally tally_;
};

}  // namespace coli::cuda
