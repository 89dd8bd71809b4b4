// RoPE settings. transformers 4.x writes rope_theta plus rope_scaling
// ({"type"|"rope_type": ..., "factor": ...} or null); 5.x writes one
// rope_parameters object holding rope_type and rope_theta. Types coli does not
// implement are refused: running them as plain RoPE would give wrong output.
#include "config_fields.h"
#include "json_text.h"

namespace coli::model::detail {
using nlohmann::json;

namespace {

constexpr std::string_view kImplementedTypes = "default, linear, yarn";

Result<RopeScaling> read_scaling_object(const json& object, const std::string& where) {
  if (!object.is_object()) return make_error(where + " must be an object or null, found " + describe_json_value(object));
  const ConfigFields fields(object, where);
  auto type = fields.text_or("rope_type", "");
  if (!type) return type.error();
  if (type->empty()) {
    auto legacy_type = fields.text_or("type", "default");  // "type" is the pre-4.45 name
    if (!legacy_type) return legacy_type.error();
    *type = *legacy_type;
  }
  RopeScaling scaling;
  scaling.type = *type;
  if (*type == "default") return scaling;
  if (*type != "linear" && *type != "yarn")
    return make_error(where + ": RoPE type '" + *type + "' is not supported; coli implements " +
                      std::string(kImplementedTypes) + " (remove the scaling to run at the native context length)");

  auto factor = fields.optional_number("factor");
  if (!factor) return factor.error();
  if (!*factor || !(**factor > 0))
    return make_error(where + ": RoPE type '" + *type + "' needs a 'factor' greater than 0");
  scaling.factor = **factor;
  if (fields.has("original_max_position_embeddings")) {
    auto original = fields.required_count("original_max_position_embeddings");
    if (!original) return original.error();
    scaling.original_max_position_embeddings = *original;
  }
  for (auto [name, target] : {std::pair{"beta_fast", &scaling.beta_fast}, std::pair{"beta_slow", &scaling.beta_slow},
                              std::pair{"attention_factor", &scaling.attention_factor}}) {
    auto value = fields.optional_number(name);
    if (!value) return value.error();
    *target = *value;
  }
  return scaling;
}

}  // namespace

Result<RopeScaling> read_rope(const ConfigFields& fields, double default_theta, double& theta) {
  auto top_level_theta = fields.positive_number_or("rope_theta", default_theta);
  if (!top_level_theta) return top_level_theta.error();
  theta = *top_level_theta;

  if (const json* parameters = fields.find("rope_parameters")) {
    const std::string where = fields.source() + ": rope_parameters";
    auto scaling = read_scaling_object(*parameters, where);
    if (!scaling) return scaling.error();
    const ConfigFields inner(*parameters, where);
    auto inner_theta = inner.positive_number_or("rope_theta", theta);
    if (!inner_theta) return inner_theta.error();
    theta = *inner_theta;
    return scaling;
  }
  if (const json* scaling = fields.find("rope_scaling")) return read_scaling_object(*scaling, fields.source() + ": rope_scaling");
  return RopeScaling{};
}

}  // namespace coli::model::detail
