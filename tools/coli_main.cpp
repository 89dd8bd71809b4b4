// coli: convert a Hugging Face MoE checkpoint to a container, and run it.
//   coli convert --model DIR --out FILE [--experts q4_g64|q8_row|f32]
//   coli run --model FILE --prompt TEXT [--threads N --cap N --pin N --max-tokens N ...]
#include <malloc.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <random>

#include <CLI/CLI.hpp>

#include "coli/base/cpu_kernels.h"
#include "coli/base/files.h"
#include "coli/base/kv_type.h"
#include "coli/base/text.h"
#include "coli/container/container.h"
#include "coli/cli/command_line.h"
#include "coli/cli/default_profile.h"
#include "coli/convert/convert.h"
#include "coli/experts/usage_history.h"
#include "coli/runtime/moe_model.h"
#include "coli/tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>
#include "chat_prompt.h"
#include "coli_profile_cmd.h"
#include "run_plan.h"
#include "sampler.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::uint64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// The special ids a carried generation_config.json gives where the
// tokenizer has none (a tokenizer.json names no EOS): eos_token_id, an id or
// a list (the first), and bos_token_id.
void apply_generation_config(coli::Tokenizer& tokenizer, const std::string& text) {
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return;
  auto id_of = [&](const char* key) -> std::optional<std::int32_t> {
    const auto it = config.find(key);
    if (it == config.end()) return std::nullopt;
    const nlohmann::json& value = it->is_array() && !it->empty() ? (*it)[0] : *it;
    if (!value.is_number_unsigned() || value.get<std::uint64_t>() >= tokenizer.vocab_size()) return std::nullopt;
    return static_cast<std::int32_t>(value.get<std::uint64_t>());
  };
  if (!tokenizer.eos_id()) tokenizer.set_eos_id(id_of("eos_token_id"));
  if (!tokenizer.bos_id()) tokenizer.set_bos_id(id_of("bos_token_id"));
}

// The tokenizer: --tokenizer, else the one the container carries (coli
// convert), else tokenizer.json or tokenizer.gguf next to the container.
coli::Result<coli::Tokenizer> load_tokenizer(const fs::path& model, const std::string& explicit_path) {
  if (!explicit_path.empty()) return coli::Tokenizer::from_file(explicit_path);
  auto container = coli::container::ContainerReader::open(model);
  if (!container) return container.error();
  const coli::container::ContainerIndex& index = container->index();
  const auto* carried = index.find_runtime_file("tokenizer.json");
  if (!carried) carried = index.find_runtime_file("tokenizer.gguf");
  if (carried) {
    auto tokenizer = coli::Tokenizer::from_file_bytes(carried->name, carried->bytes, model.string() + " (its carried " + carried->name + ")");
    if (tokenizer) {
      if (const auto* generation = index.find_runtime_file("generation_config.json")) apply_generation_config(*tokenizer, generation->bytes);
    }
    return tokenizer;
  }
  for (const fs::path& path : {model.parent_path() / "tokenizer.json", model.parent_path() / "tokenizer.gguf"}) {
    if (fs::exists(path)) return coli::Tokenizer::from_file(path);
  }
  return coli::make_error(model.string() + " carries no tokenizer and none is next to it (looked for tokenizer.json, "
                          "tokenizer.gguf): pass --tokenizer FILE or --prompt-ids, or convert again with --tokenizer");
}

int run_convert(const std::string& model_dir, const std::string& out, const std::string& experts,
                const std::string& dense_name, const std::string& tokenizer) {
  auto format = coli::convert::parse_expert_format(experts);
  auto dense = coli::convert::parse_dense_format(dense_name);
  if (!format || !dense) {
    std::fprintf(stderr, "coli convert: %s\n", (!format ? format.error() : dense.error()).message.c_str());
    return 2;
  }
  const auto start = Clock::now();
  auto report = coli::convert::convert_model(model_dir, out, *format, *dense,
                                             [](std::string_view line) { std::fprintf(stderr, "coli convert: %.*s\n", static_cast<int>(line.size()), line.data()); },
                                             tokenizer);
  if (!report) {
    std::fprintf(stderr, "coli convert: %s\n", report.error().message.c_str());
    return 1;
  }
  std::printf("converted %s -> %s in %.2f s: %llu dense tensors (%s), %llu experts of %s (source %s each), file %s, "
              "read back against its checksums\n",
              model_dir.c_str(), out.c_str(), seconds_since(start), static_cast<unsigned long long>(report->dense_tensors),
              coli::format_bytes(report->dense_bytes).c_str(), static_cast<unsigned long long>(report->experts),
              coli::format_bytes(report->expert_record_bytes).c_str(),
              coli::format_bytes(report->source_bytes_per_expert).c_str(), coli::format_bytes(report->file_bytes).c_str());
  std::string carried;
  for (const std::string& name : report->runtime_files) carried += (carried.empty() ? "" : ", ") + name;
  std::printf("carries for running: %s\n", carried.empty() ? "no tokenizer (coli run needs --tokenizer or --prompt-ids)" : carried.c_str());
  return 0;
}

