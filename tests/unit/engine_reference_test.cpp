// The engine against Hugging Face transformers (tests/fixtures/models, made by
// tools/reference/make_reference_models.py): each architecture converted to a
// container, prompt logits within 1e-4 relative and the same 32 greedy
// tokens; the int8/int4 expert paths against transformers run on the
// de-quantised weights; and the same tokens for every thread count, cache
// capacity and pin set.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <tuple>
#include <optional>
#include <nlohmann/json.hpp>

#include "coli/container/container.h"
#include "coli/convert/convert.h"
#include "coli/experts/usage_history.h"
#include "coli/model/model_config.h"
#include "coli/planner/plan_io.h"
#include "coli/runtime/moe_model.h"
#include "engine_test_support.h"

namespace coli {
namespace {

class EngineReference : public testing::TestWithParam<std::string> {
 protected:
  static fs::path container_for(const std::string& arch, WeightFormat format) {
    return converted_fixture(arch, format);
  }
};

TEST_P(EngineReference, F32MatchesTransformersLogitsAndTokens) {
  const fs::path dir = fs::path(COLI_FIXTURES_DIR) / "models" / GetParam();
  const Reference ref = load_reference(dir, "reference");
  const EngineRun run = run_model(container_for(GetParam(), WeightFormat::f32), f32_kv_options(), ref);
  ASSERT_EQ(run.prompt_logits.size(), ref.prompt.size());
  for (std::size_t i = 0; i < ref.prompt.size(); ++i) {
    const std::span<const float> expected(ref.logits.data() + i * ref.vocab, ref.vocab);
    EXPECT_LT(max_relative_error(run.prompt_logits[i], expected), 1e-4) << "prompt position " << i;
  }
  EXPECT_LT(run.worst_generated_error, 1e-4);
  EXPECT_EQ(run.tokens, ref.generated);
}

TEST_P(EngineReference, QuantisedExpertsMatchTransformersOnDequantisedWeights) {
  const fs::path dir = fs::path(COLI_FIXTURES_DIR) / "models" / GetParam();
  for (const auto& [format, name] : kQuantisedReferences) {
    SCOPED_TRACE(name);
    const Reference ref = load_reference(dir, name);
    runtime::ModelOptions options = f32_kv_options();
    options.cpu_kernel = "exact";
    const EngineRun run = run_model(container_for(GetParam(), format), options, ref);
    EXPECT_LT(run.worst_generated_error, 1e-4);
    EXPECT_EQ(run.tokens, ref.generated);
  }
}

TEST_P(EngineReference, TokensDoNotDependOnThreadsCapacityOrPins) {
  const fs::path dir = fs::path(COLI_FIXTURES_DIR) / "models" / GetParam();
  const Reference ref = load_reference(dir, "reference");
  const fs::path container = container_for(GetParam(), WeightFormat::f32);
  const int top_k = 2, experts = 8;
  struct Setting {
    int threads, cap;
    std::vector<int> pins;
    bool one_prefill_call;
    int round_tokens;
  };
  // From top_k slots to all experts; pins leaving exactly top_k evictable
  // slots (prefill rounds of one token); whole-prompt prefill in rounds.
  const std::vector<Setting> settings = {
      {1, top_k, {}, false, 64},       {2, 3, {}, false, 64},    {1, 5, {0, 3, 6}, true, 64},
      {2, experts, {1}, true, 64},     {1, top_k + 2, {4, 5}, true, 64}, {2, 6, {}, true, 64},
      {1, experts, {}, true, 5},       {2, 4, {7}, true, 3}};
  for (const Setting& s : settings) {
    SCOPED_TRACE("threads " + std::to_string(s.threads) + " cap " + std::to_string(s.cap) + " pins " +
                 std::to_string(s.pins.size()) + (s.one_prefill_call ? " one prefill call" : ""));
    runtime::ModelOptions options = f32_kv_options();
    options.threads = s.threads;
    options.cache_capacity = s.cap;
    options.pins = {s.pins};
    options.prefill_round_tokens = s.round_tokens;
    const EngineRun run = run_model(container, options, ref, s.one_prefill_call);
    EXPECT_EQ(run.tokens, ref.generated);
    if (s.one_prefill_call) {
      const std::span<const float> last(ref.logits.data() + (ref.prompt.size() - 1) * ref.vocab, ref.vocab);
      EXPECT_LT(max_relative_error(run.prompt_logits.back(), last), 1e-4);
    }
  }
}

// The SIMD kernels batch resident and missed experts differently for every
// cache setting; the logits must not notice.
TEST_P(EngineReference, SimdResultsDoNotDependOnHowExpertsAreBatched) {
  const fs::path dir = fs::path(COLI_FIXTURES_DIR) / "models" / GetParam();
  const Reference ref = load_reference(dir, "reference_q4");
  const fs::path container = container_for(GetParam(), WeightFormat::q4_g64);
  std::optional<EngineRun> first;
  for (auto [threads, cap, one_call] : {std::tuple{1, 8, false}, {2, 2, true}, {1, 3, true}, {2, 5, false}}) {
    runtime::ModelOptions options = f32_kv_options();
    options.threads = threads;
    options.cache_capacity = cap;
    EngineRun run = run_model(container, options, ref, one_call);
    if (!first) {
      first = std::move(run);
      continue;
    }
    EXPECT_EQ(run.tokens, first->tokens) << "threads " << threads << " cap " << cap;
    EXPECT_EQ(run.prompt_logits.back(), first->prompt_logits.back()) << "threads " << threads << " cap " << cap;
  }
}

// Quantised dense projections (--dense q8_row / q4_g64) with experts of the
// same width: not exact, so measured against the f32 reference with the
// bound each quantisation earns.
TEST_P(EngineReference, QuantisedDenseAndExpertsStayCloseToTheReference) {
  const fs::path dir = fs::path(COLI_FIXTURES_DIR) / "models" / GetParam();
  const Reference ref = load_reference(dir, "reference");
  const fs::path out = scratch_dir() / (GetParam() + "_quantised_dense.coli");
  // int4 everywhere on these tiny random models (one 64-wide group per row,
  // 16 levels) costs ~30% of the logits' range: the bound only catches a
  // broken layout (wrong offsets or scales give errors well above 100%).
  for (auto [experts, dense, median_bound, worst_bound] :
       {std::tuple{WeightFormat::q8_row, DenseFormat::q8_row, 0.05, 0.25},
        {WeightFormat::q4_g64, DenseFormat::q4_g64, 0.5, 1.0}})
  for (const char* kernel : {"exact", ""}) {
    SCOPED_TRACE(std::string("dense ") + (dense == DenseFormat::q8_row ? "q8_row" : "q4_g64") + " kernel " + kernel);
    fs::remove(out);
    auto report = convert::convert_model(dir, out, experts, dense);
    ASSERT_TRUE(report.ok()) << report.error().message;
    runtime::ModelOptions options = f32_kv_options();
    options.cpu_kernel = kernel;
    const EngineRun run = run_model(out, options, ref);
    // Per prompt position; a router that flips one expert on rounding noise
    // moves a position by ~10%, so the median is bounded, not the worst.
    std::vector<double> errors;
    for (std::size_t i = 0; i < ref.prompt.size(); ++i) {
      errors.push_back(max_relative_error(run.prompt_logits[i], std::span(ref.logits.data() + i * ref.vocab, ref.vocab)));
    }
    expect_median_and_worst(std::move(errors), median_bound, worst_bound, GetParam());
  }
}

// Expert reads on I/O threads (compute starts on resident experts) and
// O_DIRECT change speed only: logits bit-identical to synchronous buffered
// reads for every capacity, and the reference's tokens.
TEST_P(EngineReference, TokensDoNotDependOnIoThreadsOrDirectIo) {
  const fs::path dir = fs::path(COLI_FIXTURES_DIR) / "models" / GetParam();
  const Reference ref = load_reference(dir, "reference");
  const fs::path container = container_for(GetParam(), WeightFormat::f32);
  const int top_k = 2, experts = 8;
  std::optional<EngineRun> baseline;
  for (int cap = top_k; cap <= experts; ++cap) {
    for (auto [io_threads, direct] : {std::pair{0, false}, {0, true}, {1, true}, {4, true}, {4, false}}) {
      SCOPED_TRACE("cap " + std::to_string(cap) + " io threads " + std::to_string(io_threads) +
                   (direct ? " O_DIRECT" : " buffered"));
      runtime::ModelOptions options = f32_kv_options();
      options.cache_capacity = cap;
      options.io_threads = io_threads;
      options.direct_io = direct;
      const EngineRun run = run_model(container, options, ref, /*one_prefill_call=*/true);
      EXPECT_EQ(run.tokens, ref.generated);
      if (!baseline) baseline = run;
      EXPECT_EQ(run.prompt_logits, baseline->prompt_logits);  // exact, not close
      EXPECT_EQ(run.worst_generated_error, baseline->worst_generated_error);
    }
  }
  // The mode in use is reported: O_DIRECT only when experts stream.
  for (auto [cap, direct] : {std::pair{top_k, true}, {top_k, false}, {experts, true}}) {
    runtime::ModelOptions options = f32_kv_options();
    options.cache_capacity = cap;
    options.direct_io = direct;
    auto model = runtime::MoeModel::load(container, options);
    ASSERT_TRUE(model.ok()) << model.error().message;
    const std::string& mode = model->stats().io_mode;
    if (cap == experts) EXPECT_EQ(mode, "buffered, 4 I/O threads (all experts resident: page cache)");
    else if (!direct) EXPECT_EQ(mode, "buffered, 4 I/O threads (O_DIRECT off)");
    else EXPECT_TRUE(mode == "O_DIRECT, 4 I/O threads" || mode.find("buffered, 4 I/O threads (") == 0) << mode;
  }
}

// The RSS watchdog (field note 5): with a limit the process is always past,
// every layer gives slots back down to top_k evictable ones, says so, and the
// tokens stay exactly those of an unlimited run.
TEST_P(EngineReference, RssWatchdogShrinksTheCacheWithoutChangingTokens) {
  const fs::path dir = fs::path(COLI_FIXTURES_DIR) / "models" / GetParam();
  const Reference ref = load_reference(dir, "reference");
  const fs::path container = container_for(GetParam(), WeightFormat::f32);
  runtime::ModelOptions options = f32_kv_options();
  options.cache_capacity = 8;  // every expert resident
  const EngineRun unlimited = run_model(container, options, ref, /*one_prefill_call=*/true);
  std::vector<std::string> warnings;
  options.rss_limit_bytes = 1;
  options.on_warning = [&](const std::string& message) { warnings.push_back(message); };
  auto model = runtime::MoeModel::load(container, options);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const std::uint64_t before = model->stats().expert_cache_bytes;
  std::vector<float> logits(static_cast<std::size_t>(model->vocab_size()));
  ASSERT_TRUE(model->forward(ref.prompt, 0, logits).ok());
  EXPECT_EQ(model->stats().rss_watchdog_shrinks, 1u);
  EXPECT_EQ(model->stats().rss_watchdog_limit, 1u) << "the stats say which limit the watchdog held";
  EXPECT_EQ(model->stats().expert_cache_bytes * 4, before) << "8 slots per layer shrink to top_k = 2";
  EXPECT_GT(model->stats().rss_watchdog_released, 0u);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings[0].find("gave 6 expert-cache slot(s) per layer back"), std::string::npos) << warnings[0];
  const EngineRun limited = run_model(container, options, ref, /*one_prefill_call=*/true);
  EXPECT_EQ(limited.tokens, unlimited.tokens);
  EXPECT_EQ(limited.prompt_logits, unlimited.prompt_logits);
  // At the floor it says once that it cannot shrink further, and no more
  // (the first model ran one forward pass: it only shrank).
  const std::size_t said = std::count_if(warnings.begin(), warnings.end(),
                                         [](const std::string& w) { return w.find("cannot shrink further") != std::string::npos; });
  EXPECT_EQ(said, 1u);
}

// A plan (made from the checkpoint's config.json) and a run (from the
// container's copy) must name the same model, or usage histories and plans
// would never be recognised.
TEST_P(EngineReference, PlannerAndEngineAgreeOnTheModelIdentity) {
  const fs::path dir = fs::path(COLI_FIXTURES_DIR) / "models" / GetParam();
  std::ifstream file(dir / "config.json");
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto config = model::parse_model_config(text, "config.json");
  ASSERT_TRUE(config.ok()) << config.error().message;
  auto model = runtime::MoeModel::load(container_for(GetParam(), WeightFormat::q8_row), {});
  ASSERT_TRUE(model.ok()) << model.error().message;
  const runtime::ModelShape shape = model->shape();
  EXPECT_EQ(planner::model_identity(text, *config), experts::usage_model_identity(shape.config_json, shape.tensor_names));
}

// Issue 12: a container without one norm tensor loaded and then crashed in
// rms_norm. It is refused at load, naming the tensor.
TEST_P(EngineReference, MissingNormTensorIsRefusedAtLoad) {
  const fs::path source = container_for(GetParam(), WeightFormat::q8_row);
  auto reader = container::ContainerReader::open(source);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  const container::ContainerIndex& index = reader->index();
  const fs::path broken = scratch_dir() / (GetParam() + "_no_norm.coli");
  auto writer = container::ContainerWriter::create(broken);
  ASSERT_TRUE(writer.ok()) << writer.error().message;
  const std::string dropped = "model.layers.1.post_attention_layernorm.weight";
  for (const container::TensorEntry& t : index.tensors) {
    if (t.name == dropped) continue;
    std::vector<std::byte> data(t.bytes);
    ASSERT_TRUE(reader->read(t.offset, data).ok());
    ASSERT_TRUE(writer->add_tensor(t.name, t.dtype, t.shape, data).ok());
  }
  const container::ExpertLayout& e = index.experts;
  ASSERT_TRUE(writer->begin_experts(e.format, e.layers, e.experts, e.model_layers, e.parts).ok());
  std::vector<std::byte> record(e.record_bytes);
  for (std::uint32_t l = 0; l < e.layers; ++l) {
    for (std::uint32_t x = 0; x < e.experts; ++x) {
      ASSERT_TRUE(reader->read(e.record_offset(l, x), record).ok());
      ASSERT_TRUE(writer->add_expert(record).ok());
    }
  }
  ASSERT_TRUE(writer->finish(index.architecture, index.config_json, index.source).ok());
  auto model = runtime::MoeModel::load(broken, {});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find(dropped), std::string::npos) << model.error().message;
}

