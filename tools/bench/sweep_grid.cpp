#include "sweep_grid.h"

#include <algorithm>
#include <cmath>

#include "coli/base/cpu_kernels.h"
#include "coli/base/text.h"
#include "coli/planner/deciders.h"

namespace coli::bench {
namespace {

// 1, 2, 4, ... below n, then n itself.
std::vector<int> doubling_counts(int n) {
  std::vector<int> counts;
  for (int c = 1; c < n; c *= 2) counts.push_back(c);
  if (n > 0) counts.push_back(n);
  return counts;
}

// Physical cores as lists of usable PUs (empty cores dropped).
std::vector<std::vector<int>> usable_cores(const std::vector<CpuSet>& core_pus, const CpuSet& usable) {
  std::vector<std::vector<int>> cores;
  for (const CpuSet& core : core_pus) {
    const CpuSet pus = usable.empty() ? core : core.intersect(usable);
    if (!pus.empty()) cores.push_back(pus.cpus());
  }
  return cores;
}

void add_sets(const std::vector<std::vector<int>>& cores, const std::string& scope, bool all_counts,
              std::vector<ThreadSet>& out) {
  const bool smt = std::any_of(cores.begin(), cores.end(), [](const auto& c) { return c.size() > 1; });
  const int n = static_cast<int>(cores.size());
  for (int count : all_counts ? doubling_counts(n) : std::vector<int>{n}) {
    std::vector<int> physical, siblings;
    for (int i = 0; i < count; ++i) {
      physical.push_back(cores[static_cast<std::size_t>(i)].front());
      for (int pu : cores[static_cast<std::size_t>(i)]) siblings.push_back(pu);
    }
    out.push_back({std::to_string(count) + "t " + scope, CpuSet(physical)});
    if (smt) out.push_back({std::to_string(siblings.size()) + "t " + scope + "+smt", CpuSet(siblings)});
  }
}

}  // namespace

std::vector<ThreadSet> thread_sets_from_profile(const CpuFacts& cpu) {
  std::vector<ThreadSet> sets;
  std::vector<std::vector<int>> every_core;
  int kinds_used = 0;
  for (auto kind = cpu.kinds.rbegin(); kind != cpu.kinds.rend(); ++kind) {  // fastest kind first
    auto cores = usable_cores(kind->core_pus, cpu.usable.pus);
    if (cores.empty()) continue;
    ++kinds_used;
    add_sets(cores, "k" + std::to_string(kind->rank), true, sets);
    every_core.insert(every_core.end(), cores.begin(), cores.end());
  }
  if (kinds_used > 1) add_sets(every_core, "all", false, sets);
  if (every_core.empty()) {  // no topology recorded: each usable PU stands for a core
    std::vector<std::vector<int>> cores;
    for (int pu : cpu.usable.pus.cpus()) cores.push_back({pu});
    add_sets(cores, "cpu", true, sets);
  }
  if (cpu.usable.quota_cpus) {
    const int limit = std::max(1, static_cast<int>(std::ceil(*cpu.usable.quota_cpus)));
    std::erase_if(sets, [&](const ThreadSet& s) { return s.threads() > limit; });
  }
  return sets;
}

std::vector<std::string> kernels_from_isa(const std::vector<std::string>& isa) {
  // The engine's requirements, as coli/base/cpu_kernels.h spells them.
  std::vector<std::string> kernels{""};
  for (std::size_t variant = 1; variant < kCpuKernelVariants.size(); ++variant) {
    if (cpu_kernel_runs_on(variant, isa)) kernels.emplace_back(kCpuKernelVariants[variant]);
  }
  return kernels;
}

ResolvedKernels resolve_kernels(const std::vector<std::string>& kernels, const std::string& auto_kernel) {
  ResolvedKernels resolved;
  std::vector<std::vector<std::string>> given;  // per resolved kernel, the names that asked for it
  for (const std::string& name : kernels) {
    const std::string kernel = name.empty() ? auto_kernel : name;
    auto at = std::find(resolved.kernels.begin(), resolved.kernels.end(), kernel);
    if (at == resolved.kernels.end()) {
      resolved.kernels.push_back(kernel);
      given.emplace_back();
      at = resolved.kernels.end() - 1;
    }
    given[static_cast<std::size_t>(at - resolved.kernels.begin())].push_back(name.empty() ? "auto" : name);
  }
  for (std::size_t i = 0; i < given.size(); ++i) {
    if (given[i].size() < 2) continue;
    std::string names;
    for (const std::string& name : given[i]) names += (names.empty() ? "" : " and ") + name;
    const bool has_auto = std::find(given[i].begin(), given[i].end(), "auto") != given[i].end();
    resolved.merged.push_back(names + " are " + resolved.kernels[i] +
                              (has_auto ? " (auto: the engine's choice on this CPU)" : "") + ": merged into one configuration");
  }
  return resolved;
}

std::string placement_label(const planner::GpuTier& tier, const std::string& split) {
  return tier.backend + " " + format_bytes(tier.vram_headroom_bytes) + " " + split;
}

GpuPlacement gpu_placement(const planner::GpuTier& tier, const std::string& split, int n_experts) {
  return GpuPlacement{placement_label(tier, split), tier, tier.all_experts_in_vram(n_experts), std::nullopt};
}

GpuPlacement expert_parallel_placement(const planner::Plan& plan) {
  std::string ordinals;
  for (const planner::GpuShare& gpu : plan.expert_parallel.gpus) ordinals += (ordinals.empty() ? "" : ",") + std::to_string(gpu.ordinal);
  return GpuPlacement{plan.gpu.backend + " gpus " + ordinals, plan.gpu, plan.gpu.all_experts_in_vram(plan.n_experts),
                      plan.expert_parallel};
}

bool SweepConfig::same_knobs(const SweepConfig& other) const {
  const bool host_cache_matters = !(gpu.all_in_vram && other.gpu.all_in_vram);
  const auto prefill_pus = [](const SweepConfig& c) { return c.prefill_threads ? c.prefill_threads->pus : c.threads.pus; };
  return threads.pus == other.threads.pus && prefill_pus(*this) == prefill_pus(other) && kernel == other.kernel &&
         gpu.label == other.gpu.label &&
         (!host_cache_matters || (cap == other.cap && pins == other.pins && round_tokens == other.round_tokens));
}

std::string config_label(const SweepConfig& config, int n_experts) {
  const std::string cap = config.cap >= n_experts ? "all" : std::to_string(config.cap);
  return config.threads.label + (config.prefill_threads ? " (pp " + config.prefill_threads->label + ")" : "") + " | cap " + cap + " | pins " + std::to_string(config.pins) + " | " +
         (config.kernel.empty() ? "auto" : config.kernel) + (config.gpu.tier ? " | " + config.gpu.label : "");
}

Result<std::vector<SweepConfig>> build_grid(const planner::ModelFootprint& fp, const GridSpec& spec) {
  if (spec.thread_sets.empty()) return make_error("the grid has no thread set (check --threads and the profile's CPUs)");
  if (spec.caps.empty()) return make_error("the grid has no cap (--caps)");
  if (spec.pins.empty()) return make_error("the grid has no pin setting (--pins off,on)");
  if (spec.kernels.empty()) return make_error("the grid has no kernel (--kernels)");
  if (spec.placements.empty()) return make_error("the grid has no expert placement (--vram, --split)");
  for (const std::string& kernel : spec.kernels) {
    const std::vector<std::string> names = cpu_kernel_names();
    if (!kernel.empty() && std::find(names.begin(), names.end(), kernel) == names.end()) {
      return make_error("unknown CPU kernel '" + kernel + "': use auto or one of " + cpu_kernel_names_text());
    }
  }
  std::vector<SweepConfig> grid;
  for (const GpuPlacement& gpu : spec.placements) {
    for (const ThreadSet& threads : spec.thread_sets) {
      for (int cap : spec.caps) {
        if (cap < fp.top_k || cap > fp.n_experts) {
          return make_error("cap " + std::to_string(cap) + " is outside [top_k " + std::to_string(fp.top_k) +
                            ", " + std::to_string(fp.n_experts) + " experts] ('all' = " + std::to_string(fp.n_experts) + ")");
        }
        for (bool pins_on : spec.pins) {
          auto choice = planner::decide_pins_and_round(fp, cap, pins_on ? fp.n_experts : 0, false, spec.requested_round);
          if (!choice) return choice.error();
          if (pins_on && choice->pins == 0) continue;  // the same as pins off
          for (const std::string& kernel : spec.kernels) {
            SweepConfig config{threads, std::nullopt, cap, choice->pins, choice->round_tokens, kernel, false, gpu};
            const bool seen = std::any_of(grid.begin(), grid.end(), [&](const SweepConfig& c) { return c.same_knobs(config); });
            if (!seen) grid.push_back(std::move(config));
          }
        }
      }
    }
  }
  if (grid.empty()) return make_error("the grid is empty");
  return grid;
}

SweepConfig planned_config(const planner::Plan& plan, const DeviceProfile& profile,
                           const std::vector<ThreadSet>& known_sets) {
  CpuSet pus = plan.compute_pus.size() == plan.threads ? plan.compute_pus : profile.threads.decode_pus;
  if (pus.size() != plan.threads) {
    // First usable PUs, one per core before any sibling.
    std::vector<int> chosen;
    for (int round = 0; round < 8 && static_cast<int>(chosen.size()) < plan.threads; ++round) {
      for (const CpuKind& kind : profile.cpu.kinds) {
        for (const auto& core : usable_cores(kind.core_pus, profile.cpu.usable.pus)) {
          if (static_cast<std::size_t>(round) < core.size() && static_cast<int>(chosen.size()) < plan.threads)
            chosen.push_back(core[static_cast<std::size_t>(round)]);
        }
      }
    }
    for (int pu : profile.cpu.usable.pus.cpus()) {  // no topology recorded
      if (static_cast<int>(chosen.size()) < plan.threads && std::find(chosen.begin(), chosen.end(), pu) == chosen.end())
        chosen.push_back(pu);
    }
    pus = CpuSet(chosen);
  }
  auto labelled = [&](const CpuSet& set) {
    ThreadSet threads{std::to_string(set.size()) + "t plan", set};
    for (const ThreadSet& known : known_sets) {
      if (known.pus == set) threads.label = known.label;
    }
    return threads;
  };
  std::optional<ThreadSet> prefill;
  if (!plan.prefill_pus.empty() && plan.prefill_pus != pus) prefill = labelled(plan.prefill_pus);
  GpuPlacement gpu;
  if (plan.expert_parallel.active()) gpu = expert_parallel_placement(plan);
  else if (plan.gpu.backend != "cpu") gpu = gpu_placement(plan.gpu, "expert", plan.n_experts);
  return SweepConfig{labelled(pus), prefill, plan.cap, plan.pins, plan.prefill_round_tokens, plan.cpu_kernel, true, gpu};
}

Result<std::vector<int>> parse_caps(const std::vector<std::string>& texts, int n_experts, std::string_view option) {
  std::vector<int> caps;
  for (const std::string& text : texts) {
    const auto cap = text == "all" ? std::optional<std::int64_t>(n_experts) : parse_int(text);
    if (!cap || *cap < 1 || *cap > n_experts) {
      return make_error(std::string(option) + ": '" + text + "' is not 'all' or a slot count in [1, " +
                        std::to_string(n_experts) + "]");
    }
    caps.push_back(static_cast<int>(*cap));
  }
  return caps;
}

planner::Plan plan_of_config(const planner::Plan& base, const SweepConfig& config) {
  planner::Plan plan = base;
  plan.threads = std::max(1, config.threads.pus.size());
  plan.compute_pus = config.threads.pus;  // empty (a profile without a recommendation): unpinned
  // The grid's configurations prefill on their own set; a planned one on its plan's.
  plan.prefill_threads = config.prefill_threads ? std::max(1, config.prefill_threads->pus.size()) : 0;
  plan.prefill_pus = config.prefill_threads ? config.prefill_threads->pus : CpuSet{};
  plan.cap = config.cap;
  plan.pins = config.pins;
  plan.prefill_round_tokens = config.round_tokens;
  plan.cpu_kernel = config.kernel;
  plan.gpu = config.gpu.tier ? *config.gpu.tier : planner::GpuTier{};
  plan.expert_parallel = config.gpu.expert_parallel ? *config.gpu.expert_parallel : planner::ExpertParallelPlan{};
  return plan;
}

std::size_t add_planned(std::vector<SweepConfig>& grid, SweepConfig planned) {
  planned.planned = true;
  for (std::size_t i = 0; i < grid.size(); ++i) {
    if (grid[i].same_knobs(planned)) {
      grid[i].planned = true;
      return i;
    }
  }
  grid.push_back(std::move(planned));
  return grid.size() - 1;
}

}  // namespace coli::bench
