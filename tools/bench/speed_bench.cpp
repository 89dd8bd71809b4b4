// coli-speed-bench: llama-bench's three figures for the engine on one
// container, per backend: prefill of -p tokens, and decode of -n tokens after
// a context of each -d depth, as medians with their spread over --repeats
// runs (interleaved across configurations, so drift spreads over all).
// Each configuration loads the model once; prompts are random token ids
// from a fixed seed (speed does not depend on them). With a VRAM share
// below 1 the GPU holds that share of each layer's experts and the CPU
// computes the rest (a hybrid plan); decode is also set against the memory
// bound: bytes one step reads / --bandwidth GB/s.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "coli/cli/command_line.h"

#include <nlohmann/json.hpp>

#include "bytes_per_token.h"
#include "coli/base/files.h"
#include "coli/base/process_memory.h"
#include "speed_measure.h"
#include "coli/base/text.h"
#include "coli/container/container.h"
#include "coli/runtime/moe_model.h"

namespace {

struct Args {
  std::string model, json;
  std::vector<std::string> backends{"cpu"};
  std::vector<double> vram_shares{1.0};
  std::vector<std::string> gpu_kernels{"auto"};
  std::vector<std::string> splits{"expert"};
  std::string host_experts = "measured";
  int threads = 1, gpu = 0, batch = 512, cap = 0;
  coli::bench::SpeedTests tests;
  double bandwidth_gb_s = 0;
};

struct Config {
  std::string backend;
  double vram_share = 1;
  std::unique_ptr<coli::runtime::MoeModel> model;
  std::vector<double> prefill;                 // tok/s per repeat
  std::vector<std::vector<double>> decode;     // [depth][repeat]
};

// `share` of the experts in VRAM, split as `split` says: "expert", the experts
// 0 .. share * experts - 1 of every layer (uniform routing makes which ones
// immaterial for speed); "layer", every expert of the last share * layers
// MoE layers, the first ones on the CPU, as llama.cpp's --n-cpu-moe does.
std::vector<std::vector<int>> vram_share_experts(const coli::container::ExpertLayout& layout, double share,
                                                 const std::string& split) {
  const int experts = static_cast<int>(layout.experts), layers = static_cast<int>(layout.layers);
  std::vector<int> all(static_cast<std::size_t>(experts));
  for (int e = 0; e < experts; ++e) all[static_cast<std::size_t>(e)] = e;
  if (split == "layer") {
    const int gpu_layers = std::clamp(static_cast<int>(share * layers + 0.5), 0, layers);
    std::vector<std::vector<int>> vram(static_cast<std::size_t>(layers));
    for (int l = layers - gpu_layers; l < layers; ++l) vram[static_cast<std::size_t>(l)] = all;
    return vram;
  }
  const int count = std::clamp(static_cast<int>(share * experts + 0.5), 0, experts);
  return std::vector<std::vector<int>>(layout.layers, std::vector<int>(all.begin(), all.begin() + count));
}

coli::Result<std::unique_ptr<coli::runtime::MoeModel>> load(const Args& args, const std::string& backend, double share,
                                                            const std::string& gpu_kernel, const std::string& split,
                                                            const coli::container::ExpertLayout& layout) {
  coli::runtime::ModelOptions options;
  options.gpu_kernel = gpu_kernel == "auto" ? "" : gpu_kernel;
  options.gpu_host_experts = args.host_experts;
  options.threads = args.threads;
  options.backend = backend;
  options.gpu_index = args.gpu;
  options.gpu_batch_tokens = args.batch;
  options.cache_capacity = args.cap > 0 ? args.cap : coli::runtime::kAllExperts;
  options.prefill_round_tokens = coli::runtime::ModelOptions{}.prefill_round_tokens;
  options.max_context = args.tests.context() + 1;
  if (backend != "cpu" && share < 1) options.vram_experts = vram_share_experts(layout, share, split);
  auto model = coli::runtime::MoeModel::load(args.model, options);
  if (!model) return model.error();
  return std::make_unique<coli::runtime::MoeModel>(std::move(*model));
}

void print_memory(const Config& c) {
  const coli::runtime::ModelStats& s = c.model->stats();
  std::printf("%s share %.2f: host dense %s, expert cache %s, KV %s", c.backend.c_str(), c.vram_share,
              coli::format_bytes(s.dense_bytes).c_str(), coli::format_bytes(s.expert_cache_bytes).c_str(),
              coli::format_bytes(s.kv_cache_bytes).c_str());
  if (c.backend != "cpu") {
    std::printf("; %s VRAM %s (dense %s, experts %s, KV %s, activations %s), host-visible %s", s.gpu.device.c_str(),
                coli::format_bytes(s.gpu.vram_bytes()).c_str(), coli::format_bytes(s.gpu.dense_bytes).c_str(),
                coli::format_bytes(s.gpu.expert_bytes).c_str(), coli::format_bytes(s.gpu.kv_cache_bytes).c_str(),
                coli::format_bytes(s.gpu.activation_bytes).c_str(), coli::format_bytes(s.gpu.host_visible_bytes).c_str());
  }
  std::printf("\n");
}

int fail(const std::string& message) {
  std::fprintf(stderr, "coli-speed-bench: %s\n", message.c_str());
  return 1;
}

void print_table(const Args& args, const coli::container::ContainerReader& reader, const std::vector<Config>& configs) {
  const coli::bench::SpeedTests& tests = args.tests;
  std::printf("\n%-8s %6s %-14s %-32s  (median [min .. max] of %d runs, tok/s)\n", "backend", "vram", "test", "tok/s",
              tests.repeats);
  for (const Config& c : configs) {
    std::printf("%-8s %6.2f %-14s %s\n", c.backend.c_str(), c.vram_share, tests.prefill_label().c_str(),
                coli::bench::format_stats(coli::bench::metric_stats(c.prefill)).c_str());
    for (std::size_t d = 0; d < tests.depths.size(); ++d) {
      std::printf("%-8s %6.2f %-14s %s", c.backend.c_str(), c.vram_share, tests.decode_label(tests.depths[d]).c_str(),
                  coli::bench::format_stats(coli::bench::metric_stats(c.decode[d])).c_str());
      if (args.bandwidth_gb_s > 0) {
        if (auto traffic = coli::bench::decode_traffic(reader, tests.depths[d], tests.decode_tokens)) {
          std::printf("   bound %.1f tok/s (%s/token at %.0f GB/s)", args.bandwidth_gb_s * 1e9 / static_cast<double>(traffic->total()),
                      coli::format_bytes(traffic->total()).c_str(), args.bandwidth_gb_s);
        }
      }
      std::printf("\n");
    }
  }
}

// Every repeat's tok/s per test, for scripts (llama_side_by_side.sh).
// decode_bytes_per_token: what one decode step at that depth reads (bytes_per_token.h).
std::string figures_json(const Args& args, const coli::container::ContainerReader& reader, const std::vector<Config>& configs) {
  const coli::bench::SpeedTests& tests = args.tests;
  nlohmann::json out = {{"model", args.model}, {"threads", args.threads}, {"prefill_tokens", tests.prefill_tokens},
                        {"decode_tokens", tests.decode_tokens}, {"depths", tests.depths}, {"repeats", tests.repeats}};
  for (int depth : tests.depths) {
    auto traffic = coli::bench::decode_traffic(reader, depth, tests.decode_tokens);
    out["decode_bytes_per_token"].push_back(traffic ? traffic->total() : 0);
  }
  for (const Config& c : configs) {
    nlohmann::json config = {{"backend", c.backend}, {"vram_share", c.vram_share}, {"kernel", c.model->stats().cpu_kernel}};
    config["tests"].push_back({{"test", tests.prefill_label()}, {"n_prompt", tests.prefill_tokens}, {"n_gen", 0}, {"n_depth", 0},
                               {"tok_s", c.prefill}});
    for (std::size_t d = 0; d < tests.depths.size(); ++d) {
      config["tests"].push_back({{"test", tests.decode_label(tests.depths[d])}, {"n_prompt", 0}, {"n_gen", tests.decode_tokens},
                                 {"n_depth", tests.depths[d]}, {"tok_s", c.decode[d]}});
    }
    out["configs"].push_back(std::move(config));
  }
  return out.dump(2) + "\n";
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"coli-speed-bench: prefill and decode tok/s per backend, llama-bench style (-p, -n, -d)"};
  app.add_option("--model", args.model, "Container")->required()->check(CLI::ExistingFile);
  app.add_option("--backend", args.backends, "Backends, comma-separated (cpu, vulkan, cuda)")->delimiter(',')->capture_default_str();
  app.add_option("--vram-share", args.vram_shares, "Shares of each layer's experts in VRAM (vulkan, cuda), comma-separated")
      ->delimiter(',')->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--gpu-kernel", args.gpu_kernels,
                 "GPU kernels, comma-separated: auto (CUDA: int8 activations for int8/int4 weights) or exact (f32 "
                 "activations); each GPU backend runs once per entry")
      ->delimiter(',')->check(CLI::IsMember({"auto", "exact"}))->capture_default_str();
  app.add_option("--split", args.splits,
                 "How a VRAM share below 1 is split, comma-separated: expert (that share of every layer's experts) "
                 "or layer (whole layers, the first ones on the CPU, as llama.cpp's --n-cpu-moe)")
      ->delimiter(',')->check(CLI::IsMember({"expert", "layer"}))->capture_default_str();
  app.add_option("--gpu-host-experts", args.host_experts,
                 "CUDA hybrid prefill batches: measured, upload or cpu (coli run --gpu-host-experts)")
      ->check(CLI::IsMember({"measured", "upload", "cpu"}))->capture_default_str();
  app.add_option("--threads", args.threads, "CPU threads")->check(CLI::Range(1, 4096))->capture_default_str();
  coli::bench::add_speed_options(app, args.tests);
  app.add_option("--json", args.json, "Also write the figures (every repeat) as JSON to this file");
  app.add_option("--gpu", args.gpu, "Vulkan device index")->check(CLI::Range(0, 64))->capture_default_str();
  app.add_option("--batch", args.batch, "Tokens per GPU submission")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--cap", args.cap, "CPU expert cache slots per layer (0 = every expert)")->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("--bandwidth", args.bandwidth_gb_s, "Memory bandwidth (GB/s) for the decode bound")->check(CLI::Range(0.0, 1e6));
  coli::cli::add_version_flag(app, "coli-speed-bench");
  if (const auto done = coli::cli::parse(app, argc, argv)) return *done;

  auto reader = coli::container::ContainerReader::open(args.model);
  if (!reader) return fail(reader.error().message);
  std::vector<Config> configs;
  for (const std::string& backend : args.backends) {
    for (double share : backend != "cpu" ? args.vram_shares : std::vector<double>{1.0}) {
      const bool split = backend != "cpu" && share < 1;  // a split only where some experts stay on the CPU
      for (const std::string& kernel : backend != "cpu" ? args.gpu_kernels : std::vector<std::string>{"auto"}) {
        for (const std::string& how : split ? args.splits : std::vector<std::string>{"expert"}) {
          auto model = load(args, backend, share, kernel, how, reader->index().experts);
          if (!model) return fail(backend + ": " + model.error().message);
          // "cuda", "cuda/exact", "cuda/layer": the kernels and the split when not the default
          const std::string label = backend + (kernel == "auto" ? "" : "/" + kernel) + (how == "layer" ? "/layer" : "");
          configs.push_back({label, share, std::move(*model), {}, std::vector<std::vector<double>>(args.tests.depths.size())});
          print_memory(configs.back());
        }
      }
    }
  }
  const coli::bench::SpeedTests& tests = args.tests;
  const auto tokens = coli::bench::bench_tokens(tests, configs.front().model->vocab_size());
  for (Config& c : configs) {  // warm-up: first submissions record command buffers, first reads fill caches
    if (auto warm = coli::bench::time_prefill(*c.model, tokens.warmup); !warm) return fail(warm.error().message);
  }
  for (int r = 0; r < tests.repeats; ++r) {
    for (Config& c : configs) {
      auto pass = coli::bench::measure_pass(*c.model, tests, tokens);
      if (!pass) return fail(pass.error().message);
      c.prefill.push_back(tests.prefill_tokens / pass->prefill_seconds);
      for (std::size_t d = 0; d < tests.depths.size(); ++d) c.decode[d].push_back(tests.decode_tokens / pass->decode_seconds[d]);
    }
  }
  print_table(args, *reader, configs);
  for (const Config& c : configs) {  // where a CUDA hybrid plan's prefill put the host's experts
    for (const std::string& line : c.model->stats().gpu.kernels) {
      if (line.rfind("hybrid prefill:", 0) == 0) std::printf("%s share %.2f: %s\n", c.backend.c_str(), c.vram_share, line.c_str());
    }
  }
  if (!args.json.empty()) {
    if (coli::Status s = coli::write_file_atomically(args.json, figures_json(args, *reader, configs)); !s) return fail(s.error().message);
  }
  std::printf("peak RSS %s\n", coli::format_bytes(coli::process_peak_resident_bytes()).c_str());
  return 0;
}
