// The CUDA decoder's VRAM tier (issue 14): coli-plan --gpu-backend cuda
// plans on the profile's CUDA devices (the H200's recorded properties), its
// VRAM and host lines are engine/cuda/cuda_layout.h's (what CudaDecoder
// allocates, the prefill batch's buffers only in all-VRAM plans), `auto` stays on the CPU without a measured CUDA speed, and bad
// requests are refused by name. Replay only: no live CUDA fact is read.
#include <gtest/gtest.h>

#include <cmath>


#include "coli/experts/usage_history.h"
#include "coli/planner/plan.h"
#include "coli/planner/plan_io.h"
#include "coli/planner/speed.h"
#include "coli/probe/profile_io.h"
#include "cuda/cuda_layout.h"
#include "planner_fixtures.h"

namespace coli::planner {
namespace {

constexpr std::uint64_t kGiB = 1ull << 30;

// The CUDA decoder as a build with it describes it (engine_runs_experts is
// the build's: set here so the test means the same in every build).
BackendMemory cuda_decoder(bool built = true) {
  BackendMemory b = backend::cuda_backend_memory({.kind = backend::BackendKind::cuda, .name = "cuda"});
  b.engine_runs_experts = built;
  return b;
}

PlanRequest cuda_request(const std::string& gpu) {
  PlanRequest request;
  request.gpu = gpu;
  request.backend = cuda_decoder();
  return request;
}

// The recorded H200 with a made-up CUDA self-test result (2000 GB/s), as
// coli-probe --gpu-selftest records the CUDA decoder's matvec.
DeviceProfile h200_with_cuda_selftest() {
  DeviceProfile profile = h200();
  GpuKernelResult selftest;
  selftest.device = profile.gpus.cuda.at(0).name;
  selftest.backend = "cuda";
  selftest.variant = "cuda_matvec_q4_g64";
  selftest.rows = 768;
  selftest.cols = 2048;
  selftest.passed = true;
  selftest.device_index = 0;
  selftest.gb_per_s.median = 2000;
  profile.measurements.gpu_kernels.push_back(selftest);
  return profile;
}

TEST(PlannerCudaTier, PlansTheWholeDecoderOnTheCudaDeviceWithItsOwnLayout) {
  const ModelFootprint fp = qwen3();
  const DeviceProfile profile = h200();
  auto plan = make_plan(profile, fp, cuda_request("0"));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const GpuTier& tier = plan->gpu;
  EXPECT_EQ(tier.backend, "cuda");
  EXPECT_TRUE(tier.whole_decoder && tier.engine_runs_it);
  EXPECT_EQ(tier.device.gpu.uuid, profile.gpus.cuda.at(0).uuid) << "the CUDA UUID, not the Vulkan one";
  EXPECT_EQ(tier.vram_headroom_bytes, profile.gpus.cuda.at(0).free_memory_bytes);
  EXPECT_EQ(tier.vram_slots(), static_cast<int>(fp.moe_layer_count()) * fp.n_experts);
  const model::ModelConfig& c = fp.config;
  const auto ctx = static_cast<std::uint64_t>(plan->ctx);
  const cuda::StepBufferBytes step = cuda::step_buffer_bytes(c, fp.moe_layer_count(), c.vocab_size, ctx);
  EXPECT_EQ(plan->memory.find("GPU KV cache")->bytes, c.num_hidden_layers * 2 * ctx * c.num_key_value_heads * c.head_dim * 4);
  // All experts in VRAM: the prefill batch's buffers too (512 tokens, the CUDA decoder's default).
  EXPECT_EQ(tier.batch_tokens, 512);
  const cuda::BatchBufferBytes batch = cuda::batch_buffer_bytes(c, 512);
  EXPECT_EQ(batch.act, 512 * c.num_experts_per_tok * c.moe_intermediate_size * 4) << "one activation row per choice";
  EXPECT_EQ(plan->memory.find("GPU activations")->bytes,
            step.activations() + batch.total() + cuda::slot_table_bytes(c, fp.moe_layer_count()));
  EXPECT_EQ(plan->memory.find("GPU dense weights")->bytes, fp.gpu_dense_bytes);
  // Loading: the lm_head (bf16, 151936 x 2048) is the largest matrix read, above a 64 MiB chunk of experts.
  EXPECT_EQ(fp.largest_gpu_dense_matrix_bytes, c.vocab_size * c.hidden_size * 2);
  EXPECT_EQ(cuda::load_buffer_bytes(fp.expert().record_stride, static_cast<std::uint64_t>(fp.n_experts),
                                    fp.largest_gpu_dense_matrix_bytes, fp.norm_f32_copy_bytes),
            fp.largest_gpu_dense_matrix_bytes + fp.norm_f32_copy_bytes);
  EXPECT_EQ(plan->memory.find("load phase: GPU upload buffers")->bytes, fp.largest_gpu_dense_matrix_bytes + fp.norm_f32_copy_bytes);
  EXPECT_EQ(plan->memory.find("GPU host-visible buffers")->bytes,
            cuda::pinned_bytes(c, fp.moe_layer_count(), c.vocab_size, 512))
      << "the pinned buffers alone: coli run compares them with the decoder's";
  EXPECT_EQ(plan->memory.find("dense weights")->bytes, fp.embedding_held_bytes) << "the host keeps the embedding only";
  EXPECT_NE(plan->memory.find("GPU driver (host)")->formula.find("CUDA"), std::string::npos);
  EXPECT_LE(plan->memory.total(Tier::vram), tier.vram_headroom_bytes);
}

// llama.cpp's --n-cpu-moe split at the same VRAM, which coli-plan prints as
// rejected: whole layers, so the VRAM serves gpu_layers / layers of the
// expert reads whatever the routing; the per-expert split serves as much
// under uniform routing (the slots of those layers, spread) and more when
// the history concentrates a layer's reads on a few experts.
TEST(PlannerCudaTier, WholeLayerSplitAtTheSameVramIsPredictedBesideTheChosenOne) {
  const DeviceProfile profile = h200_with_cuda_selftest();
  const ModelFootprint fp = qwen3();
  const int layers = static_cast<int>(fp.moe_layer_count());
  PlanRequest request = cuda_request("0");
  request.vram = 12 * kGiB;
  auto uniform = make_plan(profile, fp, request);
  ASSERT_TRUE(uniform.ok()) << uniform.error().message;
  const auto split = whole_layer_split(profile, fp, *uniform);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->gpu_layers, uniform->gpu.vram_slots() / fp.n_experts);
  EXPECT_EQ(split->cpu_layers + split->gpu_layers, layers);
  EXPECT_GT(split->gpu_layers, 0);
  EXPECT_LT(split->gpu_layers, layers);
  EXPECT_DOUBLE_EQ(split->vram_share, static_cast<double>(split->gpu_layers) / layers);
  // Its tier (what coli-sweep runs): the first layers' experts on the CPU, as --n-cpu-moe.
  ASSERT_EQ(split->tier.vram_experts.size(), static_cast<std::size_t>(layers));
  for (int l = 0; l < layers; ++l) {
    EXPECT_EQ(split->tier.vram_experts[static_cast<std::size_t>(l)], l < split->cpu_layers ? 0 : fp.n_experts) << l;
  }
  EXPECT_DOUBLE_EQ(split->tier.vram_share, split->vram_share);
  EXPECT_EQ(split->tier.backend, uniform->gpu.backend);
  const SpeedPrediction chosen = predict_speed(profile, fp, *uniform);
  ASSERT_TRUE(chosen.available && split->speed.available) << chosen.unavailable << split->speed.unavailable;
  EXPECT_LE(split->vram_share, uniform->gpu.vram_share + 1e-12);
  EXPECT_LE(split->speed.decode_tok_per_s, chosen.decode_tok_per_s * (1 + 1e-12));

