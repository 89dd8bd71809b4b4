// config.json parsing (real public configs and the error table) and
// describe_model on tiny generated checkpoints of each architecture.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "unit/test_support.h"
#include "coli/model/model_config.h"
#include "coli/model/model_desc.h"
#include "coli/model/safetensors_writer.h"

namespace coli::model {
namespace {
namespace fs = std::filesystem;
using Shape = std::vector<std::uint64_t>;

using testing_support::Contains;

// A scratch directory for one test.
class TempDir : public testing_support::TempDir {
 public:
  TempDir() : testing_support::TempDir("coli-model") {}
};

ModelConfig fixture_config(const std::string& name) {
  auto config = read_model_config(fs::path(COLI_FIXTURES_DIR) / "model-configs" / name);
  EXPECT_TRUE(config.ok()) << config.error().message;
  return config.ok() ? *config : ModelConfig{};
}

TEST(PublicConfigs, Qwen3_30B_A3B) {
  const ModelConfig c = fixture_config("Qwen3-30B-A3B.json");
  EXPECT_EQ(c.architecture, Architecture::Qwen3Moe);
  EXPECT_EQ(c.num_hidden_layers, 48u);
  EXPECT_EQ(c.hidden_size, 2048u);
  EXPECT_EQ(c.num_attention_heads, 32u);
  EXPECT_EQ(c.num_key_value_heads, 4u);
  EXPECT_EQ(c.head_dim, 128u);  // explicit: not 2048 / 32
  EXPECT_EQ(c.num_experts, 128u);
  EXPECT_EQ(c.num_experts_per_tok, 8u);
  EXPECT_EQ(c.moe_intermediate_size, 768u);
  EXPECT_EQ(c.vocab_size, 151936u);
  EXPECT_EQ(c.max_position_embeddings, 40960u);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.router_normalization, RouterNormalization::SoftmaxTopKRenormalized);
  EXPECT_EQ(c.qk_norm, QkNorm::PerHead);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.dense_intermediate_size, 0u);  // every layer is MoE
  EXPECT_TRUE(c.is_moe_layer(0) && c.is_moe_layer(47));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(PublicConfigs, OLMoE_1B_7B_0924) {
  const ModelConfig c = fixture_config("OLMoE-1B-7B-0924.json");
  EXPECT_EQ(c.architecture, Architecture::Olmoe);
  EXPECT_EQ(c.num_hidden_layers, 16u);
  EXPECT_EQ(c.hidden_size, 2048u);
  EXPECT_EQ(c.num_attention_heads, 16u);
  EXPECT_EQ(c.num_key_value_heads, 16u);
  EXPECT_EQ(c.head_dim, 128u);
  EXPECT_EQ(c.num_experts, 64u);
  EXPECT_EQ(c.num_experts_per_tok, 8u);
  EXPECT_EQ(c.moe_intermediate_size, 1024u);
  EXPECT_EQ(c.vocab_size, 50304u);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.router_normalization, RouterNormalization::SoftmaxTopK);
  EXPECT_EQ(c.qk_norm, QkNorm::FullProjection);
  EXPECT_FALSE(c.clip_qkv.has_value());
}

TEST(PublicConfigs, Mixtral_8x7B_v01) {
  const ModelConfig c = fixture_config("Mixtral-8x7B-v0.1.json");
  EXPECT_EQ(c.architecture, Architecture::Mixtral);
  EXPECT_EQ(c.num_hidden_layers, 32u);
  EXPECT_EQ(c.hidden_size, 4096u);
  EXPECT_EQ(c.num_key_value_heads, 8u);
  EXPECT_EQ(c.head_dim, 128u);
  EXPECT_EQ(c.num_experts, 8u);  // from num_local_experts
  EXPECT_EQ(c.num_experts_per_tok, 2u);
  EXPECT_EQ(c.moe_intermediate_size, 14336u);
  EXPECT_EQ(c.vocab_size, 32000u);
  EXPECT_EQ(c.max_position_embeddings, 32768u);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.router_normalization, RouterNormalization::TopKSoftmax);
  EXPECT_EQ(c.qk_norm, QkNorm::None);
}

