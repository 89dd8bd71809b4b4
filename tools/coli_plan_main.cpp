// coli-plan: a device profile + a model's headers -> the engine's knobs, the
// memory they take per component and tier, why each was chosen, and the
// predicted speed. Reads two small files; never loads weights; with
// --retime, times this machine's kernels again before predicting.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "coli/base/kv_type.h"
#include "coli/shaders/catalogue.h"

#include "coli/base/cpu_kernels.h"
#include "coli/base/files.h"
#include "coli/base/text.h"
#include "coli/cli/command_line.h"
#include "coli/cli/default_profile.h"
#include "coli/container/container.h"
#include "coli/experts/usage_history.h"
#include "coli/model/model_desc.h"
#include "coli/planner/expert_parallel_speed.h"
#include "coli/planner/first_pass.h"
#include "coli/planner/speed_band.h"
#include "coli/planner/plan_io.h"
#include "coli/planner/quality.h"
#include "coli/probe/fleet_machine.h"
#include "coli/probe/profile_io.h"
#include "measure/retime.h"

namespace {

namespace fs = std::filesystem;
namespace planner = coli::planner;
using Clock = std::chrono::steady_clock;

struct LoadedModel {
  planner::ModelFootprint footprint;
  std::string identity;
  std::string source;  // "config.json only", "config.json + N safetensors headers" or "coli container index"
};

// A coli container: its own config and formats (the --experts/--dense flags
// describe a conversion still to be done, so they do not apply).
coli::Result<LoadedModel> load_container(const fs::path& path) {
  auto reader = coli::container::ContainerReader::open(path);
  if (!reader) return reader.error();
  const auto& index = reader->index();
  auto config = coli::model::parse_model_config(index.config_json, path.string() + " (config)");
  if (!config) return config.error();
  LoadedModel m;
  m.footprint = planner::describe_footprint(*config, index.experts.format, index.dense_format());
  m.identity = planner::model_identity(index.config_json, *config);
  m.source = "coli container index";
  return m;
}

// A Hugging Face directory with safetensors: its headers are checked against
// the config (describe_model reads headers only). A config.json, or a
// directory with only one, is planned from the config alone.
coli::Result<LoadedModel> load_model(const fs::path& path, coli::WeightFormat experts, coli::DenseFormat dense) {
  if (fs::exists(path) && !fs::is_regular_file(path) && !fs::is_directory(path)) {  // /dev/zero, a FIFO: never read forever
    return coli::make_error(path.string() + " is neither a regular file nor a directory: --model takes a model directory, "
                            "its config.json or a coli container");
  }
  if (fs::is_regular_file(path) && path.extension() != ".json") return load_container(path);
  const fs::path config_path = fs::is_directory(path) ? path / "config.json" : path;
  auto text = coli::read_text_file(config_path);
  if (!text) return coli::make_error(text.error().message + " (--model takes a model directory or its config.json)");
  LoadedModel m;
  coli::model::ModelConfig config;
  bool has_weights = false;
  if (fs::is_directory(path)) {
    for (const auto& entry : fs::directory_iterator(path)) has_weights |= entry.path().extension() == ".safetensors";
  }
  if (has_weights) {
    auto desc = coli::model::describe_model(path);
    if (!desc) return desc.error();
    config = desc->config;
    m.source = "config.json + " + std::to_string(desc->files.size()) + " safetensors headers";
  } else {
    auto parsed = coli::model::parse_model_config(*text, config_path.string());
    if (!parsed) return parsed.error();
    config = *parsed;
    m.source = "config.json only";
  }
  m.footprint = planner::describe_footprint(config, experts, dense);
  m.identity = planner::model_identity(*text, config);
  return m;
}

std::string bar(std::uint64_t bytes, std::uint64_t headroom, int width = 30) {
  const int filled = headroom == 0 ? 0 : static_cast<int>(std::min<double>(width, std::lround(1.0 * width * bytes / headroom)));
  return std::string(filled, '#') + std::string(width - filled, '.');
}

// The llama.cpp-style split the plan did not choose (planner::whole_layer_split), against the chosen one.
void print_whole_layer_split(const planner::PlanFile& f, const planner::WholeLayerSplit& split) {
  const planner::Plan& p = f.plan;
  const int fewer = p.gpu.vram_slots() - split.gpu_layers * p.n_experts;
  std::printf("  rejected   whole MoE layers in VRAM, as llama.cpp -ngl 99 --n-cpu-moe %d: %d of %d layers' experts "
              "(%d VRAM slots fewer), VRAM serving %.1f%% of expert reads against the chosen split's %.1f%%",
              split.cpu_layers, split.gpu_layers, split.cpu_layers + split.gpu_layers, fewer, split.vram_share * 100,
              p.gpu.vram_share * 100);
  if (!split.speed.available) {
    std::printf("; no prediction (%s)\n", split.speed.unavailable.c_str());
    return;
  }
  std::printf(": decode %.2f tok/s, prefill %.1f tok/s\n", split.speed.decode_tok_per_s, split.speed.prefill_tok_per_s);
}

// Expert parallel: each GPU's share, where its host thread runs, and the all-reduce.
void print_expert_parallel(const planner::ExpertParallelPlan& ep) {
  std::printf("\nexpert parallel over %zu GPUs (NCCL ranks in this order)\n", ep.gpus.size());
  for (const planner::GpuShare& g : ep.gpus) {
    std::printf("  GPU %-3d VRAM %10s of %10s  %s\n", g.ordinal, planner::format_bytes(g.vram_bytes()).c_str(),
                planner::format_bytes(g.budget_bytes).c_str(), g.reason.c_str());
  }
  const planner::ExchangeTraffic& x = ep.exchange;
  std::printf("  exchange  %s per token per GPU; decode %.3f ms/token, prefill %.4f ms/token: %s\n",
              planner::format_bytes(x.bytes_per_token).c_str(), x.decode_seconds * 1e3, x.prefill_seconds * 1e3,
              x.inputs.c_str());
}

void print_terms(const char* what, const std::vector<planner::SpeedTerm>& terms) {
  std::printf("  %s terms:", what);
  for (const planner::SpeedTerm& t : terms) std::printf(" %s %.4f ms;", t.name.c_str(), t.seconds * 1e3);
  std::printf("\n");
}

void print_human(const planner::PlanFile& f, const planner::ModelFootprint& fp, const std::string& model_source,
                 const std::optional<planner::WholeLayerSplit>& whole_layers) {
  const planner::Plan& p = f.plan;
  const auto& c = fp.config;
  std::printf("coli-plan: %s (%s) on profile %s (%s)\n", f.model_name.c_str(), model_source.c_str(),
              f.profile_path.c_str(), f.profile_fingerprint.c_str());
  std::printf("model     %s: %zu MoE layers x %d experts (top_k %d), hidden %llu, experts %s (record %s), dense %s\n",
              c.model_type.c_str(), fp.moe_layers.size(), fp.n_experts, fp.top_k,
              static_cast<unsigned long long>(c.hidden_size), std::string(coli::name_of(fp.expert_format)).c_str(),
              planner::format_bytes(fp.expert().record_bytes).c_str(), std::string(coli::dense_format_name(fp.dense_format)).c_str());
  std::printf("\n%-32s %10s %11s %11s  RAM vs headroom %s\n", "component", "VRAM", "RAM", "disk",
              planner::format_bytes(p.headroom_bytes).c_str());
  for (const planner::MemoryLine& line : p.memory.lines) {
    const bool ram = line.tier == planner::Tier::ram;
    const std::string bytes = planner::format_bytes(line.bytes);
    std::printf("%-32s %10s %11s %11s  %s\n", line.component.c_str(),
                line.tier == planner::Tier::vram ? bytes.c_str() : "",
                ram ? bytes.c_str() : "", line.tier == planner::Tier::disk ? bytes.c_str() : "",
                ram ? bar(line.bytes, p.headroom_bytes).c_str() : "");
    std::printf("    %s\n", line.formula.c_str());
  }
  const std::uint64_t total = p.planned_ram_bytes(), needed = total + p.margin.bytes;
  const std::uint64_t vram = p.memory.total(planner::Tier::vram);
  std::printf("%-32s %10s %11s %11s  %s\n", "total (itemised)", vram ? planner::format_bytes(vram).c_str() : "",
              planner::format_bytes(total).c_str(),
              planner::format_bytes(p.memory.total(planner::Tier::disk)).c_str(), bar(total, p.headroom_bytes).c_str());
  std::printf("%-32s %10s %11s %11s  %s\n", "+ safety margin", "", planner::format_bytes(p.margin.bytes).c_str(), "",
              bar(needed, p.headroom_bytes).c_str());
  std::printf("needs %s of %s headroom (%s): %s spare\n", planner::format_bytes(needed).c_str(),
              planner::format_bytes(p.headroom_bytes).c_str(), p.headroom_source.c_str(),
              planner::format_bytes(p.headroom_bytes - needed).c_str());

  if (vram && p.expert_parallel.active()) {
    std::printf("VRAM: %s of %s (%s)%s\n", planner::format_bytes(vram).c_str(),
                planner::format_bytes(p.gpu.vram_headroom_bytes).c_str(), p.gpu.vram_headroom_source.c_str(),
                p.gpu.engine_runs_it ? "" : "  [preview: this build's engine does not run it]");
    print_expert_parallel(p.expert_parallel);
  } else if (vram) {
    std::printf("VRAM: %s of %s on %s (%s)%s\n", planner::format_bytes(vram).c_str(),
                planner::format_bytes(p.gpu.vram_headroom_bytes).c_str(), p.gpu.device.gpu.describe().c_str(),
                p.gpu.vram_headroom_source.c_str(),
                p.gpu.engine_runs_it ? "" : "  [preview: this build's engine computes experts on the CPU]");
  }
  std::printf("\nchoices\n");
  for (const planner::Decision& d : p.decisions) {
    std::printf("  %-21s %-10s %s\n", d.knob.c_str(), d.value.c_str(), d.reason.c_str());
  }
  if (p.gpu.whole_decoder && p.gpu.all_experts_in_vram(p.n_experts)) {
    std::printf("  expert cache: none on the host: every expert is in VRAM\n");
  } else if (p.streaming()) {
    std::printf("  expert cache: cap %d of %d experts per MoE layer (%d pinned): streaming the rest from disk\n", p.cap,
                p.n_experts, p.pins);
  } else {
    std::printf("  expert cache: all %d experts per MoE layer resident: no streaming\n", p.n_experts);
  }

  std::printf("\npredicted speed%s\n",
              f.retimed.empty() ? "" : (" (--retime: kernels timed again here, " + f.retimed + ")").c_str());
  const planner::SpeedPrediction& s = f.speed;
  std::printf("  hit rate   %.1f%%  (%s)\n", s.hit_rate * 100, s.hit_rate_inputs.c_str());
  if (!s.available) {
    std::printf("  %s\n", s.unavailable.c_str());
    return;
  }
  std::printf("  decode     %.2f tok/s  = 1 / (%s)\n", s.decode_tok_per_s, s.decode_inputs.c_str());
  std::printf("  prefill    %.1f tok/s  %s\n", s.prefill_tok_per_s, s.prefill_inputs.c_str());
  if (s.band.made() && !s.band.has_width()) {
    std::printf("  band       none: the rates this prediction rests on were each timed in one round (coli-probe "
                "--budget short of several), so the probe saw no spread to show\n");
  } else if (s.band.made()) {
    std::printf("  band       decode %.2f-%.2f tok/s, prefill %.1f-%.1f tok/s: the same model on the probe's slowest and "
                "fastest rounds of every measured rate (how far this machine moved while it was probed)\n",
                s.band.decode_slowest, s.band.decode_fastest, s.band.prefill_slowest, s.band.prefill_fastest);
  }
  if (p.expert_parallel.active()) {
    print_terms("decode", s.decode_terms);
    print_terms("prefill", s.prefill_terms);
  }
  if (whole_layers) print_whole_layer_split(f, *whole_layers);
}

struct PlanArgs {
  std::string profile_path, model_path, ram_text, out, experts_name = "q4_g64", dense_name = "source";
  std::string usage_path, vram_text, kv_type, gpu_backend = "auto", quality_path;
  bool json = false, toml = false, prompt_ids = false, offline = false, retime = false;
  double retime_seconds = 4.0;  // per thread set, as the probe gives each
  planner::PlanRequest request;
};

void add_options(CLI::App& app, PlanArgs& a) {
  app.add_option("--profile", a.profile_path,
                 "Device profile written by coli-probe (default: this machine's, from the profile search path)");
  app.add_option("--model", a.model_path, "Hugging Face model directory (headers only are read) or its config.json")
      ->required();
  app.add_option("--threads", a.request.threads, "Force the decode thread count");
  app.add_option("--thread-choice", a.request.thread_choice,
                 "How thread sets are chosen without --threads: predicted (every set the probe timed is planned and "
                 "predicted; decode and prefill each run on their fastest; the default) or profile (the probe's recommendation)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, planner::ThreadRule>{
          {"predicted", planner::ThreadRule::predicted}, {"profile", planner::ThreadRule::profile}}));
  app.add_option("--cap", a.request.cap, "Force the expert cache slots per MoE layer (pins included)");
  app.add_option("--pin", a.request.pins, "Force the pinned experts per MoE layer");
  app.add_option("--ram", a.ram_text, "RAM the plan may use, e.g. 16G (at most the profile's measured headroom)");
  app.add_option("--ctx", a.request.ctx, "Context length to reserve the KV cache for");
  app.add_option("--kv-type", a.kv_type, "KV cache precision: " + coli::kv_type_names_text() + " (default: f16)")
      ->check(CLI::IsMember(coli::kv_type_names()));
  app.add_option("--experts", a.experts_name, "Expert format in the container")
      ->check(CLI::IsMember({"q4_g64", "q8_row"}))
      ->capture_default_str();
  app.add_option("--dense", a.dense_name, "Dense weight format")
      ->check(CLI::IsMember({"source", "q8_row", "q4_g64"}))
      ->capture_default_str();
  app.add_option("--gpu", a.request.gpu,
                 "none, auto (a GPU only when this build's engine runs experts there) or a Vulkan device index "
                 "(plans a VRAM tier)")
      ->capture_default_str();
  app.add_option("--gpus", a.request.gpus,
                 "auto, all or CUDA ordinals such as 0,1: spread every MoE layer's experts over these GPUs (expert "
                 "parallel, the CUDA decoder; each GPU holds the dense weights); auto takes every CUDA device only "
                 "where this build's engine runs expert parallel; one ordinal plans that GPU alone, as --gpu N")
      ->capture_default_str();
  app.add_option("--gpu-backend", a.gpu_backend,
                 "auto (cuda when this build has the CUDA decoder and the profile lists a CUDA device, else vulkan), "
                 "vulkan or cuda: the decoder a GPU plan runs, and whose device list --gpu indexes")
      ->check(CLI::IsMember({"auto", "vulkan", "cuda"}))
      ->capture_default_str();
  std::vector<std::string> variant_names;
  for (const coli::shaders::ShaderVariant& v : coli::shaders::gemv_catalogue()) variant_names.emplace_back(v.name);
  app.add_option("--gpu-variant", a.request.gpu_variant, "Force this shader variant for every expert shape (checked against the GPU's limits)")
      ->check(CLI::IsMember(variant_names));
  app.add_option("--kernel", a.request.cpu_kernel, "Force the CPU kernel variant: " + coli::cpu_kernel_names_text())
      ->check(CLI::IsMember(coli::cpu_kernel_names()));
  app.add_option("--vram", a.vram_text, "VRAM the tier may use, e.g. 40G (at most the device's budget)");
  app.add_option("--gpu-batch", a.request.gpu_batch_tokens,
                 "A prompt's tokens per GPU submission (the prefill batch; priced in VRAM; default: the decoder's, "
                 "512 for cuda, 128 for vulkan)")
      ->check(CLI::Range(1, coli::planner::kMaxGpuBatchTokens));
  app.add_option("--quality", a.quality_path,
                 "Quality file of this checkpoint (coli perplexity --record): prints what the planned representation "
                 "costs (KL divergence against f32) and the other measured ones, each planned: fits or not")
      ->check(CLI::ExistingFile);
  app.add_option("--usage", a.usage_path,
                 "Routing history: pins the most-used experts and predicts the hit rate and disk reads (default: "
                 "MODEL.usage where coli run left one; none: plan by uniform routing)");
  app.add_option("--prompt-tokens", a.request.prompt_tokens,
                 "Longest prompt the runs will give, in tokens (default: the whole context)");
  app.add_flag("--prompt-ids", a.prompt_ids, "Runs pass token ids, so no tokenizer tables are planned");
  auto* json_flag = app.add_flag("--json", a.json, "Print the plan as JSON instead of the table (a refusal too: \"fits\": false)");
  app.add_flag("--toml", a.toml, "Print the plan as TOML instead of the table")->excludes(json_flag);
  app.add_option("--out", a.out, "Write the plan file (TOML) here, atomically");
  auto* offline =
      app.add_flag("--offline", a.offline, "Plan for the machine the profile describes, not this one (no live re-validation)");
  app.add_flag("--retime", a.retime,
               "Time the profile's kernel points (the thread sets the plan chooses between; --threads: that one), "
               "RAM bandwidth and OpenMP's fixed costs again on this machine and predict from them: a machine's speed moves after its "
               "probe (14-49% within minutes on the shared machines measured, docs/benchmarks.md)")
      ->excludes(offline);
  app.add_option("--retime-seconds", a.retime_seconds,
                 "Tuning time per thread set for --retime (as the probe's; below ~3 s the tuning phase times fewer sets)")
      ->check(CLI::Range(0.5, 60.0))
      ->capture_default_str();
  app.footer("Exit status: 0 planned, 1 error (a file, the machine or the model), 2 usage, 3 refused (does not fit, "
             "or an override breaks a rule; with --json the refusal is printed as JSON on stdout).");
}

