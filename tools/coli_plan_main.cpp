// coli-plan: a device profile + a model's headers -> the engine's knobs, the
// memory they take per component and tier, why each was chosen, and the
// predicted speed. Reads two small files; never probes or loads weights.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "coli/shaders/catalogue.h"

#include "coli/base/files.h"
#include "coli/base/text.h"
#include "coli/container/container.h"
#include "coli/experts/usage_history.h"
#include "coli/model/model_desc.h"
#include "coli/planner/plan_io.h"
#include "coli/probe/fleet_machine.h"
#include "coli/probe/profile_io.h"

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

void print_human(const planner::PlanFile& f, const planner::ModelFootprint& fp, const std::string& model_source) {
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

  if (vram) {
    std::printf("VRAM: %s of %s on %s (%s)%s\n", planner::format_bytes(vram).c_str(),
                planner::format_bytes(p.gpu.vram_headroom_bytes).c_str(), p.gpu.device.gpu.describe().c_str(),
                p.gpu.vram_headroom_source.c_str(),
                p.gpu.engine_runs_it ? "" : "  [preview: this build's engine computes experts on the CPU]");
  }
  std::printf("\nchoices\n");
  for (const planner::Decision& d : p.decisions) {
    std::printf("  %-21s %-10s %s\n", d.knob.c_str(), d.value.c_str(), d.reason.c_str());
  }
  if (p.streaming()) {
    std::printf("  expert cache: cap %d of %d experts per MoE layer (%d pinned): streaming the rest from disk\n", p.cap,
                p.n_experts, p.pins);
  } else {
    std::printf("  expert cache: all %d experts per MoE layer resident: no streaming\n", p.n_experts);
  }

  std::printf("\npredicted speed\n");
  const planner::SpeedPrediction& s = f.speed;
  std::printf("  hit rate   %.1f%%  (%s)\n", s.hit_rate * 100, s.hit_rate_inputs.c_str());
  if (!s.available) {
    std::printf("  %s\n", s.unavailable.c_str());
    return;
  }
  std::printf("  decode     %.2f tok/s  = 1 / (%s)\n", s.decode_tok_per_s, s.decode_inputs.c_str());
  std::printf("  prefill    %.1f tok/s  %s\n", s.prefill_tok_per_s, s.prefill_inputs.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"coli-plan: plan how to run a MoE model on a profiled machine (memory per component, knobs, speed)"};
  std::string profile_path, model_path, ram_text, out, experts_name = "q4_g64", dense_name = "source";
  planner::PlanRequest request;
  std::string usage_path, vram_text;
  bool json = false, toml = false, prompt_ids = false, offline = false;
  app.add_option("--profile", profile_path, "Device profile written by coli-probe")->required();
  app.add_option("--model", model_path, "Hugging Face model directory (headers only are read) or its config.json")
      ->required();
  app.add_option("--threads", request.threads, "Force the decode thread count");
  app.add_option("--cap", request.cap, "Force the expert cache slots per MoE layer (pins included)");
  app.add_option("--pin", request.pins, "Force the pinned experts per MoE layer");
  app.add_option("--ram", ram_text, "RAM the plan may use, e.g. 16G (at most the profile's measured headroom)");
  app.add_option("--ctx", request.ctx, "Context length to reserve the KV cache for");
  app.add_option("--experts", experts_name, "Expert format in the container")
      ->check(CLI::IsMember({"q4_g64", "q8_row"}))
      ->capture_default_str();
  app.add_option("--dense", dense_name, "Dense weight format")
      ->check(CLI::IsMember({"source", "q8_row", "q4_g64"}))
      ->capture_default_str();
  app.add_option("--gpu", request.gpu,
                 "none, auto (a GPU only when this build's engine runs experts there) or a Vulkan device index "
                 "(plans a VRAM tier)")
      ->capture_default_str();
  std::vector<std::string> variant_names;
  for (const coli::shaders::ShaderVariant& v : coli::shaders::gemv_catalogue()) variant_names.emplace_back(v.name);
  app.add_option("--gpu-variant", request.gpu_variant, "Force this shader variant for every expert shape (checked against the GPU's limits)")
      ->check(CLI::IsMember(variant_names));
  app.add_option("--kernel", request.cpu_kernel, "Force the CPU kernel variant: avx512vnni, avx512, avx2, scalar or exact");
  app.add_option("--vram", vram_text, "VRAM the tier may use, e.g. 40G (at most the device's budget)");
  app.add_option("--usage", usage_path,
                 "Routing history (MODEL.usage from coli run): pins the most-used experts and predicts the hit rate");
  app.add_option("--prompt-tokens", request.prompt_tokens,
                 "Longest prompt the runs will give, in tokens (default: the whole context)");
  app.add_flag("--prompt-ids", prompt_ids, "Runs pass token ids, so no tokenizer tables are planned");
  auto* json_flag = app.add_flag("--json", json, "Print the plan as JSON instead of the table");
  app.add_flag("--toml", toml, "Print the plan as TOML instead of the table")->excludes(json_flag);
  app.add_option("--out", out, "Write the plan file (TOML) here, atomically");
  app.add_flag("--offline", offline, "Plan for the machine the profile describes, not this one (no live re-validation)");
  CLI11_PARSE(app, argc, argv);

  const auto start = Clock::now();
  double live_probe_ms = 0;
  if (!ram_text.empty()) {
    request.ram = coli::parse_size(ram_text);
    if (!request.ram) {
      std::fprintf(stderr, "coli-plan: --ram '%s' is not a size: give a unit, e.g. 16G, 512M or 1073741824B\n", ram_text.c_str());
      return 1;
    }
  }
  auto profile = coli::fleet::load_shared_profile(profile_path);
  if (!profile) {
    std::fprintf(stderr, "coli-plan: %s\n", profile.error().message.c_str());
    return 1;
  }
  if (offline) {
    std::fprintf(stderr, "coli-plan: --offline: planning for the machine %s describes, from its recorded memory; "
                         "coli run --plan checks the plan against the live headroom\n", profile_path.c_str());
  } else {  // live re-validation (docs/fleet.md): memory always live, tuned values only for a matching class
    // A quick probe of this machine (GPU drivers included: 50 ms with
    // lavapipe, ~0.4 s with NVIDIA's): timed apart from planning itself.
    const auto probe_start = Clock::now();
    auto checked = coli::fleet::revalidate_here(*profile);
    live_probe_ms = std::chrono::duration<double, std::milli>(Clock::now() - probe_start).count();
    if (!checked) {
      std::fprintf(stderr, "coli-plan: %s (or plan for another machine with --offline)\n", checked.error().message.c_str());
      return 1;
    }
    for (const std::string& line : checked->report(profile_path)) std::fprintf(stderr, "coli-plan: %s\n", line.c_str());
    *profile = std::move(checked->effective);
  }
  // CLI11 checked both names against the valid ones.
  auto model = load_model(model_path, *coli::parse_weight_format(experts_name, "--experts"),
                          *coli::parse_dense_format(dense_name, "--dense"));
  if (!model) {
    std::fprintf(stderr, "coli-plan: %s\n", model.error().message.c_str());
    return 1;
  }
  request.tokenizer = !prompt_ids;
  if (!vram_text.empty()) {
    request.vram = coli::parse_size(vram_text);
    if (!request.vram) {
      std::fprintf(stderr, "coli-plan: --vram '%s' is not a size: give a unit, e.g. 40G or 512M\n", vram_text.c_str());
      return 1;
    }
  }
  if (request.prompt_tokens && *request.prompt_tokens < 1) {
    std::fprintf(stderr, "coli-plan: --prompt-tokens %d holds no token: use 1 or more\n", *request.prompt_tokens);
    return 1;
  }
  std::optional<coli::experts::UsageHistory> history;
  if (!usage_path.empty()) {
    const auto& fp = model->footprint;
    const coli::experts::UsageHistoryKey key{static_cast<int>(fp.moe_layer_count()), fp.n_experts, fp.top_k, model->identity};
    auto loaded = coli::experts::UsageHistory::load(usage_path, key);
    if (!loaded) {
      std::fprintf(stderr, "coli-plan: %s\n", loaded.error().message.c_str());
      return 1;
    }
    history = std::move(*loaded);
    request.history_pins = fp.n_experts;  // as many as the round allows; decide_pins_and_round shrinks them
  }
  request.history = history ? &*history : nullptr;
  auto plan = planner::make_plan(*profile, model->footprint, request);
  if (!plan) {
    std::fprintf(stderr, "coli-plan: refused: %s\n", plan.error().message.c_str());
    return 1;
  }
  planner::PlanFile file;
  file.profile_fingerprint = profile->fingerprint;
  file.profile_path = profile_path;
  file.model_name = model_path;
  file.model_identity = model->identity;
  file.expert_format = model->footprint.expert_format;
  file.dense_format = model->footprint.dense_format;
  file.top_k = model->footprint.top_k;
  file.plan = std::move(*plan);
  file.speed = planner::predict_speed(*profile, model->footprint, file.plan, history ? &*history : nullptr);
  // Everything from reading the profile to the prediction: the < 50 ms target.
  file.planning_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count() - live_probe_ms;

  if (!out.empty()) {
    if (auto saved = planner::save_plan(out, file); !saved) {
      std::fprintf(stderr, "coli-plan: %s (choose another place with --out)\n", saved.error().message.c_str());
      return 1;
    }
  }
  if (json) {
    std::fputs(planner::plan_to_json(file).c_str(), stdout);
  } else if (toml) {
    std::fputs(planner::plan_to_toml(file).c_str(), stdout);
  } else {
    print_human(file, model->footprint, model->source);
    const std::string probe_note =
        offline ? "" : "; the live re-validation probe took " + std::to_string(static_cast<int>(live_probe_ms + 0.5)) + " ms more";
    std::printf("\nplanned in %.1f ms (profile, model headers, plan, speed%s)%s\n", file.planning_ms, probe_note.c_str(),
                out.empty() ? "" : (" -> " + out).c_str());
  }
  return 0;
}
