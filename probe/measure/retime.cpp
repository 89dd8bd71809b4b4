#include "measure/retime.h"

#include <algorithm>
#include <filesystem>

#include "coli/base/text.h"
#include "measure/memory_bandwidth.h"
#include "measure/parallel_overhead.h"
#include "measure/read_interference.h"
#include "measure/stats.h"

namespace coli::probe {
namespace {

// The profile's reads beside compute timed again on `sets`, in its disk
// directory with its block size (a profile without them: nothing).
void retime_interference(const DeviceProfile& profile, const std::vector<ThreadCandidate>& sets, RetimedMeasurements& out) {
  const auto& before = profile.measurements.read_interference;
  if (!before || before->block_bytes == 0) return;
  const std::string directory = profile.measurements.disk ? profile.measurements.disk->directory : "";
  std::error_code missing;
  if (directory.empty() || !std::filesystem::is_directory(directory, missing)) {
    out.interference_note = "reads beside compute not timed again: the profile's disk directory " +
                            (directory.empty() ? std::string("is not recorded") : directory + " is not on this machine");
    return;
  }
  auto measured = measure_reads_beside_compute(directory, before->block_bytes, std::max(1, before->io_threads), profile.cpu,
                                               profile.memory, sets, ReadInterferenceOptions{}, {});
  if (measured) out.interference = std::move(*measured);
  else out.interference_note = "reads beside compute not timed again: " + measured.error().message;
}

// A RAM bandwidth point re-timed stands for the profile's of the same kernel, kind and thread count.
bool same_memory_point(const MemoryBandwidthPoint& a, const MemoryBandwidthPoint& b) {
  return a.kernel == b.kernel && a.kind_rank == b.kind_rank && a.threads == b.threads;
}

// The profile's RAM bandwidth timed again with its buffer size, where it has read points (the planner's).
void retime_memory(const DeviceProfile& profile, RetimedMeasurements& out) {
  const double seconds = retime_memory_seconds(profile);
  if (seconds <= 0) return;
  const MemoryBandwidthOptions options{seconds, profile.measurements.memory->buffer_bytes};
  auto measured = measure_memory_bandwidth(profile.cpu, profile.memory, options, {});
  if (measured) out.memory = std::move(*measured);
  else out.memory_note = "RAM bandwidth not timed again: " + measured.error().message;
}

}  // namespace

double retime_memory_seconds(const DeviceProfile& profile) {
  if (!profile.measurements.memory) return 0.0;
  const auto& points = profile.measurements.memory->points;  // each a read and a triad kernel
  const auto reads = std::count_if(points.begin(), points.end(), [](const MemoryBandwidthPoint& p) { return p.kernel == "read"; });
  return reads == 0 ? 0.0 : std::clamp(0.75 * static_cast<double>(reads), 4.0, 8.0);
}

Result<RetimedMeasurements> retime_measurements(const DeviceProfile& profile, const std::vector<ThreadCandidate>& sets,
                                                double seconds_per_set) {
  if (sets.empty()) return make_error("no CPU thread set to time again");
  KernelTuningOptions options;
  options.budget_seconds = seconds_per_set * static_cast<double>(sets.size());
  options.candidates = sets;
  // The profile's own pool: a point timed again reads as much memory as the one it replaces.
  if (profile.measurements.kernel_tuning) options.pool_bytes = profile.measurements.kernel_tuning->pool_bytes;
  std::vector<int> teams;
  for (const ThreadCandidate& set : sets) {
    const int threads = std::max(1, set.pus.size());
    if (std::find(teams.begin(), teams.end(), threads) == teams.end()) teams.push_back(threads);
  }
  auto kernels = measure_kernel_tuning(profile.cpu, profile.memory, options, [](std::string_view) {});
  if (!kernels) return make_error("timing the kernels again: " + kernels.error().message);
  RetimedMeasurements out{std::move(*kernels), measure_parallel_overhead(teams, kParallelOverheadRepetitions), {}, ""};
  retime_interference(profile, sets, out);
  retime_memory(profile, out);
  return out;
}

std::vector<ThreadCandidate> timed_thread_sets(const DeviceProfile& profile, int threads) {
  const auto& tuning = profile.measurements.kernel_tuning;
  const bool any_points = tuning && !tuning->points.empty();
  std::vector<ThreadCandidate> out;
  for (const ThreadCandidate& c : tuning_candidates(profile.cpu)) {
    const bool timed = !any_points || std::any_of(tuning->points.begin(), tuning->points.end(),
                                                  [&](const KernelThroughputPoint& p) { return p.pus == c.pus; });
    if (timed && (threads <= 0 || c.pus.size() == threads)) out.push_back(c);
  }
  return out;
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
  if (retimed.interference && !retimed.interference->points.empty()) {
    if (!out.measurements.read_interference) out.measurements.read_interference = *retimed.interference;
    replace_points(out.measurements.read_interference->points, retimed.interference->points,
                   [](const ReadInterferencePoint& a, const ReadInterferencePoint& b) { return a.pus == b.pus; });
  }
  if (retimed.memory && !retimed.memory->points.empty()) {
    if (!out.measurements.memory) out.measurements.memory = *retimed.memory;
    replace_points(out.measurements.memory->points, retimed.memory->points, same_memory_point);
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
    out[i].ratio = summarize(std::move(ratios[i])).median;
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

std::string interference_drift_text(const DeviceProfile& profile, const RetimedMeasurements& retimed) {
  const auto& before = profile.measurements.read_interference;
  if (!before) return "";
  if (!retimed.interference) return retimed.interference_note.empty() ? "" : "; " + retimed.interference_note;
  std::string out;
  for (const ReadInterferencePoint& p : retimed.interference->points) {
    auto old = std::find_if(before->points.begin(), before->points.end(), [&](const ReadInterferencePoint& q) { return q.pus == p.pus; });
    out += (out.empty() ? "; beside reads " : ", ") + p.thread_set + " " + format_fixed(100 * p.slowdown, 0) + "%" +
           (old != before->points.end() ? " (was " + format_fixed(100 * old->slowdown, 0) + "%)" : "");
  }
  return out;
}

std::string memory_drift_text(const DeviceProfile& profile, const RetimedMeasurements& retimed) {
  const auto& before = profile.measurements.memory;
  if (!before) return "";
  if (!retimed.memory) return retimed.memory_note.empty() ? "" : "; " + retimed.memory_note;
  std::string out;
  for (const MemoryBandwidthPoint& p : retimed.memory->points) {
    if (p.kernel != "read") continue;
    auto old = std::find_if(before->points.begin(), before->points.end(), [&](const MemoryBandwidthPoint& q) { return same_memory_point(q, p); });
    out += (out.empty() ? "; RAM read " : ", ") + std::to_string(p.threads) + "t" +
           (p.kind_rank >= 0 ? " kind" + std::to_string(p.kind_rank) : std::string()) + " " + format_fixed(p.gb_per_s.median, 1) +
           (out.empty() ? " GB/s" : "") +
           (old != before->points.end() ? " (was " + format_fixed(old->gb_per_s.median, 1) + ")" : "");
  }
  return out;
}

std::string measurements_drift_text(const DeviceProfile& profile, const RetimedMeasurements& retimed) {
  return interference_drift_text(profile, retimed) + memory_drift_text(profile, retimed);
}

}  // namespace coli::probe