// The size options: text -> bytes; a malformed size is a usage error.
bool parse_sizes(PlanArgs& a) {
  if (!a.kv_type.empty()) a.request.kv_type = *coli::parse_kv_type(a.kv_type, "--kv-type");  // checked by the option
  if (!a.ram_text.empty()) {
    a.request.ram = coli::parse_size(a.ram_text);
    if (!a.request.ram) {
      std::fprintf(stderr, "coli-plan: --ram '%s' is not a size: give a unit, e.g. 16G, 512M or 1073741824B\n", a.ram_text.c_str());
      return false;
    }
  }
  if (!a.vram_text.empty()) {
    a.request.vram = coli::parse_size(a.vram_text);
    if (!a.request.vram) {
      std::fprintf(stderr, "coli-plan: --vram '%s' is not a size: give a unit, e.g. 40G or 512M\n", a.vram_text.c_str());
      return false;
    }
  }
  if (a.request.prompt_tokens && *a.request.prompt_tokens < 1) {
    std::fprintf(stderr, "coli-plan: --prompt-tokens %d holds no token: use 1 or more\n", *a.request.prompt_tokens);
    return false;
  }
  return true;
}

// The profile to plan with: read, then (unless --offline) re-validated against
// this machine. Prints which file and why on stderr.
coli::Result<coli::DeviceProfile> load_profile_for_plan(PlanArgs& a, double& live_probe_ms) {
  auto chosen = coli::cli::choose_profile(a.profile_path);
  if (!chosen) return chosen.error();
  a.profile_path = chosen->path.string();
  if (chosen->why != "--profile") std::fprintf(stderr, "coli-plan: profile %s (%s)\n", a.profile_path.c_str(), chosen->why.c_str());
  auto profile = coli::fleet::load_shared_profile(a.profile_path);
  if (!profile) return profile.error();
  if (a.offline) {
    std::fprintf(stderr, "coli-plan: --offline: planning for the machine %s describes, from its recorded memory; "
                         "coli run --plan checks the plan against the live headroom\n", a.profile_path.c_str());
    return profile;
  }
  // live re-validation (docs/fleet.md): memory always live, tuned values only
  // for a matching class. A quick probe of this machine (GPU drivers included:
  // 50 ms with lavapipe, ~0.4 s with NVIDIA's): timed apart from planning itself.
  const auto probe_start = Clock::now();
  auto checked = coli::fleet::revalidate_here(*profile);
  live_probe_ms = std::chrono::duration<double, std::milli>(Clock::now() - probe_start).count();
  if (!checked) return coli::make_error(checked.error().message + " (or plan for another machine with --offline)");
  for (const std::string& line : checked->report(a.profile_path)) std::fprintf(stderr, "coli-plan: %s\n", line.c_str());
  return std::move(checked->effective);
}

