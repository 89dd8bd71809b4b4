// Typed access to config.json fields; every error names the file and field
// and says what was found.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "coli/base/result.h"
#include "coli/model/model_config.h"

namespace coli::model::detail {

// The most a count field may hold (docs/engine.md, "config.json bounds");
// required_count, count_or and non_negative_or refuse larger values.
inline constexpr std::uint64_t kMaxLayers = 4096;
std::uint64_t config_count_limit(std::string_view field);

class ConfigFields {
 public:
  ConfigFields(const nlohmann::json& root, std::string source) : root_(root), source_(std::move(source)) {}

  bool has(std::string_view field) const;  // present and not null
  // A positive integer that must be present.
  Result<std::uint64_t> required_count(std::string_view field) const;
  // First present field of `names` (aliases such as num_experts/num_local_experts).
  Result<std::uint64_t> required_count_of(const std::vector<std::string_view>& names) const;
  Result<std::uint64_t> count_or(std::string_view field, std::uint64_t fallback) const;
  // A non-negative integer (0 allowed); absent or null gives `fallback`.
  Result<std::uint64_t> non_negative_or(std::string_view field, std::uint64_t fallback) const;
  Result<double> positive_number_or(std::string_view field, double fallback) const;
  Result<std::optional<double>> optional_number(std::string_view field) const;
  Result<bool> flag_or(std::string_view field, bool fallback) const;
  Result<std::string> text_or(std::string_view field, std::string fallback) const;
  Result<std::vector<std::uint64_t>> index_list(std::string_view field) const;  // absent/null: empty

  const nlohmann::json* find(std::string_view field) const;  // nullptr when absent or null
  // `number` itself, or an error naming the field when it is over config_count_limit(field).
  Result<std::uint64_t> bounded(std::string_view field, std::uint64_t number) const;
  Error field_error(std::string_view field, const std::string& problem) const;
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json& root_;
  std::string source_;
};

// deepseek_v3 / glm_moe_dsa: latent attention, indexer, experts and layer
// layout (hidden sizes, rope and norms already read); in latent_config.cpp.
Status read_latent_family(const ConfigFields& fields, ModelConfig& config);

// rope_theta and rope_scaling (4.x) or rope_parameters (5.x); in rope_config.cpp.
Result<RopeScaling> read_rope(const ConfigFields& fields, double default_theta, double& theta);

}  // namespace coli::model::detail
