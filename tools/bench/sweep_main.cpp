// coli-sweep: how close the planned configuration gets to the best one. Runs
// MoeModel in this process over a grid of configurations (thread sets, cap,
// pins, CPU kernel) on a fixed workload, interleaved (every configuration
// once per repeat, round-robin), checks that every run produced the same
// greedy tokens, and writes CSV, JSON and an SVG plot with the planned
// configuration marked, ranked and given as a percentage of the best.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "coli/base/clock.h"
#include "coli/base/cpu_kernels.h"
#include "coli/base/files.h"
#include "coli/base/text.h"
#include "coli/cli/command_line.h"
#include "coli/model/model_config.h"
#include "coli/planner/speed_band.h"
#include "coli/planner/footprint.h"
#include "coli/planner/plan.h"
#include "coli/planner/plan_io.h"
#include "coli/planner/speed.h"
#include "coli/probe/fleet_machine.h"
#include "coli/probe/profile_io.h"
#include "coli/runtime/plan_options.h"
#include "cpu/gemv_cpu.h"
#include "measure/retime.h"
#include "sweep_duration.h"
#include "sweep_grid.h"
#include "sweep_report.h"
#include "sweep_retime.h"
#include "sweep_run.h"

namespace {

namespace fs = std::filesystem;
using namespace coli;
using namespace coli::bench;

struct Args {
  std::string model, profile, usage, out = "sweep-out", ram;
  std::vector<int> threads;               // thread counts to keep; empty: every set from the profile
  std::vector<std::string> caps;          // "all" or slots; empty: all + one streaming cap
  std::vector<std::string> pins{"off", "on"};
  std::string record_usage = "auto";      // "auto": record a history where none loads and pins or a streaming cap want one; "off"
  std::vector<std::string> kernels;       // "auto" = engine's choice; empty: what the profile's ISA allows
  int plan_cap = 0;                       // 0: the planner decides
  double min_time = 0.5;                  // seconds a run's timed passes add up to (Workload::min_timed_seconds)
  double max_minutes = 0;                 // the whole sweep's time; 0: no limit (sweep_duration.h)
  SpeedTests tests = [] {  // llama-bench's pp512 and decode at depths 0 and 512, fewer tokens per grid point
    SpeedTests t;
    t.decode_tokens = 16;
    return t;
  }();
  std::string token_check = "per-kernel";  // "all" or "per-kernel" (variants round differently: moe_model.h)
  std::string gpu = "none", gpu_backend = "auto";  // --gpu N|auto adds GPU placements
  std::vector<std::string> vram{"all"};            // VRAM budgets: "all" (the device's) or sizes
  std::vector<std::string> splits{"expert", "layer"};
  std::vector<std::string> gpus;                   // expert-parallel placements: coli-plan --gpus values ("all", "0,1")
  bool retime = false;              // time the profile's CPU figures again before each repeat (sweep_retime.h)
  double retime_seconds = 4.0;      // per thread set (the probe's kTuningSecondsPerSet)
};

int fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "coli-sweep: %s\n", message.c_str());
  return code;
}

// Resident, plus one streaming cap: a quarter of the experts, at least 2 x top_k.
std::vector<int> default_caps(const planner::ModelFootprint& fp) {
  std::vector<int> caps{fp.n_experts};
  const int streaming = std::min(fp.n_experts - 1, std::max(2 * fp.top_k, fp.n_experts / 4));
  if (streaming >= fp.top_k) caps.push_back(streaming);
  return caps;
}

struct Setup {
  DeviceProfile profile;
  runtime::ModelShape shape;
  planner::ModelFootprint footprint;
  Workload workload;
  std::optional<experts::UsageHistory> history;
  fs::path recorded_history;  // where a history recorded from the workload went (empty: none recorded)
  planner::PlanRequest request;
};

// cap 0: the planner decides.
Result<planner::Plan> plan_with_cap(const Setup& s, int cap) {
  planner::PlanRequest request = s.request;
  if (cap > 0) request.cap = cap;
  return planner::make_plan(s.profile, s.footprint, request);
}

// The planner's prediction for one configuration: decode at each depth of
// the tests (a test's tokens see on average depth + n/2 positions; a test at
// depth 0 starts a fresh context, a deeper one follows the prompt that
// filled its cache), combined as the measured figure is (every depth's
// tokens over the summed seconds), and prefill of the prompt.
ConfigPrediction predict_config(const Setup& s, const DeviceProfile& profile, const planner::Plan& plan, const SpeedTests& tests) {
  const experts::UsageHistory* history = s.history ? &*s.history : nullptr;
  ConfigPrediction out;
  double seconds = 0;
  for (int depth : tests.depths) {
    const planner::DecodeRun run{tests.decode_tokens, depth > 0 ? planner::DecodeStart::in_context : planner::DecodeStart::fresh,
                                 depth};
    const planner::SpeedPrediction p = planner::predict_speed(profile, s.footprint, plan, history, depth + tests.decode_tokens / 2,
                                                              tests.prefill_tokens, run);
    if (!p.available) {
      out.unavailable = p.unavailable;
      return out;
    }
    out.prefill_tok_s = p.prefill_tok_per_s;
    out.prefill_disk_reads = p.prefill_disk_reads;
    out.prefill_tokens = p.prefill_prompt_tokens;
    out.decode_tok_s_at_depth.push_back(p.decode_tok_per_s);
    out.decode_disk_reads_at_depth.push_back(p.decode_disk_reads);
    out.disk_read_seconds = p.disk_read_seconds;
    seconds += tests.decode_tokens / p.decode_tok_per_s;
  }
  const auto depths = static_cast<double>(std::max<std::size_t>(1, tests.depths.size()));
  for (const double reads : out.decode_disk_reads_at_depth) out.decode_disk_reads += reads / depths;
  out.available = seconds > 0;
  out.decode_tok_s = seconds > 0 ? tests.decode_tokens * static_cast<double>(tests.depths.size()) / seconds : 0;
  return out;
}