  // Every layer routes to its first 16 experts only: the per-expert split puts those in VRAM.
  auto history = experts::UsageHistory::create({layers, fp.n_experts, fp.top_k, "test"});
  ASSERT_TRUE(history.ok());
  for (int token = 0; token < 256; ++token) {
    for (int l = 0; l < layers; ++l) {
      std::vector<int> chosen_ids;
      for (int i = 0; i < fp.top_k; ++i) chosen_ids.push_back((token + i) % 16);
      ASSERT_TRUE(history->record(l, chosen_ids).ok());
    }
  }
  history->add_tokens(256);
  request.history = &*history;
  auto hot = make_plan(profile, fp, request);
  ASSERT_TRUE(hot.ok()) << hot.error().message;
  const auto hot_split = whole_layer_split(profile, fp, *hot, &*history);
  ASSERT_TRUE(hot_split.has_value());
  const SpeedPrediction hot_chosen = predict_speed(profile, fp, *hot, &*history);
  EXPECT_GT(hot->gpu.vram_share, hot_split->vram_share + 0.3);
  EXPECT_GT(hot_chosen.decode_tok_per_s, hot_split->speed.decode_tok_per_s);

  // Nothing to split: every expert in VRAM.
  auto all_in = make_plan(profile, fp, cuda_request("0"));
  ASSERT_TRUE(all_in.ok()) << all_in.error().message;
  EXPECT_FALSE(whole_layer_split(profile, fp, *all_in).has_value());
}

// --gpu-batch sizes the prefill batch (its buffers priced in VRAM, the
// decision printed, the engine handed it); absurd values are refused by name.
TEST(PlannerCudaTier, GpuBatchIsANamedOverrideThePlanCarriesToTheEngine) {
  const ModelFootprint fp = qwen3();
  PlanRequest request = cuda_request("0");
  auto defaulted = make_plan(h200(), fp, request);
  ASSERT_TRUE(defaulted.ok()) << defaulted.error().message;
  const auto decision = [](const Plan& p) {
    for (const Decision& d : p.decisions) {
      if (d.knob == "gpu_batch_tokens") return d;
    }
    return Decision{};
  };
  EXPECT_EQ(decision(*defaulted).number, 512);
  EXPECT_NE(decision(*defaulted).reason.find("the cuda decoder's default"), std::string::npos) << decision(*defaulted).reason;
  request.gpu_batch_tokens = 64;
  auto small = make_plan(h200(), fp, request);
  ASSERT_TRUE(small.ok()) << small.error().message;
  EXPECT_EQ(small->gpu.batch_tokens, 64);
  EXPECT_EQ(decision(*small).number, 64);
  EXPECT_NE(decision(*small).reason.find("--gpu-batch"), std::string::npos);
  const model::ModelConfig& c = fp.config;
  EXPECT_EQ(defaulted->memory.find("GPU activations")->bytes - small->memory.find("GPU activations")->bytes,
            cuda::batch_buffer_bytes(c, 512).total() - cuda::batch_buffer_bytes(c, 64).total());
  request.gpu_batch_tokens = 0;
  auto refused = make_plan(h200(), fp, request);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("--gpu-batch 0 is outside 1..65536"), std::string::npos) << refused.error().message;
}

