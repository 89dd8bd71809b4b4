// coli-speed-bench: llama-bench's three figures for the engine on one
// container, per backend: prefill of -p tokens, and decode of -n tokens after
// a context of each -d depth, as medians with their spread over --repeats
// runs (interleaved across configurations, so drift spreads over all).
// Each configuration loads the model once; prompts are random token ids
// from a fixed seed (speed does not depend on them). With a VRAM share
// below 1 the GPU holds that share of each layer's experts and the CPU
// computes the rest (a hybrid plan); decode is also set against the memory
// bound: bytes one step reads / --bandwidth GB/s.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "coli/cli/command_line.h"

#include "bytes_per_token.h"
#include "coli/base/text.h"
#include "coli/container/container.h"
#include "coli/runtime/moe_model.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string model;
  std::vector<std::string> backends{"cpu"};
  std::vector<double> vram_shares{1.0};
  int threads = 1, prefill = 512, decode = 64, repeats = 5, gpu = 0, batch = 512, cap = 0;
  std::vector<int> depths{0, 512};
  double bandwidth_gb_s = 0;
};

struct Config {
  std::string backend;
  double vram_share = 1;
  std::unique_ptr<coli::runtime::MoeModel> model;
  std::vector<double> prefill;                 // tok/s per repeat
  std::vector<std::vector<double>> decode;     // [depth][repeat]
};

std::vector<std::int32_t> random_tokens(int count, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::vector<std::int32_t> out(static_cast<std::size_t>(count));
  for (auto& t : out) t = pick(rng);
  return out;
}

coli::Result<double> time_prefill(coli::runtime::MoeModel& model, const std::vector<std::int32_t>& prompt) {
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  model.reset();
  const auto begin = Clock::now();
  if (coli::Status s = model.forward(prompt, 0, logits); !s) return s.error();
  return static_cast<double>(prompt.size()) / std::chrono::duration<double>(Clock::now() - begin).count();
}

