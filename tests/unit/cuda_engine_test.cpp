// The whole decoder on a CUDA device (engine/cuda) against the transformers
// references and the CPU engine, as vulkan_engine_test.cpp does for Vulkan:
// the four architectures, f32 experts to 1e-4 with the same 32 greedy tokens
// as transformers and the CPU engine, int8/int4 experts against transformers
// on the de-quantised weights (f32 activations to 1e-4; int8 activations,
// the default, within their tolerance), one prefill call over the whole prompt (in
// batches; int8/int4 experts there within 1e-2), int8/int4 dense
// projections against the CPU engine's exact path, and hybrid plans (the
// CPU computes the experts outside VRAM). Without a CUDA device (or in a build without nvcc) these
// skip, unless COLI_REQUIRE_CUDA=1 makes that a failure. The no-device test
// runs everywhere: backend "cuda" there is a clear error, never a crash.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <span>
#include <string>

#include "engine_test_support.h"
#if COLI_TEST_CUDA
#include "cuda/cuda_kernels.h"
#endif

namespace coli {
namespace {

// The CUDA devices here, or 0 with the reason.
int cuda_devices(std::string& why) {
#if COLI_TEST_CUDA
  const kernels::cuda::CudaDeviceCount count = kernels::cuda::cuda_device_count();
  why = count.reason;
  return count.devices;
#else
  why = "this build has no CUDA backend (configure with -DCOLI_CUDA=ON and nvcc)";
  return 0;
#endif
}

#define REQUIRE_CUDA()                                                            \
  do {                                                                            \
    std::string why;                                                              \
    if (cuda_devices(why) == 0) {                                                 \
      const char* required = std::getenv("COLI_REQUIRE_CUDA");                    \
      if (required && std::string(required) == "1") FAIL() << why;                \
      GTEST_SKIP() << why;                                                        \
    }                                                                             \
  } while (0)

runtime::ModelOptions cuda_options() {
  runtime::ModelOptions options;
  options.backend = "cuda";
  return options;
}

class CudaEngine : public testing::TestWithParam<std::string> {
 protected:
  fs::path dir() const { return fs::path(COLI_FIXTURES_DIR) / "models" / GetParam(); }
};

TEST_P(CudaEngine, F32MatchesTransformersAndTheCpuEngine) {
  REQUIRE_CUDA();
  const Reference ref = load_reference(dir(), "reference");
  const fs::path container = converted_fixture(GetParam(), WeightFormat::f32);
  const EngineRun gpu = run_model(container, cuda_options(), ref);
  const EngineRun cpu = run_model(container, {}, ref);
  ASSERT_EQ(gpu.prompt_logits.size(), ref.prompt.size());
  for (std::size_t i = 0; i < ref.prompt.size(); ++i) {
    const std::span<const float> expected(ref.logits.data() + i * ref.vocab, ref.vocab);
    EXPECT_LT(max_relative_error(gpu.prompt_logits[i], expected), 1e-4) << "prompt position " << i;
  }
  EXPECT_LT(gpu.worst_generated_error, 1e-4);
  EXPECT_EQ(gpu.tokens, ref.generated);
  EXPECT_EQ(gpu.tokens, cpu.tokens);
  EXPECT_EQ(gpu.stats.backend, "cuda");
  EXPECT_GT(gpu.stats.gpu.expert_bytes, 0u);
  EXPECT_GT(gpu.stats.gpu.kv_cache_bytes, 0u);
}

// f32 activations (gpu_kernel "exact"): the de-quantised weights' own arithmetic.
runtime::ModelOptions exact_cuda_options() {
  runtime::ModelOptions options = cuda_options();
  options.gpu_kernel = "exact";
  return options;
}

bool uses_int8_kernels(const EngineRun& run) {
  return std::any_of(run.stats.gpu.kernels.begin(), run.stats.gpu.kernels.end(),
                     [](const std::string& k) { return k.find("expert_gate_up") != std::string::npos && k.find(" int8") != std::string::npos; });
}

TEST_P(CudaEngine, QuantisedExpertsMatchTransformersOnDequantisedWeights) {
  REQUIRE_CUDA();
  for (const auto& [format, name] : kQuantisedReferences) {
    SCOPED_TRACE(name);
    const Reference ref = load_reference(dir(), name);
    const EngineRun run = run_model(converted_fixture(GetParam(), format), exact_cuda_options(), ref);
    EXPECT_LT(run.worst_generated_error, 1e-4);
    EXPECT_EQ(run.tokens, ref.generated);
    EXPECT_FALSE(uses_int8_kernels(run));
  }
}

// The default step quantises activations to int8 for these weights
// (decoder_kernels.h's Q8Activations): per prompt position against
// transformers on the de-quantised weights, bounded as the CPU engine's
// int8 activations are (there, on these models: median 0.6-0.9%, worst
// 2%); a router that flips one expert moves a position by ~10%, hence the
// worst's bound (docs/backends.md).
TEST_P(CudaEngine, QuantisedExpertsOnInt8ActivationsStayWithinTheirTolerance) {
  REQUIRE_CUDA();
  for (const auto& [format, name] : kQuantisedReferences) {
    SCOPED_TRACE(name);
    const Reference ref = load_reference(dir(), name);
    const EngineRun run = run_model(converted_fixture(GetParam(), format), cuda_options(), ref);
    EXPECT_TRUE(uses_int8_kernels(run));
    std::vector<double> errors;
    for (std::size_t i = 0; i < ref.prompt.size(); ++i) {
      errors.push_back(max_relative_error(run.prompt_logits[i], std::span(ref.logits.data() + i * ref.vocab, ref.vocab)));
    }
    expect_median_and_worst(std::move(errors), 2e-2, 0.25, GetParam() + " " + name + " int8");
  }
}

// The whole prompt in one forward call: batched prefill (cuda_prefill.h) in
// batches of 5 tokens (12 prompt tokens: 5, 5 and 2); f32 weights run
// exact f32 arithmetic there too.
TEST_P(CudaEngine, OnePrefillCallGivesTheSameTokens) {
  REQUIRE_CUDA();
  const Reference ref = load_reference(dir(), "reference");
  runtime::ModelOptions options = cuda_options();
  options.gpu_batch_tokens = 5;
  const EngineRun run = run_model(converted_fixture(GetParam(), WeightFormat::f32), options, ref, true);
  ASSERT_EQ(run.prompt_logits.size(), 1u);
  const std::span<const float> expected(ref.logits.data() + (ref.prompt.size() - 1) * ref.vocab, ref.vocab);
  EXPECT_LT(max_relative_error(run.prompt_logits[0], expected), 1e-4);
  EXPECT_EQ(run.tokens, ref.generated);
}

// Every prefix of `prompt` (two tokens on) as one batch from position 0,
// its last logits against expected(n), the logits after n tokens. The
// tensor cores round the activations to f16, and a router that flips one
// expert on that rounding moves a position by ~10% on these tiny random
// models (as in EngineReference's quantised test), so the median over the
// prefixes is bounded at 1e-2 of the largest logit (docs/backends.md) and the
// worst at 0.25 (a broken layout or grouping is far above both).
void expect_batched_prefixes_close(const fs::path& container, std::span<const std::int32_t> prompt,
                                   const std::function<std::span<const float>(std::size_t)>& expected,
                                   const std::string& label) {
  runtime::ModelOptions options = cuda_options();
  options.gpu_batch_tokens = 64;  // every prefix in one batch
  auto model = runtime::MoeModel::load(container, options);
  ASSERT_TRUE(model.ok()) << model.error().message;
  std::vector<float> logits(static_cast<std::size_t>(model->vocab_size()));
  std::vector<double> errors;
  for (std::size_t n = 2; n <= prompt.size(); ++n) {
    const Status ran = model->forward(prompt.first(n), 0, logits);
    ASSERT_TRUE(ran.ok()) << ran.error().message;
    errors.push_back(max_relative_error(logits, expected(n)));
  }
  expect_median_and_worst(std::move(errors), 1e-2, 0.25, label);
}

// int8/int4 experts through the batched prefill, against transformers on
// the de-quantised weights.
TEST_P(CudaEngine, BatchedPrefillOfQuantisedExpertsStaysWithinItsTolerance) {
  REQUIRE_CUDA();
  for (const auto& [format, name] : kQuantisedReferences) {
    SCOPED_TRACE(name);
    const Reference ref = load_reference(dir(), name);
    expect_batched_prefixes_close(
        converted_fixture(GetParam(), format), ref.prompt,
        [&](std::size_t n) { return std::span<const float>(ref.logits.data() + (n - 1) * ref.vocab, ref.vocab); },
        GetParam() + " " + name);
  }
}

// Quantised dense projections through the batched prefill (q/k/v/o and
// the router as tensor-core GEMMs on f16 activations), against the CPU
// engine's exact path token by token (f32 activations on the same
// de-quantised weights).
TEST_P(CudaEngine, BatchedPrefillOfQuantisedDenseWeightsStaysWithinItsTolerance) {
  REQUIRE_CUDA();
  const Reference ref = load_reference(dir(), "reference_q8");
  for (DenseFormat dense : {DenseFormat::q8_row, DenseFormat::q4_g64}) {
    const std::string format(dense_format_name(dense));
    SCOPED_TRACE(format);
    const fs::path container = scratch_dir() / (GetParam() + "_batched_dense_" + format + ".coli");
    auto report = convert::convert_model(dir(), container, WeightFormat::q8_row, dense);
    ASSERT_TRUE(report.ok()) << report.error().message;
    runtime::ModelOptions cpu = f32_kv_options();
    cpu.cpu_kernel = "exact";
    const EngineRun expected = run_model(container, cpu, ref);
    expect_batched_prefixes_close(
        container, ref.prompt, [&](std::size_t n) { return std::span<const float>(expected.prompt_logits[n - 1]); },
        GetParam() + " dense " + format);
  }
}

// Quantised dense projections (attention, lm_head; coli convert --dense):
// the CUDA matvecs against the CPU engine's exact path, which computes the
// same f32 activations on the de-quantised weights.
TEST_P(CudaEngine, QuantisedDenseWeightsMatchTheCpuExactPath) {
  REQUIRE_CUDA();
  const Reference ref = load_reference(dir(), "reference_q8");
  for (DenseFormat dense : {DenseFormat::q8_row, DenseFormat::q4_g64}) {
    SCOPED_TRACE(std::string(dense_format_name(dense)));
    const fs::path container = scratch_dir() / (GetParam() + "_dense_" + std::string(dense_format_name(dense)) + ".coli");
    auto report = convert::convert_model(dir(), container, WeightFormat::q8_row, dense);
    ASSERT_TRUE(report.ok()) << report.error().message;
    runtime::ModelOptions cpu = f32_kv_options();  // the CUDA decoder keeps f32 KV
    cpu.cpu_kernel = "exact";
    const EngineRun expected = run_model(container, cpu, ref);
    const EngineRun gpu = run_model(container, exact_cuda_options(), ref);
    ASSERT_EQ(gpu.prompt_logits.size(), expected.prompt_logits.size());
    for (std::size_t i = 0; i < gpu.prompt_logits.size(); ++i) {
      EXPECT_LT(max_relative_error(gpu.prompt_logits[i], expected.prompt_logits[i]), 1e-4) << "prompt position " << i;
    }
    EXPECT_EQ(gpu.tokens, expected.tokens);
    // On int8 activations (q/k/v, o, lm_head and experts through dp4a), bounded as above.
    const EngineRun int8 = run_model(container, cuda_options(), ref);
    EXPECT_TRUE(uses_int8_kernels(int8));
    std::vector<double> errors;
    for (std::size_t i = 0; i < int8.prompt_logits.size(); ++i) {
      errors.push_back(max_relative_error(int8.prompt_logits[i], expected.prompt_logits[i]));
    }
    expect_median_and_worst(std::move(errors), 2e-2, 0.25,
                            GetParam() + " dense " + std::string(dense_format_name(dense)) + " int8");
  }
}

// The decoder's line on where a hybrid prefill put the host's experts.
std::string host_batch_line(const EngineRun& run) {
  for (const std::string& line : run.stats.gpu.kernels) {
    if (line.rfind("hybrid prefill:", 0) == 0) return line;
  }
  return "";
}

// Hybrid plans: the experts without a VRAM slot computed by the CPU between
// two graph segments token by token; in one prefill call (a batch) copied
// up into the staging slab or computed by the CPU, per expert (measured:
// the first layer sends its fewest-token expert to the CPU, the rest up;
// --gpu-host-experts forces either).
TEST_P(CudaEngine, HybridPlansComputeTheOtherExpertsOnTheCpu) {
  REQUIRE_CUDA();
  const Reference ref = load_reference(dir(), "reference");
  const fs::path container = converted_fixture(GetParam(), WeightFormat::f32);
  runtime::ModelOptions options = cuda_options();
  options.cpu_kernel = "exact";                   // f32 activations on the CPU, as the GPU computes them
  options.vram_experts = {{0, 2, 4, 6}, {7, 1}};  // 2 MoE layers of 8 experts: half, then a quarter in VRAM
  options.cache_capacity = 4;                     // the CPU's share streams through a small cache
  options.prefill_round_tokens = 2;
  const EngineRun by_token = run_model(container, options, ref);
  EXPECT_LT(by_token.worst_generated_error, 1e-4);
  EXPECT_EQ(by_token.tokens, ref.generated);
  for (const char* mode : {"measured", "upload", "cpu"}) {
    SCOPED_TRACE(std::string("one prefill call, --gpu-host-experts ") + mode);
    options.gpu_host_experts = mode;
    const EngineRun run = run_model(container, options, ref, true);
    EXPECT_LT(run.worst_generated_error, 1e-4);
    EXPECT_EQ(run.tokens, ref.generated);
    const std::string line = host_batch_line(run);
    EXPECT_EQ(line.find(" 0 experts copied up") == std::string::npos, std::string(mode) != "cpu") << line;
    EXPECT_EQ(line.find(" 0 computed on the CPU") == std::string::npos, std::string(mode) != "upload") << line;
  }
  // A layer with no expert in VRAM at all runs on the CPU alone, or in the staging slab alone.
  options.vram_experts = {{}, {3}};
  options.gpu_host_experts = "measured";
  for (bool one_prefill_call : {false, true}) {
    const EngineRun run = run_model(container, options, ref, one_prefill_call);
    EXPECT_LT(run.worst_generated_error, 1e-4);
    EXPECT_EQ(run.tokens, ref.generated);
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, CudaEngine, testing::Values("qwen3_moe", "olmoe", "mixtral", "qwen2_moe"));

// Runs everywhere: on a machine without a CUDA device (or a build without
// nvcc), backend "cuda" is an error that says why, and nothing crashes.
TEST(CudaEngineWithoutDevice, SaysWhyItCannotRun) {
  std::string why;
  if (cuda_devices(why) > 0) GTEST_SKIP() << "a CUDA device is present; the device tests cover it";
  auto model = runtime::MoeModel::load(converted_fixture("olmoe", WeightFormat::q4_g64), cuda_options());
  ASSERT_FALSE(model.ok());
  const std::string& message = model.error().message;
#if COLI_TEST_CUDA
  EXPECT_NE(message.find("the CUDA decoder needs CUDA device 0, but"), std::string::npos) << message;
  EXPECT_NE(message.find(why), std::string::npos) << message;
#else
  EXPECT_NE(message.find("this build has no CUDA backend: rebuild with nvcc (-DCOLI_CUDA=ON)"), std::string::npos)
      << message;
#endif
}

}  // namespace
}  // namespace coli