struct RunArgs {
  std::string model, prompt, tokenizer, pin, usage, plan, profile;
  bool knobs_given = false;
  bool report = false;  // --report: the engine's own accounting even without a plan
  bool verify = false;  // --verify: every tensor's and expert record's checksum before loading
  bool op_times = false;  // --op-times: per-op wall time of the prefill and of the decode steps
  bool no_preload = false;            // --no-preload: ModelOptions::preload_experts off
  bool speculative_prefetch = false;  // --speculative-prefetch: ModelOptions::speculative_prefetch
  std::optional<std::uint64_t> rss_limit;  // --rss-limit bytes (the watchdog's limit)  // --threads/--cap/--ctx/... given explicitly
  std::string kv_type = "f16";  // --kv-type (a knob: the plan decides it otherwise)
  std::string ram;              // --ram SIZE: RAM a run without a plan may use (default: the live headroom)
  bool no_memory_check = false;  // --no-memory-check: run without a plan even when it does not fit
  double usage_decay = 0.9;
  std::vector<std::int32_t> prompt_ids;
  int max_tokens = 32;
  std::optional<std::int32_t> eos_id;  // --eos-id: the end-of-sequence token (default: the tokenizer's)
  bool ignore_eos = false;             // --ignore-eos: generate all --max-tokens (llama.cpp's flag)
  bool no_bos = false;                 // --no-bos: do not start a text prompt with BOS where the tokenizer asks for it
  bool chat = false;                   // --chat: the prompt is the user's message in the model's chat format
  bool json_stats = false;             // --json: the statistics as one JSON object on stderr
  std::string system, chat_template;   // --system TEXT, --chat-template NAME (implies --chat)
  float temperature = 0, top_p = 1;
  std::uint64_t seed = 1;
  int top_k = 0, repeat_last_n = 64;       // --top-k, --repeat-last-n
  float min_p = 0, repeat_penalty = 1;     // --min-p, --repeat-penalty (llama.cpp's samplers)
  std::string prompt_file;                 // --prompt-file FILE ("-": stdin)
  coli::runtime::ModelOptions options;
};

// The usage history beside the model: what picks pins, what this run adds to.
struct History {
  std::filesystem::path path;
  std::optional<coli::experts::UsageHistory> loaded;  // nullopt: none yet, or unusable
  bool usable_path = true;                            // false: a file of another model / corrupt: leave it alone
};

History open_history(const std::filesystem::path& path, const coli::experts::UsageHistoryKey& key) {
  History history{path, std::nullopt, true};
  if (!std::filesystem::exists(path)) return history;
  auto loaded = coli::experts::UsageHistory::load(path, key);
  if (loaded) {
    history.loaded = std::move(*loaded);
  } else {
    // Reported and ignored: never fatal, never applied to another model, never overwritten.
    std::fprintf(stderr, "coli run: ignoring usage history: %s\n", loaded.error().message.c_str());
    history.usable_path = false;
  }
  return history;
}

// --pin N: the N most-used experts of each layer; --pin FILE: that history,
// pinning all but top_k slots of the cache.
coli::Result<std::vector<std::vector<int>>> choose_pins(const RunArgs& args, const History& history, int top_k, int cap) {
  std::vector<std::vector<int>> pins;
  if (args.pin.empty() || args.pin == "0") return pins;
  const auto count = coli::parse_int(args.pin);
  const int n_pins = count ? static_cast<int>(*count) : std::max(0, cap - top_k);
  if (!history.loaded) {
    std::fprintf(stderr, "coli run: no usage history at %s yet: running without pins (this run records one)\n",
                 history.path.c_str());
    return pins;
  }
  return coli::experts::pins_for_every_layer(*history.loaded, n_pins);
}

coli::Status save_history(History& history, const coli::runtime::MoeModel& model, double decay) {
  if (!history.usable_path) return coli::Ok{};
  auto run = coli::experts::UsageHistory::create(coli::runtime::usage_history_key(model.shape()));
  if (!run) return run.error();
  if (coli::Status s = run->add_counts(model.routing_counts(), model.stats().tokens); !s) return s;
  if (coli::Status s = run->add_reuse(model.reuse_distances()); !s) return s;
  if (coli::Status s = run->add_decode_reuse(model.decode_reuse_distances()); !s) return s;
  if (history.loaded) {
    if (coli::Status s = history.loaded->merge(*run, decay); !s) return s;
    return history.loaded->save(history.path);
  }
  return run->save(history.path);
}

