#include "cpu/hwloc_topology.h"

#include <hwloc.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

#include "coli/base/text.h"

namespace coli::probe {
namespace {

namespace fs = std::filesystem;

using TopologyHandle = std::unique_ptr<hwloc_topology, decltype(&hwloc_topology_destroy)>;
using BitmapHandle = std::unique_ptr<hwloc_bitmap_s, decltype(&hwloc_bitmap_free)>;

BitmapHandle new_bitmap() { return {hwloc_bitmap_alloc(), &hwloc_bitmap_free}; }

CpuSet to_cpuset(hwloc_const_bitmap_t bitmap) {
  std::vector<int> cpus;
  // An infinite set (hwloc_bitmap_last == -1 while not empty) never comes from
  // a real object; stop rather than loop forever.
  if (bitmap == nullptr || hwloc_bitmap_last(bitmap) < 0) return {};
  for (int cpu = hwloc_bitmap_first(bitmap); cpu >= 0; cpu = hwloc_bitmap_next(bitmap, cpu)) {
    cpus.push_back(cpu);
  }
  return CpuSet(std::move(cpus));
}

// ------------------------------------------------------------------ loading

std::string errno_text(int error) { return error != 0 ? std::strerror(error) : "unknown reason"; }

// hwloc's own messages for a missing file are vague; say plainly what is wrong first.
Result<Ok> check_xml_file(const fs::path& xml) {
  std::error_code ec;
  const auto status = fs::status(xml, ec);
  const std::string what = "hwloc topology XML '" + xml.string() + "'";
  if (!fs::exists(status)) {
    return make_error(what + " does not exist; record one with `lstopo --of xml FILE` or pass a correct path");
  }
  if (!fs::is_regular_file(status)) return make_error(what + " is not a regular file; pass an XML file written by `lstopo --of xml`");
  std::ifstream probe_open(xml);
  if (!probe_open) return make_error(what + " cannot be read: " + errno_text(errno) + "; check its permissions");
  return Ok{};
}

Result<TopologyHandle> load_topology(const std::optional<fs::path>& xml) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return make_error("hwloc could not initialise a topology: " + errno_text(errno));
  TopologyHandle topology(raw, &hwloc_topology_destroy);
  // Disallowed PUs (outside our cgroup) are still part of the machine; what we
  // may use is UsableCpus' business, not the topology's.
  hwloc_topology_set_flags(raw, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  hwloc_topology_set_icache_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);  // hwloc drops L1i by default
  const std::string where = xml ? "hwloc topology XML '" + xml->string() + "'" : "the live hwloc topology";
  if (xml) {
    if (auto checked = check_xml_file(*xml); !checked) return checked.error();
    errno = 0;
    if (hwloc_topology_set_xml(raw, xml->c_str()) != 0) {
      return make_error(where + " is not a valid hwloc topology (hwloc: " + errno_text(errno) +
                        "); it may be cut short or not `lstopo --of xml` output: re-record it with `lstopo --of xml FILE`");
    }
  }
  errno = 0;
  if (hwloc_topology_load(raw) != 0) {
    return make_error(where + " failed to load (hwloc: " + errno_text(errno) +
                      (xml ? "); re-record it with `lstopo --of xml FILE`" : "); check that /proc and /sys are readable"));
  }
  if (hwloc_get_nbobjs_by_type(raw, HWLOC_OBJ_PU) <= 0) {
    return make_error(where + " holds no processing units (PU objects); it is not a usable machine topology");
  }
  return topology;
}

// ------------------------------------------------------------------ identity

std::string info_of(hwloc_obj_t object, const char* name) {
  const char* value = object != nullptr ? hwloc_obj_get_info_by_name(object, name) : nullptr;
  return value != nullptr ? value : "";
}

// CPU identity lives on Package objects on Linux, on the Machine elsewhere.
// Trimmed: cpuid's brand string comes padded with spaces on some hosts.
std::string cpu_info(hwloc_topology_t topology, const char* name) {
  std::string value = info_of(hwloc_get_obj_by_type(topology, HWLOC_OBJ_PACKAGE, 0), name);
  if (value.empty()) value = info_of(hwloc_get_root_obj(topology), name);
  return std::string(trim(value));
}

// ARM has no vendor string, only the MIDR implementer code.
std::string arm_vendor(const std::string& implementer) {
  static const std::pair<const char*, const char*> kImplementers[] = {
      {"0x41", "ARM"},       {"0x42", "Broadcom"}, {"0x43", "Cavium"}, {"0x46", "Fujitsu"},
      {"0x48", "HiSilicon"}, {"0x4e", "NVIDIA"},   {"0x51", "Qualcomm"}, {"0x61", "Apple"},
      {"0xc0", "Ampere"}};
  for (const auto& [code, vendor] : kImplementers) {
    if (implementer == code) return vendor;
  }
  return implementer.empty() ? "" : "ARM implementer " + implementer;
}

std::string live_architecture() {
  utsname names{};
  return uname(&names) == 0 ? names.machine : "";
}

// ------------------------------------------------------------------ counting

int count_type(hwloc_topology_t topology, hwloc_obj_type_t type) {
  return std::max(0, hwloc_get_nbobjs_by_type(topology, type));
}

// Some platforms expose no Core level; each PU then counts as a core.
hwloc_obj_type_t core_type_of(hwloc_topology_t topology) {
  return count_type(topology, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
}

int count_intersecting(hwloc_topology_t topology, int depth, hwloc_const_bitmap_t set) {
  int count = 0;
  for (hwloc_obj_t obj = hwloc_get_next_obj_by_depth(topology, depth, nullptr); obj != nullptr;
       obj = hwloc_get_next_obj_by_depth(topology, depth, obj)) {
    if (hwloc_bitmap_intersects(obj->cpuset, set)) ++count;
  }
  return count;
}

int count_cores_in(hwloc_topology_t topology, hwloc_const_bitmap_t set) {
  return count_intersecting(topology, hwloc_get_type_depth(topology, core_type_of(topology)), set);
}

// The PUs of each core (or PU, without a Core level) inside `set`, in topology order.
std::vector<CpuSet> core_pus_in(hwloc_topology_t topology, hwloc_const_bitmap_t set) {
  std::vector<CpuSet> cores;
  const int depth = hwloc_get_type_depth(topology, core_type_of(topology));
  for (hwloc_obj_t obj = hwloc_get_next_obj_by_depth(topology, depth, nullptr); obj != nullptr;
       obj = hwloc_get_next_obj_by_depth(topology, depth, obj)) {
    if (hwloc_bitmap_intersects(obj->cpuset, set)) cores.push_back(to_cpuset(obj->cpuset).intersect(to_cpuset(set)));
  }
  return cores;
}

// ------------------------------------------------------------------ kinds

struct KindWithSet {
  CpuKind kind;
  BitmapHandle set;
};

int int_info(const hwloc_info_s* infos, unsigned count, const char* name) {
  for (unsigned i = 0; i < count; ++i) {
    if (std::strcmp(infos[i].name, name) == 0) return std::atoi(infos[i].value);
  }
  return 0;
}

std::string text_info(const hwloc_info_s* infos, unsigned count, const char* name) {
  for (unsigned i = 0; i < count; ++i) {
    if (std::strcmp(infos[i].name, name) == 0) return infos[i].value;
  }
  return "";
}

std::vector<KindWithSet> hwloc_kinds(hwloc_topology_t topology) {
  std::vector<KindWithSet> kinds;
  const int count = hwloc_cpukinds_get_nr(topology, 0);
  for (int index = 0; index < count; ++index) {
    KindWithSet entry{CpuKind{}, new_bitmap()};
    unsigned nr_infos = 0;
    hwloc_info_s* infos = nullptr;
    if (hwloc_cpukinds_get_info(topology, static_cast<unsigned>(index), entry.set.get(),
                                &entry.kind.hwloc_efficiency, &nr_infos, &infos, 0) != 0) {
      continue;
    }
    entry.kind.core_type = text_info(infos, nr_infos, "CoreType");
    entry.kind.frequency_max_mhz = int_info(infos, nr_infos, "FrequencyMaxMHz");
    entry.kind.linux_capacity = int_info(infos, nr_infos, "LinuxCapacity");
    kinds.push_back(std::move(entry));
  }
  if (kinds.empty()) {  // no kind information: the whole machine is one kind
    KindWithSet whole{CpuKind{}, new_bitmap()};
    hwloc_bitmap_copy(whole.set.get(), hwloc_topology_get_topology_cpuset(topology));
    kinds.push_back(std::move(whole));
  }
  for (auto& entry : kinds) {
    entry.kind.pus = to_cpuset(entry.set.get());
    entry.kind.core_pus = core_pus_in(topology, entry.set.get());
    entry.kind.cores = static_cast<int>(entry.kind.core_pus.size());
  }
  return kinds;
}

// Orders kinds slowest first and numbers them. hwloc's efficiency decides when
// known. When hwloc could not rank (efficiency -1: e.g. ARM without cpufreq),
// compare FrequencyMaxMHz, then LinuxCapacity, each only if every kind has it,
// and last the core count: the kind with MORE cores ranks lower, because the
// efficient cluster is the larger or equal one on hybrid parts (16E+8P, 12E+8P,
// 4xA55+4xA76). Remaining ties keep hwloc's order.
void rank_kinds(std::vector<KindWithSet>& kinds) {
  const auto all_have = [&](auto member, int unknown) {
    return std::all_of(kinds.begin(), kinds.end(), [&](const auto& k) { return k.kind.*member != unknown; });
  };
  const bool by_efficiency = all_have(&CpuKind::hwloc_efficiency, -1);
  const bool by_frequency = all_have(&CpuKind::frequency_max_mhz, 0);
  const bool by_capacity = all_have(&CpuKind::linux_capacity, 0);
  const auto key = [&](const CpuKind& k) {
    return std::make_tuple(by_efficiency ? k.hwloc_efficiency : 0, by_frequency ? k.frequency_max_mhz : 0,
                           by_capacity ? k.linux_capacity : 0, -k.cores);
  };
  std::stable_sort(kinds.begin(), kinds.end(),
                   [&](const auto& a, const auto& b) { return key(a.kind) < key(b.kind); });
  for (std::size_t i = 0; i < kinds.size(); ++i) kinds[i].kind.rank = static_cast<int>(i);
}

// ------------------------------------------------------------------ caches

std::string cache_type_name(hwloc_obj_cache_type_t type) {
  switch (type) {
    case HWLOC_OBJ_CACHE_DATA: return "data";
    case HWLOC_OBJ_CACHE_INSTRUCTION: return "instruction";
    default: return "unified";
  }
}

// Caches seen from the first PU of the kind, walking up its ancestors; counts
// are of cores and of same-level caches serving this kind, not object 0's.
std::vector<CacheInfo> caches_of_kind(hwloc_topology_t topology, const KindWithSet& entry) {
  std::vector<CacheInfo> caches;
  const int first_pu = hwloc_bitmap_first(entry.set.get());
  hwloc_obj_t pu = first_pu >= 0 ? hwloc_get_pu_obj_by_os_index(topology, static_cast<unsigned>(first_pu)) : nullptr;
  for (hwloc_obj_t obj = pu != nullptr ? pu->parent : nullptr; obj != nullptr; obj = obj->parent) {
    if (!hwloc_obj_type_is_cache(obj->type)) continue;
    CacheInfo cache;
    cache.level = static_cast<int>(obj->attr->cache.depth);
    cache.type = cache_type_name(obj->attr->cache.type);
    cache.kind_rank = entry.kind.rank;
    cache.size_bytes = obj->attr->cache.size;
    cache.line_bytes = static_cast<int>(obj->attr->cache.linesize);
    cache.cores_sharing = count_cores_in(topology, obj->cpuset);
    cache.instances = count_intersecting(topology, obj->depth, entry.set.get());
    caches.push_back(std::move(cache));
  }
  std::sort(caches.begin(), caches.end(), [](const CacheInfo& a, const CacheInfo& b) {
    return std::tie(a.level, a.type) < std::tie(b.level, b.type);
  });
  return caches;
}

// ------------------------------------------------------------------ NUMA

std::vector<NumaNode> numa_nodes(hwloc_topology_t topology) {
  std::vector<NumaNode> nodes;
  for (hwloc_obj_t obj = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, nullptr); obj != nullptr;
       obj = hwloc_get_next_obj_by_type(topology, HWLOC_OBJ_NUMANODE, obj)) {
    nodes.push_back(NumaNode{static_cast<int>(obj->os_index), to_cpuset(obj->cpuset), obj->attr->numanode.local_memory});
  }
  return nodes;
}

}  // namespace