// Issue 12: convert checked no free space and failed (or filled the disk)
// midway. The size it checks against bounds the file it then writes: the
// data exactly, the index within a small margin.
TEST_P(EngineReference, PlannedContainerBytesBoundTheWrittenFile) {
  const fs::path dir = fs::path(COLI_FIXTURES_DIR) / "models" / GetParam();
  const fs::path out = scratch_dir() / (GetParam() + "_planned.coli");
  for (auto [experts, dense] : {std::tuple{WeightFormat::f32, DenseFormat::source},
                                {WeightFormat::q8_row, DenseFormat::q8_row}, {WeightFormat::q4_g64, DenseFormat::q4_g64}}) {
    SCOPED_TRACE(std::string(name_of(experts)));
    auto planned = convert::planned_container_bytes(dir, experts, dense);
    ASSERT_TRUE(planned.ok()) << planned.error().message;
    fs::remove(out);
    auto report = convert::convert_model(dir, out, experts, dense);
    ASSERT_TRUE(report.ok()) << report.error().message;
    EXPECT_GE(*planned, report->file_bytes);
    EXPECT_LT(*planned - report->file_bytes, 256u << 10) << "planned " << *planned << ", written " << report->file_bytes;
  }
}

// KV held in f16 or bf16 against transformers' f32 logits, same greedy tokens.
// The tolerance comes from the precision: every stored K and V value carries
// a relative rounding error of at most u (f16 2^-11, bf16 2^-8, round to
// nearest). An attention output is a convex combination of V rows, so V
// rounding moves it by at most u; K rounding moves a score by up to
// u * sum|q_i k_i| / sqrt(head_dim), which the softmax passes on, so a model
// amplifies u by a factor set by its score magnitudes and its 2 layers:
// measured 1-4 for qwen3_moe, olmoe and mixtral and 34-44 for qwen2_moe
// (its q/k biases make the scores large), the same factor for f16 and bf16
// as error proportional to u predicts. The bound is 2x the measured factor:
// a store that truncated instead of rounding, or a kernel reading a
// neighbouring row, would go past it.
TEST_P(EngineReference, ReducedPrecisionKvStaysWithinItsRounding) {
  const fs::path dir = fs::path(COLI_FIXTURES_DIR) / "models" / GetParam();
  const Reference ref = load_reference(dir, "reference");
  const double amplification = GetParam() == "qwen2_moe" ? 96 : 8;
  for (auto [type, unit_roundoff] : {std::pair{KvType::f16, 0x1p-11}, std::pair{KvType::bf16, 0x1p-8}}) {
    SCOPED_TRACE(std::string(kv_type_name(type)));
    runtime::ModelOptions options = f32_kv_options();
    options.kv_type = type;
    const EngineRun run = run_model(container_for(GetParam(), WeightFormat::f32), options, ref);
    double worst = run.worst_generated_error;
    for (std::size_t i = 0; i < ref.prompt.size(); ++i) {
      worst = std::max(worst, max_relative_error(run.prompt_logits[i], std::span(ref.logits.data() + i * ref.vocab, ref.vocab)));
    }
    EXPECT_LT(worst, amplification * unit_roundoff) << "= " << worst / unit_roundoff << " u";
    EXPECT_EQ(run.tokens, ref.generated);
  }
}

