#include "gpu/gpu_topology.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

#include "coli/base/text.h"

namespace coli::probe {
namespace {

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool all_hex(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

// Where each matched CUDA device sits in NVML's list, and its readings.
struct Matched {
  CudaDevice* device;
  const NvmlDeviceReading* nvml;
  int nvml_index;
};

std::vector<Matched> match_by_uuid(const NvmlReadings& nvml, std::vector<CudaDevice>& cuda, std::string& unmatched) {
  std::vector<Matched> matched;
  for (CudaDevice& device : cuda) {
    bool found = false;
    for (std::size_t i = 0; i < nvml.devices.size() && !found; ++i) {
      if (!device.uuid.empty() && uuid_from_nvml(nvml.devices[i].uuid) == device.uuid) {
        matched.push_back({&device, &nvml.devices[i], static_cast<int>(i)});
        found = true;
      }
    }
    if (!found) unmatched += (unmatched.empty() ? "" : ",") + std::to_string(device.ordinal);
  }
  return matched;
}

void apply_device(const NvmlDeviceReading& reading, CudaDevice& device) {
  device.pci_bus_id = reading.pci_bus_id;
  device.pcie_generation = reading.max_pcie_generation;
  device.pcie_width = reading.max_pcie_width;
  device.host_link_gbs = pcie_gbs_per_direction(reading.max_pcie_generation, reading.max_pcie_width);
  if (device.host_link_gbs == 0 && reading.max_pcie_generation != 0) {
    device.notes.push_back("PCIe gen " + std::to_string(reading.max_pcie_generation) + " x" +
                           std::to_string(reading.max_pcie_width) + " is not a known link; host_link_gbs = 0 (unknown)");
    device.pcie_generation = device.pcie_width = 0;
  }
  for (const std::string& note : reading.notes) device.notes.push_back("NVML: " + note);
}

// Active NVLinks of `from` whose remote is `to`'s bus; and those whose remote is no GPU at all (NVSwitch).
struct NvLinkCounts {
  int direct = 0;
  int to_switch = 0;
};

NvLinkCounts count_nvlinks(const NvmlReadings& nvml, const NvmlDeviceReading& from, const NvmlDeviceReading& to) {
  NvLinkCounts counts;
  const std::string target = sysfs_pci_name(to.pci_bus_id);
  for (const std::string& remote : from.nvlink_remotes) {
    const std::string name = sysfs_pci_name(remote);
    if (!target.empty() && name == target) {
      ++counts.direct;
      continue;
    }
    const bool is_gpu = std::any_of(nvml.devices.begin(), nvml.devices.end(),
                                    [&](const NvmlDeviceReading& d) { return sysfs_pci_name(d.pci_bus_id) == name; });
    if (!is_gpu) ++counts.to_switch;
  }
  return counts;
}

int pair_level(const NvmlReadings& nvml, int i, int j) {
  for (const NvmlPairReading& pair : nvml.pairs) {
    if ((pair.i == i && pair.j == j) || (pair.i == j && pair.j == i)) return pair.level;
  }
  return -1;
}

// One pair's link, or a path-less link when NVML could not say how they connect.
GpuLink link_between(const NvmlReadings& nvml, const Matched& a, const Matched& b) {
  GpuLink link;
  link.a = a.device->ordinal;
  link.b = b.device->ordinal;
  link.source = "nvml";
  const NvLinkCounts from_a = count_nvlinks(nvml, *a.nvml, *b.nvml);
  const NvLinkCounts from_b = count_nvlinks(nvml, *b.nvml, *a.nvml);
  const int via_switch = std::min(from_a.to_switch, from_b.to_switch);
  link.nvlinks = std::max(from_a.direct, from_b.direct) + via_switch;
  if (link.nvlinks > 0) {
    link.path = "nvlink";
    const double rate = std::min(nvlink_link_gbs(a.nvml->nvlink_version, a.device->compute_capability_major),
                                 nvlink_link_gbs(b.nvml->nvlink_version, b.device->compute_capability_major));
    link.spec_gbs = link.nvlinks * rate;
    return link;
  }
  link.path = topology_level_path(pair_level(nvml, a.nvml_index, b.nvml_index));
  link.spec_gbs = std::min(a.device->host_link_gbs, b.device->host_link_gbs);
  return link;
}

}  // namespace

double pcie_gbs_per_direction(int generation, int width) {
  static constexpr double kPerLane[] = {0, 0.25, 0.5, 0.985, 1.969, 3.938, 7.563};
  const bool known_width = width == 1 || width == 2 || width == 4 || width == 8 || width == 12 || width == 16 || width == 32;
  if (generation < 1 || generation > 6 || !known_width) return 0;
  return kPerLane[generation] * width;
}

double nvlink_link_gbs(int nvml_version, int compute_capability_major) {
  if (nvml_version < 1 || nvml_version > 7) return 0;
  if (compute_capability_major == 9) return 25;  // Hopper is NVLink 4 whatever the driver calls it
  if (nvml_version == 1) return 20;
  return nvml_version == 7 ? 50 : 25;
}

std::string topology_level_path(int level) {
  switch (level) {
    case 0: return "same-board";
    case 10: return "pcie-switch";
    case 20: return "pcie-multi-switch";
    case 30:
    case 40: return "host-bridge";
    case 50: return "cross-socket";
    default: return "";
  }
}

std::string uuid_from_nvml(std::string_view nvml_uuid) {
  if (!nvml_uuid.starts_with("GPU-")) return "";
  std::string hex;
  for (char c : nvml_uuid.substr(4)) {
    if (c != '-') hex += c;
  }
  return hex.size() == 32 && all_hex(hex) ? lowercase(hex) : "";
}

std::string sysfs_pci_name(std::string_view bus_id) {
  const auto colon = bus_id.find(':');
  if (colon == std::string_view::npos || colon < 4) return "";
  const std::string_view domain = bus_id.substr(0, colon), rest = bus_id.substr(colon + 1);
  // NVML pads the domain to 8 digits; sysfs names use 4 (domains above 0xffff do not occur on GPUs).
  const std::string_view short_domain = domain.substr(domain.size() - 4);
  if (!all_hex(domain) || domain.substr(0, domain.size() - 4).find_first_not_of('0') != std::string_view::npos) return "";
  if (rest.size() != 7 || rest[2] != ':' || rest[5] != '.' || !all_hex(rest.substr(0, 2)) || !all_hex(rest.substr(3, 2))) return "";
  return lowercase(std::string(short_domain) + ":" + std::string(rest));
}

TopologyFacts topology_from_nvml(const NvmlReadings& nvml, std::vector<CudaDevice>& cuda) {
  TopologyFacts facts;
  if (!nvml.status.empty()) {
    facts.status = nvml.status;
    return facts;
  }
  std::string unmatched;
  const std::vector<Matched> matched = match_by_uuid(nvml, cuda, unmatched);
  for (const Matched& m : matched) apply_device(*m.nvml, *m.device);
  int nvlink_pairs = 0, unknown_paths = 0;
  for (std::size_t i = 0; i < matched.size(); ++i) {
    for (std::size_t j = i + 1; j < matched.size(); ++j) {
      const bool in_order = matched[i].device->ordinal < matched[j].device->ordinal;
      GpuLink link = in_order ? link_between(nvml, matched[i], matched[j]) : link_between(nvml, matched[j], matched[i]);
      if (link.path.empty()) {
        ++unknown_paths;  // NVML gave no level: left out rather than guessed
        continue;
      }
      nvlink_pairs += link.path == "nvlink";
      facts.links.push_back(std::move(link));
    }
  }
  std::sort(facts.links.begin(), facts.links.end(), [](const GpuLink& x, const GpuLink& y) {
    return x.a != y.a ? x.a < y.a : x.b < y.b;
  });
  facts.status = "NVML: " + std::to_string(matched.size()) + " of " + std::to_string(cuda.size()) + " CUDA devices matched; ";
  if (cuda.size() < 2) {
    facts.status += std::to_string(cuda.size()) + " CUDA device: no pairs";
  } else {
    facts.status += std::to_string(facts.links.size()) + (facts.links.size() == 1 ? " pair" : " pairs") + " (" +
                    std::to_string(nvlink_pairs) + " over NVLink)";
  }
  if (!unmatched.empty()) facts.status += "; CUDA devices " + unmatched + " have no NVML device with their UUID";
  if (unknown_paths > 0) facts.status += "; " + std::to_string(unknown_paths) + " pairs left out (NVML gave no topology level)";
  return facts;
}

void read_pci_locality(const SystemRoot& root, std::vector<CudaDevice>& cuda) {
  for (CudaDevice& device : cuda) {
    const std::string name = sysfs_pci_name(device.pci_bus_id);
    if (name.empty()) continue;  // no bus id (no NVML): nothing to look up
    const std::string dir = "/sys/bus/pci/devices/" + name + "/";
    const auto node = root.read(dir + "numa_node");
    const auto node_value = node ? parse_int(trim(*node)) : std::nullopt;
    if (node_value && *node_value >= -1) {
      device.numa_node = static_cast<int>(*node_value);
    } else {
      device.notes.push_back(root.map(dir + "numa_node").string() + " unreadable; numa_node = -1 (unknown)");
    }
    const auto cpus = root.read(dir + "local_cpulist");
    auto set = cpus ? CpuSet::parse(*cpus) : Result<CpuSet>(make_error("absent"));
    if (set) {
      device.local_cpus = std::move(*set);
    } else {
      device.notes.push_back(root.map(dir + "local_cpulist").string() + " unreadable; local_cpus empty (unknown)");
    }
  }
}

}  // namespace coli::probe
