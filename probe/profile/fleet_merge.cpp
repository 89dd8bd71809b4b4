// Merging the measurements of several machines of one class (docs/fleet.md).
// Outlier rule: for each machine and each measurement point it shares with at
// least one peer, ratio = its median / the median of the other machines'
// medians. Per kind of measurement (memory_bandwidth, disk, gpu_kernels,
// cpu_kernels, uploads) the machine's score is the median of those ratios;
// its score is the lowest of them. A score of kOutlierRatio (0.8) or less
// (20% or more slower in any kind) is a finding reported by name, and that
// machine is left out of the merged numbers. The speed model's other inputs
// (OpenMP step costs, reads beside compute) are the kept machines' medians.
#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <optional>

#include "coli/base/text.h"
#include "coli/probe/fleet.h"

namespace coli::fleet {
namespace {

// Each point's figure, higher is better, keyed "KIND rest": the kind (up to
// the first space) is what a machine's score is per.
using Points = std::map<std::string, SampleStats>;

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n == 0 ? 0 : (n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2);
}

std::string memory_key(const MemoryBandwidthPoint& p) {
  return "memory_bandwidth " + p.kernel + " kind " + std::to_string(p.kind_rank) + " " + std::to_string(p.threads) + "t";
}
std::string disk_key(const DiskBandwidthPoint& p) {
  return "disk " + p.pattern + " " + std::to_string(p.block_bytes) + " B qd" + std::to_string(p.queue_depth) +
         (p.idle_us > 0 ? " idle " + format_fixed(p.idle_us, 0) + " us" : "");
}
std::string gpu_key(const GpuKernelResult& k) {
  return "gpu_kernels " + k.device + " " + k.variant + " " + std::to_string(k.rows) + "x" + std::to_string(k.cols);
}
// The tuning phase's points, which the speed model prices a plan with: a
// box whose cores run slow (power settings, throttling) shows here first.
std::string cpu_kernel_key(const KernelThroughputPoint& p) {
  return "cpu_kernels " + p.kernel + " " + p.thread_set + " " + std::to_string(p.rows) + "x" + std::to_string(p.cols) + " b" +
         std::to_string(p.batch) + " m" + std::to_string(p.matrices);
}
std::string upload_key(const UploadBandwidthPoint& p) {
  return "uploads " + p.backend + " " + p.device + " " + std::to_string(p.device_index) + " " + std::to_string(p.block_bytes) + " B";
}

Points points_of(const Measurements& m) {
  Points out;
  if (m.memory) for (const auto& p : m.memory->points) out[memory_key(p)] = p.gb_per_s;
  if (m.disk) for (const auto& p : m.disk->points) out[disk_key(p)] = p.gb_per_s;
  for (const auto& k : m.gpu_kernels) {
    if (k.passed && k.gb_per_s.samples > 0) out[gpu_key(k)] = k.gb_per_s;
  }
  if (m.kernel_tuning) for (const auto& p : m.kernel_tuning->points) out[cpu_kernel_key(p)] = p.tokens_per_s;
  for (const auto& p : m.uploads) out[upload_key(p)] = p.gb_per_s;
  return out;
}

SampleStats combine(const std::vector<SampleStats>& all) {
  SampleStats s;
  std::vector<double> medians;
  s.best = all.front().best;
  s.worst = all.front().worst;
  for (const SampleStats& one : all) {
    s.samples += one.samples;
    medians.push_back(one.median);
    s.best = std::max(s.best, one.best);
    s.worst = std::min(s.worst, one.worst);
  }
  s.median = median_of(medians);
  s.spread = s.median > 0 ? (s.best - s.worst) / s.median : 0;
  return s;
}

// Machine i against its peers: per kind the median of its points' ratios, the lowest kind kept.
MachineScore score_machine(const std::vector<Points>& points, std::size_t i, const std::string& name) {
  std::map<std::string, std::vector<double>> ratios;  // per kind of measurement
  for (const auto& [key, stats] : points[i]) {
    std::vector<double> peers;
    for (std::size_t j = 0; j < points.size(); ++j) {
      if (j == i) continue;
      if (const auto it = points[j].find(key); it != points[j].end()) peers.push_back(it->second.median);
    }
    const double peer_median = median_of(peers);
    if (!peers.empty() && peer_median > 0) ratios[key.substr(0, key.find(' '))].push_back(stats.median / peer_median);
  }
  MachineScore score{name, 1.0, 0, false, ""};
  for (const auto& [kind, values] : ratios) {
    const double ratio = median_of(values);
    if (score.kind.empty() || ratio < score.ratio) score.ratio = ratio, score.points = static_cast<int>(values.size()), score.kind = kind;
  }
  score.outlier = score.points > 0 && score.ratio <= kOutlierRatio;
  return score;
}

// The median over the kept machines of a figure each may have (nullopt: none has it).
template <typename Figure>
std::optional<double> kept_median(const std::vector<DeviceProfile>& profiles, const std::vector<std::size_t>& kept,
                                  Figure figure) {
  std::vector<double> values;
  for (std::size_t i : kept) {
    if (const std::optional<double> v = figure(profiles[i].measurements)) values.push_back(*v);
  }
  if (values.empty()) return std::nullopt;
  return median_of(values);
}

// Each of `members` of every point of the merged profile's `points`, the
// median over the kept machines of their same point (`same`) in the section
// `section` gives (nullptr: the machine has none).
template <typename Point, typename Section, typename Same>
void median_fields(std::vector<Point>& points, const std::vector<DeviceProfile>& profiles, const std::vector<std::size_t>& kept,
                   Section section, Same same, std::initializer_list<double Point::*> members) {
  for (Point& point : points) {
    for (double Point::*member : members) {
      const auto value = kept_median(profiles, kept, [&](const Measurements& m) -> std::optional<double> {
        const std::vector<Point>* theirs = section(m);
        if (!theirs) return std::nullopt;
        for (const Point& p : *theirs)
          if (same(p, point)) return p.*member;
        return std::nullopt;
      });
      if (value) point.*member = *value;
    }
  }
}

// A fresh page's first touch, OpenMP's step costs (lower is better, not
// scored) and the reads beside compute: each figure the kept machines'
// median, point by point.
void merge_unscored(Measurements& merged, const std::vector<DeviceProfile>& profiles, const std::vector<std::size_t>& kept) {
  if (merged.memory) {
    const auto fresh_page = kept_median(profiles, kept, [](const Measurements& m) -> std::optional<double> {
      if (!m.memory || m.memory->fresh_page_us <= 0) return std::nullopt;
      return m.memory->fresh_page_us;
    });
    if (fresh_page) merged.memory->fresh_page_us = *fresh_page;
  }
  if (merged.parallel_overhead) {
    median_fields(
        merged.parallel_overhead->points, profiles, kept,
        [](const Measurements& m) { return m.parallel_overhead ? &m.parallel_overhead->points : nullptr; },
        [](const ParallelOverheadPoint& a, const ParallelOverheadPoint& b) { return a.threads == b.threads; },
        {&ParallelOverheadPoint::region_us, &ParallelOverheadPoint::barrier_us, &ParallelOverheadPoint::broadcast_us,
         &ParallelOverheadPoint::broadcast_narrow_us});
  }
  if (merged.read_interference) {
    median_fields(
        merged.read_interference->points, profiles, kept,
        [](const Measurements& m) { return m.read_interference ? &m.read_interference->points : nullptr; },
        [](const ReadInterferencePoint& a, const ReadInterferencePoint& b) { return a.thread_set == b.thread_set; },
        {&ReadInterferencePoint::alone_gb_per_s, &ReadInterferencePoint::with_reads_gb_per_s, &ReadInterferencePoint::slowdown,
         &ReadInterferencePoint::reads_alone_per_s, &ReadInterferencePoint::reads_beside_per_s,
         &ReadInterferencePoint::read_progress});
  }
}

// The first kept machine's profile with every measured figure replaced by the kept machines' combined one.
DeviceProfile merge_kept(const std::vector<DeviceProfile>& profiles, const std::vector<Points>& points,
                         const std::vector<std::size_t>& kept) {
  DeviceProfile merged = profiles[kept.front()];
  // The kernel points' weight bytes per second go with their tokens per
  // second (the same calls timed): merged alike, not scored.
  std::vector<Points> kernel_bytes(profiles.size());
  for (std::size_t i : kept) {
    if (profiles[i].measurements.kernel_tuning)
      for (const auto& p : profiles[i].measurements.kernel_tuning->points) kernel_bytes[i][cpu_kernel_key(p)] = p.gb_per_s;
  }
  auto merged_stats = [&](const std::vector<Points>& of, const std::string& key, SampleStats& into) {
    std::vector<SampleStats> all;
    for (std::size_t i : kept) {
      if (const auto it = of[i].find(key); it != of[i].end()) all.push_back(it->second);
    }
    if (!all.empty()) into = combine(all);
  };
  Measurements& m = merged.measurements;
  if (m.memory) for (auto& p : m.memory->points) merged_stats(points, memory_key(p), p.gb_per_s);
  if (m.disk) for (auto& p : m.disk->points) merged_stats(points, disk_key(p), p.gb_per_s);
  for (auto& k : m.gpu_kernels) {
    if (k.passed && k.gb_per_s.samples > 0) merged_stats(points, gpu_key(k), k.gb_per_s);
  }
  if (m.kernel_tuning) {
    for (auto& p : m.kernel_tuning->points) {
      merged_stats(points, cpu_kernel_key(p), p.tokens_per_s);
      merged_stats(kernel_bytes, cpu_kernel_key(p), p.gb_per_s);
    }
  }
  for (auto& p : m.uploads) merged_stats(points, upload_key(p), p.gb_per_s);
  merge_unscored(m, profiles, kept);
  return merged;
}

}  // namespace