// The olmoe fixture's int4 reference and its container, which several tests below share.
std::pair<Reference, fs::path> olmoe_q4() {
  return {load_reference(fs::path(COLI_FIXTURES_DIR) / "models" / "olmoe", "reference_q4"),
          converted_fixture("olmoe", WeightFormat::q4_g64)};
}

// A plan with a prefill thread set of its own: the prompt (one pass of
// several tokens) runs on it, single tokens on the decode set, and the
// tokens and logits are those of one set for everything, bit for bit.
TEST(EngineThreadSets, PrefillRunsOnItsOwnSetWithTheSameTokens) {
  const auto [ref, container] = olmoe_q4();
  runtime::ModelOptions one_set;
  one_set.threads = 1;
  const EngineRun decode_set_only = run_model(container, one_set, ref, true);
  EXPECT_EQ(decode_set_only.stats.prefill_thread_set, "1 thread, not pinned (decode set)");
  runtime::ModelOptions two_sets = one_set;
  two_sets.prefill_threads = 2;
  const EngineRun both = run_model(container, two_sets, ref, true);
  EXPECT_EQ(both.stats.prefill_thread_set, "2 threads, not pinned (prefill set)");
  EXPECT_EQ(both.stats.decode_thread_set, "1 thread, not pinned (decode set)");
  EXPECT_EQ(both.tokens, decode_set_only.tokens);
  EXPECT_EQ(both.prompt_logits.back(), decode_set_only.prompt_logits.back());
}

