// The decoder's KV cache: keys and values of every layer, laid out
// [layer][K|V][kv_head][position][head_dim], so the rows one KV head reads
// for attention stream from one contiguous block (the old [position][kv
// width] layout strided across heads). Elements are f32, f16 or bf16
// (coli/base/kv_type.h); values are rounded to nearest-even when stored and
// widened to f32 when read, and attention accumulates in f32.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

#include "coli/base/kv_type.h"

namespace coli::forward {

class KvCache {
 public:
  KvCache() = default;
  // Room for `capacity` positions of `layers` layers; the memory is
  // reserved, pages are touched as positions fill. bytes() ==
  // kv_cache_bytes(layers, kv_heads, head_dim, capacity, type).
  KvCache(int layers, int kv_heads, int head_dim, int capacity, KvType type);

  // k and v of one token (kv_heads * head_dim values each, heads in order),
  // converted to the cache's type.
  void store(int layer, int position, std::span<const float> k, std::span<const float> v);

  // The first element of one head's rows (row p at p * row_bytes()).
  const std::byte* keys(int layer, int kv_head) const { return block(layer, 0, kv_head); }
  const std::byte* values(int layer, int kv_head) const { return block(layer, 1, kv_head); }
  std::uint64_t row_bytes() const { return static_cast<std::uint64_t>(head_dim_) * kv_element_bytes(type_); }

  int layers() const { return layers_; }
  int kv_heads() const { return kv_heads_; }
  int head_dim() const { return head_dim_; }
  int capacity() const { return capacity_; }
  KvType type() const { return type_; }
  std::uint64_t bytes() const;

 private:
  std::byte* block(int layer, int kind, int kv_head) const;  // kind 0: keys, 1: values
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte[], Free> data_;
  int layers_ = 0, kv_heads_ = 0, head_dim_ = 0, capacity_ = 0;
  KvType type_ = KvType::f32;
};

// One value as the cache stores it and reads it back (f32: unchanged;
// f16 and bf16: rounded to nearest even). Tests derive their tolerances from it.
float kv_round_trip(float value, KvType type);

}  // namespace coli::forward
