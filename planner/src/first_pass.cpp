#include "coli/planner/first_pass.h"

#include <algorithm>

#include "coli/base/text.h"
#include "coli/experts/routing_trace.h"
#include "coli/planner/memory_preview.h"

namespace coli::planner {
namespace {

// The memory preview's knobs for this plan and prompt (as make_plan sized them, the prompt replaced).
MemoryKnobs knobs_for_prompt(const Plan& plan, int prompt_tokens) {
  MemoryKnobs knobs;
  knobs.cap = plan.cap;
  knobs.pins = plan.pins;
  knobs.ctx = plan.ctx;
  knobs.kv_type = plan.kv_type;
  knobs.prompt_tokens = prompt_tokens;
  knobs.round_tokens = plan.prefill_round_tokens;
  knobs.threads = plan.threads;
  knobs.io_threads = plan.io_threads;
  knobs.amx_tiles = plan.cpu_kernel == "amx";
  plan.gpu.set_host_holders(knobs, plan.n_experts);
  return knobs;
}

bool grows_with_the_prompt(const MemoryLine& line) {
  return line.tier == Tier::ram && line.component.starts_with("activations: ") && line.component != "activations: decode scratch";
}

}  // namespace

FirstPassCost first_pass_cost(const DeviceProfile& profile, const ModelFootprint& footprint, const Plan& plan,
                              int prompt_tokens) {
  FirstPassCost cost;
  const auto& memory = profile.measurements.memory;
  if (!memory || memory->fresh_page_us <= 0) {
    cost.inputs = "the profile has no fresh-page figure (measurements.memory_bandwidth.fresh_page_us, "
                  "coli-probe from schema 7 on)";
    return cost;
  }
  const int prompt = std::clamp(prompt_tokens, 1, std::max(1, plan.ctx));
  const MemoryKnobs knobs = knobs_for_prompt(plan, prompt);
  std::string parts;
  auto add = [&](const std::string& what, std::uint64_t bytes) {
    if (bytes == 0) return;
    cost.fresh_bytes += bytes;
    parts += (parts.empty() ? "" : " + ") + what + " " + format_bytes(bytes);
  };
  for (const MemoryLine& line : preview_memory(footprint, knobs).lines) {
    if (grows_with_the_prompt(line)) add(line.component.substr(13), line.bytes);
  }
  if (!knobs.gpu_decoder) {
    add("routing trace", experts::RoutingTrace::bytes_held(static_cast<int>(footprint.moe_layer_count()), footprint.top_k));
    add("KV rows of " + std::to_string(prompt) + " positions", kv_cache_bytes(footprint.config, prompt, plan.kv_type));
  }
  const std::uint64_t pages = (cost.fresh_bytes + kFreshPageBytes - 1) / kFreshPageBytes;
  cost.seconds = static_cast<double>(pages) * memory->fresh_page_us * 1e-6;
  cost.priced = true;
  cost.inputs = (parts.empty() ? std::string("nothing") : parts) + " = " + std::to_string(pages) + " fresh pages x " +
                format_fixed(memory->fresh_page_us, 2) + " us (the probe's first touch of a page)";
  return cost;
}

double first_pass_tok_per_s(double warm_tok_per_s, int prompt_tokens, const FirstPassCost& cost) {
  if (warm_tok_per_s <= 0 || prompt_tokens <= 0) return warm_tok_per_s;
  return prompt_tokens / (prompt_tokens / warm_tok_per_s + cost.seconds);
}

}  // namespace coli::planner
