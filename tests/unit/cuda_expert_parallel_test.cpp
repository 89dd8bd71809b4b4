// Expert parallelism over the GPUs of one host (issue 18; engine/cuda).
// Everywhere: which experts each GPU holds, computes or leaves to another
// (every expert computed exactly once), the placement's refusals, the
// all-reduce's sizes, NCCL's clear errors when the library is missing or is
// not NCCL, and the rank threads (one per GPU, bound to its CPUs, failures
// named). With a CUDA device: the expert-parallel decoder at one rank gives
// the plain CudaDecoder's logits exactly (without an exchange, and with
// NCCL's one-rank all-reduce captured in its graph when NCCL is found), and
// over two GPUs (when there are two) the same greedy tokens. Device tests
// skip without a device unless COLI_REQUIRE_CUDA=1; the NCCL one unless
// COLI_REQUIRE_NCCL=1.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "cuda/expert_parallel.h"
#include "cuda/nccl_library.h"
#include "cuda/rank_threads.h"
#include "engine_test_support.h"
#if COLI_TEST_CUDA
#include "coli/model/model_config.h"
#include "cuda/cuda_decoder.h"
#include "cuda/cuda_expert_parallel.h"
#include "cuda/cuda_kernels.h"
#endif

namespace coli::cuda {
namespace {

// 3 MoE layers of 8 experts over 2 GPUs, some on no GPU (-1).
const std::vector<std::vector<int>> kPlacement = {
    {0, 1, 0, 1, 0, 1, 0, 1}, {0, 0, 0, 0, 1, 1, 1, 1}, {-1, 0, 1, -1, 1, 0, 1, 0}};

TEST(ExpertPlacement, EveryExpertIsComputedByExactlyOneRank) {
  const std::vector<int> devices = {0, 1};
  const RankExperts r0 = rank_experts(kPlacement, devices, 0), r1 = rank_experts(kPlacement, devices, 1);
  for (std::size_t l = 0; l < kPlacement.size(); ++l) {
    for (int e = 0; e < 8; ++e) {
      const auto has = [e](const std::vector<int>& v) { return std::find(v.begin(), v.end(), e) != v.end(); };
      const int computed = has(r0.vram[l]) + has(r0.host[l]) + has(r1.vram[l]) + has(r1.host[l]);
      EXPECT_EQ(computed, 1) << "layer " << l << " expert " << e;
      // Each rank sorts every expert into exactly one of its three lists.
      for (const RankExperts* r : {&r0, &r1}) EXPECT_EQ(has(r->vram[l]) + has(r->host[l]) + has(r->remote[l]), 1);
    }
  }
  EXPECT_EQ(r0.vram[2], (std::vector<int>{1, 5, 7}));
  EXPECT_EQ(r0.host[2], (std::vector<int>{0, 3}));  // on no GPU: rank 0's host
  EXPECT_EQ(r0.remote[2], (std::vector<int>{2, 4, 6}));
  EXPECT_TRUE(r1.host[2].empty());                  // the other ranks never compute host experts
  EXPECT_EQ(r1.remote[2], (std::vector<int>{0, 1, 3, 5, 7}));
}

// expert_gpu holds CUDA ordinals (the planner's), in whatever order devices ranks them.
TEST(ExpertPlacement, ExpertGpuNamesCudaOrdinals) {
  const std::vector<std::vector<int>> placement = {{5, 3, -1, 5}};
  const std::vector<int> devices = {5, 3};  // rank 0 on CUDA device 5
  const RankExperts r0 = rank_experts(placement, devices, 0), r1 = rank_experts(placement, devices, 1);
  EXPECT_EQ(r0.vram[0], (std::vector<int>{0, 3}));
  EXPECT_EQ(r0.host[0], (std::vector<int>{2}));
  EXPECT_EQ(r1.vram[0], (std::vector<int>{1}));
  EXPECT_EQ(r1.remote[0], (std::vector<int>{0, 2, 3}));
}

TEST(ExpertPlacement, OneRankHoldsWhatTheVramTierWouldHold) {
  const std::vector<std::vector<int>> one = {{0, -1, 0, -1}};
  const RankExperts r = rank_experts(one, std::vector<int>{0}, 0);
  EXPECT_EQ(r.vram[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(r.host[0], (std::vector<int>{1, 3}));
  EXPECT_TRUE(r.remote[0].empty());
}

std::string refusal(std::vector<int> devices, const std::vector<std::vector<int>>& placement, int visible,
                    int layers = 3, int experts = 8) {
  const Status s = check_expert_placement(devices, placement, layers, experts, visible);
  return s ? "" : s.error().message;
}

TEST(ExpertPlacement, RefusesWhatCannotRunAndSaysWhatToDo) {
  EXPECT_EQ(refusal({0, 1}, kPlacement, 2), "");
  std::vector<std::vector<int>> on_3_and_1 = kPlacement;
  for (auto& layer : on_3_and_1) std::replace(layer.begin(), layer.end(), 0, 3);
  EXPECT_EQ(refusal({3, 1}, on_3_and_1, 4), "");  // any two distinct GPUs
  EXPECT_NE(refusal({3, 1}, kPlacement, 4).find("on CUDA device 0, which the placement's devices (3,1) do not list"),
            std::string::npos);
  EXPECT_NE(refusal({}, kPlacement, 2).find("names no CUDA device"), std::string::npos);
  const std::string fewer = refusal({0, 1}, kPlacement, 1);
  EXPECT_NE(fewer.find("rank 1 on CUDA device 1, but this machine has 1 CUDA device(s)"), std::string::npos) << fewer;
  EXPECT_NE(refusal({0, 0}, kPlacement, 2).find("names CUDA device 0 for two ranks"), std::string::npos);
  EXPECT_NE(refusal({0, -1}, kPlacement, 2).find("CUDA device -1"), std::string::npos);
  EXPECT_NE(refusal({0, 1}, kPlacement, 2, 4).find("lists 3 MoE layers; the model has 4"), std::string::npos);
  EXPECT_NE(refusal({0, 1}, kPlacement, 2, 3, 16).find("places 8 experts; the model has 16"), std::string::npos);
  std::vector<std::vector<int>> beyond = kPlacement;
  beyond[1][3] = 2;
  EXPECT_NE(refusal({0, 1}, beyond, 2).find("expert 3 of MoE layer 1 on CUDA device 2, which the placement's devices (0,1)"),
            std::string::npos);
  beyond[1][3] = -2;
  EXPECT_NE(refusal({0, 1}, beyond, 2).find("on CUDA device -2"), std::string::npos);
  const std::vector<std::vector<int>> idle(3, std::vector<int>(8, 0));
  EXPECT_NE(refusal({0, 1}, idle, 2).find("rank 1 (CUDA device 1) holds no expert"), std::string::npos);
  EXPECT_EQ(refusal({0}, std::vector<std::vector<int>>(3, std::vector<int>(8, -1)), 1), "");  // all on the host: one GPU's hybrid plan
}

TEST(ExpertExchange, SizesOfTheAllReduce) {
  EXPECT_EQ(exchange_floats(7168, 1), 7168u);  // DeepSeek-V3's hidden state, a decode step
  EXPECT_EQ(exchange_floats(7168, 128), 7168u * 128u);
  EXPECT_DOUBLE_EQ(ring_allreduce_bytes(7168, 1), 0.0);
  EXPECT_DOUBLE_EQ(ring_allreduce_bytes(7168, 2), 7168.0 * 4);          // 2 (N-1)/N = 1
  EXPECT_DOUBLE_EQ(ring_allreduce_bytes(7168, 8), 7168.0 * 4 * 14 / 8);  // 2 (N-1)/N = 7/4
}

TEST(NcclLibrary, MissingLibraryIsAClearError) {
  auto lib = NcclLibrary::open("/nonexistent/libnccl.so.2");
  ASSERT_FALSE(lib.ok());
  const std::string& m = lib.error().message;
  EXPECT_NE(m.find("no NCCL (/nonexistent/libnccl.so.2 not found)"), std::string::npos) << m;
  EXPECT_NE(m.find("COLI_NCCL_LIBRARY"), std::string::npos) << m;
  EXPECT_NE(m.find("nvidia-nccl-cu12"), std::string::npos) << m;
}

TEST(NcclLibrary, ALibraryThatIsNotNcclIsNamed) {
  auto lib = NcclLibrary::open("libm.so.6");
  ASSERT_FALSE(lib.ok());
  EXPECT_NE(lib.error().message.find("libm.so.6 is not NCCL 2 (it has no ncclGetVersion)"), std::string::npos)
      << lib.error().message;
}

// Where NCCL is installed (the GPU machine's PyTorch), its version is read.
TEST(NcclLibrary, OpensTheInstalledOneWhenThereIsOne) {
  auto lib = NcclLibrary::open();
  if (!lib.ok()) {
    const char* required = std::getenv("COLI_REQUIRE_NCCL");
    if (required && std::string(required) == "1") FAIL() << lib.error().message;
    GTEST_SKIP() << lib.error().message;
  }
  std::cout << "NCCL " << (*lib)->version_text() << " at " << (*lib)->path() << "\n";
  EXPECT_GE((*lib)->version(), kNcclMinVersion);
  EXPECT_EQ((*lib)->version_text().find("2."), 0u) << (*lib)->version_text();
}

CpuSet allowed_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  EXPECT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  }
  return CpuSet(cpus);
}

// Rank 0 on the caller's thread, as placed (the engine's OpenMP team
// lives there); ranks 1.. on their own threads, bound when given CPUs.
TEST(RankThreads, EachRankRunsOnItsOwnBoundThread) {
  const CpuSet allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  const CpuSet first({allowed.cpus().front()});
  auto threads = RankThreads::start(3, {first, first, {}});
  ASSERT_TRUE(threads.ok()) << threads.error().message;
  std::mutex mutex;
  std::map<int, std::thread::id> ids;
  std::map<int, CpuSet> bound;
  for (int round = 0; round < 2; ++round) {
    const Status ran = (*threads)->run([&](int rank) -> Status {
      std::lock_guard lock(mutex);
      if (round == 1 && ids.at(rank) != std::this_thread::get_id()) return make_error("another thread");
      ids[rank] = std::this_thread::get_id();
      bound[rank] = allowed_cpus();
      return Ok{};
    });
    ASSERT_TRUE(ran.ok()) << ran.error().message;
  }
  EXPECT_EQ(std::set<std::thread::id>({ids[0], ids[1], ids[2]}).size(), 3u);
  EXPECT_EQ(ids[0], std::this_thread::get_id());
  EXPECT_EQ(bound[0], allowed);  // the caller's thread is not moved
  EXPECT_EQ(bound[1], first);
  EXPECT_EQ(bound[2], allowed);  // no CPUs given: any of the process's
  EXPECT_EQ(allowed_cpus(), allowed);
}

// Started by a thread pinned to one CPU (the engine's OpenMP member 0), a
// rank without CPUs may still run on any of the process's.
TEST(RankThreads, AnUnboundRankIsNotConfinedToItsStartersCpu) {
  const CpuSet allowed = allowed_cpus();
  if (allowed.size() < 2) GTEST_SKIP() << "needs two CPUs to tell them apart";
  CpuSet seen;
  std::thread starter([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(allowed.cpus().front(), &one);
    ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
    auto threads = RankThreads::start(2, {});
    ASSERT_TRUE(threads.ok()) << threads.error().message;
    ASSERT_TRUE((*threads)->run([&](int rank) {
      if (rank == 1) seen = allowed_cpus();
      return Status(Ok{});
    }).ok());
  });
  starter.join();
  EXPECT_EQ(seen, allowed);
}

TEST(RankThreads, AFailingRankIsNamedAndReportedOnce) {
  auto threads = RankThreads::start(2, {});
  ASSERT_TRUE(threads.ok()) << threads.error().message;
  std::atomic<int> failed_calls{0}, failed_rank{-1};
  const Status ran = (*threads)->run(
      [](int rank) -> Status {
        if (rank == 1) return make_error("out of device memory");
        return Ok{};
      },
      [&](int rank) {
        ++failed_calls;
        failed_rank = rank;
      });
  ASSERT_FALSE(ran.ok());
  EXPECT_EQ(ran.error().message, "GPU rank 1: out of device memory");
  EXPECT_EQ(failed_calls.load(), 1);
  EXPECT_EQ(failed_rank.load(), 1);
  EXPECT_TRUE((*threads)->run([](int) { return Status(Ok{}); }).ok());  // usable again
  const Status own = (*threads)->run([](int rank) -> Status {
    if (rank == 0) return make_error("no CUDA device");
    return Ok{};
  });
  ASSERT_FALSE(own.ok());
  EXPECT_EQ(own.error().message, "GPU rank 0: no CUDA device");  // the caller's rank is named too
}

TEST(RankThreads, CpusThisProcessCannotUseAreRefused) {
  const CpuSet allowed = allowed_cpus();
  int outside = CPU_SETSIZE - 1;
  while (outside > 0 && allowed.contains(outside)) --outside;
  auto threads = RankThreads::start(2, {{}, CpuSet({outside})});
  ASSERT_FALSE(threads.ok());
  EXPECT_NE(threads.error().message.find("GPU rank 1: its thread cannot run on its GPU's local CPUs " +
                                         std::to_string(outside)),
            std::string::npos)
      << threads.error().message;
}

// Expert parallelism is the CUDA decoder's: asked of Vulkan, or with its
// GPUs but no placement, the engine refuses before touching a device.
TEST(ExpertParallelOptions, NeedTheCudaBackendAndAPlacement) {
  const fs::path container = converted_fixture("qwen3_moe", WeightFormat::f32);
  runtime::ModelOptions options;
  options.backend = "vulkan";
  options.gpu_devices = {0, 1};
  options.expert_gpu = {{0, 1, 0, 1, 0, 1, 0, 1}, {0, 1, 0, 1, 0, 1, 0, 1}};
  auto vulkan = runtime::MoeModel::load(container, options);
  ASSERT_FALSE(vulkan.ok());
  EXPECT_NE(vulkan.error().message.find("re-plan with --gpu-backend cuda"), std::string::npos) << vulkan.error().message;
  options.backend = "cuda";
  options.expert_gpu.clear();
  auto no_placement = runtime::MoeModel::load(container, options);
  ASSERT_FALSE(no_placement.ok());
  EXPECT_NE(no_placement.error().message.find("needs both its GPUs (gpu_devices) and its placement (expert_gpu)"),
            std::string::npos)
      << no_placement.error().message;
}

#if COLI_TEST_CUDA

int cuda_devices(std::string& why) {
  const kernels::cuda::CudaDeviceCount count = kernels::cuda::cuda_device_count();
  why = count.reason;
  return count.devices;
}

#define REQUIRE_CUDA_DEVICES(n)                                                                       \
  do {                                                                                                \
    std::string why;                                                                                  \
    const int have = cuda_devices(why);                                                               \
    if (have < (n)) {                                                                                 \
      const std::string message = have == 0 ? why                                                     \
                                            : "this test needs " + std::to_string(n) +                \
                                                  " CUDA devices; this machine has " + std::to_string(have); \
      const char* required = std::getenv("COLI_REQUIRE_CUDA");                                        \
      if ((n) == 1 && required && std::string(required) == "1") FAIL() << message;                    \
      GTEST_SKIP() << message;                                                                        \
    }                                                                                                 \
  } while (0)

// A converted fixture as the CUDA decoders take it: the embedding in host
// memory, every other tensor read from the container.
struct LoadedModel {
  container::ContainerReader reader;
  model::ModelConfig config;
  std::map<std::string, gpu::DecoderTensor> tensors;
  std::vector<std::byte> embedding;

