// Parameter names and shapes per architecture, as the modeling_<arch>.py
// modules register them (nn.Linear(in, out).weight is [out, in]).
#include "coli/model/tensor_layout.h"

namespace coli::model {
namespace {

using Shape = std::vector<std::uint64_t>;

class LayoutBuilder {
 public:
  explicit LayoutBuilder(const ModelConfig& config) : config_(config) {}

  void add(std::string name, Shape shape, TensorRole role, std::string shape_source, int layer = -1,
           int expert = -1) {
    tensors_.push_back({std::move(name), std::move(shape), role, layer, expert, std::move(shape_source)});
  }

  // gate_proj/up_proj/down_proj of a SwiGLU MLP of width `width`.
  void add_swiglu(const std::string& prefix, std::uint64_t width, const std::string& width_field, TensorRole role,
                  int layer, int expert = -1) {
    const std::uint64_t hidden = config_.hidden_size;
    const bool mixtral = config_.architecture == Architecture::Mixtral && role == TensorRole::Expert;
    // MixtralBlockSparseTop2MLP names them w1 (gate), w3 (up), w2 (down).
    add(prefix + (mixtral ? ".w1.weight" : ".gate_proj.weight"), {width, hidden}, role,
        width_field + " x hidden_size", layer, expert);
    add(prefix + (mixtral ? ".w3.weight" : ".up_proj.weight"), {width, hidden}, role, width_field + " x hidden_size",
        layer, expert);
    add(prefix + (mixtral ? ".w2.weight" : ".down_proj.weight"), {hidden, width}, role,
        "hidden_size x " + width_field, layer, expert);
  }

  // DeepseekV3Attention (+ the GlmMoeDsa indexer): q through q_a/q_b (or
  // q_proj when q_lora_rank is null), k and v through one latent.
  void add_latent_attention(const std::string& prefix, int layer) {
    const LatentAttention& m = *config_.mla;
    const std::uint64_t hidden = config_.hidden_size, heads = config_.num_attention_heads;
    const std::uint64_t q_width = heads * m.qk_head_dim();
    const std::string q_source = "num_attention_heads*(qk_nope_head_dim+qk_rope_head_dim)";
    if (m.q_lora_rank > 0) {
      add(prefix + ".q_a_proj.weight", {m.q_lora_rank, hidden}, TensorRole::Attention, "q_lora_rank x hidden_size",
          layer);
      if (config_.qkv_bias) add(prefix + ".q_a_proj.bias", {m.q_lora_rank}, TensorRole::Attention, "q_lora_rank", layer);
      add(prefix + ".q_a_layernorm.weight", {m.q_lora_rank}, TensorRole::QkNorm, "q_lora_rank", layer);
      add(prefix + ".q_b_proj.weight", {q_width, m.q_lora_rank}, TensorRole::Attention, q_source + " x q_lora_rank",
          layer);
    } else {
      add(prefix + ".q_proj.weight", {q_width, hidden}, TensorRole::Attention, q_source + " x hidden_size", layer);
    }
    const std::uint64_t kv_a = m.kv_lora_rank + m.qk_rope_head_dim;
    add(prefix + ".kv_a_proj_with_mqa.weight", {kv_a, hidden}, TensorRole::Attention,
        "(kv_lora_rank+qk_rope_head_dim) x hidden_size", layer);
    if (config_.qkv_bias)
      add(prefix + ".kv_a_proj_with_mqa.bias", {kv_a}, TensorRole::Attention, "kv_lora_rank+qk_rope_head_dim", layer);
    add(prefix + ".kv_a_layernorm.weight", {m.kv_lora_rank}, TensorRole::QkNorm, "kv_lora_rank", layer);
    add(prefix + ".kv_b_proj.weight", {heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank},
        TensorRole::Attention, "num_attention_heads*(qk_nope_head_dim+v_head_dim) x kv_lora_rank", layer);
    add(prefix + ".o_proj.weight", {hidden, heads * m.v_head_dim}, TensorRole::Attention,
        "hidden_size x num_attention_heads*v_head_dim", layer);
    if (config_.o_bias) add(prefix + ".o_proj.bias", {hidden}, TensorRole::Attention, "hidden_size", layer);
    if (!config_.indexer) return;
    // DeepSeek-V3.2 Indexer: wq_b from the q latent, wk from the hidden
    // state, k_norm a LayerNorm (weight and bias), weights_proj per head.
    const SparseIndexer& ix = *config_.indexer;
    const std::string ip = prefix + ".indexer";
    add(ip + ".wq_b.weight", {ix.n_heads * ix.head_dim, m.q_lora_rank}, TensorRole::Attention,
        "index_n_heads*index_head_dim x q_lora_rank", layer);
    add(ip + ".wk.weight", {ix.head_dim, hidden}, TensorRole::Attention, "index_head_dim x hidden_size", layer);
    add(ip + ".k_norm.weight", {ix.head_dim}, TensorRole::QkNorm, "index_head_dim", layer);
    add(ip + ".k_norm.bias", {ix.head_dim}, TensorRole::QkNorm, "index_head_dim", layer);
    add(ip + ".weights_proj.weight", {ix.n_heads, hidden}, TensorRole::Attention, "index_n_heads x hidden_size", layer);
  }

