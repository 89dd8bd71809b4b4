// GPU topology (issue 18): where each CUDA device hangs off (PCI bus, PCIe
// link, NUMA node, local CPUs) and how each pair reaches the other (NVLink or
// which PCIe path). NVML's raw answers (read by nvml_probe) and sysfs pass
// through the pure functions here, so the rules are tested with made-up readings.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "coli/base/files.h"
#include "coli/probe/device_profile.h"

namespace coli::probe {

// What NVML said about one GPU, unchecked.
struct NvmlDeviceReading {
  std::string uuid;                  // "GPU-7f77ad20-1429-325e-9d70-1b7a17c28fcd" as NVML writes it
  std::string pci_bus_id;            // "00000000:18:00.0"
  int max_pcie_generation = 0;       // 0: not read
  int max_pcie_width = 0;
  int nvlink_version = 0;            // nvmlDeviceGetNvLinkVersion's enum (6 = NVLink 4.0); 0: none
  std::vector<std::string> nvlink_remotes;  // the remote PCI bus id of each active NVLink
  std::vector<std::string> notes;    // what NVML could not answer
};

// nvmlDeviceGetTopologyCommonAncestor between NVML devices i < j.
struct NvmlPairReading {
  int i = 0;
  int j = 0;
  int level = -1;                    // nvmlGpuTopologyLevel_t (0, 10, 20, 30, 40, 50); -1: not read
};

struct NvmlReadings {
  std::string status;                // "" when NVML answered, else why not ("no NVML (libnvidia-ml.so.1 not found)")
  std::vector<NvmlDeviceReading> devices;  // NVML's order (may differ from CUDA's)
  std::vector<NvmlPairReading> pairs;
};

// PCIe per direction: lanes x the generation's per-lane rate after encoding
// (gen1 0.25, gen2 0.5, gen3 0.985, gen4 1.969, gen5 3.938, gen6 7.563 GB/s); 0 when unknown.
double pcie_gbs_per_direction(int generation, int width);

// One NVLink's rate per direction, GB/s, from NVML's version enum: NVLink 1
// 20; 2, 2.2, 3, 3.1 and 4 25; 5 50. Hopper (sm_90) is 25 whatever NVML
// says (some drivers report NVLink 5 there). 0 for an unknown version.
double nvlink_link_gbs(int nvml_version, int compute_capability_major);

// NVML's topology level -> GpuLink::path: 0 same-board, 10 pcie-switch,
// 20 pcie-multi-switch, 30 and 40 (host bridges within one NUMA node)
// host-bridge, 50 cross-socket; "" for anything else.
std::string topology_level_path(int level);

// "GPU-7f77ad20-1429-..." -> "7f77ad201429..." (CudaDevice::uuid's form); "" when not a GPU UUID.
std::string uuid_from_nvml(std::string_view nvml_uuid);

// "00000000:18:00.0" or "0000:18:00.0" -> "0000:18:00.0", sysfs's name (lowercase); "" when malformed.
std::string sysfs_pci_name(std::string_view bus_id);

struct TopologyFacts {
  std::string status;
  std::vector<GpuLink> links;
};

// Fills each CUDA device's bus id and PCIe link from the NVML device with its
// UUID, and one GpuLink per pair of matched devices. A pair's NVLinks are its
// direct links plus, when both GPUs have links to something that is not a GPU
// (an NVSwitch), the fewer of the two GPUs' switch links; its spec_gbs is
// links x the slower GPU's per-link rate. A pair without NVLink takes NVML's
// PCIe path and the slower of the two host links. Never throws.
TopologyFacts topology_from_nvml(const NvmlReadings& nvml, std::vector<CudaDevice>& cuda);

// NUMA node and local CPUs of each CUDA device with a bus id, from
// /sys/bus/pci/devices/<bus>/{numa_node,local_cpulist} below `root` (a
// recorded tree replays); -1 / empty with a note on the device when absent.
void read_pci_locality(const SystemRoot& root, std::vector<CudaDevice>& cuda);

}  // namespace coli::probe
