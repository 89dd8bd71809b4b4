// The tensors a checkpoint of each architecture must contain, with the shape
// implied by its ModelConfig (torch nn.Linear weights are [out, in]).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "coli/model/model_config.h"

namespace coli::model {

enum class TensorRole {
  Embedding,     // model.embed_tokens.weight
  FinalNorm,     // model.norm.weight
  LmHead,        // lm_head.weight (absent when tied)
  LayerNorm,     // input_layernorm / post_attention_layernorm
  Attention,     // q/k/v/o projections and their biases (MLA: q_a/q_b/kv_a/kv_b/o, indexer)
  QkNorm,        // q_norm / k_norm (MLA: q_a_layernorm, kv_a_layernorm, indexer k_norm)
  Router,        // the MoE gate (and deepseek's e_score_correction_bias)
  Expert,        // one routed expert's gate/up/down
  SharedExpert,  // qwen2_moe shared_expert.* and shared_expert_gate; deepseek shared_experts.*
  DenseMlp,      // a non-MoE layer's MLP (qwen mlp_only_layers, deepseek first_k_dense_replace)
  Mtp,           // a multi-token-prediction module (mtp_tensors only; not needed to generate)
};

struct ExpectedTensor {
  std::string name;
  std::vector<std::uint64_t> shape;
  TensorRole role = TensorRole::Embedding;
  int layer = -1;   // -1: not in a decoder layer
  int expert = -1;  // -1: not a routed expert
  std::string shape_source;  // which config fields give the shape, for messages
};

std::string_view tensor_role_name(TensorRole role);

// Every tensor the model needs, in layer order. Multi-token-prediction
// modules (num_nextn_predict_layers) are not needed to generate and are left
// out; mtp_tensors() lists them.
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config);

// The tensors of the multi-token-prediction modules (deepseek_v3 /
// glm_moe_dsa model.layers.<num_hidden_layers + i>): a full MoE decoder
// layer plus enorm, hnorm, eh_proj and shared_head.norm; embed_tokens and
// shared_head.head share the main model's. Empty when there are none.
std::vector<ExpectedTensor> mtp_tensors(const ModelConfig& config);

// The parameter name prefix of the MoE block: "model.layers.3.mlp" or
// "model.layers.3.block_sparse_moe" (mixtral).
std::string moe_block_prefix(const ModelConfig& config, std::uint64_t layer);

}  // namespace coli::model
