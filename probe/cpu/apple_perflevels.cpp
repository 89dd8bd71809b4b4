#include "cpu/apple_perflevels.h"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "coli/base/text.h"

#if defined(__APPLE__)
#include <sys/sysctl.h>
#include <cstring>
#endif

namespace coli::probe {
namespace {

// The most perflevels we accept; Apple ships 1 to 3. More means corrupt input.
constexpr int kMaxPerfLevels = 16;

// hw.optional.* keys that map onto the isa vocabulary of isa_flags.h.
struct IsaKey {
  const char* sysctl_key;
  const char* isa;
};
constexpr IsaKey kIsaKeys[] = {
    {"hw.optional.neon", "neon"}, {"hw.optional.AdvSIMD", "neon"}, {"hw.optional.arm.FEAT_DotProd", "dotprod"},
    {"hw.optional.arm.FEAT_I8MM", "i8mm"}, {"hw.optional.arm.FEAT_BF16", "bf16"},
    {"hw.optional.arm.FEAT_FP16", "fp16"}, {"hw.optional.neon_fp16", "fp16"},
    // Intel Macs.
    {"hw.optional.sse", "sse"}, {"hw.optional.sse2", "sse2"}, {"hw.optional.sse3", "sse3"},
    {"hw.optional.supplementalsse3", "ssse3"}, {"hw.optional.sse4_1", "sse4_1"}, {"hw.optional.sse4_2", "sse4_2"},
    {"hw.optional.avx1_0", "avx"}, {"hw.optional.avx2_0", "avx2"}, {"hw.optional.fma", "fma"},
    {"hw.optional.f16c", "f16c"}, {"hw.optional.avx512f", "avx512f"}, {"hw.optional.avx512bw", "avx512bw"},
    {"hw.optional.avx512vl", "avx512vl"}, {"hw.optional.avx512dq", "avx512dq"},
};

// Keys read once per machine; the live reader fetches exactly these plus the
// per-level ones (level_key) and the ISA keys above.
constexpr const char* kNumberKeys[] = {"hw.nperflevels", "hw.physicalcpu", "hw.logicalcpu", "hw.packages",
                                       "hw.cachelinesize", "hw.memsize", "hw.l1icachesize", "hw.l1dcachesize",
                                       "hw.l2cachesize", "hw.optional.arm64", "hw.optional.x86_64"};
constexpr const char* kTextKeys[] = {"machdep.cpu.brand_string", "machdep.cpu.vendor"};
constexpr const char* kLevelNumberFields[] = {"logicalcpu", "physicalcpu", "l1icachesize", "l1dcachesize",
                                              "l2cachesize", "cpusperl2"};

// "hw.perflevel<N>.<field>"; without perflevels (level < 0) the machine-wide "hw.<field>".
std::string level_key(int level, std::string_view field) {
  const std::string prefix = level < 0 ? "hw." : "hw.perflevel" + std::to_string(level) + ".";
  return prefix + std::string(field);
}

// "name: value" lines; anything else (blank lines, banners) is skipped. Last value wins.
class SysctlValues {
 public:
  SysctlValues(std::string_view text, std::string source) : source_(std::move(source)) {
    for (std::string_view line : split_lines(text)) {
      const auto colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      const std::string_view key = trim(line.substr(0, colon));
      if (!key.empty()) values_[std::string(key)] = std::string(trim(line.substr(colon + 1)));
    }
  }

  std::optional<std::string> text(const std::string& key) const {
    const auto found = values_.find(key);
    if (found == values_.end()) return std::nullopt;
    return found->second;
  }
  // Absent -> nullopt; present but not a whole non-negative number -> error.
  Result<std::optional<std::uint64_t>> number(const std::string& key) const {
    const auto value = text(key);
    if (!value) return std::optional<std::uint64_t>{};
    if (const auto parsed = parse_uint(*value)) return std::optional<std::uint64_t>{*parsed};
    return make_error(source_ + ": " + key + " is not a number: '" + *value + "'");
  }
  // A count that must be present and within [1, limit].
  Result<int> count(const std::string& key, std::uint64_t limit) const {
    auto value = number(key);
    if (!value) return value.error();
    if (!*value) return make_error(source_ + ": " + key + " is missing");
    if (**value < 1 || **value > limit) {
      return make_error(source_ + ": " + key + " = " + std::to_string(**value) + " is out of range (1.." +
                        std::to_string(limit) + ")");
    }
    return static_cast<int>(**value);
  }
  Error error(const std::string& what) const { return make_error(source_ + ": " + what); }

