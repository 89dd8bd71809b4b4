// TOML text -> DeviceProfile, validating every field. A profile steers how
// much memory and how many threads coli takes, so anything broken, truncated,
// from the future or absurd is refused with file, line and field named.
#include <cmath>
#include <limits>

#include <toml++/toml.h>

#include "coli/base/files.h"
#include "coli/probe/fleet.h"
#include "coli/probe/profile_io.h"

namespace coli {
namespace {

constexpr std::int64_t kMaxCpus = 1 << 16;                  // no machine has more logical CPUs
constexpr std::int64_t kMaxBytes = std::int64_t{1} << 52;   // 4 PiB: more is a corrupt number
constexpr double kMaxGbPerS = 1e5;                          // 100 TB/s: more is a corrupt number
constexpr std::int64_t kMaxU32 = 0xffffffffLL;
constexpr std::int64_t kMaxSharedMemory = 16 << 20;  // no GPU has 16 MiB of shared memory per workgroup
constexpr const char* kHint = "fix the field or run coli-probe again to write a fresh profile";

struct ProfileError {
  std::string message;
};

// Reads fields of one table, remembering its dotted path for messages.
class Reader {
 public:
  Reader(const std::string& source, const toml::table& table, std::string path)
      : source_(source), table_(table), path_(std::move(path)) {}

  [[noreturn]] void fail(const toml::node* at, std::string_view field, const std::string& problem) const {
    // Point at the field itself when it exists, else at its table.
    if (!at) at = table_.get(field);
    const auto& region = at ? at->source() : table_.source();
    throw ProfileError{source_ + ":" + std::to_string(region.begin.line) + ":" + std::to_string(region.begin.column) +
                       ": field '" + qualified(field) + "' " + problem + "; " + kHint};
  }

  std::int64_t integer(std::string_view key, std::int64_t low, std::int64_t high) const {
    const toml::node* node = require(key);
    const auto value = node->value_exact<std::int64_t>();
    if (!value) fail(node, key, "must be an integer");
    if (*value < low || *value > high) {
      fail(node, key, "= " + std::to_string(*value) + " is out of range [" + std::to_string(low) + ", " +
                          std::to_string(high) + "]");
    }
    return *value;
  }
  int small_int(std::string_view key, int low, int high) const { return static_cast<int>(integer(key, low, high)); }
  std::uint64_t bytes(std::string_view key) const { return static_cast<std::uint64_t>(integer(key, 0, kMaxBytes)); }

  std::optional<std::uint64_t> optional_bytes(std::string_view key) const {
    return table_.contains(key) ? std::optional(bytes(key)) : std::nullopt;
  }

  double real(std::string_view key, double low, double high) const {
    const toml::node* node = require(key);
    const auto value = node->value<double>();  // integers are accepted where a float is expected
    if (!value || !std::isfinite(*value)) fail(node, key, "must be a finite number");
    if (*value < low || *value > high) {
      fail(node, key, "= " + std::to_string(*value) + " is out of range [" + std::to_string(low) + ", " +
                          std::to_string(high) + "]");
    }
    return *value;
  }

  std::string text(std::string_view key) const {
    const toml::node* node = require(key);
    const auto value = node->value_exact<std::string>();
    if (!value) fail(node, key, "must be a string");
    return *value;
  }

  bool boolean(std::string_view key) const {
    const toml::node* node = require(key);
    const auto value = node->value_exact<bool>();
    if (!value) fail(node, key, "must be true or false");
    return *value;
  }

  CpuSet cpus(std::string_view key) const {
    const toml::node* node = require(key);
    const auto value = node->value_exact<std::string>();
    if (!value) fail(node, key, "must be a CPU list string such as \"0-3,8\"");
    auto set = CpuSet::parse(*value);
    if (!set) fail(node, key, "is not a CPU list: " + set.error().message);
    return *set;
  }

  std::vector<std::string> strings(std::string_view key) const {
    const toml::array& items = array(key);
    std::vector<std::string> out;
    for (const toml::node& item : items) {
      const auto value = item.value_exact<std::string>();
      if (!value) fail(&item, key, "must hold only strings");
      out.push_back(*value);
    }
    return out;
  }

