// What the engine tests share: the transformers references of
// tests/fixtures/models, a scratch directory for converted containers, and a
// run of the engine over a reference's prompt and greedy continuation.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "coli/convert/convert.h"
#include "coli/runtime/moe_model.h"

namespace coli {

namespace fs = std::filesystem;

// Containers converted for these tests live in one directory per process,
// removed when the test program ends.
inline fs::path scratch_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("coli_engine_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

class RemoveScratch : public testing::Environment {
 public:
  void TearDown() override { fs::remove_all(scratch_dir()); }
};
inline testing::Environment* const kRemoveScratch = testing::AddGlobalTestEnvironment(new RemoveScratch);

struct Reference {
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> generated;
  std::vector<float> logits;  // prompt rows, then generated rows
  int vocab = 0;
};

inline Reference load_reference(const fs::path& dir, const std::string& name) {
  std::ifstream json_file(dir / (name + ".json"));
  const auto json = nlohmann::json::parse(json_file);
  Reference ref;
  ref.prompt = json.at("prompt_ids").get<std::vector<std::int32_t>>();
  ref.generated = json.at("generated_ids").get<std::vector<std::int32_t>>();
  ref.vocab = json.at("vocab_size").get<int>();
  std::ifstream raw(dir / json.at("logits_file").get<std::string>(), std::ios::binary);
  ref.logits.resize((ref.prompt.size() + ref.generated.size()) * static_cast<std::size_t>(ref.vocab));
  raw.read(reinterpret_cast<char*>(ref.logits.data()), static_cast<std::streamsize>(ref.logits.size() * 4));
  return ref;
}

// Largest |a - b| relative to the largest |b| of the row.
inline double max_relative_error(std::span<const float> actual, std::span<const float> expected) {
  double peak = 0, worst = 0;
  for (float v : expected) peak = std::max(peak, static_cast<double>(std::fabs(v)));
  for (std::size_t i = 0; i < actual.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(actual[i]) - expected[i]));
  return worst / peak;
}

// Quantised runs, where a router that flips one expert on rounding moves
// one position by ~10%: the errors of every prompt position (or prefix),
// printed with `label`, the median below `median_bound` and the worst below
// `worst_bound` (only a broken layout reaches it).
inline void expect_median_and_worst(std::vector<double> errors, double median_bound, double worst_bound,
                                    const std::string& label) {
  ASSERT_FALSE(errors.empty()) << label;
  std::sort(errors.begin(), errors.end());
  std::printf("[ %s ] median %.5f worst %.5f\n", label.c_str(), errors[errors.size() / 2], errors.back());
  EXPECT_LT(errors[errors.size() / 2], median_bound) << label << ": worst " << errors.back();
  EXPECT_LT(errors.back(), worst_bound) << label;
}

// The fixtures' quantised references: transformers on each format's de-quantised weights.
inline constexpr std::pair<WeightFormat, const char*> kQuantisedReferences[] = {{WeightFormat::q8_row, "reference_q8"},
                                                                              {WeightFormat::q4_g64, "reference_q4"}};

inline int argmax(std::span<const float> logits) {
  return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

struct EngineRun {
  std::vector<std::int32_t> tokens;
  std::vector<std::vector<float>> prompt_logits;  // after each prompt token
  double worst_generated_error = 0;
  runtime::ModelStats stats;  // after the last token
};

// Options with the KV cache in f32: what the 1e-4 comparisons with
// transformers assume (the engine's default is f16; see
// EngineReference.ReducedPrecisionKvStaysWithinItsRounding for it).
inline runtime::ModelOptions f32_kv_options() {
  runtime::ModelOptions options;
  options.kv_type = KvType::f32;
  return options;
}

// Prompt token by token (logits after each) or in one prefill call (rounds),
// then greedy decode of as many tokens as the reference has.
inline EngineRun run_model(const fs::path& container, const runtime::ModelOptions& options, const Reference& ref,
                    bool one_prefill_call = false) {
  auto model = runtime::MoeModel::load(container, options);
  EXPECT_TRUE(model.ok()) << (model.ok() ? "" : model.error().message);
  EngineRun run;
  if (!model.ok()) return run;
  std::vector<float> logits(static_cast<std::size_t>(model->vocab_size()));
  if (one_prefill_call) {
    const Status prefill = model->forward(ref.prompt, 0, logits);
    EXPECT_TRUE(prefill.ok()) << (prefill.ok() ? "" : prefill.error().message);
    run.prompt_logits.push_back(logits);
  }
  for (std::size_t i = 0; !one_prefill_call && i < ref.prompt.size(); ++i) {
    EXPECT_TRUE(model->forward(std::span(&ref.prompt[i], 1), static_cast<int>(i), logits).ok());
    run.prompt_logits.push_back(logits);
  }
  int position = static_cast<int>(ref.prompt.size());
  for (std::size_t step = 0; step < ref.generated.size(); ++step) {
    const std::span<const float> expected(ref.logits.data() + (ref.prompt.size() + step) * ref.vocab, ref.vocab);
    run.worst_generated_error = std::max(run.worst_generated_error, max_relative_error(logits, expected));
    const std::int32_t next = argmax(logits);
    run.tokens.push_back(next);
    EXPECT_TRUE(model->forward(std::span(&next, 1), position++, logits).ok());
  }
  run.stats = model->stats();
  return run;
}

// A fixture model converted with `format`, once per test program.
inline fs::path converted_fixture(const std::string& arch, WeightFormat format) {
  const fs::path out = scratch_dir() / (arch + "_" + std::string(name_of(format)) + ".coli");
  if (!fs::exists(out)) {
    auto report = convert::convert_model(fs::path(COLI_FIXTURES_DIR) / "models" / arch, out, format);
    EXPECT_TRUE(report.ok()) << (report.ok() ? "" : report.error().message);
  }
  return out;
}

}  // namespace coli
