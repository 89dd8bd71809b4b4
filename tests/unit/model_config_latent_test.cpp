// deepseek_v3 and glm_moe_dsa configs (planning only): the public configs'
// numbers, the tensor layout they imply, their errors, and the engine's
// refusal to convert or run them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "unit/test_support.h"
#include "coli/model/model_config.h"
#include "coli/model/model_desc.h"
#include "coli/model/safetensors_writer.h"

namespace coli::model {
namespace {
namespace fs = std::filesystem;
using testing_support::Contains;

ModelConfig fixture(const std::string& name) {
  auto config = read_model_config(fs::path(COLI_FIXTURES_DIR) / "model-configs" / name);
  EXPECT_TRUE(config.ok()) << config.error().message;
  return config.ok() ? *config : ModelConfig{};
}

const ExpectedTensor* find(const std::vector<ExpectedTensor>& tensors, const std::string& name) {
  for (const ExpectedTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

TEST(LatentConfigs, DeepSeekV3) {
  const ModelConfig c = fixture("DeepSeek-V3.json");
  EXPECT_EQ(c.architecture, Architecture::DeepseekV3);
  EXPECT_TRUE(c.planning_only());
  ASSERT_TRUE(c.mla.has_value());
  EXPECT_EQ(c.mla->q_lora_rank, 1536u);
  EXPECT_EQ(c.mla->kv_lora_rank, 512u);
  EXPECT_EQ(c.mla->qk_head_dim(), 192u);
  EXPECT_EQ(c.mla->v_head_dim, 128u);
  EXPECT_EQ(c.head_dim, 192u);
  EXPECT_FALSE(c.indexer.has_value());
  EXPECT_EQ(c.num_experts, 256u);
  EXPECT_EQ(c.num_experts_per_tok, 8u);
  EXPECT_EQ(c.n_shared_experts, 1u);
  EXPECT_EQ(c.shared_expert_intermediate_size, 2048u);
  EXPECT_FALSE(c.has_shared_expert_gate());
  EXPECT_EQ(c.dense_intermediate_size, 18432u);
  EXPECT_EQ(c.router_normalization, RouterNormalization::SigmoidTopK);
  EXPECT_TRUE(c.router_correction_bias);
  EXPECT_EQ(c.num_nextn_predict_layers, 1u);
  EXPECT_FALSE(c.is_moe_layer(2));
  EXPECT_TRUE(c.is_moe_layer(3) && c.is_moe_layer(60));
  EXPECT_EQ(c.max_position_embeddings, 163840u);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_EQ(c.rope_scaling.factor, 40.0);

  const auto tensors = expected_tensors(c);
  EXPECT_EQ(find(tensors, "model.layers.0.mlp.gate_proj.weight")->shape, (std::vector<std::uint64_t>{18432, 7168}));
  EXPECT_EQ(find(tensors, "model.layers.3.self_attn.q_b_proj.weight")->shape, (std::vector<std::uint64_t>{128 * 192, 1536}));
  EXPECT_EQ(find(tensors, "model.layers.3.self_attn.kv_a_proj_with_mqa.weight")->shape,
            (std::vector<std::uint64_t>{576, 7168}));
  EXPECT_EQ(find(tensors, "model.layers.3.self_attn.kv_b_proj.weight")->shape, (std::vector<std::uint64_t>{128 * 256, 512}));
  EXPECT_EQ(find(tensors, "model.layers.3.self_attn.o_proj.weight")->shape, (std::vector<std::uint64_t>{7168, 128 * 128}));
  EXPECT_EQ(find(tensors, "model.layers.3.mlp.shared_experts.down_proj.weight")->shape,
            (std::vector<std::uint64_t>{7168, 2048}));
  EXPECT_NE(find(tensors, "model.layers.60.mlp.gate.e_score_correction_bias"), nullptr);
  EXPECT_EQ(find(tensors, "model.layers.0.mlp.gate.weight"), nullptr);  // dense layer
  EXPECT_EQ(find(tensors, "model.layers.61.eh_proj.weight"), nullptr);  // MTP left out
  const auto mtp = mtp_tensors(c);
  ASSERT_NE(find(mtp, "model.layers.61.eh_proj.weight"), nullptr);
  EXPECT_EQ(find(mtp, "model.layers.61.eh_proj.weight")->shape, (std::vector<std::uint64_t>{7168, 2 * 7168}));
  ASSERT_NE(find(mtp, "model.layers.61.mlp.experts.255.up_proj.weight"), nullptr);
  EXPECT_EQ(find(mtp, "model.layers.61.mlp.experts.255.up_proj.weight")->role, TensorRole::Mtp);
}

TEST(LatentConfigs, Glm5WithSparseAttentionIndexer) {
  const ModelConfig c = fixture("GLM-5.json");
  EXPECT_EQ(c.architecture, Architecture::GlmMoeDsa);
  ASSERT_TRUE(c.mla && c.indexer);
  EXPECT_EQ(c.mla->qk_head_dim(), 256u);
  EXPECT_EQ(c.head_dim, 256u);  // not the config's "head_dim": 64 (the RoPE width)
  EXPECT_EQ(c.indexer->n_heads, 32u);
  EXPECT_EQ(c.indexer->head_dim, 128u);
  EXPECT_EQ(c.indexer->topk, 2048u);
  EXPECT_EQ(c.rope_theta, 1e6);  // from rope_parameters
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 202752u);
  const auto tensors = expected_tensors(c);
  EXPECT_EQ(find(tensors, "model.layers.5.self_attn.indexer.wq_b.weight")->shape,
            (std::vector<std::uint64_t>{32 * 128, 2048}));
  EXPECT_EQ(find(tensors, "model.layers.5.self_attn.indexer.k_norm.bias")->shape, (std::vector<std::uint64_t>{128}));
}

std::string tiny_deepseek(const std::string& extra = "") {
  return R"({"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
  "vocab_size": 16, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
  "v_head_dim": 8, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
  "n_shared_experts": 1, "first_k_dense_replace": 1, "intermediate_size": 128)" + extra + "}";
}

std::string config_error(const std::string& text) {
  auto config = parse_model_config(text, "config.json");
  EXPECT_FALSE(config.ok());
  return config.ok() ? "" : config.error().message;
}

TEST(LatentConfigs, ErrorsNameTheField) {
  ASSERT_TRUE(parse_model_config(tiny_deepseek(), "config.json").ok());
  EXPECT_TRUE(Contains(config_error(tiny_deepseek(R"(, "qk_head_dim": 16)")),
                       "field 'qk_head_dim' (16) must equal qk_nope_head_dim + qk_rope_head_dim (12)"));
  EXPECT_TRUE(Contains(config_error(tiny_deepseek(R"(, "num_nextn_predict_layers": -1)")),
                       "field 'num_nextn_predict_layers' must be a non-negative integer, found -1"));
  std::string no_kv = tiny_deepseek();
  no_kv.replace(no_kv.find(R"("kv_lora_rank": 16, )"), 20, "");
  EXPECT_TRUE(Contains(config_error(no_kv), "field 'kv_lora_rank' is missing"));
  std::string all_dense = tiny_deepseek();
  all_dense.replace(all_dense.find(R"("first_k_dense_replace": 1)"), 26, R"("first_k_dense_replace": 3)");
  EXPECT_TRUE(Contains(config_error(all_dense), "field 'first_k_dense_replace' (3) is more than the 2 layers"));
  std::string glm = tiny_deepseek(R"(, "max_position_embeddings": 64)");
  glm.replace(glm.find("deepseek_v3"), 11, "glm_moe_dsa");
  EXPECT_TRUE(Contains(config_error(glm), "field 'index_n_heads' is missing"));
}

TEST(LatentConfigs, EngineRefusesToConvertOrRunThem) {
  auto config = parse_model_config(tiny_deepseek(), "config.json");
  ASSERT_TRUE(config.ok()) << config.error().message;
  const Status refused = check_engine_support(*config, "m.coli");
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(Contains(refused.error().message, "m.coli: model_type 'deepseek_v3' is read for planning only"));
  EXPECT_TRUE(check_engine_support(fixture("Qwen3-30B-A3B.json"), "m.coli").ok());

  testing_support::TempDir dir("coli-latent");
  std::ofstream(dir.path() / "config.json") << tiny_deepseek();
  std::vector<TensorToWrite> tensors;
  for (const ExpectedTensor& t : expected_tensors(*config)) tensors.push_back({t.name, DType::BF16, t.shape, {}});
  ASSERT_TRUE(write_safetensors(dir.path() / "model.safetensors", tensors).ok());
  auto desc = describe_model(dir.path());  // what coli convert starts with
  ASSERT_FALSE(desc.ok());
  EXPECT_TRUE(Contains(desc.error().message, "planning only")) << desc.error().message;
  EXPECT_TRUE(Contains(desc.error().message, "pass its config.json to coli-plan")) << desc.error().message;
}

}  // namespace
}  // namespace coli::model
