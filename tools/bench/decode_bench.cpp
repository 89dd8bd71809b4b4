// coli-decode-bench: llama-bench's speed tests (speed_tests.h: pp of -p
// tokens, tg of -n tokens at each -d depth) for a container under MoeModel,
// each decode figure next to the memory-bandwidth bound (bytes one decode
// step touches / measured read bandwidth). Every configuration (threads x
// cap x kernel) is loaded once per repeat and run once, interleaved so drift
// in the machine spreads over all of them.
//
// One run: load the model, warm up with one untimed prefill of as many other
// tokens (it routes to most experts: "resident" (cap all) becomes resident,
// a streaming cache reaches its steady state without the timed prompt's own
// experts), then one pass of the tests.
// Streamed experts are read with O_DIRECT where the filesystem allows it
// (the engine's default), so "disk MiB/tok" then comes from the device.
// --op-times adds the op-level time breakdown (op_timing.h) of the first
// configuration: --op-tokens decode tokens from depth 0 and from
// --op-depth, and one prefill pass of -p tokens.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "coli/base/cpu_kernels.h"
#include "coli/cli/command_line.h"

#include "bytes_per_token.h"
#include "speed_measure.h"
#include "sweep_grid.h"
#include "coli/base/text.h"
#include "coli/container/container.h"
#include "coli/probe/profile_io.h"
#include "coli/base/files.h"
#include "coli/planner/plan.h"
#include "coli/runtime/moe_model.h"
#include "coli/runtime/plan_options.h"

namespace {

struct Args {
  std::string model, profile;
  double bandwidth_gb_s = 0;
  std::vector<int> threads{1};
  std::vector<std::string> caps{"all"};  // "all" or slots per layer
  std::vector<std::string> kernels{""};
  coli::bench::SpeedTests tests;
  bool op_times = false;
  int op_depth = 4096;
  int op_tokens = 16;  // decode tokens averaged per --op-times table
  int op_prefills = 1;  // prefill passes averaged in the --op-times prefill table
  std::string batch_log;  // --op-times' prefill passes, each expert batch (op_timing.h's expert_batch_log)
  std::string speculative_prefetch = "off";  // ModelOptions::speculative_prefetch
  int pins = 0;       // pinned experts per layer, the most used of --usage (as a plan's pins)
  std::string usage;  // usage history the pins come from
  std::shared_ptr<const coli::experts::UsageHistory> history;  // loaded from usage
};

struct Config {
  int threads, cap;  // cap: slots per layer; the expert count = all resident, as in a plan
  std::string kernel;
};

struct Run {
  double prefill_tok_s = 0;
  std::vector<double> decode_tok_s;  // per depth
  coli::bench::ExpertTraffic traffic;  // timed decode steps
  std::uint64_t rss = 0;
  std::string kernel;
};

std::uint64_t rss_bytes(const char* field) {  // "VmRSS:" or "VmHWM:" from /proc/self/status, in bytes
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(std::string(field).size())) * 1024;
  }
  return 0;
}

// A configuration is a plan of its own (the engine's defaults for what the
// bench does not vary; no memory budget, so no RSS watchdog), run through
// the one plan-to-engine translation.
coli::Result<coli::runtime::ModelOptions> options_of(const Args& args, const Config& config,
                                                    const coli::runtime::ModelShape& shape) {
  const coli::runtime::ModelOptions defaults;
  coli::planner::Plan plan;
  plan.threads = config.threads;
  plan.cap = config.cap;
  plan.pins = config.cap < shape.experts ? args.pins : 0;  // a pin keeps an expert from eviction; at cap all nothing is evicted
  plan.n_experts = shape.experts;
  plan.cpu_kernel = config.kernel;
  plan.ctx = std::max(args.tests.context(), args.op_times ? args.op_depth + args.op_tokens : 0);
  plan.prefill_round_tokens = defaults.prefill_round_tokens;
  plan.io_threads = defaults.io_threads;
  plan.direct_io = defaults.direct_io;
  auto options = coli::runtime::options_from_plan(plan, shape, args.history.get());
  if (options) options->speculative_prefetch = args.speculative_prefetch == "on";
  return options;
}