 private:
  std::string source_;
  std::map<std::string, std::string> values_;
};

struct PerfLevel {
  std::string name;
  int logical = 0;
  int physical = 0;
  std::uint64_t l1i = 0, l1d = 0, l2 = 0, cpus_per_l2 = 0;  // 0 = unknown
};

constexpr std::uint64_t kMaxCpus = 1 << 16;

Result<PerfLevel> read_level(const SysctlValues& values, int level) {
  PerfLevel out;
  auto logical = values.count(level_key(level, "logicalcpu"), kMaxCpus);
  if (!logical) return logical.error();
  auto physical = values.count(level_key(level, "physicalcpu"), kMaxCpus);
  if (!physical) return physical.error();
  if (*physical > *logical) {
    return values.error(level_key(level, "physicalcpu") + " (" + std::to_string(*physical) + ") exceeds " +
                        level_key(level, "logicalcpu") + " (" + std::to_string(*logical) + ")");
  }
  out.logical = *logical;
  out.physical = *physical;
  if (level >= 0) out.name = values.text(level_key(level, "name")).value_or("");
  // Optional fields (there is no machine-wide hw.cpusperl2; it just stays 0).
  for (auto [field, target] : {std::pair{"l1icachesize", &out.l1i}, std::pair{"l1dcachesize", &out.l1d},
                               std::pair{"l2cachesize", &out.l2}, std::pair{"cpusperl2", &out.cpus_per_l2}}) {
    auto number = values.number(level_key(level, field));
    if (!number) return number.error();
    *target = number->value_or(0);
  }
  return out;
}

// Levels in Apple's order: index 0 is the fastest. Without hw.nperflevels
// (older macOS, Intel Macs) the machine-wide counts form a single level.
Result<std::vector<PerfLevel>> read_levels(const SysctlValues& values) {
  const bool have_levels = values.text("hw.nperflevels").has_value();
  auto declared = have_levels ? values.count("hw.nperflevels", kMaxPerfLevels) : Result<int>(1);
  if (!declared) return declared.error();
  const int level_count = *declared;
  std::vector<PerfLevel> levels;
  for (int level = 0; level < level_count; ++level) {
    auto read = read_level(values, have_levels ? level : -1);
    if (!read) return read.error();
    levels.push_back(std::move(*read));
  }
  // The per-level counts must add up to the machine-wide ones.
  for (const char* field : {"logicalcpu", "physicalcpu"}) {
    auto total = values.count(level_key(-1, field), kMaxCpus);
    if (!total) return total.error();
    int sum = 0;
    for (const PerfLevel& level : levels) {
      sum += std::string_view(field) == "logicalcpu" ? level.logical : level.physical;
    }
    if (sum != *total) {
      return values.error("hw.perflevel*." + std::string(field) + " add up to " + std::to_string(sum) + " but hw." +
                          field + " is " + std::to_string(*total));
    }
  }
  return levels;
}

void add_caches(const PerfLevel& level, int rank, int line_bytes, std::vector<CacheInfo>& caches) {
  const auto add = [&](int cache_level, const char* type, std::uint64_t size, int sharing, int instances) {
    if (size > 0) caches.push_back({cache_level, type, rank, size, line_bytes, sharing, instances});
  };
  add(1, "instruction", level.l1i, 1, level.physical);
  add(1, "data", level.l1d, 1, level.physical);
  // cpusperl2 counts logical CPUs; convert to cores. Unknown stays 0.
  const int smt_width = level.logical / level.physical;
  const int cpus_per_l2 = static_cast<int>(std::min<std::uint64_t>(level.cpus_per_l2, kMaxCpus));
  const int cores_per_l2 = cpus_per_l2 > 0 ? std::max(1, cpus_per_l2 / smt_width) : 0;
  const int l2_instances = cores_per_l2 > 0 ? (level.physical + cores_per_l2 - 1) / cores_per_l2 : 0;
  add(2, "unified", level.l2, cores_per_l2, l2_instances);
}

CpuSet pu_range(int first, int count) {
  std::vector<int> pus;
  for (int pu = first; pu < first + count; ++pu) pus.push_back(pu);
  return CpuSet(std::move(pus));
}

Result<std::vector<std::string>> read_isa(const SysctlValues& values) {
  std::vector<std::string> isa;
  for (const IsaKey& key : kIsaKeys) {
    auto flag = values.number(key.sysctl_key);
    if (!flag) return flag.error();
    if (flag->value_or(0) != 0) isa.emplace_back(key.isa);
  }
  std::sort(isa.begin(), isa.end());
  isa.erase(std::unique(isa.begin(), isa.end()), isa.end());
  return isa;
}

}  // namespace

Result<CpuFacts> cpu_facts_from_sysctl(std::string_view sysctl_text, const std::string& source_name) {
  const SysctlValues values(sysctl_text, source_name);
  auto levels = read_levels(values);
  if (!levels) return levels.error();
  auto isa = read_isa(values);
  if (!isa) return isa.error();
  auto packages = values.number("hw.packages");
  auto line_size = values.number("hw.cachelinesize");
  auto memsize = values.number("hw.memsize");
  for (const auto* checked : {&packages, &line_size, &memsize}) {
    if (!*checked) return checked->error();
  }

  CpuFacts cpu;
  const bool x86 = values.text("hw.optional.x86_64").value_or("0") == "1";
  cpu.arch = x86 ? "x86_64" : "arm64";
  cpu.vendor = values.text("machdep.cpu.vendor").value_or(x86 ? "" : "Apple");
  cpu.model = values.text("machdep.cpu.brand_string").value_or("");
  cpu.packages = static_cast<int>(std::clamp<std::uint64_t>(packages->value_or(1), 1, kMaxCpus));
  cpu.isa = std::move(*isa);
  cpu.topology_source = source_name;
  cpu.isa_source = source_name + " hw.optional.*";

  // macOS exposes no per-CPU indices. Convention: PUs are numbered from the
  // efficiency level up (last perflevel first), so rank r's PUs follow rank
  // r-1's, as on M1 where the kernel's CPUs 0-3 are the E cluster.
  const int level_count = static_cast<int>(levels->size());
  for (int rank = 0; rank < level_count; ++rank) {
    const PerfLevel& level = (*levels)[static_cast<size_t>(level_count - 1 - rank)];
    CpuKind kind{rank, -1, level.name, 0, 0, pu_range(cpu.pus, level.logical), level.physical, {}};
    // Apple silicon has no SMT; Intel Macs do, and their siblings are taken as adjacent.
    const int width = level.physical > 0 ? std::max(1, level.logical / level.physical) : 1;
    for (int core = 0; core < level.physical; ++core) kind.core_pus.push_back(pu_range(cpu.pus + core * width, width));
    cpu.kinds.push_back(std::move(kind));
    cpu.cores += level.physical;
    cpu.pus += level.logical;
    add_caches(level, rank, static_cast<int>(line_size->value_or(0)), cpu.caches);
  }
  const CpuSet all_pus = pu_range(0, cpu.pus);
  cpu.numa_nodes.push_back({0, all_pus, memsize->value_or(0)});
  // No affinity masks or cgroups on macOS: every CPU is usable.
  cpu.usable.pus = all_pus;
  cpu.usable.affinity = all_pus;
  return cpu;
}

std::optional<std::uint64_t> memsize_from_sysctl(std::string_view sysctl_text) {
  auto memsize = SysctlValues(sysctl_text, "sysctl").number("hw.memsize");
  if (!memsize) return std::nullopt;
  return *memsize;
}

#if defined(__APPLE__)
namespace {

// One value as text, or nullopt when this macOS does not have the key.
std::optional<std::string> live_value(const std::string& key, bool is_text) {
  char buffer[256] = {};  // brand strings and level names are short; numbers are 4 or 8 bytes
  size_t size = sizeof buffer - 1;
  if (sysctlbyname(key.c_str(), buffer, &size, nullptr, 0) != 0) return std::nullopt;
  if (is_text) return std::string(buffer, strnlen(buffer, size));
  // Numbers are int32 or int64 depending on the key; the kernel says which by size.
  if (size == sizeof(std::int64_t)) {
    std::int64_t value = 0;
    std::memcpy(&value, buffer, sizeof value);
    return std::to_string(value);
  }
  if (size != sizeof(std::int32_t)) return std::nullopt;
  std::int32_t value = 0;
  std::memcpy(&value, buffer, sizeof value);
  return std::to_string(value);
}

}  // namespace

Result<std::string> read_live_sysctl_text() {
  std::string text;
  const auto emit = [&](const std::string& key, bool is_text) {
    if (auto value = live_value(key, is_text)) text += key + ": " + *value + "\n";
  };
  for (const char* key : kNumberKeys) emit(key, false);
  for (const char* key : kTextKeys) emit(key, true);
  for (const IsaKey& key : kIsaKeys) emit(key.sysctl_key, false);
  const int levels = static_cast<int>(parse_int(live_value("hw.nperflevels", false).value_or("0")).value_or(0));
  for (int level = 0; level < std::min(levels, kMaxPerfLevels); ++level) {
    for (const char* field : kLevelNumberFields) emit(level_key(level, field), false);
    emit(level_key(level, "name"), true);
  }
  if (text.find("hw.logicalcpu:") == std::string::npos) return make_error("sysctl:live: cannot read hw.logicalcpu");
  return text;
}
#endif

}  // namespace coli::probe