// Speculative prefetch reads the next layer's predicted experts into its
// cache early: the tokens and logits stay those of the run without it, its
// own lookups are not counted as hits or misses, and it did predict and read.
TEST(EngineSpeculativePrefetch, ReadsPredictedExpertsWithoutChangingTokens) {
  const auto [ref, container] = olmoe_q4();
  runtime::ModelOptions streaming;
  streaming.cache_capacity = 3;
  streaming.prefill_round_tokens = 1;  // a prompt of several rounds: no prefetch there
  const EngineRun plain = run_model(container, streaming, ref, true);
  runtime::ModelOptions speculative = streaming;
  speculative.speculative_prefetch = true;
  const EngineRun prefetched = run_model(container, speculative, ref, true);
  EXPECT_EQ(prefetched.tokens, plain.tokens);
  EXPECT_EQ(prefetched.prompt_logits.back(), plain.prompt_logits.back());
  EXPECT_EQ(prefetched.stats.expert_hits + prefetched.stats.expert_misses,
            plain.stats.expert_hits + plain.stats.expert_misses);
  EXPECT_GT(prefetched.stats.predicted_experts, 0u);
  EXPECT_LE(prefetched.stats.predicted_correct, prefetched.stats.predicted_experts);
  EXPECT_GT(prefetched.stats.prefetch_reads, 0u);
  EXPECT_EQ(plain.stats.predicted_experts, 0u);
}

