#include "coli/shaders/decoder_modules.h"

#include <algorithm>
#include <string>

#include "embedded_spirv.h"

namespace coli::shaders {

std::string_view module_name(DecoderModule module) {
  switch (module) {
    case DecoderModule::matvec: return "matvec";
    case DecoderModule::matvec_batched: return "matvec_batched";
    case DecoderModule::expert_gate_up: return "expert_gate_up";
    case DecoderModule::expert_down: return "expert_down";
    case DecoderModule::expert_gate_up_grouped: return "expert_gate_up_grouped";
    case DecoderModule::expert_down_grouped: return "expert_down_grouped";
    case DecoderModule::route_group: return "route_group";
    case DecoderModule::rms_norm: return "rms_norm";
    case DecoderModule::qk_prep: return "qk_prep";
    case DecoderModule::attention: return "attention";
    case DecoderModule::route_topk: return "route_topk";
    case DecoderModule::moe_combine: return "moe_combine";
    case DecoderModule::silu_mul: return "silu_mul";
  }
  return "?";
}

std::span<const std::uint32_t> decoder_module(DecoderModule module) {
  return embedded_spirv("decoder_" + std::string(module_name(module)));
}

std::uint32_t decoder_shared_memory_bytes(DecoderModule module, std::uint32_t workgroup_size) {
  constexpr std::uint32_t kFloat = 4;
  // reduce_rows.glsl: partials[SUMS * WORKGROUP_SIZE]; block_reduce.glsl: reduce_scratch[WORKGROUP_SIZE].
  switch (module) {
    case DecoderModule::matvec: return kFloat * workgroup_size;
    case DecoderModule::matvec_batched: return kFloat * kDecoderBatchTokens * workgroup_size;
    case DecoderModule::expert_gate_up: return kFloat * 2 * workgroup_size;
    case DecoderModule::expert_down: return kFloat * workgroup_size;
    case DecoderModule::expert_gate_up_grouped: return kFloat * 2 * kDecoderBatchTokens * workgroup_size;
    case DecoderModule::expert_down_grouped: return kFloat * kDecoderBatchTokens * workgroup_size;
    case DecoderModule::route_group: return 4 * kDecoderMaxGroupedExperts;  // counts[MAX_EXPERTS]
    case DecoderModule::rms_norm:
    case DecoderModule::qk_prep: return kFloat * workgroup_size;
    case DecoderModule::attention: return kFloat * (2 * workgroup_size + kDecoderMaxHeadDim);  // + tile, q_shared[512]
    case DecoderModule::route_topk: return 2 * kFloat * workgroup_size;  // reduce_scratch and best_ids
    case DecoderModule::moe_combine:
    case DecoderModule::silu_mul: return 0;
  }
  return 0;
}

DecoderRowShape decoder_row_shape(std::uint32_t max_workgroup_invocations, std::uint32_t max_shared_memory_bytes) {
  // 256 invocations where allowed (every desktop GPU; lavapipe), 8 rows of
  // 32 lanes; the batched modules keep 4 (matvec) or 8 (grouped gate/up)
  // partial sums per invocation: 4 or 8 KiB of shared memory at 256.
  DecoderRowShape shape;
  const std::uint32_t invocations = std::max<std::uint32_t>(max_workgroup_invocations, 64);
  while (shape.workgroup_size > invocations) shape.workgroup_size /= 2;
  shape.rows = std::min<std::uint32_t>(8, shape.workgroup_size / 8);
  const auto fits = [&](DecoderModule m) { return decoder_shared_memory_bytes(m, shape.workgroup_size) <= max_shared_memory_bytes; };
  shape.batch_tokens = fits(DecoderModule::matvec_batched) ? kDecoderBatchTokens : 1;
  shape.grouped_experts = fits(DecoderModule::expert_gate_up_grouped) && fits(DecoderModule::expert_down_grouped) &&
                          fits(DecoderModule::route_group);
  return shape;
}

}  // namespace coli::shaders
