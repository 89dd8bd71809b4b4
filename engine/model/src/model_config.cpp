// config.json -> ModelConfig. Field names, defaults and their use are taken
// from transformers (configuration_<arch>.py for defaults, modeling_<arch>.py
// for how a field shapes the weights or the computation):
//   qwen3_moe  Qwen3MoeConfig / Qwen3MoeAttention, Qwen3MoeSparseMoeBlock, Qwen3MoeDecoderLayer
//   olmoe      OlmoeConfig    / OlmoeAttention, OlmoeSparseMoeBlock
//   mixtral    MixtralConfig  / MixtralAttention, MixtralSparseMoeBlock, MixtralBlockSparseTop2MLP
//   qwen2_moe  Qwen2MoeConfig / Qwen2MoeAttention, Qwen2MoeSparseMoeBlock (shared_expert)
//   deepseek_v3, glm_moe_dsa: planning only, read in src/latent_config.cpp
#include "coli/model/model_config.h"

#include <algorithm>
#include <array>

#include "coli/base/checked_math.h"
#include "coli/base/files.h"
#include "coli/model/tensor_layout.h"
#include "config_fields.h"
#include "json_text.h"

namespace coli::model {
using detail::ConfigFields;
using nlohmann::json;

namespace {

// Per-architecture defaults for fields a config.json may leave out (the
// values of the configuration_<arch>.py defaults).
struct ArchitectureRow {
  Architecture architecture;
  std::string_view model_type;
  std::string_view experts_field;  // num_experts, or num_local_experts (mixtral)
  std::string_view experts_alias;  // attribute_map alias of the same value
  std::string_view expert_width_field;  // moe_intermediate_size, or intermediate_size
  double rms_norm_eps;
  double rope_theta;
  std::uint64_t max_position_embeddings;  // 0: required
};

constexpr std::array<ArchitectureRow, 6> kArchitectures{{
    {Architecture::Qwen3Moe, "qwen3_moe", "num_experts", "num_local_experts", "moe_intermediate_size", 1e-6, 10000.0,
     32768},
    {Architecture::Olmoe, "olmoe", "num_experts", "num_local_experts", "intermediate_size", 1e-5, 10000.0, 4096},
    {Architecture::Mixtral, "mixtral", "num_local_experts", "num_experts", "intermediate_size", 1e-5, 1e6, 131072},
    {Architecture::Qwen2Moe, "qwen2_moe", "num_experts", "num_local_experts", "moe_intermediate_size", 1e-6, 10000.0,
     32768},
    // DeepseekV3Config defaults; GlmMoeDsaConfig's max_position_embeddings is
    // not relied on (required), its rms_norm_eps default is 1e-5.
    {Architecture::DeepseekV3, "deepseek_v3", "n_routed_experts", "n_routed_experts", "moe_intermediate_size", 1e-6,
     10000.0, 4096},
    {Architecture::GlmMoeDsa, "glm_moe_dsa", "n_routed_experts", "n_routed_experts", "moe_intermediate_size", 1e-5,
     10000.0, 0},
}};

bool latent_attention_family(Architecture architecture) {
  return architecture == Architecture::DeepseekV3 || architecture == Architecture::GlmMoeDsa;
}

const ArchitectureRow* find_architecture(std::string_view model_type) {
  for (const ArchitectureRow& row : kArchitectures)
    if (row.model_type == model_type) return &row;
  return nullptr;
}

// Attention shape: heads, kv heads, head_dim.
Status read_attention(const ConfigFields& fields, ModelConfig& config) {
  auto heads = fields.required_count("num_attention_heads");
  if (!heads) return heads.error();
  auto kv_heads = fields.required_count("num_key_value_heads");
  if (!kv_heads) return kv_heads.error();
  config.num_attention_heads = *heads;
  config.num_key_value_heads = *kv_heads;
  if (*heads % *kv_heads != 0)
    return fields.field_error("num_key_value_heads", "(" + std::to_string(*kv_heads) +
                                                         ") must divide num_attention_heads (" +
                                                         std::to_string(*heads) + ")");
  // OlmoeAttention always uses hidden_size // num_heads; the others take an
  // explicit head_dim first (Qwen3MoeAttention: getattr(config, "head_dim", ...)).
  const bool explicit_head_dim = config.architecture != Architecture::Olmoe && fields.has("head_dim");
  if (explicit_head_dim) {
    auto head_dim = fields.required_count("head_dim");
    if (!head_dim) return head_dim.error();
    config.head_dim = *head_dim;
  } else {
    if (config.hidden_size % *heads != 0)
      return fields.field_error("hidden_size", "(" + std::to_string(config.hidden_size) +
                                                   ") must be a multiple of num_attention_heads (" +
                                                   std::to_string(*heads) + ") when head_dim is not given");
    config.head_dim = config.hidden_size / *heads;
  }

  switch (config.architecture) {
    case Architecture::Qwen3Moe:  // Qwen3MoeAttention: q_norm/k_norm over head_dim, bias=attention_bias
    case Architecture::Olmoe: {   // OlmoeAttention: q_norm/k_norm over the whole projection
      auto bias = fields.flag_or("attention_bias", false);
      if (!bias) return bias.error();
      config.qkv_bias = config.o_bias = *bias;
      config.qk_norm = config.architecture == Architecture::Qwen3Moe ? QkNorm::PerHead : QkNorm::FullProjection;
      break;
    }
    case Architecture::Qwen2Moe: {  // Qwen2MoeAttention: q/k/v bias=qkv_bias (default True), o_proj no bias
      auto bias = fields.flag_or("qkv_bias", true);
      if (!bias) return bias.error();
      config.qkv_bias = *bias;
      break;
    }
    case Architecture::Mixtral:  // MixtralAttention: no biases, no qk-norm
    case Architecture::DeepseekV3:  // read by detail::read_latent_family
    case Architecture::GlmMoeDsa:
      break;
  }
  if (config.architecture == Architecture::Olmoe) {
    auto clip = fields.optional_number("clip_qkv");
    if (!clip) return clip.error();
    config.clip_qkv = *clip;
  }
  return Ok{};
}

// Experts and routing (the <Arch>SparseMoeBlock constructors and forward).
Status read_experts(const ConfigFields& fields, const ArchitectureRow& row, ModelConfig& config) {
  auto experts = fields.required_count_of({row.experts_field, row.experts_alias});
  if (!experts) return experts.error();
  auto top_k = fields.required_count("num_experts_per_tok");
  if (!top_k) return top_k.error();
  if (*top_k > *experts)
    return fields.field_error("num_experts_per_tok", "(" + std::to_string(*top_k) + ") is larger than the " +
                                                         std::to_string(*experts) + " experts");
  auto width = fields.required_count(row.expert_width_field);
  if (!width) return width.error();
  config.num_experts = *experts;
  config.num_experts_per_tok = *top_k;
  config.moe_intermediate_size = *width;

  if (config.architecture == Architecture::Mixtral) {
    // MixtralSparseMoeBlock always renormalises the top-k; there is no flag.
    config.norm_topk_prob = true;
    config.router_normalization = RouterNormalization::TopKSoftmax;
    return Ok{};
  }
  auto normalise = fields.flag_or("norm_topk_prob", false);  // default False in all three configs
  if (!normalise) return normalise.error();
  config.norm_topk_prob = *normalise;
  config.router_normalization =
      *normalise ? RouterNormalization::SoftmaxTopKRenormalized : RouterNormalization::SoftmaxTopK;
  return Ok{};
}

// qwen2/3 moe layer pattern (Qwen3MoeDecoderLayer.__init__): sparse when the
// layer is not in mlp_only_layers and (layer + 1) % decoder_sparse_step == 0.
Status read_sparse_layout(const ConfigFields& fields, ModelConfig& config) {
  if (config.architecture != Architecture::Qwen3Moe && config.architecture != Architecture::Qwen2Moe) return Ok{};
  auto step = fields.count_or("decoder_sparse_step", 1);
  if (!step) return step.error();
  auto dense_layers = fields.index_list("mlp_only_layers");
  if (!dense_layers) return dense_layers.error();
  if (dense_layers->size() > config.num_hidden_layers)
    return fields.field_error("mlp_only_layers", "lists " + std::to_string(dense_layers->size()) +
                                                     " layers but the model has " +
                                                     std::to_string(config.num_hidden_layers));
  for (std::uint64_t layer : *dense_layers)
    if (layer >= config.num_hidden_layers)
      return fields.field_error("mlp_only_layers", "names layer " + std::to_string(layer) + " but the model has " +
                                                       std::to_string(config.num_hidden_layers) + " layers");
  config.decoder_sparse_step = *step;
  config.mlp_only_layers = std::move(*dense_layers);
  bool any_dense = false;
  for (std::uint64_t layer = 0; layer < config.num_hidden_layers; ++layer) any_dense |= !config.is_moe_layer(layer);
  if (any_dense) {  // dense layers are Qwen*MoeMLP(intermediate_size=config.intermediate_size)
    auto width = fields.required_count("intermediate_size");
    if (!width) return width.error();
    config.dense_intermediate_size = *width;
  }
  if (config.architecture == Architecture::Qwen2Moe) {  // Qwen2MoeSparseMoeBlock.shared_expert
    auto shared = fields.required_count("shared_expert_intermediate_size");
    if (!shared) return shared.error();
    config.shared_expert_intermediate_size = *shared;
  }
  return Ok{};
}

Status refuse_sliding_window(const ConfigFields& fields, const ModelConfig& config) {
  // qwen2/3 moe only apply sliding_window when use_sliding_window is true;
  // MixtralAttention applies any non-null sliding_window.
  bool enabled = false;
  if (config.architecture == Architecture::Mixtral) {
    auto window = fields.count_or("sliding_window", 0);
    if (!window) return window.error();
    enabled = *window > 0 && *window < config.max_position_embeddings;
  } else {
    auto use = fields.flag_or("use_sliding_window", false);
    if (!use) return use.error();
    enabled = *use;
  }
  if (enabled)
    return make_error(fields.source() + ": sliding-window attention is enabled; coli does not implement it yet, "
                                        "so this model would give wrong results");
  return Ok{};
}

Status read_rope_and_norms(const ConfigFields& fields, const ArchitectureRow& row, ModelConfig& config) {
  auto eps = fields.positive_number_or("rms_norm_eps", row.rms_norm_eps);
  if (!eps) return eps.error();
  config.rms_norm_eps = *eps;
  auto positions = row.max_position_embeddings == 0
                       ? fields.required_count("max_position_embeddings")
                       : fields.count_or("max_position_embeddings", row.max_position_embeddings);
  if (!positions) return positions.error();
  config.max_position_embeddings = *positions;
  auto rope = detail::read_rope(fields, row.rope_theta, config.rope_theta);
  if (!rope) return rope.error();
  config.rope_scaling = std::move(*rope);
  return Ok{};
}

// Bounds on the whole model, beyond each count's own (config_fields.cpp):
// the layout lists every routed expert's tensors, and the planner adds up
// their bytes, so both stay far from exhausting memory or wrapping.
constexpr std::uint64_t kMaxExpertInstances = std::uint64_t{1} << 18;  // Kimi K2: 61 x 384 = 23424
constexpr std::uint64_t kMaxParameters = std::uint64_t{1} << 48;       // 281 T; Kimi K2 has 1 T

Status check_model_scale(const ModelConfig& config, const std::string& source) {
  const std::uint64_t layers = config.num_hidden_layers + config.num_nextn_predict_layers;
  if (layers * config.num_experts > kMaxExpertInstances)
    return make_error(source + ": " + std::to_string(layers) + " layers x " + std::to_string(config.num_experts) +
                      " experts is more than the " + std::to_string(kMaxExpertInstances) +
                      " routed experts coli accepts (no real model comes close): the file is corrupt; fix or "
                      "re-download it");
  std::uint64_t parameters = 0;
  std::vector<ExpectedTensor> tensors = expected_tensors(config);
  for (ExpectedTensor& tensor : mtp_tensors(config)) tensors.push_back(std::move(tensor));
  for (const ExpectedTensor& tensor : tensors) {
    const auto elements = checked_product(tensor.shape);
    const auto sum = elements ? checked_add(parameters, *elements) : std::nullopt;
    if (!sum || *sum > kMaxParameters)
      return make_error(source + ": the sizes give " + tensor.name + " " + detail::format_shape(tensor.shape) +
                        " and the model more than 2^48 parameters, more than coli accepts (no real model comes "
                        "close): the file is corrupt; fix or re-download it");
    parameters = *sum;
  }
  return Ok{};
}

}  // namespace

bool ModelConfig::is_moe_layer(std::uint64_t layer) const {
  if (layer < first_k_dense_replace) return false;
  if (moe_layer_freq > 0) return layer % moe_layer_freq == 0;  // DeepseekV3DecoderLayer
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

std::string_view architecture_name(Architecture architecture) {
  for (const ArchitectureRow& row : kArchitectures)
    if (row.architecture == architecture) return row.model_type;
  return "unknown";
}

std::string_view supported_architectures() {
  return "qwen3_moe, olmoe, mixtral, qwen2_moe; for planning only: deepseek_v3, glm_moe_dsa";
}

Status check_engine_support(const ModelConfig& config, std::string_view where) {
  if (!config.planning_only()) return Ok{};
  return make_error(std::string(where) + ": model_type '" + config.model_type +
                    "' is read for planning only: coli-plan describes and plans it, but the engine does not implement "
                    "its multi-head latent attention" +
                    (config.indexer ? std::string(" and sparse-attention indexer") : std::string()) +
                    ", so coli convert / coli run refuse it rather than compute wrong results");
}

Result<ModelConfig> parse_model_config(std::string_view json_text, std::string_view source_name) {
  const std::string source(source_name);
  auto parsed = detail::parse_json_text(json_text, source);
  if (!parsed) return parsed.error();
  if (!parsed->value.is_object()) return make_error(source + ": the top level is not a JSON object");
  if (!parsed->duplicate_top_level_keys.empty())
    return make_error(source + ": field '" + parsed->duplicate_top_level_keys.front() +
                      "' appears twice; remove one so the value is unambiguous");
  const ConfigFields fields(parsed->value, source);

  auto model_type = fields.text_or("model_type", "");
  if (!model_type) return model_type.error();
  if (model_type->empty())
    return fields.field_error("model_type", "is missing; coli reads " + std::string(supported_architectures()));
  const ArchitectureRow* row = find_architecture(*model_type);
  if (row == nullptr)
    return make_error(source + ": model_type '" + *model_type + "' is not supported; coli reads " +
                      std::string(supported_architectures()));

  ModelConfig config;
  config.architecture = row->architecture;
  config.model_type = *model_type;
  // transformers 4.x writes torch_dtype, 5.x writes dtype.
  auto dtype = fields.text_or("torch_dtype", "");
  if (!dtype) return dtype.error();
  auto dtype_v5 = fields.text_or("dtype", *dtype);
  if (!dtype_v5) return dtype_v5.error();
  config.torch_dtype = *dtype_v5;

  for (auto [field, target] : {std::pair{"hidden_size", &config.hidden_size},
                               std::pair{"num_hidden_layers", &config.num_hidden_layers},
                               std::pair{"vocab_size", &config.vocab_size}}) {
    auto value = fields.required_count(field);
    if (!value) return value.error();
    *target = *value;
  }
  auto activation = fields.text_or("hidden_act", "silu");
  if (!activation) return activation.error();
  if (*activation != "silu")
    return fields.field_error("hidden_act", "is '" + *activation + "'; coli implements the SwiGLU experts with silu only");
  config.hidden_act = *activation;
  auto tied = fields.flag_or("tie_word_embeddings", false);
  if (!tied) return tied.error();
  config.tie_word_embeddings = *tied;

  if (Status s = read_rope_and_norms(fields, *row, config); !s) return s.error();
  if (latent_attention_family(config.architecture)) {
    if (Status s = detail::read_latent_family(fields, config); !s) return s.error();
  } else {
    if (Status s = read_attention(fields, config); !s) return s.error();
    if (Status s = read_experts(fields, *row, config); !s) return s.error();
    if (Status s = read_sparse_layout(fields, config); !s) return s.error();
  }
  if (Status s = refuse_sliding_window(fields, config); !s) return s.error();
  if (Status s = check_model_scale(config, source); !s) return s.error();
  return config;
}

Result<ModelConfig> read_model_config(const std::filesystem::path& path) {
  auto text = read_text_file(path);
  if (!text) return make_error(text.error().message + " (a Hugging Face checkpoint directory has a config.json)");
  return parse_model_config(*text, path.string());
}

std::string canonical_config_json(std::string_view json_text) {
  try {
    return nlohmann::json::parse(json_text).dump();
  } catch (const nlohmann::json::exception&) {
    return std::string(json_text);
  }
}

}  // namespace coli::model
