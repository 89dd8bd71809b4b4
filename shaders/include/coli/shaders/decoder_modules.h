// The decoder's compute kernels (shaders/decoder/*.comp), embedded as SPIR-V
// like the GEMV catalogue, with the shared memory each declares as a
// function of its specialization, so engine/vulkan/decoder can refuse a
// kernel that does not fit a device before creating it.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace coli::shaders {

enum class DecoderModule {
  matvec, expert_gate_up, expert_down, expert_gate_up_grouped, expert_down_grouped, route_group,
  rms_norm, qk_prep, attention, route_topk, moe_combine, silu_mul
};
std::string_view module_name(DecoderModule module);  // "matvec", ...

// The widest attention head the attention kernel takes (MAX_HEAD_DIM there).
inline constexpr std::uint32_t kDecoderMaxHeadDim = 512;
// The most experts route_group.comp groups (its shared counts).
inline constexpr std::uint32_t kDecoderMaxGroupedExperts = 1024;

// The module's SPIR-V words (entry point "main").
std::span<const std::uint32_t> decoder_module(DecoderModule module);

// Workgroup memory each module declares, in bytes, at a workgroup size and
// number of partial sums per invocation (matvec: tokens per workgroup;
// gate/up: 2; down: 1; grouped gate/up: 2 x tokens; grouped down: tokens).
std::uint32_t decoder_shared_memory_bytes(DecoderModule module, std::uint32_t workgroup_size, std::uint32_t sums);

// How the row kernels (matvec, expert gate/up and down) are specialised for
// a device: invocations per workgroup, rows per workgroup (lanes per row =
// invocations / rows), tokens per workgroup of the batched matvec. The
// largest that fit the device's invocation and shared-memory limits (a
// pretended limit included); the planner prints it, the decoder builds it.
struct DecoderRowShape {
  std::uint32_t workgroup_size = 256;
  std::uint32_t rows = 8;
  std::uint32_t batch_tokens = 4;
  // Tokens the grouped expert kernels take per weight pass (prefill); 0 when
  // even one does not fit the shared memory (the per-choice kernels run).
  std::uint32_t expert_batch_tokens = 4;
};
DecoderRowShape decoder_row_shape(std::uint32_t max_workgroup_invocations, std::uint32_t max_shared_memory_bytes);

}  // namespace coli::shaders
