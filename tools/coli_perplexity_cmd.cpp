#include "coli_perplexity_cmd.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include "coli/base/clock.h"
#include "coli/base/files.h"
#include "coli/cli/exit_codes.h"
#include "coli/experts/usage_history.h"
#include "coli/planner/quality.h"
#include "cpu/thread_placement.h"
#include "perplexity.h"
#include "saved_logits.h"

namespace coli::tools {

namespace {

// Where a window's logits come from: start() gives those predicting the first
// scored token, each step() those predicting the next.
class LogitsSource {
 public:
  virtual ~LogitsSource() = default;
  virtual Status start(std::span<const std::int32_t> context) = 0;
  virtual Status step(std::int32_t token, int position) = 0;
  virtual std::span<const float> logits() const = 0;
};

// A model walking a window: the first half as one pass, then one token at a
// time (the engine's batch pass returns the last token's logits only).
class WindowWalker final : public LogitsSource {
 public:
  explicit WindowWalker(runtime::MoeModel& model) : model_(model), logits_(static_cast<std::size_t>(model.vocab_size())) {}
  Status start(std::span<const std::int32_t> context) override { return model_.forward(context, 0, logits_); }
  Status step(std::int32_t token, int position) override { return model_.forward(std::span(&token, 1), position, logits_); }
  std::span<const float> logits() const override { return logits_; }

 private:
  runtime::MoeModel& model_;
  std::vector<float> logits_;
};

// A base's logits saved by an earlier --save-logits run, row after row.
class SavedRows final : public LogitsSource {
 public:
  explicit SavedRows(SavedLogitsReader reader)
      : reader_(std::move(reader)), row_(static_cast<std::size_t>(reader_.header().vocab)) {}
  Status start(std::span<const std::int32_t>) override { return reader_.next(row_); }
  Status step(std::int32_t, int) override { return reader_.next(row_); }
  std::span<const float> logits() const override { return row_; }

