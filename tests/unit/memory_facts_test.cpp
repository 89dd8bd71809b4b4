// Memory facts: the headroom must follow the tightest believed limit (cgroup
// or MemAvailable), and every odd reading must be recorded, not trusted.
#include "memory/memory_facts.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace coli::probe {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

SystemRoot fixture(const std::string& relative) { return SystemRoot(fs::path(COLI_FIXTURES_DIR) / relative); }

const MemorySource* find_source(const MemoryFacts& facts, std::string_view name) {
  for (const MemorySource& source : facts.sources) {
    if (source.name == name) return &source;
  }
  return nullptr;
}

const MemorySource& source_named(const MemoryFacts& facts, std::string_view name) {
  const MemorySource* source = find_source(facts, name);
  if (!source) throw std::runtime_error("no source named " + std::string(name));
  return *source;
}

MemoryFacts read_ok(const SystemRoot& root, std::optional<std::uint64_t> numa = std::nullopt) {
  auto facts = read_memory_facts(root, numa);
  if (!facts) throw std::runtime_error(facts.error().message);
  return std::move(facts).value();
}

// A throwaway system root for readings too odd to keep as fixtures.
class TempRoot {
 public:
  TempRoot() : path_(fs::temp_directory_path() / ("coli-memory-" + std::to_string(std::random_device{}()))) {
    fs::create_directories(path_);
  }
  ~TempRoot() { fs::remove_all(path_); }
  TempRoot(const TempRoot&) = delete;
  TempRoot& operator=(const TempRoot&) = delete;

  TempRoot& write(const std::string& absolute, const std::string& text) {
    const fs::path file = path_ / absolute.substr(1);
    fs::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << text;
    return *this;
  }
  SystemRoot root() const { return SystemRoot(path_); }

 private:
  fs::path path_;
};