// predict_config with its band: the same on the profile's slowest and
// fastest rounds (`bounds`: planner::at_sample_bound's two profiles).
ConfigPrediction predict_config_with_band(const Setup& s, const std::pair<DeviceProfile, DeviceProfile>& bounds,
                                          const planner::Plan& plan, const SpeedTests& tests) {
  ConfigPrediction out = predict_config(s, s.profile, plan, tests);
  const ConfigPrediction slow = predict_config(s, bounds.first, plan, tests);
  const ConfigPrediction fast = predict_config(s, bounds.second, plan, tests);
  if (!out.available || !slow.available || !fast.available) return out;
  out.band = {slow.decode_tok_s, fast.decode_tok_s, slow.prefill_tok_s, fast.prefill_tok_s};
  return out;
}

fs::path usage_path(const Args& args) { return args.usage.empty() ? args.model + ".usage" : args.usage; }

// The usage history pins come from: --usage (default MODEL.usage) when it
// loads for this model, else (load_history: nullopt) one recorded from this
// workload by record_history.
std::optional<experts::UsageHistory> load_history(const Args& args, const Setup& s) {
  const fs::path path = usage_path(args);
  auto loaded = experts::UsageHistory::load_if_present(path, runtime::usage_history_key(s.shape));
  if (!loaded) {
    std::fprintf(stderr, "coli-sweep: ignoring usage history: %s\n", loaded.error().message.c_str());
    return std::nullopt;
  }
  if (*loaded) std::printf("pins from the usage history %s\n", path.c_str());
  return std::move(*loaded);
}

// A usage history recorded from this workload into OUT (the model's own file
// is left alone), at `record_cap` slots (the grid's smallest streaming cap:
// its expert reads are timed too, the disk as the engine meets it; routings
// never depend on the cap).
Result<experts::UsageHistory> record_history(const Args& args, Setup& s, int record_cap) {
  runtime::ModelOptions options;
  options.max_context = s.workload.context();
  place_threads(options, s.profile.threads.decode_pus);
  options.cache_capacity = record_cap;
  auto recorded = record_usage(args.model, options, s.workload);
  if (!recorded) return recorded.error();
  const fs::path saved = fs::path(args.out) / "sweep.usage";
  if (Status st = recorded->save(saved); !st) return st.error();
  s.recorded_history = saved;
  std::printf("no usage history at %s: recorded one from this workload into %s (%s)\n", usage_path(args).c_str(),
              saved.c_str(),
              record_cap < s.footprint.n_experts
                  ? ("at cap " + std::to_string(record_cap) + ", which streams: its expert reads timed too").c_str()
                  : "every expert resident");
  return std::move(*recorded);
}

// The history's read rounds beside `compute_threads` with `io_threads` I/O threads; null where none.
const experts::ReadRounds* team_rounds(const experts::UsageHistory& history, int compute_threads, int io_threads) {
  const auto sets = history.read_round_sets();
  const auto found = std::find_if(sets.begin(), sets.end(), [&](const experts::ReadRounds& r) {
    return r.compute_threads == compute_threads && r.io_threads == io_threads;
  });
  return found == sets.end() ? nullptr : &*found;
}

// The first streaming configuration of each (team, I/O pool) of the grid: the ones whose passes record read rounds.
std::vector<std::size_t> round_recorders(const planner::Plan& plan, const std::vector<SweepConfig>& grid) {
  std::vector<std::size_t> out;
  std::vector<std::pair<int, int>> seen;  // (team, I/O threads)
  for (std::size_t c = 0; c < grid.size(); ++c) {
    const planner::Plan run_plan = plan_of_config(plan, grid[c]);
    if (!run_plan.streaming() || grid[c].gpu.all_in_vram) continue;
    const std::pair setting{grid[c].threads.threads(), run_plan.io_threads};
    if (std::find(seen.begin(), seen.end(), setting) != seen.end()) continue;
    seen.push_back(setting);
    out.push_back(c);
  }
  return out;
}

// Read rounds depend on the compute team where compute and I/O threads share
// cores (read_rounds.h), and the planner prices a configuration only by
// rounds beside its own team: for each (team, I/O pool) of the grid's
// streaming configurations (with `only_missing`, those whose rounds
// `history` lacks) an untimed pass of the first such configuration records
// them (sweep_run.h) into `history`. Returns the configurations that read.
Result<std::vector<std::size_t>> record_team_rounds(const Args& args, const Setup& s, const planner::Plan& plan,
                                                    const std::vector<SweepConfig>& grid, experts::UsageHistory& history,
                                                    bool only_missing) {
  std::vector<std::size_t> recorded;
  for (std::size_t c : round_recorders(plan, grid)) {
    const planner::Plan run_plan = plan_of_config(plan, grid[c]);
    // A set without generated tokens (a history before version 10) cannot price resuming after a wait.
    const experts::ReadRounds* existing = team_rounds(history, grid[c].threads.threads(), run_plan.io_threads);
    if (existing && existing->calm_tokens + existing->waiting_tokens > 0 && only_missing) continue;
    auto options = runtime::options_from_plan(run_plan, s.shape, &history);
    if (!options) return options.error();
    options->rss_limit_bytes = 0;
    auto rounds = record_read_rounds(args.model, *options, s.workload);
    if (!rounds) return rounds.error();
    if (rounds->empty()) continue;  // nothing read: the probe's figures price it
    if (Status st = history.set_read_rounds(*rounds); !st) return st.error();
    recorded.push_back(c);
  }
  return recorded;
}