// A CUDA plan's decode still pays its KV cache: its bytes at the depth at
// the RAM rate, linear in the depth (the decode attention points price the
// CPU's attention only; session 44 had left the term at 0 here).
TEST(PlannerCudaTier, DecodeKvCacheTermIsItsBytesAtTheDepth) {
  const DeviceProfile profile = h200_with_cuda_selftest();
  const ModelFootprint fp = qwen3();
  auto plan = make_plan(profile, fp, cuda_request("0"));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const double at_512 = term_seconds(predict_speed(profile, fp, *plan, nullptr, 512).decode_terms, "KV cache");
  const double at_1024 = term_seconds(predict_speed(profile, fp, *plan, nullptr, 1024).decode_terms, "KV cache");
  EXPECT_GT(at_512, 0);
  EXPECT_NEAR(at_1024, 2 * at_512, 1e-12);
}

// The prefill prediction of a CUDA plan follows what the decoder does: an
// all-VRAM plan's batches read the dense weights and each distinct expert
// once from VRAM (an upper bound, said so: no GPU GEMM is timed yet); a
// hybrid plan's batches copy the experts outside VRAM up at the probe's
// host-to-GPU bandwidth, and without that figure it falls back on decode's.
TEST(PlannerCudaTier, PrefillPredictionFollowsTheCudaDecodersPrefill) {
  const DeviceProfile profile = h200_with_cuda_selftest();
  const ModelFootprint fp = qwen3();
  auto all_in = make_plan(profile, fp, cuda_request("0"));
  ASSERT_TRUE(all_in.ok()) << all_in.error().message;
  const SpeedPrediction s = predict_speed(profile, fp, *all_in);
  ASSERT_TRUE(s.available) << s.unavailable;
  const double n = fp.n_experts, batch = 512, layers = static_cast<double>(fp.moe_layer_count());
  const double distinct = n * (1 - std::pow(1 - 1 / n, batch * fp.top_k));
  const double bytes = static_cast<double>(dense_bytes_per_token(fp)) +
                       layers * distinct * static_cast<double>(fp.expert().record_bytes);
  EXPECT_NEAR(s.prefill_tok_per_s, batch / (bytes / 2000e9), 1e-6 * s.prefill_tok_per_s);
  EXPECT_NE(s.prefill_inputs.find("an upper bound"), std::string::npos) << s.prefill_inputs;
  PlanRequest request = cuda_request("0");
  request.vram = 8 * kGiB;
  auto hybrid = make_plan(profile, fp, request);
  ASSERT_TRUE(hybrid.ok()) << hybrid.error().message;
  const SpeedPrediction unmeasured = predict_speed(profile, fp, *hybrid);
  ASSERT_TRUE(unmeasured.available) << unmeasured.unavailable;
  EXPECT_EQ(unmeasured.prefill_tok_per_s, unmeasured.decode_tok_per_s);
  EXPECT_NE(unmeasured.prefill_inputs.find("no measured host-to-GPU bandwidth"), std::string::npos) << unmeasured.prefill_inputs;
  DeviceProfile with_uploads = profile;
  for (std::uint64_t block : {1ull << 20, 64ull << 20}) {  // the staging pass (16 records, ~25 MiB) is nearer 64 MiB
    UploadBandwidthPoint point;
    point.backend = "cuda";
    point.device = profile.gpus.cuda.at(0).name;
    point.block_bytes = block;
    point.gb_per_s.median = block == (64ull << 20) ? 50 : 10;
    with_uploads.measurements.uploads.push_back(point);
  }
  const SpeedPrediction h = predict_speed(with_uploads, fp, *hybrid);
  ASSERT_TRUE(h.available) << h.unavailable;
  const double share = hybrid->gpu.vram_share;
  ASSERT_GT(share, 0.0);
  ASSERT_LT(share, 1.0);
  const double experts = layers * distinct * static_cast<double>(fp.expert().record_bytes);
  const double seconds = (static_cast<double>(dense_bytes_per_token(fp)) + experts * share) / 2000e9 + experts * (1 - share) / 50e9;
  EXPECT_NEAR(h.prefill_tok_per_s, batch / seconds, 1e-6 * h.prefill_tok_per_s);
  EXPECT_NE(h.prefill_inputs.find("copied up at host-to-GPU copies 50.0 GB/s"), std::string::npos) << h.prefill_inputs;
}

