// A prompt's tokens through the CUDA decoder as batches (issue 14's
// grouped-GEMM prefill): every projection one matrix-matrix launch over the
// batch's tokens, the batch's expert choices grouped by VRAM slot on the
// device, so each expert's weights are read once per 64 of its tokens
// instead of once per token. Plans whose experts all sit in VRAM; hybrid
// plans prefill token by token through the decode graph.
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
  int tokens = 0;  // the most one batch takes; 0: no batched prefill
  std::array<const DeviceBuffer*, 17> all() const;
  std::uint64_t bytes() const;
  std::uint64_t page_rounding() const;  // cuda_layout.h's page_rounding over every buffer
};

// Errors name the allocation that failed; `tokens` < 2 or a hybrid plan
// allocates nothing (BatchBuffers::tokens stays 0).
Result<BatchBuffers> make_batch_buffers(const model::ModelConfig& c, int tokens, bool hybrid);

// Launches `tokens` tokens (rows of batch.x, at positions *step.position +
// t) through every layer on `stream`: their K and V land in step.kv, their
// routing in step.counts, and batch.x holds their hidden states after the
// last layer. `exact`: attention in f32 (DecoderModel::exact_activations);
// else layers whose q projection is not f32 attend on the tensor cores.
// Errors name the launch that failed.
Status record_batch(void* stream, const model::ModelConfig& c, const CudaWeights& w, StepBuffers& step,
                    BatchBuffers& batch, int tokens, bool exact, std::map<std::string, int>& launches,
                    LaunchObserver* observer = nullptr);

}  // namespace coli::cuda
