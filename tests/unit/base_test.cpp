#include <gtest/gtest.h>

#include <filesystem>

#include "coli/base/checked_math.h"
#include "coli/base/cpu_set.h"
#include "coli/base/files.h"
#include "coli/base/text.h"
#include "coli/base/weight_format.h"

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

// Issue 12: a profile field repeating "0-65536" expanded every repetition
// (65537 ints per 8 bytes of text: 20 000 repetitions asked for 5 GiB).
// Overlapping ranges are merged first, so each CPU is listed once.
TEST(CpuSet, RepeatedRangesAreMergedNotExpandedEachTime) {
  std::string list;
  for (int i = 0; i < 20000; ++i) list += (i % 2 ? "1-65536," : "0-65535,");
  list += "7";
  auto set = CpuSet::parse(list);
  ASSERT_TRUE(set.ok()) << set.error().message;
  EXPECT_EQ(set->size(), 65537);
  EXPECT_EQ(set->to_list(), "0-65536");
  EXPECT_EQ(CpuSet::parse("8-9,0-3,2-5,9")->to_list(), "0-5,8-9");
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
  EXPECT_EQ(parse_size("1073741824B"), 1ull << 30);
  EXPECT_EQ(parse_size("4096 bytes"), std::nullopt);  // one token: "4096bytes"
  EXPECT_EQ(parse_size("4096bytes"), 4096u);
  EXPECT_EQ(parse_size(" 2GB\n"), 2ull << 30);
  EXPECT_EQ(parse_size("16g"), 16ull << 30);  // issue 12: lower case was refused
  EXPECT_EQ(parse_size("16gib"), 16ull << 30);
  EXPECT_EQ(parse_size("512m"), 512ull << 20);
  // issue 12: a bare number meant bytes ("--ram 16" planned for 16 bytes): a unit is required.
  for (const char* bad : {"", "G", "16X", "-1G", "0B", "0.1B", "1e30B", "nanG", "16 G", "16", "1073741824"}) {
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

// Issue 12: a directory given as a profile reported a missing field, and
// /dev/zero was read forever.
TEST(Files, ReadTextFileNamesDirectoriesAndDevices) {
  auto directory = read_text_file(std::filesystem::temp_directory_path());
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.error().message.find("is a directory"), std::string::npos) << directory.error().message;
  auto endless = read_text_file("/dev/zero");
  ASSERT_FALSE(endless.ok());
  EXPECT_NE(endless.error().message.find("not a regular file"), std::string::npos) << endless.error().message;
  EXPECT_FALSE(read_text_file("/nonexistent/coli.toml").ok());
}

TEST(SystemRoot, MapsPathsBelowAReplayPrefix) {
  const SystemRoot live;
  EXPECT_TRUE(live.is_live());
  EXPECT_EQ(live.map("/proc/meminfo"), "/proc/meminfo");
  const SystemRoot replay("/tmp/x");
  EXPECT_EQ(replay.map("/proc/meminfo"), "/tmp/x/proc/meminfo");
  EXPECT_FALSE(replay.read("/proc/definitely-missing").has_value());
}

TEST(WeightFormat, NamesRoundTripForEveryFormat) {
  for (WeightFormat format : kAllWeightFormats) {
    const WeightFormatTraits& t = traits(format);
    EXPECT_EQ(t.format, format);
    auto by_name = parse_weight_format(t.name, "test");
    ASSERT_TRUE(by_name.ok()) << t.name;
    EXPECT_EQ(*by_name, format);
    auto by_dtype = parse_container_dtype(t.container_dtype, "test");
    ASSERT_TRUE(by_dtype.ok()) << t.container_dtype;
    EXPECT_EQ(*by_dtype, format);
  }
  EXPECT_EQ(name_of(WeightFormat::q4_g64), "q4_g64");
  EXPECT_EQ(traits(WeightFormat::bf16).container_dtype, "BF16");
}

TEST(WeightFormat, ParseErrorsNameTheFieldAndTheValidNames) {
  auto bad = parse_weight_format("q2_k", "plan.toml: made_for.expert_format");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message,
            "plan.toml: made_for.expert_format: unknown weight format 'q2_k' (valid: f32, bf16, f16, q8_row, q4_g64)");
  // Names and dtype strings are not interchangeable: each file keeps its own spelling.
  auto dtype = parse_container_dtype("q8_row", "index field tensors[w].dtype");
  ASSERT_FALSE(dtype.ok());
  EXPECT_EQ(dtype.error().message,
            "index field tensors[w].dtype: unknown dtype 'q8_row' (valid: F32, BF16, F16, Q8_ROW, Q4_G64)");
  auto dense = parse_dense_format("bf16", "--dense");
  ASSERT_FALSE(dense.ok());
  EXPECT_NE(dense.error().message.find("--dense: unknown dense format 'bf16' (valid: source, q8_row, q4_g64)"),
            std::string::npos);
}