// The store decides whether experts stream, and prefetch follows it: a
// capacity of 0 (the store's "every expert resident") or one at or above the
// expert count predicts and reads nothing ahead, with the same tokens. (It
// was once decided twice, and capacity 0 ran the speculative router for a
// cache that never misses.)
TEST(EngineSpeculativePrefetch, OffWhenEveryExpertIsResident) {
  const auto [ref, container] = olmoe_q4();
  runtime::ModelOptions plain;
  plain.preload_experts = false;
  const EngineRun without = run_model(container, plain, ref, true);
  for (int capacity : {0, runtime::kAllExperts}) {
    SCOPED_TRACE("capacity " + std::to_string(capacity));
    runtime::ModelOptions resident = plain;
    resident.cache_capacity = capacity;
    resident.speculative_prefetch = true;
    const EngineRun run = run_model(container, resident, ref, true);
    EXPECT_EQ(run.stats.predicted_experts, 0u);
    EXPECT_EQ(run.stats.prefetch_reads, 0u);
    EXPECT_EQ(run.tokens, without.tokens);
    EXPECT_EQ(run.prompt_logits.back(), without.prompt_logits.back());
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, EngineReference,
                         testing::Values("qwen3_moe", "olmoe", "mixtral", "qwen2_moe"));

}  // namespace
// With every expert resident the store reads them all at load: the run then
// counts no hit-or-miss reads of its own (every lookup is a hit), has read
// every record once, and gives the tokens and logits of a lazily filled cache.
TEST(EnginePreload, EveryResidentExpertIsReadAtLoadWithTheSameTokens) {
  const auto [ref, container] = olmoe_q4();
  runtime::ModelOptions lazy;
  lazy.preload_experts = false;
  const EngineRun lazily = run_model(container, lazy, ref, true);
  EXPECT_GT(lazily.stats.expert_misses, 0u);
  runtime::ModelOptions preload;
  const EngineRun preloaded = run_model(container, preload, ref, true);
  EXPECT_EQ(preloaded.stats.expert_misses, 0u);
  EXPECT_GT(preloaded.stats.expert_hits, 0u);
  EXPECT_GE(preloaded.stats.expert_bytes_read, lazily.stats.expert_bytes_read);
  EXPECT_EQ(preloaded.tokens, lazily.tokens);
  EXPECT_EQ(preloaded.prompt_logits.back(), lazily.prompt_logits.back());
  // The I/O threads time every read they make (plan vs actual for a read's
  // price): a lazy cache's are its misses, the preload's every record once.
  EXPECT_GT(lazily.stats.expert_read_seconds, 0.0);
  EXPECT_EQ(lazily.stats.expert_reads_timed, lazily.stats.expert_misses);
  EXPECT_GT(preloaded.stats.expert_read_seconds, 0.0);
  EXPECT_GE(preloaded.stats.expert_reads_timed, lazily.stats.expert_misses);  // every record, where the lazy cache read those used
  // The preload queues every layer's reads at once: no read round the planner prices.
  EXPECT_TRUE(preloaded.stats.expert_read_rounds.empty());
  EXPECT_FALSE(lazily.stats.expert_read_rounds.empty());
}