TEST(PublicConfigs, Qwen15_MoE_A27B) {
  const ModelConfig c = fixture_config("Qwen1.5-MoE-A2.7B.json");
  EXPECT_EQ(c.architecture, Architecture::Qwen2Moe);
  EXPECT_EQ(c.num_hidden_layers, 24u);
  EXPECT_EQ(c.hidden_size, 2048u);
  EXPECT_EQ(c.num_attention_heads, 16u);
  EXPECT_EQ(c.num_experts, 60u);
  EXPECT_EQ(c.num_experts_per_tok, 4u);
  EXPECT_EQ(c.moe_intermediate_size, 1408u);
  EXPECT_EQ(c.shared_expert_intermediate_size, 5632u);
  EXPECT_TRUE(c.has_shared_expert());
  EXPECT_TRUE(c.qkv_bias);  // Qwen2MoeAttention default
  EXPECT_FALSE(c.o_bias);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.router_normalization, RouterNormalization::SoftmaxTopK);
}

std::string config_error(const std::string& text) {
  auto config = parse_model_config(text, "config.json");
  EXPECT_FALSE(config.ok());
  return config.ok() ? "" : config.error().message;
}

// A small valid qwen3_moe config; `extra` adds fields not already in it
// (a repeated field is itself an error).
std::string tiny_qwen3(const std::string& extra = "") {
  return R"({"model_type": "qwen3_moe", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
  "num_key_value_heads": 1, "head_dim": 6, "vocab_size": 16, "num_experts": 4, "num_experts_per_tok": 2,
  "moe_intermediate_size": 4, "intermediate_size": 12, "norm_topk_prob": true)" +
         extra + "}";
}

TEST(ConfigErrors, BrokenJsonNamesLineAndColumn) {
  const std::string message = config_error("{\n  \"model_type\": \"olmoe\",\n  \"hidden_size\": 20 48\n}");
  EXPECT_TRUE(Contains(message, "config.json:3:"));
  EXPECT_TRUE(Contains(message, "invalid JSON"));
}

// Issue 12: a number past double's range aborted coli convert and coli-plan
// (nlohmann's out_of_range escaped); it is a broken file like any other.
TEST(ConfigErrors, NumberOutOfRangeIsAnErrorNotAnAbort) {
  const std::string message = config_error(R"({"model_type": "olmoe", "hidden_size": 1e309})");
  EXPECT_TRUE(Contains(message, "invalid JSON")) << message;
  EXPECT_TRUE(Contains(message, "config.json")) << message;
}

TEST(ConfigErrors, UnknownArchitectureListsSupported) {
  EXPECT_TRUE(Contains(config_error(R"({"model_type": "llama4_text"})"),
                       "model_type 'llama4_text' is not supported; coli reads qwen3_moe, olmoe, mixtral, qwen2_moe; "
                       "for planning only: deepseek_v3, glm_moe_dsa"));
  EXPECT_TRUE(Contains(config_error("{}"), "field 'model_type' is missing"));
}

TEST(ConfigErrors, FieldsAreNamedWithWhatWasFound) {
  EXPECT_TRUE(Contains(config_error(R"({"model_type": "mixtral", "hidden_size": "4096"})"),
                       "field 'hidden_size' must be a positive integer, found \"4096\""));
  EXPECT_TRUE(Contains(config_error(R"({"model_type": "olmoe", "hidden_size": 8, "num_hidden_layers": 1,
                       "vocab_size": 4, "num_attention_heads": 2})"),
                       "field 'num_key_value_heads' is missing"));
  EXPECT_TRUE(Contains(config_error(tiny_qwen3(R"(, "tie_word_embeddings": "yes")")),
                       "field 'tie_word_embeddings' must be true or false, found \"yes\""));
  EXPECT_TRUE(Contains(config_error(R"({"model_type": "qwen3_moe", "hidden_size": 8, "hidden_size": 16})"),
                       "field 'hidden_size' appears twice"));
}

TEST(ConfigErrors, InconsistentNumbersAreRefused) {
  std::string bad_top_k = tiny_qwen3();
  bad_top_k.replace(bad_top_k.find(R"("num_experts_per_tok": 2)"), 24, R"("num_experts_per_tok": 5)");
  EXPECT_TRUE(Contains(config_error(bad_top_k), "field 'num_experts_per_tok' (5) is larger than the 4 experts"));
  EXPECT_TRUE(Contains(config_error(tiny_qwen3(R"(, "mlp_only_layers": [2])")),
                       "field 'mlp_only_layers' names layer 2 but the model has 2 layers"));
  EXPECT_TRUE(Contains(config_error(tiny_qwen3(R"(, "hidden_act": "gelu")")), "field 'hidden_act' is 'gelu'"));
  EXPECT_TRUE(Contains(config_error(tiny_qwen3(R"(, "use_sliding_window": true)")),
                       "sliding-window attention is enabled"));
}

