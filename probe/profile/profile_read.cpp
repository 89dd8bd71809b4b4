// TOML text -> DeviceProfile, validating every field. A profile steers how
// much memory and how many threads coli takes, so anything broken, truncated,
// from the future or absurd is refused with file, line and field named.
#include <algorithm>
#include <cmath>
#include <limits>

#include <toml++/toml.h>

#include "coli/base/files.h"
#include "coli/probe/fleet.h"
#include "coli/probe/profile_io.h"
#include "profile_reader.h"

namespace coli {
namespace {

using profile_detail::Reader;
using namespace profile_detail;

CpuFacts read_cpu(const Reader& r) {
  CpuFacts cpu;
  cpu.arch = r.text("arch");
  cpu.vendor = r.text("vendor");
  cpu.model = r.text("model");
  cpu.packages = r.small_int("packages", 1, 1024);
  cpu.cores = r.small_int("cores", 1, kMaxCpus);
  cpu.pus = r.small_int("pus", cpu.cores, kMaxCpus);
  cpu.isa = r.strings("isa");
  cpu.topology_source = r.text("topology_source");
  cpu.isa_source = r.text("isa_source");

  const Reader usable = r.table("usable");
  cpu.usable.pus = usable.cpus("pus");
  cpu.usable.affinity = usable.cpus("affinity");
  if (usable.has("cgroup_cpuset")) cpu.usable.cgroup_cpuset = usable.cpus("cgroup_cpuset");
  if (usable.has("quota_cpus")) cpu.usable.quota_cpus = usable.real("quota_cpus", 0.001, kMaxCpus);

  CpuSet all_pus;
  int all_cores = 0;
  for (const Reader& k : r.tables("kinds")) {
    CpuKind kind;
    kind.rank = k.small_int("rank", 0, 63);
    if (kind.rank != static_cast<int>(cpu.kinds.size())) k.fail(nullptr, "rank", "must count 0, 1, 2... in order");
    kind.hwloc_efficiency = k.small_int("hwloc_efficiency", -1, 63);
    kind.core_type = k.text("core_type");
    kind.frequency_max_mhz = k.small_int("frequency_max_mhz", 0, 100000);
    kind.linux_capacity = k.small_int("linux_capacity", 0, 1000000);
    kind.pus = k.cpus("pus");
    kind.cores = k.small_int("cores", 1, kind.pus.size());
    CpuSet covered;
    for (const std::string& core : k.strings("core_pus")) {
      auto set = CpuSet::parse(core);
      if (!set || set->empty()) k.fail(nullptr, "core_pus", "holds '" + core + "', which is not a CPU list");
      covered = covered.unite(*set);
      kind.core_pus.push_back(*set);
    }
    if (static_cast<int>(kind.core_pus.size()) != kind.cores || covered != kind.pus) {
      k.fail(nullptr, "core_pus", "must list the PUs of each of the kind's " + std::to_string(kind.cores) +
                                      " cores, covering exactly " + kind.pus.to_list());
    }
    all_pus = all_pus.unite(kind.pus);
    all_cores += kind.cores;
    cpu.kinds.push_back(std::move(kind));
  }
  if (cpu.kinds.empty()) r.fail(nullptr, "kinds", "must list at least one CPU kind");
  if (all_pus.size() != cpu.pus || all_cores != cpu.cores) {
    r.fail(nullptr, "kinds", "must cover exactly the machine's " + std::to_string(cpu.cores) + " cores and " +
                                 std::to_string(cpu.pus) + " PUs (they cover " + std::to_string(all_cores) +
                                 " cores, " + std::to_string(all_pus.size()) + " PUs)");
  }
  if (cpu.usable.pus.empty() || !cpu.usable.pus.is_subset_of(all_pus)) {
    usable.fail(nullptr, "pus", "must be a non-empty subset of the machine's PUs " + all_pus.to_list());
  }

  for (const Reader& c : r.tables("caches")) {
    CacheInfo cache;
    cache.level = c.small_int("level", 1, 4);
    cache.type = c.text("type");
    cache.kind_rank = c.small_int("kind_rank", 0, static_cast<int>(cpu.kinds.size()) - 1);
    cache.size_bytes = c.bytes("size_bytes");
    cache.line_bytes = c.small_int("line_bytes", 0, 4096);
    cache.cores_sharing = c.small_int("cores_sharing", 0, kMaxCpus);
    cache.instances = c.small_int("instances", 0, kMaxCpus);
    cpu.caches.push_back(std::move(cache));
  }
  for (const Reader& n : r.tables("numa_nodes")) {
    cpu.numa_nodes.push_back(NumaNode{n.small_int("os_index", 0, kMaxCpus), n.cpus("pus"), n.bytes("memory_bytes")});
  }
  return cpu;
}

MemoryFacts read_memory(const Reader& r) {
  MemoryFacts m;
  m.total_bytes = r.bytes("total_bytes");
  if (m.total_bytes == 0) r.fail(nullptr, "total_bytes", "must be greater than 0");
  m.available_bytes = r.bytes("available_bytes");
  m.swap_total_bytes = r.bytes("swap_total_bytes");
  m.swap_free_bytes = r.bytes("swap_free_bytes");
  m.cgroup_limit_bytes = r.optional_bytes("cgroup_limit_bytes");
  m.cgroup_usage_bytes = r.optional_bytes("cgroup_usage_bytes");
  m.cgroup_reclaimable_bytes = r.optional_bytes("cgroup_reclaimable_bytes");
  m.headroom_bytes = r.bytes("headroom_bytes");
  if (m.headroom_bytes > m.total_bytes) r.fail(nullptr, "headroom_bytes", "exceeds total_bytes");
  m.headroom_source = r.text("headroom_source");
  bool source_found = false;
  for (const Reader& s : r.tables("sources")) {
    MemorySource source{s.text("name"), s.bytes("bytes"), s.text("origin"), s.boolean("believed"), s.text("note")};
    source_found = source_found || source.name == m.headroom_source;
    m.sources.push_back(std::move(source));
  }
  if (!source_found) r.fail(nullptr, "headroom_source", "names no entry of memory.sources");
  return m;
}

ThreadRecommendation read_threads(const Reader& r, const CpuFacts& cpu) {
  ThreadRecommendation t;
  t.decode_threads = r.small_int("decode_threads", 1, cpu.pus);
  t.prefill_threads = r.small_int("prefill_threads", 1, cpu.pus);
  t.decode_pus = r.cpus("decode_pus");
  t.prefill_pus = r.cpus("prefill_pus");
  t.rule = r.text("rule");
  t.reason = r.text("reason");
  // An empty PU list means unpinned threads; otherwise one PU per thread.
  if (!t.decode_pus.empty() && t.decode_pus.size() != t.decode_threads) {
    r.fail(nullptr, "decode_pus", "must name one PU per decode thread");
  }
  if (!t.prefill_pus.empty() && t.prefill_pus.size() != t.prefill_threads) {
    r.fail(nullptr, "prefill_pus", "must name one PU per prefill thread");
  }
  const CpuSet outside = t.decode_pus.unite(t.prefill_pus).minus(cpu.usable.pus);
  if (!outside.empty()) r.fail(nullptr, "decode_pus", "uses PUs " + outside.to_list() + " this process may not use");
  return t;
}

// [identity] and [export] (schema 3, docs/fleet.md): optional; an identity
// that does not describe the file's own facts is refused.
void read_fleet_tables(const Reader& root, DeviceProfile& profile) {
  if (root.has("identity")) {
    const Reader id = root.table("identity");
    profile.identity = FleetIdentity{id.text("equivalence_class"), id.text("class_basis"), id.text("kernel_catalogue")};
    if (const std::string problem = fleet::identity_problem(profile); !problem.empty()) {
      id.fail(nullptr, "equivalence_class", "is inconsistent: " + problem);
    }
  }
  if (root.has("export")) {
    const Reader e = root.table("export");
    profile.export_info = ExportInfo{e.text("exported_utc"), e.boolean("private_data_removed"), e.text("content_sha256")};
    if (!profile.export_info->content_sha256.starts_with("sha256:") || profile.export_info->content_sha256.size() != 71) {
      e.fail(nullptr, "content_sha256", "must be 'sha256:' and 64 hex digits");
    }
  }
}

DeviceProfile read_profile(const Reader& root) {
  DeviceProfile profile;
  profile.schema_version = root.small_int("schema_version", 1, std::numeric_limits<int>::max());
  if (profile.schema_version > kDeviceProfileSchemaVersion) {
    root.fail(nullptr, "schema_version",
              "= " + std::to_string(profile.schema_version) + " is newer than this build understands (" +
                  std::to_string(kDeviceProfileSchemaVersion) + "): upgrade coli");
  }
  profile.fingerprint = root.text("fingerprint");
  profile.fingerprint_basis = root.text("fingerprint_basis");
  const Reader p = root.table("provenance");
  profile.provenance = Provenance{p.text("probe_version"), p.text("build"),   p.text("created_utc"),
                                  p.text("host"),          p.text("mode"),    p.real("probe_seconds", 0, 1e6),
                                  p.strings("sources")};
  if (profile.provenance.mode != "quick" && profile.provenance.mode != "full") {
    p.fail(nullptr, "mode", "must be \"quick\" or \"full\"");
  }
  profile.cpu = read_cpu(root.table("cpu"));
  profile.memory = read_memory(root.table("memory"));
  // Schema 1 predates GPU facts: such a profile says so instead of claiming "no GPU".
  if (profile.schema_version >= 2 || root.has("gpus")) {
    profile.gpus = read_gpus(root.table("gpus"));
    if (const std::string problem = gpu_locality_problem(profile); !problem.empty()) root.table("gpus").fail("cuda", problem);
  } else {
    profile.gpus.vulkan_status = profile.gpus.cuda_status = "not probed (schema 1 profile: run coli-probe again)";
  }
  profile.measurements = read_measurements(root.table("measurements"), profile.cpu);
  profile.threads = read_threads(root.table("threads"), profile.cpu);
  read_fleet_tables(root, profile);
  return profile;
}

}  // namespace

// A CUDA device's locality (schema 5) must name this machine's CPUs and NUMA
// nodes: a GPU record of another machine would place threads on CPUs that are not there.
std::string gpu_locality_problem(const DeviceProfile& profile) {
  CpuSet machine_pus;
  for (const CpuKind& kind : profile.cpu.kinds) machine_pus = machine_pus.unite(kind.pus);
  const auto& nodes = profile.cpu.numa_nodes;
  for (const CudaDevice& device : profile.gpus.cuda) {
    const std::string which = "of CUDA device " + std::to_string(device.ordinal);
    if (!device.local_cpus.is_subset_of(machine_pus)) {
      return "local_cpus " + device.local_cpus.to_list() + " " + which + " are not all among the machine's PUs " +
             machine_pus.to_list();
    }
    const bool known = std::any_of(nodes.begin(), nodes.end(), [&](const NumaNode& n) { return n.os_index == device.numa_node; });
    if (device.numa_node >= 0 && !nodes.empty() && !known) {
      return "numa_node " + std::to_string(device.numa_node) + " " + which + " is not a NUMA node of cpu.numa_nodes";
    }
  }
  return "";
}

Result<DeviceProfile> parse_profile(std::string_view toml_text, const std::string& source_name) {
  return read_toml_document(toml_text, source_name, kHint, "coli-probe", [](const Reader& root) { return read_profile(root); });
}

Result<GpuFacts> parse_gpu_record(std::string_view toml_text, const std::string& source_name) {
  return read_toml_document(toml_text, source_name, kHint, "coli-probe",
                            [](const Reader& root) { return read_gpus(root.table("gpus")); });
}

Result<DeviceProfile> load_profile(const std::filesystem::path& path) {
  auto text = read_text_file(path);
  if (!text) return make_error(text.error().message + " (run coli-probe to create a device profile)");
  return parse_profile(*text, path.string());
}

}  // namespace coli