Result<MergeResult> merge_profiles(const std::vector<DeviceProfile>& profiles, const std::vector<std::string>& names) {
  if (profiles.size() < 2 || names.size() != profiles.size()) {
    return make_error("merge needs at least two profiles of one class (got " + std::to_string(profiles.size()) + ")");
  }
  for (std::size_t i = 0; i < profiles.size(); ++i) {
    if (profiles[i].identity.equivalence_class.empty()) {
      return make_error(names[i] + ": field 'identity.equivalence_class' is missing (written before schema 3): "
                                   "probe that machine again with this build");
    }
    if (profiles[i].identity.equivalence_class == profiles[0].identity.equivalence_class) continue;
    std::string why;
    for (const FieldDifference& d : revalidate(profiles[i], profiles[0]).class_mismatches) {
      why += "; " + d.field + ": " + d.profile_value + " here, " + d.live_value + " in " + names[0];
    }
    return make_error(names[i] + ": class " + profiles[i].identity.equivalence_class + " differs from " + names[0] +
                      "'s " + profiles[0].identity.equivalence_class + why +
                      ": only machines of one class may be merged");
  }
  std::vector<Points> points;
  for (const DeviceProfile& p : profiles) points.push_back(points_of(p.measurements));

  MergeResult result;
  for (std::size_t i = 0; i < profiles.size(); ++i) {
    MachineScore score = score_machine(points, i, names[i]);
    if (score.outlier) {
      char text[320];
      std::snprintf(text, sizeof text,
                    "%s is %.0f%% slower than its peers in %s (median ratio %.2f over %d points): left out of the "
                    "merge; check its memory population, BIOS power settings, throttling or neighbours, then "
                    "re-probe it",
                    names[i].c_str(), (1 - score.ratio) * 100, score.kind.c_str(), score.ratio, score.points);
      result.findings.push_back(text);
    }
    result.machines.push_back(std::move(score));
  }
  std::vector<std::size_t> kept;
  for (std::size_t i = 0; i < profiles.size(); ++i) {
    if (!result.machines[i].outlier) kept.push_back(i);
  }
  if (kept.empty()) return make_error("every machine is an outlier of the others: nothing to merge");

  DeviceProfile merged = merge_kept(profiles, points, kept);
  merged.provenance.host.clear();
  merged.export_info.reset();
  std::string included;
  for (std::size_t i : kept) included += (included.empty() ? "" : ", ") + names[i];
  merged.provenance.sources.push_back("merged from " + std::to_string(kept.size()) + " machines: " + included);
  for (const MachineScore& m : result.machines) {
    if (m.outlier) {
      char text[160];
      std::snprintf(text, sizeof text, "merge outlier left out: %s (%.2fx its peers)", m.name.c_str(), m.ratio);
      merged.provenance.sources.push_back(text);
    }
  }
  result.merged = std::move(merged);
  return result;
}

}  // namespace coli::fleet
