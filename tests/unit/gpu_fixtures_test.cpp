// The multi-GPU fixtures (written from public specifications: their SOURCE.md)
// replayed through the whole probe with their CPU machines, exactly as the
// curated profiles profiles/hgx-h200-8gpu.toml and h200-nvl-2gpu.toml were made,
// and read back: the topology survives, and each GPU's local CPUs are its NUMA node's.
#include <gtest/gtest.h>

#include <filesystem>

#include "coli/probe/probe.h"
#include "coli/probe/profile_io.h"

namespace coli {
namespace {

namespace fs = std::filesystem;

DeviceProfile replay(const char* machine, const char* gpus) {
  ProbeOptions options;
  options.quick = true;
  apply_replay_machine(fs::path(COLI_FIXTURES_DIR) / "machines" / machine, options);
  options.gpu_record = fs::path(COLI_FIXTURES_DIR) / "gpus" / gpus / "gpus.toml";
  auto profile = run_probe(options);
  EXPECT_TRUE(profile.ok()) << (profile.ok() ? "" : profile.error().message);
  if (!profile.ok()) return {};
  auto reread = parse_profile(profile_to_toml(*profile), "replayed.toml");  // validated like any file
  EXPECT_TRUE(reread.ok()) << (reread.ok() ? "" : reread.error().message);
  EXPECT_EQ(reread.ok() ? reread->gpus : GpuFacts{}, profile->gpus);
  return *profile;
}

CpuSet node_pus(const DeviceProfile& p, int node) {
  for (const NumaNode& n : p.cpu.numa_nodes) {
    if (n.os_index == node) return n.pus;
  }
  ADD_FAILURE() << "no NUMA node " << node;
  return {};
}

TEST(MultiGpuFixtures, HgxH200EightGpusOnNvswitchAcrossTwoSockets) {
  const DeviceProfile p = replay("amd-epyc-2s", "hgx-h200-8gpu");
  ASSERT_EQ(p.gpus.cuda.size(), 8u);
  ASSERT_EQ(p.gpus.links.size(), 28u);
  for (const CudaDevice& gpu : p.gpus.cuda) {
    EXPECT_EQ(gpu.numa_node, gpu.ordinal < 4 ? 0 : 1) << gpu.ordinal;
    EXPECT_EQ(gpu.local_cpus, node_pus(p, gpu.numa_node)) << gpu.ordinal;
    EXPECT_EQ(gpu.pcie_generation, 5);
    EXPECT_EQ(gpu.pcie_width, 16);
    EXPECT_NEAR(gpu.host_link_gbs, 63.008, 1e-9);
    EXPECT_EQ(gpu.total_memory_bytes, 150109880320ull);  // the captured H200 SXM's (139.8 GiB)
  }
  for (const GpuLink& link : p.gpus.links) {
    EXPECT_EQ(link.path, "nvlink");
    EXPECT_EQ(link.nvlinks, 18);
    EXPECT_DOUBLE_EQ(link.spec_gbs, 450);
    EXPECT_EQ(link.measured_gbs, 0);  // written from specifications: nothing measured
    EXPECT_TRUE(link.source.starts_with("spec:"));
  }
  EXPECT_NE(p.fingerprint_basis.find("cuda_numa=0,0,0,0,1,1,1,1,"), std::string::npos) << p.fingerprint_basis;
}

TEST(MultiGpuFixtures, H200NvlTwoGpusOnABridgeInOneSocket) {
  const DeviceProfile p = replay("h200-xeon-16c", "h200-nvl-2gpu");
  ASSERT_EQ(p.gpus.cuda.size(), 2u);
  ASSERT_EQ(p.gpus.links.size(), 1u);
  EXPECT_EQ(p.gpus.links[0].a, 0);
  EXPECT_EQ(p.gpus.links[0].b, 1);
  EXPECT_EQ(p.gpus.links[0].path, "nvlink");
  EXPECT_DOUBLE_EQ(p.gpus.links[0].spec_gbs, 450);
  for (const CudaDevice& gpu : p.gpus.cuda) {
    EXPECT_EQ(gpu.numa_node, 0);
    EXPECT_EQ(gpu.local_cpus.to_list(), "0-15");
    EXPECT_EQ(gpu.name, "NVIDIA H200 NVL");
  }
  EXPECT_TRUE(p.gpus.source.starts_with("replay:"));
}

// The GPU machine's own topology, captured there (tests/fixtures/gpus/nvidia-h200-topology/SOURCE.md):
// NVML's bus id and PCIe link, sysfs' unknown NUMA node (-1) and local CPUs 0-15, no pairs.
TEST(MultiGpuFixtures, CapturedH200TopologyReplaysAsRecorded) {
  const DeviceProfile p = replay("h200-xeon-16c", "nvidia-h200-topology");
  ASSERT_EQ(p.gpus.cuda.size(), 1u);
  const CudaDevice& gpu = p.gpus.cuda[0];
  EXPECT_EQ(gpu.pci_bus_id, "00000000:00:06.0");
  EXPECT_EQ(gpu.numa_node, -1);
  EXPECT_EQ(gpu.local_cpus.to_list(), "0-15");
  EXPECT_EQ(gpu.pcie_generation, 5);
  EXPECT_EQ(gpu.pcie_width, 16);
  EXPECT_TRUE(p.gpus.links.empty());
  EXPECT_NE(p.gpus.topology_status.find("no pairs"), std::string::npos) << p.gpus.topology_status;
  EXPECT_TRUE(p.gpus.source.starts_with("replay:")) << p.gpus.source;
}

// A GPU record of the 8-GPU host replayed on the 16-core machine names CPUs
// that are not there: refused, naming the record.
TEST(MultiGpuFixtures, AGpuRecordOfAnotherMachineIsRefused) {
  ProbeOptions options;
  options.quick = true;
  apply_replay_machine(fs::path(COLI_FIXTURES_DIR) / "machines" / "h200-xeon-16c", options);
  options.gpu_record = fs::path(COLI_FIXTURES_DIR) / "gpus" / "hgx-h200-8gpu" / "gpus.toml";
  auto profile = run_probe(options);
  ASSERT_FALSE(profile.ok());
  EXPECT_NE(profile.error().message.find("hgx-h200-8gpu/gpus.toml: local_cpus 0-63,128-191 of CUDA device 0 are not all"),
            std::string::npos) << profile.error().message;
}

}  // namespace
}  // namespace coli
