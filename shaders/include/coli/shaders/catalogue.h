// The GEMV shader catalogue: the single source of truth about every compute
// shader variant coli embeds. The selector (selection.h) decides from it what
// may run on a device, and a SPIR-V reflection test checks it against the
// compiled modules, so a shader that declares more shared memory than the
// catalogue says fails the build's tests instead of losing a device.
//
// Stable interface (engine/vulkan builds pipelines from it):
//
//   Every variant computes y[rows] = W[rows x cols] * x[cols] (float32 x, y)
//   for one weight layout of kernels/reference/gemv_reference.h.
//   Descriptor set 0, all storage buffers, read as 32-bit words:
//     binding 0  weights  uint[]   the layout's weight bytes (int8 / nibbles)
//     binding 1  scales   uint[]   q8_row: float bits per row;
//                                  q4_g64: binary16 pairs (low half first)
//     binding 2  x        float[cols]
//     binding 3  y        float[rows]  (written)
//   Push constants (compute stage, offset 0): GemvPushConstants {rows, cols}.
//   Specialization constants: ShaderVariant::spec_constants, in that order;
//     spec_constant_data() lays their values out for VkSpecializationInfo
//     (entry i: constantID = spec_constants[i].id, offset = 4*i, size = 4).
//   Dispatch: workgroup_count(rows, spec) workgroups in x, 1 in y and z.
//   Subgroup variants (required_subgroup_operations non-empty) number their
//   lanes with subgroupExclusiveAdd, so they are correct for any subgroup
//   size and for partial subgroups; no full-subgroups flag is needed.
//   WORKGROUP_SIZE need not be a multiple of ROWS_PER_WORKGROUP or of the
//   subgroup size (spare invocations idle), though the selector makes it one.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "coli/base/weight_format.h"
#include "coli/shaders/gemv_constants.h"

namespace coli::shaders {

enum class VariantKind {
  direct,   // no shared memory; one subgroup per row, subgroupAdd reduction
  shmem_x,  // x staged in shared tiles of X_TILE floats; shared-memory reduction
  tile64k,  // x staged in one 16384-float tile (64 KiB); subgroupAdd reduction
};
std::string_view kind_name(VariantKind kind);  // "direct", "shmem_x", "tile64k"

// Typed views of gemv_constants.h (the GLSL reads the same macros).
inline constexpr std::uint32_t kSpecIdWorkgroupSize = COLI_GEMV_SPEC_ID_WORKGROUP_SIZE;
inline constexpr std::uint32_t kSpecIdRowsPerWorkgroup = COLI_GEMV_SPEC_ID_ROWS_PER_WORKGROUP;
inline constexpr std::uint32_t kSpecIdXTile = COLI_GEMV_SPEC_ID_X_TILE;
inline constexpr std::uint32_t kMinXTile = COLI_GEMV_MIN_X_TILE;
inline constexpr std::uint32_t kMaxXTile = COLI_GEMV_MAX_X_TILE;
inline constexpr std::uint32_t kTile64kXTile = COLI_GEMV_TILE64K_X_TILE;
inline constexpr std::uint32_t kSharedFloatBytes = COLI_GEMV_SHARED_FLOAT_BYTES;

// Values for a variant's specialization constants. A field the variant does
// not declare (x_tile outside shmem_x) is ignored by it and should be 0.
struct GemvSpec {
  std::uint32_t workgroup_size = COLI_GEMV_DEFAULT_WORKGROUP_SIZE;
  std::uint32_t rows_per_workgroup = COLI_GEMV_DEFAULT_ROWS_PER_WORKGROUP;
  std::uint32_t x_tile = 0;
  bool operator==(const GemvSpec&) const = default;
};

struct SpecConstant {
  std::uint32_t id = 0;            // constant_id in the GLSL
  std::string_view name;           // GLSL name: "WORKGROUP_SIZE", "ROWS_PER_WORKGROUP", "X_TILE"
  std::uint32_t default_value = 0; // what the module uses when not specialised
};

struct GemvPushConstants {
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;
};

struct ShaderVariant {
  std::string_view name;           // "gemv_<format>_<kind>", e.g. "gemv_q4_g64_shmem_x"
  WeightFormat format = WeightFormat::q8_row;  // one whose traits say gpu_shaders
  VariantKind kind = VariantKind::direct;
  std::span<const std::uint32_t> spirv;  // the embedded module (entry point "main")
  std::span<const SpecConstant> spec_constants;
  GemvSpec defaults;               // the spec constants' defaults, as a GemvSpec
  // Workgroup ("shared") memory the module declares for these spec values.
  // Exact: the reflection test sums the module's Workgroup variables.
  std::uint32_t (*shared_memory_bytes)(const GemvSpec& spec) = nullptr;
  // Names as in VulkanDevice::subgroup_operations ("basic", "arithmetic").
  std::span<const std::string_view> required_subgroup_operations;
  // Subgroup sizes the variant is correct for (inclusive); 0/0 = any.
  std::uint32_t min_subgroup_size = 0;
  std::uint32_t max_subgroup_size = 0;
  // VulkanDevice feature names that must be true ("shader_int8", ...).
  std::span<const std::string_view> required_features;
  // Higher is expected to be faster where it fits (a prior, not a
  // measurement: x reuse from shared memory over re-reading it per row).
  int speed_rank = 0;
};

// All variants, every format whose traits say gpu_shaders. Never empty; names are unique.
std::span<const ShaderVariant> gemv_catalogue();
// nullptr when no variant has that name.
const ShaderVariant* find_variant(std::string_view name);

// Shared-memory formulas (the same ones the catalogue entries point to).
constexpr std::uint32_t direct_shared_memory_bytes(const GemvSpec&) { return 0; }
constexpr std::uint32_t shmem_x_shared_memory_bytes(const GemvSpec& spec) {
  // shared float x_tile[X_TILE]; shared float partial_sums[WORKGROUP_SIZE];
  return kSharedFloatBytes * spec.x_tile + kSharedFloatBytes * spec.workgroup_size;
}
constexpr std::uint32_t tile64k_shared_memory_bytes(const GemvSpec&) {
  // shared float x_tile[16384];
  return kSharedFloatBytes * kTile64kXTile;
}

// Workgroups to dispatch (x dimension) for `rows` output rows.
constexpr std::uint32_t workgroup_count(std::uint32_t rows, const GemvSpec& spec) {
  return (rows + spec.rows_per_workgroup - 1) / spec.rows_per_workgroup;
}

// Values of variant.spec_constants, in that order, for VkSpecializationInfo.
std::vector<std::uint32_t> spec_constant_data(const ShaderVariant& variant, const GemvSpec& spec);

}  // namespace coli::shaders