// --verify: re-reads the whole data region against its checksums (the
// index's own is checked on every open).
bool verify_container(const std::string& model) {
  const auto start = Clock::now();
  auto reader = coli::container::ContainerReader::open(model);
  auto summary = reader ? reader->verify_checksums() : coli::Result<coli::container::VerifySummary>(reader.error());
  if (!summary) {
    std::fprintf(stderr, "coli run: --verify: %s\n", summary.error().message.c_str());
    return false;
  }
  std::fprintf(stderr, "coli run: verified %llu tensors and %llu expert records (%s) in %.2f s\n",
               static_cast<unsigned long long>(summary->tensors), static_cast<unsigned long long>(summary->records),
               coli::format_bytes(summary->bytes).c_str(), seconds_since(start));
  return true;
}

// No --plan, --profile or knob: plan from this machine's profile when there
// is one (said on stderr), else run with the engine's defaults.
void use_default_profile(RunArgs& args) {
  auto chosen = coli::cli::choose_profile("");
  if (!chosen) {
    std::fprintf(stderr, "coli run: %s; running with the engine's defaults\n", chosen.error().message.c_str());
    return;
  }
  args.profile = chosen->path.string();
  std::fprintf(stderr, "coli run: profile %s (%s)\n", args.profile.c_str(), chosen->why.c_str());
}

// The engine's knobs: every one from --plan/--profile (pins and the RSS
// watchdog included; explicit knobs would fight it), else the explicit ones
// with pins from the usage history, their memory checked against the live
// headroom before loading. Returns kExitOk or the status to exit with.
int resolve_knobs(const RunArgs& args, const coli::runtime::ModelShape& shape, const History& history,
                  const coli::tools::RunWorkload& workload, coli::runtime::ModelOptions& options,
                  std::optional<coli::tools::PlannedKnobs>& planned) {
  if (!args.plan.empty() || !args.profile.empty()) {
    if (args.knobs_given) {
      std::fprintf(stderr, "coli run: --threads/--cap/--ctx/--kv-type/--pin/--io-threads/--backend/--gpu/--gpu-batch come from the plan; change them with coli-plan\n");
      return coli::cli::kExitUsage;
    }
    const int history_pins = history.loaded ? shape.experts : 0;
    bool refused = false;
    auto knobs = args.plan.empty()
                     ? coli::tools::knobs_from_profile(args.profile, shape, history_pins, workload, &refused)
                     : coli::tools::knobs_from_plan(args.plan, shape, workload.history, &refused);
    if (!knobs) {
      std::fprintf(stderr, "coli run: %s%s\n", refused ? "refused: " : "", knobs.error().message.c_str());
      return refused ? coli::cli::kExitRefused : coli::cli::kExitError;
    }
    planned = std::move(*knobs);
    options = planned->options;  // pins and the RSS watchdog (the plan's RAM plus its margin) included
    std::fprintf(stderr, "coli run: knobs from %s: %d threads, cap %d, %d pins, rounds of %d tokens, ctx %d, backend %s%s\n",
                 planned->source.c_str(), options.threads, planned->plan.plan.cap, planned->plan.plan.pins,
                 options.prefill_round_tokens, options.max_context, options.backend.c_str(),
                 options.backend == "cpu" ? "" : (" (prefill batches of " + std::to_string(options.gpu_batch_tokens) + " tokens)").c_str());
  } else {
    auto pins = choose_pins(args, history, shape.top_k, std::min(options.cache_capacity, shape.experts));
    if (!pins) {
      std::fprintf(stderr, "coli run: %s\n", pins.error().message.c_str());
      return coli::cli::kExitError;
    }
    options.pins = std::move(*pins);
    // No plan sized this run: check its memory before loading, and watch it as a plan would.
    std::optional<std::uint64_t> ram;
    if (!args.ram.empty() && !(ram = coli::parse_size(args.ram))) {
      std::fprintf(stderr, "coli run: --ram '%s' is not a size: give a unit, e.g. 16G or 512M\n", args.ram.c_str());
      return coli::cli::kExitUsage;
    }
    bool refused = false;
    auto limit = coli::tools::check_memory_without_plan(
        shape, options, {workload.prompt_tokens, workload.tokenizer, nullptr}, ram, args.no_memory_check, &refused);
    if (!limit) {
      std::fprintf(stderr, "coli run: %s\n", limit.error().message.c_str());
      return refused ? coli::cli::kExitRefused : coli::cli::kExitError;
    }
    options.rss_limit_bytes = *limit;
  }
  return coli::cli::kExitOk;
}