// Loading takes the larger of a chunk of whole expert records (at most
// 64 MiB, at most a layer's VRAM experts) and the largest dense matrix read,
// plus the norms widened to f32 that stay until the load ends.
TEST(PlannerCudaTier, LoadBufferIsTheLargerOfAnExpertChunkAndADenseMatrix) {
  constexpr std::uint64_t kMiB = 1 << 20;
  EXPECT_EQ(cuda::load_buffer_bytes(3 * kMiB, 64, 10 * kMiB, kMiB), 21 * 3 * kMiB + kMiB);  // 21 records fit 64 MiB
  EXPECT_EQ(cuda::load_buffer_bytes(3 * kMiB, 5, 10 * kMiB, kMiB), 16 * kMiB);             // 5 records: 15 MiB
  EXPECT_EQ(cuda::load_buffer_bytes(3 * kMiB, 2, 10 * kMiB, kMiB), 11 * kMiB);             // the matrix is larger
  EXPECT_EQ(cuda::load_buffer_bytes(100 * kMiB, 4, 0, 0), 100 * kMiB) << "one record even when it exceeds a chunk";
}

TEST(PlannerCudaTier, VramLimitShrinksTheTierAndTheRestRunsOnTheCpu) {
  const ModelFootprint fp = qwen3();
  PlanRequest request = cuda_request("0");
  request.vram = 8 * kGiB;
  auto plan = make_plan(h200(), fp, request);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const int all = static_cast<int>(fp.moe_layer_count()) * fp.n_experts;
  EXPECT_GT(plan->gpu.vram_slots(), 0);
  EXPECT_LT(plan->gpu.vram_slots(), all);
  EXPECT_LE(plan->memory.total(Tier::vram), 8 * kGiB);
  // Hybrid: the prefill batch adds a staging slab of 16 records (no layer has
  // fewer than 16 experts outside VRAM here) and its pinned passes.
  const model::ModelConfig& c = fp.config;
  const std::uint64_t stride = fp.expert().record_stride;
  int fewest = fp.n_experts;
  for (int slots : plan->gpu.vram_experts) fewest = std::min(fewest, slots);
  ASSERT_GE(fp.n_experts - fewest, 16);
  const cuda::BatchBufferBytes batch = cuda::batch_buffer_bytes(c, 512, 16, stride);
  EXPECT_EQ(batch.staging, 16 * stride);
  EXPECT_EQ(batch.total(), cuda::batch_buffer_bytes(c, 512).total() + 16 * stride + batch.order + batch.offsets)
      << "the staging slab and the staged experts' grouping";
  EXPECT_EQ(plan->memory.find("GPU activations")->bytes,
            cuda::step_buffer_bytes(c, fp.moe_layer_count(), c.vocab_size, static_cast<std::uint64_t>(plan->ctx)).activations() +
                batch.total() + cuda::slot_table_bytes(c, fp.moe_layer_count()));
  EXPECT_EQ(plan->memory.find("GPU host-visible buffers")->bytes,
            cuda::pinned_bytes(c, fp.moe_layer_count(), c.vocab_size, 512) +
                cuda::hybrid_batch_pinned_bytes(c, 512, 16, stride));
  EXPECT_GT(cuda::hybrid_batch_pinned_bytes(c, 512, 16, stride), 2 * 16 * stride) << "two passes of records on their way up";
  EXPECT_EQ(cuda::batch_buffer_bytes(c, 1).total(), 0u) << "one token per submission: no batch";
  EXPECT_EQ(cuda::staging_records(3, stride), 3u) << "no more records than a layer has outside VRAM";
  EXPECT_EQ(cuda::staging_records(100, stride), 16u);
  EXPECT_EQ(cuda::staging_records(100, 23u << 20), 2u) << "at most 64 MiB a pass: DeepSeek-V3's int4 experts";
  EXPECT_EQ(cuda::staging_records(100, 100u << 20), 1u) << "at least one record";
  std::uint64_t host_cache = 0;
  for (const MemoryLine& line : plan->memory.lines) host_cache += line.component.rfind("expert cache", 0) == 0 ? line.bytes : 0;
  EXPECT_GT(host_cache, 0u) << "a host expert cache for the experts outside VRAM";
  // The load's buffers are gone before that cache fills: they add to the peak only beyond it.
  const std::uint64_t load = plan->gpu.load_buffer_bytes;
  EXPECT_GT(load, 0u);
  EXPECT_EQ(plan->memory.find("load phase: GPU upload buffers")->bytes, load > host_cache ? load - host_cache : 0);
}

