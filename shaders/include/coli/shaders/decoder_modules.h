// The decoder's compute kernels (shaders/decoder/*.comp), embedded as SPIR-V
// like the GEMV catalogue, with the shared memory each declares as a
// function of its specialization, so engine/vulkan/decoder can refuse a
// kernel that does not fit a device before creating it.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace coli::shaders {

// matvec: one token per workgroup; matvec_batched and the grouped expert
// kernels: kDecoderBatchTokens per weight pass (prefill).
enum class DecoderModule {
  matvec, matvec_batched, expert_gate_up, expert_down, expert_gate_up_grouped, expert_down_grouped, route_group,
  rms_norm, qk_prep, attention, route_topk, moe_combine, silu_mul
};
inline constexpr std::uint32_t kDecoderBatchTokens = 4;  // COLI_TOKENS of the batched modules
std::string_view module_name(DecoderModule module);  // "matvec", ...

// The widest attention head the attention kernel takes (MAX_HEAD_DIM there).
inline constexpr std::uint32_t kDecoderMaxHeadDim = 512;
// The most experts route_group.comp groups (its shared counts).
inline constexpr std::uint32_t kDecoderMaxGroupedExperts = 1024;

// The module's SPIR-V words (entry point "main").
std::span<const std::uint32_t> decoder_module(DecoderModule module);

// Workgroup memory each module declares, in bytes, at a workgroup size (the
// partial sums per invocation are the module's own: matvec 1, batched 4,
// gate/up 2, down 1, grouped gate/up 8, grouped down 4).
std::uint32_t decoder_shared_memory_bytes(DecoderModule module, std::uint32_t workgroup_size);

// How the row kernels (matvec, expert gate/up and down) are specialised for
// a device: invocations per workgroup and rows per workgroup (lanes per row
// = invocations / rows), the largest that fit its invocation limit; and
// whether the batched prefill modules fit its shared memory (a pretended
// limit included). The planner prints it, the decoder builds it.
struct DecoderRowShape {
  std::uint32_t workgroup_size = 256;
  std::uint32_t rows = 8;
  std::uint32_t batch_tokens = kDecoderBatchTokens;  // 1: the batched matvec does not fit, batches run token by token
  bool grouped_experts = true;                       // the grouped expert kernels fit
};
DecoderRowShape decoder_row_shape(std::uint32_t max_workgroup_invocations, std::uint32_t max_shared_memory_bytes);

}  // namespace coli::shaders
