// What `coli run` and `coli serve` share before the first token: the engine's
// command-line options, the tokenizer (carried by the container or beside
// it) with the model's generation defaults, the knobs (from --plan, from a
// profile planned on the spot, or given by hand and checked against the live
// headroom), the usage history, and the loaded model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "coli/base/result.h"
#include "coli/experts/usage_history.h"
#include "coli/runtime/moe_model.h"
#include "coli/tokenizer/tokenizer.h"
#include "run_plan.h"
#include "sampler.h"

namespace coli::tools {

struct EngineArgs {
  std::string model, tokenizer, pin, usage, plan, profile;
  std::string kv_type = "f16";  // --kv-type (a knob: the plan decides it otherwise)
  std::string ram;              // --ram SIZE: RAM a run without a plan may use (default: the live headroom)
  bool knobs_given = false;     // --threads/--cap/--ctx/... given explicitly
  bool verify = false;          // --verify: every checksum before loading
  bool no_preload = false;            // --no-preload: ModelOptions::preload_experts off
  bool speculative_prefetch = false;  // --speculative-prefetch
  bool no_memory_check = false;       // --no-memory-check: run without a plan even when it does not fit
  bool op_times = false;              // --op-times (coli run only)
  std::optional<std::uint64_t> rss_limit;  // --rss-limit bytes (the watchdog's limit)
  double usage_decay = 0.9;
  runtime::ModelOptions options;
  // coli perplexity: the KV positions its window needs, whatever the knobs
  // say (no --ctx knob then). A plan with fewer positions is refused (its
  // memory was priced for them); with more, the cache is cut to this.
  std::optional<int> context_needed;
};

// The options both commands take (--model, --tokenizer, --plan, --profile,
// the knobs, --usage ...), added to `command` and stored in `args`.
void add_engine_options(CLI::App& command, EngineArgs& args);
// After parsing: which knobs were given, the GPU batch default, --kv-type;
// with no plan, profile or knob, this machine's profile when there is one
// (said on stderr as `program: profile ...`).
void finish_engine_args(const CLI::App& command, EngineArgs& args, const char* program);

// The sampling options (--temperature, --top-p, --top-k, --min-p,
// --repeat-penalty, --repeat-last-n, --seed); `given` lists which were set.
struct SamplingArgs {
  SamplingOptions options{0, 1, 1};
  std::vector<std::string> given;  // option names, e.g. "--temperature"
};
void add_sampling_options(CLI::App& command, SamplingArgs& args);
void finish_sampling_args(const CLI::App& command, SamplingArgs& args);

// The model's own sampling defaults (generation_config.json: do_sample,
// temperature, top_p, top_k, repetition_penalty), applied to the options not
// given on the command line. Returns what it set, e.g. "temperature 0.6,
// top_p 0.95", or "" when nothing (no file, greedy, or all given).
std::string apply_generation_defaults(const std::string& generation_config_json, SamplingArgs& sampling);

// The tokenizer: --tokenizer, else the one the container carries (coli
// convert; EOS/BOS from its generation_config.json where the tokenizer names
// none), else tokenizer.json or tokenizer.gguf beside the container; and the
// model's generation_config.json (the carried one, else the one beside it).
struct ModelTokenizer {
  Tokenizer tokenizer;
  std::string generation_config;  // its text; "" when none
};
Result<ModelTokenizer> load_tokenizer(const std::filesystem::path& model, const std::string& explicit_path);

// The usage history beside the model: what picks pins, what a run adds to.
struct History {
  std::filesystem::path path;
  std::optional<experts::UsageHistory> loaded;  // nullopt: none yet, or unusable
  bool usable_path = true;                      // false: a file of another model / corrupt: leave it alone
};
Status save_history(History& history, const runtime::MoeModel& model, double decay);

// A model loaded with its final knobs.
struct LoadedEngine {
  std::optional<runtime::MoeModel> model;
  std::optional<PlannedKnobs> planned;  // with --plan/--profile
  History history;
  double load_seconds = 0;
};

// Reads the shape, resolves the knobs for `workload` (its prompt sizes the
// plan), loads. On failure `exit_code` says how to exit (kExitError,
// kExitUsage, kExitRefused) and the error says why; messages on the way go to
// stderr prefixed by `program`.
Result<LoadedEngine> load_engine(const EngineArgs& args, const RunWorkload& workload, const char* program,
                                 int* exit_code);

}  // namespace coli::tools