// The rounds the history lacks, added; a history recorded into OUT is saved
// again with them; the model's own history is left alone.
Status add_team_read_rounds(const Args& args, Setup& s, const planner::Plan& plan, const std::vector<SweepConfig>& grid) {
  if (!s.history) return Ok{};
  auto recorded = record_team_rounds(args, s, plan, grid, *s.history, true);
  if (!recorded) return recorded.error();
  for (std::size_t c : *recorded) {
    const experts::ReadRounds* team =
        team_rounds(*s.history, grid[c].threads.threads(), plan_of_config(plan, grid[c]).io_threads);
    const std::string tokens = !team ? std::string()
                                     : "; generated tokens: " + std::to_string(team->waiting_tokens) + " waited, " +
                                           std::to_string(team->calm_tokens) + " did not";
    std::printf("read rounds beside %d compute threads: recorded from untimed passes (the second of one load on) of %s%s\n",
                grid[c].threads.threads(), config_label(grid[c], s.footprint.n_experts).c_str(), tokens.c_str());
  }
  if (!s.recorded_history.empty()) return s.history->save(s.recorded_history);
  return Ok{};
}

// The expert placements: every expert on the CPU, and with --gpu, per --vram
// budget the planner's GPU tier (split per expert) and the same VRAM split
// by whole layers as llama.cpp's --n-cpu-moe would (whole_layer_split).
// Budgets the planner refuses or keeps on the CPU are left out, saying why.
Result<std::vector<GpuPlacement>> gpu_placements(const Args& args, const Setup& s) {
  std::vector<GpuPlacement> out{GpuPlacement{}};
  if (args.gpu == "none") return out;
  for (const std::string& gpus : args.gpus) {  // experts spread over several GPUs
    planner::PlanRequest request = s.request;
    request.gpu = "auto";
    request.gpus = gpus;
    auto plan = planner::make_plan(s.profile, s.footprint, request);
    if (!plan) return make_error("--gpus " + gpus + ": " + plan.error().message);
    if (!plan->expert_parallel.active()) {
      std::printf("--gpus %s left out: not expert parallel (%s)\n", gpus.c_str(), plan->gpu.reason.c_str());
      continue;
    }
    out.push_back(expert_parallel_placement(*plan));
  }
  for (const std::string& split : args.splits) {
    if (split != "expert" && split != "layer") return make_error("--split: '" + split + "' is not expert or layer");
  }
  for (const std::string& budget : args.vram) {
    planner::PlanRequest request = s.request;
    if (budget != "all") {
      request.vram = parse_size(budget);
      if (!request.vram) return make_error("--vram: '" + budget + "' is not all or a size (e.g. 8G)");
    }
    auto plan = planner::make_plan(s.profile, s.footprint, request);
    if (!plan || plan->gpu.backend == "cpu") {
      std::printf("--vram %s left out: %s\n", budget.c_str(), plan ? plan->gpu.reason.c_str() : plan.error().message.c_str());
      continue;
    }
    for (const std::string& split : args.splits) {
      if (split == "expert") {
        out.push_back(gpu_placement(plan->gpu, split, s.footprint.n_experts));
        continue;
      }
      const auto whole = planner::whole_layer_split(s.profile, s.footprint, *plan, request.history);
      if (whole && whole->gpu_layers > 0) out.push_back(gpu_placement(whole->tier, split, s.footprint.n_experts));
      else std::printf("--vram %s --split layer left out: the budget holds every expert or no whole layer\n", budget.c_str());
    }
  }
  return out;
}

// --retime: the profile's CPU figures for the grid's thread sets timed
// again now, the history's read rounds of every streaming team recorded
// again now (a disk moves as the kernels do: on the H200 machine the tiny
// model's cap-4 prompts ran at 2,945 and 7,400 tok/s twenty minutes apart,
// priced by rounds recorded in the slower spell), and every configuration
// predicted from both; the planned one's beside `from_profile`'s (the
// table's predictions, one per grid entry).
Result<RetimedRepeat> retime_repeat(const Args& args, const Setup& s, const planner::Plan& plan,
                                    const std::vector<SweepConfig>& grid, const std::vector<ConfigPrediction>& from_profile,
                                    int repeat) {
  const auto start = std::chrono::steady_clock::now();
  auto measured = probe::retime_measurements(s.profile, retime_candidates(s.profile.cpu, grid_thread_sets(grid)),
                                             args.retime_seconds);
  if (!measured) return measured.error();
  Setup now = s;
  now.profile = probe::with_retimed(s.profile, *measured);
  RetimedRepeat out;
  out.repeat = repeat;
  out.drift = probe::drift_text(probe::kernel_drift(s.profile, measured->kernels));
  out.drift += probe::measurements_drift_text(s.profile, *measured);
  if (now.history) {
    const auto sets = now.history->read_round_sets();
    const std::vector<experts::ReadRounds> before(sets.begin(), sets.end());
    auto recorded = record_team_rounds(args, now, plan, grid, *now.history, false);
    if (!recorded) return make_error("recording read rounds again: " + recorded.error().message);
    out.drift += read_round_drift(before, now.history->read_round_sets());
  }
  out.seconds = seconds_since(start);
  for (std::size_t c = 0; c < grid.size(); ++c) {
    out.predictions.push_back(predict_config(now, now.profile, plan_of_config(plan, grid[c]), args.tests));
    if (!grid[c].planned || c >= from_profile.size()) continue;
    const ConfigPrediction &before = from_profile[c], &after = out.predictions.back();
    if (before.available && after.available)
      out.drift += planned_prediction_drift({before.decode_tok_s, before.prefill_tok_s}, {after.decode_tok_s, after.prefill_tok_s});
  }
  return out;
}

