#include "coli/planner/quality.h"

#include <cmath>
#include <cstdint>

#include <nlohmann/json.hpp>

namespace coli::planner {

namespace {

constexpr int kQualitySchemaVersion = 1;

// A string field, or "" when absent or of another type (nlohmann's value()
// throws on a type mismatch: a hostile file must get an error, not an exception).
std::string text_field(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

Result<double> figure(const nlohmann::json& entry, const char* key, const std::string& where) {
  const auto it = entry.find(key);
  if (it == entry.end() || !it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0) {
    return make_error(where + "." + key + " must be a finite number >= 0");
  }
  return it->get<double>();
}

Result<QualityEntry> parse_entry(const nlohmann::json& e, const std::string& where) {
  if (!e.is_object()) return make_error(where + " must be an object");
  auto experts = parse_weight_format(text_field(e, "experts"), where + ".experts");
  if (!experts) return experts.error();
  auto dense = parse_dense_format(text_field(e, "dense"), where + ".dense");
  if (!dense) return dense.error();
  QualityEntry entry{*experts, *dense};
  for (auto [key, target] : {std::pair{"kld_mean", &entry.kld_mean}, std::pair{"kld_p99", &entry.kld_p99},
                             std::pair{"top1_agreement", &entry.top1_agreement}, std::pair{"perplexity", &entry.perplexity},
                             std::pair{"base_perplexity", &entry.base_perplexity}}) {
    auto value = figure(e, key, where);
    if (!value) return value.error();
    *target = *value;
  }
  if (entry.top1_agreement > 1) return make_error(where + ".top1_agreement must be in [0, 1]");
  auto tokens = figure(e, "tokens", where);
  if (!tokens) return tokens.error();
  if (*tokens > 9007199254740992.0) return make_error(where + ".tokens must be at most 2^53");
  entry.tokens = static_cast<std::uint64_t>(*tokens);
  entry.text = text_field(e, "text");
  return entry;
}

}  // namespace

const QualityEntry* QualityTable::find(WeightFormat experts, DenseFormat dense) const {
  for (const QualityEntry& e : entries) {
    if (e.experts == experts && e.dense == dense) return &e;
  }
  return nullptr;
}

void QualityTable::record(const QualityEntry& entry) {
  for (QualityEntry& e : entries) {
    if (e.experts == entry.experts && e.dense == entry.dense) {
      e = entry;
      return;
    }
  }
  entries.push_back(entry);
}

Result<QualityTable> parse_quality_json(std::string_view text, const std::string& origin) {
  const nlohmann::json root = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) return make_error(origin + " is not a JSON object (a quality file of coli perplexity --record)");
  const auto version = root.find("schema_version");
  if (version == root.end() || !version->is_number_integer() || version->get<std::int64_t>() != kQualitySchemaVersion) {
    return make_error(origin + ": schema_version must be " + std::to_string(kQualitySchemaVersion) +
                      " (written by another coli version: measure again with coli perplexity --record)");
  }
  QualityTable table;
  table.model_identity = text_field(root, "model_identity");
  if (table.model_identity.empty()) return make_error(origin + ": model_identity is missing");
  const auto entries = root.find("entries");
  if (entries == root.end() || !entries->is_array()) return make_error(origin + ": entries must be a list");
  for (std::size_t i = 0; i < entries->size(); ++i) {
    auto entry = parse_entry((*entries)[i], origin + ": entries[" + std::to_string(i) + "]");
    if (!entry) return entry.error();
    table.record(*entry);
  }
  return table;
}

std::string quality_to_json(const QualityTable& table) {
  nlohmann::json entries = nlohmann::json::array();
  for (const QualityEntry& e : table.entries) {
    entries.push_back({{"experts", name_of(e.experts)}, {"dense", dense_format_name(e.dense)}, {"kld_mean", e.kld_mean},
                       {"kld_p99", e.kld_p99}, {"top1_agreement", e.top1_agreement}, {"perplexity", e.perplexity},
                       {"base_perplexity", e.base_perplexity}, {"tokens", e.tokens}, {"text", e.text}});
  }
  const nlohmann::json root = {{"schema_version", kQualitySchemaVersion}, {"model_identity", table.model_identity},
                               {"entries", entries}};
  return root.dump(1) + "\n";
}

}  // namespace coli::planner