// `tiny_qwen3()` with one of its fields set to `value`.
std::string tiny_qwen3_with(const std::string& field, const std::string& value) {
  std::string text = tiny_qwen3();
  const std::size_t key = text.find("\"" + field + "\": ");
  EXPECT_NE(key, std::string::npos) << field;
  const std::size_t begin = key + field.size() + 4;
  text.replace(begin, text.find_first_of(",}", begin) - begin, value);
  return text;
}

// Issue 12: num_hidden_layers = 2^63-1 hung coli convert and coli-plan,
// num_local_experts = 2^31 grew coli-plan past 3 GiB and vocab_size = 2^63-1
// wrapped to a tiny plan. Each count has a bound that names the field.
TEST(ConfigBounds, AbsurdCountsAreRefusedNamingTheField) {
  const std::string max_int64 = "9223372036854775807";
  EXPECT_TRUE(Contains(config_error(tiny_qwen3_with("num_hidden_layers", max_int64)),
                       "field 'num_hidden_layers' is 9223372036854775807, more than the 4096 coli accepts"));
  EXPECT_TRUE(Contains(config_error(tiny_qwen3_with("vocab_size", max_int64)),
                       "field 'vocab_size' is 9223372036854775807, more than the 16777216 coli accepts"));
  EXPECT_TRUE(Contains(config_error(tiny_qwen3_with("num_experts", "2147483648")),
                       "field 'num_experts' is 2147483648, more than the 65536 coli accepts"));
  EXPECT_TRUE(Contains(config_error(tiny_qwen3_with("hidden_size", "18446744073709551615")),
                       "field 'hidden_size' is 18446744073709551615, more than the 1048576 coli accepts"));
  EXPECT_TRUE(Contains(config_error(tiny_qwen3_with("moe_intermediate_size", "4294967296")),
                       "field 'moe_intermediate_size' is 4294967296"));
  EXPECT_TRUE(Contains(config_error(tiny_qwen3(R"(, "max_position_embeddings": 1e300)")),
                       "field 'max_position_embeddings' must be a positive integer"));
}

// Each count is in bounds, but together they would list hundreds of
// millions of expert tensors, or more parameters than fit any machine.
TEST(ConfigBounds, AbsurdCombinationsAreRefused) {
  std::string many_experts = tiny_qwen3_with("num_hidden_layers", "4096");
  many_experts.replace(many_experts.find("\"num_experts\": 4"), 16, "\"num_experts\": 65536");
  EXPECT_TRUE(Contains(config_error(many_experts), "4096 layers x 65536 experts is more than the 262144 routed experts"));
  std::string huge = tiny_qwen3_with("hidden_size", "1048576");
  huge.replace(huge.find("\"num_experts\": 4"), 16, "\"num_experts\": 64");
  huge.replace(huge.find("\"moe_intermediate_size\": 4"), 26, "\"moe_intermediate_size\": 1048576");
  EXPECT_TRUE(Contains(config_error(huge), "more than 2^48 parameters"));
  EXPECT_TRUE(Contains(config_error(tiny_qwen3(R"(, "mlp_only_layers": [0, 1, 0])")),
                       "field 'mlp_only_layers' lists 3 layers but the model has 2"));
}

// The bounds admit the largest open MoE models: Kimi K2's sizes (1 T
// parameters, 384 experts, 61 layers) in DeepSeek-V3's layout.
TEST(ConfigBounds, TheLargestRealModelsAreAccepted) {
  auto kimi = parse_model_config(R"({"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
      "vocab_size": 163840, "num_attention_heads": 64, "num_key_value_heads": 64, "q_lora_rank": 1536,
      "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
      "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
      "intermediate_size": 18432, "first_k_dense_replace": 1, "max_position_embeddings": 131072,
      "num_nextn_predict_layers": 0})",
                                 "kimi-k2/config.json");
  ASSERT_TRUE(kimi.ok()) << kimi.error().message;
  EXPECT_EQ(kimi->num_experts, 384u);
  const ModelConfig deepseek = fixture_config("DeepSeek-V3.json");
  EXPECT_EQ(deepseek.num_hidden_layers, 61u);
}

