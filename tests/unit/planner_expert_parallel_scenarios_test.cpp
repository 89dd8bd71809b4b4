// Issue 18's must-show: DeepSeek-V3 (671B) and GLM-5 (744B) at int4 experts,
// which no single GPU holds, planned expert-parallel on the replayed 2-GPU
// and 8-GPU profiles (profiles/h200-nvl-2gpu.toml: 2 x H200 NVL on an NVLink
// bridge; profiles/hgx-h200-8gpu.toml: 8 x H200 SXM on NVSwitch, two NUMA
// nodes; both written from public specifications), with per-GPU memory and
// predicted speed checked against figures worked out here from the configs
// (tests/fixtures/model-configs).
//
// Both profiles are quick (facts only): the tests add a made-up CUDA
// self-test of 2000 GB/s per GPU, and the 2-GPU host (the recorded
// h200-xeon-16c machine with two GPUs) that machine's own RAM and disk
// measurements. Both models are planning-only (MLA): every plan is a
// preview (--gpus all), which is what such a machine would be told.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "coli/planner/expert_parallel_speed.h"
#include "coli/planner/plan.h"
#include "coli/probe/profile_io.h"
#include "planner_fixtures.h"
#include "planner_multi_gpu_fixtures.h"  // add_cuda_selftests, spread