Result<CpuFacts> read_hwloc_topology(const std::optional<std::filesystem::path>& xml) {
  auto loaded = load_topology(xml);
  if (!loaded) return loaded.error();
  hwloc_topology_t topology = loaded.value().get();
  const bool live = !xml && hwloc_topology_is_thissystem(topology) != 0;

  CpuFacts facts;
  facts.arch = info_of(hwloc_get_root_obj(topology), "Architecture");
  if (facts.arch.empty() && live) facts.arch = live_architecture();
  facts.vendor = cpu_info(topology, "CPUVendor");
  if (facts.vendor.empty()) facts.vendor = arm_vendor(cpu_info(topology, "CPUImplementer"));
  facts.model = cpu_info(topology, "CPUModel");
  facts.packages = std::max(1, count_type(topology, HWLOC_OBJ_PACKAGE));  // no Package level: one package
  facts.cores = count_type(topology, core_type_of(topology));
  facts.pus = count_type(topology, HWLOC_OBJ_PU);

  auto kinds = hwloc_kinds(topology);
  rank_kinds(kinds);
  for (const auto& entry : kinds) {
    facts.kinds.push_back(entry.kind);
    auto caches = caches_of_kind(topology, entry);
    facts.caches.insert(facts.caches.end(), caches.begin(), caches.end());
  }
  facts.numa_nodes = numa_nodes(topology);
  // HWLOC_XMLFILE / HWLOC_SYNTHETIC in the environment replace the live machine.
  facts.topology_source = xml ? "hwloc-xml:" + xml->string()
                              : (live ? "hwloc:live" : "hwloc:environment-override (HWLOC_XMLFILE or HWLOC_SYNTHETIC set)");
  return facts;
}

}  // namespace coli::probe