// The untimed passes before the grid runs: a usage history's two (none where one exists, where neither
// pins nor a streaming cap want one, or with --record-usage off), then two per compute team's read rounds
// where `record_cap` streams. --max-minutes refuses before them a sweep whose recording alone would
// outrun it (the H200's disk read the OLMoE shape's cap-16 recording passes for minutes). Each batch is checked just before it runs, priced by the
// prediction at that cap: the history's passes with uniform routing (none recorded yet: where routing
// concentrates, an upper bound), the read rounds' with the history. Both priced uniformly, the H200's
// OLMoE-shaped grid at cap 48 was refused at "11.3 min" where the sweep with its history then ran
// all its recording and runs in 71 s.
Status check_recording_time(const Args& args, const Setup& s, int record_cap, int passes, double elapsed) {
  if (args.max_minutes <= 0 || passes == 0) return Ok{};
  auto plan = plan_with_cap(s, record_cap);
  if (!plan) return Ok{};  // refused later with the planner's own reason
  auto run = estimate_run(args.tests, 0, predict_config(s, s.profile, *plan, args.tests));
  if (!run) return Ok{};
  const double seconds = passes * run->pass_seconds;
  if (repeat_fits(args.max_minutes, elapsed, seconds)) return Ok{};
  return make_error("--max-minutes allows " + format_duration(args.max_minutes * 60) + ": recording " +
                    std::to_string(passes) + " untimed passes at cap " + std::to_string(record_cap) +
                    " before the grid would take about " + format_duration(seconds) + " by the predictions (" +
                    (s.history ? "with the usage history" : "uniform routing: no usage history yet") +
                    "): raise --max-minutes, give a larger smallest cap (--caps) or a usage history (--usage)");
}

// The first run of each token group is its reference: one group, or one
// per kernel variant with --token-check per-kernel (variants sum floats in
// different orders, so near-ties may flip between them).
struct Reference {
  std::vector<std::vector<std::int32_t>> tokens;
  std::string label, kernel;
};

// Every configuration must be one this machine runs before any runs: a
// profile of another machine plans kernels and CPUs this one may lack (the
// H200 box's profile on the 2-core VM planned 16 threads on AMX, which failed
// after the first configuration had run). `usable`: this process's CPUs.
Status check_grid_runs_here(const std::vector<SweepConfig>& grid, int n_experts, const CpuSet& usable) {
  for (const SweepConfig& config : grid) {
    const std::string label = config_label(config, n_experts);
    if (!config.kernel.empty()) {
      if (auto variant = kernels::cpu::parse_variant(config.kernel); !variant) return make_error(label + ": " + variant.error().message);
    }
    for (const ThreadSet* set : {&config.threads, config.prefill_threads ? &*config.prefill_threads : nullptr}) {
      if (set && !usable.empty() && !set->pus.is_subset_of(usable))
        return make_error(label + ": runs on CPUs " + set->pus.to_list() + ", but this process may use " + usable.to_list());
    }
  }
  return Ok{};
}

// Before a repeat: whether this machine is still of the profile's class. A
// VM can move to another host between repeats: the 2-core VM's cpuid brand
// read "Oxide Virtual Turin-like Processor" at 07:08, "AMD EPYC" at 07:35
// and the first again at 07:48 of one session. The sweep runs on; the table
// and JSON name the repeats that moved.
std::optional<std::string> machine_mismatch(const DeviceProfile& profile) {
  auto checked = fleet::revalidate_here(profile);
  if (!checked) return "this machine could not be re-checked: " + checked.error().message;
  if (checked->class_match) return std::nullopt;
  std::string why;
  for (const fleet::FieldDifference& d : checked->class_mismatches) why += (why.empty() ? "" : "; ") + d.line();
  return why.empty() ? "another machine class" : why;
}