coli::Result<Run> run_once(const Args& args, const Config& config, const coli::runtime::ModelShape& shape,
                           const coli::bench::BenchTokens& tokens) {
  auto options = options_of(args, config, shape);
  if (!options) return options.error();
  auto model = coli::runtime::MoeModel::load(args.model, *options);
  if (!model) return model.error();
  if (auto warm = coli::bench::time_prefill(*model, tokens.warmup); !warm) return warm.error();
  auto pass = coli::bench::measure_pass(*model, args.tests, tokens);
  if (!pass) return pass.error();
  Run run{args.tests.prefill_tokens / pass->prefill_seconds, {}, pass->decode_traffic, rss_bytes("VmRSS:"), model->stats().cpu_kernel};
  for (double seconds : pass->decode_seconds) run.decode_tok_s.push_back(args.tests.decode_tokens / seconds);
  const coli::runtime::ModelStats& after = model->stats();
  if (options->speculative_prefetch) {
    std::fprintf(stderr, "  speculative prefetch: %.1f%% of predicted experts routed to (%llu of %llu), %llu reads started, %llu used\n",
                 after.predicted_experts ? 100.0 * static_cast<double>(after.predicted_correct) / static_cast<double>(after.predicted_experts) : 0.0,
                 static_cast<unsigned long long>(after.predicted_correct), static_cast<unsigned long long>(after.predicted_experts),
                 static_cast<unsigned long long>(after.prefetch_reads), static_cast<unsigned long long>(after.prefetch_reads_used));
  }
  return run;
}

// The op-level breakdown of `config`: per-token tables of --op-tokens decode
// tokens from depth 0 and from --op-depth, and of --op-prefills prefill
// passes, whose expert batches go to --batch-log (records of record_bytes).
coli::Status print_op_times(const Args& args, const Config& config, const coli::runtime::ModelShape& shape,
                            const coli::bench::BenchTokens& tokens, std::uint64_t record_bytes) {
  auto options = options_of(args, config, shape);
  if (!options) return options.error();
  options->op_timing = true;
  auto model = coli::runtime::MoeModel::load(args.model, *options);
  if (!model) return model.error();
  coli::runtime::OpTimes& times = *model->op_times();
  if (auto warm = coli::bench::time_prefill(*model, tokens.warmup); !warm) return warm.error();
  std::vector<std::int32_t> context = tokens.context;
  for (int i = static_cast<int>(context.size()); i < args.op_depth + args.op_tokens; ++i) context.push_back(tokens.prompt[static_cast<std::size_t>(i) % tokens.prompt.size()]);
  std::printf("\nop-level time breakdown (threads %d, cap %d, wall time on the calling thread)\n", config.threads, config.cap);
  std::vector<float> logits(static_cast<std::size_t>(model->vocab_size()));
  for (int depth : {0, args.op_depth}) {
    model->reset();
    if (depth > 0) {
      if (coli::Status s = model->forward(std::span(context).first(static_cast<std::size_t>(depth)), 0, logits); !s) return s;
    }
    times.clear();  // --op-tokens single-token passes from `depth` on: one token's table at 16 threads was noisy
    for (int i = 0; i < args.op_tokens; ++i) {
      const auto at = static_cast<std::size_t>(depth + i);
      if (coli::Status s = model->forward(std::span(&context[at], 1), depth + i, logits); !s) return s;
    }
    std::printf("\n%s", coli::runtime::op_times_table(times, "decode tokens at depth " + std::to_string(depth) + ".." +
                                                                  std::to_string(depth + args.op_tokens - 1)).c_str());
  }
  times.clear();
  times.keep_batches(!args.batch_log.empty());
  for (int pass = 0; pass < args.op_prefills; ++pass) {
    if (auto prefill = coli::bench::time_prefill(*model, tokens.prompt); !prefill) return prefill.error();
  }
  const std::string passes = args.op_prefills == 1 ? "one prefill pass" : std::to_string(args.op_prefills) + " prefill passes";
  std::printf("\n%s", coli::runtime::op_times_table(times, passes + " of " + std::to_string(args.tests.prefill_tokens) + " tokens").c_str());
  if (args.batch_log.empty()) return coli::Ok{};
  if (coli::Status s = coli::write_file_atomically(args.batch_log, coli::runtime::expert_batch_log(times, record_bytes)); !s) return s;
  std::printf("\n%zu expert batches of the prefill passes written to %s\n", times.batches().size(), args.batch_log.c_str());
  return coli::Ok{};
}