TEST(ConfigRope, YarnIsRecordedOtherTypesRefused) {
  auto yarn = parse_model_config(tiny_qwen3(R"(, "rope_theta": 1000000.0,
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})"),
                                 "config.json");
  ASSERT_TRUE(yarn.ok()) << yarn.error().message;
  EXPECT_EQ(yarn->rope_scaling.type, "yarn");
  EXPECT_EQ(yarn->rope_scaling.factor, 4.0);
  EXPECT_EQ(yarn->rope_scaling.original_max_position_embeddings, 32768u);
  EXPECT_EQ(yarn->rope_theta, 1e6);

  auto v5 = parse_model_config(tiny_qwen3(R"(, "rope_parameters": {"rope_type": "default", "rope_theta": 5e6})"),
                               "config.json");
  ASSERT_TRUE(v5.ok()) << v5.error().message;
  EXPECT_EQ(v5->rope_theta, 5e6);

  EXPECT_TRUE(Contains(config_error(tiny_qwen3(R"(, "rope_scaling": {"type": "dynamic", "factor": 2.0})")),
                       "rope_scaling: RoPE type 'dynamic' is not supported; coli implements default, linear, yarn"));
  EXPECT_TRUE(Contains(config_error(tiny_qwen3(R"(, "rope_scaling": {"type": "linear"})")),
                       "RoPE type 'linear' needs a 'factor' greater than 0"));
}

// --- describe_model on tiny checkpoints -------------------------------------

using Mutation = std::function<void(std::vector<TensorToWrite>&)>;

// Writes config.json and a model.safetensors holding every tensor the config
// implies (BF16, zero data), after `mutate` has edited the list.
void write_tiny_model(const fs::path& dir, const std::string& config_text, const Mutation& mutate = {}) {
  std::ofstream(dir / "config.json") << config_text;
  auto config = parse_model_config(config_text, "config.json");
  ASSERT_TRUE(config.ok()) << config.error().message;
  std::vector<TensorToWrite> tensors;
  for (const ExpectedTensor& tensor : expected_tensors(*config))
    tensors.push_back({tensor.name, DType::BF16, tensor.shape, {}});
  if (mutate) mutate(tensors);
  ASSERT_TRUE(write_safetensors(dir / "model.safetensors", tensors).ok());
}

const DescribedTensor* find_tensor(const ModelDesc& desc, const std::string& name) {
  for (const DescribedTensor& tensor : desc.tensors)
    if (tensor.name == name) return &tensor;
  return nullptr;
}

void expect_tensor(const ModelDesc& desc, const std::string& name, const Shape& shape) {
  const DescribedTensor* tensor = find_tensor(desc, name);
  ASSERT_NE(tensor, nullptr) << name;
  EXPECT_EQ(tensor->shape, shape) << name;
  EXPECT_EQ(tensor->bytes, shape.size() == 1 ? shape[0] * 2 : shape[0] * shape[1] * 2) << name;
}

// Dense plus expert bytes must account for every described tensor.
void expect_totals_consistent(const ModelDesc& desc) {
  std::uint64_t all = 0;
  for (const DescribedTensor& tensor : desc.tensors) all += tensor.bytes;
  EXPECT_EQ(desc.dense_bytes_total + desc.expert_bytes_total, all);
  EXPECT_EQ(desc.bytes_per_expert * desc.expert_count, desc.expert_bytes_total);
}

TEST(DescribeModel, Qwen3MoeWithDenseLayerAndExplicitHeadDim) {
  TempDir dir;
  write_tiny_model(dir.path(), tiny_qwen3(R"(, "mlp_only_layers": [1])"));
  auto desc = describe_model(dir.path());
  ASSERT_TRUE(desc.ok()) << desc.error().message;
  expect_tensor(*desc, "model.layers.0.self_attn.q_proj.weight", {12, 8});  // 2 heads x head_dim 6
  expect_tensor(*desc, "model.layers.0.self_attn.o_proj.weight", {8, 12});
  expect_tensor(*desc, "model.layers.0.self_attn.q_norm.weight", {6});
  expect_tensor(*desc, "model.layers.0.mlp.gate.weight", {4, 8});
  expect_tensor(*desc, "model.layers.0.mlp.experts.3.down_proj.weight", {8, 4});
  expect_tensor(*desc, "model.layers.1.mlp.gate_proj.weight", {12, 8});  // dense layer
  expect_tensor(*desc, "lm_head.weight", {16, 8});
  EXPECT_EQ(find_tensor(*desc, "model.layers.1.mlp.gate.weight"), nullptr);
  EXPECT_EQ(desc->moe_layers, (std::vector<std::uint64_t>{0}));
  EXPECT_EQ(desc->expert_count, 4u);
  EXPECT_EQ(desc->expert_dtype, DType::BF16);
  EXPECT_EQ(desc->bytes_per_expert, 3u * 4 * 8 * 2);
  EXPECT_EQ(desc->expert_bytes_total, 4u * 192);
  expect_totals_consistent(*desc);
}