// One repeat: every configuration of the grid once (after re-timing the profile's figures with --retime),
// its runs and token checks into `report`.
Status run_repeat(const Args& args, const Setup& s, const planner::Plan& plan, int repeat,
                  std::map<std::string, Reference>& references, SweepReport& report) {
  const bool per_kernel = args.token_check == "per-kernel";
  if (auto mismatch = machine_mismatch(s.profile)) {
    const auto& changes = report.machine_changes;
    const bool as_before = !changes.empty() && changes.back().repeat == repeat - 1 && changes.back().mismatch == *mismatch;
    if (!as_before) std::fprintf(stderr, "  repeat %d/%d  not the profile's machine: %s\n", repeat + 1, args.tests.repeats, mismatch->c_str());
    report.machine_changes.push_back({repeat, std::move(*mismatch)});
  }
  if (args.retime) {
    auto retimed = retime_repeat(args, s, plan, report.grid, report.predictions, repeat);
    if (!retimed) return make_error("--retime: " + retimed.error().message);
    std::fprintf(stderr, "  repeat %d/%d  re-timed in %.1f s: %s\n", repeat + 1, args.tests.repeats, retimed->seconds,
                 retimed->drift.c_str());
    report.retimed.push_back(std::move(*retimed));
  }
  for (std::size_t c = 0; c < report.grid.size(); ++c) {
    const SweepConfig& config = report.grid[c];
    const std::string label = config_label(config, report.n_experts);
    auto options = runtime::options_from_plan(plan_of_config(plan, config), s.shape, s.history ? &*s.history : nullptr);
    if (!options) return make_error(label + ": " + options.error().message);
    options->rss_limit_bytes = 0;  // the plan's RAM is for its own cap: the watchdog would shrink the grid's larger ones
    auto run = run_config(args.model, *options, s.workload);
    if (!run) return make_error(label + ": " + run.error().message);
    run->record.config = c;
    run->record.repeat = repeat;
    std::fprintf(stderr, "  repeat %d/%d  %-44s prefill %8.2f tok/s  decode %7.2f tok/s\n", repeat + 1, args.tests.repeats,
                 label.c_str(), run->record.prefill_tok_s(), run->record.decode_tok_s());
    const std::string run_label = label + " (repeat " + std::to_string(repeat + 1) + ")";
    const std::string& kernel = run->record.kernel_used;
    const Reference first{run->tokens, run_label, kernel};
    // Per kernel variant and placement: the GPU backends round differently from the CPU (int8 activations).
    const Reference& ref = references.try_emplace(per_kernel ? kernel + " | " + config.gpu.label : "", first).first->second;
    if (auto m = token_mismatch(run->tokens, run_label, ref.tokens, ref.label)) {
      report.token_mismatches.push_back(*m + (kernel != ref.kernel ? " (kernels " + kernel + " vs " + ref.kernel + ")" : ""));
    }
    const Reference& any = references.begin()->second;
    if (per_kernel && repeat == 0 && kernel != any.kernel) {
      if (auto m = token_mismatch(run->tokens, run_label, any.tokens, any.label))
        report.token_notes.push_back(*m + " (kernels " + kernel + " vs " + any.kernel + ": allowed by --token-check per-kernel)");
    }
    report.runs.push_back(std::move(run->record));
  }
  return Ok{};
}

// Where the sweep ends before its report: what to tell the user and the exit code (cli::kExit*).
struct Stop {
  std::string message;
  int code = 1;
};

// What the sweep settles before its first run, step by step (run_sweep).
struct Sweep {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  CpuSet usable_here;  // this process's CPUs, read before any run pins the calling thread to its team's first
  Setup s;
  std::vector<ThreadSet> profile_sets;
  std::vector<int> caps;    // --caps, before the planner leaves out those this memory refuses
  GridSpec spec;
  std::string auto_kernel;  // the engine's own choice on this CPU
  std::optional<planner::Plan> plan;
  std::vector<SweepConfig> grid;
  std::size_t planned = 0;  // the planned configuration's index in grid
};

// The profile, the model's shape and the workload.
std::optional<Stop> load_inputs(const Args& args, Sweep& w) {
  if (!fs::is_regular_file(args.model)) return Stop{"model " + args.model + ": no such file"};
  const auto live = fleet::probe_live();
  w.usable_here = live ? live->cpu.usable.pus : CpuSet();
  Setup& s = w.s;
  auto profile = load_profile(args.profile);
  if (!profile) return Stop{profile.error().message};
  s.profile = std::move(*profile);
  auto shape = runtime::MoeModel::read_shape(args.model);
  if (!shape) return Stop{shape.error().message};
  s.shape = std::move(*shape);
  auto model_config = model::parse_model_config(s.shape.config_json, args.model + " (config)");
  if (!model_config) return Stop{model_config.error().message};
  s.footprint = planner::describe_footprint(*model_config, s.shape.expert_format, s.shape.dense_format);
  s.workload = make_workload(args.tests, model_config->vocab_size);
  s.workload.min_timed_seconds = args.min_time;
  return std::nullopt;
}

// The grid's dimensions and the plan request, checked before anything runs so bad input fails fast;
// a plan this memory refuses fails here too, before a usage history is recorded (pins never change what fits).
std::optional<Stop> grid_dimensions(const Args& args, Sweep& w) {
  Setup& s = w.s;
  w.profile_sets = thread_sets_from_profile(s.profile.cpu);
  for (const ThreadSet& set : w.profile_sets) {
    if (args.threads.empty() || std::find(args.threads.begin(), args.threads.end(), set.threads()) != args.threads.end())
      w.spec.thread_sets.push_back(set);
  }
  auto caps = args.caps.empty() ? Result<std::vector<int>>(default_caps(s.footprint)) : parse_caps(args.caps, s.footprint.n_experts, "--caps");
  if (!caps) return Stop{caps.error().message, cli::kExitUsage};
  w.caps = std::move(*caps);
  for (const std::string& p : args.pins) {
    if (p != "off" && p != "on") return Stop{"--pins: '" + p + "' is not off or on", cli::kExitUsage};
    w.spec.pins.push_back(p == "on");
  }
  for (const std::string& k : args.kernels.empty() ? kernels_from_isa(s.profile.cpu.isa) : args.kernels)
    w.spec.kernels.push_back(k == "auto" ? "" : k);
  // "auto" is whatever the engine picks here: one configuration with that variant.
  const auto engine_choice = kernels::cpu::selected_variant();
  if (!engine_choice) return Stop{engine_choice.error().message};
  w.auto_kernel = kernels::cpu::variant_name(*engine_choice);
  ResolvedKernels resolved = resolve_kernels(w.spec.kernels, w.auto_kernel);
  for (const std::string& note : resolved.merged) std::printf("kernels: %s\n", note.c_str());
  w.spec.kernels = std::move(resolved.kernels);

  // The plan for this machine, model and workload (what coli run --profile would run).
  s.request.ctx = s.workload.context();
  s.request.prompt_tokens = args.tests.prefill_tokens;
  s.request.gpu = args.gpu;
  s.request.backend = planner::gpu_backend_memory(args.gpu_backend, s.profile);
  if (!args.ram.empty()) {
    s.request.ram = parse_size(args.ram);
    if (!s.request.ram) return Stop{"--ram '" + args.ram + "' is not a size (e.g. 16G)", cli::kExitUsage};
  }
  w.spec.caps = w.caps;  // checked now: a bad cap or an empty grid is an input error, not a planner refusal
  if (auto checked = build_grid(s.footprint, w.spec); !checked) return Stop{checked.error().message, cli::kExitUsage};
  w.spec.caps.clear();
  if (auto early = plan_with_cap(s, args.plan_cap); !early) return Stop{"the planner refused: " + early.error().message, cli::kExitRefused};
  return std::nullopt;
}