// --retime: the profile's kernel points for the thread sets the plan chooses
// between (--threads: that set alone) and OpenMP's fixed costs timed again on
// this machine, in place of the profile's (probe/measure/retime.h). Returns
// how far they moved (re-timed / profile GB/s per set).
coli::Result<std::string> retime_profile(const PlanArgs& a, coli::DeviceProfile& profile, double& retime_ms) {
  const int threads = a.request.threads.value_or(0);
  const auto sets = coli::probe::timed_thread_sets(profile, threads);
  if (sets.empty()) {
    if (threads <= 0) return coli::make_error("--retime: no usable CPU to time on this machine");
    return coli::make_error("--retime: no thread set of " + std::to_string(threads) + " threads to time on this machine" +
                            " (" + a.profile_path + "'s CPU): give --threads a count the probe times (1, 2, 4, ... all cores)");
  }
  const auto start = Clock::now();
  auto measured = coli::probe::retime_measurements(profile, sets, a.retime_seconds);
  retime_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (!measured) return coli::make_error("--retime: " + measured.error().message);
  std::vector<std::string> timed;  // the sets the tuning phase reached (its budget keeps the first ones)
  std::string names;
  for (const coli::KernelThroughputPoint& p : measured->kernels.points) {
    if (std::find(timed.begin(), timed.end(), p.thread_set) != timed.end()) continue;
    names += (timed.empty() ? "" : ", ") + p.thread_set;
    timed.push_back(p.thread_set);
  }
  const auto& before = profile.measurements.kernel_tuning;
  std::string drift = before && !before->points.empty()
                          ? "re-timed / profile " + coli::probe::drift_text(coli::probe::kernel_drift(profile, measured->kernels))
                          : "timed now, the profile had no kernel timings: " + names;
  if (timed.size() < sets.size()) {
    drift += " (" + std::to_string(timed.size()) + " of " + std::to_string(sets.size()) +
             " sets in --retime-seconds; raise it to time the others)";
  }
  drift += coli::probe::measurements_drift_text(profile, *measured);
  profile = coli::probe::with_retimed(profile, *measured);
  std::fprintf(stderr, "coli-plan: --retime: %zu thread set%s timed again in %.1f s: %s\n", sets.size(),
               sets.size() == 1 ? "" : "s", retime_ms / 1e3, drift.c_str());
  return drift;
}

