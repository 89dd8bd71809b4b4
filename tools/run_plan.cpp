#include "run_plan.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <cstdio>

#include "coli/base/files.h"
#include "coli/base/process_memory.h"
#include "coli/base/text.h"
#include "coli/base/weight_memory.h"
#include "coli/experts/usage_history.h"
#include "coli/planner/expert_parallel_speed.h"
#include "coli/planner/speed_band.h"
#include "coli/planner/footprint.h"
#include "coli/probe/fleet_machine.h"
#include "coli/probe/profile_io.h"
#include "coli/runtime/plan_options.h"

namespace coli::tools {
namespace {

std::string shape_identity(const runtime::ModelShape& shape) {
  return experts::usage_model_identity(shape.config_json, shape.tensor_names);
}

// `id` must be this machine's device of the same index (by UUID, else index
// and model): CUDA ordinals and UUIDs when `cuda`, else Vulkan's. `what`
// says which GPU of the plan it is, `advice` what to re-plan with.
Status check_device_here(const GpuIdentity& id, bool cuda, const GpuFacts& gpus, const std::string& what,
                         const std::string& advice) {
  const auto here = cuda ? find_cuda_gpu(gpus, id) : find_gpu(gpus, id);
  if (here && *here == id.index) return Ok{};
  return make_error(what + id.describe() +
                    (here ? ", which is " + std::string(cuda ? "CUDA" : "Vulkan") + " device " + std::to_string(*here) + " here"
                          : ", which this machine does not have") +
                    ": re-plan here with coli-plan --profile" + advice);
}

// A GPU plan runs on the GPU it names, an expert-parallel plan on every GPU
// it names, each this machine's device of the same index.
Status check_gpu_here(const planner::Plan& plan, const GpuFacts& gpus) {
  if (plan.expert_parallel.active()) {
    const std::string what = "the plan spreads experts over " + std::to_string(plan.expert_parallel.gpus.size()) +
                             " GPUs, among them ";
    for (const planner::GpuShare& share : plan.expert_parallel.gpus) {
      if (Status s = check_device_here({share.ordinal, share.uuid, share.name}, true, gpus, what,
                                       " (and --gpus for the GPUs this machine has)");
          !s)
        return s;
    }
    return Ok{};
  }
  if (!plan.gpu.whole_decoder || !plan.gpu.device.gpu.chosen()) return Ok{};
  return check_device_here(plan.gpu.device.gpu, plan.gpu.backend == "cuda", gpus, "the plan runs on ", "");
}

// What this build's engine cannot honour is refused, never approximated.
Status check_runnable(const planner::Plan& plan, const std::string& source, const CpuSet& usable) {
  if (plan.gpu.vram_slots() > 0 && (!plan.gpu.engine_runs_it || !plan.gpu.whole_decoder)) {
    return make_error(source + " places " + std::to_string(plan.gpu.vram_slots()) + " experts in VRAM on " +
                      plan.gpu.device.gpu.describe() + " (" + plan.gpu.backend +
                      " backend), which this build's engine does not run (a preview): re-plan with --gpu none");
  }
  // Both sets: a prefill set outside this process's CPUs failed only when
  // the first prompt pinned the team to it, after the load.
  for (const auto& [pus, what] : {std::pair{&plan.compute_pus, "its threads"}, std::pair{&plan.prefill_pus, "its prefill threads"}}) {
    if (!usable.empty() && !pus->is_subset_of(usable)) {
      return make_error(source + " pins " + what + " to CPUs " + pus->to_list() + ", but this process may use " +
                        usable.to_list() + ": re-plan here with coli-plan --profile");
    }
  }
  return Ok{};
}

// Anonymous vs file-backed pages now: file pages (mapped libraries, any
// mmap'd container pages) are RSS too but the kernel can drop them.
void print_rss_kinds() {
  if (auto status = read_text_file("/proc/self/status")) {
    for (const char* field : {"RssAnon:", "RssFile:", "RssShmem:"}) {
      const auto at = status->find(field);
      if (at == std::string::npos) continue;
      const auto end = status->find('\n', at);
      const std::size_t name = std::string_view(field).size();
      const std::string_view value = trim(std::string_view(*status).substr(at + name, end - at - name));
      std::fprintf(stderr, "  %s %.*s\n", field, static_cast<int>(value.size()), value.data());
    }
  }
  // Whether the weights could get huge pages (coli/base/weight_memory.h), for
  // anyone comparing decode speed with the probe's bandwidth.
  std::fprintf(stderr, "  transparent huge pages: %s; weights advised: %s\n", transparent_huge_page_mode().c_str(),
              weight_memory_huge_pages() ? "yes" : "no (COLI_HUGE_PAGES=off)");
}

// The RAM a run may take, read fresh: the live headroom (meminfo and cgroup
// limits) plus what this process already holds, since a plan and a knob
// estimate both count the whole process as the run's own.
struct RunRoom {
  std::uint64_t bytes = 0;
  std::string source;
};
RunRoom room_for_this_run(const DeviceProfile& live) {
  return {live.memory.headroom_bytes + process_resident_bytes(),
          live.memory.headroom_source + ", this process's resident set included"};
}

// What a plan's speed is predicted from, kept for the end of the run.
struct PredictionInputs {
  DeviceProfile profile;
  planner::ModelFootprint footprint;
  planner::Plan plan;
  std::optional<experts::UsageHistory> history;
};

RunPredictor predictor(PredictionInputs inputs) {
  auto kept = std::make_shared<const PredictionInputs>(std::move(inputs));
  return [kept](int prompt_tokens, int decode_depth, planner::DecodeRun decode) {
    const experts::UsageHistory* history = kept->history ? &*kept->history : nullptr;
    return RunForecast{planner::predict_plan_speed_with_band(kept->profile, kept->footprint, kept->plan, history,
                                                             decode_depth, prompt_tokens, decode),
                       planner::first_pass_cost(kept->profile, kept->footprint, kept->plan, prompt_tokens)};
  };
}

std::optional<experts::UsageHistory> copy_of(const experts::UsageHistory* history) {
  return history ? std::optional(*history) : std::nullopt;
}

// A plan file's profile, where it is still at the path the plan names with
// the fingerprint it was planned from: the run then predicts for its own
// prompt and depth as with --profile. Empty otherwise (the plan's figures stand).
RunPredictor plan_file_predictor(const planner::PlanFile& file, const runtime::ModelShape& shape,
                                 const experts::UsageHistory* history) {
  if (file.profile_path.empty() || file.profile_fingerprint.empty()) return {};
  auto profile = fleet::load_shared_profile(file.profile_path);  // gone or unreadable: an error, so none
  if (!profile || profile->fingerprint != file.profile_fingerprint) return {};
  auto footprint = runtime::footprint_of(shape);
  if (!footprint) return {};
  return predictor({std::move(*profile), std::move(*footprint), file.plan, copy_of(history)});
}

}  // namespace

Result<PlannedKnobs> knobs_from_plan(const std::filesystem::path& plan_file, const runtime::ModelShape& shape,
                                     const experts::UsageHistory* history, bool* refused, const char* program) {
  auto plan = planner::load_plan(plan_file);
  if (!plan) return plan.error();
  // A plan made elsewhere (coli-plan --offline) never takes more than this machine's live headroom.
  auto live = fleet::probe_live();
  if (!live) return make_error("cannot read this machine's live memory facts to check " + plan_file.string() + ": " +
                               live.error().message);
  const std::uint64_t needed = plan->plan.planned_ram_bytes() + plan->plan.margin.bytes;
  const RunRoom room = room_for_this_run(*live);
  if (needed > room.bytes) {
    if (refused) *refused = true;
    return make_error(plan_file.string() + " needs " + format_bytes(needed) + " of RAM with its margin, but this "
                      "machine's live headroom is " + format_bytes(room.bytes) + " (" + room.source +
                      "): re-plan here with coli-plan --profile");
  }
  if (Status s = check_runnable(plan->plan, plan_file.string(), live->cpu.usable.pus); !s) return s.error();
  if (plan->model_identity != shape_identity(shape)) {
    return make_error(plan_file.string() + " was planned for another model (" + plan->model_name +
                      "): run coli-plan for this one");
  }
  if (plan->plan.pins > 0 && history == nullptr) {
    // The history the plan pinned from is gone: run unpinned rather than refuse (this run records a new one).
    std::fprintf(stderr, "%s: %s pins %d experts per layer, but there is no usage history yet: running without pins\n",
                 program, plan_file.string().c_str(), plan->plan.pins);
    plan->plan.pins = 0;
  }
  if (Status s = check_gpu_here(plan->plan, live->gpus); !s) return make_error(plan_file.string() + ": " + s.error().message);
  auto options = runtime::options_from_plan(plan->plan, shape, history);
  if (!options) return make_error(plan_file.string() + ": " + options.error().message);
  auto predict_for = plan_file_predictor(*plan, shape, history);
  return PlannedKnobs{std::move(*options), *plan, "plan " + plan_file.string(), std::move(predict_for)};
}

Result<PlannedKnobs> knobs_from_profile(const std::filesystem::path& profile_file, const runtime::ModelShape& shape,
                                        int history_pins, const RunWorkload& workload, bool* refused) {
  auto profile = fleet::load_shared_profile(profile_file.string());
  if (!profile) return profile.error();
  // Live re-validation (docs/fleet.md): memory, cgroup limits and GPU memory
  // are this machine's; tuned values only when the class matches.
  auto checked = fleet::revalidate_here(*profile);
  if (!checked) return checked.error();
  for (const std::string& line : checked->report(profile_file.string())) std::fprintf(stderr, "%s: %s\n", workload.program, line.c_str());
  *profile = std::move(checked->effective);
  auto described = runtime::footprint_of(shape);
  if (!described) return described.error();
  const planner::ModelFootprint& footprint = *described;
  planner::PlanRequest request;
  request.history_pins = history_pins;
  if (workload.prompt_tokens > 0) request.prompt_tokens = workload.prompt_tokens;
  request.tokenizer = workload.tokenizer;
  request.history = workload.history;
  request.backend = planner::gpu_backend_memory("auto", *profile);  // as coli-plan's default --gpu-backend
  auto plan = planner::make_plan(*profile, footprint, request);
  if (!plan) {
    if (refused) *refused = true;
    return plan.error();
  }
  if (Status s = check_runnable(*plan, "the plan from " + profile_file.string(), profile->cpu.usable.pus); !s) {
    return s.error();
  }
  planner::PlanFile file;
  file.profile_fingerprint = profile->fingerprint;
  file.profile_path = profile_file.string();
  file.model_identity = shape_identity(shape);
  file.expert_format = shape.expert_format;
  file.dense_format = shape.dense_format;
  file.top_k = shape.top_k;
  file.plan = *plan;
  // As coli-plan predicts it; the run ends with the same model at its own prompt and depth.
  file.speed = planner::predict_plan_speed_with_band(*profile, footprint, *plan, workload.history);
  if (Status s = check_gpu_here(*plan, profile->gpus); !s) return s.error();
  auto options = runtime::options_from_plan(*plan, shape, workload.history);
  if (!options) return make_error("the plan from " + profile_file.string() + ": " + options.error().message);
  auto predict_for = predictor({std::move(*profile), footprint, *plan, copy_of(workload.history)});
  return PlannedKnobs{std::move(*options), file, "profile " + profile_file.string(), std::move(predict_for)};
}

Result<std::uint64_t> check_memory_without_plan(const runtime::ModelShape& shape, const runtime::ModelOptions& options,
                                                const RunWorkload& workload, std::optional<std::uint64_t> ram,
                                                bool skip_check, bool* refused) {
  auto need = runtime::memory_for_options(shape, options, workload.prompt_tokens, workload.tokenizer);
  if (!need) return need.error();
  if (skip_check) {
    std::fprintf(stderr, "%s: --no-memory-check: not checking %s of RAM against the headroom\n", workload.program,
                 format_bytes(need->needed()).c_str());
    return need->needed();
  }
  auto live = fleet::probe_live();
  if (!live) return make_error("cannot read this machine's live memory facts to check the run's memory: " +
                               live.error().message + " (--no-memory-check skips the check)");
  RunRoom room = room_for_this_run(*live);
  room.source = "live headroom, " + room.source;
  if (ram && *ram < room.bytes) room = {*ram, "--ram"};
  const std::uint64_t headroom = room.bytes;
  if (Status fits = runtime::check_headroom(*need, headroom, room.source); !fits) {
    if (refused) *refused = true;
    return fits.error();
  }
  std::fprintf(stderr, "%s: memory: %s of RAM with margin, within %s (%s); RSS watchdog at %s\n", workload.program,
               format_bytes(need->needed()).c_str(), format_bytes(headroom).c_str(), room.source.c_str(),
               format_bytes(need->needed()).c_str());
  return need->needed();
}

bool print_plan_vs_actual(const planner::PlanFile& file, const runtime::ModelStats& stats, std::uint64_t peak_rss) {
  const planner::Plan& plan = file.plan;
  auto line_bytes = [&](std::initializer_list<const char*> components) {
    std::uint64_t total = 0;
    for (const char* name : components) {
      if (const auto* line = plan.memory.find(name)) total += line->bytes;
    }
    return total;
  };
  auto row = [](const char* what, std::uint64_t planned, std::uint64_t actual) {
    const double ratio = planned > 0 ? static_cast<double>(actual) / static_cast<double>(planned) : actual > 0 ? 2 : 1;
    std::fprintf(stderr, "  %-28s planned %10s  measured %10s  (%+.1f%%)\n", what, format_bytes(planned).c_str(),
                format_bytes(actual).c_str(), (ratio - 1) * 100);
  };
  std::fprintf(stderr, "plan vs actual:\n");
  row("dense weights", line_bytes({"dense weights"}), stats.dense_bytes);
  row("expert cache slabs", line_bytes({"expert cache: pinned slots", "expert cache: evictable slots"}),
      stats.expert_cache_bytes);
  row(("KV cache (" + std::string(kv_type_name(stats.kv_type)) + ")").c_str(), line_bytes({"KV cache"}), stats.kv_cache_bytes);
  if (stats.backend != "cpu") {
    const runtime::GpuMemoryStats& g = stats.gpu;
    std::fprintf(stderr, "  on %s (%s):\n", g.device.c_str(), stats.backend.c_str());
    row("VRAM dense weights", line_bytes({"GPU dense weights"}), g.dense_bytes);
    row("VRAM expert slots", line_bytes({"expert tier: VRAM slots"}), g.expert_bytes);
    row("VRAM KV cache", line_bytes({"GPU KV cache"}), g.kv_cache_bytes);
    row("VRAM activations", line_bytes({"GPU activations"}), g.activation_bytes);
    if (stats.backend == "cuda") row("VRAM large-page rounding", line_bytes({"GPU large-page rounding"}), g.page_rounding_bytes);
    const std::uint64_t planned_vram = plan.memory.total(planner::Tier::vram) - plan.gpu.vram_reserve_bytes;
    row("VRAM (without the reserve)", planned_vram, g.vram_bytes());
    if (g.device_measured_bytes > 0) {
      row("VRAM used on the device", planned_vram, g.device_measured_bytes);
      std::fprintf(stderr, "    of which kernel modules and %d CUDA graph(s): %s (the device's count across the warm-up and capture)\n",
                   g.graph_segments, format_bytes(g.launch_measured_bytes).c_str());
    }
    row("host-visible buffers", line_bytes({"GPU host-visible buffers"}), g.host_visible_bytes);
  }
  if (stats.rss_watchdog_limit == 0) {
    std::fprintf(stderr, "  RSS watchdog: off (--rss-limit 0)\n");
  } else {
    std::fprintf(stderr, "  RSS watchdog: limit %s; shrank the expert cache %llu time(s), %s given back\n",
                format_bytes(stats.rss_watchdog_limit).c_str(), static_cast<unsigned long long>(stats.rss_watchdog_shrinks),
                format_bytes(stats.rss_watchdog_released).c_str());
  }
  const std::uint64_t planned = plan.planned_ram_bytes();
  row("process RSS (peak)", planned, peak_rss);
  print_rss_kinds();
  std::fprintf(stderr, "  peak RSS bytes: %llu, planned RAM bytes: %llu, margin bytes: %llu\n",
              static_cast<unsigned long long>(peak_rss), static_cast<unsigned long long>(planned),
              static_cast<unsigned long long>(plan.margin.bytes));
  const bool within = peak_rss <= planned + plan.margin.bytes;
  if (!within) {
    std::fprintf(stderr, "  WARNING: peak RSS %s exceeds the plan %s plus its margin %s: re-plan with a smaller --cap or --ctx\n",
                format_bytes(peak_rss).c_str(), format_bytes(planned).c_str(), format_bytes(plan.margin.bytes).c_str());
  }
  return within;
}

RunPrediction prediction_for_run(const PlannedKnobs& knobs, const MeasuredSpeed& measured) {
  const planner::PlanFile& file = knobs.plan;
  if (knobs.predict_for && measured.prompt_tokens > 0) {
    const int depth = static_cast<int>(std::lround(measured.decode_mean_depth));
    // The run's decode follows its own prompt: priced by the trace's runs that did the same, after a
    // prompt of this one's length or the two that bracket it, where it has them.
    const planner::DecodeRun decode{measured.decode_tokens > 0 ? measured.decode_tokens : planner::kTracedDecodeRun,
                                    planner::DecodeStart::in_context, measured.prompt_tokens};
    RunForecast forecast = knobs.predict_for(measured.prompt_tokens, depth, decode);
    if (!measured.first_pass) forecast.first_pass = {.inputs = "a later prompt of this process: its buffers are warm"};
    return {std::move(forecast.speed), std::move(forecast.first_pass), true, measured.prompt_tokens, depth};
  }
  planner::FirstPassCost unpriced;
  unpriced.inputs = "the plan's own figures stand: its profile is not at hand to price this run's prompt";
  return {file.speed, unpriced, false, file.speed.prefill_prompt_tokens, file.plan.ctx / 2};
}

namespace {

// The reads the prediction counts, where experts stream: what most of a streaming run's time waits on.
void print_reads_vs_plan(const planner::SpeedPrediction& speed, const MeasuredSpeed& measured) {
  if (speed.decode_disk_reads <= 0 && speed.prefill_disk_reads <= 0) return;
  if (measured.prompt_reads >= 0) {
    std::fprintf(stderr, "  %-28s planned %8.1f        measured %8.0f        (pp%d planned, pp%d measured)\n",
                 "expert reads, the prompt", speed.prefill_disk_reads, measured.prompt_reads,
                 speed.prefill_prompt_tokens, measured.prompt_tokens);
  }
  if (measured.decode_reads_per_token >= 0) {
    std::fprintf(stderr, "  %-28s planned %8.2f        measured %8.2f\n", "expert reads a decode token",
                 speed.decode_disk_reads, measured.decode_reads_per_token);
  }
}

// The prompt's pass as its process's first: the fresh pages it faulted in, measured beside those priced.
void print_first_pass(const RunPrediction& predicted, const MeasuredSpeed& measured) {
  const planner::FirstPassCost& first = predicted.first_pass;
  const auto faults = static_cast<unsigned long long>(measured.prompt_page_faults);
  if (!first.priced) {
    std::fprintf(stderr, "  the prompt's pass took %llu page faults (memory this process touched for the first time: its "
                         "prompt-sized buffers), which the prediction does not price (%s)\n", faults, first.inputs.c_str());
    return;
  }
  std::fprintf(stderr, "  the prompt's pass took %llu page faults; as the process's first it was priced %s ms more than a "
                       "warm pass for %s; warm passes (coli serve's later prompts, coli-sweep's runs) take neither\n",
               faults, format_fixed(first.seconds * 1e3, 2).c_str(), first.inputs.c_str());
}

}  // namespace

void print_speed_vs_plan(const RunPrediction& predicted, const MeasuredSpeed& measured) {
  const planner::SpeedPrediction& speed = predicted.speed;
  if (!speed.available) {
    std::fprintf(stderr, "speed: the plan has no prediction (%s)\n",
                 speed.unavailable.empty() ? "none was made" : speed.unavailable.c_str());
    return;
  }
  auto row = [](const char* what, double planned, double actual, const std::string& note) {
    if (actual <= 0) return;
    std::fprintf(stderr, "  %-28s planned %8.1f tok/s  measured %8.1f tok/s  (%+.1f%%)%s\n", what, planned, actual,
                (planned / actual - 1) * 100, note.c_str());
  };
  // The probe's slowest and fastest rounds (speed_band.h): whether the measured figure is inside.
  auto band = [&](double slowest, double fastest, double actual) -> std::string {
    const std::string lo = format_fixed(slowest, 1), hi = format_fixed(fastest, 1);
    if (!speed.band.made() || actual <= 0 || lo == hi) return "";  // one round per rate: no spread to show
    const char* where = actual < slowest ? "below" : actual > fastest ? "above" : "inside";
    return "; " + std::string(where) + " the probe's band " + lo + "-" + hi;
  };
  std::fprintf(stderr, "speed: plan vs actual (error = planned / measured - 1; %s):\n",
               predicted.for_this_run ? "predicted from the profile for this run's prompt and depth"
                                      : "the plan's figures, for its own prompt and depth");
  const std::string planned_prompt = predicted.prompt_tokens > 0 ? "pp" + std::to_string(predicted.prompt_tokens) : "the plan's prompt";
  row("prefill", predicted.prefill_tok_s(), measured.prefill_tok_s,
      "  measured pp" + std::to_string(measured.prompt_tokens) + ", planned " + planned_prompt + " in rounds of the plan" +
          (predicted.first_pass.priced ? " as a first pass" : "") +
          band(predicted.as_first_pass(speed.band.prefill_slowest), predicted.as_first_pass(speed.band.prefill_fastest),
               measured.prefill_tok_s));
  char depths[128];
  std::snprintf(depths, sizeof depths, "  planned at KV depth %d%s, measured at %.1f on average", predicted.decode_depth,
                predicted.for_this_run ? "" : " (ctx/2)", measured.decode_mean_depth);
  row("decode", speed.decode_tok_per_s, measured.decode_tok_s,
      depths + band(speed.band.decode_slowest, speed.band.decode_fastest, measured.decode_tok_s));
  print_reads_vs_plan(speed, measured);
  print_first_pass(predicted, measured);
  if (measured.cold_cache) {
    std::fprintf(stderr, "  the expert cache started empty (--no-preload, or no usage history yet): this run's first pass "
                         "read every expert it used, where the prediction prices the history's warm cache\n");
  }
}

void print_measured(const runtime::ModelStats& stats, std::uint64_t peak_rss) {
  std::fprintf(stderr, "memory (the engine's own accounting; plan with coli-plan to compare):\n");
  std::fprintf(stderr, "  %-28s %10s\n", "dense weights", format_bytes(stats.dense_bytes).c_str());
  std::fprintf(stderr, "  %-28s %10s\n", "expert cache slabs", format_bytes(stats.expert_cache_bytes).c_str());
  std::fprintf(stderr, "  %-28s %10s\n", ("KV cache (" + std::string(kv_type_name(stats.kv_type)) + ")").c_str(),
              format_bytes(stats.kv_cache_bytes).c_str());
  std::fprintf(stderr, "  %-28s %10s\n", "process RSS (peak)", format_bytes(peak_rss).c_str());
  print_rss_kinds();
}

int default_gpu_batch_tokens(const std::string& backend) {
  if (backend == "cuda") return backend::cuda_backend_memory({.kind = backend::BackendKind::cuda, .name = "cuda"}).prefill_batch_tokens;
  if (backend == "vulkan") {
    return backend::vulkan_backend_memory({.kind = backend::BackendKind::vulkan, .name = "vulkan"}).prefill_batch_tokens;
  }
  return runtime::ModelOptions{}.gpu_batch_tokens;  // the CPU engine does not read it
}

}  // namespace coli::tools
