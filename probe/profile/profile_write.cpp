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

template <class T>
toml::array number_array(const std::vector<T>& items) {
  toml::array array;
  for (const T& item : items) array.push_back(static_cast<std::int64_t>(item));
  return array;
}

toml::table vulkan_table(const VulkanDevice& d) {
  toml::array heaps;
  for (const VulkanMemoryHeap& heap : d.heaps) {
    toml::table row{{"size_bytes", as_int(heap.size_bytes)},
                    {"device_local", heap.device_local},
                    {"budget_clamped", heap.budget_clamped}};
    if (heap.budget_bytes) row.insert("budget_bytes", as_int(*heap.budget_bytes));
    if (heap.usage_bytes) row.insert("usage_bytes", as_int(*heap.usage_bytes));
    heaps.push_back(std::move(row));
  }
  return toml::table{{"name", d.name},
                     {"vendor_id", static_cast<std::int64_t>(d.vendor_id)},
                     {"device_id", static_cast<std::int64_t>(d.device_id)},
                     {"type", d.type},
                     {"api_version", d.api_version},
                     {"driver_version", static_cast<std::int64_t>(d.driver_version)},
                     {"driver_name", d.driver_name},
                     {"driver_info", d.driver_info},
                     {"uuid", d.uuid},
                     {"max_compute_shared_memory_bytes", static_cast<std::int64_t>(d.max_compute_shared_memory_bytes)},
                     {"max_workgroup_invocations", static_cast<std::int64_t>(d.max_workgroup_invocations)},
                     {"max_workgroup_size", number_array(d.max_workgroup_size)},
                     {"max_workgroup_count", number_array(d.max_workgroup_count)},
                     {"max_storage_buffer_range", as_int(d.max_storage_buffer_range)},
                     {"subgroup_size", static_cast<std::int64_t>(d.subgroup_size)},
                     {"min_subgroup_size", static_cast<std::int64_t>(d.min_subgroup_size)},
                     {"max_subgroup_size", static_cast<std::int64_t>(d.max_subgroup_size)},
                     {"subgroup_size_control", d.subgroup_size_control},
                     {"compute_full_subgroups", d.compute_full_subgroups},
                     {"subgroup_operations", string_array(d.subgroup_operations)},
                     {"shader_int8", d.shader_int8},
                     {"shader_float16", d.shader_float16},
                     {"storage_buffer_8bit", d.storage_buffer_8bit},
                     {"storage_buffer_16bit", d.storage_buffer_16bit},
                     {"integer_dot_product", d.integer_dot_product},
                     {"cooperative_matrix", d.cooperative_matrix},
                     {"memory_budget", d.memory_budget},
                     {"unified_memory", d.unified_memory},
                     {"external_host_memory", d.external_host_memory},
                     {"min_imported_host_pointer_alignment", as_int(d.min_imported_host_pointer_alignment)},
                     {"heaps", std::move(heaps)}};
}

toml::table cuda_table(const CudaDevice& d) {
  return toml::table{{"ordinal", d.ordinal},
                     {"name", d.name},
                     {"uuid", d.uuid},
                     {"compute_capability_major", d.compute_capability_major},
                     {"compute_capability_minor", d.compute_capability_minor},
                     {"sm_count", d.sm_count},
                     {"shared_memory_per_block", static_cast<std::int64_t>(d.shared_memory_per_block)},
                     {"shared_memory_per_block_optin", static_cast<std::int64_t>(d.shared_memory_per_block_optin)},
                     {"shared_memory_per_sm", static_cast<std::int64_t>(d.shared_memory_per_sm)},
                     {"l2_bytes", as_int(d.l2_bytes)},
                     {"total_memory_bytes", as_int(d.total_memory_bytes)},
                     {"free_memory_bytes", as_int(d.free_memory_bytes)},
                     {"driver_version", d.driver_version},
                     {"notes", string_array(d.notes)},
                     {"pci_bus_id", d.pci_bus_id},
                     {"numa_node", d.numa_node},
                     {"local_cpus", d.local_cpus.to_list()},
                     {"pcie_generation", d.pcie_generation},
                     {"pcie_width", d.pcie_width},
                     {"host_link_gbs", d.host_link_gbs}};
}