// The prefill figure above is a warm pass's (coli-sweep's, coli serve's later prompts); a process's first
// prompt (coli run's) also faults in its prompt-sized buffers (planner/first_pass.h).
void print_first_pass(const planner::SpeedPrediction& s, const planner::FirstPassCost& first) {
  if (!s.available || s.prefill_tok_per_s <= 0) return;
  if (!first.priced) {
    std::printf("  first pass not priced: %s\n", first.inputs.c_str());
    return;
  }
  std::printf("  first pass %.1f tok/s  a process's first prompt (coli run's): the warm figure above plus %s ms for %s\n",
              planner::first_pass_tok_per_s(s.prefill_tok_per_s, s.prefill_prompt_tokens, first),
              coli::format_fixed(first.seconds * 1e3, 2).c_str(), first.inputs.c_str());
}

void print_plan(const PlanArgs& a, const planner::PlanFile& file, const LoadedModel& model, double live_probe_ms,
                const std::optional<planner::WholeLayerSplit>& whole_layers, const planner::FirstPassCost& first_pass) {
  if (a.json) {
    std::fputs(planner::plan_to_json(file).c_str(), stdout);
  } else if (a.toml) {
    std::fputs(planner::plan_to_toml(file).c_str(), stdout);
  } else {
    print_human(file, model.footprint, model.source, whole_layers);
    if (!file.plan.expert_parallel.active()) print_first_pass(file.speed, first_pass);
    const std::string probe_note =
        a.offline ? "" : "; the live re-validation probe took " + std::to_string(static_cast<int>(live_probe_ms + 0.5)) + " ms more";
    std::printf("\nplanned in %.1f ms (profile, model headers, plan, speed%s)%s\n", file.planning_ms, probe_note.c_str(),
                a.out.empty() ? "" : (" -> " + a.out).c_str());
  }
}