// Measured on the H200 (session 12, docs/results/issue14/session12): a hybrid
// plan's peak RSS was the run's lines alone; the load buffers (298.5 MiB
// beside a 13.3 GiB cache) had been summed in, 1.9% over the peak.
TEST(PlannerCudaTier, LoadBuffersAddToThePeakOnlyBeyondTheExpertCache) {
  constexpr std::uint64_t kMiB = 1 << 20;
  MemoryPreview run;
  run.lines.push_back({"dense weights", Tier::ram, 500 * kMiB, ""});
  run.lines.push_back({"expert cache: pinned slots", Tier::ram, 10 * kMiB, ""});
  run.lines.push_back({"expert cache: evictable slots", Tier::ram, 90 * kMiB, ""});
  const MemoryLine below = load_phase_line(run, 60 * kMiB);
  EXPECT_EQ(below.component, "load phase: GPU upload buffers");
  EXPECT_EQ(below.tier, Tier::ram);
  EXPECT_EQ(below.bytes, 0u) << "the run's cache is larger than the load's buffers";
  EXPECT_NE(below.formula.find("60.0 MiB"), std::string::npos) << below.formula;
  EXPECT_NE(below.formula.find("100.0 MiB"), std::string::npos) << below.formula;
  EXPECT_EQ(load_phase_line(run, 130 * kMiB).bytes, 30 * kMiB) << "the load phase is the peak by what it holds beyond the cache";
  EXPECT_EQ(load_phase_line(MemoryPreview{}, 130 * kMiB).bytes, 130 * kMiB) << "no host cache: all of it";
}

