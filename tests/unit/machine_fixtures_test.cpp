// Every recorded machine in tests/fixtures/machines, replayed through the
// whole probe exactly as `coli-probe --replay-machine DIR --quick` does, with
// its tiers, memory headroom and thread recommendation asserted. Each
// fixture's SOURCE.md says where it came from.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "coli/probe/probe.h"
#include "coli/probe/profile_io.h"
#include "memory/memory_facts.h"
#include "test_support.h"

namespace coli {
namespace {

namespace fs = std::filesystem;
constexpr std::uint64_t kKiB = 1024;
constexpr std::uint64_t kGiB = 1ull << 30;

struct MachineCase {
  const char* name;
  std::vector<int> cores_per_kind;  // rank 0 (efficiency) first
  int pus;
  int numa_nodes;
  int decode_threads;
  const char* decode_pus;
  const char* rule;
  std::uint64_t headroom_bytes;
  const char* headroom_source_prefix;
};

void PrintTo(const MachineCase& machine, std::ostream* out) { *out << machine.name; }

// Headroom figures come from each fixture's own files: MemAvailable in
// root/proc/meminfo (kB), or the cgroup's max - current + inactive_file.
const MachineCase kMachines[] = {
    {"apple-m-3tier", {6, 4, 2}, 12, 1, 6, "6-11", "all-but-efficiency-kind", 32 * kGiB, "available"},
    {"apple-m4-pro", {4, 10}, 14, 1, 10, "4-13", "all-but-efficiency-kind", 24 * kGiB, "available"},
    {"intel-i9-13900k", {16, 8}, 32, 1, 8, "0,2,4,6,8,10,12,14", "all-but-efficiency-kind", 30104872 * kKiB,
     "MemAvailable"},
    {"intel-core-ultra-7-265k", {12, 8}, 20, 1, 8, "0-7", "all-but-efficiency-kind", 61990112 * kKiB, "MemAvailable"},
    {"rockchip-rk3588", {4, 4}, 8, 1, 4, "4-7", "all-but-efficiency-kind", 15402116 * kKiB, "MemAvailable"},
    {"amd-epyc-2s", {128}, 256, 2, 128, "0-127", "single-kind-physical-cores", 521917084 * kKiB, "MemAvailable"},
    {"h200-xeon-16c", {16}, 16, 1, 16, "0-15", "single-kind-physical-cores", 131292440 * kKiB, "MemAvailable"},
    {"dev-vm-2core", {2}, 2, 1, 2, "0-1", "single-kind-physical-cores", 24349340 * kKiB, "MemAvailable"},
    {"container-cgroup-8g", {8}, 8, 1, 8, "0-7", "single-kind-physical-cores", 8 * kGiB - 1536 * kGiB / 1024 + kGiB / 2,
     "cgroup"},
};

ProbeOptions replay_options(const fs::path& dir) {
  ProbeOptions options;
  options.quick = true;
  apply_replay_machine(dir, options);
  return options;
}

class MachineFixture : public testing::TestWithParam<MachineCase> {};

TEST_P(MachineFixture, ReplaysTiersHeadroomAndThreads) {
  const MachineCase& expected = GetParam();
  const fs::path dir = fs::path(COLI_FIXTURES_DIR) / "machines" / expected.name;
  ASSERT_TRUE(fs::exists(dir / "SOURCE.md")) << "every fixture names its source: " << dir;

  auto profile = run_probe(replay_options(dir));
  ASSERT_TRUE(profile.ok()) << profile.error().message;
  const CpuFacts& cpu = profile->cpu;

  std::vector<int> cores_per_kind;
  for (const CpuKind& kind : cpu.kinds) cores_per_kind.push_back(kind.cores);
  EXPECT_EQ(cores_per_kind, expected.cores_per_kind);
  EXPECT_EQ(cpu.pus, expected.pus);
  EXPECT_EQ(static_cast<int>(cpu.numa_nodes.size()), expected.numa_nodes);

  EXPECT_EQ(profile->memory.headroom_bytes, expected.headroom_bytes);
  EXPECT_EQ(profile->memory.headroom_source.rfind(expected.headroom_source_prefix, 0), 0u)
      << profile->memory.headroom_source;

  EXPECT_EQ(profile->threads.decode_threads, expected.decode_threads) << profile->threads.reason;
  EXPECT_EQ(profile->threads.decode_pus.to_list(), expected.decode_pus);
  EXPECT_EQ(profile->threads.rule, expected.rule);

  // Replays never measure (that would time this machine) and say so.
  EXPECT_EQ(profile->provenance.mode, "quick");
  EXPECT_FALSE(profile->measurements.memory.has_value());

  // What the probe writes, the profile reader accepts unchanged.
  auto reread = parse_profile(profile_to_toml(*profile), expected.name);
  ASSERT_TRUE(reread.ok()) << reread.error().message;
  EXPECT_EQ(*reread, *profile);
}

INSTANTIATE_TEST_SUITE_P(AllRecordedMachines, MachineFixture, testing::ValuesIn(kMachines),
                         [](const testing::TestParamInfo<MachineCase>& param) {
                           std::string name = param.param.name;
                           for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

TEST(MachineFixtures, EveryFixtureDirectoryIsCovered) {
  std::set<std::string> tested;
  for (const MachineCase& machine : kMachines) tested.insert(machine.name);
  for (const auto& entry : fs::directory_iterator(fs::path(COLI_FIXTURES_DIR) / "machines")) {
    EXPECT_TRUE(tested.count(entry.path().filename().string())) << "untested fixture " << entry.path();
  }
}

TEST(MachineFixtures, FingerprintsTellMachinesApart) {
  std::set<std::string> fingerprints;
  for (const MachineCase& machine : kMachines) {
    auto profile = run_probe(replay_options(fs::path(COLI_FIXTURES_DIR) / "machines" / machine.name));
    ASSERT_TRUE(profile.ok()) << profile.error().message;
    fingerprints.insert(profile->fingerprint);
  }
  EXPECT_EQ(fingerprints.size(), std::size(kMachines));
}

// Issue 12: a replay reads only recorded sources. The 2-socket EPYC (256 PUs,
// 128 cores, 504 GiB over two NUMA nodes) differs from any machine the tests
// run on, so a live fact mixed into its replay shows.
const fs::path kEpyc = fs::path(COLI_FIXTURES_DIR) / "machines" / "amd-epyc-2s";
constexpr std::uint64_t kEpycNumaTotal = 270193930240ull + 270579572736ull;  // local_memory in topology.xml

// This process's scratch directory, removed when it exits (ctest runs each
// test in a process of its own: nothing is left in the temporary directory).
const fs::path& scratch_root() {
  static const testing_support::TempDir root("coli_replay");
  return root.path();
}

// A copy of the EPYC recording with only `files` (relative paths) in it.
fs::path partial_recording(const std::string& name, const std::vector<std::string>& files) {
  const fs::path dir = scratch_root() / name;
  fs::remove_all(dir);
  for (const std::string& file : files) {
    fs::create_directories((dir / file).parent_path());
    fs::copy_file(kEpyc / file, dir / file);
  }
  return dir;
}

bool has_source(const DeviceProfile& profile, const std::string& text) {
  for (const std::string& source : profile.provenance.sources) {
    if (source.find(text) != std::string::npos) return true;
  }
  return false;
}

// Nothing of this machine: every PU of the topology (no live affinity or
// cpuset), no ISA (no live cpuinfo), memory from the topology (no live meminfo).
void expect_only_the_topology(const DeviceProfile& profile) {
  EXPECT_EQ(profile.cpu.usable.pus.size(), 256);
  EXPECT_EQ(profile.cpu.usable.affinity.size(), 256);
  EXPECT_FALSE(profile.cpu.usable.cgroup_cpuset.has_value());
  EXPECT_FALSE(profile.cpu.usable.quota_cpus.has_value());
  EXPECT_EQ(profile.threads.decode_threads, 128) << profile.threads.reason;
  EXPECT_TRUE(profile.cpu.isa.empty());
  EXPECT_NE(profile.cpu.isa_source.find("not recorded"), std::string::npos) << profile.cpu.isa_source;
  EXPECT_EQ(profile.memory.total_bytes, kEpycNumaTotal);
  EXPECT_EQ(profile.memory.headroom_bytes, kEpycNumaTotal);
  EXPECT_FALSE(profile.memory.cgroup_limit_bytes.has_value());
  EXPECT_TRUE(has_source(profile, "procfs+sysfs:not recorded"));
  auto live = probe::read_memory_facts(SystemRoot(), std::nullopt);
  ASSERT_TRUE(live.ok()) << live.error().message;
  EXPECT_NE(profile.memory.total_bytes, live->total_bytes) << "the replay took this machine's MemTotal";
}

TEST(HermeticReplay, MachineDirectoryWithTopologyAloneTakesNothingLive) {
  const fs::path dir = partial_recording("topology-only", {"topology.xml"});
  auto profile = run_probe(replay_options(dir));
  ASSERT_TRUE(profile.ok()) << profile.error().message;
  expect_only_the_topology(*profile);
  EXPECT_TRUE(has_source(*profile, "not recorded: " + (dir / "root/proc/cpuinfo").string()));
  EXPECT_TRUE(has_source(*profile, "not recorded: " + (dir / "root/proc/self/status").string()));
  EXPECT_TRUE(has_source(*profile, "not recorded: " + (dir / "root/proc/meminfo").string()));
}

TEST(HermeticReplay, HwlocXmlAloneTakesNothingLive) {
  ProbeOptions options;
  options.quick = true;
  options.hwloc_xml = kEpyc / "topology.xml";
  auto profile = run_probe(options);
  ASSERT_TRUE(profile.ok()) << profile.error().message;
  expect_only_the_topology(*profile);
}

TEST(HermeticReplay, PartlyRecordedRootKeepsWhatWasRecordedAndMarksTheRest) {
  const fs::path dir = partial_recording("meminfo-only", {"topology.xml", "root/proc/meminfo"});
  auto profile = run_probe(replay_options(dir));
  ASSERT_TRUE(profile.ok()) << profile.error().message;
  EXPECT_EQ(profile->memory.headroom_bytes, 521917084 * kKiB);  // MemAvailable of the recording
  EXPECT_EQ(profile->memory.headroom_source, "MemAvailable");
  EXPECT_EQ(profile->cpu.usable.pus.size(), 256);
  EXPECT_TRUE(profile->cpu.isa.empty());
  EXPECT_TRUE(has_source(*profile, "not recorded: " + (dir / "root/proc/cpuinfo").string()));
  EXPECT_FALSE(has_source(*profile, "not recorded: " + (dir / "root/proc/meminfo").string()));
}

TEST(HermeticReplay, TopologyWithoutMemoryIsRefusedNamingMeminfo) {
  const fs::path dir = partial_recording("no-memory", {});
  fs::create_directories(dir);
  std::ifstream in(kEpyc / "topology.xml");
  std::stringstream xml;
  xml << in.rdbuf();
  std::ofstream(dir / "topology.xml") << std::regex_replace(xml.str(), std::regex(" local_memory=\"[0-9]+\""), "");
  auto profile = run_probe(replay_options(dir));
  ASSERT_FALSE(profile.ok());
  EXPECT_NE(profile.error().message.find((dir / "root/proc/meminfo").string()), std::string::npos)
      << profile.error().message;
}

TEST(HermeticReplay, RecordedRootWithoutTopologyIsRefused) {
  ProbeOptions options;
  options.quick = true;
  options.root = SystemRoot(kEpyc / "root");
  auto profile = run_probe(options);
  ASSERT_FALSE(profile.ok()) << "this machine's topology was mixed with a recorded /proc";
  EXPECT_NE(profile.error().message.find("topology"), std::string::npos) << profile.error().message;

  const fs::path dir = partial_recording("root-only", {"root/proc/meminfo"});
  profile = run_probe(replay_options(dir));
  ASSERT_FALSE(profile.ok());
  EXPECT_NE(profile.error().message.find(dir.string()), std::string::npos) << profile.error().message;
}

TEST(HermeticReplay, GpuRecordAloneIsRefused) {
  ProbeOptions options;
  options.quick = true;
  options.gpu_record = fs::path(COLI_FIXTURES_DIR) / "gpus" / "nvidia-h200" / "gpus.toml";
  auto profile = run_probe(options);
  ASSERT_FALSE(profile.ok()) << "this machine's CPU was mixed with recorded GPUs";
  EXPECT_NE(profile.error().message.find("gpus.toml"), std::string::npos) << profile.error().message;
}

}  // namespace
}  // namespace coli