  void add_attention(const std::string& prefix, int layer) {
    if (config_.mla) return add_latent_attention(prefix, layer);
    const std::uint64_t hidden = config_.hidden_size;
    const std::uint64_t q_width = config_.num_attention_heads * config_.head_dim;
    const std::uint64_t kv_width = config_.num_key_value_heads * config_.head_dim;
    const std::string q_source = "num_attention_heads*head_dim";
    const std::string kv_source = "num_key_value_heads*head_dim";
    add(prefix + ".q_proj.weight", {q_width, hidden}, TensorRole::Attention, q_source + " x hidden_size", layer);
    add(prefix + ".k_proj.weight", {kv_width, hidden}, TensorRole::Attention, kv_source + " x hidden_size", layer);
    add(prefix + ".v_proj.weight", {kv_width, hidden}, TensorRole::Attention, kv_source + " x hidden_size", layer);
    add(prefix + ".o_proj.weight", {hidden, q_width}, TensorRole::Attention, "hidden_size x " + q_source, layer);
    if (config_.qkv_bias) {
      add(prefix + ".q_proj.bias", {q_width}, TensorRole::Attention, q_source, layer);
      add(prefix + ".k_proj.bias", {kv_width}, TensorRole::Attention, kv_source, layer);
      add(prefix + ".v_proj.bias", {kv_width}, TensorRole::Attention, kv_source, layer);
    }
    if (config_.o_bias) add(prefix + ".o_proj.bias", {hidden}, TensorRole::Attention, "hidden_size", layer);
    if (config_.qk_norm == QkNorm::PerHead) {
      add(prefix + ".q_norm.weight", {config_.head_dim}, TensorRole::QkNorm, "head_dim", layer);
      add(prefix + ".k_norm.weight", {config_.head_dim}, TensorRole::QkNorm, "head_dim", layer);
    } else if (config_.qk_norm == QkNorm::FullProjection) {
      add(prefix + ".q_norm.weight", {q_width}, TensorRole::QkNorm, q_source, layer);
      add(prefix + ".k_norm.weight", {kv_width}, TensorRole::QkNorm, kv_source, layer);
    }
  }

  void add_moe_block(std::uint64_t layer_index) {
    const int layer = static_cast<int>(layer_index);
    const std::string prefix = moe_block_prefix(config_, layer_index);
    const std::string width_field =
        config_.architecture == Architecture::Mixtral || config_.architecture == Architecture::Olmoe
            ? "intermediate_size"
            : "moe_intermediate_size";
    add(prefix + ".gate.weight", {config_.num_experts, config_.hidden_size}, TensorRole::Router,
        "num_experts x hidden_size", layer);
    if (config_.router_correction_bias)  // DeepseekV3TopkRouter (topk_method noaux_tc)
      add(prefix + ".gate.e_score_correction_bias", {config_.num_experts}, TensorRole::Router, "n_routed_experts",
          layer);
    for (std::uint64_t expert = 0; expert < config_.num_experts; ++expert)
      add_swiglu(prefix + ".experts." + std::to_string(expert), config_.moe_intermediate_size, width_field,
                 TensorRole::Expert, layer, static_cast<int>(expert));
    if (config_.has_shared_expert() && !config_.has_shared_expert_gate()) {  // DeepseekV3MoE.shared_experts
      add_swiglu(prefix + ".shared_experts", config_.shared_expert_intermediate_size,
                 "moe_intermediate_size*n_shared_experts", TensorRole::SharedExpert, layer);
    } else if (config_.has_shared_expert()) {
      add_swiglu(prefix + ".shared_expert", config_.shared_expert_intermediate_size,
                 "shared_expert_intermediate_size", TensorRole::SharedExpert, layer);
      // Qwen2MoeSparseMoeBlock.shared_expert_gate = Linear(hidden_size, 1): a sigmoid gate.
      add(prefix + ".shared_expert_gate.weight", {1, config_.hidden_size}, TensorRole::SharedExpert,
          "1 x hidden_size", layer);
    }
  }

