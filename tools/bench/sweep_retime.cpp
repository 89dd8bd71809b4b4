#include "sweep_retime.h"

#include <algorithm>
#include <optional>

#include "coli/base/text.h"

namespace coli::bench {

std::vector<ThreadSet> grid_thread_sets(const std::vector<SweepConfig>& grid) {
  std::vector<ThreadSet> sets;
  for (const SweepConfig& c : grid) {
    if (c.gpu.all_in_vram) continue;  // the CPU computes nothing of these
    for (const std::optional<ThreadSet>& set : {std::optional(c.threads), c.prefill_threads}) {
      if (set && std::find(sets.begin(), sets.end(), *set) == sets.end()) sets.push_back(*set);
    }
  }
  return sets;
}

DeviceProfile with_retimed(const DeviceProfile& profile, const RetimedMeasurements& retimed) {
  DeviceProfile out = profile;
  if (!retimed.kernels.points.empty()) {
    if (!out.measurements.kernel_tuning) out.measurements.kernel_tuning = KernelTuning{};
    auto& points = out.measurements.kernel_tuning->points;
    for (const KernelThroughputPoint& p : retimed.kernels.points) {
      auto same = std::find_if(points.begin(), points.end(), [&](const KernelThroughputPoint& q) {
        return q.kernel == p.kernel && q.pus == p.pus;
      });
      if (same != points.end()) *same = p;
      else points.push_back(p);
    }
  }
  if (!retimed.parallel.points.empty()) {
    if (!out.measurements.parallel_overhead) out.measurements.parallel_overhead = ParallelOverhead{retimed.parallel.repetitions, {}};
    auto& points = out.measurements.parallel_overhead->points;
    for (const ParallelOverheadPoint& p : retimed.parallel.points) {
      auto same = std::find_if(points.begin(), points.end(), [&](const ParallelOverheadPoint& q) { return q.threads == p.threads; });
      if (same != points.end()) *same = p;
      else points.push_back(p);
    }
  }
  return out;
}

std::vector<SetDrift> kernel_drift(const DeviceProfile& profile, const KernelTuning& retimed) {
  std::vector<SetDrift> out;
  std::vector<std::vector<double>> ratios;
  const auto& before = profile.measurements.kernel_tuning;
  for (const KernelThroughputPoint& p : retimed.points) {
    if (!before || !(p.gb_per_s.median > 0)) continue;
    auto old = std::find_if(before->points.begin(), before->points.end(), [&](const KernelThroughputPoint& q) {
      return q.kernel == p.kernel && q.pus == p.pus && q.gb_per_s.median > 0;
    });
    if (old == before->points.end()) continue;
    auto set = std::find_if(out.begin(), out.end(), [&](const SetDrift& d) { return d.thread_set == p.thread_set; });
    if (set == out.end()) {
      out.push_back(SetDrift{p.thread_set, p.threads, 0, 0});
      ratios.emplace_back();
      set = out.end() - 1;
    }
    ratios[static_cast<std::size_t>(set - out.begin())].push_back(p.gb_per_s.median / old->gb_per_s.median);
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::vector<double>& r = ratios[i];
    std::sort(r.begin(), r.end());
    const std::size_t n = r.size();
    out[i].kernels = static_cast<int>(n);
    out[i].ratio = n % 2 ? r[n / 2] : (r[n / 2 - 1] + r[n / 2]) / 2;
  }
  return out;
}

std::string drift_text(const std::vector<SetDrift>& drift) {
  if (drift.empty()) return "no kernel point of the profile was timed again";
  std::string out;
  for (const SetDrift& d : drift) {
    if (!out.empty()) out += ", ";
    out += d.thread_set + " " + format_fixed(d.ratio, 2) + "x (" + std::to_string(d.kernels) + " kernels)";
  }
  return out;
}

}  // namespace coli::bench
