// Causal grouped-query attention over a KvCache, in f32 with SIMD row loops
// (AVX-512, AVX2 or scalar, chosen for this CPU).
//
// Work is cut into tiles of kAttentionTile positions at fixed boundaries;
// each (query row, tile) gives a softmax partial (max, sum, weighted values)
// and a row merges its tiles in position order. The cut never depends on the
// thread count or on how many tokens one call carries, so the output is
// bit-identical for any `threads`, and a batch of tokens gives exactly what
// the same tokens give one call at a time.
//   decode (one token): threads split (kv_head, tile) (split-K), so a few KV
//     heads or a long context still keep every thread busy; the heads of a
//     GQA group share each K and V row load;
//   prefill (many tokens): threads split (kv_head, block of tokens); each K
//     and V row is widened once per block and used by all its query rows.
// Scratch is kept per thread between calls: no allocation once warm.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "coli/forward/kv_cache.h"

namespace coli::forward {

inline constexpr int kAttentionTile = 64;
inline constexpr int kAttentionRowsPerBlock = 32;  // prefill: query rows (tokens x group heads) per block

// The scratch attention keeps (bytes, f32): the split-K partials of one
// decode token (every KV head's tiles: max, sum and head_dim values per
// query head), and per thread a widened K and V row, a tile of scores and
// the tile and running partials of one prefill block. The planner prices it.
inline std::uint64_t attention_scratch_bytes(std::uint64_t heads, std::uint64_t kv_heads, std::uint64_t head_dim,
                                             std::uint64_t ctx, std::uint64_t threads) {
  const std::uint64_t tiles = (ctx + kAttentionTile - 1) / kAttentionTile;
  const std::uint64_t rows = std::max<std::uint64_t>(kAttentionRowsPerBlock, heads / kv_heads);
  const std::uint64_t per_thread = 2 * head_dim + rows * kAttentionTile + 2 * rows * (head_dim + 2);
  return 4 * (tiles * heads * (head_dim + 2) + threads * per_thread);
}

enum class AttentionIsa { best, scalar, avx2, avx512 };
bool attention_isa_supported(AttentionIsa isa);  // this CPU and OS run it
const char* attention_isa_name(AttentionIsa isa);  // best: the one it resolves to here

// `count` query tokens at positions first_position .. first_position+count-1
// (their K and V already stored); token t sees positions <= first_position + t.
// q, out: count x heads x head_dim (token-major); heads a multiple of the
// cache's kv_heads (query head h reads KV head h / (heads / kv_heads)).
// Throws std::invalid_argument on a shape outside the cache (a programming error).
void attention(const KvCache& cache, int layer, std::span<const float> q, int count, int first_position, int heads,
               std::span<float> out, int threads, AttentionIsa isa = AttentionIsa::best);

}  // namespace coli::forward