std::string quality_line(const planner::QualityEntry& e) {
  char line[256];
  std::snprintf(line, sizeof line, "mean KLD %.5f, p99 %.4f, top-1 %.1f%%, PPL %.3f (f32 %.3f) over %llu tokens of %s",
                e.kld_mean, e.kld_p99, 100 * e.top1_agreement, e.perplexity, e.base_perplexity,
                static_cast<unsigned long long>(e.tokens), e.text.c_str());
  return line;
}

// --quality: the planned representation's measured cost, then every other
// measured one planned on the same request (fits, with its RAM, or why not).
void print_quality(const PlanArgs& a, const planner::QualityTable& table, const coli::DeviceProfile& profile,
                   const planner::PlanFile& file, const LoadedModel& model) {
  const planner::ModelFootprint& fp = model.footprint;
  auto name = [](coli::WeightFormat e, coli::DenseFormat d) {
    return "experts " + std::string(coli::name_of(e)) + ", dense " + std::string(coli::dense_format_name(d));
  };
  std::printf("\nquality   (%s: coli perplexity against the f32 model)\n", a.quality_path.c_str());
  const planner::QualityEntry* planned = table.find(fp.expert_format, fp.dense_format);
  std::printf("  planned      %s: %s\n", name(fp.expert_format, fp.dense_format).c_str(),
              planned ? quality_line(*planned).c_str()
                      : ("not measured (coli perplexity --model M --base F32 --text T --record " + a.quality_path + ")").c_str());
  const bool container = model.source == "coli container index";
  for (const planner::QualityEntry& e : table.entries) {
    if (&e == planned) continue;
    const auto other = planner::plan_or_refusal(profile, planner::describe_footprint(fp.config, e.experts, e.dense), a.request);
    const auto* refusal = std::get_if<planner::Refusal>(&other);
    const std::string verdict =
        refusal ? "does not fit: " + refusal->message.substr(0, refusal->message.find('\n'))
                : "fits in " + planner::format_bytes(std::get<planner::Plan>(other).planned_ram_bytes()) + " of RAM (planned: " +
                      planner::format_bytes(file.plan.planned_ram_bytes()) + ")" +
                      (container ? "; coli convert --experts " + std::string(coli::name_of(e.experts)) + " --dense " +
                                       std::string(coli::dense_format_name(e.dense))
                                 : "");
    std::printf("  alternative  %s: %s; %s\n", name(e.experts, e.dense).c_str(), quality_line(e).c_str(), verdict.c_str());
  }
}