  std::vector<std::uint32_t> u32s(std::string_view key, std::int64_t high) const {
    std::vector<std::uint32_t> out;
    for (const toml::node& item : array(key)) {
      const auto value = item.value_exact<std::int64_t>();
      if (!value || *value < 0 || *value > high) {
        fail(&item, key, "must hold integers in [0, " + std::to_string(high) + "]");
      }
      out.push_back(static_cast<std::uint32_t>(*value));
    }
    return out;
  }
  std::uint32_t u32(std::string_view key, std::int64_t high) const {
    return static_cast<std::uint32_t>(integer(key, 0, high));
  }

  const toml::array& array(std::string_view key) const {
    const toml::node* node = require(key);
    if (!node->is_array()) fail(node, key, "must be an array");
    return *node->as_array();
  }

  Reader table(std::string_view key) const {
    const toml::node* node = require(key);
    if (!node->is_table()) fail(node, key, "must be a table");
    return Reader(source_, *node->as_table(), qualified(key));
  }

  // Each element of an array of tables, as a Reader named "path.key[i]".
  std::vector<Reader> tables(std::string_view key) const {
    std::vector<Reader> out;
    const toml::array& items = array(key);
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_table()) fail(&items[i], key, "must hold only tables");
      out.emplace_back(source_, *items[i].as_table(), qualified(key) + "[" + std::to_string(i) + "]");
    }
    return out;
  }

  bool has(std::string_view key) const { return table_.contains(key); }
  const std::string& path() const { return path_; }

 private:
  const toml::node* require(std::string_view key) const {
    const toml::node* node = table_.get(key);
    if (!node) fail(nullptr, key, "is missing");
    return node;
  }
  std::string qualified(std::string_view field) const {
    return path_.empty() ? std::string(field) : path_ + "." + std::string(field);
  }

  const std::string& source_;
  const toml::table& table_;
  std::string path_;
};