// The usage history pins and streaming are priced by: --usage's, else one recorded from the workload
// (--record-usage auto) where pins are asked for or a cap streams. A streaming cap is priced by the
// history's routing and read rounds: uniform routing put the tiny model's cap-4 decode at 2.00 reads a
// token where it made 0.31, and the probe's reads alone its 2-thread prompt rounds at 84 us where the
// team's took 100-230 us (session 37's VM grid, +64%). Without a history the grid has no pins.
std::optional<Stop> prepare_history(const Args& args, Sweep& w) {
  Setup& s = w.s;
  fs::create_directories(args.out);
  const int record_cap = *std::min_element(w.caps.begin(), w.caps.end());
  const bool streams = record_cap < s.footprint.n_experts;
  const bool pins_wanted = std::find(w.spec.pins.begin(), w.spec.pins.end(), true) != w.spec.pins.end();
  auto loaded = load_history(args, s);
  const bool records_history = args.record_usage == "auto" && (pins_wanted || streams) && !loaded;  // also a file not this model's
  s.history = std::move(loaded);
  if (records_history) {
    if (Status st = check_recording_time(args, s, record_cap, kPassesPerRecording, seconds_since(w.start)); !st)
      return Stop{st.error().message, cli::kExitRefused};
    // The recording pass runs on the profile's decode set, before the grid is checked against this machine.
    const CpuSet& recording_pus = s.profile.threads.decode_pus;
    if (!w.usable_here.empty() && !recording_pus.is_subset_of(w.usable_here))
      return Stop{"recording a usage history: the profile's decode threads run on CPUs " + recording_pus.to_list() +
                      ", but this process may use " + w.usable_here.to_list() + ": the profile " + args.profile +
                      " describes another machine (probe this one with coli-probe), or give a usage history with --usage",
                  cli::kExitRefused};
    auto recorded = record_history(args, s, record_cap);
    if (!recorded) return Stop{"recording a usage history: " + recorded.error().message};
    s.history = std::move(*recorded);
  }
  const int recording_teams = streams ? static_cast<int>(w.spec.thread_sets.size()) : 0;
  if (Status st = check_recording_time(args, s, record_cap, kPassesPerRecording * recording_teams, seconds_since(w.start)); !st)
    return Stop{st.error().message, cli::kExitRefused};
  if (!s.history) std::erase(w.spec.pins, true);
  s.request.history_pins = s.history ? s.footprint.n_experts : 0;
  s.request.history = s.history ? &*s.history : nullptr;  // pins only where the history predicts a gain
  return std::nullopt;
}

// The plan, the grid of configurations this machine can run with the planned one marked, and the
// read rounds beside each streaming team that the history lacks.
std::optional<Stop> plan_grid(const Args& args, Sweep& w) {
  Setup& s = w.s;
  auto plan = plan_with_cap(s, args.plan_cap);
  if (!plan) return Stop{"the planner refused: " + plan.error().message, cli::kExitRefused};
  w.plan = std::move(*plan);
  // Caps the planner refuses in this memory are not configurations this machine can run.
  for (int cap : w.caps) {
    auto fits = plan_with_cap(s, cap);
    if (fits) w.spec.caps.push_back(cap);
    else std::printf("cap %d left out: %s\n", cap, fits.error().message.c_str());
  }
  auto placements = gpu_placements(args, s);
  if (!placements) return Stop{placements.error().message, cli::kExitUsage};
  w.spec.placements = std::move(*placements);
  auto grid = build_grid(s.footprint, w.spec);
  if (!grid) return Stop{grid.error().message};
  w.grid = std::move(*grid);
  SweepConfig planned_one = planned_config(*w.plan, s.profile, w.profile_sets);
  if (planned_one.kernel.empty()) planned_one.kernel = w.auto_kernel;  // a plan that leaves the kernel to the engine
  w.planned = add_planned(w.grid, std::move(planned_one));
  if (Status st = check_grid_runs_here(w.grid, s.footprint.n_experts, w.usable_here); !st)
    return Stop{st.error().message + ": the profile " + args.profile +
                    " describes another machine (probe this one with coli-probe), or leave those configurations out",
                cli::kExitRefused};
  if (args.retime && grid_thread_sets(w.grid).empty())
    return Stop{"--retime: every configuration of the grid runs on the GPU: no CPU thread set to time again", cli::kExitUsage};
  if (Status st = add_team_read_rounds(args, s, *w.plan, w.grid); !st) return Stop{"recording read rounds: " + st.error().message};
  return std::nullopt;
}