int fail(const std::string& message, int code = coli::cli::kExitError) {
  std::fprintf(stderr, "coli-plan: %s\n", message.c_str());
  return code;
}

// The routing history the plan pins and prices by: --usage FILE (an error where it does not load for
// this model), else MODEL.usage where coli run left one (as coli run --profile plans; one of another
// model is passed over, saying so); --usage none, or neither, plans by uniform routing.
coli::Result<std::optional<coli::experts::UsageHistory>> load_usage(const PlanArgs& a, const LoadedModel& model) {
  const auto& fp = model.footprint;
  const coli::experts::UsageHistoryKey key{static_cast<int>(fp.moe_layer_count()), fp.n_experts, fp.top_k, model.identity};
  if (a.usage_path == "none") return std::optional<coli::experts::UsageHistory>();
  if (!a.usage_path.empty()) {
    auto loaded = coli::experts::UsageHistory::load(a.usage_path, key);
    if (!loaded) return loaded.error();
    return std::optional(std::move(*loaded));
  }
  const std::string fallback = a.model_path + ".usage";
  auto loaded = coli::experts::UsageHistory::load_if_present(fallback, key);
  if (!loaded) {
    std::fprintf(stderr, "coli-plan: passing over the usage history %s: %s\n", fallback.c_str(), loaded.error().message.c_str());
    return std::optional<coli::experts::UsageHistory>();
  }
  if (*loaded)
    std::fprintf(stderr, "coli-plan: usage history %s (the default: coli run records it; --usage none plans without)\n",
                 fallback.c_str());
  return loaded;
}