// [[gpus.links]] (schema 5): one row per pair of CUDA devices.
toml::array links_array(const std::vector<GpuLink>& links) {
  toml::array rows;
  for (const GpuLink& link : links) {
    rows.push_back(toml::table{{"a", link.a},
                               {"b", link.b},
                               {"path", link.path},
                               {"nvlinks", link.nvlinks},
                               {"spec_gbs", link.spec_gbs},
                               {"peer_access", link.peer_access},
                               {"measured_gbs", link.measured_gbs},
                               {"source", link.source}});
  }
  return rows;
}

toml::table gpus_table(const GpuFacts& gpus) {
  toml::array vulkan;
  for (const VulkanDevice& device : gpus.vulkan) vulkan.push_back(vulkan_table(device));
  toml::array cuda;
  for (const CudaDevice& device : gpus.cuda) cuda.push_back(cuda_table(device));
  return toml::table{{"source", gpus.source},
                     {"vulkan_status", gpus.vulkan_status},
                     {"cuda_status", gpus.cuda_status},
                     {"topology_status", gpus.topology_status},
                     {"vulkan", std::move(vulkan)},
                     {"cuda", std::move(cuda)},
                     {"links", links_array(gpus.links)}};
}

// [measurements.kernel_tuning] (schema 3): tokens/s beside GB/s, as a subtable.
toml::table kernel_tuning_table(const KernelTuning& tuning) {
  toml::array points;
  for (const KernelThroughputPoint& point : tuning.points) {
    toml::table row{{"kernel", point.kernel},         {"rows", point.rows},     {"cols", point.cols},
                    {"batch", point.batch},           {"matrices", point.matrices},
                    {"thread_set", point.thread_set}, {"threads", point.threads},
                    {"pus", point.pus.to_list()},     {"smt", point.smt}};
    put_stats(row, point.gb_per_s);
    const SampleStats& t = point.tokens_per_s;
    row.insert("tokens_per_s", toml::table{{"samples", t.samples}, {"median", t.median}, {"best", t.best},
                                            {"worst", t.worst}, {"spread", t.spread}});
    points.push_back(std::move(row));
  }
  return toml::table{{"cpu_kernel", tuning.cpu_kernel}, {"pool_bytes", as_int(tuning.pool_bytes)},
                     {"seconds", tuning.seconds},       {"note", tuning.note},
                     {"points", std::move(points)}};
}