TEST(DescribeModel, OlmoeWithTiedEmbeddings) {
  TempDir dir;
  write_tiny_model(dir.path(), R"({"model_type": "olmoe", "hidden_size": 8, "num_hidden_layers": 2,
    "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 16, "num_experts": 4,
    "num_experts_per_tok": 2, "intermediate_size": 4, "tie_word_embeddings": true})");
  auto desc = describe_model(dir.path());
  ASSERT_TRUE(desc.ok()) << desc.error().message;
  expect_tensor(*desc, "model.layers.1.self_attn.q_norm.weight", {8});  // over all heads
  expect_tensor(*desc, "model.layers.1.self_attn.k_norm.weight", {4});  // over the kv heads
  expect_tensor(*desc, "model.layers.1.mlp.experts.0.up_proj.weight", {4, 8});
  EXPECT_EQ(find_tensor(*desc, "lm_head.weight"), nullptr);
  EXPECT_EQ(desc->moe_layers, (std::vector<std::uint64_t>{0, 1}));
  EXPECT_EQ(desc->expert_count, 8u);
  expect_totals_consistent(*desc);
}

const std::string kTinyMixtral = R"({"model_type": "mixtral", "hidden_size": 8, "num_hidden_layers": 2,
  "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 16, "num_local_experts": 4,
  "num_experts_per_tok": 2, "intermediate_size": 4})";

TEST(DescribeModel, MixtralNamesAndIgnoredBuffers) {
  TempDir dir;
  write_tiny_model(dir.path(), kTinyMixtral, [](std::vector<TensorToWrite>& tensors) {
    tensors.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", DType::F32, {2}, {}});
  });
  auto desc = describe_model(dir.path());
  ASSERT_TRUE(desc.ok()) << desc.error().message;
  expect_tensor(*desc, "model.layers.1.block_sparse_moe.gate.weight", {4, 8});
  expect_tensor(*desc, "model.layers.1.block_sparse_moe.experts.3.w1.weight", {4, 8});
  expect_tensor(*desc, "model.layers.1.block_sparse_moe.experts.3.w2.weight", {8, 4});
  expect_tensor(*desc, "model.layers.1.block_sparse_moe.experts.3.w3.weight", {4, 8});
  expect_tensor(*desc, "model.layers.0.self_attn.k_proj.weight", {4, 8});
  EXPECT_EQ(find_tensor(*desc, "model.layers.0.self_attn.q_norm.weight"), nullptr);
  EXPECT_EQ(desc->ignored_tensors, (std::vector<std::string>{"model.layers.0.self_attn.rotary_emb.inv_freq"}));
  const DescribedTensor* w2 = find_tensor(*desc, "model.layers.1.block_sparse_moe.experts.3.w2.weight");
  EXPECT_EQ(w2->role, TensorRole::Expert);
  EXPECT_EQ(w2->layer, 1);
  EXPECT_EQ(w2->expert, 3);
  EXPECT_EQ(w2->file, dir.path() / "model.safetensors");
  expect_totals_consistent(*desc);
}

TEST(DescribeModel, Qwen2MoeSharedExpertCountsAsDense) {
  TempDir dir;
  write_tiny_model(dir.path(), R"({"model_type": "qwen2_moe", "hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 16, "num_experts": 4,
    "num_experts_per_tok": 2, "moe_intermediate_size": 4, "shared_expert_intermediate_size": 6})");
  auto desc = describe_model(dir.path());
  ASSERT_TRUE(desc.ok()) << desc.error().message;
  expect_tensor(*desc, "model.layers.0.self_attn.q_proj.bias", {8});
  EXPECT_EQ(find_tensor(*desc, "model.layers.0.self_attn.o_proj.bias"), nullptr);
  expect_tensor(*desc, "model.layers.0.mlp.shared_expert.gate_proj.weight", {6, 8});
  expect_tensor(*desc, "model.layers.0.mlp.shared_expert.down_proj.weight", {8, 6});
  expect_tensor(*desc, "model.layers.0.mlp.shared_expert_gate.weight", {1, 8});
  EXPECT_EQ(find_tensor(*desc, "model.layers.0.mlp.shared_expert.up_proj.weight")->role, TensorRole::SharedExpert);
  EXPECT_EQ(desc->expert_bytes_total, 4u * 3 * 4 * 8 * 2);  // shared expert not included
  expect_totals_consistent(*desc);
}