// Every round that read is timed from its submission to its last read
// landing (and, where the compute thread was still waiting then, its
// wake-up after it), filed by its read count: the rounds hold exactly the misses,
// and a round of m reads takes at least as long as its reads did one by
// one shared among m threads at most (the pool's 4 threads).
TEST(EngineReadRounds, EveryRoundThatReadIsFiledByItsReadCount) {
  const auto [ref, container] = olmoe_q4();
  runtime::ModelOptions streaming;
  streaming.cache_capacity = 3;
  const EngineRun run = run_model(container, streaming, ref, true);
  const experts::ReadRounds& batches = run.stats.expert_read_rounds;
  std::uint64_t reads = 0, rounds = 0;
  double seconds = 0;
  for (std::size_t m = 0; m < batches.rounds.size(); ++m) {
    reads += m * batches.rounds[m], rounds += batches.rounds[m], seconds += batches.seconds[m];
    EXPECT_EQ(batches.rounds[m] == 0, batches.seconds[m] == 0.0) << m << " reads";
  }
  EXPECT_EQ(batches.rounds[0], 0u);  // a round without reads is not a read round
  EXPECT_GT(batches.record_bytes, 0u);
  EXPECT_GT(batches.io_threads, 0);
  EXPECT_EQ(reads, run.stats.expert_misses);
  EXPECT_GT(rounds, 0u);
  EXPECT_GE(seconds, run.stats.expert_read_seconds / 4 * 0.999);
  // Rounds whose compute thread was still waiting at their last landing: some of them, each woken once.
  EXPECT_LE(batches.waited, rounds);
  EXPECT_GE(batches.wake_seconds, 0.0);
  // Every generated token after the first is filed once, by whether its rounds waited; a waiting one waited for one
  // round or more.
  EXPECT_EQ(batches.calm_tokens + batches.waiting_tokens, run.tokens.size() - 1);  // all but the first after the prompt
  EXPECT_LE(batches.waiting_tokens, batches.waiting_rounds);
  EXPECT_LE(batches.waiting_rounds, batches.waited);
  EXPECT_GT(batches.calm_seconds + batches.waiting_seconds, 0.0);
  const experts::ReadRounds none = experts::ReadRounds::between(batches, batches);
  EXPECT_EQ(std::accumulate(none.rounds.begin(), none.rounds.end(), std::uint64_t{0}), 0u);
  EXPECT_EQ(none.waited, 0u);
}