// The container's layouts, written out by hand for a few shapes: weights,
// the scales 64-aligned after them, one f32 scale per q8 row, one f16 scale
// per 64 q4 columns.
TEST(WeightFormat, MatrixBytesFollowTheContainerLayouts) {
  struct Case { WeightFormat format; std::uint64_t rows, cols, scales_offset, bytes; };
  for (const Case& c : {Case{WeightFormat::q8_row, 3, 5, 64, 64 + 12},
                        Case{WeightFormat::q8_row, 1024, 2048, 2097152, 2097152 + 4096},
                        Case{WeightFormat::q8_row, 7, 100, 704, 704 + 28},
                        Case{WeightFormat::q4_g64, 3, 64, 128, 128 + 6},
                        Case{WeightFormat::q4_g64, 768, 2048, 786432, 786432 + 768 * 32 * 2},
                        Case{WeightFormat::q4_g64, 5, 192, 512, 512 + 30},
                        Case{WeightFormat::f32, 3, 5, 60, 60},
                        Case{WeightFormat::bf16, 3, 5, 30, 30},
                        Case{WeightFormat::f16, 1, 7, 14, 14}}) {
    const WeightFormatTraits& t = traits(c.format);
    SCOPED_TRACE(std::string(t.name) + " " + std::to_string(c.rows) + "x" + std::to_string(c.cols));
    EXPECT_EQ(t.scales_offset(c.rows, c.cols), c.scales_offset);
    EXPECT_EQ(t.matrix_bytes(c.rows, c.cols), c.bytes);
    EXPECT_EQ(t.scales_offset(c.rows, c.cols) + t.scale_bytes_of(c.rows, c.cols), c.bytes);
  }
}

TEST(WeightFormat, BlocksAndKernelFamilies) {
  EXPECT_EQ(traits(WeightFormat::q4_g64).block_cols, 64u);
  EXPECT_EQ(traits(WeightFormat::q8_row).block_cols, kBlockIsRow);
  EXPECT_EQ(traits(WeightFormat::q8_row).blocks_per_row(300), 1u);
  EXPECT_EQ(traits(WeightFormat::q4_g64).blocks_per_row(256), 4u);
  EXPECT_TRUE(traits(WeightFormat::q4_g64).valid_cols(128));
  EXPECT_FALSE(traits(WeightFormat::q4_g64).valid_cols(100));
  EXPECT_TRUE(traits(WeightFormat::q8_row).valid_cols(100));
  for (WeightFormat format : kAllWeightFormats) {
    const WeightFormatTraits& t = traits(format);
    EXPECT_EQ(t.block_cols, t.quantized ? t.block_cols : 1u) << t.name;
    // Each format is served by exactly one CPU family; only quantised ones have shaders.
    EXPECT_NE(t.cpu_float_kernels, t.cpu_int8_kernels) << t.name;
    EXPECT_EQ(t.quantized, t.cpu_int8_kernels) << t.name;
    EXPECT_TRUE(!t.gpu_shaders || t.quantized) << t.name;
  }
  EXPECT_FALSE(traits(WeightFormat::bf16).expert_records);
  EXPECT_TRUE(traits(WeightFormat::f32).expert_records);
}

TEST(DenseFormat, NamesAndQuantisedFormats) {
  for (DenseFormat format : {DenseFormat::source, DenseFormat::q8_row, DenseFormat::q4_g64}) {
    auto parsed = parse_dense_format(dense_format_name(format), "test");
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, format);
  }
  EXPECT_FALSE(quantized_format(DenseFormat::source).has_value());
  EXPECT_EQ(quantized_format(DenseFormat::q4_g64), WeightFormat::q4_g64);
  EXPECT_EQ(dense_format_of(WeightFormat::q8_row), DenseFormat::q8_row);
  EXPECT_EQ(dense_format_of(WeightFormat::bf16), DenseFormat::source);
}

TEST(CheckedMath, SaysWhenArithmeticWouldWrap) {
  constexpr std::uint64_t kMax = ~std::uint64_t{0};
  EXPECT_EQ(checked_add(kMax - 1, 1), kMax);
  EXPECT_EQ(checked_add(kMax, 1), std::nullopt);
  EXPECT_EQ(checked_mul(std::uint64_t{1} << 32, (std::uint64_t{1} << 32) - 1), kMax - ((std::uint64_t{1} << 32) - 1));
  EXPECT_EQ(checked_mul(std::uint64_t{1} << 32, std::uint64_t{1} << 32), std::nullopt);
  const std::vector<std::uint64_t> wraps_to_four = {(std::uint64_t{1} << 62) + 1, 4};
  EXPECT_EQ(checked_product(wraps_to_four), std::nullopt);
  const std::vector<std::uint64_t> shape = {3, 5, 7};
  EXPECT_EQ(checked_product(shape), 105u);
  EXPECT_EQ(checked_product({}), 1u);
  EXPECT_TRUE(range_within(4096, 100, 4096, 4196));
  EXPECT_FALSE(range_within(4096, 101, 4096, 4196));
  EXPECT_FALSE(range_within(kMax - 7, 16, 4096, 1 << 20));  // the end wraps to 8
  EXPECT_FALSE(range_within(0, 1, 4096, 1 << 20));
}

}  // namespace
}  // namespace coli