// Buffers of a large page (2 MiB) or more take whole pages on the device:
// the plan prices what each of the decoder's buffers rounds up by (a
// hybrid plan's expert slabs are rarely whole pages), and still fits.
TEST(PlannerCudaTier, LargePageRoundingIsPricedPerBuffer) {
  constexpr std::uint64_t kMiB = 1ull << 20;
  EXPECT_EQ(cuda::page_rounding(kMiB), 0u) << "below a large page: it shares pages";
  EXPECT_EQ(cuda::page_rounding(4 * kMiB), 0u);
  EXPECT_EQ(cuda::page_rounding(4 * kMiB + 1), 2 * kMiB - 1);
  const ModelFootprint fp = qwen3();
  PlanRequest request = cuda_request("0");
  request.vram = 8 * kGiB;
  auto plan = make_plan(h200(), fp, request);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const model::ModelConfig& c = fp.config;
  std::uint64_t expected = cuda::page_rounding(fp.gpu_dense_bytes) +
                           cuda::page_rounding(cuda::slot_table_bytes(c, fp.moe_layer_count())) +
                           cuda::step_buffer_bytes(c, fp.moe_layer_count(), c.vocab_size, static_cast<std::uint64_t>(plan->ctx)).rounding();
  std::uint64_t slabs = 0;
  for (int slots : plan->gpu.vram_experts) slabs += cuda::page_rounding(static_cast<std::uint64_t>(slots) * fp.expert().record_stride);
  EXPECT_GT(slabs, 0u) << "the hybrid slabs are not whole pages here";
  expected += cuda::page_rounding(cuda::batch_buffer_bytes(c, 512, 16, fp.expert().record_stride).all());
  EXPECT_EQ(plan->memory.find("GPU large-page rounding")->bytes, expected + slabs);
  EXPECT_LE(plan->memory.total(Tier::vram), 8 * kGiB);
}