// Read bandwidth (GB/s) at `threads` from a device profile: the "read" point
// with threads over all kinds, else the nearest thread count measured.
std::optional<double> profile_bandwidth(const coli::DeviceProfile& profile, int threads, int& measured_threads) {
  if (!profile.measurements.memory) return std::nullopt;
  const coli::MemoryBandwidthPoint* best = nullptr;
  for (const auto& point : profile.measurements.memory->points) {
    if (point.kernel != "read" || point.kind_rank != -1) continue;
    if (!best || std::abs(point.threads - threads) < std::abs(best->threads - threads)) best = &point;
  }
  if (!best) return std::nullopt;
  measured_threads = best->threads;
  return best->gb_per_s.median;
}

std::string mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", bytes / (1024.0 * 1024.0));
  return text;
}

struct ContainerFacts {
  std::vector<coli::bench::TokenTraffic> traffic;  // per depth
  coli::runtime::ModelShape shape;
  std::uint64_t record_bytes = 0;  // one expert's record
};

// Prints what the container is and what one decode step touches at each depth.
coli::Result<ContainerFacts> describe_container(const Args& args) {
  auto reader = coli::container::ContainerReader::open(args.model);
  if (!reader) return reader.error();
  ContainerFacts facts;
  const auto& experts = reader->index().experts;
  facts.record_bytes = experts.record_bytes;
  std::printf("model %s: %s on disk, %s, experts %s (%u layers x %u, record %s)\n", args.model.c_str(),
              coli::format_bytes(std::filesystem::file_size(args.model)).c_str(), reader->index().source.c_str(),
              std::string(coli::name_of(experts.format)).c_str(), experts.layers, experts.experts, coli::format_bytes(experts.record_bytes).c_str());
  for (int depth : args.tests.depths) {
    auto traffic = coli::bench::decode_traffic(*reader, depth, args.tests.decode_tokens);
    if (!traffic) return traffic.error();
    std::printf("bytes touched per decode token at depth %d: %s\n", depth, coli::bench::describe_traffic(*traffic).c_str());
    facts.traffic.push_back(*traffic);
  }
  std::printf("tests: %s and %d decode tokens at depths", args.tests.prefill_label().c_str(), args.tests.decode_tokens);
  for (int depth : args.tests.depths) std::printf(" %d", depth);
  std::printf(", after one untimed prefill per run; %d repeats\n", args.tests.repeats);
  std::printf("'disk MiB/tok': bytes read for expert-cache misses while decoding (O_DIRECT when experts stream and the\n"
              "filesystem allows it, else through the page cache)\n\n");
  auto shape = coli::runtime::MoeModel::read_shape(args.model);
  if (!shape) return shape.error();
  facts.shape = std::move(*shape);
  return facts;
}

// One row: a test's median tok/s and spread, and for decode the bound.
void print_row(const Config& config, const std::string& cap, const std::string& kernel, const std::string& test,
               const std::vector<double>& speeds, const std::string& decode_columns) {
  const coli::bench::MetricStats stats = coli::bench::metric_stats(speeds);
  std::printf("%7d %5s %12s %-14s %9.2f %6.0f%% %s\n", config.threads, cap.c_str(), kernel.c_str(), test.c_str(),
              stats.median, 100.0 * stats.spread, decode_columns.c_str());
}

