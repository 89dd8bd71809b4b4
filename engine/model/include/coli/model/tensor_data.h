// Reading tensor bytes without loading whole files: pread of a byte range, or
// a read-only mapping of it, and conversion of F32/F16/BF16 rows to float.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "coli/base/result.h"
#include "coli/model/dtype.h"
#include "coli/model/safetensors.h"

namespace coli::model {

// Reads `length` bytes starting `offset` bytes into the tensor's data.
Result<std::vector<std::byte>> read_tensor_bytes(const TensorInfo& tensor, std::uint64_t offset,
                                                 std::uint64_t length);

// A read-only mapping of part of a tensor; unmapped on destruction.
class MappedRange {
 public:
  static Result<MappedRange> map(const TensorInfo& tensor, std::uint64_t offset, std::uint64_t length);
  MappedRange(MappedRange&& other) noexcept;
  MappedRange& operator=(MappedRange&& other) noexcept;
  MappedRange(const MappedRange&) = delete;
  MappedRange& operator=(const MappedRange&) = delete;
  ~MappedRange();

  std::span<const std::byte> bytes() const { return {data_, length_}; }

 private:
  MappedRange() = default;
  void release();
  void* mapping_ = nullptr;
  std::size_t mapping_length_ = 0;
  const std::byte* data_ = nullptr;
  std::size_t length_ = 0;
};

float f16_to_f32(std::uint16_t bits);
float bf16_to_f32(std::uint16_t bits);

// Converts little-endian F32/F16/BF16 elements to float; `out` must hold
// src.size() / dtype_size(dtype) elements. Integer dtypes are refused.
Status convert_to_f32(DType dtype, std::span<const std::byte> src, std::span<float> out);

// Row `row` of a 2-D (or 1-D: row 0) floating tensor, as float.
Result<std::vector<float>> read_row_f32(const TensorInfo& tensor, std::uint64_t row);

}  // namespace coli::model
