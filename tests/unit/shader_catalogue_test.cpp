// The catalogue must describe the embedded SPIR-V exactly: shared memory
// (summed from the module's Workgroup variables at several spec-constant
// values), spec-constant ids and defaults, workgroup size, and the subgroup
// operations and features the module declares. A shader edited without its
// catalogue entry fails here rather than on a device that does not enforce
// its own shared-memory limit.
#include <gtest/gtest.h>
#include <spirv_cross_c.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coli/shaders/catalogue.h"

namespace coli::shaders {
namespace {

constexpr std::uint32_t kSpirvMagic = 0x07230203;
constexpr std::uint32_t kCapabilityCooperativeMatrixKHR = 6022;  // newer than this spirv.h

// --- a minimal walk of the module's instruction stream, for what
// SPIRV-Cross's C API does not enumerate (variables by storage class,
// declared capabilities).
struct SpirvInstruction {
  std::uint32_t opcode = 0;
  std::span<const std::uint32_t> operands;
};

std::vector<SpirvInstruction> instructions(std::span<const std::uint32_t> module) {
  std::vector<SpirvInstruction> result;
  std::size_t at = 5;  // header: magic, version, generator, bound, schema
  while (at < module.size()) {
    const std::uint32_t word_count = module[at] >> 16;
    if (word_count == 0 || at + word_count > module.size()) {
      ADD_FAILURE() << "malformed SPIR-V at word " << at;
      break;
    }
    result.push_back({module[at] & 0xffffu, module.subspan(at + 1, word_count - 1)});
    at += word_count;
  }
  return result;
}

struct WorkgroupVariable {
  std::uint32_t id = 0;
  std::uint32_t pointer_type = 0;
};

std::vector<WorkgroupVariable> workgroup_variables(std::span<const std::uint32_t> module) {
  std::vector<WorkgroupVariable> variables;
  for (const SpirvInstruction& instruction : instructions(module)) {
    // OpVariable: result type, result id, storage class
    if (instruction.opcode == SpvOpVariable && instruction.operands[2] == SpvStorageClassWorkgroup) {
      variables.push_back({instruction.operands[1], instruction.operands[0]});
    }
  }
  return variables;
}

// A copy of the module whose spec constants with SpecId `spec_id` default to
// `value`: what a pipeline specialised with that value compiles. (This
// SPIRV-Cross C API has no setter for constants, so the literal is patched.)
std::vector<std::uint32_t> with_spec_default(std::span<const std::uint32_t> module, std::uint32_t spec_id,
                                             std::uint32_t value) {
  std::set<std::uint32_t> targets;
  for (const SpirvInstruction& instruction : instructions(module)) {
    // OpDecorate target SpecId literal
    if (instruction.opcode == SpvOpDecorate && instruction.operands[1] == SpvDecorationSpecId &&
        instruction.operands[2] == spec_id) {
      targets.insert(instruction.operands[0]);
    }
  }
  std::vector<std::uint32_t> patched(module.begin(), module.end());
  std::size_t at = 5;
  while (at < patched.size() && (patched[at] >> 16) != 0) {
    const std::uint32_t word_count = patched[at] >> 16;
    // OpSpecConstant: result type, result id, value (32-bit scalars only here)
    if ((patched[at] & 0xffffu) == SpvOpSpecConstant && word_count == 4 && targets.contains(patched[at + 2])) {
      patched[at + 3] = value;
    }
    at += word_count;
  }
  return patched;
}

std::set<std::uint32_t> capabilities(std::span<const std::uint32_t> module) {
  std::set<std::uint32_t> result;
  for (const SpirvInstruction& instruction : instructions(module)) {
    if (instruction.opcode == SpvOpCapability) result.insert(instruction.operands[0]);
  }
  return result;
}

// --- SPIRV-Cross reflection of one module.
class Reflection {
 public:
  explicit Reflection(std::span<const std::uint32_t> module) {
    EXPECT_EQ(spvc_context_create(&context_), SPVC_SUCCESS);
    spvc_parsed_ir ir = nullptr;
    EXPECT_EQ(spvc_context_parse_spirv(context_, module.data(), module.size(), &ir), SPVC_SUCCESS)
        << spvc_context_get_last_error_string(context_);
    EXPECT_EQ(spvc_context_create_compiler(context_, SPVC_BACKEND_NONE, ir, SPVC_CAPTURE_MODE_TAKE_OWNERSHIP,
                                           &compiler_),
              SPVC_SUCCESS);
  }
  ~Reflection() { spvc_context_destroy(context_); }
  Reflection(const Reflection&) = delete;
  Reflection& operator=(const Reflection&) = delete;