void print_results(const Args& args, const ContainerFacts& facts, const std::optional<coli::DeviceProfile>& profile,
                   const std::vector<Config>& configs, const std::vector<std::vector<Run>>& runs) {
  const coli::bench::SpeedTests& tests = args.tests;
  std::printf("%7s %5s %12s %-14s %9s %7s %8s %12s %15s %10s %8s %6s %9s\n", "threads", "cap", "kernel", "test", "tok/s",
              "spread", "hit rate", "disk MiB/tok", "touched MiB/tok", "bandwidth", "bound", "ratio", "RSS MiB");
  for (std::size_t c = 0; c < configs.size(); ++c) {
    coli::bench::ExpertTraffic sum;
    std::uint64_t rss = 0;
    std::vector<double> prefill;
    for (const Run& r : runs[c]) {
      prefill.push_back(r.prefill_tok_s);
      sum += r.traffic;
      rss = std::max(rss, r.rss);
    }
    const std::string cap = configs[c].cap >= facts.shape.experts ? "all" : std::to_string(configs[c].cap);
    const std::string& kernel = runs[c].front().kernel;
    print_row(configs[c], cap, kernel, tests.prefill_label(), prefill, "");
    const double lookups = static_cast<double>(sum.hits + sum.misses);
    const double decoded = static_cast<double>(runs[c].size() * tests.depths.size()) * tests.decode_tokens;
    int measured_threads = configs[c].threads;
    std::optional<double> gb_s = args.bandwidth_gb_s > 0 ? std::optional(args.bandwidth_gb_s) : std::nullopt;
    if (!gb_s && profile) gb_s = profile_bandwidth(*profile, configs[c].threads, measured_threads);
    for (std::size_t d = 0; d < tests.depths.size(); ++d) {
      std::vector<double> speeds;
      for (const Run& r : runs[c]) speeds.push_back(r.decode_tok_s[d]);
      const double touched = static_cast<double>(facts.traffic[d].total());
      std::string bandwidth = "-", bound = "-", ratio = "-";
      if (gb_s) {
        const double bound_tok_s = *gb_s * 1e9 / touched;
        char text[64];
        std::snprintf(text, sizeof text, "%.1f GB/s%s", *gb_s, measured_threads != configs[c].threads ? "*" : "");
        bandwidth = text;
        std::snprintf(text, sizeof text, "%.1f", bound_tok_s);
        bound = text;
        std::snprintf(text, sizeof text, "%.0f%%", 100.0 * coli::bench::metric_stats(speeds).median / bound_tok_s);
        ratio = text;
      }
      char columns[160];
      std::snprintf(columns, sizeof columns, "%7.1f%% %12s %15s %10s %8s %6s %9s", lookups > 0 ? 100.0 * static_cast<double>(sum.hits) / lookups : 0.0,
                    mib(static_cast<double>(sum.bytes_read) / decoded).c_str(), mib(touched).c_str(), bandwidth.c_str(),
                    bound.c_str(), ratio.c_str(), mib(static_cast<double>(rss)).c_str());
      print_row(configs[c], cap, kernel, tests.decode_label(tests.depths[d]), speeds, columns);
    }
  }
  std::printf("\ntok/s: median of the repeats; spread: (max - min) / median; pp: one forward pass of the prompt;\n"
              "tg @ dD: decode after D tokens are in the KV cache; hit rate and disk: over every decode test;\n"
              "bound: bandwidth / touched bytes at that depth; ratio: tok/s / bound; RSS: resident set at the end of a\n"
              "run (peak of the process %s)%s\n",
              coli::format_bytes(rss_bytes("VmHWM:")).c_str(),
              args.bandwidth_gb_s > 0 ? "" : "; * = bandwidth measured at another thread count");
}

int fail(const std::string& message, int status = 1) {
  std::fprintf(stderr, "coli-decode-bench: %s\n", message.c_str());
  return status;
}