namespace coli::planner {
namespace {

using u64 = std::uint64_t;

DeviceProfile replayed(const std::string& name) {
  auto p = load_profile(std::filesystem::path(COLI_FIXTURES_DIR) / ".." / ".." / "profiles" / name);
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
  DeviceProfile profile = p.ok() ? *p : DeviceProfile{};
  add_cuda_selftests(profile, 2000);
  return profile;
}

ModelFootprint model(const std::string& file) {
  auto fp = read_footprint(std::filesystem::path(COLI_FIXTURES_DIR) / "model-configs" / file, WeightFormat::q4_g64,
                           DenseFormat::source);
  EXPECT_TRUE(fp.ok()) << (fp.ok() ? "" : fp.error().message);
  return *fp;
}

const MemoryLine& line_of(const GpuShare& g, const std::string& name) {
  static const MemoryLine none;
  for (const MemoryLine& line : g.lines) {
    if (line.component == "GPU " + std::to_string(g.ordinal) + " " + name) return line;
  }
  ADD_FAILURE() << "GPU " << g.ordinal << " has no line " << name;
  return none;
}

// What every expert-parallel plan of `fp` over `gpus` identical GPUs must
// show: per GPU its dense copy, its experts' bytes, all within its budget;
// the placement complete and balanced per layer; the all-reduce's bytes.
void expect_balanced_plan(const DeviceProfile& host, const Plan& plan, const ModelFootprint& fp, int gpus) {
  const ExpertParallelPlan& ep = plan.expert_parallel;
  ASSERT_EQ(ep.gpus.size(), static_cast<std::size_t>(gpus));
  const u64 slot = fp.expert().record_stride;  // the CUDA decoder keeps records as strided (x1.0)
  for (const GpuShare& g : ep.gpus) {
    EXPECT_EQ(line_of(g, "dense weights").bytes, fp.gpu_dense_bytes) << "every GPU its copy";
    EXPECT_EQ(line_of(g, "expert tier: VRAM slots").bytes, static_cast<u64>(g.expert_count()) * slot);
    EXPECT_LE(g.vram_bytes(), g.budget_bytes) << g.reason;
    const CudaDevice& device = host.gpus.cuda[static_cast<std::size_t>(g.ordinal)];
    EXPECT_EQ(g.budget_bytes, device.free_memory_bytes);
    EXPECT_EQ(g.numa_node, device.numa_node);
    EXPECT_EQ(g.local_cpus, device.local_cpus);
    // Identical GPUs under uniform routing: the same count (ties to one per layer) and share.
    EXPECT_LE(std::abs(g.expert_count() - ep.gpus[0].expert_count()), static_cast<int>(fp.moe_layer_count())) << g.reason;
    const auto [fewest, most] = std::minmax_element(g.experts.begin(), g.experts.end());
    EXPECT_LE(*most - *fewest, 1) << "every layer gets its share: " << g.reason;
  }
  const int layers = static_cast<int>(fp.moe_layer_count());
  ASSERT_EQ(ep.expert_gpu.size(), static_cast<std::size_t>(layers));
  for (int l = 0; l < layers; ++l) {
    const auto& row = ep.expert_gpu[static_cast<std::size_t>(l)];
    ASSERT_EQ(row.size(), static_cast<std::size_t>(fp.n_experts));
    int placed = 0;
    for (const GpuShare& g : ep.gpus) placed += g.experts[static_cast<std::size_t>(l)];
    EXPECT_EQ(placed + std::count(row.begin(), row.end(), -1), fp.n_experts) << "each expert once, layer " << l;
  }
  // The all-reduce: layers x 2(N-1)/N x hidden x 4 B per token per GPU.
  const double ring = 2.0 * (gpus - 1) / gpus;
  EXPECT_EQ(ep.exchange.bytes_per_token,
            static_cast<u64>(std::llround(layers * ring * static_cast<double>(fp.config.hidden_size) * 4)));
  EXPECT_NEAR(ep.exchange.decode_seconds, layers * (20e-6 + ring * fp.config.hidden_size * 4.0 / 450e9), 1e-12);
}

double sum(const std::vector<SpeedTerm>& terms) {
  double s = 0;
  for (const SpeedTerm& t : terms) s += t.seconds;
  return s;
}

// 8 GPUs hold every expert of both models: 1/8 of each layer each
// (256 / 8 = 32 per layer), so decode pays no host term and the experts
// term is layers x top_k x 1/8 x record / 2000 GB/s.
void expect_all_on_eight(const ModelFootprint& fp, u64 exchange_bytes) {
  const DeviceProfile host = replayed("hgx-h200-8gpu.toml");
  ASSERT_EQ(host.gpus.cuda.size(), 8u);
  auto plan = make_plan(host, fp, spread("all"));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  expect_balanced_plan(host, *plan, fp, 8);
  const int layers = static_cast<int>(fp.moe_layer_count());
  for (const GpuShare& g : plan->expert_parallel.gpus) {
    EXPECT_EQ(g.expert_count(), layers * 32) << g.reason;
    EXPECT_DOUBLE_EQ(g.load_share, 1.0 / 8);
    // The board's halves: GPUs 0-3 on the first socket, 4-7 on the second.
    EXPECT_EQ(g.numa_node, g.ordinal < 4 ? 0 : 1);
    EXPECT_EQ(g.local_cpus.to_list(), g.ordinal < 4 ? "0-63,128-191" : "64-127,192-255");
  }
  EXPECT_TRUE(plan->gpu.all_experts_in_vram(fp.n_experts));
  EXPECT_EQ(plan->expert_parallel.exchange.bytes_per_token, exchange_bytes);
  const SpeedPrediction s = predict_plan_speed(host, fp, *plan);
  ASSERT_TRUE(s.available) << s.unavailable;
  const double record = static_cast<double>(fp.expert().record_bytes);
  const double dense = static_cast<double>(dense_bytes_per_token(fp));
  const double kv = static_cast<double>(kv_cache_bytes(fp.config, plan->ctx / 2, KvType::f32));
  const double experts = layers * 8 * (1.0 / 8) * record / 2000e9;
  const double exchange = layers * (20e-6 + 1.75 * fp.config.hidden_size * 4.0 / 450e9);
  EXPECT_NEAR(s.decode_terms[2].seconds, experts, 1e-12);
  EXPECT_NEAR(s.decode_terms[3].seconds, exchange, 1e-12);
  EXPECT_NEAR(1.0 / s.decode_tok_per_s, dense / 2000e9 + kv / 2000e9 + experts + exchange, 1e-9);
  EXPECT_EQ(s.decode_terms[4].seconds + s.decode_terms[5].seconds, 0.0) << "no expert on the host";
  EXPECT_NEAR(1.0 / s.prefill_tok_per_s, sum(s.prefill_terms), 1e-12);
}

// 2 GPUs hold a share only: each is full (one more slot would not fit
// beside its dense copy, KV, activations (rank 0: the staging slab for the
// host's experts) and reserve), and the rest streams through the host's RAM
// cache and disk.
void expect_share_on_two(const ModelFootprint& fp, u64 exchange_bytes) {
  DeviceProfile host = replayed("h200-nvl-2gpu.toml");
  ASSERT_EQ(host.gpus.cuda.size(), 2u);
  const Measurements selftests = host.measurements;
  host.measurements = h200().measurements;  // the same host machine's RAM and disk
  host.measurements.gpu_kernels = selftests.gpu_kernels;
  auto plan = make_plan(host, fp, spread("all"));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  expect_balanced_plan(host, *plan, fp, 2);
  const u64 slot = fp.expert().record_stride, all = fp.moe_layer_count() * static_cast<u64>(fp.n_experts);
  u64 on_gpus = 0;
  for (const GpuShare& g : plan->expert_parallel.gpus) {
    const u64 beside = g.vram_bytes() - line_of(g, "expert tier: VRAM slots").bytes;
    const u64 capacity = (g.budget_bytes - beside) / slot;
    EXPECT_LE(static_cast<u64>(g.expert_count()), capacity);
    EXPECT_GE(static_cast<u64>(g.expert_count()) + 1, capacity) << "full, up to the slabs' rounding";
    // Rank 0 computes the host's experts (copied up through its staging slab); the others stage nothing.
    EXPECT_EQ(line_of(g, "activations").formula.find("staging slab") != std::string::npos, &g == &plan->expert_parallel.gpus[0]);
    on_gpus += static_cast<u64>(g.expert_count());
  }
  EXPECT_LT(on_gpus, all);
  EXPECT_NEAR(plan->expert_parallel.gpu_share, static_cast<double>(on_gpus) / static_cast<double>(all), 1e-9);
  EXPECT_TRUE(plan->streaming());
  EXPECT_EQ(plan->expert_parallel.exchange.bytes_per_token, exchange_bytes);
  const SpeedPrediction s = predict_plan_speed(host, fp, *plan);
  ASSERT_TRUE(s.available) << s.unavailable;
  EXPECT_GT(s.decode_terms[4].seconds + s.decode_terms[5].seconds, 0.0) << "the host serves the rest";
  EXPECT_NEAR(1.0 / s.decode_tok_per_s, sum(s.decode_terms), 1e-12);
  EXPECT_NEAR(s.decode_terms[3].seconds, fp.moe_layer_count() * (20e-6 + 1.0 * fp.config.hidden_size * 4.0 / 450e9), 1e-12);
}

TEST(ExpertParallelScenario, DeepSeekV3OnEightGpusHoldsEveryExpert) {
  const ModelFootprint fp = model("DeepSeek-V3.json");
  ASSERT_EQ(fp.moe_layer_count(), 58u);  // 61 layers, the first 3 dense
  // 58 layers x 2(8-1)/8 x 7168 x 4 B = 2,910,208 B per token per GPU.
  expect_all_on_eight(fp, 2910208);
}

TEST(ExpertParallelScenario, Glm5OnEightGpusHoldsEveryExpert) {
  const ModelFootprint fp = model("GLM-5.json");
  ASSERT_EQ(fp.moe_layer_count(), 75u);  // 78 layers, the first 3 dense
  // 75 x 1.75 x 6144 x 4 = 3,225,600 B.
  expect_all_on_eight(fp, 3225600);
}

TEST(ExpertParallelScenario, DeepSeekV3OnTwoGpusHoldsAShareAndStreamsTheRest) {
  // 58 x 1 x 7168 x 4 = 1,662,976 B.
  expect_share_on_two(model("DeepSeek-V3.json"), 1662976);
}

TEST(ExpertParallelScenario, Glm5OnTwoGpusHoldsAShareAndStreamsTheRest) {
  // 75 x 1 x 6144 x 4 = 1,843,200 B.
  expect_share_on_two(model("GLM-5.json"), 1843200);
}

// The host's share of the experts is computed on its CPU, priced as the
// CPU-only prediction prices an expert (expert_gemv): with the tuning
// phase's narrow expert point beside the wide one, a cost per row plus
// bytes. Made-up points on the plan's team, 2 ns a row + 20 GB/s (below the
// host's RAM rate, which never lets an expert go faster).
TEST(ExpertParallelScenario, HostExpertsCostTheCpusRowsAndBytes) {
  const ModelFootprint fp = model("DeepSeek-V3.json");
  DeviceProfile host = replayed("h200-nvl-2gpu.toml");
  const Measurements selftests = host.measurements;
  host.measurements = h200().measurements;
  host.measurements.gpu_kernels = selftests.gpu_kernels;
  host.measurements.parallel_overhead.reset();  // no fork/joins to take out of the made-up calls
  auto plan = make_plan(host, fp, spread("all"));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  auto point = [&](const char* kernel, int width) {
    KernelThroughputPoint p = made_up_expert_decode_point(kernel, width, 2e-9, 20e9);
    p.threads = plan->threads, p.pus = plan->compute_pus, p.thread_set = "plan";
    return p;
  };
  host.measurements.kernel_tuning = KernelTuning{"avx512vnni", 1ull << 30, 1, "", {point("expert_q4_decode", 1024)}};
  const double wide_gbs = host.measurements.kernel_tuning->points[0].gb_per_s.median;
  const double by_bytes = predict_plan_speed(host, fp, *plan).decode_terms[4].seconds;
  host.measurements.kernel_tuning->points.push_back(point("expert_q4_decode_narrow", 256));
  const SpeedPrediction s = predict_plan_speed(host, fp, *plan);
  ASSERT_EQ(s.decode_terms[4].name, "experts in RAM");
  ASSERT_GT(by_bytes, 0.0) << "the host computes a share";
  // DeepSeek's experts (2048 wide, hidden 7168) walk fewer rows per byte than the 1024-wide point.
  const double record = static_cast<double>(fp.expert().record_bytes), rows = static_cast<double>(fp.expert_matrix_rows());
  EXPECT_NEAR(s.decode_terms[4].seconds / by_bytes, (record / 20e9 + rows * 2e-9) / (record / (wide_gbs * 1e9)), 1e-3);
  EXPECT_LT(s.decode_terms[4].seconds, by_bytes);
}

}  // namespace
}  // namespace coli::planner