  // Every module spec constant: SpecId -> default values of the constants with it.
  std::map<std::uint32_t, std::vector<std::uint32_t>> spec_constant_defaults() const {
    std::map<std::uint32_t, std::vector<std::uint32_t>> result;
    for (const spvc_specialization_constant& constant : spec_constants()) {
      result[constant.constant_id].push_back(
          spvc_constant_get_scalar_u32(spvc_compiler_get_constant_handle(compiler_, constant.id), 0, 0));
    }
    return result;
  }

  // The x dimension's spec id, or nullopt when local_size_x is a literal.
  std::optional<std::uint32_t> workgroup_size_x_spec_id() const {
    spvc_specialization_constant x{}, y{}, z{};
    spvc_compiler_get_work_group_size_specialization_constants(compiler_, &x, &y, &z);
    if (x.id == 0) return std::nullopt;
    return x.constant_id;
  }

  std::uint32_t local_size(unsigned dimension) const {
    return spvc_compiler_get_execution_mode_argument_by_index(compiler_, SpvExecutionModeLocalSize, dimension);
  }

  // Bytes of a Workgroup variable of this pointer type at the current spec values.
  std::uint64_t variable_bytes(std::uint32_t pointer_type, const std::string& name) const {
    spvc_type type = spvc_compiler_get_type_handle(compiler_, pointer_type);
    EXPECT_EQ(spvc_type_get_storage_class(type), SpvStorageClassWorkgroup) << name;
    std::uint64_t elements = 1;
    for (unsigned d = 0; d < spvc_type_get_num_array_dimensions(type); ++d) {
      const SpvId dimension = spvc_type_get_array_dimension(type, d);
      // Spec-constant lengths are ids of constants (evaluated at the values set).
      elements *= spvc_type_array_dimension_is_literal(type, d)
                      ? dimension
                      : spvc_constant_get_scalar_u32(spvc_compiler_get_constant_handle(compiler_, dimension), 0, 0);
    }
    spvc_type element = spvc_compiler_get_type_handle(compiler_, spvc_type_get_base_type_id(type));
    std::uint64_t element_bytes = 0;
    if (spvc_type_get_basetype(element) == SPVC_BASETYPE_STRUCT) {
      std::size_t size = 0;
      EXPECT_EQ(spvc_compiler_get_declared_struct_size(compiler_, element, &size), SPVC_SUCCESS);
      element_bytes = size;
    } else {
      element_bytes = std::uint64_t{spvc_type_get_bit_width(element)} / 8 * spvc_type_get_vector_size(element) *
                      spvc_type_get_columns(element);
    }
    return elements * element_bytes;
  }

  std::string name(std::uint32_t id) const { return spvc_compiler_get_name(compiler_, id); }

 private:
  std::span<const spvc_specialization_constant> spec_constants() const {
    const spvc_specialization_constant* constants = nullptr;
    std::size_t count = 0;
    spvc_compiler_get_specialization_constants(compiler_, &constants, &count);
    return {constants, count};
  }