// The report before any run: the grid, the plan's decisions and every configuration's prediction.
SweepReport start_report(const Args& args, const Sweep& w) {
  SweepReport report;
  report.model = args.model;
  report.profile = args.profile;
  report.profile_fingerprint = w.s.profile.fingerprint;
  report.n_experts = w.s.footprint.n_experts;
  report.prompt_tokens = args.tests.prefill_tokens;
  report.decode_tokens = args.tests.decode_tokens;
  report.depths = args.tests.depths;
  report.repeats_asked = args.tests.repeats;
  report.min_timed_seconds = w.s.workload.min_timed_seconds;
  report.token_check = args.token_check;
  report.planned = w.planned;
  for (const auto& d : w.plan->decisions) report.plan_decisions.push_back(d.knob + " = " + d.value + ": " + d.reason);
  report.grid = w.grid;
  const std::pair bounds{planner::at_sample_bound(w.s.profile, planner::SampleBound::slowest),
                         planner::at_sample_bound(w.s.profile, planner::SampleBound::fastest)};
  for (const SweepConfig& config : report.grid)
    report.predictions.push_back(predict_config_with_band(w.s, bounds, plan_of_config(*w.plan, config), args.tests));
  return report;
}

void print_header(const Args& args, const Sweep& w, const SweepReport& report) {
  const Setup& s = w.s;
  std::printf("model %s: %d MoE layers x %d experts, top %d, experts %s, dense %s\n", args.model.c_str(),
              s.shape.moe_layers, s.shape.experts, s.shape.top_k, std::string(name_of(s.shape.expert_format)).c_str(),
              std::string(dense_format_name(s.shape.dense_format)).c_str());
  std::printf("workload: %s, then %d greedy decode tokens at depths", args.tests.prefill_label().c_str(), args.tests.decode_tokens);
  for (int depth : args.tests.depths) std::printf(" %d", depth);
  std::printf("; %d repeats, interleaved; each run's figures the median of its passes until %.2f s were timed\n",
              args.tests.repeats, args.min_time);
  std::printf("planned: %s\n", config_label(report.grid[report.planned], report.n_experts).c_str());
  for (const std::string& d : report.plan_decisions) std::printf("  %s\n", d.c_str());
  const planner::SpeedPrediction predicted = planner::predict_speed(s.profile, s.footprint, *w.plan, s.history ? &*s.history : nullptr);
  if (predicted.available)
    std::printf("  predicted: decode %.2f tok/s, prefill %.2f tok/s\n", predicted.decode_tok_per_s, predicted.prefill_tok_per_s);
  std::printf("grid: %zu configurations x %d repeats\n\n", report.grid.size(), args.tests.repeats);
}

// The repeats, round-robin: every configuration once per repeat, so drift spreads over all of them;
// --max-minutes refuses a first repeat that would end too late and stops before a later one.
std::optional<Stop> run_repeats(const Args& args, const Sweep& w, SweepReport& report) {
  RepeatEstimate estimate = estimate_repeat(args.tests, args.min_time, report.predictions);
  if (args.retime) {
    std::vector<ConfigPrediction> recorders;  // a history's read rounds are recorded again (retime_repeat)
    if (w.s.history)
      for (std::size_t c : round_recorders(*w.plan, report.grid)) recorders.push_back(report.predictions[c]);
    estimate.retime_seconds = estimate_retime(args.tests, args.retime_seconds, static_cast<int>(grid_thread_sets(report.grid).size()),
                                              probe::retime_memory_seconds(w.s.profile), recorders);
  }
  std::vector<std::string> labels;
  for (const SweepConfig& config : report.grid) labels.push_back(config_label(config, report.n_experts));
  std::printf("%s\n", describe_repeat(estimate, labels).c_str());
  std::map<std::string, Reference> references;
  double next_repeat_seconds = estimate.total();  // then the last repeat's own time, re-timing included
  for (int repeat = 0; repeat < args.tests.repeats; ++repeat) {
    const double elapsed = seconds_since(w.start);
    if (!repeat_fits(args.max_minutes, elapsed, next_repeat_seconds)) {
      const std::string why = "--max-minutes allows " + format_duration(args.max_minutes * 60) + ": " +
                              format_duration(elapsed) + " have passed and the next repeat would take about " +
                              format_duration(next_repeat_seconds);
      if (repeat == 0)
        return Stop{why + " (" + describe_repeat(estimate, labels) +
                        "): raise --max-minutes or leave the slow configurations out (--caps, --threads, --pins)",
                    cli::kExitRefused};
      report.stopped_early = "stopped after " + std::to_string(repeat) + " of " + std::to_string(args.tests.repeats) +
                             " repeats: " + why;
      break;
    }
    const auto repeat_start = std::chrono::steady_clock::now();
    if (Status st = run_repeat(args, w.s, *w.plan, repeat, references, report); !st) return Stop{st.error().message};
    report.repeats = repeat + 1;
    next_repeat_seconds = seconds_since(repeat_start);
    std::fprintf(stderr, "  repeat %d/%d  took %s (the predictions: %s)\n", repeat + 1, args.tests.repeats,
                 format_duration(next_repeat_seconds).c_str(), format_duration(estimate.total()).c_str());
  }
  return std::nullopt;
}

// The files and the table; fails when configurations produced different tokens.
int write_report(const Args& args, SweepReport& report) {
  report.summaries = summarize(report.grid.size(), report.runs);
  const fs::path out(args.out);
  for (const auto& [name, text] : {std::pair{"sweep.csv", sweep_csv(report)}, std::pair{"sweep.json", sweep_json(report)},
                                   std::pair{"sweep.svg", sweep_svg(report)}}) {
    if (Status st = write_file_atomically(out / name, text); !st) return fail(st.error().message);
  }
  std::printf("%s", sweep_table(report).c_str());
  std::printf("wrote %s, %s, %s\n", (out / "sweep.csv").c_str(), (out / "sweep.json").c_str(), (out / "sweep.svg").c_str());
  if (!report.token_mismatches.empty()) {
    for (const std::string& m : report.token_mismatches) std::fprintf(stderr, "coli-sweep: token mismatch: %s\n", m.c_str());
    return fail("configurations produced different tokens (greedy decoding must not depend on the knobs)");
  }
  for (const std::string& n : report.token_notes) std::printf("note: %s\n", n.c_str());
  std::printf("token check: all %zu runs produced the same tokens%s\n", report.runs.size(),
              args.token_check == "per-kernel" ? " as the other runs of their kernel variant" : "");
  return 0;
}

