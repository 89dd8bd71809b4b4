#include "coli/base/weight_format.h"

#include <string>

namespace coli {
namespace {

// Indexed by the enum's value. Quantised parts are 64-byte aligned in expert
// records and dense tensors so SIMD loads of a row never split a cache line
// more than they must; float formats need only their element alignment.
constexpr std::array<WeightFormatTraits, 5> kTraits = {{
    {WeightFormat::f32, "f32", "F32", 32, 1, 0, false, 4, true, false, false, true},
    {WeightFormat::bf16, "bf16", "BF16", 16, 1, 0, false, 2, true, false, false, false},
    {WeightFormat::f16, "f16", "F16", 16, 1, 0, false, 2, true, false, false, false},
    {WeightFormat::q8_row, "q8_row", "Q8_ROW", 8, kBlockIsRow, 4, true, 64, false, true, true, true},
    {WeightFormat::q4_g64, "q4_g64", "Q4_G64", 4, 64, 2, true, 64, false, true, true, true},
}};

template <class NameOf>
std::string choices(NameOf name_of_traits) {
  std::string out;
  for (const WeightFormatTraits& t : kTraits) {
    if (!out.empty()) out += ", ";
    out += name_of_traits(t);
  }
  return out;
}

}  // namespace

const WeightFormatTraits& traits(WeightFormat format) { return kTraits[static_cast<std::size_t>(format)]; }

bool WeightFormatTraits::valid_cols(std::uint64_t cols) const {
  return block_cols == kBlockIsRow || cols % block_cols == 0;
}

std::uint64_t WeightFormatTraits::blocks_per_row(std::uint64_t cols) const {
  if (block_cols == kBlockIsRow) return 1;
  return cols / block_cols;
}

std::uint64_t WeightFormatTraits::weight_bytes(std::uint64_t rows, std::uint64_t cols) const {
  return rows * cols * weight_bits / 8;
}

std::uint64_t WeightFormatTraits::scale_bytes_of(std::uint64_t rows, std::uint64_t cols) const {
  return rows * blocks_per_row(cols) * scale_bytes;
}

std::uint64_t WeightFormatTraits::scales_offset(std::uint64_t rows, std::uint64_t cols) const {
  const std::uint64_t weights = weight_bytes(rows, cols);
  if (!quantized) return weights;
  return (weights + kScalesAlignment - 1) / kScalesAlignment * kScalesAlignment;
}

std::uint64_t WeightFormatTraits::matrix_bytes(std::uint64_t rows, std::uint64_t cols) const {
  return scales_offset(rows, cols) + scale_bytes_of(rows, cols);
}

Result<WeightFormat> parse_weight_format(std::string_view name, std::string_view where) {
  for (const WeightFormatTraits& t : kTraits) {
    if (t.name == name) return t.format;
  }
  return make_error(std::string(where) + ": unknown weight format '" + std::string(name) + "' (valid: " +
                    choices([](const WeightFormatTraits& t) { return t.name; }) + ")");
}

Result<WeightFormat> parse_container_dtype(std::string_view dtype, std::string_view where) {
  for (const WeightFormatTraits& t : kTraits) {
    if (t.container_dtype == dtype) return t.format;
  }
  return make_error(std::string(where) + ": unknown dtype '" + std::string(dtype) + "' (valid: " +
                    choices([](const WeightFormatTraits& t) { return t.container_dtype; }) + ")");
}

std::string_view dense_format_name(DenseFormat format) {
  switch (format) {
    case DenseFormat::source: return "source";
    case DenseFormat::q8_row: return name_of(WeightFormat::q8_row);
    case DenseFormat::q4_g64: return name_of(WeightFormat::q4_g64);
  }
  return "source";
}

Result<DenseFormat> parse_dense_format(std::string_view name, std::string_view where) {
  for (DenseFormat f : {DenseFormat::source, DenseFormat::q8_row, DenseFormat::q4_g64}) {
    if (dense_format_name(f) == name) return f;
  }
  return make_error(std::string(where) + ": unknown dense format '" + std::string(name) +
                    "' (valid: source, q8_row, q4_g64)");
}

std::optional<WeightFormat> quantized_format(DenseFormat format) {
  switch (format) {
    case DenseFormat::source: return std::nullopt;
    case DenseFormat::q8_row: return WeightFormat::q8_row;
    case DenseFormat::q4_g64: return WeightFormat::q4_g64;
  }
  return std::nullopt;
}

DenseFormat dense_format_of(WeightFormat quantized) {
  if (quantized == WeightFormat::q8_row) return DenseFormat::q8_row;
  if (quantized == WeightFormat::q4_g64) return DenseFormat::q4_g64;
  return DenseFormat::source;
}

}  // namespace coli
