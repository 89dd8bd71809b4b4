#include "coli/shaders/catalogue.h"

#include <array>

#include "embedded_spirv.h"

namespace coli::shaders {
namespace {

constexpr SpecConstant kWorkgroupSize{kSpecIdWorkgroupSize, "WORKGROUP_SIZE", COLI_GEMV_DEFAULT_WORKGROUP_SIZE};
constexpr SpecConstant kRowsPerWorkgroup{kSpecIdRowsPerWorkgroup, "ROWS_PER_WORKGROUP",
                                         COLI_GEMV_DEFAULT_ROWS_PER_WORKGROUP};
constexpr SpecConstant kXTile{kSpecIdXTile, "X_TILE", COLI_GEMV_DEFAULT_X_TILE};

constexpr std::array kRowSpecs{kWorkgroupSize, kRowsPerWorkgroup};
constexpr std::array kTiledSpecs{kWorkgroupSize, kRowsPerWorkgroup, kXTile};

constexpr GemvSpec kRowDefaults{COLI_GEMV_DEFAULT_WORKGROUP_SIZE, COLI_GEMV_DEFAULT_ROWS_PER_WORKGROUP, 0};
constexpr GemvSpec kTiledDefaults{COLI_GEMV_DEFAULT_WORKGROUP_SIZE, COLI_GEMV_DEFAULT_ROWS_PER_WORKGROUP,
                                  COLI_GEMV_DEFAULT_X_TILE};

// subgroupAdd / subgroupExclusiveAdd need "arithmetic"; gl_SubgroupID needs "basic".
constexpr std::array<std::string_view, 2> kSubgroupArithmetic{"basic", "arithmetic"};

ShaderVariant make_variant(std::string_view name, WeightFormat format, VariantKind kind) {
  ShaderVariant variant;
  variant.name = name;
  variant.format = format;
  variant.kind = kind;
  variant.spirv = embedded_spirv(name);
  switch (kind) {
    case VariantKind::direct:
      variant.spec_constants = kRowSpecs;
      variant.defaults = kRowDefaults;
      variant.shared_memory_bytes = direct_shared_memory_bytes;
      variant.required_subgroup_operations = kSubgroupArithmetic;
      variant.speed_rank = 1;
      break;
    case VariantKind::shmem_x:
      variant.spec_constants = kTiledSpecs;
      variant.defaults = kTiledDefaults;
      variant.shared_memory_bytes = shmem_x_shared_memory_bytes;
      variant.speed_rank = 2;
      break;
    case VariantKind::tile64k:
      variant.spec_constants = kRowSpecs;
      variant.defaults = kRowDefaults;
      variant.shared_memory_bytes = tile64k_shared_memory_bytes;
      variant.required_subgroup_operations = kSubgroupArithmetic;
      variant.speed_rank = 3;
      break;
  }
  // Lanes are numbered densely inside each subgroup (subgroupExclusiveAdd),
  // so every subgroup size is correct: min/max stay 0 (any). No variant
  // needs an optional feature: weights and scales are read as 32-bit words.
  return variant;
}

}  // namespace

std::string_view kind_name(VariantKind kind) {
  switch (kind) {
    case VariantKind::direct: return "direct";
    case VariantKind::shmem_x: return "shmem_x";
    case VariantKind::tile64k: return "tile64k";
  }
  return "unknown";
}

std::span<const ShaderVariant> gemv_catalogue() {
  // Names match the modules shaders/CMakeLists.txt compiles: gemv_<format>_<kind>.
  static const std::array<ShaderVariant, 6> catalogue{
      make_variant("gemv_q8_row_direct", WeightFormat::q8_row, VariantKind::direct),
      make_variant("gemv_q8_row_shmem_x", WeightFormat::q8_row, VariantKind::shmem_x),
      make_variant("gemv_q8_row_tile64k", WeightFormat::q8_row, VariantKind::tile64k),
      make_variant("gemv_q4_g64_direct", WeightFormat::q4_g64, VariantKind::direct),
      make_variant("gemv_q4_g64_shmem_x", WeightFormat::q4_g64, VariantKind::shmem_x),
      make_variant("gemv_q4_g64_tile64k", WeightFormat::q4_g64, VariantKind::tile64k),
  };
  return catalogue;
}

const ShaderVariant* find_variant(std::string_view name) {
  for (const ShaderVariant& variant : gemv_catalogue()) {
    if (variant.name == name) return &variant;
  }
  return nullptr;
}

std::vector<std::uint32_t> spec_constant_data(const ShaderVariant& variant, const GemvSpec& spec) {
  std::vector<std::uint32_t> data;
  for (const SpecConstant& constant : variant.spec_constants) {
    switch (constant.id) {
      case kSpecIdWorkgroupSize: data.push_back(spec.workgroup_size); break;
      case kSpecIdRowsPerWorkgroup: data.push_back(spec.rows_per_workgroup); break;
      case kSpecIdXTile: data.push_back(spec.x_tile); break;
      default: data.push_back(constant.default_value); break;
    }
  }
  return data;
}

}  // namespace coli::shaders