int run_sweep(const Args& args) {
  Sweep w;
  using SetupStep = std::optional<Stop> (*)(const Args&, Sweep&);
  for (SetupStep step : {load_inputs, grid_dimensions, prepare_history, plan_grid}) {
    if (auto stop = step(args, w)) return fail(stop->message, stop->code);
  }
  SweepReport report = start_report(args, w);
  print_header(args, w, report);
  if (auto stop = run_repeats(args, w, report)) return fail(stop->message, stop->code);
  return write_report(args, report);
}

}  // namespace

int main(int argc, char** argv) {
  // Line by line into a log too: a sweep cut by a timeout still shows how far it got.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Args args;
  CLI::App app{"coli-sweep: run the engine over a grid of configurations and rank the planned one"};
  app.add_option("--model", args.model, "Container (coli convert or coli-make-synthetic)")->required();
  app.add_option("--profile", args.profile, "Device profile (coli-probe)")->required();
  app.add_option("--usage", args.usage, "Usage history for pins (default MODEL.usage; recorded into --out when absent)");
  app.add_option("--threads", args.threads, "Keep thread sets of these sizes (default: every set from the profile)")->delimiter(',');
  app.add_option("--caps", args.caps, "Expert slots per layer, comma-separated, 'all' = resident (default: all + a streaming cap)")->delimiter(',');
  app.add_option("--pins", args.pins, "Pins from the usage history: off,on")->delimiter(',')->capture_default_str();
  app.add_option("--record-usage", args.record_usage,
                 "auto: with no usage history (--usage), record one from this workload into --out first (two untimed "
                 "passes at the smallest cap) where pins are asked for or a cap streams, so streaming is priced by the "
                 "workload's routing and read rounds; off: never (no pins; streaming priced by uniform routing)")
      ->check(CLI::IsMember({"auto", "off"}))->capture_default_str();
  app.add_option("--kernels", args.kernels,
                 "CPU kernels, comma-separated: auto or " + cpu_kernel_names_text() +
                     " (default: what the profile's ISA allows; auto and the variant it is here run once)")
      ->delimiter(',');
  app.add_option("--ram", args.ram, "RAM the planner may use, e.g. 8G (default: the profile's headroom)");
  app.add_option("--plan-cap", args.plan_cap, "Cap the planner is told to use (0: it decides)")->check(CLI::Range(0, 1 << 20));
  add_speed_options(app, args.tests);
  app.add_option("--min-time", args.min_time,
                 "Seconds each run's timed passes add up to at least: a run repeats its warm-up and timed pass until "
                 "then (at most " + std::to_string(kMaxPasses) + " passes) and reports their medians; 0: one pass")
      ->check(CLI::Range(0.0, 3600.0))->capture_default_str();
  app.add_option("--max-minutes", args.max_minutes,
                 "Minutes the whole sweep may take: a repeat that would end later is not started (the first by the "
                 "predictions, later ones by the last repeat's time) and the repeats done are reported; 0: no limit")
      ->check(CLI::Range(0.0, 10080.0))->capture_default_str();
  app.add_flag("--retime", args.retime,
               "Before each repeat, time the profile's kernel points, RAM bandwidth and OpenMP costs again for the grid's thread sets "
               "and predict that repeat's runs from them too: prints how far the machine moved since the probe and the "
               "prediction's error apart from that drift (the stored profile's prediction is kept beside it)");
  app.add_option("--retime-seconds", args.retime_seconds, "Seconds of --retime per thread set (the probe gives each 4)")
      ->check(CLI::Range(0.5, 600.0))->capture_default_str();
  app.add_option("--gpu", args.gpu, "none (every expert on the CPU), auto or a GPU index: adds GPU placements per --vram and --split")
      ->capture_default_str();
  app.add_option("--gpu-backend", args.gpu_backend, "vulkan, cuda or auto, as coli-plan")
      ->check(CLI::IsMember({"auto", "vulkan", "cuda"}))->capture_default_str();
  app.add_option("--vram", args.vram, "VRAM budgets with --gpu, comma-separated: all (the device's) or sizes, e.g. all,8G,4G")
      ->delimiter(',')->capture_default_str();
  app.add_option("--gpus", args.gpus,
                 "With --gpu, expert-parallel placements: each a coli-plan --gpus value (all, or CUDA ordinals such as 0,1), "
                 "several separated by spaces");
  app.add_option("--split", args.splits,
                 "With --gpu, how a budget below the whole model is split: expert (the planner's per-expert choice), "
                 "layer (whole layers, as llama.cpp's --n-cpu-moe)")
      ->delimiter(',')->capture_default_str();
  app.add_option("--token-check", args.token_check, "Runs whose tokens must agree: all, or per-kernel (one reference per kernel variant and expert placement)")
      ->check(CLI::IsMember({"all", "per-kernel"}))->capture_default_str();
  app.add_option("--out", args.out, "Directory for sweep.csv, sweep.json, sweep.svg")->capture_default_str();
  app.footer("Exit status: 0 done, 1 error (a file, the model, a token mismatch), 2 usage (including a grid the "
             "options leave empty), 3 the planner refused.");
  cli::add_version_flag(app, "coli-sweep");
  if (const auto done = cli::parse(app, argc, argv)) return *done;
  return run_sweep(args);
}