std::string describe_error(const std::string& config, const Mutation& mutate = {}) {
  TempDir dir;
  write_tiny_model(dir.path(), config, mutate);
  auto desc = describe_model(dir.path());
  EXPECT_FALSE(desc.ok());
  return desc.ok() ? "" : desc.error().message;
}

void drop(std::vector<TensorToWrite>& tensors, const std::string& name) {
  std::erase_if(tensors, [&](const TensorToWrite& tensor) { return tensor.name == name; });
}

TEST(DescribeModelErrors, MissingTensorIsNamed) {
  const std::string message = describe_error(kTinyMixtral, [](std::vector<TensorToWrite>& tensors) {
    drop(tensors, "model.layers.1.block_sparse_moe.experts.2.w3.weight");
  });
  EXPECT_TRUE(Contains(message, "tensor 'model.layers.1.block_sparse_moe.experts.2.w3.weight' (expert, layer 1) is "
                                "missing from the safetensors files"));
  EXPECT_TRUE(Contains(describe_error(kTinyMixtral, [](auto& tensors) { drop(tensors, "lm_head.weight"); }),
                       "tie_word_embeddings=false, so lm_head.weight must be stored"));
}

TEST(DescribeModelErrors, ShapeMismatchShowsExpectedAndFound) {
  const std::string message = describe_error(kTinyMixtral, [](std::vector<TensorToWrite>& tensors) {
    for (TensorToWrite& tensor : tensors)
      if (tensor.name == "model.layers.0.block_sparse_moe.gate.weight") tensor.shape = {6, 8};
  });
  EXPECT_TRUE(Contains(message, "tensor 'model.layers.0.block_sparse_moe.gate.weight' in "));
  EXPECT_TRUE(Contains(message, "has shape [6, 8] but config.json gives [4, 8] (num_experts x hidden_size)"));
}

TEST(DescribeModelErrors, ConfigDisagreesWithTensors) {
  auto extra_expert = [](std::vector<TensorToWrite>& tensors) {
    tensors.push_back({"model.layers.0.block_sparse_moe.experts.4.w1.weight", DType::BF16, {4, 8}, {}});
  };
  EXPECT_TRUE(Contains(describe_error(kTinyMixtral, extra_expert),
                       "config.json does not match the weights: tensor "
                       "'model.layers.0.block_sparse_moe.experts.4.w1.weight' belongs to expert 4 but config.json "
                       "has 4 experts"));
  auto extra_layer = [](std::vector<TensorToWrite>& tensors) {
    tensors.push_back({"model.layers.2.input_layernorm.weight", DType::BF16, {8}, {}});
  };
  EXPECT_TRUE(Contains(describe_error(kTinyMixtral, extra_layer), "belongs to layer 2 but num_hidden_layers is 2"));
}

TEST(DescribeModelErrors, IntegerWeightsAreFlagged) {
  const std::string message = describe_error(kTinyMixtral, [](std::vector<TensorToWrite>& tensors) {
    for (TensorToWrite& tensor : tensors)
      if (tensor.name == "model.layers.0.self_attn.q_proj.weight") tensor.dtype = DType::I8;
  });
  EXPECT_TRUE(Contains(message, "'model.layers.0.self_attn.q_proj.weight' in "));
  EXPECT_TRUE(Contains(message, "has dtype I8; coli computes with F32, F16 or BF16 weights"));
}

TEST(DescribeModelErrors, BrokenConfigAndMissingShard) {
  TempDir dir;
  std::ofstream(dir.path() / "config.json") << "{\"model_type\": \"mixtral\",\n\"hidden_size\": }";
  auto broken = describe_model(dir.path());
  ASSERT_FALSE(broken.ok());
  EXPECT_TRUE(Contains(broken.error().message, "config.json:2:"));

  std::ofstream(dir.path() / "config.json", std::ios::trunc) << kTinyMixtral;
  std::ofstream(dir.path() / "model.safetensors.index.json")
      << R"({"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}})";
  auto sharded = describe_model(dir.path());
  ASSERT_FALSE(sharded.ok());
  EXPECT_TRUE(Contains(sharded.error().message, "shard 'model-00001-of-00002.safetensors' (holding "
                                                "'model.embed_tokens.weight') does not exist"));

  TempDir empty;
  auto no_config = describe_model(empty.path());
  ASSERT_FALSE(no_config.ok());
  EXPECT_TRUE(Contains(no_config.error().message, "config.json"));
}

}  // namespace
}  // namespace coli::model