coli::Result<double> time_decode(coli::runtime::MoeModel& model, const std::vector<std::int32_t>& context, int depth,
                                 int tokens) {
  std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
  model.reset();
  if (depth > 0) {
    if (coli::Status s = model.forward(std::span(context).first(static_cast<std::size_t>(depth)), 0, logits); !s) {
      return s.error();
    }
  }
  std::int32_t next = context[static_cast<std::size_t>(depth)];
  const auto begin = Clock::now();
  for (int i = 0; i < tokens; ++i) {
    if (coli::Status s = model.forward(std::span(&next, 1), depth + i, logits); !s) return s.error();
    next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  return tokens / std::chrono::duration<double>(Clock::now() - begin).count();
}

// The experts 0 .. share * experts - 1 of every layer (uniform routing makes
// which ones immaterial for speed).
std::vector<std::vector<int>> vram_share_experts(const coli::container::ExpertLayout& layout, double share) {
  const int count = std::clamp(static_cast<int>(share * layout.experts + 0.5), 0, static_cast<int>(layout.experts));
  std::vector<int> layer(static_cast<std::size_t>(count));
  for (int e = 0; e < count; ++e) layer[static_cast<std::size_t>(e)] = e;
  return std::vector<std::vector<int>>(layout.layers, layer);
}

std::string spread(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  const double median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  char text[96];
  std::snprintf(text, sizeof text, "%9.2f  [%.2f .. %.2f]", median, values.front(), values.back());
  return text;
}

coli::Result<std::unique_ptr<coli::runtime::MoeModel>> load(const Args& args, const std::string& backend, double share,
                                                            const coli::container::ExpertLayout& layout) {
  coli::runtime::ModelOptions options;
  options.threads = args.threads;
  options.backend = backend;
  options.gpu_index = args.gpu;
  options.gpu_batch_tokens = args.batch;
  options.cache_capacity = args.cap > 0 ? args.cap : coli::runtime::kAllExperts;
  options.prefill_round_tokens = 64;
  options.max_context = std::max(args.prefill, *std::max_element(args.depths.begin(), args.depths.end()) + args.decode) + 1;
  if (backend == "vulkan" && share < 1) options.vram_experts = vram_share_experts(layout, share);
  auto model = coli::runtime::MoeModel::load(args.model, options);
  if (!model) return model.error();
  return std::make_unique<coli::runtime::MoeModel>(std::move(*model));
}

void print_memory(const Config& c) {
  const coli::runtime::ModelStats& s = c.model->stats();
  std::printf("%s share %.2f: host dense %s, expert cache %s, KV %s", c.backend.c_str(), c.vram_share,
              coli::format_bytes(s.dense_bytes).c_str(), coli::format_bytes(s.expert_cache_bytes).c_str(),
              coli::format_bytes(s.kv_cache_bytes).c_str());
  if (c.backend == "vulkan") {
    std::printf("; %s VRAM %s (dense %s, experts %s, KV %s, activations %s), host-visible %s", s.gpu.device.c_str(),
                coli::format_bytes(s.gpu.vram_bytes()).c_str(), coli::format_bytes(s.gpu.dense_bytes).c_str(),
                coli::format_bytes(s.gpu.expert_bytes).c_str(), coli::format_bytes(s.gpu.kv_cache_bytes).c_str(),
                coli::format_bytes(s.gpu.activation_bytes).c_str(), coli::format_bytes(s.gpu.host_visible_bytes).c_str());
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"coli-speed-bench: prefill and decode tok/s per backend, llama-bench style (-p, -n, -d)"};
  app.add_option("--model", args.model, "Container")->required()->check(CLI::ExistingFile);
  app.add_option("--backend", args.backends, "Backends, comma-separated (cpu, vulkan)")->delimiter(',')->capture_default_str();
  app.add_option("--vram-share", args.vram_shares, "Shares of each layer's experts in VRAM (vulkan), comma-separated")
      ->delimiter(',')->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--threads", args.threads, "CPU threads")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("-p", args.prefill, "Prefill tokens")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("-n", args.decode, "Decode tokens")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("-d", args.depths, "Decode depths, comma-separated")->delimiter(',')->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("--repeats", args.repeats, "Runs of each figure")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--gpu", args.gpu, "Vulkan device index")->check(CLI::Range(0, 64))->capture_default_str();
  app.add_option("--batch", args.batch, "Tokens per GPU submission")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--cap", args.cap, "CPU expert cache slots per layer (0 = every expert)")->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("--bandwidth", args.bandwidth_gb_s, "Memory bandwidth (GB/s) for the decode bound")->check(CLI::Range(0.0, 1e6));
  coli::cli::add_version_flag(app, "coli-speed-bench");
  if (const auto done = coli::cli::parse(app, argc, argv)) return *done;

  auto reader = coli::container::ContainerReader::open(args.model);
  if (!reader) return std::fprintf(stderr, "coli-speed-bench: %s\n", reader.error().message.c_str()), 1;
  std::vector<Config> configs;
  for (const std::string& backend : args.backends) {
    for (double share : backend == "vulkan" ? args.vram_shares : std::vector<double>{1.0}) {
      auto model = load(args, backend, share, reader->index().experts);
      if (!model) return std::fprintf(stderr, "coli-speed-bench: %s: %s\n", backend.c_str(), model.error().message.c_str()), 1;
      configs.push_back({backend, share, std::move(*model), {}, std::vector<std::vector<double>>(args.depths.size())});
      print_memory(configs.back());
    }
  }
  const int vocab = configs.front().model->vocab_size();
  const auto prompt = random_tokens(args.prefill, vocab, 7);
  const auto context = random_tokens(*std::max_element(args.depths.begin(), args.depths.end()) + 1, vocab, 11);
  for (Config& c : configs) {  // warm-up: first submissions record command buffers, first reads fill caches
    if (auto warm = time_prefill(*c.model, prompt); !warm) return std::fprintf(stderr, "coli-speed-bench: %s\n", warm.error().message.c_str()), 1;
  }
  for (int r = 0; r < args.repeats; ++r) {
    for (Config& c : configs) {
      auto p = time_prefill(*c.model, prompt);
      if (!p) return std::fprintf(stderr, "coli-speed-bench: %s\n", p.error().message.c_str()), 1;
      c.prefill.push_back(*p);
      for (std::size_t d = 0; d < args.depths.size(); ++d) {
        auto t = time_decode(*c.model, context, args.depths[d], args.decode);
        if (!t) return std::fprintf(stderr, "coli-speed-bench: %s\n", t.error().message.c_str()), 1;
        c.decode[d].push_back(*t);
      }
    }
  }
  std::printf("\n%-8s %6s %-12s %-32s  (median [min .. max] of %d runs, tok/s)\n", "backend", "vram", "test", "tok/s",
              args.repeats);
  for (const Config& c : configs) {
    std::printf("%-8s %6.2f pp%-9d %s\n", c.backend.c_str(), c.vram_share, args.prefill, spread(c.prefill).c_str());
    for (std::size_t d = 0; d < args.depths.size(); ++d) {
      std::printf("%-8s %6.2f tg%d@d%-6d %s", c.backend.c_str(), c.vram_share, args.decode, args.depths[d],
                  spread(c.decode[d]).c_str());
      if (args.bandwidth_gb_s > 0) {
        if (auto traffic = coli::bench::decode_traffic(*reader, args.depths[d], args.decode)) {
          std::printf("   bound %.1f tok/s (%s/token at %.0f GB/s)", args.bandwidth_gb_s * 1e9 / static_cast<double>(traffic->total()),
                      coli::format_bytes(traffic->total()).c_str(), args.bandwidth_gb_s);
        }
      }
      std::printf("\n");
    }
  }
  struct rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("peak RSS %s\n", coli::format_bytes(static_cast<std::uint64_t>(usage.ru_maxrss) * 1024).c_str());
  return 0;
}
