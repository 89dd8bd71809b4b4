// The memory traffic of one decode step, counted from a container's index
// the way MoeModel::forward reads it: every dense matrix of every layer
// (attention, router, shared experts), top_k expert records per MoE layer,
// the lm_head, one embedding row, the f32 norm vectors and the KV cache the
// attention scans. The quotient of a measured memory bandwidth by this sum
// is the speed no implementation can beat on that machine.
#pragma once

#include <cstdint>
#include <string>

#include "coli/base/result.h"
#include "coli/container/container.h"

namespace coli::bench {

struct TokenTraffic {
  std::uint64_t attention = 0;     // q, k, v, o (+ biases), all layers
  std::uint64_t router = 0;        // MoE gates, all layers
  std::uint64_t other_dense = 0;   // dense MLPs, shared experts, norm vectors
  std::uint64_t experts = 0;       // top_k records per MoE layer (meaningful bytes, not the 4 KiB stride)
  std::uint64_t lm_head = 0;
  std::uint64_t embedding_row = 0;
  std::uint64_t kv_cache = 0;      // K and V (f32) read by attention, averaged over the decoded positions
  std::uint64_t total() const {
    return attention + router + other_dense + experts + lm_head + embedding_row + kv_cache;
  }
};

// Decode positions are first_position .. first_position + tokens - 1.
Result<TokenTraffic> decode_traffic(const container::ContainerReader& reader, int first_position, int tokens);

std::string describe_traffic(const TokenTraffic& traffic);

}  // namespace coli::bench