SampleStats read_stats(const Reader& r) {
  SampleStats s;
  s.samples = r.small_int("samples", 0, 1000000);  // 0: not run (e.g. a GPU variant that does not fit)
  s.median = r.real("median_gb_per_s", 0, kMaxGbPerS);
  s.best = r.real("best_gb_per_s", 0, kMaxGbPerS);
  s.worst = r.real("worst_gb_per_s", 0, kMaxGbPerS);
  s.spread = r.real("spread", 0, 1000);
  if (s.worst > s.median || s.median > s.best) r.fail(nullptr, "median_gb_per_s", "must lie between worst and best");
  return s;
}

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
  if (cpu.usable.pus.empty() || cpu.usable.pus.minus(all_pus).size() > 0) {
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

// [measurements.kernel_tuning] (schema 3; optional in older files).
KernelTuning read_kernel_tuning(const Reader& r, const CpuFacts& cpu) {
  KernelTuning tuning{r.text("cpu_kernel"), r.bytes("pool_bytes"), r.real("seconds", 0, 86400), r.text("note"), {}};
  for (const Reader& p : r.tables("points")) {
    KernelThroughputPoint point{p.text("kernel"), p.small_int("rows", 1, 1 << 24), p.small_int("cols", 1, 1 << 24),
                                p.small_int("batch", 1, 1 << 16), p.small_int("matrices", 0, 1 << 20),
                                p.text("thread_set"), p.small_int("threads", 1, kMaxCpus), p.cpus("pus"),
                                p.boolean("smt"), read_stats(p), {}};
    if (point.pus.size() != point.threads) p.fail(nullptr, "pus", "must hold one PU per thread");
    if (point.pus.intersect(cpu.usable.pus) != point.pus) p.fail(nullptr, "pus", "must be usable PUs of cpu.usable.pus");
    const Reader t = p.table("tokens_per_s");
    SampleStats& s = point.tokens_per_s;
    s.samples = t.small_int("samples", 0, 1000000), s.spread = t.real("spread", 0, 1000);
    s.median = t.real("median", 0, 1e12), s.best = t.real("best", 0, 1e12), s.worst = t.real("worst", 0, 1e12);
    if (s.worst > s.median || s.median > s.best) t.fail(nullptr, "median", "must lie between worst and best");
    tuning.points.push_back(std::move(point));
  }
  return tuning;
}

Measurements read_measurements(const Reader& r, const CpuFacts& cpu) {
  Measurements out;
  if (r.has("memory_bandwidth")) {
    const Reader mb = r.table("memory_bandwidth");
    MemoryBandwidth bandwidth;
    bandwidth.buffer_bytes = mb.bytes("buffer_bytes");
    for (const Reader& p : mb.tables("points")) {
      bandwidth.points.push_back(MemoryBandwidthPoint{p.text("kernel"), p.small_int("kind_rank", -1, 63),
                                                      p.small_int("threads", 1, kMaxCpus), p.cpus("pus"),
                                                      read_stats(p)});
    }
    out.memory = std::move(bandwidth);
  }
  if (r.has("disk")) {
    const Reader d = r.table("disk");
    DiskBandwidth disk{d.text("directory"), d.text("filesystem"), d.boolean("direct_io"), d.text("note"),
                       d.bytes("file_bytes"), {}};
    for (const Reader& p : d.tables("points")) {
      disk.points.push_back(DiskBandwidthPoint{p.text("pattern"), p.bytes("block_bytes"),
                                               p.small_int("queue_depth", 1, 4096), read_stats(p)});
    }
    out.disk = std::move(disk);
  }
  if (r.has("gpu_kernels")) {
    for (const Reader& k : r.tables("gpu_kernels")) {
      out.gpu_kernels.push_back(GpuKernelResult{k.text("device"), k.text("backend"), k.text("variant"),
                                                k.small_int("rows", 1, 1 << 24), k.small_int("cols", 1, 1 << 24),
                                                k.u32("shared_memory_bytes", kMaxSharedMemory), k.boolean("passed"),
                                                k.real("max_relative_error", 0, 1e30), k.text("note"),
                                                read_stats(k)});
    }
  }
  if (r.has("kernel_tuning")) out.kernel_tuning = read_kernel_tuning(r.table("kernel_tuning"), cpu);
  if (r.has("uploads")) {
    const Reader u = r.table("uploads");
    out.upload_status = u.text("status");
    for (const Reader& p : u.tables("points")) {
      out.uploads.push_back(UploadBandwidthPoint{p.text("backend"), p.text("device"), p.small_int("device_index", 0, 1024),
                                                 p.bytes("block_bytes"), read_stats(p)});
    }
  }
  return out;
}


VulkanDevice read_vulkan(const Reader& r) {
  VulkanDevice d;
  d.name = r.text("name");
  if (d.name.empty()) r.fail(nullptr, "name", "must not be empty");
  d.vendor_id = r.u32("vendor_id", kMaxU32);
  d.device_id = r.u32("device_id", kMaxU32);
  d.type = r.text("type");
  d.api_version = r.text("api_version");
  d.driver_version = r.u32("driver_version", kMaxU32);
  d.driver_name = r.text("driver_name");
  d.driver_info = r.text("driver_info");
  d.uuid = r.text("uuid");
  d.max_compute_shared_memory_bytes = r.u32("max_compute_shared_memory_bytes", kMaxSharedMemory);
  d.max_workgroup_invocations = r.u32("max_workgroup_invocations", 1 << 20);
  d.max_workgroup_size = r.u32s("max_workgroup_size", 1 << 20);
  d.max_workgroup_count = r.u32s("max_workgroup_count", kMaxU32);
  if (d.max_workgroup_size.size() != 3 || d.max_workgroup_count.size() != 3) {
    r.fail(nullptr, "max_workgroup_size", "and max_workgroup_count must each hold 3 numbers (x, y, z)");
  }
  d.max_storage_buffer_range = r.bytes("max_storage_buffer_range");
  d.subgroup_size = r.u32("subgroup_size", 1024);
  d.min_subgroup_size = r.u32("min_subgroup_size", 1024);
  d.max_subgroup_size = r.u32("max_subgroup_size", 1024);
  if (d.min_subgroup_size > d.max_subgroup_size) r.fail(nullptr, "min_subgroup_size", "exceeds max_subgroup_size");
  d.subgroup_size_control = r.boolean("subgroup_size_control");
  d.compute_full_subgroups = r.boolean("compute_full_subgroups");
  d.subgroup_operations = r.strings("subgroup_operations");
  d.shader_int8 = r.boolean("shader_int8");
  d.shader_float16 = r.boolean("shader_float16");
  d.storage_buffer_8bit = r.boolean("storage_buffer_8bit");
  d.storage_buffer_16bit = r.boolean("storage_buffer_16bit");
  d.integer_dot_product = r.boolean("integer_dot_product");
  d.cooperative_matrix = r.boolean("cooperative_matrix");
  d.memory_budget = r.boolean("memory_budget");
  d.unified_memory = r.boolean("unified_memory");
  d.external_host_memory = r.boolean("external_host_memory");
  d.min_imported_host_pointer_alignment = r.bytes("min_imported_host_pointer_alignment");
  for (const Reader& h : r.tables("heaps")) {
    VulkanMemoryHeap heap{h.bytes("size_bytes"), h.boolean("device_local"), h.optional_bytes("budget_bytes"),
                          h.optional_bytes("usage_bytes"), h.boolean("budget_clamped")};
    if (heap.budget_bytes && *heap.budget_bytes > heap.size_bytes) {
      h.fail(nullptr, "budget_bytes", "exceeds the heap's size_bytes (budgets are clamped to the heap)");
    }
    d.heaps.push_back(heap);
  }
  return d;
}

CudaDevice read_cuda(const Reader& r) {
  CudaDevice d;
  d.ordinal = r.small_int("ordinal", 0, 1024);
  d.name = r.text("name");
  d.uuid = r.text("uuid");
  d.compute_capability_major = r.small_int("compute_capability_major", 0, 100);  // 0: unknown (see notes)
  d.compute_capability_minor = r.small_int("compute_capability_minor", 0, 100);
  d.sm_count = r.small_int("sm_count", 0, 100000);
  d.shared_memory_per_block = r.u32("shared_memory_per_block", kMaxSharedMemory);
  d.shared_memory_per_block_optin = r.u32("shared_memory_per_block_optin", kMaxSharedMemory);
  d.shared_memory_per_sm = r.u32("shared_memory_per_sm", kMaxSharedMemory);
  d.l2_bytes = r.bytes("l2_bytes");
  d.total_memory_bytes = r.bytes("total_memory_bytes");
  d.free_memory_bytes = r.bytes("free_memory_bytes");
  if (d.free_memory_bytes > d.total_memory_bytes) r.fail(nullptr, "free_memory_bytes", "exceeds total_memory_bytes");
  d.driver_version = r.small_int("driver_version", 0, 1000000);
  d.notes = r.strings("notes");
  return d;
}

GpuFacts read_gpus(const Reader& r) {
  GpuFacts gpus;
  gpus.source = r.text("source");
  gpus.vulkan_status = r.text("vulkan_status");
  gpus.cuda_status = r.text("cuda_status");
  for (const Reader& device : r.tables("vulkan")) gpus.vulkan.push_back(read_vulkan(device));
  for (const Reader& device : r.tables("cuda")) gpus.cuda.push_back(read_cuda(device));
  return gpus;
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
  } else {
    profile.gpus.vulkan_status = profile.gpus.cuda_status = "not probed (schema 1 profile: run coli-probe again)";
  }
  profile.measurements = read_measurements(root.table("measurements"), profile.cpu);
  profile.threads = read_threads(root.table("threads"), profile.cpu);
  read_fleet_tables(root, profile);
  return profile;
}