  std::vector<ExpectedTensor> take() { return std::move(tensors_); }

 private:
  const ModelConfig& config_;
  std::vector<ExpectedTensor> tensors_;
};

}  // namespace

std::string_view tensor_role_name(TensorRole role) {
  switch (role) {
    case TensorRole::Embedding: return "embedding";
    case TensorRole::FinalNorm: return "final norm";
    case TensorRole::LmHead: return "lm_head";
    case TensorRole::LayerNorm: return "layer norm";
    case TensorRole::Attention: return "attention";
    case TensorRole::QkNorm: return "qk norm";
    case TensorRole::Router: return "router";
    case TensorRole::Expert: return "expert";
    case TensorRole::SharedExpert: return "shared expert";
    case TensorRole::DenseMlp: return "dense mlp";
    case TensorRole::Mtp: return "mtp";
  }
  return "unknown";
}

std::string moe_block_prefix(const ModelConfig& config, std::uint64_t layer) {
  // MixtralDecoderLayer.block_sparse_moe; the others call it mlp.
  const char* block = config.architecture == Architecture::Mixtral ? ".block_sparse_moe" : ".mlp";
  return "model.layers." + std::to_string(layer) + block;
}

namespace {

// input norm, attention, post-attention norm, then the MoE block or dense MLP.
void add_decoder_layer(LayoutBuilder& layout, const ModelConfig& config, std::uint64_t layer_index) {
  const int layer = static_cast<int>(layer_index);
  const std::uint64_t hidden = config.hidden_size;
  const std::string prefix = "model.layers." + std::to_string(layer_index);
  layout.add(prefix + ".input_layernorm.weight", {hidden}, TensorRole::LayerNorm, "hidden_size", layer);
  layout.add_attention(prefix + ".self_attn", layer);
  layout.add(prefix + ".post_attention_layernorm.weight", {hidden}, TensorRole::LayerNorm, "hidden_size", layer);
  if (config.is_moe_layer(layer_index))
    layout.add_moe_block(layer_index);
  else
    layout.add_swiglu(prefix + ".mlp", config.dense_intermediate_size, "intermediate_size", TensorRole::DenseMlp,
                      layer);
}

}  // namespace

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config) {
  LayoutBuilder layout(config);
  const std::uint64_t hidden = config.hidden_size;
  layout.add("model.embed_tokens.weight", {config.vocab_size, hidden}, TensorRole::Embedding,
             "vocab_size x hidden_size");
  for (std::uint64_t layer = 0; layer < config.num_hidden_layers; ++layer) add_decoder_layer(layout, config, layer);
  layout.add("model.norm.weight", {hidden}, TensorRole::FinalNorm, "hidden_size");
  if (!config.tie_word_embeddings)
    layout.add("lm_head.weight", {config.vocab_size, hidden}, TensorRole::LmHead, "vocab_size x hidden_size");
  return layout.take();
}

std::vector<ExpectedTensor> mtp_tensors(const ModelConfig& config) {
  LayoutBuilder layout(config);
  const std::uint64_t hidden = config.hidden_size;
  for (std::uint64_t i = 0; i < config.num_nextn_predict_layers; ++i) {
    const std::uint64_t layer_index = config.num_hidden_layers + i;
    const int layer = static_cast<int>(layer_index);
    const std::string prefix = "model.layers." + std::to_string(layer_index);
    // DeepSeek-V3 README_WEIGHTS: enorm/hnorm RMSNorms, eh_proj over the
    // concatenated [embedding; hidden], a decoder layer, shared_head.norm.
    layout.add(prefix + ".enorm.weight", {hidden}, TensorRole::Mtp, "hidden_size", layer);
    layout.add(prefix + ".hnorm.weight", {hidden}, TensorRole::Mtp, "hidden_size", layer);
    layout.add(prefix + ".eh_proj.weight", {hidden, 2 * hidden}, TensorRole::Mtp, "hidden_size x 2*hidden_size", layer);
    add_decoder_layer(layout, config, layer_index);
    layout.add(prefix + ".shared_head.norm.weight", {hidden}, TensorRole::Mtp, "hidden_size", layer);
  }
  std::vector<ExpectedTensor> tensors = layout.take();
  for (ExpectedTensor& t : tensors) t.role = TensorRole::Mtp;
  return tensors;
}

}  // namespace coli::model
