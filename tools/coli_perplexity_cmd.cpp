#include "coli_perplexity_cmd.h"

#include <malloc.h>

#include <chrono>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "coli/base/files.h"
#include "cpu/thread_placement.h"
#include "coli/container/container.h"
#include "coli/experts/usage_history.h"
#include "coli/planner/quality.h"
#include "coli/cli/exit_codes.h"
#include "perplexity.h"

namespace coli::tools {

namespace {

// One model walking a window: the first half as one pass, then one token at
// a time, each pass leaving the logits that predict the next token (the
// engine's batch pass returns the last token's logits only).
class WindowWalker {
 public:
  explicit WindowWalker(runtime::MoeModel& model) : model_(model), logits_(static_cast<std::size_t>(model.vocab_size())) {}
  Status start(std::span<const std::int32_t> context) { return model_.forward(context, 0, logits_); }
  Status step(std::int32_t token, int position) { return model_.forward(std::span(&token, 1), position, logits_); }
  std::span<const float> logits() const { return logits_; }

 private:
  runtime::MoeModel& model_;
  std::vector<float> logits_;
};

Status score_window(std::span<const std::int32_t> window, const PerplexityWindows& w, WindowWalker& model,
                    WindowWalker* base, PerplexityTally& tally) {
  const auto context = window.first(static_cast<std::size_t>(w.first_scored));
  if (Status s = model.start(context); !s) return s;
  if (base) {
    if (Status s = base->start(context); !s) return s;
  }
  for (int position = w.first_scored; position < w.ctx; ++position) {
    const std::int32_t target = window[static_cast<std::size_t>(position)];
    const double nll = negative_log_likelihood(model.logits(), target);
    if (base) {
      const TokenDivergence divergence = token_divergence(base->logits(), model.logits());
      tally.add(nll, &divergence, negative_log_likelihood(base->logits(), target));
    } else {
      tally.add(nll);
    }
    if (position + 1 == w.ctx) break;
    if (Status s = model.step(target, position); !s) return s;
    if (base) {
      if (Status s = base->step(target, position); !s) return s;
    }
  }
  return Ok{};
}

// The container's formats: which representation a measurement is of.
Result<std::pair<WeightFormat, DenseFormat>> formats_of(const std::string& path) {
  auto reader = container::ContainerReader::open(path);
  if (!reader) return reader.error();
  return std::pair{reader->index().experts.format, reader->index().dense_format()};
}

// --record FILE: this representation's figures into the checkpoint's quality
// file (created, or updated when it is of the same checkpoint), atomically.
Status record_quality(const std::string& file, const std::string& model, const std::string& base,
                      const runtime::ModelShape& shape, const nlohmann::json& result, const std::string& text) {
  auto measured = formats_of(model);
  auto reference = formats_of(base);
  if (!measured || !reference) return (!measured ? measured : reference).error();
  if (reference->first != WeightFormat::f32 || reference->second != DenseFormat::source) {
    return make_error("--record needs the f32 model as --base (coli convert --experts f32 --dense source): " + base +
                      " holds " + std::string(name_of(reference->first)) + " experts");
  }
  planner::QualityTable table{experts::usage_model_identity(shape.config_json, shape.tensor_names), {}};
  if (std::filesystem::exists(file)) {
    auto text_of_file = read_text_file(file);
    if (!text_of_file) return text_of_file.error();
    auto existing = planner::parse_quality_json(*text_of_file, file);
    if (!existing) return existing.error();
    if (existing->model_identity != table.model_identity) {
      return make_error(file + " holds the quality of another checkpoint: give --record another file");
    }
    table = std::move(*existing);
  }
  table.record({measured->first, measured->second, result["kld"]["mean"].get<double>(), result["kld"]["p99"].get<double>(),
                result["top1_agreement"].get<double>(), result["perplexity"].get<double>(),
                result["base_perplexity"].get<double>(), result["tokens"].get<std::uint64_t>(),
                std::filesystem::path(text).filename().string()});
  return write_file_atomically(file, planner::quality_to_json(table));
}

int fail(const std::string& message, int code) {
  std::fprintf(stderr, "coli perplexity: %s\n", message.c_str());
  return code;
}

}  // namespace

PerplexityCommand::PerplexityCommand(CLI::App& app) {
  command_ = app.add_subcommand("perplexity", "Perplexity of a text, and KL divergence against a base model "
                                              "(llama-perplexity --kl-divergence's figures)");
  engine_.context_needed = window_;  // the window is the context: no --ctx engine knob
  add_engine_options(*command_, engine_);
  command_->add_option("--ctx", window_, "Tokens per window (and the KV cache's positions)")
      ->check(CLI::Range(4, 1 << 24))
      ->capture_default_str();
  command_->add_option("--text", text_, "The text (UTF-8); scored in windows of --ctx tokens, the second half of "
                                        "each from the first")
      ->required()
      ->check(CLI::ExistingFile);
  command_->add_option("--base", base_, "A base container of the same checkpoint (e.g. converted --experts f32): "
                                        "adds the KL divergence and top-1 agreement of every scored token")
      ->check(CLI::ExistingFile);
  command_->add_option("--chunks", chunks_, "Score the first N windows only (default: all), as llama-perplexity's --chunks")
      ->check(CLI::Range(1, 1 << 30));
  command_->add_option("--record", record_, "With --base: add this representation's figures to a quality file (JSON) "
                                            "that coli-plan --quality reads");
}

int PerplexityCommand::run() {
  if (!record_.empty() && base_.empty()) return fail("--record needs --base (the f32 model)", cli::kExitUsage);
  engine_.context_needed = window_;
  finish_engine_args(*command_, engine_, "coli perplexity");
  auto text = read_text_file(text_);
  if (!text) return fail("--text " + text_ + ": " + text.error().message, cli::kExitError);
  auto tokenizer = load_tokenizer(engine_.model, engine_.tokenizer);
  if (!tokenizer) return fail(tokenizer.error().message, cli::kExitError);
  malloc_trim(0);
  const std::vector<std::int32_t> tokens = tokenizer->encode(*text);
  int exit_code = cli::kExitError;
  auto model = load_engine(engine_, {0, true, nullptr, "coli perplexity"}, "coli perplexity", &exit_code);
  if (!model) return fail(model.error().message, exit_code);
  const int ctx = model->model->max_context();
  PerplexityWindows w = perplexity_windows(tokens.size(), ctx);
  if (chunks_ >= 0) w.count = std::min(w.count, chunks_);
  if (w.count == 0) {
    return fail("--text " + text_ + " is " + std::to_string(tokens.size()) + " tokens, less than one window of " +
                std::to_string(ctx) + " (--ctx): give a longer text or a smaller --ctx", cli::kExitUsage);
  }
  std::optional<LoadedEngine> base;
  if (!base_.empty()) {
    // The first model pinned the OpenMP team, the calling thread included: give
    // the base's plan this process's CPUs again (both models run on that one team).
    if (Status s = kernels::cpu::release_openmp_team(); !s) return fail(s.error().message, cli::kExitError);
    EngineArgs base_args = engine_;
    base_args.model = base_;
    base_args.plan.clear();  // a plan names its model; the base is planned (or sized) on its own
    auto loaded = load_engine(base_args, {0, true, nullptr, "coli perplexity"}, "coli perplexity", &exit_code);
    if (!loaded) return fail("--base " + base_ + ": " + loaded.error().message, exit_code);
    if (loaded->model->vocab_size() != model->model->vocab_size() || loaded->model->max_context() < ctx) {
      return fail("--base " + base_ + " is not the same checkpoint's (vocabulary " + std::to_string(loaded->model->vocab_size()) +
                  " against " + std::to_string(model->model->vocab_size()) + ")", cli::kExitUsage);
    }
    base = std::move(*loaded);
  }
  std::fprintf(stderr, "coli perplexity: %zu tokens, %d windows of %d, scoring %d tokens of each%s\n", tokens.size(),
               w.count, ctx, w.scored_per_window(), base ? ", against the base" : "");
  WindowWalker walker(*model->model);
  std::optional<WindowWalker> base_walker;
  if (base) base_walker.emplace(*base->model);
  PerplexityTally tally;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < w.count; ++i) {
    const auto window = std::span(tokens).subspan(static_cast<std::size_t>(i) * static_cast<std::size_t>(ctx), static_cast<std::size_t>(ctx));
    if (Status s = score_window(window, w, walker, base_walker ? &*base_walker : nullptr, tally); !s) {
      return fail(s.error().message, cli::kExitError);
    }
    std::fprintf(stderr, "[%d/%d] perplexity %.4f (%.1f s)\n", i + 1, w.count, tally.perplexity(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  nlohmann::json result = tally.summary();
  result["model"] = engine_.model;
  result["text"] = text_;
  result["ctx"] = ctx;
  result["windows"] = w.count;
  if (base) result["base"] = base_;
  std::printf("%s\n", result.dump(1).c_str());
  if (!record_.empty()) {
    if (Status s = record_quality(record_, engine_.model, base_, model->model->shape(), result, text_); !s) {
      return fail("--record: " + s.error().message, cli::kExitError);
    }
    std::fprintf(stderr, "coli perplexity: recorded in %s\n", record_.c_str());
  }
  return cli::kExitOk;
}

}  // namespace coli::tools
