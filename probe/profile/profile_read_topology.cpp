// The GPU topology of a profile (schema 5, issue 18): where each CUDA device
// hangs off and [[gpus.links]] between pairs. Every field is optional, so
// v1-v4 files and GPU records read as before; what is present is checked.
#include <cctype>
#include <set>
#include <utility>

#include "profile_reader.h"

namespace coli::profile_detail {
namespace {

constexpr double kMaxLinkGbPerS = 10000;  // 10 TB/s per direction: no GPU link comes near
constexpr int kMaxNvLinks = 64;

bool hex_digits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "domain:bus:device.function" as NVML ("00000000:18:00.0") or sysfs ("0000:18:00.0") writes it.
bool is_pci_bus_id(std::string_view id) {
  const auto first = id.find(':');
  const auto second = id.find(':', first == std::string_view::npos ? 0 : first + 1);
  const auto dot = id.find('.', second == std::string_view::npos ? 0 : second + 1);
  if (first == std::string_view::npos || second == std::string_view::npos || dot == std::string_view::npos) return false;
  const std::string_view domain = id.substr(0, first), bus = id.substr(first + 1, second - first - 1);
  const std::string_view device = id.substr(second + 1, dot - second - 1), function = id.substr(dot + 1);
  return (domain.size() == 4 || domain.size() == 8) && hex_digits(domain) && bus.size() == 2 && hex_digits(bus) &&
         device.size() == 2 && hex_digits(device) && function.size() == 1 && function[0] >= '0' && function[0] <= '7';
}

bool known_path(const std::string& path) {
  for (const char* name : {"nvlink", "same-board", "pcie-switch", "pcie-multi-switch", "host-bridge", "cross-socket"}) {
    if (path == name) return true;
  }
  return false;
}

}  // namespace

void read_cuda_topology(const Reader& r, CudaDevice& d) {
  if (r.has("pci_bus_id")) {
    d.pci_bus_id = r.text("pci_bus_id");
    if (!d.pci_bus_id.empty() && !is_pci_bus_id(d.pci_bus_id)) {
      r.fail("pci_bus_id", "= '" + d.pci_bus_id + "' is not a PCI address such as \"00000000:18:00.0\" (or \"\" when unknown)");
    }
  }
  if (r.has("numa_node")) d.numa_node = r.small_int("numa_node", -1, kMaxCpus);
  if (r.has("local_cpus")) d.local_cpus = r.cpus("local_cpus");
  if (r.has("pcie_generation")) d.pcie_generation = r.small_int("pcie_generation", 0, 8);
  if (r.has("pcie_width")) {
    d.pcie_width = r.small_int("pcie_width", 0, 32);
    if (d.pcie_width != 0 && (d.pcie_width & (d.pcie_width - 1)) != 0 && d.pcie_width != 12) {
      r.fail("pcie_width", "= " + std::to_string(d.pcie_width) + " is not a PCIe link width (1, 2, 4, 8, 12, 16, 32; 0 = unknown)");
    }
  }
  if (r.has("host_link_gbs")) d.host_link_gbs = r.real("host_link_gbs", 0, kMaxLinkGbPerS);
}

std::vector<GpuLink> read_links(const Reader& r, const std::vector<CudaDevice>& cuda) {
  std::vector<GpuLink> links;
  if (!r.has("links")) return links;
  std::set<int> ordinals;
  for (const CudaDevice& device : cuda) ordinals.insert(device.ordinal);
  std::set<std::pair<int, int>> seen;
  for (const Reader& l : r.tables("links")) {
    GpuLink link;
    link.a = l.small_int("a", 0, 1024);
    link.b = l.small_int("b", 0, 1024);
    if (!ordinals.contains(link.a)) l.fail("a", "= " + std::to_string(link.a) + " is no ordinal of gpus.cuda");
    if (!ordinals.contains(link.b)) l.fail("b", "= " + std::to_string(link.b) + " is no ordinal of gpus.cuda");
    if (link.a >= link.b) l.fail("b", "must be greater than a (one row per unordered pair)");
    if (!seen.insert({link.a, link.b}).second) {
      l.fail("a", "repeats the pair " + std::to_string(link.a) + "-" + std::to_string(link.b));
    }
    link.path = l.text("path");
    if (!known_path(link.path)) {
      l.fail("path", "= '" + link.path +
                         "' is not one of nvlink, same-board, pcie-switch, pcie-multi-switch, host-bridge, cross-socket");
    }
    link.nvlinks = l.small_int("nvlinks", 0, kMaxNvLinks);
    if ((link.path == "nvlink") != (link.nvlinks > 0)) {
      l.fail("nvlinks", "must be above 0 exactly when path is \"nvlink\"");
    }
    link.spec_gbs = l.real("spec_gbs", 0, kMaxLinkGbPerS);
    link.peer_access = l.boolean("peer_access");
    link.measured_gbs = l.real("measured_gbs", 0, kMaxLinkGbPerS);
    link.source = l.text("source");
    links.push_back(std::move(link));
  }
  return links;
}

}  // namespace coli::profile_detail
