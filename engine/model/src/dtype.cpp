#include "coli/model/dtype.h"

#include <array>
#include <utility>

namespace coli::model {
namespace {

struct DTypeRow {
  DType dtype;
  std::string_view name;
  std::uint64_t size;
  bool is_float;
};

// Names as the safetensors format spells them.
constexpr std::array<DTypeRow, 7> kDTypes{{
    {DType::F32, "F32", 4, true},
    {DType::F16, "F16", 2, true},
    {DType::BF16, "BF16", 2, true},
    {DType::I8, "I8", 1, false},
    {DType::U8, "U8", 1, false},
    {DType::I32, "I32", 4, false},
    {DType::I64, "I64", 8, false},
}};

const DTypeRow& row(DType dtype) {
  for (const DTypeRow& candidate : kDTypes)
    if (candidate.dtype == dtype) return candidate;
  return kDTypes[0];  // unreachable: every enumerator has a row
}

}  // namespace

std::optional<DType> parse_dtype(std::string_view name) {
  for (const DTypeRow& candidate : kDTypes)
    if (candidate.name == name) return candidate.dtype;
  return std::nullopt;
}

std::string_view dtype_name(DType dtype) { return row(dtype).name; }
std::uint64_t dtype_size(DType dtype) { return row(dtype).size; }
bool is_float_dtype(DType dtype) { return row(dtype).is_float; }
std::string_view known_dtype_names() { return "F32, F16, BF16, I8, U8, I32, I64"; }

}  // namespace coli::model