// A budget that holds every expert but not also the prefill batch: experts
// stay out until the hybrid plan fits with its batch, whose staging slab
// needs a record for the widest layer's host experts, and the plan fits.
TEST(PlannerCudaTier, PrefillBatchBuffersCountWhenEveryExpertFits) {
  const ModelFootprint fp = qwen3();
  const DeviceProfile profile = h200();
  const int all = static_cast<int>(fp.moe_layer_count()) * fp.n_experts;
  const auto slots_at = [&](std::uint64_t vram) {
    PlanRequest request = cuda_request("0");
    request.vram = vram;
    auto plan = make_plan(profile, fp, request);
    if (!plan.ok()) {
      ADD_FAILURE() << plan.error().message;
      return -1;
    }
    EXPECT_LE(plan->memory.total(Tier::vram), vram);
    return plan->gpu.vram_slots();
  };
  // The smallest budget that takes every expert (the reserve scales with the budget: search it).
  std::uint64_t low = 8 * kGiB, high = 64 * kGiB;
  ASSERT_LT(slots_at(low), all);
  ASSERT_EQ(slots_at(high), all);
  while (high - low > 1) {
    const std::uint64_t mid = low + (high - low) / 2;
    (slots_at(mid) == all ? high : low) = mid;
  }
  // One byte less: every expert would fit without the batch (larger than a
  // slot), so some stay out. One expert out frees a slot but needs a staging
  // record of the same size and the staged experts' grouping (~17 KB), which
  // fit only where its slab's large-page rounding shrinks by as much; a
  // second one out, in another layer (slots are dropped round-robin), needs
  // no second record, so one or two stay out.
  ASSERT_GT(cuda::batch_buffer_bytes(fp.config, 512).total(), fp.expert().record_stride);
  const int slots = slots_at(low);
  EXPECT_LT(slots, all);
  EXPECT_GE(slots, all - 2);
}

TEST(PlannerCudaTier, AutoStaysOnTheCpuWithoutAMeasuredCudaSpeedOrACudaDecoder) {
  auto plan = make_plan(h200(), qwen3(), cuda_request("auto"));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  EXPECT_EQ(plan->gpu.backend, "cpu");
  EXPECT_NE(plan->gpu.reason.find("no measured GPU speed"), std::string::npos) << plan->gpu.reason;
  DeviceProfile measured = h200();
  GpuKernelResult result;
  result.device = measured.gpus.cuda.at(0).name;
  result.backend = "cuda";
  result.passed = true;
  result.gb_per_s.median = 3000;
  measured.measurements.gpu_kernels.push_back(result);
  auto gpu = make_plan(measured, qwen3(), cuda_request("auto"));
  ASSERT_TRUE(gpu.ok()) << gpu.error().message;
  EXPECT_EQ(gpu->gpu.backend, "cuda") << gpu->gpu.reason;
  PlanRequest unbuilt = cuda_request("auto");
  unbuilt.backend = cuda_decoder(false);
  auto cpu = make_plan(measured, qwen3(), unbuilt);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->gpu.backend, "cpu");
  EXPECT_NE(cpu->gpu.reason.find("no CUDA decoder"), std::string::npos) << cpu->gpu.reason;
  unbuilt.gpu = "0";  // an explicit device previews the tier
  auto preview = make_plan(measured, qwen3(), unbuilt);
  ASSERT_TRUE(preview.ok()) << preview.error().message;
  EXPECT_FALSE(preview->gpu.engine_runs_it);
  EXPECT_NE(preview->gpu.reason.find("PREVIEW"), std::string::npos);
}

