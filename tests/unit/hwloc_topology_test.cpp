// read_hwloc_topology against the machine fixtures (spec-built and captured
// hwloc XML), its errors on broken files, and the live machine.
#include "cpu/hwloc_topology.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace coli::probe {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t KiB = 1024;
constexpr std::uint64_t MiB = 1024 * KiB;
constexpr std::uint64_t GiB = 1024 * MiB;

fs::path fixture_xml(const std::string& machine) {
  return fs::path(COLI_FIXTURES_DIR) / "machines" / machine / "topology.xml";
}

CpuFacts load(const std::string& machine) {
  auto facts = read_hwloc_topology(fixture_xml(machine));
  EXPECT_TRUE(facts.ok()) << (facts.ok() ? "" : facts.error().message);
  return facts.ok() ? facts.value() : CpuFacts{};
}

// The unified/data cache of `level` seen from cores of kind `rank`; nullopt when absent.
std::optional<CacheInfo> cache_of(const CpuFacts& facts, int rank, int level, const std::string& type) {
  for (const auto& cache : facts.caches) {
    if (cache.kind_rank == rank && cache.level == level && cache.type == type) return cache;
  }
  return std::nullopt;
}

CpuSet range(int first, int last) {
  std::vector<int> cpus;
  for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  return CpuSet(cpus);
}

// Sets an environment variable for one test and restores the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(HwlocTopology, I9_13900kHasEightSmtPCoresAndSixteenECores) {
  const CpuFacts facts = load("intel-i9-13900k");
  EXPECT_EQ(facts.arch, "x86_64");
  EXPECT_EQ(facts.vendor, "GenuineIntel");
  EXPECT_EQ(facts.model, "13th Gen Intel(R) Core(TM) i9-13900K");
  EXPECT_EQ(facts.packages, 1);
  EXPECT_EQ(facts.cores, 24);
  EXPECT_EQ(facts.pus, 32);
  EXPECT_TRUE(facts.smt());
  ASSERT_EQ(facts.kinds.size(), 2u);
  const CpuKind& e = facts.kinds[0];
  const CpuKind& p = facts.kinds[1];
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.core_type, "IntelAtom");
  EXPECT_EQ(e.hwloc_efficiency, 0);
  EXPECT_EQ(e.cores, 16);
  EXPECT_EQ(e.pus, range(16, 31));
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.core_type, "IntelCore");
  EXPECT_EQ(p.cores, 8);
  EXPECT_EQ(p.pus, range(0, 15));
  EXPECT_EQ(p.frequency_max_mhz, 5800);

  const auto e_l2 = cache_of(facts, 0, 2, "unified");
  const auto p_l2 = cache_of(facts, 1, 2, "unified");
  ASSERT_TRUE(e_l2 && p_l2);
  EXPECT_EQ(e_l2->size_bytes, 4 * MiB);
  EXPECT_EQ(e_l2->cores_sharing, 4);
  EXPECT_EQ(e_l2->instances, 4);
  EXPECT_EQ(p_l2->size_bytes, 2 * MiB);
  EXPECT_EQ(p_l2->cores_sharing, 1);
  EXPECT_EQ(p_l2->instances, 8);
  EXPECT_EQ(cache_of(facts, 0, 1, "data")->size_bytes, 32 * KiB);
  EXPECT_EQ(cache_of(facts, 1, 1, "data")->size_bytes, 48 * KiB);
  ASSERT_TRUE(cache_of(facts, 0, 1, "instruction"));  // hwloc hides these unless asked
  EXPECT_EQ(cache_of(facts, 0, 1, "instruction")->size_bytes, 64 * KiB);
  EXPECT_EQ(cache_of(facts, 1, 1, "data")->line_bytes, 64);
  for (int rank : {0, 1}) {
    const auto l3 = cache_of(facts, rank, 3, "unified");
    ASSERT_TRUE(l3);
    EXPECT_EQ(l3->size_bytes, 36 * MiB);
    EXPECT_EQ(l3->cores_sharing, 24);
    EXPECT_EQ(l3->instances, 1);
  }
  ASSERT_EQ(facts.numa_nodes.size(), 1u);
  EXPECT_EQ(facts.numa_nodes[0].pus, range(0, 31));
  EXPECT_GT(facts.numa_nodes[0].memory_bytes, 31 * GiB);
  EXPECT_LE(facts.numa_nodes[0].memory_bytes, 32 * GiB);
  EXPECT_EQ(facts.topology_source, "hwloc-xml:" + fixture_xml("intel-i9-13900k").string());
}

