// The one vocabulary for how the KV cache holds its keys and values: the
// engine's cache (coli/forward/kv_cache.h), `coli run --kv-type`, the plan
// and the planner's memory preview all speak KvType, and all size the cache
// with kv_cache_bytes, so a plan and a run agree to the byte.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/result.h"

namespace coli {

// f16 is the default (llama.cpp's too): half the memory and bandwidth of f32,
// 11 significant bits; bf16 keeps f32's range with 8 bits; f32 is exact.
enum class KvType : std::uint8_t { f32, f16, bf16 };

inline constexpr std::array<KvType, 3> kAllKvTypes = {KvType::f32, KvType::f16, KvType::bf16};
inline constexpr KvType kDefaultKvType = KvType::f16;

std::string_view kv_type_name(KvType type);       // "f32", "f16", "bf16"
std::uint64_t kv_element_bytes(KvType type);      // 4, 2, 2
std::vector<std::string> kv_type_names();         // {"f32", "f16", "bf16"} (the CLIs' allowed values)
std::string kv_type_names_text();                 // "f32, f16, bf16" (for messages and --help)
// "f16" -> KvType::f16; the error names `where` (the option or field) and lists the valid names.
Result<KvType> parse_kv_type(std::string_view name, std::string_view where);

// Bytes of a grouped-query KV cache: K and V of `kv_heads` heads of
// `head_dim` values, for `positions` positions of `layers` layers.
std::uint64_t kv_cache_bytes(std::uint64_t layers, std::uint64_t kv_heads, std::uint64_t head_dim,
                             std::uint64_t positions, KvType type);

}  // namespace coli
