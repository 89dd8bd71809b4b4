#include "coli/runtime/plan_options.h"

#include <string>

namespace coli::runtime {
namespace {

Status check_plan_fits(const planner::Plan& plan, const ModelShape& shape) {
  const std::string experts = std::to_string(shape.experts);
  if (plan.n_experts != shape.experts) {
    return make_error("the plan is for " + std::to_string(plan.n_experts) + " experts per layer, the model has " +
                      experts + ": re-plan for this model");
  }
  if (plan.cap < shape.top_k || plan.cap > shape.experts) {
    return make_error("the plan's cap " + std::to_string(plan.cap) + " is outside [top_k " +
                      std::to_string(shape.top_k) + ", " + experts + " experts]: re-plan");
  }
  if (plan.pins < 0 || plan.pins > plan.cap) {
    return make_error("the plan pins " + std::to_string(plan.pins) + " experts in a cache of " +
                      std::to_string(plan.cap) + ": re-plan");
  }
  if (plan.threads < 1 && plan.compute_pus.empty()) return make_error("the plan has no compute threads: re-plan");
  return Ok{};
}

}  // namespace

Result<ModelOptions> options_from_plan(const planner::Plan& plan, const ModelShape& shape,
                                       const experts::UsageHistory* history) {
  if (Status s = check_plan_fits(plan, shape); !s) return s.error();
  ModelOptions options;
  options.threads = plan.threads;
  options.compute_pus = plan.compute_pus;
  options.cpu_kernel = plan.cpu_kernel;
  options.cache_capacity = plan.cap;
  options.max_context = plan.ctx;
  options.prefill_round_tokens = plan.prefill_round_tokens;
  options.io_threads = plan.io_threads;
  options.direct_io = plan.direct_io;
  options.rss_limit_bytes = plan.planned_ram_bytes() + plan.margin.bytes;
  if (plan.pins > 0) {
    if (history == nullptr) {
      return make_error("the plan pins " + std::to_string(plan.pins) +
                        " experts per layer, but no usage history says which: give the run one (--usage) or re-plan without it");
    }
    auto pins = experts::pins_for_every_layer(*history, plan.pins);
    if (!pins) return pins.error();
    options.pins = std::move(*pins);
  }
  // A whole-decoder GPU plan: the device, and the experts each layer keeps
  // in VRAM, ranked as the planner ranked them.
  if (plan.gpu.whole_decoder && plan.gpu.device.gpu.chosen() && plan.gpu.engine_runs_it) {
    options.backend = plan.gpu.backend;
    options.gpu_index = plan.gpu.device.gpu.index;
    options.vram_experts = planner::vram_expert_ids(plan.gpu.vram_experts, plan.n_experts, history);
  }
  return options;
}

}  // namespace coli::runtime