coli::tools::SamplingOptions sampling_of(const RunArgs& args) {
  coli::tools::SamplingOptions o{args.temperature, args.top_p, args.seed};
  o.top_k = args.top_k;
  o.min_p = args.min_p;
  o.repeat_penalty = args.repeat_penalty;
  o.repeat_last_n = args.repeat_last_n;
  return o;
}

// --prompt-file: the whole file (or stdin for "-") as the prompt text, as is.
coli::Result<std::string> read_prompt_file(const std::string& path) {
  if (path != "-") {
    auto text = coli::read_text_file(path);
    if (!text) return coli::make_error("--prompt-file " + path + ": " + text.error().message);
    return *text;
  }
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (std::cin.bad()) return coli::make_error("--prompt-file -: reading stdin failed");
  return text;
}

int run_generate(const RunArgs& args) {
  if (coli::Status s = coli::tools::check_sampling(sampling_of(args)); !s) {
    std::fprintf(stderr, "coli run: %s\n", s.error().message.c_str());
    return 2;
  }
  if (!std::isfinite(args.usage_decay) || args.usage_decay < 0 || args.usage_decay > 1) {
    std::fprintf(stderr, "coli run: --usage-decay %g must be a number in [0, 1]\n", args.usage_decay);
    return 2;
  }
  const auto load_start = Clock::now();
  std::optional<coli::Tokenizer> tokenizer;
  std::optional<std::int32_t> turn_end;  // --chat: the token that ends the assistant's turn
  std::vector<std::int32_t> prompt = args.prompt_ids;
  if (prompt.empty()) {
    auto loaded = load_tokenizer(args.model, args.tokenizer);
    if (!loaded) {
      std::fprintf(stderr, "coli run: %s\n", loaded.error().message.c_str());
      return 1;
    }
    tokenizer = std::move(*loaded);
    // Reading a carried tokenizer parses the index and decodes the file:
    // megabytes of heap freed by now, which glibc keeps unless asked. Give
    // them back so the run's RSS is the plan's (the weights are mmap-served).
    malloc_trim(0);
    std::string text = args.prompt;
    if (!args.prompt_file.empty()) {
      auto read = read_prompt_file(args.prompt_file);
      if (!read) {
        std::fprintf(stderr, "coli run: %s\n", read.error().message.c_str());
        return 1;
      }
      text = std::move(*read);
    }
    if (args.chat || !args.chat_template.empty()) {
      auto format = coli::tools::chat_format_for(args.model, *tokenizer, args.chat_template);
      if (!format) {
        std::fprintf(stderr, "coli run: %s\n", format.error().message.c_str());
        return 2;
      }
      std::vector<coli::ChatMessage> messages;
      if (!args.system.empty()) messages.push_back({"system", args.system});
      messages.push_back({"user", text});
      text = coli::render_chat(*format, messages);
      turn_end = tokenizer->find_token(coli::chat_turn_end(*format));
      std::fprintf(stderr, "coli run: chat format %s%s\n", std::string(coli::chat_format_name(*format)).c_str(),
                   args.chat_template.empty() ? " (the model's template; --chat-template overrides)" : " (--chat-template)");
    }
    prompt = tokenizer->encode(text);
    if (prompt.empty()) {
      std::fprintf(stderr, "coli run: the prompt is empty\n");
      return 2;
    }
    // As the model was trained (SentencePiece and Llama 3 vocabularies): BOS first, once.
    if (tokenizer->add_bos() && !args.no_bos && prompt.front() != *tokenizer->bos_id()) {
      prompt.insert(prompt.begin(), *tokenizer->bos_id());
      std::fprintf(stderr, "coli run: prompt starts with BOS (token %d), as the tokenizer asks (--no-bos leaves it out)\n",
                   *tokenizer->bos_id());
    }
  }
  coli::runtime::ModelOptions options = args.options;
  // The shape (from the container's index alone) decides pins and plans;
  // the weights are loaded once, with the final knobs.
  auto read_shape = coli::runtime::MoeModel::read_shape(args.model);
  if (!read_shape) {
    std::fprintf(stderr, "coli run: %s\n", read_shape.error().message.c_str());
    return 1;
  }
  const coli::runtime::ModelShape shape = std::move(*read_shape);
  if (args.verify && !verify_container(args.model)) return 1;
  const bool pin_is_file = !args.pin.empty() && !coli::parse_int(args.pin);
  History history = open_history(pin_is_file ? args.pin : (args.usage.empty() ? args.model + ".usage" : args.usage),
                                 coli::runtime::usage_history_key(shape));
  std::optional<coli::tools::PlannedKnobs> planned;
  const coli::tools::RunWorkload workload{static_cast<int>(prompt.size()), tokenizer.has_value(),
                                          history.loaded ? &*history.loaded : nullptr};
  if (int status = resolve_knobs(args, shape, history, workload, options, planned); status != coli::cli::kExitOk) {
    return status;
  }
  if (args.rss_limit) options.rss_limit_bytes = *args.rss_limit;
  options.op_timing = args.op_times;
  // Speed only (no memory, no tokens): given after the plan's knobs, never by it.
  options.preload_experts = !args.no_preload;
  options.speculative_prefetch = args.speculative_prefetch;
  options.on_warning = [](const std::string& message) { std::fprintf(stderr, "coli run: WARNING: %s\n", message.c_str()); };
  auto model = coli::runtime::MoeModel::load(args.model, options);
  if (!model) {
    std::fprintf(stderr, "coli run: %s\n", model.error().message.c_str());
    return 1;
  }
  const double load_seconds = seconds_since(load_start);
  std::vector<float> logits(static_cast<std::size_t>(model->vocab_size()));
  const auto prefill_start = Clock::now();
  if (auto s = model->forward(prompt, 0, logits); !s) {
    std::fprintf(stderr, "coli run: %s\n", s.error().message.c_str());
    return 1;
  }
  const double ttft = seconds_since(prefill_start);
  std::string prefill_op_times;  // printed after the generated text
  if (auto* times = model->op_times()) {
    prefill_op_times = coli::runtime::op_times_table(*times, "prefill");
    times->clear();
  }
  coli::tools::Sampler sampler(sampling_of(args));
  for (std::int32_t token : prompt) sampler.accept(token);  // the repeat penalty sees the prompt too
  std::optional<coli::StreamDecoder> decoder;
  if (tokenizer) decoder.emplace(*tokenizer);
  // Generation ends at the end-of-sequence token (not printed), as llama.cpp's does.
  const std::optional<std::int32_t> eos = args.ignore_eos ? std::nullopt : args.eos_id ? args.eos_id
                                          : tokenizer ? tokenizer->eos_id() : std::nullopt;
  bool stopped_at_eos = false, stopped_at_turn_end = false;
  const auto decode_start = Clock::now();
  int generated = 0;
  for (int position = static_cast<int>(prompt.size()); generated < args.max_tokens; ++position) {
    const auto picked = sampler.pick(logits);
    if (!picked) {
      std::fprintf(stderr, "\ncoli run: %s\n", picked.error().message.c_str());
      return 1;
    }
    const std::int32_t next = *picked;
    if (eos && next == *eos) {
      stopped_at_eos = true;
      break;
    }
    if (turn_end && next == *turn_end && !args.ignore_eos) {
      stopped_at_turn_end = true;
      break;
    }
    ++generated;
    sampler.accept(next);
    if (decoder) std::fputs(decoder->push(next).c_str(), stdout);
    else std::printf("%d ", next);
    std::fflush(stdout);
    if (generated == args.max_tokens) break;
    if (auto s = model->forward(std::span(&next, 1), position, logits); !s) {
      std::fprintf(stderr, "\ncoli run: %s\n", s.error().message.c_str());
      return 1;
    }
  }
  if (decoder) std::fputs(decoder->flush().c_str(), stdout);
  if (coli::Status saved = save_history(history, *model, args.usage_decay); !saved) {
    std::fprintf(stderr, "coli run: usage history not saved: %s\n", saved.error().message.c_str());
  }
  const double decode_seconds = seconds_since(decode_start);
  const auto& stats = model->stats();
  const double lookups = static_cast<double>(stats.expert_hits + stats.expert_misses);
  // The text alone on stdout (`coli run > out.txt` keeps only it); the statistics on stderr.
  std::fputs("\n", stdout);
  std::fflush(stdout);
  if (stopped_at_eos) std::fprintf(stderr, "coli run: stopped at the end-of-sequence token %d (--ignore-eos generates on)\n", *eos);
  if (stopped_at_turn_end) std::fprintf(stderr, "coli run: stopped at the end of the assistant's turn (token %d)\n", *turn_end);
  const double prefill_tok_s = static_cast<double>(prompt.size()) / ttft;
  const double decode_tok_s = generated > 1 ? (generated - 1) / decode_seconds : 0.0;
  if (args.json_stats) {
    nlohmann::json stats_json = {
        {"schema_version", 1}, {"load_s", load_seconds}, {"ttft_s", ttft}, {"prompt_tokens", prompt.size()},
        {"prefill_tok_s", prefill_tok_s}, {"generated_tokens", generated}, {"decode_tok_s", decode_tok_s},
        {"stop", stopped_at_eos ? "eos" : stopped_at_turn_end ? "turn_end" : "max_tokens"},
        {"expert_hits", stats.expert_hits}, {"expert_misses", stats.expert_misses},
        {"hit_rate", lookups > 0 ? static_cast<double>(stats.expert_hits) / lookups : 0.0},
        {"expert_bytes_read", stats.expert_bytes_read}, {"kernel", stats.cpu_kernel},
        {"prefill_threads", stats.prefill_thread_set}, {"decode_threads", stats.decode_thread_set}, {"io", stats.io_mode},
        {"peak_rss_bytes", peak_rss_bytes()}};
    if (planned && planned->plan.speed.available) {
      stats_json["predicted"] = {{"decode_tok_s", planned->plan.speed.decode_tok_per_s},
                                 {"prefill_tok_s", planned->plan.speed.prefill_tok_per_s}};
    }
    std::fprintf(stderr, "%s\n", stats_json.dump().c_str());
    return 0;
  }
  std::fprintf(stderr, "---\nload %.2f s | TTFT %.3f s | prefill %.1f tok/s (%zu tokens) | decode %.1f tok/s (%d tokens)\n",
              load_seconds, ttft, static_cast<double>(prompt.size()) / ttft, prompt.size(),
              generated > 1 ? (generated - 1) / decode_seconds : 0.0, generated);
  std::fprintf(stderr, "experts: hit rate %.1f%% (%llu hits, %llu misses), %s read from disk | kernel %s | threads: prefill %s, decode %s | I/O %s | peak RSS %s\n",
              lookups > 0 ? 100.0 * static_cast<double>(stats.expert_hits) / lookups : 0.0,
              static_cast<unsigned long long>(stats.expert_hits), static_cast<unsigned long long>(stats.expert_misses),
              coli::format_bytes(stats.expert_bytes_read).c_str(), stats.cpu_kernel.c_str(),
              stats.prefill_thread_set.empty() ? "-" : stats.prefill_thread_set.c_str(),
              stats.decode_thread_set.empty() ? "-" : stats.decode_thread_set.c_str(),
              stats.io_mode.c_str(),
              coli::format_bytes(peak_rss_bytes()).c_str());
  if (planned) {
    coli::tools::print_plan_vs_actual(planned->plan, model->stats(), peak_rss_bytes());
    const coli::tools::MeasuredSpeed measured{static_cast<double>(prompt.size()) / ttft, static_cast<int>(prompt.size()),
                                              generated > 1 ? (generated - 1) / decode_seconds : 0.0,
                                              static_cast<double>(prompt.size()) + (generated - 1) / 2.0};
    coli::tools::print_speed_vs_plan(planned->plan.speed, planned->plan.plan.ctx, measured);
  }
  else if (args.report) coli::tools::print_measured(model->stats(), peak_rss_bytes());
  if (auto* times = model->op_times()) std::fprintf(stderr, "\n%s\n%s", prefill_op_times.c_str(), coli::runtime::op_times_table(*times, "decode").c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"coli: run huge Mixture-of-Experts models on the machine you have"};
  app.require_subcommand(1);

  std::string model_dir, out, experts = "q4_g64", dense = "source", convert_tokenizer;
  CLI::App* convert = app.add_subcommand("convert", "Convert a Hugging Face checkpoint directory into a coli container (read back against "
                                                           "its checksums before it is published; a tensor holding NaN or Inf is refused)");
  convert->add_option("--model", model_dir, "Checkpoint directory (config.json + *.safetensors)")->required()->check(CLI::ExistingDirectory);
  convert->add_option("--out", out, "Container file to write (atomically)")->required();
  convert->add_option("--experts", experts, "Routed expert format: q4_g64 (int4), q8_row (int8) or f32")->capture_default_str();
  convert->add_option("--dense", dense, "Dense projections: source (keep dtype), q8_row (int8) or q4_g64 (int4)")->capture_default_str();
  convert->add_option("--tokenizer", convert_tokenizer,
                      "Tokenizer the container carries: a tokenizer.json or a GGUF vocabulary (default: the model directory's "
                      "tokenizer.json; its tokenizer_config.json and generation_config.json come along)")
      ->check(CLI::ExistingFile);

  RunArgs run;
  CLI::App* run_cmd = app.add_subcommand("run", "Generate text with a converted model");
  run_cmd->add_option("--model", run.model, "Container written by coli convert")->required()->check(CLI::ExistingFile);
  auto* prompt = run_cmd->add_option("--prompt", run.prompt, "Prompt text");
  auto* ids = run_cmd->add_option("--prompt-ids", run.prompt_ids, "Prompt as token ids (no tokenizer needed)");
  prompt->excludes(ids);
  auto* prompt_file = run_cmd->add_option("--prompt-file", run.prompt_file, "Prompt text from this file, as is (\"-\": stdin)");
  prompt_file->excludes(prompt)->excludes(ids);
  run_cmd->add_option("--tokenizer", run.tokenizer, "tokenizer.json or GGUF vocabulary (default: next to the model)");
  run_cmd->add_option("--max-tokens", run.max_tokens, "Most tokens to generate (fewer when the end-of-sequence token comes)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  auto* eos_option = run_cmd->add_option("--eos-id", run.eos_id,
                                         "The end-of-sequence token id that ends generation (default: the tokenizer's, "
                                         "tokenizer.ggml.eos_token_id; none with --prompt-ids)")
                         ->check(CLI::Range(0, (1 << 30)));
  run_cmd->add_flag("--ignore-eos", run.ignore_eos, "Generate all --max-tokens, through the end-of-sequence token")
      ->excludes(eos_option);
  auto* chat_flag = run_cmd->add_flag("--chat", run.chat,
                                      "The prompt is the user's message, in the model's chat format (its template recognised: "
                                      "chatml, llama3, llama2, mistral, deepseek3); generation stops at the end of the turn");
  run_cmd->add_option("--system", run.system, "With --chat: a system message before the user's")->needs(chat_flag);
  run_cmd->add_option("--chat-template", run.chat_template,
                      "Chat format to use instead of recognising the model's template: chatml, llama3, llama2, mistral, deepseek3");
  run_cmd->add_flag("--json", run.json_stats,
                    "Print the statistics as one JSON object on stderr (schema_version 1: load_s, ttft_s, prompt_tokens, "
                    "prefill_tok_s, generated_tokens, decode_tok_s, stop, expert hits and misses, hit_rate, bytes read, kernel, "
                    "threads, peak_rss_bytes, and with a plan its predicted tok/s) instead of the summary lines");
  run_cmd->add_flag("--no-bos", run.no_bos,
                    "Do not start a text prompt with BOS (default: as the tokenizer says: SentencePiece and Llama 3 "
                    "vocabularies, tokenizer.ggml.add_bos_token, a tokenizer.json post_processor template)");
  run_cmd->add_option("--threads", run.options.threads, "Compute threads")->check(CLI::Range(1, 4096))->capture_default_str();
  run_cmd->add_option("--cap", run.options.cache_capacity, "Expert slots per layer, pins included (default: all experts resident)")->check(CLI::Range(1, 1 << 20));
  run_cmd->add_option("--pin", run.pin,
                      "N: pin each layer's N most-used experts (usage history); FILE: that history, all but top_k slots");
  run_cmd->add_option("--plan", run.plan, "Take every knob from a plan written by coli-plan --out")->check(CLI::ExistingFile);
  run_cmd->add_option("--profile", run.profile,
                      "Plan on the spot from this device profile (default without --plan or knobs: this machine's, "
                      "from the profile search path)")->check(CLI::ExistingFile);
  run_cmd->add_flag("--report", run.report,
                    "Print memory per component and peak RSS at the end (with --plan/--profile: planned vs measured, "
                    "always printed)");
  run_cmd->add_flag("--op-times", run.op_times,
                    "Print where the CPU forward passes spent their wall time, per op category (ms per token, % of the pass), "
                    "for the prefill and for the decode steps");
  run_cmd->add_flag("--no-preload", run.no_preload,
                    "With every expert resident, read each on first use instead of all at load (the default reads them "
                    "at load, so the first tokens wait for no reads)");
  run_cmd->add_flag("--speculative-prefetch", run.speculative_prefetch,
                    "When experts stream, run the next layer's router early and start reading its predicted experts "
                    "(off by default: slower on random weights, see docs/engine.md)");
  run_cmd->add_flag("--verify", run.verify,
                    "Before loading, re-read every tensor and expert record against its checksum (reads the whole file; "
                    "the index's checksum is checked on every load)");
  run_cmd->add_option("--usage", run.usage, "Usage history file (default: MODEL.usage); every run adds its routing");
  run_cmd->add_option("--usage-decay", run.usage_decay, "Weight of the older history when this run is merged in")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  run_cmd->add_option("--ctx", run.options.max_context, "KV cache positions")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  run_cmd->add_option("--rss-limit", run.rss_limit,
                      "RSS watchdog: past this many bytes the expert cache gives slots back (default: the plan's or the knobs' "
                      "RAM plus margin; 0 = off)");
  run_cmd->add_option("--ram", run.ram, "Without --plan/--profile: RAM this run may use, e.g. 8G (default: the live headroom)");
  run_cmd->add_flag("--no-memory-check", run.no_memory_check,
                    "Without --plan/--profile: run even when the knobs need more RAM than is available");
  run_cmd->add_option("--io-threads", run.options.io_threads, "Threads reading expert misses (0 = read on the compute thread)")->check(CLI::Range(0, 256))->capture_default_str();
  run_cmd->add_flag("--no-direct-io{false}", run.options.direct_io, "Read streamed experts through the page cache instead of O_DIRECT");
  run_cmd->add_option("--kernel", run.options.cpu_kernel, "CPU kernel: " + coli::cpu_kernel_names_text() + " (default: best)")
      ->check(CLI::IsMember(coli::cpu_kernel_names()));
  run_cmd->add_option("--backend", run.options.backend,
                      "Without --plan/--profile: cpu, vulkan or cuda (the whole decoder on GPU --gpu, every expert in VRAM)")
      ->check(CLI::IsMember({"cpu", "vulkan", "cuda"}))
      ->capture_default_str();
  run_cmd->add_option("--gpu", run.options.gpu_index, "Without --plan/--profile: the GPU's index for --backend vulkan or cuda")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  run_cmd->add_option("--gpu-batch", run.options.gpu_batch_tokens,
                      "Without --plan/--profile: a prompt's tokens per GPU submission (default: the decoder's, 512 for "
                      "cuda, 128 for vulkan; coli-plan --gpu-batch for a plan)")
      ->check(CLI::Range(1, coli::planner::kMaxGpuBatchTokens));
  run_cmd->add_option("--gpu-kernel", run.options.gpu_kernel,
                      "GPU decoder arithmetic: exact = f32 activations for int8/int4 weights too (default: the "
                      "decoder's choice; cuda quantises a token's activations to int8 for them)")
      ->check(CLI::IsMember({"exact"}));
  run_cmd->add_option("--gpu-host-experts", run.options.gpu_host_experts,
                      "CUDA hybrid plans' prefill batches, for the experts outside VRAM that a batch chose: measured = "
                      "per expert, copy it up or compute its tokens on the CPU, whichever this run measured faster; "
                      "upload or cpu = always that")
      ->check(CLI::IsMember({"measured", "upload", "cpu"}))
      ->capture_default_str();
  run_cmd->add_option("--kv-type", run.kv_type, "KV cache precision: " + coli::kv_type_names_text() + " (f16 halves its memory and bandwidth; f32 is exact)")
      ->check(CLI::IsMember(coli::kv_type_names()))
      ->capture_default_str();
  run_cmd->add_option("--temperature", run.temperature, "0 = greedy; finite, >= 0")->capture_default_str();
  run_cmd->add_option("--top-p", run.top_p, "Nucleus sampling mass, in (0, 1]")->capture_default_str();
  run_cmd->add_option("--top-k", run.top_k, "Sample from the k most probable tokens only (0 = all)")->capture_default_str();
  run_cmd->add_option("--min-p", run.min_p, "Drop tokens below this share of the most probable's probability, in [0, 1]")
      ->capture_default_str();
  run_cmd->add_option("--repeat-penalty", run.repeat_penalty,
                      "Divide a recent token's logit by this (multiply when negative); 1 = off")
      ->capture_default_str();
  run_cmd->add_option("--repeat-last-n", run.repeat_last_n, "Recent tokens the penalty looks at (the prompt's included)")
      ->capture_default_str();
  run_cmd->add_option("--seed", run.seed, "Sampling seed")->capture_default_str();
  const coli::tools::ProfileCommand profile_cmd(app);  // coli profile ... (docs/fleet.md)
  app.footer("Exit status: 0 done, 1 error (a file, the model, the machine), 2 usage, 3 refused (the plan does not "
             "fit this machine).");
  coli::cli::add_version_flag(app, "coli");
  if (const auto done = coli::cli::parse(app, argc, argv)) return *done;

  if (profile_cmd.parsed()) return profile_cmd.run();
  if (convert->parsed()) return run_convert(model_dir, out, experts, dense, convert_tokenizer);
  for (const char* knob : {"--threads", "--cap", "--ctx", "--kv-type", "--pin", "--io-threads", "--no-direct-io",
                           "--backend", "--gpu", "--gpu-batch"}) {
    run.knobs_given = run.knobs_given || run_cmd->count(knob) > 0;
  }
  if (run_cmd->count("--gpu-batch") == 0) {  // the decoder's own default, as coli-plan plans it
    run.options.gpu_batch_tokens = coli::tools::default_gpu_batch_tokens(run.options.backend);
  }
  run.options.kv_type = *coli::parse_kv_type(run.kv_type, "--kv-type");  // the check above admits only valid names
  if (run.prompt.empty() && run.prompt_ids.empty() && run.prompt_file.empty()) {
    std::fprintf(stderr, "coli run: give --prompt TEXT, --prompt-file FILE (- for stdin) or --prompt-ids N...\n");
    return 2;
  }
  if (run.plan.empty() && run.profile.empty() && !run.knobs_given && run_cmd->count("--kernel") == 0) {
    use_default_profile(run);
  }
  return run_generate(run);
}
