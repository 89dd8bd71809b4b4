// coli-decode-bench: decode speed of a container under MoeModel, next to the
// memory-bandwidth bound (bytes one decode step touches / measured read
// bandwidth). Every configuration (threads x cap x kernel) is run several
// times, interleaved so drift in the machine spreads over all of them.
//
// One run: load the model, warm up with the prompt and N greedy decode
// tokens, reset the KV cache and replay the same prompt and tokens, timing
// the N decode steps. The warm-up makes "resident" (cap all = experts)
// really resident (the hit rate column shows 100%), and leaves a streaming
// cache in its steady state. Streamed experts are read with O_DIRECT where
// the filesystem allows it (the engine's default), so "disk MiB/tok" then
// comes from the device; with every expert resident nothing is read.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "coli/base/cpu_kernels.h"
#include "coli/cli/command_line.h"

#include "bytes_per_token.h"
#include "sweep_grid.h"
#include "coli/base/text.h"
#include "coli/container/container.h"
#include "coli/probe/profile_io.h"
#include "coli/planner/plan.h"
#include "coli/runtime/moe_model.h"
#include "coli/runtime/plan_options.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string model, profile;
  double bandwidth_gb_s = 0;
  std::vector<int> threads{1};
  std::vector<std::string> caps{"all"};  // "all" or slots per layer
  std::vector<std::string> kernels{""};
  int prompt_tokens = 16, decode_tokens = 64, repeats = 3, context = 0;  // 0: prompt + tokens
  std::string speculative_prefetch = "off";  // ModelOptions::speculative_prefetch
};

struct Config {
  int threads, cap;  // cap: slots per layer; the expert count = all resident, as in a plan
  std::string kernel;
};

struct Run {
  double tokens_per_s = 0;
  std::uint64_t hits = 0, misses = 0, bytes_read = 0, rss = 0;
  std::string kernel;
};

std::uint64_t rss_bytes(const char* field) {  // "VmRSS:" or "VmHWM:" from /proc/self/status, in bytes
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(std::string(field).size())) * 1024;
  }
  return 0;
}

