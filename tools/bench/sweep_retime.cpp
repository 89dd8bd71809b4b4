#include "sweep_retime.h"

#include <algorithm>
#include <optional>

#include "coli/base/text.h"
#include "speed_tests.h"

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

namespace {

// Each of `retimed` in place of the point of `points` it is `same` as, or added.
template <typename Point, typename Same>
void replace_points(std::vector<Point>& points, const std::vector<Point>& retimed, const Same& same) {
  for (const Point& p : retimed) {
    auto old = std::find_if(points.begin(), points.end(), [&](const Point& q) { return same(q, p); });
    if (old != points.end()) *old = p;
    else points.push_back(p);
  }
}

}  // namespace

DeviceProfile with_retimed(const DeviceProfile& profile, const RetimedMeasurements& retimed) {
  DeviceProfile out = profile;
  if (!retimed.kernels.points.empty()) {
    if (!out.measurements.kernel_tuning) out.measurements.kernel_tuning = KernelTuning{};
    replace_points(out.measurements.kernel_tuning->points, retimed.kernels.points,
                   [](const KernelThroughputPoint& a, const KernelThroughputPoint& b) { return a.kernel == b.kernel && a.pus == b.pus; });
  }
  if (!retimed.parallel.points.empty()) {
    if (!out.measurements.parallel_overhead) out.measurements.parallel_overhead = ParallelOverhead{retimed.parallel.repetitions, {}};
    replace_points(out.measurements.parallel_overhead->points, retimed.parallel.points,
                   [](const ParallelOverheadPoint& a, const ParallelOverheadPoint& b) { return a.threads == b.threads; });
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
    out[i].kernels = static_cast<int>(ratios[i].size());
    out[i].ratio = metric_stats(std::move(ratios[i])).median;
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

std::string read_round_drift(std::span<const experts::ReadRounds> before, std::span<const experts::ReadRounds> now) {
  auto one_read_ms = [](const experts::ReadRounds& r) {
    return r.rounds[1] > 0 ? 1e3 * r.seconds[1] / static_cast<double>(r.rounds[1]) : 0.0;
  };
  std::string out;
  for (const experts::ReadRounds& r : now) {
    const auto was =
        std::find_if(before.begin(), before.end(), [&](const experts::ReadRounds& b) { return b.same_setting(r); });
    if (was == before.end() || one_read_ms(r) <= 0 || one_read_ms(*was) <= 0) continue;
    out += "; one-read rounds beside " + std::to_string(r.compute_threads) + (r.compute_threads == 1 ? " thread " : " threads ") +
           format_fixed(one_read_ms(r), 2) +
           " ms (were " + format_fixed(one_read_ms(*was), 2) + ")";
  }
  return out;
}

}  // namespace coli::bench