TEST(HwlocTopology, CoreUltra7_265kHasNoSmtAndTwoKinds) {
  const CpuFacts facts = load("intel-core-ultra-7-265k");
  EXPECT_EQ(facts.packages, 1);
  EXPECT_EQ(facts.cores, 20);
  EXPECT_EQ(facts.pus, 20);
  EXPECT_FALSE(facts.smt());
  ASSERT_EQ(facts.kinds.size(), 2u);
  EXPECT_EQ(facts.kinds[0].core_type, "IntelAtom");
  EXPECT_EQ(facts.kinds[0].cores, 12);
  EXPECT_EQ(facts.kinds[0].pus, range(8, 19));
  EXPECT_EQ(facts.kinds[1].core_type, "IntelCore");
  EXPECT_EQ(facts.kinds[1].cores, 8);
  EXPECT_EQ(facts.kinds[1].pus, range(0, 7));
  EXPECT_EQ(cache_of(facts, 1, 2, "unified")->size_bytes, 3 * MiB);
  EXPECT_EQ(cache_of(facts, 0, 2, "unified")->size_bytes, 4 * MiB);
  EXPECT_EQ(cache_of(facts, 0, 2, "unified")->instances, 3);
  EXPECT_EQ(cache_of(facts, 1, 3, "unified")->size_bytes, 30 * MiB);
  EXPECT_EQ(facts.numa_nodes.size(), 1u);
}

// With hwloc's ranking switched off every efficiency is -1 and the kinds come
// in file order (P first); our own ranking must still put E below P (here
// frequency and core count agree; the RK3588 test isolates capacity).
TEST(HwlocTopology, RanksKindsItselfWhenHwlocEfficiencyIsUnknown) {
  ScopedEnv no_ranking("HWLOC_CPUKINDS_RANKING", "none");
  const CpuFacts facts = load("intel-core-ultra-7-265k");
  ASSERT_EQ(facts.kinds.size(), 2u);
  EXPECT_EQ(facts.kinds[0].hwloc_efficiency, -1);
  EXPECT_EQ(facts.kinds[0].core_type, "IntelAtom");
  EXPECT_EQ(facts.kinds[0].frequency_max_mhz, 4600);
  EXPECT_EQ(facts.kinds[1].core_type, "IntelCore");
  EXPECT_EQ(facts.kinds[1].rank, 1);
}

TEST(HwlocTopology, Rk3588RanksA76AboveA55FromCapacityAlone) {
  const CpuFacts facts = load("rockchip-rk3588");
  EXPECT_EQ(facts.arch, "aarch64");
  EXPECT_EQ(facts.vendor, "ARM");
  EXPECT_EQ(facts.cores, 8);
  EXPECT_EQ(facts.pus, 8);
  EXPECT_FALSE(facts.smt());
  ASSERT_EQ(facts.kinds.size(), 2u);
  const CpuKind& a55 = facts.kinds[0];
  const CpuKind& a76 = facts.kinds[1];
  EXPECT_EQ(a55.hwloc_efficiency, -1);  // the fixture gives hwloc nothing to rank with
  EXPECT_EQ(a55.pus, range(0, 3));
  EXPECT_EQ(a55.linux_capacity, 530);
  EXPECT_EQ(a55.cores, 4);
  EXPECT_EQ(a76.rank, 1);
  EXPECT_EQ(a76.pus, range(4, 7));
  EXPECT_EQ(a76.linux_capacity, 1024);
  EXPECT_EQ(cache_of(facts, 0, 2, "unified")->size_bytes, 128 * KiB);
  EXPECT_EQ(cache_of(facts, 1, 2, "unified")->size_bytes, 512 * KiB);
  EXPECT_EQ(cache_of(facts, 1, 1, "data")->size_bytes, 64 * KiB);
  const auto l3 = cache_of(facts, 1, 3, "unified");
  ASSERT_TRUE(l3);
  EXPECT_EQ(l3->size_bytes, 3 * MiB);
  EXPECT_EQ(l3->cores_sharing, 8);
  EXPECT_EQ(facts.numa_nodes.size(), 1u);
}

TEST(HwlocTopology, EpycTwoSocketWithoutCpuKindsIsOneKind) {
  const CpuFacts facts = load("amd-epyc-2s");
  EXPECT_EQ(facts.vendor, "AuthenticAMD");
  EXPECT_EQ(facts.packages, 2);
  EXPECT_EQ(facts.cores, 128);
  EXPECT_EQ(facts.pus, 256);
  EXPECT_TRUE(facts.smt());
  ASSERT_EQ(facts.kinds.size(), 1u);  // the XML has no <cpukind>
  EXPECT_EQ(facts.kinds[0].rank, 0);
  EXPECT_EQ(facts.kinds[0].cores, 128);
  EXPECT_EQ(facts.kinds[0].pus, range(0, 255));
  const auto l2 = cache_of(facts, 0, 2, "unified");
  const auto l3 = cache_of(facts, 0, 3, "unified");
  ASSERT_TRUE(l2 && l3);
  EXPECT_EQ(l2->size_bytes, 512 * KiB);
  EXPECT_EQ(l2->instances, 128);
  EXPECT_EQ(l3->size_bytes, 32 * MiB);
  EXPECT_EQ(l3->cores_sharing, 8);
  EXPECT_EQ(l3->instances, 16);
  ASSERT_EQ(facts.numa_nodes.size(), 2u);
  // Linux numbers SMT siblings in the upper half: node 0 is 0-63 and 128-191.
  EXPECT_EQ(facts.numa_nodes[0].pus, range(0, 63).unite(range(128, 191)));
  EXPECT_EQ(facts.numa_nodes[1].os_index, 1);
  for (const auto& node : facts.numa_nodes) {
    EXPECT_GT(node.memory_bytes, 250 * GiB);
    EXPECT_LE(node.memory_bytes, 256 * GiB);
  }
}