  spvc_context context_ = nullptr;
  spvc_compiler compiler_ = nullptr;
};

struct SharedMemory {
  std::size_t variables = 0;
  std::uint64_t bytes = 0;
  std::string detail;  // "x_tile=16384 B partial_sums=512 B"
};

SharedMemory reflected_shared_memory(const ShaderVariant& variant, const GemvSpec& spec) {
  std::vector<std::uint32_t> module = with_spec_default(variant.spirv, kSpecIdWorkgroupSize, spec.workgroup_size);
  module = with_spec_default(module, kSpecIdRowsPerWorkgroup, spec.rows_per_workgroup);
  module = with_spec_default(module, kSpecIdXTile, spec.x_tile);
  Reflection reflection(module);
  SharedMemory shared;
  for (const WorkgroupVariable& variable : workgroup_variables(module)) {
    std::string name = reflection.name(variable.id);
    if (name.empty()) name = "%" + std::to_string(variable.id);  // glslc -O drops names
    const std::uint64_t bytes = reflection.variable_bytes(variable.pointer_type, name);
    ++shared.variables;
    shared.bytes += bytes;
    shared.detail += " " + name + "=" + std::to_string(bytes) + " B";
  }
  return shared;
}

bool declares_spec_constant(const ShaderVariant& variant, std::uint32_t id) {
  return std::any_of(variant.spec_constants.begin(), variant.spec_constants.end(),
                     [&](const SpecConstant& constant) { return constant.id == id; });
}

// The catalogue's defaults, and two other settings of every spec constant.
std::vector<GemvSpec> specs_to_check(const ShaderVariant& variant) {
  std::vector<GemvSpec> specs{variant.defaults, {64, 4, 1024}, {256, 16, 8192}};
  if (!declares_spec_constant(variant, kSpecIdXTile)) {
    for (GemvSpec& spec : specs) spec.x_tile = 0;
  }
  return specs;
}

TEST(ShaderCatalogue, NamesAreUniqueAndCoverEveryFormatAndKind) {
  std::set<std::string_view> names;
  for (const ShaderVariant& variant : gemv_catalogue()) {
    EXPECT_TRUE(names.insert(variant.name).second) << variant.name;
    EXPECT_EQ(variant.name, "gemv_" + std::string(name_of(variant.format)) + "_" +
                                std::string(kind_name(variant.kind)));
    EXPECT_EQ(find_variant(variant.name), &variant);
  }
  // Every format whose traits promise shaders has every kind; no other format has any.
  for (WeightFormat format : kAllWeightFormats) {
    for (VariantKind kind : {VariantKind::direct, VariantKind::shmem_x, VariantKind::tile64k}) {
      const std::string name = "gemv_" + std::string(name_of(format)) + "_" + std::string(kind_name(kind));
      EXPECT_EQ(find_variant(name) != nullptr, traits(format).gpu_shaders) << name;
    }
  }
  EXPECT_EQ(find_variant("gemv2"), nullptr);
}

TEST(ShaderCatalogue, EveryVariantHasAnEmbeddedModule) {
  for (const ShaderVariant& variant : gemv_catalogue()) {
    ASSERT_GT(variant.spirv.size(), 5u) << variant.name;
    EXPECT_EQ(variant.spirv[0], kSpirvMagic) << variant.name;
  }
}

TEST(ShaderCatalogue, SharedMemoryFormulaMatchesTheModule) {
  for (const ShaderVariant& variant : gemv_catalogue()) {
    for (const GemvSpec& spec : specs_to_check(variant)) {
      const SharedMemory reflected = reflected_shared_memory(variant, spec);
      EXPECT_EQ(variant.shared_memory_bytes(spec), reflected.bytes)
          << variant.name << " WORKGROUP_SIZE=" << spec.workgroup_size << " X_TILE=" << spec.x_tile
          << ": module declares" << reflected.detail;
    }
  }
}

TEST(ShaderCatalogue, SharedMemoryDeclarationsAreWhatTheDesignSays) {
  // Guards the reflection itself: it must see the arrays we know are there.
  const GemvSpec spec{128, 8, 2048};
  for (const ShaderVariant& variant : gemv_catalogue()) {
    const SharedMemory reflected = reflected_shared_memory(variant, spec);
    switch (variant.kind) {
      case VariantKind::direct:
        EXPECT_EQ(reflected.variables, 0u) << variant.name << reflected.detail;
        break;
      case VariantKind::shmem_x:
        EXPECT_EQ(reflected.variables, 2u) << variant.name << reflected.detail;
        EXPECT_EQ(reflected.bytes, 4u * 2048 + 4u * 128) << variant.name;
        break;
      case VariantKind::tile64k:
        EXPECT_EQ(reflected.variables, 1u) << variant.name << reflected.detail;
        EXPECT_EQ(reflected.bytes, 65536u) << variant.name;
        break;
    }
  }
}

TEST(ShaderCatalogue, SpecConstantIdsAndDefaultsMatchTheModule) {
  for (const ShaderVariant& variant : gemv_catalogue()) {
    Reflection reflection(variant.spirv);
    const auto module_defaults = reflection.spec_constant_defaults();
    std::set<std::uint32_t> module_ids, catalogue_ids;
    for (const auto& [id, defaults] : module_defaults) module_ids.insert(id);
    for (const SpecConstant& constant : variant.spec_constants) {
      catalogue_ids.insert(constant.id);
      ASSERT_TRUE(module_defaults.contains(constant.id)) << variant.name << " " << constant.name;
      for (std::uint32_t value : module_defaults.at(constant.id)) {
        EXPECT_EQ(value, constant.default_value) << variant.name << " " << constant.name;
      }
    }
    EXPECT_EQ(module_ids, catalogue_ids) << variant.name;
    // The defaults struct agrees with the list.
    const std::vector<std::uint32_t> data = spec_constant_data(variant, variant.defaults);
    ASSERT_EQ(data.size(), variant.spec_constants.size());
    for (std::size_t i = 0; i < data.size(); ++i) {
      EXPECT_EQ(data[i], variant.spec_constants[i].default_value) << variant.name << " " << variant.spec_constants[i].name;
    }
  }
}

TEST(ShaderCatalogue, WorkgroupSizeComesFromTheWorkgroupSizeSpecConstant) {
  for (const ShaderVariant& variant : gemv_catalogue()) {
    Reflection reflection(variant.spirv);
    EXPECT_EQ(reflection.workgroup_size_x_spec_id(), std::optional<std::uint32_t>(kSpecIdWorkgroupSize))
        << variant.name;
    EXPECT_EQ(reflection.local_size(1), 1u) << variant.name;
    EXPECT_EQ(reflection.local_size(2), 1u) << variant.name;
    EXPECT_EQ(variant.defaults.workgroup_size, std::uint32_t{COLI_GEMV_DEFAULT_WORKGROUP_SIZE}) << variant.name;
  }
}

TEST(ShaderCatalogue, SubgroupOperationsAndFeaturesMatchTheModuleCapabilities) {
  const std::map<std::uint32_t, std::string_view> subgroup_capability{
      {SpvCapabilityGroupNonUniform, "basic"},
      {SpvCapabilityGroupNonUniformVote, "vote"},
      {SpvCapabilityGroupNonUniformArithmetic, "arithmetic"},
      {SpvCapabilityGroupNonUniformBallot, "ballot"},
      {SpvCapabilityGroupNonUniformShuffle, "shuffle"},
      {SpvCapabilityGroupNonUniformShuffleRelative, "shuffle_relative"},
      {SpvCapabilityGroupNonUniformClustered, "clustered"},
      {SpvCapabilityGroupNonUniformQuad, "quad"}};
  const std::map<std::uint32_t, std::string_view> feature_capability{
      {SpvCapabilityInt8, "shader_int8"},
      {SpvCapabilityFloat16, "shader_float16"},
      {SpvCapabilityStorageBuffer8BitAccess, "storage_buffer_8bit"},
      {SpvCapabilityStorageBuffer16BitAccess, "storage_buffer_16bit"},
      {SpvCapabilityDotProduct, "integer_dot_product"},
      {SpvCapabilityCooperativeMatrixNV, "cooperative_matrix"},
      {kCapabilityCooperativeMatrixKHR, "cooperative_matrix"}};
  for (const ShaderVariant& variant : gemv_catalogue()) {
    std::set<std::string_view> module_operations, module_features;
    for (std::uint32_t capability : capabilities(variant.spirv)) {
      if (subgroup_capability.contains(capability)) module_operations.insert(subgroup_capability.at(capability));
      if (feature_capability.contains(capability)) module_features.insert(feature_capability.at(capability));
    }
    const std::set<std::string_view> catalogue_operations(variant.required_subgroup_operations.begin(),
                                                          variant.required_subgroup_operations.end());
    const std::set<std::string_view> catalogue_features(variant.required_features.begin(),
                                                        variant.required_features.end());
    EXPECT_EQ(module_operations, catalogue_operations) << variant.name;
    EXPECT_EQ(module_features, catalogue_features) << variant.name;
  }
}

TEST(ShaderCatalogue, Tile64kNeedsExactly64KiB) {
  for (const ShaderVariant& variant : gemv_catalogue()) {
    if (variant.kind == VariantKind::tile64k) {
      EXPECT_EQ(variant.shared_memory_bytes(variant.defaults), 65536u);
    }
  }
}

TEST(ShaderCatalogue, WorkgroupCountCoversEveryRow) {
  EXPECT_EQ(workgroup_count(1, {128, 8, 0}), 1u);
  EXPECT_EQ(workgroup_count(8, {128, 8, 0}), 1u);
  EXPECT_EQ(workgroup_count(9, {128, 8, 0}), 2u);
  EXPECT_EQ(workgroup_count(2048, {128, 4, 0}), 512u);
}

}  // namespace
}  // namespace coli::shaders
