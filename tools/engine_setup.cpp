#include "engine_setup.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <chrono>
#include <string_view>
#include <type_traits>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "coli/base/clock.h"
#include "coli/base/cpu_kernels.h"
#include "coli/base/files.h"
#include "coli/base/kv_type.h"
#include "coli/base/text.h"
#include "coli/cli/default_profile.h"
#include "coli/cli/exit_codes.h"
#include "coli/container/container.h"
#include "coli/planner/gpu_tiers.h"

namespace coli::tools {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

// The special ids a carried generation_config.json gives where the
// tokenizer has none (a tokenizer.json names no EOS): eos_token_id, an id or
// a list (the first), and bos_token_id.
void apply_special_ids(Tokenizer& tokenizer, const std::string& text) {
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

History open_history(const fs::path& path, const experts::UsageHistoryKey& key, const char* program) {
  History history{path, std::nullopt, true};
  auto loaded = experts::UsageHistory::load_if_present(path, key);
  if (loaded) {
    history.loaded = std::move(*loaded);
  } else {
    // Reported and ignored: never fatal, never applied to another model, never overwritten.
    std::fprintf(stderr, "%s: ignoring usage history: %s\n", program, loaded.error().message.c_str());
    history.usable_path = false;
  }
  return history;
}

// --pin N: the N most-used experts of each layer; --pin FILE: that history,
// pinning all but top_k slots of the cache.
Result<std::vector<std::vector<int>>> choose_pins(const EngineArgs& args, const History& history, int top_k, int cap,
                                                  const char* program) {
  std::vector<std::vector<int>> pins;
  if (args.pin.empty() || args.pin == "0") return pins;
  const auto count = parse_int(args.pin);
  const int n_pins = count ? static_cast<int>(*count) : std::max(0, cap - top_k);
  if (!history.loaded) {
    std::fprintf(stderr, "%s: no usage history at %s yet: running without pins (this run records one)\n", program,
                 history.path.c_str());
    return pins;
  }
  return experts::pins_for_every_layer(*history.loaded, n_pins);
}

// Where experts stream, the usage history's most used of each layer, as many
// as the cap holds (the pins among them: both rank by the same counts), read
// at load so the first tokens meet the cache the history's hit rate prices.
// None without a history (this run records one) or with --no-preload.
Result<std::vector<std::vector<int>>> preload_by_use(const History& history, const runtime::ModelOptions& options,
                                                     const runtime::ModelShape& shape) {
  const bool streams = options.cache_capacity > 0 && options.cache_capacity < shape.experts;
  if (!streams || !options.preload_experts || !history.loaded) return std::vector<std::vector<int>>{};
  return experts::pins_for_every_layer(*history.loaded, options.cache_capacity);
}

// Says what the load read by use (the engine skips it where no expert stays on the host).
void report_preload(const runtime::ModelOptions& options, const runtime::MoeModel& model, const char* program) {
  const std::uint64_t read = model.stats().preloaded_experts;
  if (!model.stats().experts_stream || read == 0) return;
  std::fprintf(stderr, "%s: preloaded %llu experts, the usage history's most used of each of %zu MoE layers (at most "
                       "cap %d each), so the first tokens meet a warm cache (--no-preload: read each on first use)\n",
               program, static_cast<unsigned long long>(read), options.preload_by_use.size(), options.cache_capacity);
}

// --verify: re-reads the whole data region against its checksums (the
// index's own is checked on every open).
Status verify_container(const std::string& model, const char* program) {
  const auto start = Clock::now();
  auto reader = container::ContainerReader::open(model);
  auto summary = reader ? reader->verify_checksums() : Result<container::VerifySummary>(reader.error());
  if (!summary) return make_error("--verify: " + summary.error().message);
  std::fprintf(stderr, "%s: verified %llu tensors and %llu expert records (%s) in %.2f s\n", program,
               static_cast<unsigned long long>(summary->tensors), static_cast<unsigned long long>(summary->records),
               format_bytes(summary->bytes).c_str(), coli::seconds_since(start));
  return Ok{};
}

// The knobs from --plan/--profile (pins and the RSS watchdog included;
// explicit knobs would fight it).
Status knobs_from_plan_or_profile(const EngineArgs& args, const runtime::ModelShape& shape, const History& history,
                                  const RunWorkload& workload, runtime::ModelOptions& options,
                                  std::optional<PlannedKnobs>& planned, const char* program, int* exit_code) {
  if (args.knobs_given) {
    *exit_code = cli::kExitUsage;
    return make_error("--threads/--cap/--ctx/--kv-type/--pin/--io-threads/--backend/--gpu/--gpu-batch come from the plan; "
                      "change them with coli-plan");
  }
  const int history_pins = history.loaded ? shape.experts : 0;
  bool refused = false;
  auto knobs = args.plan.empty() ? knobs_from_profile(args.profile, shape, history_pins, workload, &refused)
                                 : knobs_from_plan(args.plan, shape, workload.history, &refused, program);
  if (!knobs) {
    *exit_code = refused ? cli::kExitRefused : cli::kExitError;
    return make_error((refused ? "refused: " : "") + knobs.error().message);
  }
  planned = std::move(*knobs);
  options = planned->options;  // pins and the RSS watchdog (the plan's RAM plus its margin) included
  if (args.context_needed) {
    if (*args.context_needed > options.max_context) {
      *exit_code = cli::kExitRefused;
      return make_error("this needs a context of " + std::to_string(*args.context_needed) + " positions and " +
                        planned->source + " plans " + std::to_string(options.max_context) +
                        ": plan with coli-plan --ctx " + std::to_string(*args.context_needed));
    }
    options.max_context = *args.context_needed;
  }
  std::fprintf(stderr, "%s: knobs from %s: %d threads, cap %d, %d pins, rounds of %d tokens, ctx %d, backend %s%s\n",
               program, planned->source.c_str(), options.threads, planned->plan.plan.cap, planned->plan.plan.pins,
               options.prefill_round_tokens, options.max_context, options.backend.c_str(),
               options.backend == "cpu"
                   ? ""
                   : (" (prefill batches of " + std::to_string(options.gpu_batch_tokens) + " tokens)").c_str());
  return Ok{};
}

// The explicit knobs with pins from the usage history; no plan sized this
// run, so its memory is checked before loading and watched as a plan would.
Status knobs_by_hand(const EngineArgs& args, const runtime::ModelShape& shape, const History& history,
                     const RunWorkload& workload, runtime::ModelOptions& options, const char* program, int* exit_code) {
  if (args.context_needed) options.max_context = *args.context_needed;
  auto pins = choose_pins(args, history, shape.top_k, std::min(options.cache_capacity, shape.experts), program);
  // A conversation or a server (no prompt yet) is sized for a prompt that fills the context.
  const int prompt_tokens = workload.prompt_tokens > 0 ? workload.prompt_tokens : options.max_context;
  if (!pins) return pins.error();
  options.pins = std::move(*pins);
  std::optional<std::uint64_t> ram;
  if (!args.ram.empty() && !(ram = parse_size(args.ram))) {
    *exit_code = cli::kExitUsage;
    return make_error("--ram '" + args.ram + "' is not a size: give a unit, e.g. 16G or 512M");
  }
  bool refused = false;
  auto limit = check_memory_without_plan(shape, options, {prompt_tokens, workload.tokenizer, nullptr, program}, ram,
                                         args.no_memory_check, &refused);
  if (!limit) {
    *exit_code = refused ? cli::kExitRefused : cli::kExitError;
    return limit.error();
  }
  options.rss_limit_bytes = *limit;
  return Ok{};
}

}  // namespace

void add_engine_options(CLI::App& cmd, EngineArgs& args) {
  runtime::ModelOptions& o = args.options;
  cmd.add_option("--model", args.model, "Container written by coli convert")->required()->check(CLI::ExistingFile);
  cmd.add_option("--tokenizer", args.tokenizer,
                 "tokenizer.json or GGUF vocabulary (default: the one the container carries, else the one beside it)");
  cmd.add_option("--threads", o.threads, "Compute threads")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd.add_option("--cap", o.cache_capacity, "Expert slots per layer, pins included (default: all experts resident)")
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--pin", args.pin, "N: pin each layer's N most-used experts (usage history); FILE: that history, all but top_k slots");
  cmd.add_option("--plan", args.plan, "Take every knob from a plan written by coli-plan --out")->check(CLI::ExistingFile);
  cmd.add_option("--profile", args.profile,
                 "Plan on the spot from this device profile (default without --plan or knobs: this machine's, from the "
                 "profile search path)")
      ->check(CLI::ExistingFile);
  cmd.add_flag("--no-preload", args.no_preload,
               "Read every expert on first use. By default the load reads them all when every expert is resident, and "
               "where experts stream the usage history's most used (as many as the cache holds), so the first tokens "
               "wait for no reads or meet a warm cache");
  cmd.add_flag("--speculative-prefetch", args.speculative_prefetch,
               "When experts stream, run the next layer's router early and start reading its predicted experts (off by "
               "default: slower on random weights, see docs/engine.md)");
  cmd.add_flag("--verify", args.verify,
               "Before loading, re-read every tensor and expert record against its checksum (reads the whole file; the "
               "index's checksum is checked on every load)");
  cmd.add_option("--usage", args.usage, "Usage history file (default: MODEL.usage); every run adds its routing");
  // A validator of its own: CLI::Range lets NaN through (every comparison with it is false).
  const CLI::Validator unit_interval(
      [](std::string& text) -> std::string {
        const auto value = parse_double(text);
        return value && *value >= 0 && *value <= 1 ? "" : "must be a number in [0, 1], not '" + text + "'";
      },
      "in [0, 1]");
  cmd.add_option("--usage-decay", args.usage_decay, "Weight of the older history when this run is merged in")
      ->check(unit_interval)
      ->capture_default_str();
  if (!args.context_needed) {
    cmd.add_option("--ctx", o.max_context, "KV cache positions")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  }
  cmd.add_option("--rss-limit", args.rss_limit,
                 "RSS watchdog: past this many bytes the expert cache gives slots back (default: the plan's or the "
                 "knobs' RAM plus margin; 0 = off)");
  cmd.add_option("--ram", args.ram, "Without --plan/--profile: RAM this run may use, e.g. 8G (default: the live headroom)");
  cmd.add_flag("--no-memory-check", args.no_memory_check,
               "Without --plan/--profile: run even when the knobs need more RAM than is available");
  cmd.add_option("--io-threads", o.io_threads, "Threads reading expert misses (0 = read on the compute thread)")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  cmd.add_flag("--no-direct-io{false}", o.direct_io, "Read streamed experts through the page cache instead of O_DIRECT");
  cmd.add_option("--kernel", o.cpu_kernel, "CPU kernel: " + cpu_kernel_names_text() + " (default: best)")
      ->check(CLI::IsMember(cpu_kernel_names()));
  cmd.add_option("--backend", o.backend,
                 "Without --plan/--profile: cpu, vulkan or cuda (the whole decoder on GPU --gpu, every expert in VRAM)")
      ->check(CLI::IsMember({"cpu", "vulkan", "cuda"}))
      ->capture_default_str();
  cmd.add_option("--gpu", o.gpu_index, "Without --plan/--profile: the GPU's index for --backend vulkan or cuda")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cmd.add_option("--gpu-batch", o.gpu_batch_tokens,
                 "Without --plan/--profile: a prompt's tokens per GPU submission (default: the decoder's, 512 for cuda, "
                 "128 for vulkan; coli-plan --gpu-batch for a plan)")
      ->check(CLI::Range(1, planner::kMaxGpuBatchTokens));
  cmd.add_option("--gpu-kernel", o.gpu_kernel,
                 "GPU decoder arithmetic: exact = f32 activations for int8/int4 weights too (default: the decoder's "
                 "choice; cuda quantises a token's activations to int8 for them)")
      ->check(CLI::IsMember({"exact"}));
  cmd.add_option("--gpu-host-experts", o.gpu_host_experts,
                 "CUDA hybrid plans' prefill batches, for the experts outside VRAM that a batch chose: measured = per "
                 "expert, copy it up or compute its tokens on the CPU, whichever this run measured faster; upload or "
                 "cpu = always that")
      ->check(CLI::IsMember({"measured", "upload", "cpu"}))
      ->capture_default_str();
  cmd.add_option("--kv-type", args.kv_type,
                 "KV cache precision: " + kv_type_names_text() + " (f16 halves its memory and bandwidth; f32 is exact)")
      ->check(CLI::IsMember(kv_type_names()))
      ->capture_default_str();
}

void finish_engine_args(const CLI::App& cmd, EngineArgs& args, const char* program) {
  for (const char* knob : {"--threads", "--cap", "--ctx", "--kv-type", "--pin", "--io-threads", "--no-direct-io",
                           "--backend", "--gpu", "--gpu-batch"}) {
    const bool engine_knob = std::string_view(knob) != "--ctx" || !args.context_needed;
    args.knobs_given = args.knobs_given || (engine_knob && cmd.count(knob) > 0);
  }
  if (cmd.count("--gpu-batch") == 0) {  // the decoder's own default, as coli-plan plans it
    args.options.gpu_batch_tokens = default_gpu_batch_tokens(args.options.backend);
  }
  args.options.kv_type = *parse_kv_type(args.kv_type, "--kv-type");  // the check admits only valid names
  if (!args.plan.empty() || !args.profile.empty() || args.knobs_given || cmd.count("--kernel") > 0) return;
  // No --plan, --profile or knob: plan from this machine's profile when there
  // is one (said on stderr), else run with the engine's defaults.
  auto chosen = cli::choose_profile("");
  if (!chosen) {
    std::fprintf(stderr, "%s: %s; running with the engine's defaults\n", program, chosen.error().message.c_str());
    return;
  }
  args.profile = chosen->path.string();
  std::fprintf(stderr, "%s: profile %s (%s)\n", program, args.profile.c_str(), chosen->why.c_str());
}

void add_sampling_options(CLI::App& cmd, SamplingArgs& args) {
  SamplingOptions& o = args.options;
  cmd.add_option("--temperature", o.temperature, "0 = greedy; finite, >= 0")->capture_default_str();
  cmd.add_option("--top-p", o.top_p, "Nucleus sampling mass, in (0, 1]")->capture_default_str();
  cmd.add_option("--top-k", o.top_k, "Sample from the k most probable tokens only (0 = all)")->capture_default_str();
  cmd.add_option("--min-p", o.min_p, "Drop tokens below this share of the most probable's probability, in [0, 1]")
      ->capture_default_str();
  cmd.add_option("--repeat-penalty", o.repeat_penalty, "Divide a recent token's logit by this (multiply when negative); 1 = off")
      ->capture_default_str();
  cmd.add_option("--repeat-last-n", o.repeat_last_n, "Recent tokens the penalty looks at (the prompt's included)")
      ->capture_default_str();
  cmd.add_option("--seed", o.seed, "Sampling seed")->capture_default_str();
}

void finish_sampling_args(const CLI::App& cmd, SamplingArgs& args) {
  for (const char* name : {"--temperature", "--top-p", "--top-k", "--min-p", "--repeat-penalty", "--repeat-last-n", "--seed"}) {
    if (cmd.count(name) > 0) args.given.emplace_back(name);
  }
}

std::string apply_generation_defaults(const std::string& text, SamplingArgs& sampling) {
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return "";
  // do_sample false (transformers' default) means greedy: nothing to apply.
  const auto do_sample = config.find("do_sample");
  if (do_sample == config.end() || !do_sample->is_boolean() || !do_sample->get<bool>()) return "";
  std::string applied;
  // A key the file leaves out, or gives an absurd value, samples as
  // transformers' GenerationConfig defaults it (`sampled_default`), as the
  // model's authors ran it: temperature 1, top_k 50, top_p 1.
  auto take = [&](const char* key, const char* option, auto& field, double low, double high,
                  std::optional<double> sampled_default) {
    if (std::find(sampling.given.begin(), sampling.given.end(), option) != sampling.given.end()) return;
    const auto it = config.find(key);
    const double in_file = it != config.end() && it->is_number() ? it->get<double>() : std::nan("");
    const bool usable = in_file >= low && in_file <= high;  // NaN: absent, not a number
    if (!usable && !sampled_default) return;
    const double value = usable ? in_file : *sampled_default;
    field = static_cast<std::remove_reference_t<decltype(field)>>(value);
    char shown[32];
    std::snprintf(shown, sizeof shown, "%g", value);
    applied += (applied.empty() ? "" : ", ") + std::string(key) + " " + shown + (usable ? "" : " (transformers' default)");
  };
  SamplingOptions& o = sampling.options;
  take("temperature", "--temperature", o.temperature, 0, 100, 1.0);
  take("top_p", "--top-p", o.top_p, 1e-6, 1, std::nullopt);  // transformers' 1 is the engine's
  take("top_k", "--top-k", o.top_k, 0, 1 << 24, 50.0);
  take("repetition_penalty", "--repeat-penalty", o.repeat_penalty, 1e-3, 100, std::nullopt);  // 1 both
  return applied;
}

namespace {

// The tokenizer, from the container's index when it carries one.
Result<Tokenizer> pick_tokenizer(const fs::path& model, const std::string& explicit_path,
                                 const container::ContainerIndex& index) {
  if (!explicit_path.empty()) return Tokenizer::from_file(explicit_path);
  const auto* carried = index.find_runtime_file("tokenizer.json");
  if (!carried) carried = index.find_runtime_file("tokenizer.gguf");
  if (carried) {
    auto tokenizer = Tokenizer::from_file_bytes(carried->name, carried->bytes, model.string() + " (its carried " + carried->name + ")");
    if (tokenizer) {
      if (const auto* generation = index.find_runtime_file("generation_config.json")) apply_special_ids(*tokenizer, generation->bytes);
    }
    return tokenizer;
  }
  for (const fs::path& path : {model.parent_path() / "tokenizer.json", model.parent_path() / "tokenizer.gguf"}) {
    if (fs::exists(path)) return Tokenizer::from_file(path);
  }
  return make_error(model.string() + " carries no tokenizer and none is next to it (looked for tokenizer.json, "
                    "tokenizer.gguf): pass --tokenizer FILE or --prompt-ids, or convert again with --tokenizer");
}

}  // namespace

Result<ModelTokenizer> load_tokenizer(const fs::path& model, const std::string& explicit_path) {
  // One reading of the container's index for both (it holds the carried files).
  auto container = container::ContainerReader::open(model);
  if (!container && explicit_path.empty()) return container.error();
  const container::ContainerIndex empty;
  const container::ContainerIndex& index = container ? container->index() : empty;
  auto tokenizer = pick_tokenizer(model, explicit_path, index);
  if (!tokenizer) return tokenizer.error();
  ModelTokenizer loaded{std::move(*tokenizer), {}};
  if (const auto* carried = index.find_runtime_file("generation_config.json")) {
    loaded.generation_config = carried->bytes;
  } else if (auto beside = read_text_file(model.parent_path() / "generation_config.json")) {
    loaded.generation_config = std::move(*beside);
  }
  return loaded;
}

Status save_history(History& history, const runtime::MoeModel& model, double decay) {
  if (!history.usable_path) return Ok{};
  auto run = runtime::usage_history_of(model);
  if (!run) return run.error();
  if (history.loaded) {
    if (Status s = history.loaded->merge(*run, decay); !s) return s;
    return history.loaded->save(history.path);
  }
  return run->save(history.path);
}

Result<LoadedEngine> load_engine(const EngineArgs& args, const RunWorkload& workload, const char* program,
                                 int* exit_code) {
  const auto load_start = Clock::now();
  *exit_code = cli::kExitError;
  // The shape (from the container's index alone) decides pins and plans;
  // the weights are loaded once, with the final knobs.
  auto shape = runtime::MoeModel::read_shape(args.model);
  if (!shape) return shape.error();
  if (args.verify) {
    if (Status s = verify_container(args.model, program); !s) return s.error();
  }
  LoadedEngine engine;
  const bool pin_is_file = !args.pin.empty() && !parse_int(args.pin);
  engine.history = open_history(pin_is_file ? args.pin : (args.usage.empty() ? args.model + ".usage" : args.usage),
                                runtime::usage_history_key(*shape), program);
  RunWorkload sized = workload;
  sized.history = engine.history.loaded ? &*engine.history.loaded : nullptr;
  sized.program = program;
  runtime::ModelOptions options = args.options;
  const Status knobs = !args.plan.empty() || !args.profile.empty()
                           ? knobs_from_plan_or_profile(args, *shape, engine.history, sized, options, engine.planned, program, exit_code)
                           : knobs_by_hand(args, *shape, engine.history, sized, options, program, exit_code);
  if (!knobs) return knobs.error();
  *exit_code = cli::kExitError;
  if (args.rss_limit) options.rss_limit_bytes = *args.rss_limit;
  options.op_timing = args.op_times;
  // Speed only (no memory, no tokens): given after the plan's knobs, never by it.
  options.preload_experts = !args.no_preload;
  auto preload = preload_by_use(engine.history, options, *shape);
  if (!preload) return preload.error();
  options.preload_by_use = std::move(*preload);
  options.speculative_prefetch = args.speculative_prefetch;
  options.on_warning = [program](const std::string& message) { std::fprintf(stderr, "%s: WARNING: %s\n", program, message.c_str()); };
  auto model = runtime::MoeModel::load(args.model, options);
  if (!model) return model.error();
  report_preload(options, *model, program);
  engine.model.emplace(std::move(*model));
  engine.load_seconds = coli::seconds_since(load_start);
  return engine;
}

}  // namespace coli::tools
