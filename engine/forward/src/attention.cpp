#include "coli/forward/attention.h"


#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention_rows.h"
#include "coli/forward/ops.h"

namespace coli::forward {
namespace {

using detail::AttentionRowOps;

constexpr float kNoRow = -std::numeric_limits<float>::infinity();  // a row with no position in the tile
// Prefill: query rows (tokens x group heads) per block; a tile's K/V rows
// stay in L1/L2 while every row of the block reads them, and a block's
// scratch stays in L2.
constexpr int kRowsPerBlock = kAttentionRowsPerBlock;

// What one call reads: the cache's KV head `kv_head` of `layer`, the
// row-loop table and the score scale.
struct Head {
  const KvCache& cache;
  int layer;
  int kv_head;
  const AttentionRowOps& ops;
  float scale;
};

// Softmax partials of query rows over one tile: max, sum and the unnormalised
// weighted sum of values. Row r sees positions <= limit[r].
struct Partials {
  float* max;  // rows
  float* sum;  // rows
  float* acc;  // rows x head_dim
};

// Per-thread scratch, grown to what a call needs and kept.
struct Scratch {
  std::vector<float> key, value, scores, tile_max, tile_sum, tile_acc, run_max, run_sum, run_acc;
  std::vector<const float*> q_rows;
  std::vector<int> limits;
  void fit(int rows, int head_dim) {
    const auto r = static_cast<std::size_t>(rows), d = static_cast<std::size_t>(head_dim);
    for (auto* v : {&key, &value}) v->resize(std::max(v->size(), d));
    scores.resize(std::max(scores.size(), r * kAttentionTile));
    for (auto* v : {&tile_max, &tile_sum, &run_max, &run_sum}) v->resize(std::max(v->size(), r));
    for (auto* v : {&tile_acc, &run_acc}) v->resize(std::max(v->size(), r * d));
    q_rows.resize(std::max(q_rows.size(), r));
    limits.resize(std::max(limits.size(), r));
  }
};

Scratch& thread_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// Row `position` of a head block as f32: in place for f32, else widened into `buffer`.
const float* row_as_f32(const Head& head, const std::byte* block, int position, float* buffer) {
  const std::byte* row = block + static_cast<std::uint64_t>(position) * head.cache.row_bytes();
  if (head.cache.type() == KvType::f32) return reinterpret_cast<const float*>(row);
  head.ops.widen(row, head.cache.type(), buffer, head.cache.head_dim());
  return buffer;
}

// The table's fused row loops where it has them (AVX-512, head_dim a
// multiple of 16): each query row's keys and values convert in registers and
// its value sums stay in registers over the tile (decode 2.2-2.4x, prefill
// blocks 1.75x faster than widening each row to memory once for all query
// rows on the 2-core VM). Both give the same bits.
bool fused_rows(const Head& head) { return head.ops.dot_rows != nullptr && head.cache.head_dim() % 16 == 0; }

// scores[r][p - first] = q_r . k_p * scale for the positions row r sees.
void tile_scores(const Head& head, const float* const* q_rows, const int* limits, int rows, int first, int end, Scratch& s) {
  const int head_dim = head.cache.head_dim();
  const std::byte* keys = head.cache.keys(head.layer, head.kv_head);
  if (fused_rows(head)) {
    const std::uint64_t row_bytes = head.cache.row_bytes();
    for (int r = 0; r < rows; ++r) {
      float* w = s.scores.data() + static_cast<std::size_t>(r) * kAttentionTile;
      const int seen = std::min(end, limits[r] + 1) - first;
      if (seen <= 0) continue;
      head.ops.dot_rows(q_rows[r], keys + first * row_bytes, row_bytes, head.cache.type(), seen, head_dim, w);
      for (int i = 0; i < seen; ++i) w[i] = w[i] * head.scale;
    }
    return;
  }
  for (int p = first; p < end; ++p) {
    const float* k = row_as_f32(head, keys, p, s.key.data());
    for (int r = 0; r < rows; ++r) {
      if (p <= limits[r]) s.scores[static_cast<std::size_t>(r) * kAttentionTile + (p - first)] = head.ops.dot(q_rows[r], k, head_dim) * head.scale;
    }
  }
}

// acc_r += weight_rp v_p over the positions row r sees, in position order.
void tile_values(const Head& head, const int* limits, int rows, int first, int end, Scratch& s, float* acc) {
  const int head_dim = head.cache.head_dim();
  const std::byte* values = head.cache.values(head.layer, head.kv_head);
  if (fused_rows(head)) {
    const std::uint64_t row_bytes = head.cache.row_bytes();
    for (int r = 0; r < rows; ++r) {
      const int seen = std::min(end, limits[r] + 1) - first;
      if (seen <= 0) continue;
      head.ops.axpy_rows(s.scores.data() + static_cast<std::size_t>(r) * kAttentionTile, values + first * row_bytes, row_bytes,
                         head.cache.type(), seen, head_dim, acc + static_cast<std::size_t>(r) * head_dim);
    }
    return;
  }
  for (int p = first; p < end; ++p) {
    const float* v = row_as_f32(head, values, p, s.value.data());
    for (int r = 0; r < rows; ++r) {
      if (p > limits[r]) continue;
      const float weight = s.scores[static_cast<std::size_t>(r) * kAttentionTile + (p - first)];
      head.ops.axpy(weight, v, acc + static_cast<std::size_t>(r) * head_dim, head_dim);
    }
  }
}

// The partials of `rows` query rows over positions [first, first + kAttentionTile).
void tile_partials(const Head& head, const float* const* q_rows, const int* limits, int rows, int first, Scratch& s,
                   Partials out) {
  const int head_dim = head.cache.head_dim();
  const int end = std::min(first + kAttentionTile, *std::max_element(limits, limits + rows) + 1);
  tile_scores(head, q_rows, limits, rows, first, end, s);
  for (int r = 0; r < rows; ++r) {
    float* w = s.scores.data() + static_cast<std::size_t>(r) * kAttentionTile;
    const int seen = std::min(end, limits[r] + 1) - first;
    out.max[r] = seen > 0 ? *std::max_element(w, w + seen) : kNoRow;
    float sum = 0;
    if (seen > 0) exp_shifted(std::span(w, static_cast<std::size_t>(seen)), out.max[r]);
    for (int i = 0; i < seen; ++i) sum += w[i];  // in position order, as before
    out.sum[r] = sum;
    std::fill_n(out.acc + static_cast<std::size_t>(r) * head_dim, head_dim, 0.0f);
  }
  tile_values(head, limits, rows, first, end, s, out.acc);
}

// Running state of one row (max, sum, acc) += one tile's partial, in position order.
void merge(const AttentionRowOps& ops, float& run_max, float& run_sum, float* run_acc, float max, float sum,
           const float* acc, int head_dim) {
  if (max == kNoRow) return;
  const float merged = std::max(run_max, max);
  const float old_scale = std::exp(run_max - merged), new_scale = std::exp(max - merged);
  run_sum = run_sum * old_scale + sum * new_scale;
  ops.rescale_add(old_scale, run_acc, new_scale, acc, head_dim);
  run_max = merged;
}

void finish(float run_sum, const float* run_acc, float* out, int head_dim) {
  for (int d = 0; d < head_dim; ++d) out[d] = run_acc[d] / run_sum;
}

struct Call {
  const KvCache& cache;
  int layer, heads, group, head_dim;
  const AttentionRowOps& ops;
  float scale;
  Head head(int kv_head) const { return Head{cache, layer, kv_head, ops, scale}; }
};

// One token at `position`: (kv_head, tile) items in parallel, each writing
// its group's partials; then each query head merges its tiles in order.
void decode(const Call& c, const float* q, int position, float* out, int threads) {
  const int kv_heads = c.cache.kv_heads(), tiles = position / kAttentionTile + 1, group = c.group, d = c.head_dim;
  const std::size_t per_item = static_cast<std::size_t>(group) * (d + 2);
  thread_local std::vector<float> partials;  // the calling thread's, shared by the team
  partials.resize(std::max(partials.size(), static_cast<std::size_t>(kv_heads) * tiles * per_item));
  float* const stash = partials.data();
#pragma omp parallel num_threads(std::max(1, threads))
  {
    Scratch& s = thread_scratch();
    s.fit(group, d);
#pragma omp for schedule(static)
    for (int item = 0; item < kv_heads * tiles; ++item) {
      const int kv_head = item / tiles, tile = item % tiles;
      for (int g = 0; g < group; ++g) {
        s.q_rows[static_cast<std::size_t>(g)] = q + static_cast<std::size_t>(kv_head * group + g) * d;
        s.limits[static_cast<std::size_t>(g)] = position;
      }
      float* base = stash + static_cast<std::size_t>(item) * per_item;
      tile_partials(c.head(kv_head), s.q_rows.data(), s.limits.data(), group, tile * kAttentionTile, s,
                    Partials{base, base + group, base + 2 * group});
      // One tile (a context shorter than a tile): merging it into the empty
      // running state gives its own sum and acc exactly, so finish here and
      // skip the merge loop and its barrier.
      for (int g = 0; g < group && tiles == 1; ++g) {
        finish(base[group + g], base + 2 * group + static_cast<std::size_t>(g) * d,
               out + static_cast<std::size_t>(kv_head * group + g) * d, d);
      }
    }
    if (tiles > 1) {  // the same for the whole team, so every thread meets this loop or none does
#pragma omp for schedule(static)
      for (int h = 0; h < c.heads; ++h) {
        const int kv_head = h / group, g = h % group;
        float run_max = kNoRow, run_sum = 0;
        float* run_acc = s.run_acc.data();
        std::fill_n(run_acc, d, 0.0f);
        for (int tile = 0; tile < tiles; ++tile) {
          const float* base = stash + static_cast<std::size_t>(kv_head * tiles + tile) * per_item;
          merge(c.ops, run_max, run_sum, run_acc, base[g], base[group + g], base + 2 * group + static_cast<std::size_t>(g) * d, d);
        }
        finish(run_sum, run_acc, out + static_cast<std::size_t>(h) * d, d);
      }
    }
  }
}

// A block of tokens [first_token, first_token + tokens) of one KV head: every
// tile up to the block's last position, merged row by row as they come.
void prefill_block(const Call& c, int kv_head, const float* q, int first_position, int first_token, int tokens,
                   float* out, Scratch& s) {
  const int rows = tokens * c.group, d = c.head_dim;
  for (int r = 0; r < rows; ++r) {
    const int t = first_token + r / c.group, h = kv_head * c.group + r % c.group;
    s.q_rows[static_cast<std::size_t>(r)] = q + (static_cast<std::size_t>(t) * c.heads + h) * d;
    s.limits[static_cast<std::size_t>(r)] = first_position + t;
    s.run_max[static_cast<std::size_t>(r)] = kNoRow;
    s.run_sum[static_cast<std::size_t>(r)] = 0;
  }
  std::fill_n(s.run_acc.data(), static_cast<std::size_t>(rows) * d, 0.0f);
  const int last = first_position + first_token + tokens - 1;
  for (int first = 0; first <= last; first += kAttentionTile) {
    tile_partials(c.head(kv_head), s.q_rows.data(), s.limits.data(), rows, first, s,
                  Partials{s.tile_max.data(), s.tile_sum.data(), s.tile_acc.data()});
    for (int r = 0; r < rows; ++r) {
      const std::size_t offset = static_cast<std::size_t>(r) * d;
      merge(c.ops, s.run_max[static_cast<std::size_t>(r)], s.run_sum[static_cast<std::size_t>(r)], s.run_acc.data() + offset,
            s.tile_max[static_cast<std::size_t>(r)], s.tile_sum[static_cast<std::size_t>(r)], s.tile_acc.data() + offset, d);
    }
  }
  for (int r = 0; r < rows; ++r) {
    const int t = first_token + r / c.group, h = kv_head * c.group + r % c.group;
    finish(s.run_sum[static_cast<std::size_t>(r)], s.run_acc.data() + static_cast<std::size_t>(r) * d,
           out + (static_cast<std::size_t>(t) * c.heads + h) * d, d);
  }
}

void prefill(const Call& c, const float* q, int count, int first_position, float* out, int threads) {
  const int kv_heads = c.cache.kv_heads(), per_block = std::max(1, kRowsPerBlock / c.group);
  const int blocks = (count + per_block - 1) / per_block;
#pragma omp parallel num_threads(std::max(1, threads))
  {
    Scratch& s = thread_scratch();
    s.fit(per_block * c.group, c.head_dim);
    // Later blocks see more positions: hand them out first.
#pragma omp for schedule(dynamic, 1)
    for (int item = 0; item < kv_heads * blocks; ++item) {
      const int block = blocks - 1 - item / kv_heads, kv_head = item % kv_heads;
      const int first_token = block * per_block;
      prefill_block(c, kv_head, q, first_position, first_token, std::min(per_block, count - first_token), out, s);
    }
  }
}

const AttentionRowOps& ops_of(AttentionIsa isa) {
  switch (isa) {
    case AttentionIsa::best: return detail::best_row_ops();
    case AttentionIsa::scalar: return detail::scalar_row_ops();
    case AttentionIsa::avx2: return detail::avx2_row_ops();
    case AttentionIsa::avx512: return detail::avx512_row_ops();
  }
  return detail::scalar_row_ops();
}

void check_shape(const KvCache& cache, int layer, std::size_t q_size, int count, int first_position, int heads,
                 std::size_t out_size, AttentionIsa isa) {
  const std::size_t values = static_cast<std::size_t>(count) * heads * cache.head_dim();
  std::string problem;
  if (layer < 0 || layer >= cache.layers()) problem = "layer " + std::to_string(layer) + " is not in the cache";
  else if (count < 1 || first_position < 0 || first_position + count > cache.capacity()) problem = "positions past the cache";
  else if (heads < cache.kv_heads() || heads % cache.kv_heads() != 0) problem = "heads is not a multiple of kv_heads";
  else if (q_size != values || out_size != values) problem = "q or out is not count x heads x head_dim";
  else if (!attention_isa_supported(isa)) problem = std::string(attention_isa_name(isa)) + " is not supported here";
  if (!problem.empty()) throw std::invalid_argument("attention: " + problem);
}

}  // namespace

bool attention_isa_supported(AttentionIsa isa) {
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  switch (isa) {
    case AttentionIsa::best:
    case AttentionIsa::scalar: return true;
    case AttentionIsa::avx2: return avx2;
    case AttentionIsa::avx512: return avx2 && __builtin_cpu_supports("avx512f");
  }
  return false;
}

const char* attention_isa_name(AttentionIsa isa) { return ops_of(isa).isa; }

void attention(const KvCache& cache, int layer, std::span<const float> q, int count, int first_position, int heads,
               std::span<float> out, int threads, AttentionIsa isa) {
  check_shape(cache, layer, q.size(), count, first_position, heads, out.size(), isa);
  const Call call{cache, layer, heads, heads / cache.kv_heads(), cache.head_dim(), ops_of(isa),
                  static_cast<float>(1.0 / std::sqrt(static_cast<double>(cache.head_dim())))};
  const int per_block = std::max(1, kRowsPerBlock / call.group);
  const int blocks = (count + per_block - 1) / per_block;
  // Too few (kv_head, block) items to keep the threads busy (a few tokens
  // over a long context): token by token, split over positions. Both paths
  // give the same bits.
  if (count == 1 || cache.kv_heads() * blocks < threads) {
    const std::size_t stride = static_cast<std::size_t>(heads) * cache.head_dim();
    for (int t = 0; t < count; ++t) decode(call, q.data() + t * stride, first_position + t, out.data() + t * stride, threads);
    return;
  }
  prefill(call, q.data(), count, first_position, out.data(), threads);
}

}  // namespace coli::forward
