// Scenario tests at real sizes for the model classes of issue 5: DeepSeek-V3
// (MLA, 671B), GLM-5 (MLA + sparse-attention indexer, 744B), Qwen3-30B-A3B
// and OLMoE, from their public configs (tests/fixtures/model-configs). The
// expected numbers are derived here from the config.json values with their
// own formulas and compared with the published parameter counts; the plans
// use the captured H200 profile and a RAM-limited replayed machine.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "coli/base/files.h"
#include "coli/planner/plan.h"
#include "coli/probe/profile_io.h"
#include "memory/memory_facts.h"

namespace coli::planner {
namespace {

using u64 = std::uint64_t;
constexpr u64 kGiB = 1ull << 30;
const std::string kConfigs = std::string(COLI_FIXTURES_DIR) + "/model-configs/";

ModelFootprint footprint(const std::string& file, WeightFormat experts = WeightFormat::q4_g64) {
  auto fp = read_footprint(kConfigs + file, experts, DenseFormat::source);
  EXPECT_TRUE(fp.ok()) << (fp.ok() ? "" : fp.error().message);
  return fp.ok() ? *fp : ModelFootprint{};
}

nlohmann::json raw_config(const std::string& file) {
  std::ifstream in(kConfigs + file);
  return nlohmann::json::parse(in);
}

u64 num(const nlohmann::json& j, const char* key) { return j.at(key).get<u64>(); }

// Parameter counts of a DeepseekV3-style model (MLA with a q latent, dense
// first layers, routed + shared experts, untied head), written out from the
// modeling code's module shapes, independently of the engine's layout code.
struct Counts {
  u64 total = 0, active = 0, mtp = 0;
};

Counts latent_moe_counts(const nlohmann::json& j) {
  const u64 h = num(j, "hidden_size"), layers = num(j, "num_hidden_layers"), heads = num(j, "num_attention_heads");
  const u64 q_rank = num(j, "q_lora_rank"), kv_rank = num(j, "kv_lora_rank");
  const u64 nope = num(j, "qk_nope_head_dim"), rope = num(j, "qk_rope_head_dim"), v = num(j, "v_head_dim");
  const u64 experts = num(j, "n_routed_experts"), shared = num(j, "n_shared_experts");
  const u64 top_k = num(j, "num_experts_per_tok"), width = num(j, "moe_intermediate_size");
  const u64 dense_layers = num(j, "first_k_dense_replace"), dense_width = num(j, "intermediate_size");
  const u64 vocab = num(j, "vocab_size");
  u64 attention = q_rank * h + q_rank + heads * (nope + rope) * q_rank  // q_a, q_a_layernorm, q_b
                  + (kv_rank + rope) * h + kv_rank                     // kv_a_proj_with_mqa, kv_a_layernorm
                  + heads * (nope + v) * kv_rank + h * heads * v;       // kv_b, o_proj
  if (j.contains("index_n_heads")) {  // indexer: wq_b, wk, k_norm (weight + bias), weights_proj
    const u64 ih = num(j, "index_n_heads"), id = num(j, "index_head_dim");
    attention += ih * id * q_rank + id * h + 2 * id + ih * h;
  }
  const u64 norms = 2 * h, expert = 3 * h * width, router = experts * h + experts;  // + e_score_correction_bias
  const u64 moe_layers = layers - dense_layers;
  const u64 moe_layer = attention + norms + router + experts * expert + shared * expert;
  const u64 dense_layer = attention + norms + 3 * h * dense_width;
  const u64 embedding = vocab * h, head = vocab * h, final_norm = h;
  Counts c;
  c.total = embedding + dense_layers * dense_layer + moe_layers * moe_layer + final_norm + head;
  c.active = c.total - embedding - moe_layers * experts * expert + moe_layers * top_k * expert;
  c.mtp = num(j, "num_nextn_predict_layers") * (moe_layer + 2 * h + 2 * h * h + h);  // + enorm, hnorm, eh_proj, head norm
  return c;
}

double relative(double value, double reference) { return std::abs(value - reference) / reference; }

DeviceProfile h200_profile() {
  auto p = load_profile(std::string(COLI_FIXTURES_DIR) + "/../../profiles/h200-xeon-16c.toml");
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
  return p.ok() ? *p : DeviceProfile{};
}

// The replayed 8 GiB container: its headroom comes from the probe's own
// reading of that machine's /proc and cgroup files.
DeviceProfile cgroup_8g_profile() {
  auto facts = probe::read_memory_facts(SystemRoot(std::string(COLI_FIXTURES_DIR) + "/machines/container-cgroup-8g/root"),
                                        std::nullopt);
  EXPECT_TRUE(facts.ok()) << (facts.ok() ? "" : facts.error().message);
  DeviceProfile p;
  p.cpu.usable.pus = *CpuSet::parse("0-7");
  p.memory.headroom_bytes = facts.ok() ? facts->headroom_bytes : 0;
  p.memory.headroom_source = facts.ok() ? facts->headroom_source : "";
  p.threads.decode_threads = p.threads.prefill_threads = 8;
  p.threads.rule = "single-kind-physical-cores";
  p.threads.reason = "replayed container-cgroup-8g";
  return p;
}

bool mentions(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void expect_plan_fits(const Plan& plan, const ModelFootprint& fp) {
  EXPECT_GE(plan.cap, fp.top_k);
  EXPECT_LE(plan.planned_ram_bytes() + plan.margin.bytes, plan.headroom_bytes);
  const int distinct = std::min(fp.n_experts - plan.pins, fp.top_k * plan.prefill_round_tokens);
  EXPECT_GE(plan.cap - plan.pins, distinct);
}

TEST(ScenarioDescription, DeepSeekV3MatchesItsConfigAndPublishedCounts) {
  const ModelFootprint fp = footprint("DeepSeek-V3.json");
  const nlohmann::json j = raw_config("DeepSeek-V3.json");
  const Counts c = latent_moe_counts(j);
  EXPECT_EQ(fp.total_parameters, c.total);
  EXPECT_EQ(fp.active_parameters, c.active);
  // DeepSeek-V3 README_WEIGHTS: 671B total, 36.6B activated (incl. 0.9B head),
  // MTP module 11.5B unique parameters.
  EXPECT_LT(relative(fp.total_parameters, 671e9), 0.01) << fp.total_parameters;
  EXPECT_LT(relative(fp.active_parameters, 36.6e9), 0.01) << fp.active_parameters;
  EXPECT_LT(relative(fp.active_parameters, 37e9), 0.03) << fp.active_parameters;
  ASSERT_EQ(fp.excluded.size(), 1u);
  EXPECT_EQ(fp.excluded[0].role, "mtp");
  EXPECT_EQ(fp.excluded[0].parameters, c.mtp);
  EXPECT_LT(relative(fp.excluded[0].parameters, 11.5e9), 0.02) << fp.excluded[0].parameters;

  EXPECT_EQ(fp.moe_layer_count(), num(j, "num_hidden_layers") - num(j, "first_k_dense_replace"));
  EXPECT_EQ(fp.moe_layers.front(), 3u);
  EXPECT_EQ(fp.n_experts, 256);
  EXPECT_EQ(fp.top_k, 8);
  const u64 h = num(j, "hidden_size"), w = num(j, "moe_intermediate_size");
  EXPECT_EQ(fp.q4_g64.record_bytes, 3 * (h * w / 2 + h * w / 64 * 2));  // every part already 64-aligned
  EXPECT_EQ(fp.q8_row.record_bytes, 3 * h * w + (w + w + h) * 4);
  EXPECT_EQ(fp.q4_g64.record_stride % 4096, 0u);
  // Everything but the routed experts is held in bf16: the embedding is counted here.
  EXPECT_EQ(fp.dense_held_bytes, (c.total - fp.moe_layer_count() * 256 * 3 * h * w) * 2);
  for (const DenseComponent& d : fp.dense) {
    if (d.role == "dense mlp") {
      EXPECT_EQ(d.source_bytes, 3 * 3 * h * num(j, "intermediate_size") * 2);
    } else if (d.role == "shared expert") {
      EXPECT_EQ(d.source_bytes, fp.moe_layer_count() * 3 * h * w * 2);
    }
  }
  // The KV cache holds the 512-wide latent and the 64-wide RoPE key per layer, not 128 heads of K and V.
  EXPECT_EQ(fp.kv_bytes_per_position, num(j, "num_hidden_layers") * (512 + 64) * 4);
  EXPECT_EQ(kv_cache_bytes(fp.config, 4096), fp.kv_bytes_per_position * 4096);
}

TEST(ScenarioDescription, Glm5MatchesItsConfigAndPublishedCounts) {
  const ModelFootprint fp = footprint("GLM-5.json");
  const nlohmann::json j = raw_config("GLM-5.json");
  const Counts c = latent_moe_counts(j);
  EXPECT_EQ(fp.total_parameters, c.total);
  EXPECT_EQ(fp.active_parameters, c.active);
  // GLM-5 model card / technical report: 744B total, 40B activated.
  EXPECT_LT(relative(fp.total_parameters, 744e9), 0.01) << fp.total_parameters;
  EXPECT_LT(relative(fp.active_parameters, 40e9), 0.05) << fp.active_parameters;
  EXPECT_EQ(fp.moe_layer_count(), 75u);  // 3 dense + 75 MoE layers
  // MLA latent + RoPE key + the indexer's cached key, per layer.
  EXPECT_EQ(fp.kv_bytes_per_position, 78u * (512 + 64 + 128) * 4);
  EXPECT_TRUE(mentions(fp.kv_layout, "index_head_dim 128"));
  ASSERT_EQ(fp.excluded.size(), 1u);
  EXPECT_EQ(fp.excluded[0].parameters, c.mtp);
}

// The KV line is priced in the plan's KV type with the engine's own formula
// (coli::kv_cache_bytes, what forward::KvCache allocates), and says which.
TEST(ScenarioPlan, KvCacheIsPricedInItsType) {
  const ModelFootprint fp = footprint("OLMoE-1B-7B-0924.json");
  const DeviceProfile h200 = h200_profile();
  for (KvType type : kAllKvTypes) {
    const std::string name(kv_type_name(type));
    auto plan = make_plan(h200, fp, PlanRequest{.ctx = 4096, .gpu = "none", .kv_type = type});
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    EXPECT_EQ(plan->kv_type, type);
    const MemoryLine* kv = plan->memory.find("KV cache");
    ASSERT_NE(kv, nullptr);
    EXPECT_EQ(kv->bytes, 16ull * 2 * 16 * 128 * 4096 * (type == KvType::f32 ? 4 : 2)) << name;
    EXPECT_EQ(kv->bytes, coli::kv_cache_bytes(16, 16, 128, 4096, type));
    EXPECT_TRUE(mentions(kv->formula, "(" + name + ")")) << kv->formula;
    const Decision* decision = plan->decision("kv_type");
    ASSERT_NE(decision, nullptr);
    EXPECT_EQ(decision->value, name);
    EXPECT_TRUE(mentions(decision->reason, "--kv-type " + name)) << decision->reason;
  }
  auto by_default = make_plan(h200, fp, PlanRequest{.ctx = 4096, .gpu = "none"});
  ASSERT_TRUE(by_default.ok());
  EXPECT_EQ(by_default->kv_type, KvType::f16);
  EXPECT_TRUE(mentions(by_default->decision("kv_type")->reason, "f16 by default")) << by_default->decision("kv_type")->reason;
}

// The GPU decoder keeps its own f32 KV in VRAM: f32 in the plan, and a
// request for another type is said to be ignored.
TEST(ScenarioPlan, GpuDecoderKeepsF32KvAndSaysSo) {
  const ModelFootprint fp = footprint("OLMoE-1B-7B-0924.json");
  const KvTypeChoice gpu = decide_kv_type(fp, KvType::bf16, true, 4096);
  EXPECT_EQ(gpu.type, KvType::f32);
  EXPECT_TRUE(mentions(gpu.reason, "--kv-type bf16 applies to the CPU engine and is ignored")) << gpu.reason;
  EXPECT_EQ(decide_kv_type(fp, std::nullopt, true, 4096).type, KvType::f32);
  EXPECT_EQ(decide_kv_type(fp, std::nullopt, false, 4096).type, KvType::f16);
}

// Models the engine runs keep their numbers: GQA K and V in f32.
TEST(ScenarioDescription, Qwen3AndOlmoeClassesMatchPublishedCounts) {
  const ModelFootprint qwen = footprint("Qwen3-30B-A3B.json");
  EXPECT_EQ(qwen.kv_bytes_per_position, 48u * 2 * 4 * 128 * 4);
  EXPECT_TRUE(qwen.excluded.empty());
  EXPECT_LT(relative(qwen.total_parameters, 30.5e9), 0.01) << qwen.total_parameters;  // model card: 30.5B
  // Qwen and OLMoE count the input embedding as activated, DeepSeek does not.
  const auto embedding = [](const ModelFootprint& fp) { return fp.config.vocab_size * fp.config.hidden_size; };
  EXPECT_LT(relative(qwen.active_parameters + embedding(qwen), 3.3e9), 0.03) << qwen.active_parameters;  // 3.3B
  const ModelFootprint olmoe = footprint("OLMoE-1B-7B-0924.json");
  EXPECT_EQ(olmoe.kv_bytes_per_position, 16u * 2 * 16 * 128 * 4);
  EXPECT_LT(relative(olmoe.total_parameters, 6.9e9), 0.01) << olmoe.total_parameters;  // paper: 6.9B total
  EXPECT_LT(relative(olmoe.active_parameters + embedding(olmoe), 1.3e9), 0.03) << olmoe.active_parameters;  // 1.3B
}

TEST(ScenarioPlan, DeepSeekOnTheH200StreamsExpertsFarBeyondRam) {
  const ModelFootprint fp = footprint("DeepSeek-V3.json");
  const DeviceProfile h200 = h200_profile();
  EXPECT_GT(fp.all_expert_records_bytes(), 2 * h200.memory.headroom_bytes);  // ~350 GB of int4 experts
  auto plan = make_plan(h200, fp, PlanRequest{});
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_TRUE(plan->streaming());
  EXPECT_LT(plan->cap, fp.n_experts);
  expect_plan_fits(*plan, fp);
  EXPECT_EQ(plan->kv_type, KvType::f16);  // the default
  EXPECT_EQ(plan->memory.find("KV cache")->bytes, kv_bytes_per_position(fp.config, KvType::f16) * static_cast<u64>(plan->ctx));
  EXPECT_EQ(2 * kv_bytes_per_position(fp.config, KvType::f16), fp.kv_bytes_per_position);  // MLA latent in f16: half of f32
  // One more slot per MoE layer does not fit.
  auto bigger = make_plan(h200, fp, PlanRequest{.cap = plan->cap + 1});
  EXPECT_FALSE(bigger.ok());
}

TEST(ScenarioPlan, Glm5OnTheH200StreamsAndFits) {
  const ModelFootprint fp = footprint("GLM-5.json");
  auto plan = make_plan(h200_profile(), fp, PlanRequest{});
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_TRUE(plan->streaming());
  expect_plan_fits(*plan, fp);
}

TEST(ScenarioPlan, ContextBeyondMaxPositionsIsRefused) {
  const ModelFootprint fp = footprint("DeepSeek-V3.json");
  auto refused = make_plan(h200_profile(), fp, PlanRequest{.ctx = 163841});
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(mentions(refused.error().message, "max_position_embeddings 163840")) << refused.error().message;
  auto glm = make_plan(h200_profile(), footprint("GLM-5.json"), PlanRequest{.ctx = 202753});
  ASSERT_FALSE(glm.ok());
  EXPECT_TRUE(mentions(glm.error().message, "max_position_embeddings 202752")) << glm.error().message;
}

TEST(ScenarioPlan, RamLimitedReplayedBoxRefusesEvenCapTopK) {
  const DeviceProfile box = cgroup_8g_profile();
  EXPECT_EQ(box.memory.headroom_bytes, 7 * kGiB);
  EXPECT_EQ(box.memory.headroom_source, "cgroup v2 memory.max headroom");
  for (const char* file : {"DeepSeek-V3.json", "GLM-5.json"}) {
    auto plan = make_plan(box, footprint(file), PlanRequest{});
    ASSERT_FALSE(plan.ok()) << file;
    const std::string& why = plan.error().message;
    EXPECT_TRUE(mentions(why, "cap = top_k = 8")) << why;
    EXPECT_TRUE(mentions(why, "headroom is 7.00 GiB (cgroup v2 memory.max headroom)")) << why;
  }
  // The same box plans the Qwen3-30B-A3B class by streaming its experts.
  auto qwen = make_plan(box, footprint("Qwen3-30B-A3B.json"), PlanRequest{});
  ASSERT_TRUE(qwen.ok()) << qwen.error().message;
  EXPECT_TRUE(qwen->streaming());
  expect_plan_fits(*qwen, footprint("Qwen3-30B-A3B.json"));
}

}  // namespace
}  // namespace coli::planner
