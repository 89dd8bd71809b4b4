// coli-sweep's grid: the configurations it runs, derived from a device profile
// (thread sets per CPU kind, kernel variants its ISA allows) and the model's
// expert counts (caps, pins), plus the planned configuration, marked. Pure:
// no file is read and nothing runs here.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/cpu_set.h"
#include "coli/base/result.h"
#include "coli/planner/footprint.h"
#include "coli/planner/plan.h"
#include "coli/probe/device_profile.h"

namespace coli::bench {

// Where compute threads run: one PU per thread.
struct ThreadSet {
  std::string label;  // "2t k0" (2 physical cores of kind 0), "4t k0+smt", "8t all"
  CpuSet pus;
  int threads() const { return pus.size(); }
  bool operator==(const ThreadSet&) const = default;
};

// Per CPU kind: 1, 2, 4, ... usable physical cores and all of them, one PU per
// core; the same cores with every usable SMT sibling when the kind has SMT;
// every kind together when there are several. Sets with more threads than the
// cgroup CPU quota are left out (they would time-slice). A profile without
// kinds counts each usable PU as a core.
std::vector<ThreadSet> thread_sets_from_profile(const CpuFacts& cpu);

// The engine's kernel names the profile's ISA flags allow ("avx2", "avx512",
// "avx512vnni"), slowest first, after "" (the engine picks the best).
std::vector<std::string> kernels_from_isa(const std::vector<std::string>& isa);

// The kernel names with "" (the engine's choice) replaced by `auto_kernel`,
// the variant the engine picks on this CPU, and duplicates dropped: where the
// engine's best is avx2, "auto" and "avx2" are one configuration. `merged`
// says which names became one.
struct ResolvedKernels {
  std::vector<std::string> kernels;
  std::vector<std::string> merged;  // "auto and avx2 are avx2 (auto: the engine's choice on this CPU): merged ..."
};
ResolvedKernels resolve_kernels(const std::vector<std::string>& kernels, const std::string& auto_kernel);

// Where the experts sit: on the CPU (no GPU tier), or in a GPU tier the
// planner made for a VRAM budget, split per expert (its own choice) or by
// whole MoE layers (llama.cpp's --n-cpu-moe: the first layers' experts on
// the CPU).
struct GpuPlacement {
  std::string label = "cpu";             // "cpu", "cuda 2.0 GiB expert", "cuda 2.0 GiB layer", "cuda gpus 0,1"
  std::optional<planner::GpuTier> tier;  // nullopt: every expert on the CPU
  bool all_in_vram = false;              // every expert in VRAM: the host's cache, pins and round do nothing
  // Experts spread over several GPUs (coli-plan --gpus): each GPU's share,
  // the placement and the exchange; `tier` is their sum, as in the plan.
  std::optional<planner::ExpertParallelPlan> expert_parallel;
};

// The placement of a GPU tier: its label and whether it holds every expert.
GpuPlacement gpu_placement(const planner::GpuTier& tier, const std::string& split, int n_experts);
// The placement of an expert-parallel plan: "cuda gpus 0,1" (its GPUs in rank order).
GpuPlacement expert_parallel_placement(const planner::Plan& plan);

// "cuda 2.0 GiB expert": the backend, the tier's VRAM budget, the split.
std::string placement_label(const planner::GpuTier& tier, const std::string& split);

struct SweepConfig {
  ThreadSet threads;
  // Prompts on another set: only a planned configuration whose plan
  // prefills on a set of its own (the grid's run both phases on `threads`).
  std::optional<ThreadSet> prefill_threads;
  int cap = 0;           // expert slots per MoE layer; n_experts = all resident (as in a plan)
  int pins = 0;          // per MoE layer, from the usage history; 0 = off
  int round_tokens = 1;  // prefill round (the planner's rule for this cap and pins)
  std::string kernel;    // "" = the engine's best for this CPU
  bool planned = false;
  GpuPlacement gpu;
  // Equal knobs; `planned` and the thread set's label do not count, nor
  // the cap, pins and round where every expert is in VRAM.
  bool same_knobs(const SweepConfig& other) const;
};

// "2t k0 | cap all | pins 0 | auto" (short: for tables and the plot).
std::string config_label(const SweepConfig& config, int n_experts);

struct GridSpec {
  std::vector<ThreadSet> thread_sets;
  std::vector<int> caps;             // 0 = every expert resident
  std::vector<bool> pins;            // false = off, true = the planner's pin count for that cap
  std::vector<std::string> kernels;  // "" = engine's best
  int requested_round = 512;  // PlanRequest::prefill_round_tokens
  std::vector<GpuPlacement> placements{GpuPlacement{}};  // default: every expert on the CPU
};

// Every combination, in a fixed order (placement, thread set, cap, pins, kernel). Pins
// "on" take decide_pins_and_round's count for the cap with the whole usage
// history suggested (as coli run --profile does); where that is 0 the
// combination equals pins off and is dropped. Errors: an empty dimension, a
// cap below top_k or above the expert count, a kernel name the engine does
// not know.
Result<std::vector<SweepConfig>> build_grid(const planner::ModelFootprint& footprint, const GridSpec& spec);

// The configuration `plan` runs: its threads on the profile's recommended
// decode PUs (the first usable PUs, one per core first, when the plan's count
// differs), its cap, pins and round, the engine's own kernel choice, its
// GPU tier (split per expert).
SweepConfig planned_config(const planner::Plan& plan, const DeviceProfile& profile,
                           const std::vector<ThreadSet>& known_sets);

// Cap options of coli-sweep and coli-decode-bench: "all" (every expert
// resident: a cap of n_experts, as in a plan) or a slot count in [1, n_experts].
Result<std::vector<int>> parse_caps(const std::vector<std::string>& texts, int n_experts, std::string_view option);

// The inverse: `base` (the machine's plan: its I/O, context and memory) with
// the configuration's threads, cap, pins, round, kernel and GPU tier (none:
// every expert on the CPU), for runtime::options_from_plan.
planner::Plan plan_of_config(const planner::Plan& base, const SweepConfig& config);

// Marks the grid entry with the planned knobs, or appends the planned one;
// returns its index.
std::size_t add_planned(std::vector<SweepConfig>& grid, SweepConfig planned);

}  // namespace coli::bench