// The reads a set of rounds made: m for each round of m reads.
std::uint64_t reads_in(const std::vector<std::uint64_t>& rounds) {
  std::uint64_t reads = 0;
  for (std::size_t m = 0; m < rounds.size(); ++m) reads += m * rounds[m];
  return reads;
}

// A generated token's rounds are filed apart too (the planner prices decode
// by them): exactly the misses of the single-token passes, none of a
// prompt's, and counted among all rounds as well.
TEST(EngineReadRounds, AGeneratedTokensRoundsAreFiledApart) {
  const auto [ref, container] = olmoe_q4();
  runtime::ModelOptions streaming;
  streaming.cache_capacity = 3;
  auto model = runtime::MoeModel::load(container, streaming);
  ASSERT_TRUE(model.ok()) << model.error().message;
  std::vector<float> logits(static_cast<std::size_t>(model->vocab_size()));
  ASSERT_TRUE(model->forward(ref.prompt, 0, logits).ok());
  const runtime::ModelStats prompt = model->stats();
  EXPECT_GT(prompt.expert_misses, 0u);
  EXPECT_EQ(reads_in(prompt.expert_read_rounds.decode_rounds), 0u) << "a prompt's rounds are not a generated token's";
  int position = static_cast<int>(ref.prompt.size());
  for (int step = 0; step < 6; ++step) {
    const std::int32_t next = argmax(logits);
    ASSERT_TRUE(model->forward(std::span(&next, 1), position++, logits).ok());
  }
  const runtime::ModelStats after = model->stats();
  const experts::ReadRounds& rounds = after.expert_read_rounds;
  EXPECT_GT(after.expert_misses, prompt.expert_misses) << "cap 3 of 8: the generated tokens miss too";
  EXPECT_EQ(reads_in(rounds.decode_rounds), after.expert_misses - prompt.expert_misses);
  EXPECT_EQ(reads_in(rounds.phase(false).rounds), prompt.expert_misses);
  EXPECT_EQ(reads_in(rounds.rounds), after.expert_misses);
  for (std::size_t m = 0; m < rounds.rounds.size(); ++m) EXPECT_LE(rounds.decode_seconds[m], rounds.seconds[m]) << m;
}

}  // namespace coli