TEST(HwlocTopology, CapturedDevVmHasTwoCoresOneKind) {
  const CpuFacts facts = load("dev-vm-2core");
  EXPECT_EQ(facts.arch, "x86_64");
  EXPECT_EQ(facts.packages, 1);
  EXPECT_EQ(facts.cores, 2);
  EXPECT_EQ(facts.pus, 2);
  EXPECT_FALSE(facts.smt());
  ASSERT_EQ(facts.kinds.size(), 1u);
  EXPECT_EQ(facts.kinds[0].linux_capacity, 1024);
  EXPECT_EQ(facts.kinds[0].pus, range(0, 1));
  EXPECT_TRUE(cache_of(facts, 0, 2, "unified").has_value());
  EXPECT_EQ(facts.numa_nodes.size(), 1u);
}

// ---------------------------------------------------------------- errors

class HwlocTopologyErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("coli_hwloc_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& content) {
    const fs::path path = dir_ / name;
    std::ofstream(path) << content;
    return path;
  }

  static void expect_error_naming(const fs::path& path) {
    auto facts = read_hwloc_topology(path);
    ASSERT_FALSE(facts.ok());
    EXPECT_NE(facts.error().message.find(path.string()), std::string::npos) << facts.error().message;
    EXPECT_NE(facts.error().message.find("lstopo"), std::string::npos) << facts.error().message;
  }

  fs::path dir_;
};

TEST_F(HwlocTopologyErrors, MissingFileNamesThePath) {
  const fs::path missing = dir_ / "no-such-topology.xml";
  expect_error_naming(missing);
  EXPECT_NE(read_hwloc_topology(missing).error().message.find("does not exist"), std::string::npos);
}

TEST_F(HwlocTopologyErrors, GarbageFileNamesThePath) {
  expect_error_naming(write("garbage.xml", "this is not XML at all\n\x01\x02"));
}

TEST_F(HwlocTopologyErrors, TruncatedXmlNamesThePath) {
  std::ifstream in(fixture_xml("intel-i9-13900k"));
  const std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(whole.size(), 1000u);
  expect_error_naming(write("truncated.xml", whole.substr(0, whole.size() / 2)));
}

TEST_F(HwlocTopologyErrors, DirectoryInsteadOfFileNamesThePath) { expect_error_naming(dir_); }

// The cpuid brand string is padded with spaces on some hosts (the 2-core
// VM's hwloc read "Oxide Virtual Turin-like Processor" and 13 spaces after
// a live migration): the model is the text without them, so the class of a
// machine does not hang on padding.
TEST_F(HwlocTopologyErrors, PaddedCpuModelIsTrimmed) {
  std::ifstream in(fixture_xml("intel-i9-13900k"));
  std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string model = "13th Gen Intel(R) Core(TM) i9-13900K";
  const std::size_t at = whole.find(model + "\"");
  ASSERT_NE(at, std::string::npos);
  whole.insert(at + model.size(), "             ");
  auto facts = read_hwloc_topology(write("padded.xml", whole));
  ASSERT_TRUE(facts.ok()) << facts.error().message;
  EXPECT_EQ(facts->model, model);
}

TEST(HwlocTopologyLive, LiveMachineHasCoresAndPus) {
  auto facts = read_hwloc_topology(std::nullopt);
  ASSERT_TRUE(facts.ok()) << facts.error().message;
  EXPECT_GE(facts->cores, 1);
  EXPECT_GE(facts->pus, facts->cores);
  EXPECT_GE(facts->packages, 1);
  ASSERT_FALSE(facts->kinds.empty());
  int pus_in_kinds = 0;
  for (const auto& kind : facts->kinds) pus_in_kinds += kind.pus.size();
  EXPECT_EQ(pus_in_kinds, facts->pus);  // every PU belongs to exactly one kind
  EXPECT_FALSE(facts->arch.empty());
}

}  // namespace
}  // namespace coli::probe
