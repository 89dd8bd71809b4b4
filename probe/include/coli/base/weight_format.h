// The one vocabulary for how a weight matrix is stored: the container, the
// converter, the CPU kernels, the shaders, the forward ops and the planner all
// speak WeightFormat, and everything they need to know about a format (its
// names, its block, its bytes, which kernels serve it) is in its traits, so no
// component keeps its own formula or string comparison.
//
// Byte layout of a rows x cols matrix (the container's, for dense tensors):
//   weights  rows * cols elements of `weight_bits` each, row-major;
//   scales   at scales_offset() (the weights' end rounded up to 64 bytes),
//            rows * blocks_per_row(cols) scales of `scale_bytes` each.
//   f32/bf16/f16: plain elements, no scales.
//   q8_row: int8 weights, one float32 scale per row.
//   q4_g64: int4 nibbles (two per byte, low nibble first), one binary16 scale
//           per group of 64 columns; cols must be a multiple of 64.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "coli/base/result.h"

namespace coli {

enum class WeightFormat : std::uint8_t { f32, bf16, f16, q8_row, q4_g64 };

inline constexpr std::array<WeightFormat, 5> kAllWeightFormats = {WeightFormat::f32, WeightFormat::bf16, WeightFormat::f16,
                                                                  WeightFormat::q8_row, WeightFormat::q4_g64};

// block_cols value meaning "one block per row, whatever its length" (q8_row).
inline constexpr std::uint32_t kBlockIsRow = 0;
// Scales start on this boundary after the weights (cache-line aligned loads).
inline constexpr std::uint64_t kScalesAlignment = 64;

struct WeightFormatTraits {
  WeightFormat format = WeightFormat::f32;
  std::string_view name;             // in files, plans and on the command line: "q4_g64"
  std::string_view container_dtype;  // a dense tensor's dtype in the container index: "Q4_G64"
  std::uint32_t weight_bits = 32;    // per element
  std::uint32_t block_cols = 1;      // columns sharing one scale; kBlockIsRow for a whole row
  std::uint32_t scale_bytes = 0;     // per block; 0 for float formats
  bool quantized = false;
  std::uint32_t alignment = 4;       // bytes the kernels need the weights (and scales) aligned to
  bool cpu_float_kernels = false;    // forward::gemv_dense / dense_row serve it
  bool cpu_int8_kernels = false;     // kernels::cpu (int8 activations) serve it
  bool gpu_shaders = false;          // shaders::gemv_catalogue() has variants for it
  bool expert_records = false;       // coli convert can store routed experts in it (q4_g64, q8_row, f32)

  // cols fits the format (q4_g64: a multiple of 64).
  bool valid_cols(std::uint64_t cols) const;
  std::uint64_t blocks_per_row(std::uint64_t cols) const;
  std::uint64_t weight_bytes(std::uint64_t rows, std::uint64_t cols) const;
  std::uint64_t scale_bytes_of(std::uint64_t rows, std::uint64_t cols) const;
  std::uint64_t scales_offset(std::uint64_t rows, std::uint64_t cols) const;
  // The whole matrix: weights, padding, scales.
  std::uint64_t matrix_bytes(std::uint64_t rows, std::uint64_t cols) const;
};

const WeightFormatTraits& traits(WeightFormat format);
inline std::string_view name_of(WeightFormat format) { return traits(format).name; }

// "q4_g64" -> WeightFormat::q4_g64. The error names `where` (the file and
// field, or the option) and lists the valid names.
Result<WeightFormat> parse_weight_format(std::string_view name, std::string_view where);
// The container's dtype string ("Q4_G64", "BF16", ...), likewise.
Result<WeightFormat> parse_container_dtype(std::string_view dtype, std::string_view where);

// How a container holds its dense projections (attention, lm_head, shared
// experts): as the checkpoint's own dtype, or quantised to one format.
// Embeddings, norms, biases and the router always keep their dtype.
enum class DenseFormat : std::uint8_t { source, q8_row, q4_g64 };

std::string_view dense_format_name(DenseFormat format);  // "source", "q8_row", "q4_g64"
Result<DenseFormat> parse_dense_format(std::string_view name, std::string_view where);
// The quantised format projections take; nullopt for source.
std::optional<WeightFormat> quantized_format(DenseFormat format);
DenseFormat dense_format_of(WeightFormat quantized);  // q8_row/q4_g64 -> the same; others -> source

}  // namespace coli
