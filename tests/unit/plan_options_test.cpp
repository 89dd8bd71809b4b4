// runtime::options_from_plan: the one place a plan becomes engine knobs.
#include <gtest/gtest.h>

#include "coli/runtime/plan_options.h"

#include "coli/base/files.h"
#include "coli/base/text.h"
#include "coli/model/model_config.h"
#include "coli/planner/deciders.h"
#include "coli/planner/memory_preview.h"

namespace coli::runtime {
namespace {

ModelShape shape_of(int layers, int experts, int top_k) {
  ModelShape shape;
  shape.moe_layers = layers;
  shape.experts = experts;
  shape.top_k = top_k;
  return shape;
}

planner::Plan plan_of(int cap, int n_experts) {
  planner::Plan plan;
  plan.threads = 3;
  plan.compute_pus = CpuSet({2, 4, 6});
  plan.cpu_kernel = "avx2";
  plan.cap = cap;
  plan.n_experts = n_experts;
  plan.prefill_round_tokens = 5;
  plan.ctx = 777;
  plan.kv_type = KvType::bf16;  // not the engine's default: carried, not defaulted
  plan.io_threads = 2;
  plan.direct_io = false;
  plan.margin.bytes = 1000;
  plan.memory.lines.push_back({"expert cache", planner::Tier::ram, 50000, ""});
  return plan;
}

// Layer 0 prefers experts 5 then 1; layer 1 prefers 0 then 7.
experts::UsageHistory history_of(const ModelShape& shape) {
  auto history = experts::UsageHistory::create({shape.moe_layers, shape.experts, shape.top_k, "test-model"});
  EXPECT_TRUE(history.ok());
  std::vector<std::vector<std::uint64_t>> counts(2, std::vector<std::uint64_t>(8, 1));
  counts[0][5] = 90, counts[0][1] = 40, counts[1][0] = 70, counts[1][7] = 60;
  EXPECT_TRUE(history->add_counts(counts, 100).ok());
  return std::move(*history);
}

TEST(OptionsFromPlan, EveryKnobTheStreamingPlanDecides) {
  const ModelShape shape = shape_of(2, 8, 2);
  const experts::UsageHistory history = history_of(shape);
  planner::Plan plan = plan_of(5, 8);
  plan.pins = 2;
  auto options = options_from_plan(plan, shape, &history);
  ASSERT_TRUE(options.ok()) << options.error().message;
  EXPECT_EQ(options->threads, 3);
  EXPECT_EQ(options->compute_pus.to_list(), "2,4,6");
  EXPECT_EQ(options->prefill_threads, 0) << "no prefill set of its own: decode's for every pass";
  plan.prefill_threads = 4;
  plan.prefill_pus = CpuSet({2, 3, 4, 6});
  auto with_prefill = options_from_plan(plan, shape, &history);
  ASSERT_TRUE(with_prefill.ok()) << with_prefill.error().message;
  EXPECT_EQ(with_prefill->prefill_threads, 4);
  EXPECT_EQ(with_prefill->prefill_pus.to_list(), "2-4,6");
  EXPECT_EQ(options->cpu_kernel, "avx2");
  EXPECT_EQ(options->cache_capacity, 5);
  EXPECT_EQ(options->prefill_round_tokens, 5);
  EXPECT_EQ(options->max_context, 777);
  EXPECT_EQ(options->kv_type, KvType::bf16);
  EXPECT_EQ(options->io_threads, 2);
  EXPECT_FALSE(options->direct_io);
  EXPECT_EQ(options->rss_limit_bytes, 51000u);  // the plan's RAM plus its margin
  // Pins as expert ids, the most used of each layer.
  ASSERT_EQ(options->pins.size(), 2u);
  EXPECT_EQ(options->pins[0], (std::vector<int>{5, 1}));
  EXPECT_EQ(options->pins[1], (std::vector<int>{0, 7}));
}

// A whole-decoder GPU plan: its backend, device and prefill batch reach the
// engine (an expert-tier preview or a CPU plan leaves the engine's defaults).
TEST(OptionsFromPlan, AWholeDecoderPlanGivesItsDeviceAndPrefillBatch) {
  const ModelShape shape = shape_of(2, 8, 2);
  planner::Plan plan = plan_of(8, 8);
  plan.gpu.whole_decoder = true;
  plan.gpu.backend = "cuda";
  plan.gpu.device.gpu.index = 1;
  plan.gpu.batch_tokens = 384;
  plan.gpu.vram_experts = {8, 8};
  auto options = options_from_plan(plan, shape);
  ASSERT_TRUE(options.ok()) << options.error().message;
  EXPECT_EQ(options->backend, "cuda");
  EXPECT_EQ(options->gpu_index, 1);
  EXPECT_EQ(options->gpu_batch_tokens, 384);
  EXPECT_EQ(options->vram_experts.size(), 2u);
  plan.gpu.engine_runs_it = false;  // a preview: the CPU runs it, the batch is not read
  auto preview = options_from_plan(plan, shape);
  ASSERT_TRUE(preview.ok()) << preview.error().message;
  EXPECT_EQ(preview->backend, "cpu");
  EXPECT_EQ(preview->gpu_batch_tokens, runtime::ModelOptions{}.gpu_batch_tokens);
}

// An expert-parallel plan: its GPUs in rank order, each one's local CPUs and
// the placement reach the engine; the summed VRAM tier (8 + 8 slots of two
// GPUs) does not become one GPU's vram_experts.
TEST(OptionsFromPlan, AnExpertParallelPlanGivesItsGpusCpusAndPlacement) {
  const ModelShape shape = shape_of(2, 8, 2);
  planner::Plan plan = plan_of(8, 8);
  plan.gpu.whole_decoder = true;
  plan.gpu.backend = "cuda";
  plan.gpu.device.gpu.index = 2;
  plan.gpu.batch_tokens = 512;
  plan.gpu.vram_experts = {8, 8};
  plan.expert_parallel.gpus.resize(2);
  plan.expert_parallel.gpus[0].ordinal = 2;
  plan.expert_parallel.gpus[0].local_cpus = CpuSet({0, 1, 2, 3});
  plan.expert_parallel.gpus[1].ordinal = 0;
  plan.expert_parallel.gpus[1].local_cpus = CpuSet({4, 5, 6, 7});
  plan.expert_parallel.expert_gpu = {{2, 0, 2, 0, 2, 0, 2, 0}, {0, 0, 0, 0, 2, 2, 2, 2}};
  auto options = options_from_plan(plan, shape);
  ASSERT_TRUE(options.ok()) << options.error().message;
  EXPECT_EQ(options->backend, "cuda");
  EXPECT_EQ(options->gpu_devices, (std::vector<int>{2, 0}));
  EXPECT_EQ(options->gpu_index, 2);
  EXPECT_EQ(options->gpu_device_cpus, (std::vector<CpuSet>{CpuSet({0, 1, 2, 3}), CpuSet({4, 5, 6, 7})}));
  EXPECT_EQ(options->expert_gpu, plan.expert_parallel.expert_gpu);
  EXPECT_TRUE(options->vram_experts.empty());
  EXPECT_EQ(options->gpu_batch_tokens, 512);
  plan.gpu.engine_runs_it = false;  // a preview (a build without the CUDA decoder): the CPU runs it
  auto preview = options_from_plan(plan, shape);
  ASSERT_TRUE(preview.ok()) << preview.error().message;
  EXPECT_TRUE(preview->gpu_devices.empty());
  EXPECT_EQ(preview->backend, "cpu");
}

TEST(OptionsFromPlan, AllExpertsIsTheCapOfTheExpertCount) {
  const ModelShape shape = shape_of(2, 8, 2);
  auto options = options_from_plan(plan_of(8, 8), shape);
  ASSERT_TRUE(options.ok()) << options.error().message;
  // The same number the plan holds: a capacity of every expert, never a sentinel.
  EXPECT_EQ(options->cache_capacity, 8);
  EXPECT_GE(options->cache_capacity, shape.experts);
  EXPECT_TRUE(options->pins.empty());
  EXPECT_GE(ModelOptions{}.cache_capacity, shape.experts);  // unplanned default: every expert resident as well
}

TEST(OptionsFromPlan, RefusesPlansThatDoNotFitTheModel) {
  const ModelShape shape = shape_of(2, 8, 2);
  auto other_model = options_from_plan(plan_of(4, 16), shape);
  ASSERT_FALSE(other_model.ok());
  EXPECT_NE(other_model.error().message.find("16 experts per layer, the model has 8"), std::string::npos);
  auto below_top_k = options_from_plan(plan_of(1, 8), shape);
  ASSERT_FALSE(below_top_k.ok());
  EXPECT_NE(below_top_k.error().message.find("outside [top_k 2, 8 experts]"), std::string::npos);
  planner::Plan pinned = plan_of(6, 8);
  pinned.pins = 3;
  auto no_history = options_from_plan(pinned, shape);
  ASSERT_FALSE(no_history.ok());
  EXPECT_NE(no_history.error().message.find("no usage history"), std::string::npos);
}

// Issue 12: `coli run` without a plan had no memory check (OOM-killed in a
// 2 GiB cgroup). Its knobs are priced as a plan prices them, then checked.
ModelShape olmoe_shape() {
  ModelShape shape = shape_of(16, 64, 8);
  auto json = read_text_file(std::string(COLI_FIXTURES_DIR) + "/model-configs/OLMoE-1B-7B-0924.json");
  EXPECT_TRUE(json.ok());
  shape.config_json = *json;
  return shape;
}

TEST(KnobsMemory, ThePlannersFiguresForTheseKnobs) {
  const ModelShape shape = olmoe_shape();
  ModelOptions options;
  options.cache_capacity = 16;
  options.max_context = 512;
  options.threads = 2;
  options.io_threads = 4;
  options.pins = {{1, 2, 3}};
  options.cpu_kernel = "avx2";  // not amx, whatever this machine selects (amx adds tile padding, checked below)
  auto memory = memory_for_options(shape, options, 32, true);
  ASSERT_TRUE(memory.ok()) << memory.error().message;

  auto config = model::parse_model_config(shape.config_json, "olmoe");
  ASSERT_TRUE(config.ok());
  const planner::ModelFootprint footprint = planner::describe_footprint(*config, shape.expert_format, shape.dense_format);
  planner::MemoryKnobs knobs{.cap = 16, .pins = 3, .ctx = 512, .kv_type = KvType::f16, .prompt_tokens = 32,
                             .round_tokens = 64, .threads = 2, .io_threads = 4, .tokenizer = true};
  const std::uint64_t planned = planner::preview_memory(footprint, knobs).total(planner::Tier::ram);
  EXPECT_EQ(memory->planned_bytes, planned);
  EXPECT_EQ(memory->margin_bytes, planner::decide_safety_margin(planned, 2, 4).bytes);
  EXPECT_EQ(memory->slot_bytes, 16 * footprint.expert().record_stride);
  ModelOptions amx = options;
  amx.cpu_kernel = "amx";
  knobs.amx_tiles = true;
  auto amx_memory = memory_for_options(shape, amx, 32, true);
  ASSERT_TRUE(amx_memory.ok()) << amx_memory.error().message;
  EXPECT_EQ(amx_memory->planned_bytes, planner::preview_memory(footprint, knobs).total(planner::Tier::ram));
  EXPECT_GT(amx_memory->planned_bytes, memory->planned_bytes);
  knobs.amx_tiles = false;
  // The KV line follows the options' KV type: f32 costs the difference, no more.
  options.kv_type = KvType::f32;
  auto with_f32_kv = memory_for_options(shape, options, 32, true);
  ASSERT_TRUE(with_f32_kv.ok());
  EXPECT_EQ(with_f32_kv->planned_bytes - memory->planned_bytes,
            coli::kv_cache_bytes(16, 16, 128, 512, KvType::f32) - coli::kv_cache_bytes(16, 16, 128, 512, KvType::f16));
  options.kv_type = KvType::f16;

  options.cache_capacity = kAllExperts;  // every expert resident: the cap is the expert count
  auto resident = memory_for_options(shape, options, 32, true);
  ASSERT_TRUE(resident.ok());
  EXPECT_GE(resident->planned_bytes, memory->planned_bytes + 48 * memory->slot_bytes);
}

TEST(KnobsMemory, RefusesNamingNeededAndAvailableAndWhatToChange) {
  constexpr std::uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;
  KnobsMemory need;
  need.planned_bytes = 6 * kGiB;
  need.margin_bytes = 256 * kMiB;
  need.slot_bytes = 100 * kMiB;
  need.cap = 60;
  need.min_cap = 8;
  need.summary = "dense weights 1.0 GiB, expert cache 5.0 GiB";
  const Status refused = check_headroom(need, 2 * kGiB, "cgroup v2 memory.max headroom");
  ASSERT_FALSE(refused.ok());
  const std::string& message = refused.error().message;
  EXPECT_NE(message.find("need " + format_bytes(6 * kGiB + 256 * kMiB) + " of RAM"), std::string::npos) << message;
  EXPECT_NE(message.find(format_bytes(2 * kGiB) + " is available (cgroup v2 memory.max headroom)"), std::string::npos)
      << message;
  EXPECT_NE(message.find("lower --cap to at most 16 (from 60"), std::string::npos) << message;  // 4.25 GiB / 100 MiB = 44 slots
  EXPECT_NE(message.find("--profile"), std::string::npos) << message;
  EXPECT_NE(message.find("--no-memory-check"), std::string::npos) << message;

  need.cap = 50;  // 44 fewer slots would leave 6, below top_k 8: the cap cannot make it fit
  const Status no_cap = check_headroom(need, 2 * kGiB, "MemAvailable");
  ASSERT_FALSE(no_cap.ok());
  EXPECT_NE(no_cap.error().message.find("even --cap 8 would not fit"), std::string::npos) << no_cap.error().message;

  EXPECT_TRUE(check_headroom(need, need.needed(), "MemAvailable").ok());  // exactly enough fits
  EXPECT_TRUE(check_headroom(need, 64 * kGiB, "MemAvailable").ok());
}

}  // namespace
}  // namespace coli::runtime
