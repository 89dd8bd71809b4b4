#include "cpu/usable_cpus.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace coli::probe {
namespace {

namespace fs = std::filesystem;

const CpuSet kMachine16({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});

SystemRoot fixture_root(const std::string& name) {
  return SystemRoot(fs::path(COLI_FIXTURES_DIR) / "cgroups" / "usable-cpus" / name);
}

TEST(UsableCpus, V2ContainerWithCpusetAndQuota) {
  const UsableCpus usable = read_usable_cpus(fixture_root("v2-container"), kMachine16);
  EXPECT_EQ(usable.affinity.to_list(), "0-3");
  ASSERT_TRUE(usable.cgroup_cpuset.has_value());
  EXPECT_EQ(usable.cgroup_cpuset->to_list(), "0-3");
  ASSERT_TRUE(usable.quota_cpus.has_value());
  EXPECT_DOUBLE_EQ(*usable.quota_cpus, 1.5);
  EXPECT_EQ(usable.pus.to_list(), "0-3");
}

TEST(UsableCpus, V2SliceSetsCpusetAndTheTighterQuota) {
  // The service has no cpuset file and an unlimited cpu.max; its slice limits both.
  const UsableCpus usable = read_usable_cpus(fixture_root("v2-systemd-slice"), kMachine16);
  ASSERT_TRUE(usable.cgroup_cpuset.has_value());
  EXPECT_EQ(usable.cgroup_cpuset->to_list(), "2-5");
  ASSERT_TRUE(usable.quota_cpus.has_value());
  EXPECT_DOUBLE_EQ(*usable.quota_cpus, 2.0);
  EXPECT_EQ(usable.affinity.to_list(), "3-5");
  EXPECT_EQ(usable.pus.to_list(), "3-5");
}

TEST(UsableCpus, V1ContainerCpusetAndCfsQuota) {
  const UsableCpus usable = read_usable_cpus(fixture_root("v1-container"), kMachine16);
  ASSERT_TRUE(usable.cgroup_cpuset.has_value());
  EXPECT_EQ(usable.cgroup_cpuset->to_list(), "4-7");
  ASSERT_TRUE(usable.quota_cpus.has_value());
  EXPECT_DOUBLE_EQ(*usable.quota_cpus, 2.5);
  EXPECT_EQ(usable.pus.to_list(), "4-7");
}

// A scratch root for cases the fixtures do not cover; removed afterwards.
class ScratchRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("coli-usable-cpus-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& path, const std::string& content) {
    const fs::path file = dir_ / path;
    fs::create_directories(file.parent_path());
    std::ofstream(file) << content;
  }
  fs::path dir_;
};

TEST_F(ScratchRoot, EmptyInnermostCpusetFallsBackToParentAndAffinityIntersects) {
  // No mountinfo: the standard /sys/fs/cgroup layout is assumed.
  write("proc/self/cgroup", "0::/a/b\n");
  write("proc/self/status", "Name:\tx\nCpus_allowed_list:\t1-6\n");
  write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory\n");
  write("sys/fs/cgroup/a/b/cpuset.cpus.effective", "\n");
  write("sys/fs/cgroup/a/cpuset.cpus.effective", "4-9\n");
  write("sys/fs/cgroup/a/b/cpu.max", "50000 100000\n");
  write("sys/fs/cgroup/a/cpu.max", "max 100000\n");
  const UsableCpus usable = read_usable_cpus(SystemRoot(dir_), CpuSet({0, 1, 2, 3, 4, 5, 6, 7}));
  ASSERT_TRUE(usable.cgroup_cpuset.has_value());
  EXPECT_EQ(usable.cgroup_cpuset->to_list(), "4-9");
  EXPECT_EQ(usable.pus.to_list(), "4-6");  // machine 0-7 ∩ affinity 1-6 ∩ cpuset 4-9
  ASSERT_TRUE(usable.quota_cpus.has_value());
  EXPECT_DOUBLE_EQ(*usable.quota_cpus, 0.5);
}

TEST_F(ScratchRoot, NothingRecordedMeansEveryMachinePuAndNoLimits) {
  write("proc/self/cgroup", "0::/\n");
  write("sys/fs/cgroup/cgroup.controllers", "memory pids\n");  // neither cpu nor cpuset enabled
  const CpuSet machine({0, 1, 2, 3});
  const UsableCpus usable = read_usable_cpus(SystemRoot(dir_), machine);
  EXPECT_EQ(usable.affinity, machine);
  EXPECT_FALSE(usable.cgroup_cpuset.has_value());
  EXPECT_FALSE(usable.quota_cpus.has_value());
  EXPECT_EQ(usable.pus, machine);
}

TEST(UsableCpus, LiveAffinityIncludesTheCpuWeRunOn) {
  std::vector<int> all;
  const long online = ::sysconf(_SC_NPROCESSORS_CONF);
  for (int cpu = 0; cpu < online; ++cpu) all.push_back(cpu);
  const CpuSet machine(all);
  const UsableCpus usable = read_usable_cpus(SystemRoot(), machine);
  const int current = ::sched_getcpu();
  ASSERT_GE(current, 0);
  // The kernel runs us only inside our affinity and cgroup cpuset.
  EXPECT_TRUE(usable.affinity.contains(current)) << usable.affinity.to_list();
  EXPECT_TRUE(usable.pus.contains(current)) << usable.pus.to_list();
}

}  // namespace
}  // namespace coli::probe
