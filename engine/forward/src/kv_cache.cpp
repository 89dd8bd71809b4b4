#include "coli/forward/kv_cache.h"

#include <bit>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <new>
#include <stdexcept>
#include <string>

#include "reference/gemv_reference.h"

namespace coli::forward {
namespace {

constexpr std::size_t kAlignment = 64;  // rows start on cache lines when head_dim allows

std::uint16_t float_to_bf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // NaN stays NaN
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // to nearest, ties to even
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float bf16_to_f32(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

void halves_portable(const float* in, std::uint16_t* out, int n) {
  for (int d = 0; d < n; ++d) out[d] = kernels::float_to_half(in[d]);
}

#if defined(__x86_64__)
// F16C's conversion rounds to nearest even like kernels::float_to_half, 8
// values per instruction (the portable loop took ~9 ns a value: half a
// millisecond of every decode token at 16 layers x 4096 values). A group
// holding a NaN takes the portable path, which gives the canonical NaN.
__attribute__((target("avx2,f16c"))) void halves_f16c(const float* in, std::uint16_t* out, int n) {
  int d = 0;
  for (; d + 8 <= n; d += 8) {
    const __m256 x = _mm256_loadu_ps(in + d);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
      halves_portable(in + d, out + d, 8);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + d), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  halves_portable(in + d, out + d, n - d);
}
#endif

void to_halves(const float* in, std::uint16_t* out, int n) {
#if defined(__x86_64__)
  static const bool f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  if (f16c) return halves_f16c(in, out, n);
#endif
  halves_portable(in, out, n);
}

}  // namespace

KvCache::KvCache(int layers, int kv_heads, int head_dim, int capacity, KvType type)
    : layers_(layers), kv_heads_(kv_heads), head_dim_(head_dim), capacity_(capacity), type_(type) {
  if (layers < 1 || kv_heads < 1 || head_dim < 1 || capacity < 1) {
    throw std::invalid_argument("KvCache: layers, kv_heads, head_dim and capacity must be positive");
  }
  const std::size_t size = (bytes() + kAlignment - 1) / kAlignment * kAlignment;
  data_.reset(static_cast<std::byte*>(std::aligned_alloc(kAlignment, size)));
  if (!data_) throw std::bad_alloc();
}

std::uint64_t KvCache::bytes() const {
  return kv_cache_bytes(static_cast<std::uint64_t>(layers_), static_cast<std::uint64_t>(kv_heads_),
                        static_cast<std::uint64_t>(head_dim_), static_cast<std::uint64_t>(capacity_), type_);
}

std::byte* KvCache::block(int layer, int kind, int kv_head) const {
  const std::uint64_t head_block = static_cast<std::uint64_t>(capacity_) * row_bytes();
  const std::uint64_t index = (static_cast<std::uint64_t>(layer) * 2 + static_cast<std::uint64_t>(kind)) * kv_heads_ + kv_head;
  return data_.get() + index * head_block;
}

void KvCache::store(int layer, int position, std::span<const float> k, std::span<const float> v) {
  const std::size_t width = static_cast<std::size_t>(kv_heads_) * head_dim_;
  if (layer < 0 || layer >= layers_ || position < 0 || position >= capacity_ || k.size() != width || v.size() != width) {
    throw std::invalid_argument("KvCache::store: layer " + std::to_string(layer) + ", position " + std::to_string(position) +
                                " or a row size is outside the cache");
  }
  for (int kind = 0; kind < 2; ++kind) {
    const float* source = (kind == 0 ? k : v).data();
    for (int h = 0; h < kv_heads_; ++h) {
      std::byte* row = block(layer, kind, h) + static_cast<std::uint64_t>(position) * row_bytes();
      const float* in = source + static_cast<std::size_t>(h) * head_dim_;
      if (type_ == KvType::f32) {
        std::memcpy(row, in, static_cast<std::size_t>(head_dim_) * sizeof(float));
        continue;
      }
      auto* out = reinterpret_cast<std::uint16_t*>(row);
      if (type_ == KvType::f16) to_halves(in, out, head_dim_);
      else for (int d = 0; d < head_dim_; ++d) out[d] = float_to_bf16(in[d]);
    }
  }
}

float kv_round_trip(float value, KvType type) {
  switch (type) {
    case KvType::f32: return value;
    case KvType::f16: return kernels::half_to_float(kernels::float_to_half(value));
    case KvType::bf16: return bf16_to_f32(float_to_bf16(value));
  }
  return value;
}

}  // namespace coli::forward