  gpu::DecoderModel decoder_model() const {
    gpu::DecoderModel m;
    m.config = &config;
    m.container = &reader;
    m.tensor = [this](const std::string& name) -> const gpu::DecoderTensor* {
      const auto found = tensors.find(name);
      return found == tensors.end() ? nullptr : &found->second;
    };
    m.max_context = 64;
    m.max_batch_tokens = 16;
    const container::ExpertLayout& layout = reader.index().experts;
    m.vram_experts.assign(layout.layers, {});
    for (auto& layer : m.vram_experts) {
      for (std::uint32_t e = 0; e < layout.experts; ++e) layer.push_back(static_cast<int>(e));
    }
    return m;
  }
};

std::unique_ptr<LoadedModel> load(const fs::path& path) {
  auto reader = container::ContainerReader::open(path);
  EXPECT_TRUE(reader.ok()) << (reader.ok() ? "" : reader.error().message);
  if (!reader.ok()) return nullptr;
  auto config = model::parse_model_config(reader->index().config_json, path.string());
  EXPECT_TRUE(config.ok()) << (config.ok() ? "" : config.error().message);
  if (!config.ok()) return nullptr;
  auto out = std::unique_ptr<LoadedModel>(new LoadedModel{std::move(*reader), std::move(*config), {}, {}});
  for (const container::TensorEntry& entry : out->reader.index().tensors) {
    out->tensors[entry.name] = {entry.dtype, entry.shape, {}, entry.offset, entry.bytes};
  }
  gpu::DecoderTensor& embed = out->tensors.at("model.embed_tokens.weight");
  out->embedding.resize(embed.file_bytes);
  EXPECT_TRUE(out->reader.read(embed.file_offset, out->embedding).ok());
  embed.bytes = out->embedding;
  return out;
}

// The prompt in one prefill call (batches), then greedy steps: every call's logits.
std::vector<std::vector<float>> generate(gpu::GpuDecoder& decoder, const Reference& ref, std::vector<std::int32_t>& tokens) {
  std::vector<std::vector<float>> all;
  std::vector<float> logits(static_cast<std::size_t>(ref.vocab));
  const Status prefill = decoder.forward(ref.prompt, 0, logits, nullptr);
  EXPECT_TRUE(prefill.ok()) << (prefill.ok() ? "" : prefill.error().message);
  all.push_back(logits);
  int position = static_cast<int>(ref.prompt.size());
  for (int step = 0; step < 8; ++step) {
    const std::int32_t next = argmax(logits);
    tokens.push_back(next);
    const Status s = decoder.forward(std::span(&next, 1), position++, logits, nullptr);
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    all.push_back(logits);
  }
  return all;
}

using ExchangeCase = std::tuple<std::string, gpu::ExpertExchange>;
class ExpertParallelDecoderTest : public testing::TestWithParam<ExchangeCase> {};

// One rank holding every expert: the plain decoder's logits, bit for bit
// (an all-reduce of one rank adds nothing; automatic skips it, nccl runs it).
TEST_P(ExpertParallelDecoderTest, OneRankEqualsThePlainDecoder) {
  REQUIRE_CUDA_DEVICES(1);
  const auto& [arch, exchange] = GetParam();
  const Reference ref = load_reference(fs::path(COLI_FIXTURES_DIR) / "models" / arch, "reference");
  auto model = load(converted_fixture(arch, WeightFormat::q8_row));
  ASSERT_TRUE(model);
  gpu::DecoderModel plain_model = model->decoder_model();
  auto plain = CudaDecoder::create(0, plain_model);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  gpu::DecoderModel ep_model = plain_model;
  ep_model.devices = {0};
  ep_model.expert_gpu.assign(plain_model.vram_experts.size(), std::vector<int>(model->config.num_experts, 0));
  ep_model.exchange = exchange;
  auto ep = create_cuda_decoder(0, ep_model);
  if (!ep.ok() && exchange == gpu::ExpertExchange::nccl && ep.error().message.find("no NCCL") != std::string::npos) {
    const char* required = std::getenv("COLI_REQUIRE_NCCL");
    if (required && std::string(required) == "1") FAIL() << ep.error().message;
    GTEST_SKIP() << ep.error().message;
  }
  ASSERT_TRUE(ep.ok()) << ep.error().message;
  std::vector<std::int32_t> plain_tokens, ep_tokens;
  const auto expected = generate(**plain, ref, plain_tokens);
  const auto actual = generate(**ep, ref, ep_tokens);
  EXPECT_EQ(ep_tokens, plain_tokens);
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) EXPECT_EQ(actual[i], expected[i]) << "call " << i;
  EXPECT_EQ((*ep)->memory().experts, (*plain)->memory().experts);
  const std::string first = (*ep)->kernel_names().front();
  EXPECT_NE(first.find(exchange == gpu::ExpertExchange::nccl ? "NCCL" : "no exchange"), std::string::npos) << first;
}

const std::vector<std::string> kArchitectures = {"qwen3_moe", "olmoe", "mixtral", "qwen2_moe"};

INSTANTIATE_TEST_SUITE_P(AllArchitectures, ExpertParallelDecoderTest,
                         testing::Combine(testing::ValuesIn(kArchitectures),
                                          testing::Values(gpu::ExpertExchange::automatic, gpu::ExpertExchange::nccl)),
                         [](const auto& p) {
                           return std::get<0>(p.param) +
                                  (std::get<1>(p.param) == gpu::ExpertExchange::nccl ? "_Nccl" : "_Automatic");
                         });

class TwoGpus : public testing::TestWithParam<std::string> {};

// Two GPUs, each holding every other expert of each layer (qwen2_moe: the
// shared expert added by rank 0 alone): the single GPU's greedy tokens,
// logits within the sum order's rounding.
TEST_P(TwoGpus, GiveTheSingleGpuTokens) {
  REQUIRE_CUDA_DEVICES(2);
  const Reference ref = load_reference(fs::path(COLI_FIXTURES_DIR) / "models" / GetParam(), "reference");
  auto model = load(converted_fixture(GetParam(), WeightFormat::f32));
  ASSERT_TRUE(model);
  gpu::DecoderModel plain_model = model->decoder_model();
  auto plain = CudaDecoder::create(0, plain_model);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  gpu::DecoderModel ep_model = plain_model;
  ep_model.devices = {0, 1};
  for (std::size_t l = 0; l < plain_model.vram_experts.size(); ++l) {
    auto& layer = ep_model.expert_gpu.emplace_back();
    for (std::uint64_t e = 0; e < model->config.num_experts; ++e) layer.push_back(static_cast<int>(e % 2));
  }
  auto ep = ExpertParallelDecoder::create(ep_model);
  ASSERT_TRUE(ep.ok()) << ep.error().message;
  EXPECT_EQ((*ep)->ranks(), 2);
  std::vector<std::int32_t> plain_tokens, ep_tokens;
  const auto expected = generate(**plain, ref, plain_tokens);
  const auto actual = generate(**ep, ref, ep_tokens);
  EXPECT_EQ(ep_tokens, plain_tokens);
  for (std::size_t i = 0; i < actual.size(); ++i) EXPECT_LT(max_relative_error(actual[i], expected[i]), 1e-4) << "call " << i;
  const std::vector<gpu::DecoderMemory>& each = (*ep)->device_memory();  // each GPU holds half the experts
  ASSERT_EQ(each.size(), 2u);
  EXPECT_EQ(each[0].experts + each[1].experts, (*plain)->memory().experts);
  EXPECT_EQ(each[0].experts, each[1].experts);
  EXPECT_EQ(each[1].dense, (*plain)->memory().dense);  // the dense weights replicated
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, TwoGpus, testing::ValuesIn(kArchitectures), [](const auto& p) { return p.param; });

// Through the engine (coli run's path: ModelOptions -> GpuRun): experts on
// the GPUs of `devices` by expert_gpu, the rest (-1) in the host's expert
// cache, computed by the CPU or copied up in prefill batches as in a
// one-GPU hybrid plan; against transformers.
void expect_engine_matches_transformers(const std::string& arch, std::vector<int> devices,
                                        std::vector<std::vector<int>> expert_gpu, bool nccl) {
  const Reference ref = load_reference(fs::path(COLI_FIXTURES_DIR) / "models" / arch, "reference");
  const fs::path container = converted_fixture(arch, WeightFormat::f32);
  runtime::ModelOptions options;
  options.backend = "cuda";
  options.cpu_kernel = "exact";  // f32 activations on the CPU, as the GPU computes them
  options.gpu_devices = std::move(devices);
  options.expert_gpu = std::move(expert_gpu);
  options.gpu_exchange_nccl = nccl;
  options.cache_capacity = 4;
  options.prefill_round_tokens = 2;
  const EngineRun by_token = run_model(container, options, ref);
  EXPECT_LT(by_token.worst_generated_error, 1e-4);
  EXPECT_EQ(by_token.tokens, ref.generated);
  ASSERT_FALSE(by_token.stats.gpu.kernels.empty());
  EXPECT_NE(by_token.stats.gpu.kernels.front().find("expert parallel over " + std::to_string(options.gpu_devices.size())),
            std::string::npos)
      << by_token.stats.gpu.kernels.front();
  for (const char* mode : {"upload", "cpu"}) {
    SCOPED_TRACE(std::string("one prefill call, --gpu-host-experts ") + mode);
    options.gpu_host_experts = mode;
    const EngineRun run = run_model(container, options, ref, true);
    EXPECT_LT(run.worst_generated_error, 1e-4);
    EXPECT_EQ(run.tokens, ref.generated);
  }
}

bool nccl_missing_may_skip() {
  if (NcclLibrary::open().ok()) return false;
  const char* required = std::getenv("COLI_REQUIRE_NCCL");
  return !(required && std::string(required) == "1");
}

class ThroughTheEngine : public testing::TestWithParam<std::string> {};

// One GPU holding half of the first MoE layer's experts and a quarter of
// the second's, the host the rest (rank 0's hybrid layers), with and
// without NCCL's one-rank all-reduce between the graph's segments.
TEST_P(ThroughTheEngine, OneGpuAndTheHostMatchTransformers) {
  REQUIRE_CUDA_DEVICES(1);
  const std::vector<std::vector<int>> placement = {{0, -1, 0, -1, 0, -1, 0, -1}, {-1, 0, -1, -1, -1, -1, -1, 0}};
  expect_engine_matches_transformers(GetParam(), {0}, placement, false);
  if (nccl_missing_may_skip()) GTEST_SKIP() << "no NCCL for the one-rank all-reduce: " << NcclLibrary::open().error().message;
  expect_engine_matches_transformers(GetParam(), {0}, placement, true);
}

// Two GPUs and the host: each GPU holds a third of every layer, rank 0's
// host the last third (remote choices in rank 0's hybrid layers add zero rows).
TEST_P(ThroughTheEngine, TwoGpusAndTheHostMatchTransformers) {
  REQUIRE_CUDA_DEVICES(2);
  const std::vector<std::vector<int>> placement = {{0, 1, -1, 0, 1, -1, 0, 1}, {1, 1, 0, -1, -1, 0, 1, 0}};
  expect_engine_matches_transformers(GetParam(), {0, 1}, placement, false);
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, ThroughTheEngine, testing::ValuesIn(kArchitectures),
                         [](const auto& p) { return p.param; });

// A placement naming more GPUs than there are is refused before anything is made.
TEST(ExpertParallelDecoder, MoreGpusThanThereAreIsRefused) {
  REQUIRE_CUDA_DEVICES(1);
  std::string why;
  const int have = cuda_devices(why);
  auto model = load(converted_fixture("qwen3_moe", WeightFormat::q8_row));
  ASSERT_TRUE(model);
  gpu::DecoderModel m = model->decoder_model();
  for (int d = 0; d <= have; ++d) m.devices.push_back(d);
  for (std::size_t l = 0; l < m.vram_experts.size(); ++l) {
    auto& layer = m.expert_gpu.emplace_back();
    for (std::uint64_t e = 0; e < model->config.num_experts; ++e) layer.push_back(static_cast<int>(e % m.devices.size()));
  }
  auto ep = create_cuda_decoder(0, m);
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.error().message.find("but this machine has " + std::to_string(have) + " CUDA device(s)"), std::string::npos)
      << ep.error().message;
}

#endif  // COLI_TEST_CUDA

}  // namespace
}  // namespace coli::cuda