TEST(PlannerCudaTier, BadRequestsAreRefusedByName) {
  auto missing = make_plan(h200(), qwen3(), cuda_request("1"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("1 CUDA device"), std::string::npos) << missing.error().message;
  PlanRequest variant = cuda_request("0");
  variant.gpu_variant = "q4_g64_rows4";
  auto refused = make_plan(h200(), qwen3(), variant);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("--gpu-variant"), std::string::npos) << refused.error().message;
  DeviceProfile no_cuda = h200();
  no_cuda.gpus.cuda.clear();
  no_cuda.gpus.cuda_status = "no CUDA driver (libcuda.so.1 not found)";
  auto none = make_plan(no_cuda, qwen3(), cuda_request("0"));
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("libcuda.so.1"), std::string::npos) << none.error().message;
  auto cpu = make_plan(no_cuda, qwen3(), cuda_request("auto"));
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->gpu.backend, "cpu");
}

TEST(PlannerCudaTier, PlanFileKeepsTheCudaDeviceAndItIsFoundByUuid) {
  const DeviceProfile profile = h200();
  auto plan = make_plan(profile, qwen3(), cuda_request("0"));
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  PlanFile file;
  file.profile_fingerprint = profile.fingerprint;
  file.model_identity = "id";
  file.top_k = qwen3().top_k;
  file.plan = *plan;
  file.speed = predict_speed(profile, qwen3(), *plan);
  // The profile's GPU self-test is Vulkan's: it predicts nothing for the CUDA decoder.
  EXPECT_FALSE(file.speed.available);
  EXPECT_NE(file.speed.unavailable.find("coli-probe --gpu-selftest"), std::string::npos) << file.speed.unavailable;
  EXPECT_NE(file.speed.unavailable.find("CUDA decoder's matvec"), std::string::npos) << file.speed.unavailable;
  auto parsed = parse_plan(plan_to_toml(file), "cuda.plan");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(parsed->plan.gpu, plan->gpu);
  EXPECT_EQ(find_cuda_gpu(profile.gpus, parsed->plan.gpu.device.gpu), 0);
  // A plan of schema 5 has no batch_tokens: read as 128, what its engine ran.
  std::string v5 = plan_to_toml(file);
  const auto batch_line = v5.find("batch_tokens = 512\n");
  ASSERT_NE(batch_line, std::string::npos);
  v5.erase(batch_line, std::string("batch_tokens = 512\n").size());
  const auto version = v5.find("schema_version = " + std::to_string(kPlanSchemaVersion));
  ASSERT_NE(version, std::string::npos);
  v5.replace(version, std::string("schema_version = " + std::to_string(kPlanSchemaVersion)).size(), "schema_version = 5");
  auto old = parse_plan(v5, "v5.plan");
  ASSERT_TRUE(old.ok()) << old.error().message;
  EXPECT_EQ(old->plan.gpu.batch_tokens, 128);
  GpuFacts other = profile.gpus;
  other.cuda.at(0).uuid = "00000000000000000000000000000009";
  EXPECT_FALSE(find_cuda_gpu(other, parsed->plan.gpu.device.gpu)) << "another H200 with another UUID is not this plan's GPU";
}

// --gpu-backend auto: CUDA exactly when this build runs it and the profile
// lists a CUDA device; vulkan and cuda as asked.
TEST(PlannerCudaTier, GpuBackendAutoTakesCudaOnlyWhereItRuns) {
  const DeviceProfile profile = h200();
  const bool built = backend::cuda_backend_memory({.kind = backend::BackendKind::cuda, .name = "cuda"}).engine_runs_experts;
  EXPECT_EQ(gpu_backend_memory("auto", profile).name, built ? "cuda" : "vulkan");
  EXPECT_EQ(gpu_backend_memory("vulkan", profile).name, "vulkan");
  EXPECT_EQ(gpu_backend_memory("cuda", profile).name, "cuda");
  DeviceProfile no_cuda = profile;
  no_cuda.gpus.cuda.clear();
  EXPECT_EQ(gpu_backend_memory("auto", no_cuda).name, "vulkan");
}

}  // namespace
}  // namespace coli::planner
