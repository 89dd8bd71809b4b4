#include "coli/shaders/decoder_modules.h"

#include <string>

#include "embedded_spirv.h"

namespace coli::shaders {

std::string_view module_name(DecoderModule module) {
  switch (module) {
    case DecoderModule::matvec: return "matvec";
    case DecoderModule::expert_gate_up: return "expert_gate_up";
    case DecoderModule::expert_down: return "expert_down";
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

std::uint32_t decoder_shared_memory_bytes(DecoderModule module, std::uint32_t workgroup_size, std::uint32_t sums) {
  constexpr std::uint32_t kFloat = 4;
  switch (module) {
    case DecoderModule::matvec:
    case DecoderModule::expert_gate_up:
    case DecoderModule::expert_down:
      return kFloat * sums * workgroup_size;  // reduce_rows.glsl: partials[SUMS * WORKGROUP_SIZE]
    case DecoderModule::rms_norm:
    case DecoderModule::qk_prep:
    case DecoderModule::attention:
      return kFloat * workgroup_size;  // block_reduce.glsl: reduce_scratch[WORKGROUP_SIZE]
    case DecoderModule::route_topk:
    case DecoderModule::moe_combine:
    case DecoderModule::silu_mul:
      return 0;
  }
  return 0;
}

}  // namespace coli::shaders
