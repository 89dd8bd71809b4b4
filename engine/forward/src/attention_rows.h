// The few loops attention spends its time in, one table per instruction set
// (attention_rows_{scalar,avx2,avx512}.cpp), chosen once for this CPU. Every
// variant accumulates in f32; widening f16 and bf16 is exact in all of them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "coli/base/kv_type.h"

namespace coli::forward::detail {

struct AttentionRowOps {
  const char* isa;  // "avx512", "avx2", "scalar"
  // out[0..n) = the n stored values of `row` as f32 (f16, bf16; f32 rows are read in place).
  void (*widen)(const std::byte* row, KvType type, float* out, int n);
  float (*dot)(const float* a, const float* b, int n);
  void (*axpy)(float w, const float* x, float* y, int n);                  // y += w x
  void (*rescale_add)(float a, float* y, float b, const float* x, int n);  // y = a y + b x
  // Optional (null: widen, dot and axpy row by row), for n a multiple of 16:
  // the same sums over `count` consecutive rows of a head block, row_bytes
  // apart, converting in registers instead of through a widened copy.
  //   scores[i] = dot(q, row i)            (bit for bit dot's result)
  //   acc += w[i] row i, i = 0, 1, ...     (bit for bit axpy's, in that order)
  void (*dot_rows)(const float* q, const std::byte* rows, std::uint64_t row_bytes, KvType type, int count, int n,
                   float* scores) = nullptr;
  void (*axpy_rows)(const float* w, const std::byte* rows, std::uint64_t row_bytes, KvType type, int count, int n,
                    float* acc) = nullptr;
};

const AttentionRowOps& scalar_row_ops();
const AttentionRowOps& avx2_row_ops();
const AttentionRowOps& avx512_row_ops();
const AttentionRowOps& best_row_ops();  // the widest this CPU (and its OS) runs

// Scalar widening of one element (the SIMD variants' tails use it too).
float widen_one(const std::byte* row, KvType type, int index);

}  // namespace coli::forward::detail
