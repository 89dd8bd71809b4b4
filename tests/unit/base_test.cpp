#include <gtest/gtest.h>

#include <filesystem>

#include "coli/base/cpu_set.h"
#include "coli/base/files.h"
#include "coli/base/text.h"

namespace coli {
namespace {

TEST(CpuSet, ParsesKernelListsAndFormatsCanonically) {
  auto set = CpuSet::parse("0-3, 8,10-11\n");
  ASSERT_TRUE(set.ok()) << set.error().message;
  EXPECT_EQ(set->size(), 7);
  EXPECT_EQ(set->to_list(), "0-3,8,10-11");
  EXPECT_TRUE(set->contains(10));
  EXPECT_FALSE(set->contains(9));
  EXPECT_TRUE(CpuSet::parse("")->empty());
}

TEST(CpuSet, RefusesMalformedLists) {
  for (const char* bad : {"3-1", "a", "1,,2", "-1", "0-999999"}) {
    auto set = CpuSet::parse(bad);
    EXPECT_FALSE(set.ok()) << bad;
  }
}

TEST(CpuSet, ParsesHexMasks) {
  EXPECT_EQ(CpuSet::parse_hex_mask("0x00000003")->to_list(), "0-1");
  EXPECT_EQ(CpuSet::parse_hex_mask("ff,00000000")->to_list(), "32-39");
  EXPECT_FALSE(CpuSet::parse_hex_mask("0xzz").ok());
}

TEST(CpuSet, SetAlgebra) {
  const CpuSet a({0, 1, 2, 3});
  const CpuSet b({2, 3, 4});
  EXPECT_EQ(a.intersect(b).to_list(), "2-3");
  EXPECT_EQ(a.unite(b).to_list(), "0-4");
  EXPECT_EQ(a.minus(b).to_list(), "0-1");
}

TEST(Text, StrictNumbers) {
  EXPECT_EQ(parse_uint(" 42\n"), 42u);
  EXPECT_FALSE(parse_uint("42kB").has_value());
  EXPECT_FALSE(parse_uint("-1").has_value());
  EXPECT_EQ(parse_int("-1"), -1);
  EXPECT_EQ(format_bytes(3ull << 30), "3.0 GiB");
}

TEST(Text, SizesInBinaryUnits) {
  EXPECT_EQ(parse_size("16G"), 16ull << 30);
  EXPECT_EQ(parse_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_size("1.5T"), 3ull << 39);
  EXPECT_EQ(parse_size("4k"), 4096u);
  EXPECT_EQ(parse_size("1073741824"), 1ull << 30);
  EXPECT_EQ(parse_size(" 2GB\n"), 2ull << 30);
  for (const char* bad : {"", "G", "16X", "-1G", "0", "0.1", "1e30", "nan", "16 G"}) {
    EXPECT_FALSE(parse_size(bad).has_value()) << bad;
  }
  const std::string now = utc_now();
  ASSERT_EQ(now.size(), 20u) << now;
  EXPECT_EQ(now[10], 'T');
  EXPECT_EQ(now.back(), 'Z');
}

TEST(Files, AtomicWriteReplacesWholeFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("coli_base_test_" + std::to_string(::getpid()));
  const auto path = dir / "sub" / "file.txt";
  ASSERT_TRUE(write_file_atomically(path, "first").ok());
  ASSERT_TRUE(write_file_atomically(path, "second").ok());
  EXPECT_EQ(*read_text_file(path), "second");
  // No temporary files are left behind.
  int entries = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(path.parent_path())) ++entries;
  EXPECT_EQ(entries, 1);
  std::filesystem::remove_all(dir);
}

TEST(Files, AtomicWriteReportsUnwritableDirectory) {
  auto status = write_file_atomically("/proc/coli-cannot-write-here/x.toml", "x");
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("/proc/coli-cannot-write-here"), std::string::npos);
}

TEST(SystemRoot, MapsPathsBelowAReplayPrefix) {
  const SystemRoot live;
  EXPECT_TRUE(live.is_live());
  EXPECT_EQ(live.map("/proc/meminfo"), "/proc/meminfo");
  const SystemRoot replay("/tmp/x");
  EXPECT_EQ(replay.map("/proc/meminfo"), "/tmp/x/proc/meminfo");
  EXPECT_FALSE(replay.read("/proc/definitely-missing").has_value());
}

}  // namespace
}  // namespace coli
