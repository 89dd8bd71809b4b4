// Element types a safetensors header may name, as far as coli knows them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace coli::model {

enum class DType { F32, F16, BF16, I8, U8, I32, I64 };

// "F32" -> DType::F32; nullopt for names coli does not know (F8_E4M3, BOOL, ...).
std::optional<DType> parse_dtype(std::string_view name);
std::string_view dtype_name(DType dtype);
std::uint64_t dtype_size(DType dtype);
// Only floating types can hold weights the engine computes with; integer
// tensors are known (so a header with them still parses) but flagged.
bool is_float_dtype(DType dtype);
// The list for error messages: "F32, F16, BF16, I8, U8, I32, I64".
std::string_view known_dtype_names();

}  // namespace coli::model
