#include "cpu/usable_cpus.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coli/base/cgroup.h"
#include "coli/base/text.h"

namespace coli::probe {
namespace {

// Live affinity of this process. The mask size must cover the kernel's
// CPU count, which can exceed CPU_SETSIZE; grow until the kernel accepts it.
std::optional<CpuSet> live_affinity(const CpuSet& machine_pus) {
  const int highest = machine_pus.empty() ? 0 : machine_pus.cpus().back();
  for (int capacity = std::max(CPU_SETSIZE, highest + 1); capacity <= (1 << 16); capacity *= 2) {
    const std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> mask(CPU_ALLOC(capacity), [](cpu_set_t* m) { CPU_FREE(m); });
    if (!mask) return std::nullopt;
    const size_t bytes = CPU_ALLOC_SIZE(capacity);
    CPU_ZERO_S(bytes, mask.get());
    if (sched_getaffinity(0, bytes, mask.get()) != 0) {
      if (errno == EINVAL) continue;  // mask too small for this kernel
      return std::nullopt;
    }
    std::vector<int> cpus;
    for (int cpu = 0; cpu < capacity; ++cpu) {
      if (CPU_ISSET_S(static_cast<size_t>(cpu), bytes, mask.get())) cpus.push_back(cpu);
    }
    return CpuSet(std::move(cpus));
  }
  return std::nullopt;
}

// Recorded affinity: the "Cpus_allowed_list:" line of /proc/self/status.
std::optional<CpuSet> recorded_affinity(const SystemRoot& root) {
  const auto status = root.read("/proc/self/status");
  if (!status) return std::nullopt;
  for (std::string_view line : split_lines(*status)) {
    if (!starts_with(line, "Cpus_allowed_list:")) continue;
    auto cpus = CpuSet::parse(line.substr(std::string_view("Cpus_allowed_list:").size()));
    if (cpus) return *cpus;
  }
  return std::nullopt;
}

// The innermost non-empty cpuset file along this group and its ancestors.
// (A v2 child without the cpuset controller enabled has no file; the parent's applies.)
std::optional<CpuSet> cgroup_cpuset(const SystemRoot& root, const CgroupPaths& cgroups) {
  const auto location = cgroups.locate("cpuset");
  if (!location) return std::nullopt;
  const std::string file = location->version == 2 ? "/cpuset.cpus.effective" : "/cpuset.cpus";
  for (const std::string& directory : location->self_and_ancestors()) {
    const auto text = root.read(directory + file);
    if (!text || trim(*text).empty()) continue;
    if (auto cpus = CpuSet::parse(*text)) return *cpus;
  }
  return std::nullopt;
}

// quota / period in CPUs; nullopt when unlimited or unreadable.
std::optional<double> quota_ratio(std::optional<std::int64_t> quota, std::optional<std::int64_t> period) {
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return static_cast<double>(*quota) / static_cast<double>(*period);
}

// v2 cpu.max: "max 100000" (unlimited) or "150000 100000".
std::optional<double> quota_v2(const SystemRoot& root, const std::string& directory) {
  const auto text = root.read(directory + "/cpu.max");
  if (!text) return std::nullopt;
  const auto fields = split(trim(*text), ' ');
  if (fields.size() != 2 || fields[0] == "max") return std::nullopt;
  return quota_ratio(parse_int(fields[0]), parse_int(fields[1]));
}

// v1 cpu.cfs_quota_us (-1 = unlimited) / cpu.cfs_period_us.
std::optional<double> quota_v1(const SystemRoot& root, const std::string& directory) {
  const auto quota = root.read(directory + "/cpu.cfs_quota_us");
  const auto period = root.read(directory + "/cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  return quota_ratio(parse_int(*quota), parse_int(*period));
}

// Every group on the path limits us: the tightest quota wins.
std::optional<double> cgroup_quota(const SystemRoot& root, const CgroupPaths& cgroups) {
  const auto location = cgroups.locate("cpu");
  if (!location) return std::nullopt;
  std::optional<double> tightest;
  for (const std::string& directory : location->self_and_ancestors()) {
    const auto quota = location->version == 2 ? quota_v2(root, directory) : quota_v1(root, directory);
    if (quota && (!tightest || *quota < *tightest)) tightest = quota;
  }
  return tightest;
}

}  // namespace

UsableCpus read_usable_cpus(const SystemRoot& root, const CpuSet& machine_pus) {
  UsableCpus usable;
  const auto affinity = root.is_live() ? live_affinity(machine_pus) : recorded_affinity(root);
  usable.affinity = affinity.value_or(machine_pus);
  const CgroupPaths cgroups = CgroupPaths::read(root);
  usable.cgroup_cpuset = cgroup_cpuset(root, cgroups);
  usable.quota_cpus = cgroup_quota(root, cgroups);
  usable.pus = machine_pus.intersect(usable.affinity);
  if (usable.cgroup_cpuset) usable.pus = usable.pus.intersect(*usable.cgroup_cpuset);
  return usable;
}

}  // namespace coli::probe
