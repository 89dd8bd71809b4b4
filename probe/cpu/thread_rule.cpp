#include "cpu/thread_rule.h"

#include "cpu/core_map.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace coli::probe {
namespace {

// Hardware threads per core of a kind, from its counts (1 without SMT).
int smt_width(const CpuKind& kind) {
  const int pus = kind.pus.size();
  if (kind.cores <= 0 || pus <= kind.cores) return 1;
  return (pus + kind.cores - 1) / kind.cores;
}

// What one kind contributes: one PU per usable physical core.
struct KindCores {
  int rank = 0;
  bool smt = false;
  std::vector<int> pus;
  int count() const { return static_cast<int>(pus.size()); }
};

// Without kind information the whole machine is one kind.
std::vector<CpuKind> kinds_by_rank(const CpuFacts& cpu) {
  std::vector<CpuKind> kinds = cpu.kinds;
  if (kinds.empty()) {
    std::vector<int> all;
    for (int pu = 0; pu < cpu.pus; ++pu) all.push_back(pu);
    CpuKind whole;
    whole.pus = CpuSet(std::move(all)).unite(cpu.usable.pus);
    whole.cores = cpu.cores;
    kinds.push_back(std::move(whole));
  }
  std::sort(kinds.begin(), kinds.end(), [](const CpuKind& a, const CpuKind& b) { return a.rank < b.rank; });
  return kinds;
}

// "2+4 cores of kinds 2 and 1" (fastest first).
std::string describe_kinds(const std::vector<KindCores>& chosen) {
  std::string counts, ranks;
  for (size_t i = 0; i < chosen.size(); ++i) {
    counts += (i == 0 ? "" : "+") + std::to_string(chosen[i].count());
    ranks += (i == 0 ? "" : i + 1 == chosen.size() ? " and " : ", ") + std::to_string(chosen[i].rank);
  }
  return counts + " cores of kind" + (chosen.size() > 1 ? "s " : " ") + ranks;
}

std::string format_cpus(double cpus) {
  std::ostringstream out;
  out << cpus;
  return out.str();
}

}  // namespace

ThreadRecommendation recommend_threads(const CpuFacts& cpu) {
  const std::vector<CpuKind> kinds = kinds_by_rank(cpu);
  std::vector<KindCores> per_kind;  // ascending rank
  for (const CpuKind& kind : kinds) {
    per_kind.push_back({kind.rank, smt_width(kind) > 1, first_usable_pu_per_core(kind, cpu.usable.pus)});
  }
  const KindCores& efficiency = per_kind.front();
  const std::string efficiency_cores =
      std::to_string(efficiency.count()) + " efficiency cores (kind " + std::to_string(efficiency.rank) + ")";
  const std::string kind_count = std::to_string(kinds.size()) + " CPU kind" + (kinds.size() > 1 ? "s" : "");

  ThreadRecommendation out;
  std::vector<KindCores> chosen;  // fastest first, so a quota cap keeps the fastest cores
  if (per_kind.size() == 1) {
    chosen = per_kind;
    out.rule = "single-kind-physical-cores";
    const int all_cores = std::max(kinds.front().cores, efficiency.count());
    out.reason = kind_count + "; one thread on each of the " + std::to_string(efficiency.count()) +
                 " usable physical cores (of " + std::to_string(all_cores) + ")";
  } else {
    for (auto it = per_kind.rbegin(); it + 1 != per_kind.rend(); ++it) {
      if (it->count() > 0) chosen.push_back(*it);
    }
    if (!chosen.empty()) {
      out.rule = "all-but-efficiency-kind";
      out.reason = kind_count + "; using the " + describe_kinds(chosen) + ", leaving out the " + efficiency_cores;
    } else {
      chosen = {efficiency};
      out.rule = "efficiency-kind-only";
      out.reason = kind_count + " but no usable core of a faster kind; using the " + efficiency_cores;
    }
  }

  std::vector<int> pus;
  bool smt = false;
  for (const KindCores& kind : chosen) {
    pus.insert(pus.end(), kind.pus.begin(), kind.pus.end());
    smt = smt || kind.smt;
  }
  if (pus.empty()) {
    // Nothing usable is known (inconsistent facts); one unpinned thread still runs.
    out.rule = "no-usable-cpus";
    out.reason = kind_count + " but no usable CPU in the facts; running 1 unpinned thread.";
    out.decode_threads = out.prefill_threads = 1;
    return out;
  }
  if (smt) out.reason += "; one PU per physical core, SMT siblings not counted";

  if (cpu.usable.quota_cpus) {
    const double quota = std::min(*cpu.usable.quota_cpus, 1e6);  // keeps the int conversion defined
    const int cap = std::max(1, static_cast<int>(std::floor(quota)));
    if (cap < static_cast<int>(pus.size())) {
      pus.resize(static_cast<size_t>(cap));
      out.rule += "+quota";
      out.reason += "; capped at " + std::to_string(cap) + " by the cgroup CPU quota of " +
                    format_cpus(*cpu.usable.quota_cpus) + " CPUs";
    }
  }
  out.reason += ".";
  out.decode_threads = out.prefill_threads = static_cast<int>(pus.size());
  // Decode and prefill share the rule until measurement tunes them apart.
  out.decode_pus = out.prefill_pus = CpuSet(std::move(pus));
  return out;
}

}  // namespace coli::probe