 private:
  SavedLogitsReader reader_;
  std::vector<float> row_;
};

Status score_window(std::span<const std::int32_t> window, const PerplexityWindows& w, LogitsSource& model,
                    LogitsSource* base, SavedLogitsWriter* saved, PerplexityTally& tally) {
  const auto context = window.first(static_cast<std::size_t>(w.first_scored));
  if (Status s = model.start(context); !s) return s;
  if (base) {
    if (Status s = base->start(context); !s) return s;
  }
  for (int position = w.first_scored; position < w.ctx; ++position) {
    const std::int32_t target = window[static_cast<std::size_t>(position)];
    const double nll = negative_log_likelihood(model.logits(), target);
    if (saved) {
      if (Status s = saved->append(model.logits()); !s) return s;
    }
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

using Formats = std::pair<WeightFormat, DenseFormat>;

// A loaded model's formats: which representation a measurement is of.
Formats formats_of(const runtime::ModelShape& shape) { return {shape.expert_format, shape.dense_format}; }

// --record FILE: this representation's figures into the checkpoint's quality
// file (created, or updated when it is of the same checkpoint), atomically.
Status record_quality(const std::string& file, const Formats& measured, const Formats& base,
                      const runtime::ModelShape& shape, const nlohmann::json& result, const std::string& text) {
  if (base.first != WeightFormat::f32 || base.second != DenseFormat::source) {
    return make_error("--record needs the f32 model's logits as --base (coli convert --experts f32 --dense source); the "
                      "base holds " + std::string(name_of(base.first)) + " experts");
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
  table.record({measured.first, measured.second, result["kld"]["mean"].get<double>(), result["kld"]["p99"].get<double>(),
                result["top1_agreement"].get<double>(), result["perplexity"].get<double>(),
                result["base_perplexity"].get<double>(), result["tokens"].get<std::uint64_t>(),
                std::filesystem::path(text).filename().string()});
  return write_file_atomically(file, planner::quality_to_json(table));
}

int fail(const std::string& message, int code) {
  std::fprintf(stderr, "coli perplexity: %s\n", message.c_str());
  return code;
}

// A saved base must be of these very tokens and windows, from a model of this vocabulary.
Status check_saved(const SavedLogitsHeader& h, const std::string& path, int vocab, const PerplexityWindows& w,
                   const std::string& hash) {
  if (h.vocab != vocab) return make_error(path + " holds logits of a vocabulary of " + std::to_string(h.vocab) + ", this model's is " + std::to_string(vocab));
  if (h.ctx != w.ctx || h.first_scored != w.first_scored) {
    return make_error(path + " was saved with --ctx " + std::to_string(h.ctx) + ": give the same --ctx");
  }
  if (h.tokens_hash != hash) return make_error(path + " was saved for another text (or tokenizer): give the same --text");
  if (h.windows < w.count) {
    return make_error(path + " holds " + std::to_string(h.windows) + " windows, fewer than the " + std::to_string(w.count) +
                      " asked: --chunks " + std::to_string(h.windows));
  }
  return Ok{};
}

// The base: none, logits saved by --save-logits, or a container loaded beside.
struct Base {
  std::unique_ptr<LoadedEngine> engine;  // a container's model (the source refers to it: declared first, dies last)
  std::unique_ptr<LogitsSource> source;  // null without --base
  Formats formats{WeightFormat::f32, DenseFormat::source};
};

Result<Base> open_base(const std::string& path, const EngineArgs& engine_args, int vocab, const PerplexityWindows& w,
                       const std::string& hash, int* exit_code) {
  Base base;
  if (path.empty()) return base;
  if (is_saved_logits(path)) {
    auto reader = SavedLogitsReader::open(path);
    if (!reader) return reader.error();
    if (Status s = check_saved(reader->header(), path, vocab, w, hash); !s) {
      *exit_code = cli::kExitUsage;
      return s.error();
    }
    auto experts = parse_weight_format(reader->header().experts, "the saved experts");
    auto dense = parse_dense_format(reader->header().dense, "the saved dense");
    if (experts && dense) base.formats = {*experts, *dense};
    base.source = std::make_unique<SavedRows>(std::move(*reader));
    return base;
  }
  // The first model pinned the OpenMP team, the calling thread included: give
  // the base's plan this process's CPUs again (both models run on that one team).
  if (Status s = kernels::cpu::release_openmp_team(); !s) return s.error();
  EngineArgs base_args = engine_args;
  base_args.model = path;
  base_args.plan.clear();  // a plan names its model; the base is planned (or sized) on its own
  auto loaded = load_engine(base_args, {0, true, nullptr, "coli perplexity"}, "coli perplexity", exit_code);
  if (!loaded) return loaded.error();
  if (loaded->model->vocab_size() != vocab || loaded->model->max_context() < w.ctx) {
    *exit_code = cli::kExitUsage;
    return make_error("is not the same checkpoint's (vocabulary " + std::to_string(loaded->model->vocab_size()) +
                      " against " + std::to_string(vocab) + ")");
  }
  base.formats = formats_of(loaded->model->shape());
  base.engine = std::make_unique<LoadedEngine>(std::move(*loaded));
  base.source = std::make_unique<WindowWalker>(*base.engine->model);
  return base;
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
  command_->add_option("--base", base_, "The base: a container of the same checkpoint (e.g. converted --experts f32), "
                                        "run beside, or its logits saved by --save-logits; adds the KL divergence and "
                                        "top-1 agreement of every scored token")
      ->check(CLI::ExistingFile);
  command_->add_option("--save-logits", save_logits_, "Save this model's logits of every scored token to FILE (vocab x 4 "
                                                      "bytes a token), a --base for later runs");
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
  auto loaded = load_tokenizer(engine_.model, engine_.tokenizer);
  if (!loaded) return fail(loaded.error().message, cli::kExitError);
  malloc_trim(0);
  const std::vector<std::int32_t> tokens = loaded->tokenizer.encode(*text);
  const std::string hash = tokens_hash(tokens);
  int exit_code = cli::kExitError;
  auto model = load_engine(engine_, {0, true, nullptr, "coli perplexity"}, "coli perplexity", &exit_code);
  if (!model) return fail(model.error().message, exit_code);
  const int ctx = model->model->max_context(), vocab = model->model->vocab_size();
  const runtime::ModelShape shape = model->model->shape();
  const Formats measured = formats_of(shape);
  PerplexityWindows w = perplexity_windows(tokens.size(), ctx);
  if (chunks_ >= 0) w.count = std::min(w.count, chunks_);
  if (w.count == 0) {
    return fail("--text " + text_ + " is " + std::to_string(tokens.size()) + " tokens, less than one window of " +
                std::to_string(ctx) + " (--ctx): give a longer text or a smaller --ctx", cli::kExitUsage);
  }
  int base_exit = cli::kExitError;
  auto base = open_base(base_, engine_, vocab, w, hash, &base_exit);
  if (!base) return fail("--base " + base_ + ": " + base.error().message, base_exit);
  std::optional<SavedLogitsWriter> saved;
  if (!save_logits_.empty()) {
    auto writer = SavedLogitsWriter::create(save_logits_, {vocab, ctx, w.count, w.first_scored, hash,
                                                           std::string(name_of(measured.first)),
                                                           std::string(dense_format_name(measured.second))});
    if (!writer) return fail("--save-logits: " + writer.error().message, cli::kExitError);
    saved.emplace(std::move(*writer));
  }
  std::fprintf(stderr, "coli perplexity: %zu tokens, %d windows of %d, scoring %d tokens of each%s\n", tokens.size(),
               w.count, ctx, w.scored_per_window(), base->source ? ", against the base" : "");
  WindowWalker walker(*model->model);
  PerplexityTally tally;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < w.count; ++i) {
    const auto window = std::span(tokens).subspan(static_cast<std::size_t>(i) * static_cast<std::size_t>(ctx), static_cast<std::size_t>(ctx));
    if (Status s = score_window(window, w, walker, base->source.get(), saved ? &*saved : nullptr, tally); !s) {
      return fail(s.error().message, cli::kExitError);
    }
    std::fprintf(stderr, "[%d/%d] perplexity %.4f (%.1f s)\n", i + 1, w.count, tally.perplexity(),
                 coli::seconds_since(start));
  }
  if (saved) {
    if (Status s = saved->commit(); !s) return fail("--save-logits " + save_logits_ + ": " + s.error().message, cli::kExitError);
    std::fprintf(stderr, "coli perplexity: saved the logits of %d windows in %s\n", w.count, save_logits_.c_str());
  }
  nlohmann::json result = tally.summary();
  result["model"] = engine_.model;
  result["text"] = text_;
  result["ctx"] = ctx;
  result["windows"] = w.count;
  if (base->source) result["base"] = base_;
  std::printf("%s\n", result.dump(1).c_str());
  if (!record_.empty()) {
    if (Status s = record_quality(record_, measured, base->formats, shape, result, text_); !s) {
      return fail("--record: " + s.error().message, cli::kExitError);
    }
    std::fprintf(stderr, "coli perplexity: recorded in %s\n", record_.c_str());
  }
  return cli::kExitOk;
}

}  // namespace coli::tools