int run_bench(Args args) {
  std::optional<coli::DeviceProfile> profile;
  if (!args.profile.empty()) {
    auto loaded = coli::load_profile(args.profile);
    if (!loaded) return fail(loaded.error().message);
    profile = std::move(*loaded);
  }
  if (args.pins > 0 && args.usage.empty()) return fail("--pins needs --usage: the usage history says which experts to pin", 2);
  auto facts = describe_container(args);
  if (!facts) return fail(facts.error().message);
  if (!args.usage.empty()) {
    auto history = coli::experts::UsageHistory::load(args.usage, coli::runtime::usage_history_key(facts->shape));
    if (!history) return fail(history.error().message);
    args.history = std::make_shared<const coli::experts::UsageHistory>(std::move(*history));
  }
  const auto caps = coli::bench::parse_caps(args.caps, facts->shape.experts, "--cap");
  if (!caps) return fail(caps.error().message, 2);
  auto reader = coli::container::ContainerReader::open(args.model);
  if (!reader) return fail(reader.error().message);
  const coli::container::TensorEntry* embedding = reader->find_tensor("model.embed_tokens.weight");
  if (!embedding) return fail(args.model + ": no model.embed_tokens.weight");
  const auto tokens = coli::bench::bench_tokens(args.tests, static_cast<int>(embedding->shape.at(0)));

  std::vector<Config> configs;
  for (int threads : args.threads)
    for (int cap : *caps)
      for (const std::string& kernel : args.kernels) configs.push_back({threads, cap, kernel});
  std::vector<std::vector<Run>> runs(configs.size());
  for (int repeat = 0; repeat < args.tests.repeats; ++repeat) {
    for (std::size_t c = 0; c < configs.size(); ++c) {
      auto run = run_once(args, configs[c], facts->shape, tokens);
      if (!run) return fail(run.error().message);
      std::fprintf(stderr, "  repeat %d: threads %d cap %d kernel %s: %s %.2f tok/s, %s %.2f tok/s\n", repeat + 1,
                   configs[c].threads, configs[c].cap, run->kernel.c_str(), args.tests.prefill_label().c_str(),
                   run->prefill_tok_s, args.tests.decode_label(args.tests.depths.front()).c_str(), run->decode_tok_s.front());
      runs[c].push_back(std::move(*run));
    }
  }
  print_results(args, *facts, profile, configs, runs);
  if (args.op_times) {
    if (coli::Status s = print_op_times(args, configs.front(), facts->shape, tokens, facts->record_bytes); !s) return fail(s.error().message);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"coli-decode-bench: prefill and decode tok/s (llama-bench's -p, -n, -d), decode against the memory-bandwidth bound"};
  app.add_option("--model", args.model, "Container (coli convert or coli-make-synthetic)")->required()->check(CLI::ExistingFile);
  app.add_option("--threads", args.threads, "Thread counts, comma-separated")->delimiter(',')->capture_default_str();
  app.add_option("--cap", args.caps, "Expert cache slots per layer, comma-separated ('all' = every expert resident)")->delimiter(',')->capture_default_str();
  app.add_option("--kernel", args.kernels, "CPU kernels, comma-separated (default: best; " + coli::cpu_kernel_names_text() + ")")
      ->delimiter(',')
      ->check(CLI::IsMember(coli::cpu_kernel_names()));
  coli::bench::add_speed_options(app, args.tests);
  auto* profile = app.add_option("--profile", args.profile, "Device profile (coli-probe) with memory bandwidth")->check(CLI::ExistingFile);
  app.add_option("--bandwidth", args.bandwidth_gb_s, "Memory read bandwidth in GB/s (instead of --profile)")->excludes(profile);
  app.add_flag("--op-times", args.op_times,
               "Also print the op-level time breakdown (first configuration): a decode token at depth 0 and at "
               "--op-depth, and one prefill pass of -p tokens");
  app.add_option("--speculative-prefetch", args.speculative_prefetch,
                 "Run the next layer's router early and read its predicted experts (streaming only): on|off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--pins", args.pins, "Pinned experts per layer at caps below all: the most used of each layer in --usage")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--usage", args.usage, "Usage history (MODEL.usage from coli run or coli-sweep) the pins come from")
      ->check(CLI::ExistingFile);
  app.add_option("--op-depth", args.op_depth, "Depth of the second --op-times decode table")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--op-tokens", args.op_tokens, "Decode tokens averaged in each --op-times decode table")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--op-prefills", args.op_prefills,
                 "Prefill passes averaged in the --op-times prefill table (a small model's pass takes milliseconds)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--batch-log", args.batch_log,
                 "With --op-times: write each expert batch of the prefill passes (MoE layer, seconds, each expert's rows) "
                 "to this file, for tools/bench/expert_batch_rates.py")
      ->needs(app.get_option("--op-times"));
  coli::cli::add_version_flag(app, "coli-decode-bench");
  if (const auto done = coli::cli::parse(app, argc, argv)) return *done;
  return run_bench(args);
}
