// Memory facts: what /proc/meminfo says, what the memory cgroup (and every
// ancestor group) still allows, and which of those the planner may rely on.
// MemAvailable alone is not enough: inside a container it reports the host,
// and an engine that sized its pools from it was OOM-killed by the cgroup.
#include "memory/memory_facts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "coli/base/cgroup.h"
#include "coli/base/text.h"

namespace coli::probe {
namespace {

constexpr std::string_view kMeminfo = "/proc/meminfo";
// cgroup v1 says "no limit" with LONG_MAX rounded down to a page
// (9223372036854771712); anything this large cannot be a real limit.
constexpr std::uint64_t kV1UnlimitedFrom = std::uint64_t{1} << 62;
// Usage this far above the limit cannot last (the kernel reclaims or
// OOM-kills first), so such a pair of readings is not trusted.
constexpr double kUsageOverLimitTolerance = 1.25;
// hwloc's NUMA total may differ from MemTotal by firmware reservations;
// beyond this it is measuring something else (VMs: often only boot memory).
constexpr double kNumaTolerance = 0.10;

using Fields = std::map<std::string, std::uint64_t, std::less<>>;

// "MemTotal:  24684092 kB" -> {"MemTotal", bytes}. Unparsable lines are left
// out, so a garbage value reads as absent rather than as zero.
Fields parse_meminfo(std::string_view text) {
  Fields fields;
  for (std::string_view line : split_lines(text)) {
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view value = trim(line.substr(colon + 1));
    std::uint64_t unit = 1;
    if (value.size() > 3 && value.substr(value.size() - 3) == " kB") {
      value.remove_suffix(3);
      unit = 1024;
    }
    if (const auto number = parse_uint(value)) fields[std::string(line.substr(0, colon))] = *number * unit;
  }
  return fields;
}

// memory.stat: "key value" per line.
Fields parse_stat(std::string_view text) {
  Fields fields;
  for (std::string_view line : split_lines(text)) {
    const auto space = line.find(' ');
    if (space == std::string_view::npos) continue;
    if (const auto number = parse_uint(line.substr(space + 1))) fields[std::string(line.substr(0, space))] = *number;
  }
  return fields;
}

std::optional<std::uint64_t> field(const Fields& fields, std::string_view key) {
  const auto found = fields.find(key);
  if (found == fields.end()) return std::nullopt;
  return found->second;
}

// ------------------------------------------------------------ cgroup levels

// One group on the way from ours to the hierarchy root, read as "the limit
// that applies here, what is charged here, and what of that is page cache
// the kernel would drop before OOM-killing us".
struct Level {
  std::string directory;
  std::string limit_file;              // which file set `limit` ("memory.max", "memory.high", ...)
  std::optional<std::uint64_t> limit;  // nullopt: no limit at this level
  std::uint64_t usage = 0;
  std::uint64_t reclaimable = 0;
  std::string problem;                 // non-empty: the readings are not believed
  std::string reclaim_note;

