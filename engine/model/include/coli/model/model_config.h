// config.json of a Hugging Face MoE checkpoint -> ModelConfig. The engine
// runs four architectures (model_type): qwen3_moe, olmoe, mixtral, qwen2_moe;
// two more are read for planning only (coli-plan describes and plans them,
// the engine refuses them): deepseek_v3 (MLA attention, shared experts, dense
// first layers, MTP modules) and glm_moe_dsa (GLM-5: the same plus a DeepSeek
// sparse-attention indexer). Field
// meanings and defaults follow transformers' configuration_<arch>.py and how
// modeling_<arch>.py uses them (see src/model_config.cpp for the per-field
// sources). Anything coli would compute differently is refused, not guessed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/result.h"

namespace coli::model {

enum class Architecture { Qwen3Moe, Olmoe, Mixtral, Qwen2Moe, DeepseekV3, GlmMoeDsa };

// How router logits become expert weights.
enum class RouterNormalization {
  // mixtral: softmax over all logits, top-k, divide by their sum; equal to a
  // softmax over the k selected logits (MixtralSparseMoeBlock.forward).
  TopKSoftmax,
  // softmax over all experts, keep the top-k probabilities as they are
  // (olmoe default, qwen2/3 with norm_topk_prob=false).
  SoftmaxTopK,
  // softmax over all experts, top-k, renormalise to sum 1 (norm_topk_prob=true).
  SoftmaxTopKRenormalized,
  // deepseek_v3 / glm_moe_dsa (scoring_func "sigmoid"): sigmoid scores, the
  // top-k chosen on score + e_score_correction_bias within the best groups,
  // weights renormalised (norm_topk_prob) and scaled by routed_scaling_factor.
  SigmoidTopK,
};

// RMSNorm on queries/keys before RoPE.
enum class QkNorm {
  None,            // mixtral, qwen2_moe
  PerHead,         // qwen3_moe: q_norm/k_norm weight [head_dim], applied per head
  FullProjection,  // olmoe: q_norm [heads*head_dim], k_norm [kv_heads*head_dim]
};

struct RopeScaling {
  std::string type = "default";  // "default" (none), "linear", "yarn"
  double factor = 1.0;
  std::optional<std::uint64_t> original_max_position_embeddings;
  std::optional<double> beta_fast;         // yarn
  std::optional<double> beta_slow;         // yarn
  std::optional<double> attention_factor;  // yarn
};

// Multi-head latent attention (DeepseekV3Attention): queries through a
// low-rank q_a/q_b pair, keys and values through one shared latent of
// kv_lora_rank plus a decoupled RoPE key of qk_rope_head_dim; the KV cache
// holds that latent and RoPE key per layer and position, not per-head K and V.
struct LatentAttention {
  std::uint64_t q_lora_rank = 0;  // 0: q_lora_rank null, q_proj reads the hidden state
  std::uint64_t kv_lora_rank = 0;
  std::uint64_t qk_nope_head_dim = 0;
  std::uint64_t qk_rope_head_dim = 0;
  std::uint64_t v_head_dim = 0;
  std::uint64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

// DeepSeek sparse attention indexer (glm_moe_dsa, as DeepSeek-V3.2): per
// layer, index_n_heads query heads of index_head_dim from the q latent, one
// key of index_head_dim cached per position; each query attends to the
// index_topk best-scoring positions only.
struct SparseIndexer {
  std::uint64_t n_heads = 0;
  std::uint64_t head_dim = 0;
  std::uint64_t topk = 0;
};

struct ModelConfig {
  Architecture architecture = Architecture::Qwen3Moe;
  std::string model_type;
  std::string torch_dtype;  // "bfloat16", ...; empty when config.json has none

  std::uint64_t hidden_size = 0;
  std::uint64_t num_hidden_layers = 0;
  std::uint64_t num_attention_heads = 0;
  std::uint64_t num_key_value_heads = 0;
  std::uint64_t head_dim = 0;  // MLA: qk_head_dim (nope + rope), the query/key head width
  std::uint64_t vocab_size = 0;
  std::uint64_t max_position_embeddings = 0;
  double rms_norm_eps = 0;
  double rope_theta = 0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";

  // Attention projections with bias: q/k/v (qwen2_moe qkv_bias), and o too
  // (qwen3_moe/olmoe attention_bias).
  bool qkv_bias = false;
  bool o_bias = false;
  QkNorm qk_norm = QkNorm::None;
  std::optional<double> clip_qkv;  // olmoe: clamp q/k/v to [-clip, clip]
  std::optional<LatentAttention> mla;  // deepseek_v3, glm_moe_dsa
  std::optional<SparseIndexer> indexer;  // glm_moe_dsa

  std::uint64_t num_experts = 0;
  std::uint64_t num_experts_per_tok = 0;
  std::uint64_t moe_intermediate_size = 0;  // one routed expert's FFN width
  bool norm_topk_prob = false;
  RouterNormalization router_normalization = RouterNormalization::SoftmaxTopK;

  // qwen2/3 moe: a layer is sparse unless listed in mlp_only_layers or off the
  // decoder_sparse_step grid; dense layers use dense_intermediate_size.
  std::uint64_t decoder_sparse_step = 1;
  std::vector<std::uint64_t> mlp_only_layers;
  std::uint64_t dense_intermediate_size = 0;  // 0: every layer is MoE
  std::uint64_t shared_expert_intermediate_size = 0;  // qwen2_moe; 0: none
  // deepseek_v3 / glm_moe_dsa: layers [0, first_k_dense_replace) are dense;
  // after them a layer is MoE when layer % moe_layer_freq == 0 (0: the qwen
  // rule above). n_shared_experts always-on experts are one SwiGLU of width
  // moe_intermediate_size x n_shared_experts (shared_expert_intermediate_size).
  std::uint64_t first_k_dense_replace = 0;
  std::uint64_t moe_layer_freq = 0;
  std::uint64_t n_shared_experts = 0;
  bool router_correction_bias = false;  // topk_method noaux_tc: gate.e_score_correction_bias [experts]
  // Multi-token-prediction modules stored after the decoder layers
  // (model.layers.<num_hidden_layers + i>): used for speculative decoding
  // only, not needed to generate; coli leaves them out.
  std::uint64_t num_nextn_predict_layers = 0;

  bool is_moe_layer(std::uint64_t layer) const;
  bool has_shared_expert() const { return shared_expert_intermediate_size > 0; }
  // qwen2_moe's shared_expert has a sigmoid gate; deepseek's shared_experts do not.
  bool has_shared_expert_gate() const { return architecture == Architecture::Qwen2Moe; }
  // Read for coli-plan only: the engine does not implement its attention.
  bool planning_only() const { return mla.has_value(); }
};

std::string_view architecture_name(Architecture architecture);  // the model_type
// "qwen3_moe, olmoe, mixtral, qwen2_moe; for planning only: deepseek_v3, glm_moe_dsa"
std::string_view supported_architectures();

// Ok when the engine (coli convert, coli run) implements `config`'s
// architecture; otherwise an error naming `where` and saying it is planning only.
Status check_engine_support(const ModelConfig& config, std::string_view where);

// config.json text in one canonical form (keys sorted, no spaces), so a
// model's identity does not depend on how its config was formatted: the
// planner hashes the checkpoint's file, the engine the container's copy.
// Text that is not JSON is returned unchanged.
std::string canonical_config_json(std::string_view json_text);

// `source` names the file in messages ("config.json" or a path).
Result<ModelConfig> parse_model_config(std::string_view json_text, std::string_view source);
Result<ModelConfig> read_model_config(const std::filesystem::path& path);

}  // namespace coli::model
