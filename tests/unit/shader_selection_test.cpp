// The selector on made-up devices: it must always return a variant that fits
// (shared memory, workgroup size, subgroup operations), never tile64k below
// 64 KiB, and refuse overrides that would not fit instead of running them.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <map>
#include <string>

#include "coli/shaders/selection.h"

namespace coli::shaders {
namespace {

constexpr std::uint32_t KiB = 1024;

VulkanDevice make_device(std::uint32_t shared_kib, std::uint32_t subgroup, bool arithmetic = true) {
  VulkanDevice device;
  device.name = "test device " + std::to_string(shared_kib) + " KiB / subgroup " + std::to_string(subgroup);
  device.max_compute_shared_memory_bytes = shared_kib * KiB;
  device.max_workgroup_invocations = 1024;
  device.max_workgroup_size = {1024, 1024, 64};
  device.subgroup_size = subgroup;
  device.min_subgroup_size = subgroup;
  device.max_subgroup_size = subgroup;
  device.subgroup_operations = {"basic", "vote", "ballot"};
  if (arithmetic) device.subgroup_operations.push_back("arithmetic");
  return device;
}

VulkanDevice h200() {
  VulkanDevice device = make_device(48, 32);
  device.name = "NVIDIA H200";
  return device;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Everything a selection must satisfy on `device` with `limit` bytes.
void expect_fits(const Selection& selection, const VulkanDevice& device, const GemvShape& shape,
                 std::uint32_t limit) {
  ASSERT_NE(selection.variant, nullptr);
  const ShaderVariant& variant = *selection.variant;
  SCOPED_TRACE(selection.reason);
  EXPECT_EQ(variant.format, shape.format);
  EXPECT_EQ(selection.shared_memory_bytes, variant.shared_memory_bytes(selection.spec));
  EXPECT_LE(selection.shared_memory_bytes, limit);
  EXPECT_LE(selection.shared_memory_bytes, device.max_compute_shared_memory_bytes);
  EXPECT_EQ(selection.shared_memory_limit, limit);
  EXPECT_EQ(why_not_fits(variant, selection.spec, device, limit), "");
  EXPECT_GE(selection.spec.workgroup_size, 1u);
  EXPECT_LE(selection.spec.workgroup_size, device.max_workgroup_invocations);
  EXPECT_GE(selection.spec.rows_per_workgroup, 1u);
  EXPECT_GE(std::uint64_t{selection.workgroups} * selection.spec.rows_per_workgroup, shape.rows);
  if (limit < 64 * KiB) {
    EXPECT_NE(variant.kind, VariantKind::tile64k);
  }
  for (std::string_view operation : variant.required_subgroup_operations) {
    EXPECT_NE(std::find(device.subgroup_operations.begin(), device.subgroup_operations.end(), operation),
              device.subgroup_operations.end())
        << operation;
  }
  if (variant.kind == VariantKind::shmem_x) {
    const std::uint32_t tile = selection.spec.x_tile;
    EXPECT_TRUE(std::has_single_bit(tile)) << tile;
    EXPECT_GE(tile, kMinXTile);
    EXPECT_LE(tile, kMaxXTile);
    EXPECT_LE(tile, std::max(kMinXTile, std::bit_floor(shape.cols)));
  } else {
    EXPECT_EQ(selection.spec.x_tile, 0u);
  }
  EXPECT_TRUE(contains(selection.reason, std::string(variant.name)));
  EXPECT_TRUE(contains(selection.reason, std::to_string(selection.shared_memory_bytes) + " B of " +
                                             std::to_string(limit) + " B"));
}

TEST(ShaderSelection, AlwaysFitsOnEveryMadeUpDevice) {
  std::vector<VulkanDevice> devices;
  for (std::uint32_t shared_kib : {16u, 32u, 48u, 64u, 227u}) {
    for (std::uint32_t subgroup : {8u, 32u, 64u}) devices.push_back(make_device(shared_kib, subgroup));
  }
  devices.push_back(make_device(32, 4, /*arithmetic=*/false));
  devices.push_back(make_device(64, 32, /*arithmetic=*/false));
  for (const VulkanDevice& device : devices) {
    for (WeightFormat format : {WeightFormat::q8_row, WeightFormat::q4_g64}) {
      for (auto [rows, cols] : {std::pair{2048u, 1024u}, {1024u, 2048u}, {64u, 64u}, {4096u, 14336u}, {3u, 20480u}}) {
        const GemvShape shape{format, rows, cols};
        SCOPED_TRACE(device.name + " " + std::string(name_of(format)) + " " + std::to_string(rows) + "x" +
                     std::to_string(cols));
        Result<Selection> selection = select_gemv_variant(device, shape);
        ASSERT_TRUE(selection.ok()) << selection.error().message;
        expect_fits(*selection, device, shape, device.max_compute_shared_memory_bytes);
      }
    }
  }
}

TEST(ShaderSelection, OddQ8WidthsAreAccepted) {
  const Result<Selection> selection = select_gemv_variant(h200(), {WeightFormat::q8_row, 7, 1001});
  ASSERT_TRUE(selection.ok()) << selection.error().message;
  expect_fits(*selection, h200(), {WeightFormat::q8_row, 7, 1001}, 48 * KiB);
  EXPECT_EQ(selection->spec.x_tile, 512u);  // bit_floor(1001); the shader handles the 489-column tail
}

TEST(ShaderSelection, H200PicksTheLargestTileThatFits48KiB) {
  const Result<Selection> selection = select_gemv_variant(h200(), {WeightFormat::q4_g64, 4096, 16384});
  ASSERT_TRUE(selection.ok()) << selection.error().message;
  EXPECT_EQ(selection->variant->name, "gemv_q4_g64_shmem_x");
  EXPECT_EQ(selection->spec.x_tile, 8192u);
  EXPECT_EQ(selection->shared_memory_bytes, 4u * 8192 + 4u * 128);
  EXPECT_EQ(selection->reason,
            "gemv_q4_g64_shmem_x with X_TILE=8192 (33280 B of 49152 B shared memory); "
            "gemv_q4_g64_tile64k needs 65536 B > 49152 B of shared memory");
}

TEST(ShaderSelection, TileIsNoWiderThanTheRow) {
  const Result<Selection> selection = select_gemv_variant(h200(), {WeightFormat::q8_row, 2048, 1024});
  ASSERT_TRUE(selection.ok());
  EXPECT_EQ(selection->spec.x_tile, 1024u);
}

TEST(ShaderSelection, Tile64kOnlyWhere64KiBFit) {
  for (std::uint32_t shared_kib : {64u, 227u}) {
    const Result<Selection> selection = select_gemv_variant(make_device(shared_kib, 32), {WeightFormat::q8_row, 2048, 1024});
    ASSERT_TRUE(selection.ok());
    EXPECT_EQ(selection->variant->kind, VariantKind::tile64k) << selection->reason;
    EXPECT_EQ(selection->shared_memory_bytes, 65536u);
  }
  const Result<Selection> just_below = select_gemv_variant(make_device(64, 32), {WeightFormat::q8_row, 2048, 1024},
                                                           {.max_shared_memory_bytes = 65535});
  ASSERT_TRUE(just_below.ok());
  EXPECT_NE(just_below->variant->kind, VariantKind::tile64k);
}

TEST(ShaderSelection, ForcingTile64kOn48KiBIsRefusedNamingBothNumbers) {
  const Result<Selection> selection = select_gemv_variant(h200(), {WeightFormat::q4_g64, 2048, 1024},
                                                          {.force_variant = "gemv_q4_g64_tile64k"});
  ASSERT_FALSE(selection.ok());
  const std::string& message = selection.error().message;
  EXPECT_EQ(message,
            "forced variant gemv_q4_g64_tile64k (COLI_VK_FORCE_VARIANT) refused on NVIDIA H200: "
            "gemv_q4_g64_tile64k needs 65536 B > 49152 B of shared memory");
  EXPECT_TRUE(contains(message, "65536 B")) << message;
  EXPECT_TRUE(contains(message, "49152 B")) << message;
  EXPECT_TRUE(contains(message, "NVIDIA H200")) << message;
}

TEST(ShaderSelection, ForcingAFittingVariantUsesIt) {
  const Result<Selection> selection = select_gemv_variant(make_device(64, 32), {WeightFormat::q8_row, 2048, 1024},
                                                          {.force_variant = "gemv_q8_row_direct"});
  ASSERT_TRUE(selection.ok()) << selection.error().message;
  EXPECT_EQ(selection->variant->name, "gemv_q8_row_direct");
  EXPECT_TRUE(contains(selection->reason, "forced by COLI_VK_FORCE_VARIANT")) << selection->reason;
  expect_fits(*selection, make_device(64, 32), {WeightFormat::q8_row, 2048, 1024}, 64 * KiB);
}

TEST(ShaderSelection, ForcingASubgroupVariantWithoutArithmeticIsRefused) {
  const Result<Selection> selection = select_gemv_variant(make_device(64, 32, false), {WeightFormat::q8_row, 64, 64},
                                                          {.force_variant = "gemv_q8_row_direct"});
  ASSERT_FALSE(selection.ok());
  EXPECT_TRUE(contains(selection.error().message, "'arithmetic'")) << selection.error().message;
}

TEST(ShaderSelection, ForcingAnUnknownOrOtherFormatVariantIsRefused) {
  for (const char* name : {"gemv2", "gemv_q8_row_shmem_x"}) {
    const Result<Selection> selection =
        select_gemv_variant(h200(), {WeightFormat::q4_g64, 64, 64}, {.force_variant = name});
    ASSERT_FALSE(selection.ok()) << name;
    EXPECT_TRUE(contains(selection.error().message, "gemv_q4_g64_shmem_x")) << selection.error().message;
  }
}

TEST(ShaderSelection, Pretending16KiBOnA64KiBDevicePicksA16KiBFit) {
  const VulkanDevice device = make_device(64, 32);
  for (WeightFormat format : {WeightFormat::q8_row, WeightFormat::q4_g64}) {
    const GemvShape shape{format, 2048, 4096};
    const Result<Selection> selection = select_gemv_variant(device, shape, {.max_shared_memory_bytes = 16 * KiB});
    ASSERT_TRUE(selection.ok()) << selection.error().message;
    expect_fits(*selection, device, shape, 16 * KiB);
    EXPECT_EQ(selection->variant->kind, VariantKind::shmem_x);
    EXPECT_EQ(selection->spec.x_tile, 2048u);  // 4*2048 + 4*128 = 8704 B; 4096 would need 16896 B
    EXPECT_TRUE(contains(selection->reason, "pretended by COLI_VK_MAX_SHARED_MEMORY")) << selection->reason;
    EXPECT_TRUE(contains(selection->reason, "65536 B")) << selection->reason;
  }
}

TEST(ShaderSelection, PretendingMoreThanTheDeviceAllowsIsRefused) {
  const Result<Selection> selection =
      select_gemv_variant(h200(), {WeightFormat::q4_g64, 64, 64}, {.max_shared_memory_bytes = 64 * KiB});
  ASSERT_FALSE(selection.ok());
  EXPECT_TRUE(contains(selection.error().message, "65536")) << selection.error().message;
  EXPECT_TRUE(contains(selection.error().message, "49152 B")) << selection.error().message;
}

TEST(ShaderSelection, TinyLimitWithoutArithmeticHasNoVariant) {
  // shmem_x needs at least 4*64 + 4*128 bytes; direct and tile64k need subgroupAdd.
  const Result<Selection> selection = select_gemv_variant(make_device(0, 32, false), {WeightFormat::q8_row, 64, 64});
  ASSERT_FALSE(selection.ok());
  EXPECT_TRUE(contains(selection.error().message, "gemv_q8_row_shmem_x needs 768 B > 0 B")) << selection.error().message;
  EXPECT_TRUE(contains(selection.error().message, "'arithmetic'")) << selection.error().message;
}

TEST(ShaderSelection, UnknownSharedMemoryLimitLeavesOnlyDirect) {
  const Result<Selection> selection = select_gemv_variant(make_device(0, 32), {WeightFormat::q4_g64, 64, 64});
  ASSERT_TRUE(selection.ok());
  EXPECT_EQ(selection->variant->kind, VariantKind::direct);
}

TEST(ShaderSelection, WorkgroupSizeRespectsTheDeviceLimit) {
  VulkanDevice device = make_device(48, 16);
  device.max_workgroup_invocations = 64;
  const Result<Selection> selection = select_gemv_variant(device, {WeightFormat::q4_g64, 256, 256});
  ASSERT_TRUE(selection.ok());
  EXPECT_EQ(selection->spec.workgroup_size, 64u);
  EXPECT_EQ(selection->spec.rows_per_workgroup, 4u);  // 16 lanes per row
  EXPECT_EQ(selection->shared_memory_bytes, 4u * 256 + 4u * 64);
}

TEST(ShaderSelection, RowVariantsPutOneRowOnEachSubgroup) {
  const Result<Selection> selection = select_gemv_variant(make_device(64, 64), {WeightFormat::q4_g64, 256, 256});
  ASSERT_TRUE(selection.ok());
  EXPECT_EQ(selection->variant->kind, VariantKind::tile64k);
  EXPECT_EQ(selection->spec.workgroup_size, 128u);
  EXPECT_EQ(selection->spec.rows_per_workgroup, 2u);
}

TEST(ShaderSelection, ShapesTheFormatCannotHoldAreErrors) {
  EXPECT_FALSE(select_gemv_variant(h200(), {WeightFormat::q4_g64, 64, 100}).ok());
  EXPECT_FALSE(select_gemv_variant(h200(), {WeightFormat::q8_row, 0, 64}).ok());
  EXPECT_FALSE(select_gemv_variant(h200(), {WeightFormat::q8_row, 64, 0}).ok());
}

TEST(ShaderSelection, WhyNotFitsChecksFeaturesAndSubgroupSizes) {
  static constexpr std::array<std::string_view, 1> int8{"shader_int8"};
  ShaderVariant variant = *find_variant("gemv_q8_row_direct");
  variant.required_features = int8;
  VulkanDevice device = h200();
  EXPECT_TRUE(contains(why_not_fits(variant, variant.defaults, device, 49152), "shader_int8"));
  device.shader_int8 = true;
  EXPECT_EQ(why_not_fits(variant, variant.defaults, device, 49152), "");

  variant.min_subgroup_size = 32;
  variant.max_subgroup_size = 32;
  device.min_subgroup_size = 8;  // a driver free to pick 8..32 does not fit a 32-only kernel
  EXPECT_TRUE(contains(why_not_fits(variant, variant.defaults, device, 49152), "[8, 32]"));
  device.min_subgroup_size = 32;
  EXPECT_EQ(why_not_fits(variant, variant.defaults, device, 49152), "");
}

// ------------------------------------------------------------ environment

EnvReader fake_env(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const char* name) -> const char* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : it->second.c_str();
  };
}

TEST(ShaderSelection, MeasurementsOnThisDeviceBeatStaticRanks) {
  const VulkanDevice device = make_device(48, 32);
  const GemvShape shape{WeightFormat::q4_g64, 1024, 2048};
  ASSERT_EQ(select_gemv_variant(device, shape)->variant->name, "gemv_q4_g64_shmem_x");  // static rank
  auto result = [&](const char* variant, int rows, int cols, double gb_per_s, bool passed = true) {
    return GpuKernelResult{device.name, "vulkan", variant, rows, cols, 0, passed, 0, "",
                           SampleStats{5, gb_per_s, gb_per_s, gb_per_s, 0}};
  };
  // As measured on the H200: direct 155 GB/s vs shmem_x 63 at this shape.
  std::vector<GpuKernelResult> measured = {result("gemv_q4_g64_direct", 1024, 2048, 155.5),
                                           result("gemv_q4_g64_shmem_x", 1024, 2048, 63.2),
                                           result("gemv_q4_g64_direct", 4096, 4096, 336.8),
                                           result("gemv_q4_g64_shmem_x", 4096, 4096, 360.4)};
  auto small = select_gemv_variant(device, shape, {}, measured);
  ASSERT_TRUE(small.ok()) << small.error().message;
  EXPECT_EQ(small->variant->name, "gemv_q4_g64_direct");
  EXPECT_NE(small->reason.find("fastest measured on this device: 155.5 GB/s"), std::string::npos) << small->reason;
  // The nearest measured shape decides: at 4096x4096 shmem_x was faster.
  EXPECT_EQ(select_gemv_variant(device, {WeightFormat::q4_g64, 4096, 4096}, {}, measured)->variant->name,
            "gemv_q4_g64_shmem_x");
  // Failed runs, other devices and a measured variant that does not fit never win.
  measured = {result("gemv_q4_g64_direct", 1024, 2048, 900, false), result("gemv_q4_g64_tile64k", 1024, 2048, 999)};
  measured.push_back(measured.back());
  measured.back().device = "another GPU";
  EXPECT_EQ(select_gemv_variant(device, shape, {}, measured)->variant->name, "gemv_q4_g64_shmem_x");
}

TEST(ShaderSelectionEnvironment, UnsetMeansNoOverrides) {
  const Result<SelectionOverrides> overrides = overrides_from_environment(fake_env({}));
  ASSERT_TRUE(overrides.ok());
  EXPECT_EQ(overrides->force_variant, "");
  EXPECT_FALSE(overrides->max_shared_memory_bytes.has_value());
}

TEST(ShaderSelectionEnvironment, ReadsBothVariables) {
  for (auto [text, bytes] : {std::pair{"16384", 16384u}, {"16K", 16384u}, {"16KiB", 16384u}, {"48k", 49152u}}) {
    const Result<SelectionOverrides> overrides = overrides_from_environment(
        fake_env({{"COLI_VK_FORCE_VARIANT", "gemv_q4_g64_direct"}, {"COLI_VK_MAX_SHARED_MEMORY", text}}));
    ASSERT_TRUE(overrides.ok()) << text;
    EXPECT_EQ(overrides->force_variant, "gemv_q4_g64_direct");
    EXPECT_EQ(overrides->max_shared_memory_bytes, std::optional<std::uint32_t>(bytes)) << text;
  }
}

TEST(ShaderSelectionEnvironment, MalformedSizeNamesTheVariable) {
  for (const char* text : {"lots", "16M", "-1", "99999999999"}) {
    const Result<SelectionOverrides> overrides =
        overrides_from_environment(fake_env({{"COLI_VK_MAX_SHARED_MEMORY", text}}));
    ASSERT_FALSE(overrides.ok()) << text;
    EXPECT_TRUE(contains(overrides.error().message, std::string("COLI_VK_MAX_SHARED_MEMORY=") + text))
        << overrides.error().message;
  }
}

}  // namespace
}  // namespace coli::shaders
