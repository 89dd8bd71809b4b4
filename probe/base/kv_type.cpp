#include "coli/base/kv_type.h"

namespace coli {

std::string_view kv_type_name(KvType type) {
  switch (type) {
    case KvType::f32: return "f32";
    case KvType::f16: return "f16";
    case KvType::bf16: return "bf16";
  }
  return "?";
}

std::uint64_t kv_element_bytes(KvType type) { return type == KvType::f32 ? 4 : 2; }

std::vector<std::string> kv_type_names() {
  std::vector<std::string> names;
  for (KvType type : kAllKvTypes) names.emplace_back(kv_type_name(type));
  return names;
}

std::string kv_type_names_text() {
  std::string text;
  for (KvType type : kAllKvTypes) text += (text.empty() ? "" : ", ") + std::string(kv_type_name(type));
  return text;
}

Result<KvType> parse_kv_type(std::string_view name, std::string_view where) {
  for (KvType type : kAllKvTypes) {
    if (kv_type_name(type) == name) return type;
  }
  return make_error(std::string(where) + ": unknown KV type '" + std::string(name) + "' (valid: " + kv_type_names_text() + ")");
}

std::uint64_t kv_cache_bytes(std::uint64_t layers, std::uint64_t kv_heads, std::uint64_t head_dim,
                             std::uint64_t positions, KvType type) {
  return 2 * layers * kv_heads * positions * head_dim * kv_element_bytes(type);
}

}  // namespace coli
