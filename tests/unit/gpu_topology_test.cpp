// GPU topology: NVML readings (made up, the shapes of real hosts) -> the
// profile's CudaDevice locality and GpuLink facts; sysfs locality through a
// recorded root; the missing-NVML path.
#include "gpu/gpu_topology.h"
#include "gpu/nvml_probe.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

namespace coli::probe {
namespace {

std::string uuid_hex(int i) {
  char text[48];
  std::snprintf(text, sizeof text, "7f77ad201429325e9d701b7a17c2%04x", static_cast<unsigned>(i) & 0xffffu);
  return text;
}
// NVML's form of uuid_hex(i): "GPU-" and dashes 8-4-4-4-12, upper case allowed.
std::string nvml_uuid(int i) {
  const std::string h = uuid_hex(i);
  return "GPU-" + h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" + h.substr(20);
}

std::vector<CudaDevice> cuda_devices(int count) {
  std::vector<CudaDevice> out;
  for (int i = 0; i < count; ++i) {
    CudaDevice d;
    d.ordinal = i;
    d.name = "NVIDIA H200";
    d.uuid = uuid_hex(i);
    d.compute_capability_major = 9;
    out.push_back(d);
  }
  return out;
}

NvmlDeviceReading nvml_device(int i, const std::string& bus) {
  NvmlDeviceReading d;
  d.uuid = nvml_uuid(i);
  d.pci_bus_id = bus;
  d.max_pcie_generation = 5;
  d.max_pcie_width = 16;
  return d;
}

void all_pairs(NvmlReadings& nvml, int level) {
  for (int i = 0; i < static_cast<int>(nvml.devices.size()); ++i) {
    for (int j = i + 1; j < static_cast<int>(nvml.devices.size()); ++j) nvml.pairs.push_back({i, j, level});
  }
}

TEST(GpuTopology, PcieAndNvlinkRatesFollowThePublicFigures) {
  EXPECT_NEAR(pcie_gbs_per_direction(5, 16), 63.008, 1e-9);
  EXPECT_NEAR(pcie_gbs_per_direction(4, 16), 31.504, 1e-9);
  EXPECT_NEAR(pcie_gbs_per_direction(3, 8), 7.88, 1e-9);
  EXPECT_EQ(pcie_gbs_per_direction(0, 16), 0);
  EXPECT_EQ(pcie_gbs_per_direction(7, 16), 0);
  EXPECT_EQ(pcie_gbs_per_direction(5, 3), 0);
  EXPECT_EQ(nvlink_link_gbs(1, 6), 20);   // P100
  EXPECT_EQ(nvlink_link_gbs(2, 7), 25);   // V100
  EXPECT_EQ(nvlink_link_gbs(4, 8), 25);   // A100: 12 links = 300 GB/s
  EXPECT_EQ(nvlink_link_gbs(6, 9), 25);   // H100/H200: 18 links = 450 GB/s
  EXPECT_EQ(nvlink_link_gbs(7, 9), 25);   // Hopper misreported as NVLink 5
  EXPECT_EQ(nvlink_link_gbs(7, 10), 50);  // B200: 18 links = 900 GB/s
  EXPECT_EQ(nvlink_link_gbs(0, 9), 0);
}

TEST(GpuTopology, NamesAndLevels) {
  EXPECT_EQ(uuid_from_nvml(nvml_uuid(3)), uuid_hex(3));
  EXPECT_EQ(uuid_from_nvml("GPU-7F77AD20-1429-325E-9D70-1B7A17C28FCD"), "7f77ad201429325e9d701b7a17c28fcd");
  EXPECT_EQ(uuid_from_nvml("MIG-7f77ad20-1429-325e-9d70-1b7a17c28fcd"), "");
  EXPECT_EQ(uuid_from_nvml("GPU-123"), "");
  EXPECT_EQ(sysfs_pci_name("00000000:1B:00.0"), "0000:1b:00.0");
  EXPECT_EQ(sysfs_pci_name("0000:1b:00.0"), "0000:1b:00.0");
  EXPECT_EQ(sysfs_pci_name("00010000:1B:00.0"), "");
  EXPECT_EQ(sysfs_pci_name("garbage"), "");
  EXPECT_EQ(topology_level_path(0), "same-board");
  EXPECT_EQ(topology_level_path(10), "pcie-switch");
  EXPECT_EQ(topology_level_path(20), "pcie-multi-switch");
  EXPECT_EQ(topology_level_path(30), "host-bridge");
  EXPECT_EQ(topology_level_path(40), "host-bridge");
  EXPECT_EQ(topology_level_path(50), "cross-socket");
  EXPECT_EQ(topology_level_path(-1), "");
}

TEST(GpuTopology, TwoGpusOnAnNvlinkBridge) {
  NvmlReadings nvml;
  nvml.devices = {nvml_device(0, "00000000:17:00.0"), nvml_device(1, "00000000:65:00.0")};
  for (int l = 0; l < 18; ++l) {
    nvml.devices[0].nvlink_remotes.push_back("00000000:65:00.0");
    nvml.devices[1].nvlink_remotes.push_back("00000000:17:00.0");
  }
  nvml.devices[0].nvlink_version = nvml.devices[1].nvlink_version = 6;
  all_pairs(nvml, 30);
  auto cuda = cuda_devices(2);
  const TopologyFacts facts = topology_from_nvml(nvml, cuda);
  ASSERT_EQ(facts.links.size(), 1u) << facts.status;
  const GpuLink& link = facts.links[0];
  EXPECT_EQ(link.a, 0);
  EXPECT_EQ(link.b, 1);
  EXPECT_EQ(link.path, "nvlink");
  EXPECT_EQ(link.nvlinks, 18);  // each side sees the same 18 links: not counted twice
  EXPECT_DOUBLE_EQ(link.spec_gbs, 450);
  EXPECT_EQ(link.source, "nvml");
  EXPECT_EQ(cuda[1].pci_bus_id, "00000000:65:00.0");
  EXPECT_EQ(cuda[1].pcie_generation, 5);
  EXPECT_NEAR(cuda[1].host_link_gbs, 63.008, 1e-9);
  EXPECT_NE(facts.status.find("2 of 2 CUDA devices matched; 1 pair (1 over NVLink)"), std::string::npos) << facts.status;
}

TEST(GpuTopology, EightGpusOnNvswitchAreEveryPairAtTheSmallerSwitchTotal) {
  NvmlReadings nvml;
  for (int i = 0; i < 8; ++i) {
    char bus[32];
    std::snprintf(bus, sizeof bus, "00000000:%02X:00.0", 0x1b + 0x10 * i);
    nvml.devices.push_back(nvml_device(i, bus));
    nvml.devices.back().nvlink_version = 6;
    // Four NVSwitch chips (not GPUs): 18 links spread over them.
    const int links = i == 7 ? 16 : 18;  // GPU 7 has two links down
    for (int l = 0; l < links; ++l) nvml.devices.back().nvlink_remotes.push_back("00000000:0" + std::to_string(l % 4) + ":00.0");
  }
  all_pairs(nvml, 50);
  auto cuda = cuda_devices(8);
  const TopologyFacts facts = topology_from_nvml(nvml, cuda);
  ASSERT_EQ(facts.links.size(), 28u) << facts.status;
  for (const GpuLink& link : facts.links) {
    EXPECT_LT(link.a, link.b);
    EXPECT_EQ(link.path, "nvlink");
    EXPECT_EQ(link.nvlinks, link.b == 7 ? 16 : 18) << link.a << "-" << link.b;
    EXPECT_DOUBLE_EQ(link.spec_gbs, link.nvlinks * 25.0);
  }
}

TEST(GpuTopology, FourGpusOverPcieAcrossTwoSocketsFollowNvmlLevelsAndCudaOrder) {
  NvmlReadings nvml;
  // NVML lists them in bus order; CUDA ordinals (fastest first) differ: NVML 0 is CUDA 3.
  nvml.devices = {nvml_device(3, "00000000:18:00.0"), nvml_device(1, "00000000:3b:00.0"),
                  nvml_device(2, "00000000:86:00.0"), nvml_device(0, "00000000:af:00.0")};
  nvml.devices[3].max_pcie_generation = 4;  // CUDA 0 on a Gen4 slot
  nvml.pairs = {{0, 1, 10}, {0, 2, 50}, {0, 3, 50}, {1, 2, 50}, {1, 3, 50}, {2, 3, 20}};
  auto cuda = cuda_devices(4);
  const TopologyFacts facts = topology_from_nvml(nvml, cuda);
  ASSERT_EQ(facts.links.size(), 6u) << facts.status;
  auto find = [&](int a, int b) {
    for (const GpuLink& l : facts.links) if (l.a == a && l.b == b) return l;
    ADD_FAILURE() << "no link " << a << "-" << b;
    return GpuLink{};
  };
  EXPECT_EQ(find(1, 3).path, "pcie-switch");       // NVML 0 (CUDA 3) and NVML 1 (CUDA 1)
  EXPECT_EQ(find(0, 2).path, "pcie-multi-switch"); // NVML 2 (CUDA 2) and NVML 3 (CUDA 0)
  EXPECT_EQ(find(0, 1).path, "cross-socket");
  EXPECT_EQ(find(0, 1).nvlinks, 0);
  EXPECT_NEAR(find(0, 1).spec_gbs, 31.504, 1e-9);  // the slower host link (Gen4 x16)
  EXPECT_NEAR(find(1, 2).spec_gbs, 63.008, 1e-9);
  EXPECT_EQ(cuda[0].pci_bus_id, "00000000:af:00.0");
}

TEST(GpuTopology, MissingNvmlAndUnmatchedDevicesAreSaid) {
  NvmlReadings none;
  none.status = "no NVML (libnvidia-ml.so.1 not found)";
  auto cuda = cuda_devices(2);
  const TopologyFacts facts = topology_from_nvml(none, cuda);
  EXPECT_EQ(facts.status, none.status);
  EXPECT_TRUE(facts.links.empty());
  EXPECT_EQ(cuda[0].pci_bus_id, "");

  NvmlReadings one;
  one.devices = {nvml_device(0, "00000000:18:00.0"), nvml_device(9, "00000000:19:00.0")};
  one.pairs = {{0, 1, -1}};
  auto two = cuda_devices(2);
  const TopologyFacts partial = topology_from_nvml(one, two);
  EXPECT_TRUE(partial.links.empty());
  EXPECT_NE(partial.status.find("CUDA devices 1 have no NVML device"), std::string::npos) << partial.status;

  NvmlReadings unread;
  unread.devices = {nvml_device(0, "00000000:18:00.0"), nvml_device(1, "00000000:19:00.0")};
  unread.pairs = {{0, 1, -1}};
  auto pair = cuda_devices(2);
  const TopologyFacts left_out = topology_from_nvml(unread, pair);
  EXPECT_TRUE(left_out.links.empty());
  EXPECT_NE(left_out.status.find("1 pairs left out"), std::string::npos) << left_out.status;

  auto single = cuda_devices(1);
  NvmlReadings alone;
  alone.devices = {nvml_device(0, "00000000:18:00.0")};
  EXPECT_NE(topology_from_nvml(alone, single).status.find("1 CUDA device: no pairs"), std::string::npos);
}

TEST(GpuTopology, ImplausiblePcieReadingIsNotedNotUsed) {
  NvmlReadings nvml;
  nvml.devices = {nvml_device(0, "00000000:18:00.0")};
  nvml.devices[0].max_pcie_generation = 9;
  auto cuda = cuda_devices(1);
  topology_from_nvml(nvml, cuda);
  EXPECT_EQ(cuda[0].pcie_generation, 0);
  EXPECT_EQ(cuda[0].host_link_gbs, 0);
  ASSERT_FALSE(cuda[0].notes.empty());
  EXPECT_NE(cuda[0].notes.back().find("not a known link"), std::string::npos);
}

TEST(GpuTopology, LocalityFromARecordedSysfsTree) {
  const auto root = std::filesystem::temp_directory_path() / ("coli-gpu-topology-" + std::to_string(::getpid()));
  const auto dir = root / "sys/bus/pci/devices/0000:1b:00.0";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "numa_node") << "1\n";
  std::ofstream(dir / "local_cpulist") << "64-127,192-255\n";
  auto cuda = cuda_devices(3);
  cuda[0].pci_bus_id = "00000000:1B:00.0";
  cuda[1].pci_bus_id = "00000000:43:00.0";  // not recorded
  read_pci_locality(SystemRoot(root), cuda);
  EXPECT_EQ(cuda[0].numa_node, 1);
  EXPECT_EQ(cuda[0].local_cpus.to_list(), "64-127,192-255");
  EXPECT_EQ(cuda[1].numa_node, -1);
  EXPECT_TRUE(cuda[1].local_cpus.empty());
  EXPECT_EQ(cuda[1].notes.size(), 2u);
  EXPECT_TRUE(cuda[2].notes.empty());  // no bus id: nothing looked up
  std::filesystem::remove_all(root);
}

TEST(GpuTopology, MissingNvmlLibraryIsAStatusNotACrash) {
  const char* old = std::getenv("COLI_NVML_LIBRARY");
  const std::optional<std::string> saved = old ? std::optional<std::string>(old) : std::nullopt;
  ::setenv("COLI_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  const NvmlReadings readings = read_nvml();
  if (saved) ::setenv("COLI_NVML_LIBRARY", saved->c_str(), 1); else ::unsetenv("COLI_NVML_LIBRARY");
  EXPECT_EQ(readings.status, "no NVML (/nonexistent/libnvidia-ml.so.1 not found)");
  EXPECT_TRUE(readings.devices.empty());
}

}  // namespace
}  // namespace coli::probe