  std::uint64_t headroom() const {
    const std::uint64_t free_side = *limit + reclaimable;
    return free_side > usage ? free_side - usage : 0;
  }
};

struct LimitFile {
  std::string name;
  std::optional<std::string> text;
};

// Picks the tightest of the limit files present. `unlimited` tells a
// "no limit" spelling; an unparsable value is a problem, not "no limit".
void apply_limits(Level& level, const std::vector<LimitFile>& files, bool (*unlimited)(std::string_view)) {
  for (const LimitFile& file : files) {
    if (!file.text) continue;
    const std::string_view value = trim(*file.text);
    if (unlimited(value)) continue;
    const auto bytes = parse_uint(value);
    if (!bytes) {
      level.problem = file.name + " is not a number (\"" + std::string(value.substr(0, 40)) + "\")";
      return;
    }
    if (!level.limit || *bytes < *level.limit) {
      level.limit = *bytes;
      level.limit_file = file.name;
    }
  }
}

void apply_usage(Level& level, const std::optional<std::string>& usage_text, std::string_view usage_file,
                 const Fields& stat, std::initializer_list<std::string_view> reclaim_keys) {
  if (!level.limit || !level.problem.empty()) return;
  const std::optional<std::uint64_t> usage = parse_uint(usage_text.value_or(""));
  const std::uint64_t limit = *level.limit;
  if (limit == 0) {
    level.problem = level.limit_file + " is 0 (no process could run in this group)";
  } else if (!usage) {
    level.problem = std::string(usage_file) + " is missing or not a number";
  } else if (static_cast<double>(usage.value()) > static_cast<double>(limit) * kUsageOverLimitTolerance) {
    level.problem = std::string(usage_file) + " " + format_bytes(usage.value()) + " is far above " +
                    level.limit_file + " " + format_bytes(limit);
  }
  if (!level.problem.empty()) return;
  level.usage = usage.value();
  for (std::string_view key : reclaim_keys) {
    if (const auto inactive = field(stat, key)) {
      // Reclaimable page cache is part of the usage; more than all of it is a stale stat.
      level.reclaimable = std::min(*inactive, level.usage);
      level.reclaim_note = "+ " + std::string(key) + " " + format_bytes(level.reclaimable);
      return;
    }
  }
  level.reclaim_note = "(no inactive_file in memory.stat: nothing counted as reclaimable)";
}

Level read_v2_level(const SystemRoot& root, const std::string& dir) {
  Level level{.directory = dir};
  // memory.high is a soft limit, but above it the kernel throttles and
  // reclaims hard; an engine streaming weights would stall, so plan below it.
  apply_limits(level, {{"memory.max", root.read(dir + "/memory.max")}, {"memory.high", root.read(dir + "/memory.high")}},
               [](std::string_view v) { return v == "max"; });
  const Fields stat = parse_stat(root.read(dir + "/memory.stat").value_or(""));
  apply_usage(level, root.read(dir + "/memory.current"), "memory.current", stat, {"inactive_file"});
  return level;
}

Level read_v1_level(const SystemRoot& root, const std::string& dir) {
  Level level{.directory = dir};
  const auto stat_text = root.read(dir + "/memory.stat");
  const Fields stat = parse_stat(stat_text.value_or(""));
  // hierarchical_memory_limit includes ancestors above the mount point,
  // which a container cannot see; their usage is unknown, so ours stands in.
  std::optional<std::string> hierarchical;
  if (const auto value = field(stat, "hierarchical_memory_limit")) hierarchical = std::to_string(*value);
  apply_limits(level,
               {{"memory.limit_in_bytes", root.read(dir + "/memory.limit_in_bytes")},
                {"hierarchical_memory_limit", hierarchical}},
               [](std::string_view v) { return parse_uint(v).value_or(0) >= kV1UnlimitedFrom; });
  apply_usage(level, root.read(dir + "/memory.usage_in_bytes"), "memory.usage_in_bytes", stat,
              {"total_inactive_file", "inactive_file"});
  return level;
}

// Reads every level, records the tightest believed one in `facts`, and
// returns its source (nullopt when no level limits us).
std::optional<MemorySource> add_cgroup_sources(const SystemRoot& root, MemoryFacts& facts) {
  const auto location = CgroupPaths::read(root).locate("memory");
  if (!location) return std::nullopt;
  const std::string version = "cgroup v" + std::to_string(location->version);
  const Level* tightest = nullptr;
  std::vector<Level> levels;
  for (const std::string& dir : location->self_and_ancestors()) {
    levels.push_back(location->version == 2 ? read_v2_level(root, dir) : read_v1_level(root, dir));
  }
  for (const Level& level : levels) {
    if (!level.problem.empty()) {
      facts.sources.push_back({version + " memory limit", level.limit.value_or(0), level.directory, false,
                               "not believed: " + level.problem + "; this level is ignored"});
    } else if (level.limit && (!tightest || level.headroom() < tightest->headroom())) {
      tightest = &level;
    }
  }
  if (!tightest) {
    facts.sources.push_back({version + " memory limit", 0, location->directory, true,
                             "no memory limit on this group or its " + std::to_string(levels.size() - 1) +
                                 " visible ancestor(s)"});
    return std::nullopt;
  }
  // An ancestor's limit paired with our own usage: the ancestor may hold more.
  const std::string inherited = tightest->limit_file == "hierarchical_memory_limit"
                                    ? "; the limit is an ancestor's whose usage is not visible, so this "
                                      "group's usage stands in and the headroom may be overstated"
                                    : "";
  facts.cgroup_limit_bytes = tightest->limit;
  facts.cgroup_usage_bytes = tightest->usage;
  facts.cgroup_reclaimable_bytes = tightest->reclaimable;
  facts.sources.push_back({version + " " + tightest->limit_file + " headroom", tightest->headroom(),
                           tightest->directory, true,
                           tightest->limit_file + " " + format_bytes(*tightest->limit) + " - usage " +
                               format_bytes(tightest->usage) + " " + tightest->reclaim_note +
                               "; tightest of " + std::to_string(levels.size()) + " level(s)" + inherited});
  return facts.sources.back();
}

// ------------------------------------------------------------ meminfo

// Before Linux 3.14 there is no MemAvailable; free + page cache (less shmem,
// which cannot be dropped) is the usual approximation, and an optimistic one.
MemorySource available_source(const Fields& meminfo, std::uint64_t total) {
  MemorySource source{"MemAvailable", 0, std::string(kMeminfo), true, ""};
  if (const auto available = field(meminfo, "MemAvailable")) {
    source.bytes = *available;
    source.note = "system-wide: blind to cgroup limits (in a container it is the host's)";
  } else {
    const std::uint64_t cache = field(meminfo, "Buffers").value_or(0) + field(meminfo, "Cached").value_or(0);
    source.name = "MemAvailable estimate";
    source.bytes = field(meminfo, "MemFree").value_or(0) + cache - std::min(cache, field(meminfo, "Shmem").value_or(0));
    source.note = "no MemAvailable (kernel older than 3.14 or unreadable): estimated as MemFree + Buffers + "
                  "Cached - Shmem, which overstates what can be reclaimed";
  }
  if (source.bytes > total) {
    source.believed = false;
    source.note = "not believed: larger than MemTotal " + format_bytes(total);
  }
  return source;
}

MemorySource numa_source(std::uint64_t numa_total, std::uint64_t total) {
  MemorySource source{"hwloc NUMA total", numa_total, "hwloc", true, ""};
  const double ratio = static_cast<double>(numa_total) / static_cast<double>(total);
  if (std::abs(ratio - 1.0) > kNumaTolerance) {
    source.believed = false;
    source.note = "not believed: " + format_bytes(numa_total) + " vs MemTotal " + format_bytes(total) +
                  " (hwloc under-reports NUMA memory on some VMs); MemTotal is used";
  } else {
    source.note = "agrees with MemTotal within 10%";
  }
  return source;
}

}  // namespace

Result<MemoryFacts> read_memory_facts(const SystemRoot& root, std::optional<std::uint64_t> numa_total_bytes) {
  const auto text = root.read(kMeminfo);
  if (!text) return make_error("cannot read " + root.map(kMeminfo).string() + ": memory facts need /proc/meminfo");
  const Fields meminfo = parse_meminfo(*text);
  const auto total = field(meminfo, "MemTotal");
  if (!total || *total == 0) return make_error(root.map(kMeminfo).string() + " has no usable MemTotal line");

  MemoryFacts facts;
  facts.total_bytes = *total;
  facts.swap_total_bytes = field(meminfo, "SwapTotal").value_or(0);
  facts.swap_free_bytes = field(meminfo, "SwapFree").value_or(0);
  facts.sources.push_back({"MemTotal", *total, std::string(kMeminfo), true, "RAM the kernel manages"});

  const MemorySource available = available_source(meminfo, *total);
  facts.available_bytes = available.bytes;
  facts.sources.push_back(available);
  if (available.believed) {
    facts.headroom_bytes = available.bytes;
    facts.headroom_source = available.name;
  }

  const auto cgroup = add_cgroup_sources(root, facts);
  if (cgroup && (facts.headroom_source.empty() || cgroup->bytes < facts.headroom_bytes)) {
    facts.headroom_bytes = cgroup->bytes;
    facts.headroom_source = cgroup->name;
  }

  facts.sources.push_back({"SwapFree", facts.swap_free_bytes, std::string(kMeminfo), true,
                           "SwapTotal " + format_bytes(facts.swap_total_bytes) +
                               "; never counted as headroom: weights or KV cache paged out to swap make every "
                               "token wait on disk, so the engine must fit in RAM"});
  if (numa_total_bytes) facts.sources.push_back(numa_source(*numa_total_bytes, *total));
  if (facts.headroom_source.empty()) facts.headroom_source = "none believed";
  return facts;
}

MemoryFacts memory_facts_from_total(std::uint64_t total_bytes, const std::string& origin) {
  MemoryFacts facts;
  facts.total_bytes = total_bytes;
  facts.available_bytes = total_bytes;
  facts.headroom_bytes = total_bytes;
  facts.sources.push_back({"total", total_bytes, origin, true, "the only memory figure in the recording"});
  facts.sources.push_back({"available (assumed = total)", total_bytes, origin, false,
                           "the recording holds no availability; planner must re-read live. Headroom is "
                           "set to the total, which overstates it"});
  facts.headroom_source = facts.sources.back().name;
  return facts;
}

}  // namespace coli::probe