// [measurements.read_interference] (schema 6).
toml::table read_interference_table(const ReadInterference& interference) {
  toml::array points;
  for (const ReadInterferencePoint& point : interference.points) {
    points.push_back(toml::table{{"thread_set", point.thread_set},
                                 {"threads", point.threads},
                                 {"pus", point.pus.to_list()},
                                 {"pairs", point.pairs},
                                 {"alone_gb_per_s", point.alone_gb_per_s},
                                 {"with_reads_gb_per_s", point.with_reads_gb_per_s},
                                 {"slowdown", point.slowdown},
                                 {"reads_alone_per_s", point.reads_alone_per_s},
                                 {"reads_beside_per_s", point.reads_beside_per_s},
                                 {"read_progress", point.read_progress}});
  }
  return toml::table{{"kernel", interference.kernel},         {"block_bytes", as_int(interference.block_bytes)},
                     {"io_threads", interference.io_threads}, {"direct_io", interference.direct_io},
                     {"note", interference.note},             {"points", std::move(points)}};
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
    toml::table memory{{"buffer_bytes", as_int(measurements.memory->buffer_bytes)}, {"points", std::move(points)}};
    if (measurements.memory->fresh_page_us > 0) memory.insert("fresh_page_us", measurements.memory->fresh_page_us);
    table.insert("memory_bandwidth", std::move(memory));
  }
  if (measurements.parallel_overhead) {
    toml::array points;
    for (const ParallelOverheadPoint& point : measurements.parallel_overhead->points) {
      points.push_back(toml::table{{"threads", point.threads},
                                   {"region_us", point.region_us},
                                   {"barrier_us", point.barrier_us},
                                   {"broadcast_us", point.broadcast_us},
                                   {"broadcast_narrow_us", point.broadcast_narrow_us}});
    }
    table.insert("parallel_overhead", toml::table{{"repetitions", measurements.parallel_overhead->repetitions},
                                                  {"points", std::move(points)}});
  }
  if (measurements.disk) {
    const DiskBandwidth& disk = *measurements.disk;
    toml::array points;
    for (const auto& point : disk.points) {
      toml::table row{
          {"pattern", point.pattern}, {"block_bytes", as_int(point.block_bytes)}, {"queue_depth", point.queue_depth}};
      if (point.idle_us > 0) row.insert("idle_us", point.idle_us);  // engine_pool_idle points
      put_stats(row, point.gb_per_s);
      points.push_back(std::move(row));
    }
    toml::table entry{{"directory", disk.directory},
                      {"filesystem", disk.filesystem},
                      {"direct_io", disk.direct_io},
                      {"note", disk.note},
                      {"file_bytes", as_int(disk.file_bytes)},
                      {"points", std::move(points)}};
    if (disk.engine_io_threads > 0) entry.insert("engine_io_threads", disk.engine_io_threads);  // with engine_pool points
    table.insert("disk", std::move(entry));
  }
  toml::array kernels;
  for (const GpuKernelResult& result : measurements.gpu_kernels) {
    toml::table row{{"device", result.device},
                    {"backend", result.backend},
                    {"variant", result.variant},
                    {"rows", result.rows},
                    {"cols", result.cols},
                    {"shared_memory_bytes", static_cast<std::int64_t>(result.shared_memory_bytes)},
                    {"passed", result.passed},
                    {"max_relative_error", result.max_relative_error},
                    {"note", result.note}};
    if (result.device_index >= 0) row.insert("device_index", result.device_index);  // absent in older profiles
    put_stats(row, result.gb_per_s);
    kernels.push_back(std::move(row));
  }
  if (!kernels.empty()) table.insert("gpu_kernels", std::move(kernels));
  if (measurements.kernel_tuning) table.insert("kernel_tuning", kernel_tuning_table(*measurements.kernel_tuning));
  if (measurements.read_interference)
    table.insert("read_interference", read_interference_table(*measurements.read_interference));
  if (!measurements.upload_status.empty() || !measurements.uploads.empty()) {
    toml::array uploads;
    for (const UploadBandwidthPoint& point : measurements.uploads) {
      toml::table row{{"backend", point.backend}, {"device", point.device}, {"device_index", point.device_index},
                      {"block_bytes", as_int(point.block_bytes)}};
      put_stats(row, point.gb_per_s);
      uploads.push_back(std::move(row));
    }
    table.insert("uploads", toml::table{{"status", measurements.upload_status}, {"points", std::move(uploads)}});
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
      {"gpus", gpus_table(profile.gpus)},
      {"measurements", measurements_table(profile.measurements)},
      {"threads", toml::table{{"decode_threads", t.decode_threads},
                              {"prefill_threads", t.prefill_threads},
                              {"decode_pus", t.decode_pus.to_list()},
                              {"prefill_pus", t.prefill_pus.to_list()},
                              {"rule", t.rule},
                              {"reason", t.reason}}}};
}

// [identity] and [export] (schema 3, docs/fleet.md); absent when empty.
toml::table with_fleet_tables(const DeviceProfile& profile) {
  toml::table table = profile_table(profile);
  const FleetIdentity& id = profile.identity;
  if (!id.equivalence_class.empty()) {
    table.insert("identity", toml::table{{"equivalence_class", id.equivalence_class},
                                         {"class_basis", id.class_basis},
                                         {"kernel_catalogue", id.kernel_catalogue}});
  }
  if (const auto& e = profile.export_info) {
    table.insert("export", toml::table{{"exported_utc", e->exported_utc},
                                       {"private_data_removed", e->private_data_removed},
                                       {"content_sha256", e->content_sha256}});
  }
  return table;
}

}  // namespace

std::string profile_to_toml(const DeviceProfile& profile) {
  std::ostringstream out;
  out << "# coli device profile, written by coli-probe. Format: docs/probe.md.\n"
      << "# Edit with care: coli validates every field and refuses what does not fit.\n\n"
      << toml::toml_formatter{with_fleet_tables(profile), kFlat} << "\n";
  return out.str();
}

std::string gpus_to_toml(const GpuFacts& gpus) {
  std::ostringstream out;
  out << "# Recorded GPU facts (the [gpus] table of a coli device profile); replay with --replay-gpus.\n\n"
      << toml::toml_formatter{toml::table{{"gpus", gpus_table(gpus)}}, kFlat} << "\n";
  return out.str();
}

std::string profile_to_json(const DeviceProfile& profile) {
  std::ostringstream out;
  out << toml::json_formatter{with_fleet_tables(profile)} << "\n";
  return out.str();
}

Status save_profile(const std::filesystem::path& path, const DeviceProfile& profile) {
  return write_file_atomically(path, profile_to_toml(profile));
}

}  // namespace coli
