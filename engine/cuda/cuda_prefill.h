// A prompt's tokens through the CUDA decoder as batches (issue 14's
// grouped-GEMM prefill): every projection one matrix-matrix launch over the
// batch's tokens, the batch's expert choices grouped by VRAM slot on the
// device, so each expert's weights are read once per 64 of its tokens
// instead of once per token. Hybrid plans too: at each hybrid MoE layer the
// host takes over between the routing and the weighted sum
// (BatchHostExperts, cuda_hybrid_prefill.h), copying experts up into a
// staging slab or computing them on the CPU.
#pragma once

#include <array>
#include <map>
#include <string>

#include "cuda/cuda_layout.h"
#include "cuda/cuda_step.h"

namespace coli::cuda {

struct BatchBuffers {
  DeviceBuffer x, h, h_half, q, k, v, attn, attn_half, mlp_a, shared_out, shared_gate, router_logits, choices, offsets,
      order, act, rows;
  DeviceBuffer staging, staged_order, staged_offsets;  // hybrid plans only (cuda_layout.h)
  int tokens = 0;  // the most one batch takes; 0: no batched prefill
  int staging_records = 0;
  std::array<const DeviceBuffer*, 20> all() const;
  std::uint64_t bytes() const;
  std::uint64_t page_rounding() const;  // cuda_layout.h's page_rounding over every buffer
};

// Errors name the allocation that failed; `tokens` < 2 allocates nothing
// (BatchBuffers::tokens stays 0). `staging_records` > 0 (hybrid plans:
// cuda_layout.h's staging_records) adds the staging slab.
Result<BatchBuffers> make_batch_buffers(const model::ModelConfig& c, int tokens, int staging_records,
                                        std::uint64_t record_stride);

// Where a hybrid MoE layer of a batch hands over to the host: after the
// routing, send() queues the choices' copy down; after the device's own
// experts are queued, complete() waits for it and queues the rest of the
// layer's experts (records copied up and computed with
// record_grouped_experts, rows the CPU computed from input rows it fetches
// only then) before the weighted sum.
class BatchHostExperts {
 public:
  virtual ~BatchHostExperts() = default;
  virtual Status send(int moe_layer, int tokens) = 0;
  virtual Status complete(int moe_layer, int tokens) = 0;
};

// The grouped gate/up + SwiGLU and down launches of `slots` expert records
// laid out from `slab` (record_stride apart) over the batch's choices:
// record z takes the choices order[offsets[z] .. offsets[z + 1]) (device
// pointers), reads h and writes its rows of act and rows.
Status record_grouped_experts(LaunchRecorder& r, const kernels::cuda::ExpertRecordLayout& layout,
                              const std::uint8_t* slab, int slots, const int* order, const int* offsets,
                              BatchBuffers& b, int tokens, int top_k);

// Launches `tokens` tokens (rows of batch.x, at positions *step.position +
// t) through every layer on `stream`: their K and V land in step.kv, their
// routing in step.counts, and batch.x holds their hidden states after the
// last layer. `exact`: attention in f32 (DecoderModel::exact_activations);
// else layers whose q projection is not f32 attend on the tensor cores.
// `host` takes over at hybrid layers (required when there are any). Errors
// name the launch that failed.
Status record_batch(void* stream, const model::ModelConfig& c, const CudaWeights& w, StepBuffers& step,
                    BatchBuffers& batch, int tokens, bool exact, std::map<std::string, int>& launches,
                    BatchHostExperts* host, LaunchObserver* observer = nullptr);

}  // namespace coli::cuda
