#include "config_fields.h"

#include "json_text.h"

namespace coli::model::detail {
using nlohmann::json;

const json* ConfigFields::find(std::string_view field) const {
  const auto found = root_.find(std::string(field));
  if (found == root_.end() || found->is_null()) return nullptr;
  return &*found;
}

bool ConfigFields::has(std::string_view field) const { return find(field) != nullptr; }

Error ConfigFields::field_error(std::string_view field, const std::string& problem) const {
  return make_error(source_ + ": field '" + std::string(field) + "' " + problem);
}

namespace {

// The largest value each count may take (docs/engine.md, "config.json
// bounds"). Every real checkpoint is far below them (DeepSeek-V3 and Kimi K2:
// 61 layers, 256/384 experts, hidden 7168, vocab 163840); a larger number is a
// corrupt or hostile file that would make coli convert and coli-plan loop or
// allocate without end, or wrap the plan's byte counts.
struct CountLimit {
  std::string_view field;
  std::uint64_t limit;
};
constexpr std::uint64_t kMaxExperts = std::uint64_t{1} << 16;
constexpr std::uint64_t kMaxPositions = std::uint64_t{1} << 32;
constexpr CountLimit kCountLimits[] = {
    {"num_hidden_layers", kMaxLayers},
    {"num_nextn_predict_layers", kMaxLayers},
    {"first_k_dense_replace", kMaxLayers},
    {"moe_layer_freq", kMaxLayers},
    {"decoder_sparse_step", kMaxLayers},
    {"vocab_size", std::uint64_t{1} << 24},
    {"num_experts", kMaxExperts},
    {"num_local_experts", kMaxExperts},
    {"n_routed_experts", kMaxExperts},
    {"n_shared_experts", kMaxExperts},
    {"num_experts_per_tok", kMaxExperts},
    {"num_attention_heads", kMaxExperts},
    {"num_key_value_heads", kMaxExperts},
    {"index_n_heads", kMaxExperts},
    {"max_position_embeddings", kMaxPositions},
    {"original_max_position_embeddings", kMaxPositions},
    {"sliding_window", kMaxPositions},
    {"index_topk", kMaxPositions},
};
// Everything else read as a count: hidden_size, the intermediate sizes, head
// dims and LoRA ranks.
constexpr std::uint64_t kDefaultCountLimit = std::uint64_t{1} << 20;

std::optional<std::uint64_t> positive_integer(const json& value) {
  if (value.is_number_unsigned() && value.get<std::uint64_t>() > 0) return value.get<std::uint64_t>();
  if (value.is_number_integer() && value.get<std::int64_t>() > 0)
    return static_cast<std::uint64_t>(value.get<std::int64_t>());
  return std::nullopt;
}

}  // namespace

std::uint64_t config_count_limit(std::string_view field) {
  for (const CountLimit& row : kCountLimits)
    if (row.field == field) return row.limit;
  return kDefaultCountLimit;
}

Result<std::uint64_t> ConfigFields::bounded(std::string_view field, std::uint64_t number) const {
  const std::uint64_t limit = config_count_limit(field);
  if (number > limit)
    return field_error(field, "is " + std::to_string(number) + ", more than the " + std::to_string(limit) +
                                  " coli accepts (no real model comes close): the file is corrupt; fix or re-download it");
  return number;
}

Result<std::uint64_t> ConfigFields::required_count(std::string_view field) const {
  const json* value = find(field);
  if (value == nullptr) return field_error(field, "is missing; it is required to lay out the model's tensors");
  const auto number = positive_integer(*value);
  if (!number) return field_error(field, "must be a positive integer, found " + describe_json_value(*value));
  return bounded(field, *number);
}

Result<std::uint64_t> ConfigFields::required_count_of(const std::vector<std::string_view>& names) const {
  for (std::string_view name : names)
    if (has(name)) return required_count(name);
  std::string listed;
  for (std::string_view name : names) listed += (listed.empty() ? "'" : " or '") + std::string(name) + "'";
  return make_error(source_ + ": field " + listed + " is missing; it is required to lay out the model's tensors");
}

Result<std::uint64_t> ConfigFields::count_or(std::string_view field, std::uint64_t fallback) const {
  return has(field) ? required_count(field) : Result<std::uint64_t>(fallback);
}

Result<std::uint64_t> ConfigFields::non_negative_or(std::string_view field, std::uint64_t fallback) const {
  const json* value = find(field);
  if (value == nullptr) return fallback;
  if (value->is_number_integer() && value->get<std::int64_t>() == 0) return std::uint64_t{0};
  const auto number = positive_integer(*value);
  if (!number) return field_error(field, "must be a non-negative integer, found " + describe_json_value(*value));
  return bounded(field, *number);
}

Result<std::optional<double>> ConfigFields::optional_number(std::string_view field) const {
  const json* value = find(field);
  if (value == nullptr) return std::optional<double>{};
  if (!value->is_number()) return field_error(field, "must be a number, found " + describe_json_value(*value));
  return std::optional<double>(value->get<double>());
}

Result<double> ConfigFields::positive_number_or(std::string_view field, double fallback) const {
  auto value = optional_number(field);
  if (!value) return value.error();
  if (!*value) return fallback;
  if (!(**value > 0)) return field_error(field, "must be greater than 0, found " + std::to_string(**value));
  return **value;
}

Result<bool> ConfigFields::flag_or(std::string_view field, bool fallback) const {
  const json* value = find(field);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) return field_error(field, "must be true or false, found " + describe_json_value(*value));
  return value->get<bool>();
}

Result<std::string> ConfigFields::text_or(std::string_view field, std::string fallback) const {
  const json* value = find(field);
  if (value == nullptr) return fallback;
  if (!value->is_string()) return field_error(field, "must be a string, found " + describe_json_value(*value));
  return value->get<std::string>();
}

Result<std::vector<std::uint64_t>> ConfigFields::index_list(std::string_view field) const {
  const json* value = find(field);
  std::vector<std::uint64_t> indices;
  if (value == nullptr) return indices;
  if (!value->is_array())
    return field_error(field, "must be a list of layer indices, found " + describe_json_value(*value));
  for (const json& item : *value) {
    if (item.is_number_integer() && item.get<std::int64_t>() == 0) {
      indices.push_back(0);
      continue;
    }
    const auto number = positive_integer(item);
    if (!number)
      return field_error(field, "must hold non-negative layer indices, found " + describe_json_value(item));
    indices.push_back(*number);
  }
  return indices;
}

}  // namespace coli::model::detail