// MemTotal 32 GiB, MemAvailable 30 GiB, in a v2 container whose files the
// test fills in.
TempRoot& v2_container(TempRoot& tree, const std::string& max, const std::string& current) {
  tree.write("/proc/meminfo", "MemTotal: 33554432 kB\nMemFree: 20000000 kB\nMemAvailable: 31457280 kB\n")
      .write("/proc/self/cgroup", "0::/\n")
      .write("/proc/self/mountinfo", "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
      .write("/sys/fs/cgroup/cgroup.controllers", "cpu io memory pids\n")
      .write("/sys/fs/cgroup/memory.max", max)
      .write("/sys/fs/cgroup/memory.current", current)
      .write("/sys/fs/cgroup/memory.stat", "anon 1073741824\nfile 0\ninactive_file 0\n");
  return tree;
}

// ------------------------------------------------------------ fixtures

TEST(MemoryFacts, ContainerHeadroomIsTheCgroupsNotMemAvailable) {
  const MemoryFacts facts = read_ok(fixture("machines/container-cgroup-8g/root"));
  EXPECT_EQ(facts.total_bytes, 25522008 * std::uint64_t{1024});
  EXPECT_EQ(facts.available_bytes, 23 * kGiB);
  EXPECT_EQ(facts.cgroup_limit_bytes, 8 * kGiB);
  EXPECT_EQ(facts.cgroup_usage_bytes, 1610612736u);
  EXPECT_EQ(facts.cgroup_reclaimable_bytes, 512 * kMiB);
  EXPECT_EQ(facts.headroom_bytes, 8 * kGiB - 1610612736 + 512 * kMiB);
  EXPECT_EQ(facts.headroom_source, "cgroup v2 memory.max headroom");
  EXPECT_EQ(source_named(facts, "cgroup v2 memory.max headroom").origin, "/sys/fs/cgroup");
  EXPECT_TRUE(source_named(facts, "MemAvailable").believed);  // true for the host, just not ours to use
}

TEST(MemoryFacts, TighterParentGroupSetsTheHeadroom) {
  const MemoryFacts facts = read_ok(fixture("cgroups/memory-v2-parent-tighter"));
  EXPECT_EQ(facts.cgroup_limit_bytes, 4 * kGiB);
  EXPECT_EQ(facts.cgroup_usage_bytes, 3 * kGiB);
  EXPECT_EQ(facts.cgroup_reclaimable_bytes, 256 * kMiB);
  EXPECT_EQ(facts.headroom_bytes, kGiB + 256 * kMiB);
  EXPECT_EQ(source_named(facts, facts.headroom_source).origin, "/sys/fs/cgroup/workload.slice");
}

TEST(MemoryFacts, MemoryHighIsPlannedAgainstAndPageCacheCountsAsFree) {
  const MemoryFacts facts = read_ok(fixture("cgroups/memory-v2-high-page-cache"));
  EXPECT_EQ(facts.headroom_source, "cgroup v2 memory.high headroom");
  EXPECT_EQ(facts.cgroup_limit_bytes, 12 * kGiB);
  EXPECT_EQ(facts.headroom_bytes, 12 * kGiB - 11 * kGiB + 6 * kGiB);
}

TEST(MemoryFacts, V1HierarchicalLimitFromAnInvisibleAncestor) {
  const MemoryFacts facts = read_ok(fixture("cgroups/memory-v1-hierarchical"));
  EXPECT_EQ(facts.headroom_source, "cgroup v1 hierarchical_memory_limit headroom");
  EXPECT_EQ(facts.cgroup_limit_bytes, 2 * kGiB);
  EXPECT_EQ(facts.headroom_bytes, 2 * kGiB - kGiB + 100 * kMiB);
}

TEST(MemoryFacts, UnlimitedCgroupLeavesMemAvailable) {
  const MemoryFacts facts = read_ok(fixture("cgroups/memory-v1-unlimited"));
  EXPECT_EQ(facts.headroom_source, "MemAvailable");
  EXPECT_EQ(facts.headroom_bytes, facts.available_bytes);
  EXPECT_EQ(facts.available_bytes, 24359936 * std::uint64_t{1024});
  EXPECT_FALSE(facts.cgroup_limit_bytes.has_value());
  const MemorySource& cgroup = source_named(facts, "cgroup v1 memory limit");
  EXPECT_NE(cgroup.note.find("no memory limit"), std::string::npos) << cgroup.note;
  EXPECT_NE(cgroup.note.find("2 visible ancestor"), std::string::npos) << cgroup.note;
}

TEST(MemoryFacts, CapturedDevVmIfPresent) {
  const fs::path root = fs::path(COLI_FIXTURES_DIR) / "machines/dev-vm-2core/root";
  if (!fs::exists(root / "proc/meminfo")) GTEST_SKIP() << "dev-vm-2core not captured yet";
  const MemoryFacts facts = read_ok(SystemRoot(root));
  EXPECT_EQ(facts.headroom_source, "MemAvailable");  // the VM's memory cgroup is unlimited
  EXPECT_FALSE(facts.cgroup_limit_bytes.has_value());
}

TEST(MemoryFacts, HwlocNumaTotalFarFromMemTotalIsNotBelieved) {
  const SystemRoot root = fixture("machines/container-cgroup-8g/root");
  const MemoryFacts vm_like = read_ok(root, std::uint64_t{4570} * kMiB);
  const MemorySource& numa = source_named(vm_like, "hwloc NUMA total");
  EXPECT_FALSE(numa.believed);
  EXPECT_NE(numa.note.find("under-reports"), std::string::npos) << numa.note;
  EXPECT_EQ(vm_like.total_bytes, 25522008 * std::uint64_t{1024});  // MemTotal stands

  const MemoryFacts agreeing = read_ok(root, vm_like.total_bytes / 100 * 97);
  EXPECT_TRUE(source_named(agreeing, "hwloc NUMA total").believed);
  EXPECT_EQ(agreeing.headroom_bytes, vm_like.headroom_bytes);
}

TEST(MemoryFacts, SwapIsRecordedButNeverHeadroom) {
  TempRoot tree;
  tree.write("/proc/meminfo",
             "MemTotal: 8388608 kB\nMemAvailable: 1048576 kB\nSwapTotal: 67108864 kB\nSwapFree: 67108864 kB\n");
  const MemoryFacts facts = read_ok(tree.root());
  EXPECT_EQ(facts.swap_free_bytes, 64 * kGiB);
  EXPECT_EQ(facts.headroom_bytes, kGiB);
  EXPECT_NE(source_named(facts, "SwapFree").note.find("never counted"), std::string::npos);
}

TEST(MemoryFacts, OldKernelWithoutMemAvailableIsEstimatedAndSaysSo) {
  TempRoot tree;
  tree.write("/proc/meminfo",
             "MemTotal: 4194304 kB\nMemFree: 1048576 kB\nBuffers: 102400 kB\nCached: 1048576 kB\nShmem: 51200 kB\n");
  const MemoryFacts facts = read_ok(tree.root());
  EXPECT_EQ(facts.headroom_source, "MemAvailable estimate");
  EXPECT_EQ(facts.available_bytes, (1048576u + 102400 + 1048576 - 51200) * std::uint64_t{1024});
  EXPECT_NE(source_named(facts, "MemAvailable estimate").note.find("estimated"), std::string::npos);
}

// ------------------------------------------------------------ bad input

TEST(MemoryFacts, MissingMeminfoIsAnErrorNamingThePath) {
  TempRoot tree;
  const auto facts = read_memory_facts(tree.root(), std::nullopt);
  ASSERT_FALSE(facts.ok());
  EXPECT_NE(facts.error().message.find((tree.root().prefix() / "proc/meminfo").string()), std::string::npos)
      << facts.error().message;
}

TEST(MemoryFacts, MeminfoWithoutATotalIsAnError) {
  const std::vector<std::string> broken = {"MemTotal: lots kB\nMemAvailable: 1 kB\n",
                                           std::string("\0\xff\x01:::\n", 7), ""};
  for (const std::string& text : broken) {
    TempRoot tree;
    tree.write("/proc/meminfo", text);
    const auto facts = read_memory_facts(tree.root(), std::nullopt);
    ASSERT_FALSE(facts.ok());
    EXPECT_NE(facts.error().message.find("MemTotal"), std::string::npos) << facts.error().message;
  }
}

TEST(MemoryFacts, MemAvailableAboveMemTotalIsNotBelieved) {
  TempRoot tree;
  tree.write("/proc/meminfo", "MemTotal: 1048576 kB\nMemAvailable: 2097152 kB\n");
  const MemoryFacts facts = read_ok(tree.root());
  const MemorySource& available = source_named(facts, "MemAvailable");
  EXPECT_FALSE(available.believed);
  EXPECT_NE(available.note.find("larger than MemTotal"), std::string::npos);
  EXPECT_EQ(facts.headroom_bytes, 0u);  // nothing believable: the planner gets nothing, not a guess
  EXPECT_EQ(facts.headroom_source, "none believed");
}

TEST(MemoryFacts, AbsurdCgroupReadingsAreNotBelievedAndMemAvailableStands) {
  struct Case {
    std::string max, current, note_mentions;
  };
  for (const Case& c : {Case{"lots\n", "1073741824\n", "memory.max is not a number"},
                        Case{"0\n", "1073741824\n", "is 0"},
                        Case{"1073741824\n", "10737418240\n", "far above"},
                        Case{"1073741824\n", "-5\n", "memory.current"},
                        Case{"1073741824\n", "", "memory.current"}}) {
    TempRoot tree;
    const MemoryFacts facts = read_ok(v2_container(tree, c.max, c.current).root());
    const MemorySource& cgroup = source_named(facts, "cgroup v2 memory limit");
    EXPECT_FALSE(cgroup.believed) << c.max << "/" << c.current;
    EXPECT_NE(cgroup.note.find(c.note_mentions), std::string::npos) << cgroup.note;
    EXPECT_EQ(facts.headroom_source, "MemAvailable");
    EXPECT_FALSE(facts.cgroup_limit_bytes.has_value());
  }
}

TEST(MemoryFacts, UsageJustOverTheLimitMeansNoHeadroom) {
  TempRoot tree;
  const MemoryFacts facts = read_ok(v2_container(tree, "1073741824\n", "1100000000\n").root());
  EXPECT_EQ(facts.headroom_source, "cgroup v2 memory.max headroom");
  EXPECT_EQ(facts.headroom_bytes, 0u);
}

TEST(MemoryFacts, MissingMemoryStatCountsNothingAsReclaimable) {
  TempRoot tree;
  v2_container(tree, "4294967296\n", "1073741824\n").write("/sys/fs/cgroup/memory.stat", "");
  const MemoryFacts facts = read_ok(tree.root());
  EXPECT_EQ(facts.cgroup_reclaimable_bytes, 0u);
  EXPECT_EQ(facts.headroom_bytes, 3 * kGiB);
  EXPECT_NE(source_named(facts, facts.headroom_source).note.find("no inactive_file"), std::string::npos);
}

// ------------------------------------------------------------ recorded total only

TEST(MemoryFacts, RecordedTotalAdmitsItHasNoLiveAvailability) {
  const MemoryFacts facts = memory_facts_from_total(64 * kGiB, "sysctl hw.memsize");
  EXPECT_EQ(facts.total_bytes, 64 * kGiB);
  EXPECT_EQ(facts.headroom_bytes, 64 * kGiB);
  const MemorySource& available = source_named(facts, facts.headroom_source);
  EXPECT_FALSE(available.believed);
  EXPECT_NE(available.note.find("re-read live"), std::string::npos);
  EXPECT_EQ(available.origin, "sysctl hw.memsize");
}

// ------------------------------------------------------------ live

TEST(MemoryFacts, LiveHeadroomIsPositiveAndWithinMemTotal) {
  const MemoryFacts facts = read_ok(SystemRoot());
  EXPECT_GT(facts.headroom_bytes, 0u);
  EXPECT_LE(facts.headroom_bytes, facts.total_bytes);
  EXPECT_NE(find_source(facts, facts.headroom_source), nullptr) << facts.headroom_source;
}

}  // namespace
}  // namespace coli::probe