// TOML syntax errors, with the position, for both file kinds.
Result<toml::table> parse_toml(std::string_view toml_text, const std::string& source_name) {
  try {
    return toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& error) {
    const auto& where = error.source().begin;
    return make_error(source_name + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) +
                      ": not valid TOML (" + std::string(error.description()) +
                      "); the file may be truncated or hand-edited: run coli-probe again to rewrite it");
  }
}

}  // namespace

Result<DeviceProfile> parse_profile(std::string_view toml_text, const std::string& source_name) {
  auto document = parse_toml(toml_text, source_name);
  if (!document) return document.error();
  try {
    return read_profile(Reader(source_name, *document, ""));
  } catch (const ProfileError& error) {
    return make_error(error.message);
  }
}

Result<GpuFacts> parse_gpu_record(std::string_view toml_text, const std::string& source_name) {
  auto document = parse_toml(toml_text, source_name);
  if (!document) return document.error();
  try {
    return read_gpus(Reader(source_name, *document, "").table("gpus"));
  } catch (const ProfileError& error) {
    return make_error(error.message);
  }
}

Result<DeviceProfile> load_profile(const std::filesystem::path& path) {
  auto text = read_text_file(path);
  if (!text) return make_error(text.error().message + " (run coli-probe to create a device profile)");
  return parse_profile(*text, path.string());
}

}  // namespace coli