std::int32_t argmax(const std::vector<float>& logits) {
  return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// A configuration is a plan of its own (the engine's defaults for what the
// bench does not vary; no memory budget, so no RSS watchdog), run through
// the one plan-to-engine translation.
coli::Result<Run> run_once(const Args& args, const Config& config, const coli::runtime::ModelShape& shape,
                           const std::vector<std::int32_t>& prompt) {
  const coli::runtime::ModelOptions defaults;
  coli::planner::Plan plan;
  plan.threads = config.threads;
  plan.cap = config.cap;
  plan.n_experts = shape.experts;
  plan.cpu_kernel = config.kernel;
  plan.ctx = args.context > 0 ? args.context : args.prompt_tokens + args.decode_tokens;
  plan.prefill_round_tokens = defaults.prefill_round_tokens;
  plan.io_threads = defaults.io_threads;
  plan.direct_io = defaults.direct_io;
  auto options = coli::runtime::options_from_plan(plan, shape);
  if (!options) return options.error();
  options->speculative_prefetch = args.speculative_prefetch == "on";
  auto model = coli::runtime::MoeModel::load(args.model, *options);
  if (!model) return model.error();
  std::vector<float> logits(static_cast<std::size_t>(model->vocab_size()));
  const int start = static_cast<int>(prompt.size());

  // Warm-up: the greedy continuation, whose experts the timed replay will need.
  std::vector<std::int32_t> continuation;
  if (coli::Status s = model->forward(prompt, 0, logits); !s) return s.error();
  for (int i = 0; i < args.decode_tokens; ++i) {
    continuation.push_back(argmax(logits));
    if (coli::Status s = model->forward(std::span(&continuation.back(), 1), start + i, logits); !s) return s.error();
  }

  model->reset();
  if (coli::Status s = model->forward(prompt, 0, logits); !s) return s.error();
  const coli::runtime::ModelStats before = model->stats();
  const auto begin = Clock::now();
  for (int i = 0; i < args.decode_tokens; ++i) {
    if (coli::Status s = model->forward(std::span(&continuation[static_cast<std::size_t>(i)], 1), start + i, logits); !s) {
      return s.error();
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  const coli::runtime::ModelStats& after = model->stats();
  if (options->speculative_prefetch) {
    std::fprintf(stderr, "  speculative prefetch: %.1f%% of predicted experts routed to (%llu of %llu), %llu reads started, %llu used\n",
                 after.predicted_experts ? 100.0 * static_cast<double>(after.predicted_correct) / static_cast<double>(after.predicted_experts) : 0.0,
                 static_cast<unsigned long long>(after.predicted_correct), static_cast<unsigned long long>(after.predicted_experts),
                 static_cast<unsigned long long>(after.prefetch_reads), static_cast<unsigned long long>(after.prefetch_reads_used));
  }
  return Run{args.decode_tokens / seconds, after.expert_hits - before.expert_hits,
             after.expert_misses - before.expert_misses, after.expert_bytes_read - before.expert_bytes_read,
             rss_bytes("VmRSS:"), after.cpu_kernel};
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

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", bytes / (1024.0 * 1024.0));
  return text;
}

struct ContainerFacts {
  coli::bench::TokenTraffic traffic;
  std::int32_t vocab = 0;
  coli::runtime::ModelShape shape;
};

// Prints what the container is and what one decode step touches.
coli::Result<ContainerFacts> describe_container(const Args& args) {
  auto reader = coli::container::ContainerReader::open(args.model);
  if (!reader) return reader.error();
  auto traffic = coli::bench::decode_traffic(*reader, args.prompt_tokens, args.decode_tokens);
  if (!traffic) return traffic.error();
  const coli::container::TensorEntry* embedding = reader->find_tensor("model.embed_tokens.weight");
  if (!embedding) return coli::make_error(args.model + ": no model.embed_tokens.weight");
  const auto& experts = reader->index().experts;
  std::printf("model %s: %s on disk, %s, experts %s (%u layers x %u, record %s)\n", args.model.c_str(),
              coli::format_bytes(std::filesystem::file_size(args.model)).c_str(), reader->index().source.c_str(),
              std::string(coli::name_of(experts.format)).c_str(), experts.layers, experts.experts, coli::format_bytes(experts.record_bytes).c_str());
  std::printf("bytes touched per decode token: %s\n", coli::bench::describe_traffic(*traffic).c_str());
  std::printf("prompt %d tokens, %d timed decode tokens after a warm-up pass, %d repeats\n", args.prompt_tokens,
              args.decode_tokens, args.repeats);
  std::printf("'disk MiB/tok': bytes read for expert-cache misses (O_DIRECT when experts stream and the filesystem\n"
              "allows it, else through the page cache)\n\n");
  auto shape = coli::runtime::MoeModel::read_shape(args.model);
  if (!shape) return shape.error();
  return ContainerFacts{*traffic, static_cast<std::int32_t>(embedding->shape.at(0)), std::move(*shape)};
}

int run_bench(const Args& args) {
  std::optional<coli::DeviceProfile> profile;
  if (!args.profile.empty()) {
    auto loaded = coli::load_profile(args.profile);
    if (!loaded) {
      std::fprintf(stderr, "coli-decode-bench: %s\n", loaded.error().message.c_str());
      return 1;
    }
    profile = std::move(*loaded);
  }
  auto facts = describe_container(args);
  if (!facts) {
    std::fprintf(stderr, "coli-decode-bench: %s\n", facts.error().message.c_str());
    return 1;
  }
  const coli::bench::TokenTraffic& traffic = facts->traffic;
  std::vector<std::int32_t> prompt;  // fixed, spread over the vocabulary
  for (int i = 0; i < args.prompt_tokens; ++i) prompt.push_back(static_cast<std::int32_t>((i * 7919 + 13) % facts->vocab));

  const int n_experts = facts->shape.experts;
  const auto caps = coli::bench::parse_caps(args.caps, n_experts, "--cap");
  if (!caps) {
    std::fprintf(stderr, "coli-decode-bench: %s\n", caps.error().message.c_str());
    return 2;
  }
  std::vector<Config> configs;
  for (int threads : args.threads)
    for (int cap : *caps)
      for (const std::string& kernel : args.kernels) configs.push_back({threads, cap, kernel});
  std::vector<std::vector<Run>> runs(configs.size());
  for (int repeat = 0; repeat < args.repeats; ++repeat) {
    for (std::size_t c = 0; c < configs.size(); ++c) {
      auto run = run_once(args, configs[c], facts->shape, prompt);
      if (!run) {
        std::fprintf(stderr, "coli-decode-bench: %s\n", run.error().message.c_str());
        return 1;
      }
      std::fprintf(stderr, "  repeat %d: threads %d cap %d kernel %s: %.2f tok/s\n", repeat + 1, configs[c].threads,
                   configs[c].cap, run->kernel.c_str(), run->tokens_per_s);
      runs[c].push_back(*run);
    }
  }

  std::printf("%7s %5s %12s %9s %7s %8s %12s %13s %10s %8s %6s %9s\n", "threads", "cap", "kernel", "tok/s", "spread",
              "hit rate", "disk MiB/tok", "touched MiB/tok", "bandwidth", "bound", "ratio", "RSS MiB");
  for (std::size_t c = 0; c < configs.size(); ++c) {
    std::vector<double> speeds;
    std::uint64_t hits = 0, misses = 0, bytes_read = 0, rss = 0;
    for (const Run& r : runs[c]) {
      speeds.push_back(r.tokens_per_s);
      hits += r.hits, misses += r.misses, bytes_read += r.bytes_read, rss = std::max(rss, r.rss);
    }
    const double mid = median(speeds);
    const double spread = (*std::max_element(speeds.begin(), speeds.end()) - *std::min_element(speeds.begin(), speeds.end())) / mid;
    const double lookups = static_cast<double>(hits + misses);
    const double disk_per_token = static_cast<double>(bytes_read) / (static_cast<double>(runs[c].size()) * args.decode_tokens);
    int measured_threads = configs[c].threads;
    std::optional<double> gb_s = args.bandwidth_gb_s > 0 ? std::optional(args.bandwidth_gb_s) : std::nullopt;
    if (!gb_s && profile) gb_s = profile_bandwidth(*profile, configs[c].threads, measured_threads);
    std::string bandwidth = "-", bound = "-", ratio = "-";
    if (gb_s) {
      const double bound_tok_s = *gb_s * 1e9 / static_cast<double>(traffic.total());
      char text[64];
      std::snprintf(text, sizeof text, "%.1f GB/s%s", *gb_s, measured_threads != configs[c].threads ? "*" : "");
      bandwidth = text;
      std::snprintf(text, sizeof text, "%.1f", bound_tok_s);
      bound = text;
      std::snprintf(text, sizeof text, "%.0f%%", 100.0 * mid / bound_tok_s);
      ratio = text;
    }
    const std::string cap = configs[c].cap >= n_experts ? "all" : std::to_string(configs[c].cap);
    std::printf("%7d %5s %12s %9.2f %6.0f%% %7.1f%% %12s %15s %10s %8s %6s %9s\n", configs[c].threads, cap.c_str(),
                runs[c].front().kernel.c_str(), mid, 100.0 * spread, lookups > 0 ? 100.0 * hits / lookups : 0.0,
                mib(disk_per_token).c_str(), mib(static_cast<double>(traffic.total())).c_str(), bandwidth.c_str(),
                bound.c_str(), ratio.c_str(), mib(static_cast<double>(rss)).c_str());
  }
  std::printf("\ntok/s: median of the repeats; spread: (max - min) / median; bound: bandwidth / touched bytes;\n"
              "ratio: tok/s / bound; RSS: resident set at the end of a run (peak of the process %s)%s\n",
              coli::format_bytes(rss_bytes("VmHWM:")).c_str(),
              args.bandwidth_gb_s > 0 ? "" : "; * = bandwidth measured at another thread count");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"coli-decode-bench: MoE decode tok/s against the memory-bandwidth bound"};
  app.add_option("--model", args.model, "Container (coli convert or coli-make-synthetic)")->required()->check(CLI::ExistingFile);
  app.add_option("--threads", args.threads, "Thread counts, comma-separated")->delimiter(',')->capture_default_str();
  app.add_option("--cap", args.caps, "Expert cache slots per layer, comma-separated ('all' = every expert resident)")->delimiter(',')->capture_default_str();
  app.add_option("--kernel", args.kernels, "CPU kernels, comma-separated (default: best; " + coli::cpu_kernel_names_text() + ")")
      ->delimiter(',')
      ->check(CLI::IsMember(coli::cpu_kernel_names()));
  app.add_option("--prompt-tokens", args.prompt_tokens, "Prompt length")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--tokens", args.decode_tokens, "Timed decode tokens per run")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--repeats", args.repeats, "Runs per configuration")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--ctx", args.context, "KV cache positions (0 = prompt + tokens)")->check(CLI::Range(0, 1 << 24))->capture_default_str();
  app.add_option("--speculative-prefetch", args.speculative_prefetch,
                 "Run the next layer's router early and read its predicted experts (streaming only): on|off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  auto* profile = app.add_option("--profile", args.profile, "Device profile (coli-probe) with memory bandwidth")->check(CLI::ExistingFile);
  app.add_option("--bandwidth", args.bandwidth_gb_s, "Memory read bandwidth in GB/s (instead of --profile)")->excludes(profile);
  coli::cli::add_version_flag(app, "coli-decode-bench");
  if (const auto done = coli::cli::parse(app, argc, argv)) return *done;
  if (args.context > 0 && args.prompt_tokens + args.decode_tokens > args.context) {
    std::fprintf(stderr, "coli-decode-bench: --prompt-tokens + --tokens exceeds --ctx\n");
    return 2;
  }
  return run_bench(args);
}