int plan(PlanArgs& a) {
  using coli::cli::kExitRefused;
  const auto start = Clock::now();
  double live_probe_ms = 0;
  if (!parse_sizes(a)) return coli::cli::kExitUsage;
  auto profile = load_profile_for_plan(a, live_probe_ms);
  if (!profile) return fail(profile.error().message);
  std::string retimed;
  double retime_ms = 0;  // measuring, not planning: left out of planning_ms as the live probe is
  if (a.retime) {
    auto drift = retime_profile(a, *profile, retime_ms);
    if (!drift) return fail(drift.error().message);
    retimed = std::move(*drift);
  }
  // CLI11 checked both names against the valid ones.
  auto model = load_model(a.model_path, *coli::parse_weight_format(a.experts_name, "--experts"),
                          *coli::parse_dense_format(a.dense_name, "--dense"));
  if (!model) return fail(model.error().message);
  std::optional<planner::QualityTable> quality;
  if (!a.quality_path.empty()) {
    auto text = coli::read_text_file(a.quality_path);
    auto table = text ? planner::parse_quality_json(*text, a.quality_path) : coli::Result<planner::QualityTable>(text.error());
    if (!table) return fail(table.error().message);
    if (table->model_identity != model->identity) {
      return fail(a.quality_path + " measured another checkpoint than " + a.model_path + ": give its own quality file");
    }
    quality = std::move(*table);
  }
  a.request.tokenizer = !a.prompt_ids;
  auto usage = load_usage(a, *model);
  if (!usage) return fail(usage.error().message);
  std::optional<coli::experts::UsageHistory> history = std::move(*usage);
  if (history) a.request.history_pins = model->footprint.n_experts;  // as many as the round allows; decide_pins_and_round shrinks them
  a.request.history = history ? &*history : nullptr;
  a.request.backend = coli::planner::gpu_backend_memory(a.gpu_backend, *profile);
  auto outcome = planner::plan_or_refusal(*profile, model->footprint, a.request);
  if (const auto* refusal = std::get_if<planner::Refusal>(&outcome)) {
    if (a.json) std::fputs(planner::refusal_to_json(*refusal).c_str(), stdout);
    return fail("refused: " + refusal->message, kExitRefused);
  }
  planner::PlanFile file;
  file.profile_fingerprint = profile->fingerprint;
  file.profile_path = a.profile_path;
  file.retimed = retimed;
  file.model_name = a.model_path;
  file.model_identity = model->identity;
  file.expert_format = model->footprint.expert_format;
  file.dense_format = model->footprint.dense_format;
  file.top_k = model->footprint.top_k;
  file.plan = std::move(std::get<planner::Plan>(outcome));
  file.speed = planner::predict_plan_speed_with_band(*profile, model->footprint, file.plan, history ? &*history : nullptr);
  // Everything from reading the profile to the prediction: the < 50 ms target.
  file.planning_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count() - live_probe_ms - retime_ms;
  if (!a.out.empty()) {
    if (auto saved = planner::save_plan(a.out, file); !saved) return fail(saved.error().message + " (choose another place with --out)");
  }
  // llama.cpp's whole-layer split is a one-GPU alternative: not printed beside experts spread over GPUs.
  const auto whole_layers = file.plan.expert_parallel.active()
                                ? std::nullopt
                                : planner::whole_layer_split(*profile, model->footprint, file.plan, history ? &*history : nullptr);
  const planner::FirstPassCost first_pass =
      planner::first_pass_cost(*profile, model->footprint, file.plan, file.speed.prefill_prompt_tokens);
  print_plan(a, file, *model, live_probe_ms, whole_layers, first_pass);
  if (quality && !a.json && !a.toml) print_quality(a, *quality, *profile, file, *model);
  return coli::cli::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"coli-plan: plan how to run a MoE model on a profiled machine (memory per component, knobs, speed)"};
  PlanArgs args;
  add_options(app, args);
  coli::cli::add_version_flag(app, "coli-plan");
  if (const auto done = coli::cli::parse(app, argc, argv)) return *done;
  return plan(args);
}
