// The decoder's kernels for one device, and their push constants (mirrors of
// the `Push` blocks in shaders/decoder/*.comp: addresses as 64-bit words,
// which std430 aligns like uvec2).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coli/base/weight_format.h"
#include "coli/shaders/decoder_modules.h"
#include "vulkan/decoder/kernel.h"

namespace coli::vulkan {

// The kernels' FORMAT constant is the WeightFormat's number (weight_dot.glsl).
static_assert(static_cast<int>(WeightFormat::f32) == 0 && static_cast<int>(WeightFormat::bf16) == 1 &&
              static_cast<int>(WeightFormat::f16) == 2 && static_cast<int>(WeightFormat::q8_row) == 3 &&
              static_cast<int>(WeightFormat::q4_g64) == 4);
inline constexpr int kKernelFormats = 5;

struct MatvecPush {
  std::uint64_t w, s, x, y, bias;
  std::uint32_t rows, cols, x_stride, y_stride, tokens, accumulate;
};
struct ExpertGateUpPush {
  std::uint64_t experts, slots, route_ids, x, act;
  std::uint32_t stride, hidden, width, top_k, gate_w, gate_s, up_w, up_s;
};
struct ExpertDownPush {
  std::uint64_t experts, slots, route_ids, act, y;
  std::uint32_t stride, hidden, width, down_w, down_s;
};
struct ExpertGateUpGroupedPush {
  std::uint64_t experts, slots, offsets, members, x, act;
  std::uint32_t stride, hidden, width, top_k, gate_w, gate_s, up_w, up_s;
};
struct ExpertDownGroupedPush {
  std::uint64_t experts, slots, offsets, members, act, y;
  std::uint32_t stride, hidden, width, down_w, down_s;
};
struct RouteGroupPush {
  std::uint64_t ids, offsets, members;
  std::uint32_t choices, experts;
};
struct RmsNormPush {
  std::uint64_t x, out, weight;
  std::uint32_t n, x_stride, out_stride;
  float eps;
};
struct QkPrepPush {
  std::uint64_t q, k, v, k_cache, v_cache, q_norm, k_norm, rope, step;
  std::uint32_t heads, kv_heads, head_dim, norm_mode;
  float clip, eps;
};
struct AttentionPush {
  std::uint64_t q, k_cache, v_cache, out, scores, step;
  std::uint32_t heads, kv_heads, head_dim, ctx;
  float scale;
};
struct RouteTopkPush {
  std::uint64_t logits, ids, weights;
  std::uint32_t experts, top_k, renormalize;
};
struct MoeCombinePush {
  std::uint64_t x, y_gpu, y_cpu, slots, ids, weights, shared_out, shared_gate;
  std::uint32_t hidden, top_k;
};
struct SiluMulPush {
  std::uint64_t a, b;
  std::uint32_t n;
};

// Rows per workgroup and invocations of the row kernels; tokens per
// workgroup of the batched matvec: chosen from the device's limits by the
// same function the planner prints (shaders/decoder_modules.h).
using RowKernelShape = shaders::DecoderRowShape;
RowKernelShape row_kernel_shape(const VulkanDevice& device);

struct KernelSet {
  RowKernelShape shape;
  // [format][0: one token, 1: kDecoderBatchTokens per workgroup]; null when unused (or it does not fit).
  std::array<std::array<std::unique_ptr<Kernel>, 2>, kKernelFormats> matvec;
  std::unique_ptr<Kernel> gate_up, down;  // for the experts' format
  // Prefill: choices grouped by expert; null when the device or the model
  // cannot take them (the per-choice kernels run instead).
  std::unique_ptr<Kernel> route_group, gate_up_grouped, down_grouped;
  std::unique_ptr<Kernel> rms_norm, qk_prep, attention, route_topk, moe_combine, silu_mul;
  std::uint32_t norm_workgroup = 256, attention_workgroup = 128, topk_workgroup = 64;

  // Makes the kernels `formats` (dense) and `expert_format` need.
  static Result<KernelSet> create(ComputeContext& context, const std::vector<WeightFormat>& formats,
                                  WeightFormat expert_format, std::uint32_t experts);
  Status make_row_kernels(ComputeContext& context, const std::vector<WeightFormat>& formats, WeightFormat expert_format,
                          std::uint32_t experts);
  std::vector<std::string> names() const;
};

// Makes every write before it visible to every read and write after it
// (dispatches, transfers and host reads after the fence).
void record_full_barrier(const ComputeContext& context, VkCommandBuffer cmd);

}  // namespace coli::vulkan
