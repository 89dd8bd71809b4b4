// Expert parallel across the GPUs of one host (issue 18): the placement by
// heat and VRAM with made-up heats and capacities, the all-reduce priced from
// made-up links (and over PCIe where a pair has none), whole plans on a
// made-up 2-GPU host built from the recorded H200's facts, refusals, and the
// plan file's round trip and validation. Replay only: no live fact is read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "coli/planner/expert_parallel.h"
#include "coli/planner/expert_parallel_speed.h"
#include "coli/planner/plan.h"
#include "coli/planner/plan_io.h"
#include "planner_fixtures.h"
#include "planner_multi_gpu_fixtures.h"

namespace coli::planner {
namespace {

using u64 = std::uint64_t;
constexpr u64 kGiB = 1ull << 30;

bool mentions(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

double layer_load(const std::vector<std::vector<double>>& heat, const std::vector<std::vector<int>>& placement,
                  std::size_t layer, int gpu) {
  double load = 0;
  for (std::size_t e = 0; e < placement[layer].size(); ++e) load += placement[layer][e] == gpu ? heat[layer][e] : 0;
  return load;
}

TEST(ExpertParallelPlacement, HotExpertsSplitSoEveryLayerIsBalanced) {
  // One layer, four experts of unequal heat: the two hottest go apart, the
  // next joins the lighter GPU, and the loads end equal (0.5 each).
  const std::vector<std::vector<double>> heat = {{0.4, 0.3, 0.2, 0.1}};
  const auto placement = place_experts(heat, {0, 1}, {4, 4});
  EXPECT_EQ(placement[0], (std::vector<int>{0, 1, 1, 0}));
  EXPECT_DOUBLE_EQ(layer_load(heat, placement, 0, 0), 0.5);
  EXPECT_DOUBLE_EQ(layer_load(heat, placement, 0, 1), 0.5);
  // Counts alone would not balance this: 2 + 2 experts, but by heat 0.6 / 0.4 the other way.
  const std::vector<std::vector<double>> skewed = {{0.7, 0.1, 0.1, 0.1}};
  const auto lopsided = place_experts(skewed, {0, 1}, {4, 4});
  EXPECT_EQ(lopsided[0], (std::vector<int>{0, 1, 1, 1})) << "the hottest alone on one GPU, the three cold on the other";
}

TEST(ExpertParallelPlacement, CapacityLeavesTheColdestOnTheHost) {
  const std::vector<std::vector<double>> heat = {{0.1, 0.4, 0.2, 0.3}, {0.25, 0.25, 0.25, 0.25}};
  const auto placement = place_experts(heat, {2, 5}, {2, 1});
  // The three hottest of all layers: 0.4 and 0.3 of layer 0, then layer 1's first (ties by expert).
  EXPECT_EQ(placement[0], (std::vector<int>{-1, 2, -1, 5}));
  EXPECT_EQ(placement[1], (std::vector<int>{2, -1, -1, -1}));
}

TEST(ExpertParallelPlacement, UnequalCapacityFillsInProportionUniformRoutingSpreadsEvenly) {
  const std::vector<std::vector<double>> uniform(2, std::vector<double>(8, 0.125));
  // Room for all 16: an even split per layer, whatever the sizes.
  auto roomy = place_experts(uniform, {0, 1}, {12, 8});
  for (std::size_t l = 0; l < 2; ++l) {
    EXPECT_EQ(std::count(roomy[l].begin(), roomy[l].end(), 0), 4) << l;
    EXPECT_EQ(std::count(roomy[l].begin(), roomy[l].end(), 1), 4) << l;
  }
  // GPU 1 holds only 2: it takes one per layer, GPU 0 the rest.
  auto tight = place_experts(uniform, {0, 1}, {14, 2});
  for (std::size_t l = 0; l < 2; ++l) {
    EXPECT_EQ(std::count(tight[l].begin(), tight[l].end(), 1), 1) << l;
    EXPECT_EQ(std::count(tight[l].begin(), tight[l].end(), 0), 7) << l;
  }
}

TEST(ExpertParallelExchange, RingAllReduceOverTheSlowestLink) {
  const ModelFootprint fp = qwen3();
  DeviceProfile p = made_up_host(4, 450);
  p.gpus.links[3].measured_gbs = 300;  // pair 1-2 measured slower than its specification
  auto x = price_exchange(p.gpus, {0, 1, 2, 3}, fp, 512);
  ASSERT_TRUE(x.ok()) << x.error().message;
  const double layers = 48, message = 2048 * 4;
  EXPECT_EQ(x->message_bytes, 2048u * 4);
  EXPECT_EQ(x->bytes_per_token, static_cast<u64>(layers * 1.5 * message));  // 2(N-1)/N = 1.5 at N = 4
  EXPECT_DOUBLE_EQ(x->ring_gbs, 300);
  EXPECT_TRUE(mentions(x->slowest_link, "GPU 1-2 nvlink x18: measured peer copy 300.0 GB/s")) << x->slowest_link;
  EXPECT_NEAR(x->decode_seconds, layers * (kAllReduceLatencySeconds + 1.5 * message / 300e9), 1e-12);
  EXPECT_NEAR(x->prefill_seconds, layers * (kAllReduceLatencySeconds / 512 + 1.5 * message / 300e9), 1e-12);
  EXPECT_TRUE(mentions(x->inputs, "assumed 20 us per all-reduce")) << x->inputs;
}

TEST(ExpertParallelExchange, PairWithoutALinkIsPricedOverHostPcieOrRefused) {
  const ModelFootprint fp = qwen3();
  DeviceProfile p = made_up_host(2, 0);
  p.gpus.cuda[1].host_link_gbs = 31.5;  // gen4 x16 beside a gen5 x16
  auto x = price_exchange(p.gpus, {0, 1}, fp, 512);
  ASSERT_TRUE(x.ok()) << x.error().message;
  EXPECT_DOUBLE_EQ(x->ring_gbs, 31.5);
  EXPECT_TRUE(mentions(x->slowest_link, "no link entry in the profile, priced over the host PCIe path")) << x->slowest_link;
  EXPECT_EQ(x->bytes_per_token, 48u * 2048 * 4);  // 2(N-1)/N = 1 at N = 2
  EXPECT_FALSE(price_exchange(p.gpus, {0, 5}, fp, 512).ok()) << "GPU 5 is not in the profile";
  // A whole plan on that pair says so in its traffic and its gpus decision.
  auto plan = make_plan(p, fp, spread("all"));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_DOUBLE_EQ(plan->expert_parallel.exchange.ring_gbs, 31.5);
  EXPECT_TRUE(mentions(plan->decision("gpus")->reason, "priced over the host PCIe path")) << plan->decision("gpus")->reason;
  p.gpus.cuda[1].host_link_gbs = 0;
  auto refused = price_exchange(p.gpus, {0, 1}, fp, 512);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(mentions(refused.error().message, "no link between GPU 0 and GPU 1")) << refused.error().message;
}

// Qwen3-30B-A3B at int4 fits two H200s many times over: every expert on a
// GPU, half each, every layer's load even; each GPU its dense copy, KV and
// activations within its own budget; its NUMA node and CPUs from the profile.
TEST(ExpertParallelPlan, TwoGpusSplitAModelThatFits) {
  const ModelFootprint fp = qwen3();
  const DeviceProfile p = made_up_host(2, 450);
  auto plan = make_plan(p, fp, spread("all"));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const ExpertParallelPlan& ep = plan->expert_parallel;
  ASSERT_EQ(ep.gpus.size(), 2u);
  const int layers = static_cast<int>(fp.moe_layer_count());
  ASSERT_EQ(ep.expert_gpu.size(), static_cast<std::size_t>(layers));
  for (std::size_t g = 0; g < 2; ++g) {
    const GpuShare& share = ep.gpus[g];
    EXPECT_EQ(share.ordinal, static_cast<int>(g));
    EXPECT_EQ(share.expert_count(), layers * 64) << g;
    EXPECT_DOUBLE_EQ(share.load_share, 0.5);
    EXPECT_LE(share.vram_bytes(), share.budget_bytes);
    EXPECT_EQ(share.budget_bytes, p.gpus.cuda[g].free_memory_bytes);
    EXPECT_EQ(share.numa_node, static_cast<int>(g));
    EXPECT_EQ(share.local_cpus.to_list(), g == 0 ? "0-7" : "8-15");
    const std::string gpu = "GPU " + std::to_string(g) + " ";
    const auto line = std::find_if(share.lines.begin(), share.lines.end(),
                                   [&](const MemoryLine& l) { return l.component == gpu + "dense weights"; });
    ASSERT_NE(line, share.lines.end());
    EXPECT_EQ(line->bytes, fp.gpu_dense_bytes) << "each GPU its own copy";
    EXPECT_NE(plan->memory.find(gpu + "expert tier: VRAM slots"), nullptr);
    EXPECT_TRUE(mentions(share.reason, "NUMA node " + std::to_string(g))) << share.reason;
  }
  for (const auto& layer : ep.expert_gpu) EXPECT_EQ(std::count(layer.begin(), layer.end(), -1), 0);
  EXPECT_TRUE(plan->gpu.all_experts_in_vram(fp.n_experts));
  EXPECT_FALSE(plan->gpu.engine_runs_it) << "a build without the CUDA decoder: a preview";
  EXPECT_DOUBLE_EQ(ep.gpu_share, 1.0);
  ASSERT_NE(plan->decision("gpus"), nullptr);
  EXPECT_EQ(plan->decision("gpus")->value, "0,1");
  // The staging slab only where the host holds experts: here none.
  const SpeedPrediction speed = predict_plan_speed(p, fp, *plan);
  ASSERT_TRUE(speed.available) << speed.unavailable;
  const double record = static_cast<double>(fp.expert().record_bytes);
  // Per layer the slower GPU serves top_k x 1/2 of the reads at 2000 GB/s.
  EXPECT_NEAR(speed.decode_terms[2].seconds, layers * 8 * 0.5 * record / 2000e9, 1e-12);
  EXPECT_EQ(speed.decode_terms[3].name, "exchange: all-reduce per MoE layer");
  EXPECT_NEAR(speed.decode_terms[3].seconds, layers * (20e-6 + 2048.0 * 4 / 450e9), 1e-12);
  EXPECT_DOUBLE_EQ(speed.decode_terms[4].seconds + speed.decode_terms[5].seconds, 0) << "nothing on the host";
}

TEST(ExpertParallelPlan, UsageHeatBalancesLoadNotCounts) {
  const ModelFootprint fp = qwen3();
  const DeviceProfile p = made_up_host(2, 450);
  const int layers = static_cast<int>(fp.moe_layer_count());
  auto created = experts::UsageHistory::create({layers, fp.n_experts, fp.top_k, "made-up"});
  ASSERT_TRUE(created.ok());
  experts::UsageHistory history = std::move(*created);
  // Every layer: expert 0 takes half the routings, the other 127 share the rest.
  std::vector<std::vector<std::uint64_t>> counts(static_cast<std::size_t>(layers),
                                                 std::vector<std::uint64_t>(static_cast<std::size_t>(fp.n_experts), 8));
  for (auto& layer : counts) layer[0] = 127 * 8;
  ASSERT_TRUE(history.add_counts(counts, 1000).ok());
  PlanRequest request = spread("all");
  request.history = &history;
  auto plan = make_plan(p, fp, request);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const ExpertParallelPlan& ep = plan->expert_parallel;
  for (std::size_t l = 0; l < ep.expert_gpu.size(); ++l) {
    const int hot = ep.expert_gpu[l][0];
    // The hot expert's GPU holds it alone against the other's 127.
    EXPECT_EQ(std::count(ep.expert_gpu[l].begin(), ep.expert_gpu[l].end(), hot), 1) << l;
  }
  EXPECT_NEAR(ep.gpus[0].load_share, 0.5, 1e-9);
  EXPECT_NEAR(ep.gpus[1].load_share, 0.5, 1e-9);
}

TEST(ExpertParallelPlan, UnequalVramHoldsUnequalShares) {
  const ModelFootprint fp = qwen3();
  DeviceProfile p = made_up_host(2, 450);
  p.gpus.cuda[1].free_memory_bytes = 6 * kGiB;  // another job holds the rest
  auto plan = make_plan(p, fp, spread("all"));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const ExpertParallelPlan& ep = plan->expert_parallel;
  const GpuShare &big = ep.gpus[0], &small = ep.gpus[1];
  EXPECT_LT(small.expert_count(), big.expert_count());
  EXPECT_EQ(small.expert_count() + big.expert_count(), static_cast<int>(fp.moe_layer_count()) * fp.n_experts);
  EXPECT_LE(small.vram_bytes(), small.budget_bytes);
  // The small GPU is full: one more expert slot would not fit.
  const u64 slot = fp.expert().record_stride;
  EXPECT_LT(small.budget_bytes - small.vram_bytes(), slot + 64 * (2u << 20)) << "within a slot and the slabs' rounding";
}

TEST(ExpertParallelPlan, DenseCopyThatFitsNoGpuIsRefusedWithTheNumbers) {
  auto fp = read_footprint(std::filesystem::path(COLI_FIXTURES_DIR) / "model-configs" / "DeepSeek-V3.json",
                           WeightFormat::q4_g64, DenseFormat::source);
  ASSERT_TRUE(fp.ok());
  PlanRequest request = spread("all");
  request.vram = 20 * kGiB;
  auto refused = make_plan(made_up_host(2, 450), *fp, request);
  ASSERT_FALSE(refused.ok());
  const std::string& why = refused.error().message;
  EXPECT_TRUE(mentions(why, "every GPU holds the dense weights")) << why;
  EXPECT_TRUE(mentions(why, "GPU dense weights " + format_bytes(fp->gpu_dense_bytes) + " + GPU KV cache")) << why << "\n" << format_bytes(fp->gpu_dense_bytes);
  EXPECT_TRUE(mentions(why, "and one expert of " + format_bytes(fp->expert().record_stride) +
                                " exceed its 20.00 GiB (--vram 20.00 GiB)"))
      << why;
  EXPECT_TRUE(mentions(why, "--dense q8_row or q4_g64")) << why;
}

TEST(ExpertParallelPlan, GpuListsAreCheckedAndAutoStaysOnOneGpuWithoutTheEngine) {
  const ModelFootprint fp = qwen3();
  const DeviceProfile p = made_up_host(4, 450);
  auto some = make_plan(p, fp, spread("3,1"));
  ASSERT_TRUE(some.ok()) << some.error().message;
  EXPECT_EQ(some->expert_parallel.gpus.front().ordinal, 3) << "the ring in the order given";
  for (const auto& layer : some->expert_parallel.expert_gpu) {
    for (int gpu : layer) EXPECT_TRUE(gpu == 3 || gpu == 1) << gpu;
  }
  auto one = make_plan(p, fp, spread("2"));
  ASSERT_TRUE(one.ok()) << one.error().message;
  EXPECT_FALSE(one->expert_parallel.active());
  EXPECT_EQ(one->gpu.device.gpu.index, 2);
  for (const char* bad : {"0,7", "1,1", "x"}) {
    auto refused = make_plan(p, fp, spread(bad));
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_TRUE(mentions(refused.error().message, "--gpus")) << refused.error().message;
  }
  PlanRequest both = spread("all");
  both.gpu = "1";
  EXPECT_FALSE(make_plan(p, fp, both).ok());
  // auto: one GPU unless this build's engine runs expert parallel, and says so.
  PlanRequest automatic = spread("auto");
  automatic.gpu = "auto";
  auto single = make_plan(p, fp, automatic);
  ASSERT_TRUE(single.ok()) << single.error().message;
  EXPECT_FALSE(single->expert_parallel.active());
  automatic.backend->engine_runs_expert_parallel = true;
  auto all = make_plan(p, fp, automatic);
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ(all->expert_parallel.gpus.size(), 4u);
  EXPECT_TRUE(all->gpu.engine_runs_it);
  // A GPU another job fills is left out by auto, and said so; --gpus all refuses it.
  DeviceProfile busy = p;
  busy.gpus.cuda[2].free_memory_bytes = 1 * kGiB;
  auto three = make_plan(busy, fp, automatic);
  ASSERT_TRUE(three.ok()) << three.error().message;
  ASSERT_EQ(three->expert_parallel.gpus.size(), 3u);
  EXPECT_TRUE(mentions(three->expert_parallel.reason, "left out: GPU 2 1.00 GiB holds no expert")) << three->expert_parallel.reason;
  EXPECT_FALSE(make_plan(busy, fp, spread("all")).ok());
}

PlanFile file_of(const Plan& plan, const ModelFootprint& fp, const SpeedPrediction& speed) {
  PlanFile f;
  f.profile_fingerprint = "made-up";
  f.model_identity = "fnv1a64:0";
  f.top_k = fp.top_k;
  f.plan = plan;
  f.speed = speed;
  return f;
}

TEST(ExpertParallelPlanFile, RoundTripsAndBadPlacementsAreRefusedByName) {
  const ModelFootprint fp = qwen3();
  const DeviceProfile p = made_up_host(2, 450);
  auto plan = make_plan(p, fp, spread("all"));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const PlanFile f = file_of(*plan, fp, predict_plan_speed(p, fp, *plan));
  const std::string text = plan_to_toml(f);
  auto back = parse_plan(text, "ep.toml");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->plan.expert_parallel, plan->expert_parallel);
  EXPECT_EQ(*back, f);
  EXPECT_TRUE(mentions(plan_to_json(f), "\"expert_gpu\"")) << "--json carries the placement";

  auto refused = [&](const std::string& bad) {
    auto parsed = parse_plan(bad, "ep.toml");
    EXPECT_FALSE(parsed.ok());
    return parsed.ok() ? std::string() : parsed.error().message;
  };
  auto broken = [&](const std::string& from, const std::string& to) {
    std::string bad = text;
    const auto at = bad.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) bad.replace(at, from.size(), to);
    return refused(bad);
  };
  // The first layer's first two entries (GPU 0, then GPU 1), rewritten.
  auto first_entries = [&](const std::string& first, const std::string& second) {
    std::string bad = text;
    std::size_t at = bad.find('[', bad.find("expert_gpu"));
    for (const std::string& value : {first, second}) {
      at = bad.find_first_of("-0123456789", at);
      const std::size_t end = bad.find_first_not_of("-0123456789", at);
      bad.replace(at, end - at, value);
      at += value.size();
    }
    return refused(bad);
  };
  EXPECT_EQ(text.find_first_of("-0123456789", text.find('[', text.find("expert_gpu"))), text.find('0', text.find('[', text.find("expert_gpu"))));
  // A GPU not in the list; an expert moved from one GPU to the other (counts disagree); one moved to the host.
  EXPECT_TRUE(mentions(first_entries("7", "1"), "expert_parallel.layers[0].expert_gpu"));
  EXPECT_TRUE(mentions(first_entries("0", "0"), "puts 65 experts on GPU 0, its experts[0] says 64"));
  EXPECT_TRUE(mentions(first_entries("-1", "1"), "puts 63 experts on GPU 0"));
  // One GPU's budget below its own lines.
  const std::string budget = "budget_bytes = " + std::to_string(plan->expert_parallel.gpus[1].budget_bytes);
  EXPECT_TRUE(mentions(broken(budget, "budget_bytes = 1024"), "is less than GPU"));
  // An older schema cannot carry it; a one-GPU plan of schema 6 is still read.
  EXPECT_TRUE(mentions(broken("schema_version = 7", "schema_version = 6"), "needs schema_version 7"));
  auto one = make_plan(p, fp, spread("0"));
  ASSERT_TRUE(one.ok()) << one.error().message;
  std::string v6 = plan_to_toml(file_of(*one, fp, predict_plan_speed(p, fp, *one)));
  v6.replace(v6.find("schema_version = 7"), 18, "schema_version = 6");
  auto old_plan = parse_plan(v6, "v6.toml");
  ASSERT_TRUE(old_plan.ok()) << old_plan.error().message;
  EXPECT_FALSE(old_plan->plan.expert_parallel.active());
  // A plan's GPUs that the profile lacks: no prediction, and why.
  const SpeedPrediction elsewhere = predict_plan_speed(made_up_host(1, 0), fp, back->plan);
  EXPECT_FALSE(elsewhere.available);
  EXPECT_TRUE(mentions(elsewhere.unavailable, "the plan's GPU 1 is not among the profile's 1 CUDA devices")) << elsewhere.unavailable;
}

}  // namespace
}  // namespace coli::planner
