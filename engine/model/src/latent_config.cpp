// deepseek_v3 and glm_moe_dsa (GLM-5) config fields, read for planning only.
// Field meanings and defaults follow transformers' DeepseekV3Config /
// DeepseekV3Attention / DeepseekV3MoE / DeepseekV3DecoderLayer (and the
// checkpoint's own modeling_deepseek.py for moe_layer_freq and topk_method),
// and GlmMoeDsaConfig, whose attention is DeepseekV3's plus the DeepSeek-V3.2
// sparse-attention indexer (index_n_heads, index_head_dim, index_topk).
#include "config_fields.h"

namespace coli::model::detail {
namespace {

Status read_latent_attention(const ConfigFields& fields, ModelConfig& config) {
  auto heads = fields.required_count("num_attention_heads");
  if (!heads) return heads.error();
  config.num_attention_heads = *heads;
  // MLA has no grouped K/V heads; configs repeat num_attention_heads here.
  auto kv_heads = fields.count_or("num_key_value_heads", *heads);
  if (!kv_heads) return kv_heads.error();
  config.num_key_value_heads = *kv_heads;

  LatentAttention mla;
  // q_lora_rank null: q_proj straight from the hidden state (DeepSeek-V2-Lite).
  auto q_rank = fields.non_negative_or("q_lora_rank", 0);
  if (!q_rank) return q_rank.error();
  mla.q_lora_rank = *q_rank;
  for (auto [field, target] : {std::pair{"kv_lora_rank", &mla.kv_lora_rank},
                               std::pair{"qk_nope_head_dim", &mla.qk_nope_head_dim},
                               std::pair{"qk_rope_head_dim", &mla.qk_rope_head_dim},
                               std::pair{"v_head_dim", &mla.v_head_dim}}) {
    auto value = fields.required_count(field);
    if (!value) return value.error();
    *target = *value;
  }
  if (fields.has("qk_head_dim")) {  // GLM-5 states it; it must agree with its parts
    auto stated = fields.required_count("qk_head_dim");
    if (!stated) return stated.error();
    if (*stated != mla.qk_head_dim())
      return fields.field_error("qk_head_dim", "(" + std::to_string(*stated) + ") must equal qk_nope_head_dim + " +
                                                   "qk_rope_head_dim (" + std::to_string(mla.qk_head_dim()) + ")");
  }
  // The query/key head width. GLM-5's config also has "head_dim": 64, which
  // GlmMoeDsaAttention does not use for the projections (it is the RoPE width).
  config.head_dim = mla.qk_head_dim();
  config.mla = mla;

  // DeepseekV3Attention: q_a_proj, kv_a_proj_with_mqa and o_proj take
  // bias=attention_bias; q_b_proj and kv_b_proj never have one.
  auto bias = fields.flag_or("attention_bias", false);
  if (!bias) return bias.error();
  config.qkv_bias = config.o_bias = *bias;

  if (config.architecture == Architecture::GlmMoeDsa) {
    SparseIndexer indexer;
    for (auto [field, target] : {std::pair{"index_n_heads", &indexer.n_heads},
                                 std::pair{"index_head_dim", &indexer.head_dim},
                                 std::pair{"index_topk", &indexer.topk}}) {
      auto value = fields.required_count(field);
      if (!value) return value.error();
      *target = *value;
    }
    if (mla.q_lora_rank == 0)
      return fields.field_error("q_lora_rank", "is null, but the sparse-attention indexer reads the q latent");
    config.indexer = indexer;
  }
  return Ok{};
}

// DeepseekV3MoE: n_routed_experts routed, n_shared_experts always-on experts
// of width moe_intermediate_size each (one SwiGLU of the summed width).
Status read_latent_experts(const ConfigFields& fields, ModelConfig& config) {
  auto experts = fields.required_count("n_routed_experts");
  if (!experts) return experts.error();
  auto top_k = fields.required_count("num_experts_per_tok");
  if (!top_k) return top_k.error();
  if (*top_k > *experts)
    return fields.field_error("num_experts_per_tok", "(" + std::to_string(*top_k) + ") is larger than the " +
                                                         std::to_string(*experts) + " routed experts");
  auto width = fields.required_count("moe_intermediate_size");
  if (!width) return width.error();
  auto shared = fields.non_negative_or("n_shared_experts", 0);
  if (!shared) return shared.error();
  config.num_experts = *experts;
  config.num_experts_per_tok = *top_k;
  config.moe_intermediate_size = *width;
  config.n_shared_experts = *shared;
  config.shared_expert_intermediate_size = *width * *shared;

  auto scoring = fields.text_or("scoring_func", "sigmoid");
  if (!scoring) return scoring.error();
  auto normalise = fields.flag_or("norm_topk_prob", true);  // DeepseekV3Config default
  if (!normalise) return normalise.error();
  config.norm_topk_prob = *normalise;
  if (*scoring == "sigmoid")
    config.router_normalization = RouterNormalization::SigmoidTopK;
  else if (*scoring == "softmax")
    config.router_normalization =
        *normalise ? RouterNormalization::SoftmaxTopKRenormalized : RouterNormalization::SoftmaxTopK;
  else
    return fields.field_error("scoring_func", "is '" + *scoring + "'; expected 'sigmoid' or 'softmax'");
  auto method = fields.text_or("topk_method", "noaux_tc");
  if (!method) return method.error();
  config.router_correction_bias = *method == "noaux_tc";
  return Ok{};
}

// DeepseekV3DecoderLayer: MoE when layer >= first_k_dense_replace and
// layer % moe_layer_freq == 0, otherwise an MLP of intermediate_size.
Status read_latent_layout(const ConfigFields& fields, ModelConfig& config) {
  auto first_dense = fields.non_negative_or("first_k_dense_replace", 0);
  if (!first_dense) return first_dense.error();
  if (*first_dense > config.num_hidden_layers)
    return fields.field_error("first_k_dense_replace", "(" + std::to_string(*first_dense) + ") is more than the " +
                                                           std::to_string(config.num_hidden_layers) + " layers");
  auto frequency = fields.count_or("moe_layer_freq", 1);
  if (!frequency) return frequency.error();
  config.first_k_dense_replace = *first_dense;
  config.moe_layer_freq = *frequency;
  bool any_dense = false, any_moe = false;
  for (std::uint64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    any_dense |= !config.is_moe_layer(layer);
    any_moe |= config.is_moe_layer(layer);
  }
  if (!any_moe)
    return fields.field_error("first_k_dense_replace", "and moe_layer_freq leave no MoE layer; coli plans MoE models");
  if (any_dense) {
    auto width = fields.required_count("intermediate_size");
    if (!width) return width.error();
    config.dense_intermediate_size = *width;
  }
  auto mtp = fields.non_negative_or("num_nextn_predict_layers", 0);
  if (!mtp) return mtp.error();
  config.num_nextn_predict_layers = *mtp;
  return Ok{};
}

}  // namespace

Status read_latent_family(const ConfigFields& fields, ModelConfig& config) {
  if (Status s = read_latent_attention(fields, config); !s) return s.error();
  if (Status s = read_latent_experts(fields, config); !s) return s.error();
  return read_latent_layout(fields, config);
}

}  // namespace coli::model::detail
