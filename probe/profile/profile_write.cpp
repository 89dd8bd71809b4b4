// DeviceProfile -> toml::table -> TOML or JSON text. The table layout is the
// file format; profile_read.cpp is its mirror image and validates it.
#include <sstream>

#include <toml++/toml.h>

#include "coli/base/files.h"
#include "coli/probe/profile_io.h"

namespace coli {
namespace {

// Flat layout: no indentation of sub-tables, so `grep` and diffs stay simple.
constexpr auto kFlat = toml::toml_formatter::default_flags & ~toml::format_flags::indentation;

std::int64_t as_int(std::uint64_t bytes) { return static_cast<std::int64_t>(bytes); }

toml::array string_array(const std::vector<std::string>& items) {
  toml::array array;
  for (const auto& item : items) array.push_back(item);
  return array;
}

void put_stats(toml::table& table, const SampleStats& stats) {
  table.insert("samples", stats.samples);
  table.insert("median_gb_per_s", stats.median);
  table.insert("best_gb_per_s", stats.best);
  table.insert("worst_gb_per_s", stats.worst);
  table.insert("spread", stats.spread);
}

toml::table cpu_table(const CpuFacts& cpu) {
  toml::table usable{{"pus", cpu.usable.pus.to_list()}, {"affinity", cpu.usable.affinity.to_list()}};
  if (cpu.usable.cgroup_cpuset) usable.insert("cgroup_cpuset", cpu.usable.cgroup_cpuset->to_list());
  if (cpu.usable.quota_cpus) usable.insert("quota_cpus", *cpu.usable.quota_cpus);

  toml::array kinds;
  for (const CpuKind& kind : cpu.kinds) {
    toml::array core_pus;
    for (const CpuSet& core : kind.core_pus) core_pus.push_back(core.to_list());
    kinds.push_back(toml::table{{"rank", kind.rank},
                                {"hwloc_efficiency", kind.hwloc_efficiency},
                                {"core_type", kind.core_type},
                                {"frequency_max_mhz", kind.frequency_max_mhz},
                                {"linux_capacity", kind.linux_capacity},
                                {"pus", kind.pus.to_list()},
                                {"cores", kind.cores},
                                {"core_pus", std::move(core_pus)}});
  }
  toml::array caches;
  for (const CacheInfo& cache : cpu.caches) {
    caches.push_back(toml::table{{"level", cache.level},
                                 {"type", cache.type},
                                 {"kind_rank", cache.kind_rank},
                                 {"size_bytes", as_int(cache.size_bytes)},
                                 {"line_bytes", cache.line_bytes},
                                 {"cores_sharing", cache.cores_sharing},
                                 {"instances", cache.instances}});
  }
  toml::array numa;
  for (const NumaNode& node : cpu.numa_nodes) {
    numa.push_back(toml::table{
        {"os_index", node.os_index}, {"pus", node.pus.to_list()}, {"memory_bytes", as_int(node.memory_bytes)}});
  }
  return toml::table{{"arch", cpu.arch},
                     {"vendor", cpu.vendor},
                     {"model", cpu.model},
                     {"packages", cpu.packages},
                     {"cores", cpu.cores},
                     {"pus", cpu.pus},
                     {"isa", string_array(cpu.isa)},
                     {"topology_source", cpu.topology_source},
                     {"isa_source", cpu.isa_source},
                     {"usable", std::move(usable)},
                     {"kinds", std::move(kinds)},
                     {"caches", std::move(caches)},
                     {"numa_nodes", std::move(numa)}};
}

toml::table memory_table(const MemoryFacts& memory) {
  toml::table table{{"total_bytes", as_int(memory.total_bytes)},
                    {"available_bytes", as_int(memory.available_bytes)},
                    {"swap_total_bytes", as_int(memory.swap_total_bytes)},
                    {"swap_free_bytes", as_int(memory.swap_free_bytes)},
                    {"headroom_bytes", as_int(memory.headroom_bytes)},
                    {"headroom_source", memory.headroom_source}};
  if (memory.cgroup_limit_bytes) table.insert("cgroup_limit_bytes", as_int(*memory.cgroup_limit_bytes));
  if (memory.cgroup_usage_bytes) table.insert("cgroup_usage_bytes", as_int(*memory.cgroup_usage_bytes));
  if (memory.cgroup_reclaimable_bytes) table.insert("cgroup_reclaimable_bytes", as_int(*memory.cgroup_reclaimable_bytes));
  toml::array sources;
  for (const MemorySource& source : memory.sources) {
    sources.push_back(toml::table{{"name", source.name},
                                  {"bytes", as_int(source.bytes)},
                                  {"origin", source.origin},
                                  {"believed", source.believed},
                                  {"note", source.note}});
  }
  table.insert("sources", std::move(sources));
  return table;
}

toml::table measurements_table(const Measurements& measurements) {
  toml::table table;
  if (measurements.memory) {
    toml::array points;
    for (const auto& point : measurements.memory->points) {
      toml::table row{{"kernel", point.kernel},
                      {"kind_rank", point.kind_rank},
                      {"threads", point.threads},
                      {"pus", point.pus.to_list()}};
      put_stats(row, point.gb_per_s);
      points.push_back(std::move(row));
    }
    table.insert("memory_bandwidth",
                 toml::table{{"buffer_bytes", as_int(measurements.memory->buffer_bytes)}, {"points", std::move(points)}});
  }
  if (measurements.disk) {
    const DiskBandwidth& disk = *measurements.disk;
    toml::array points;
    for (const auto& point : disk.points) {
      toml::table row{
          {"pattern", point.pattern}, {"block_bytes", as_int(point.block_bytes)}, {"queue_depth", point.queue_depth}};
      put_stats(row, point.gb_per_s);
      points.push_back(std::move(row));
    }
    table.insert("disk", toml::table{{"directory", disk.directory},
                                         {"filesystem", disk.filesystem},
                                         {"direct_io", disk.direct_io},
                                         {"note", disk.note},
                                         {"file_bytes", as_int(disk.file_bytes)},
                                         {"points", std::move(points)}});
  }
  return table;
}

toml::table profile_table(const DeviceProfile& profile) {
  const Provenance& p = profile.provenance;
  const ThreadRecommendation& t = profile.threads;
  return toml::table{
      {"schema_version", profile.schema_version},
      {"fingerprint", profile.fingerprint},
      {"fingerprint_basis", profile.fingerprint_basis},
      {"provenance", toml::table{{"probe_version", p.probe_version},
                                 {"build", p.build},
                                 {"created_utc", p.created_utc},
                                 {"host", p.host},
                                 {"mode", p.mode},
                                 {"probe_seconds", p.probe_seconds},
                                 {"sources", string_array(p.sources)}}},
      {"cpu", cpu_table(profile.cpu)},
      {"memory", memory_table(profile.memory)},
      {"measurements", measurements_table(profile.measurements)},
      {"threads", toml::table{{"decode_threads", t.decode_threads},
                              {"prefill_threads", t.prefill_threads},
                              {"decode_pus", t.decode_pus.to_list()},
                              {"prefill_pus", t.prefill_pus.to_list()},
                              {"rule", t.rule},
                              {"reason", t.reason}}}};
}

}  // namespace

std::string profile_to_toml(const DeviceProfile& profile) {
  std::ostringstream out;
  out << "# coli device profile, written by coli-probe. Format: docs/probe.md.\n"
      << "# Edit with care: coli validates every field and refuses what does not fit.\n\n"
      << toml::toml_formatter{profile_table(profile), kFlat} << "\n";
  return out.str();
}

std::string profile_to_json(const DeviceProfile& profile) {
  std::ostringstream out;
  out << toml::json_formatter{profile_table(profile)} << "\n";
  return out.str();
}

Status save_profile(const std::filesystem::path& path, const DeviceProfile& profile) {
  return write_file_atomically(path, profile_to_toml(profile));
}

}  // namespace coli
