#include "coli/runtime/plan_options.h"

#include <algorithm>
#include <string>

#include "coli/base/text.h"
#include "coli/model/model_config.h"
#include "coli/planner/deciders.h"
#include "coli/planner/footprint.h"
#include "coli/planner/memory_preview.h"
#include "cpu/gemv_cpu.h"

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
  options.prefill_threads = plan.prefill_threads;
  options.prefill_pus = plan.prefill_pus;
  options.cpu_kernel = plan.cpu_kernel;
  options.cache_capacity = plan.cap;
  options.max_context = plan.ctx;
  options.kv_type = plan.kv_type;
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
  // An expert-parallel plan: its GPUs in NCCL rank order, each one's host
  // CPUs, and where every expert is (plan.gpu.vram_experts is their sum).
  if (plan.expert_parallel.active() && plan.gpu.engine_runs_it) {
    options.backend = plan.gpu.backend;
    options.gpu_index = plan.expert_parallel.gpus.front().ordinal;
    options.gpu_batch_tokens = plan.gpu.batch_tokens;
    for (const planner::GpuShare& gpu : plan.expert_parallel.gpus) {
      options.gpu_devices.push_back(gpu.ordinal);
      options.gpu_device_cpus.push_back(gpu.local_cpus);
    }
    options.expert_gpu = plan.expert_parallel.expert_gpu;
    return options;
  }
  // A whole-decoder GPU plan: the device, and the experts each layer keeps
  // in VRAM, ranked as the planner ranked them.
  if (plan.gpu.whole_decoder && plan.gpu.device.gpu.chosen() && plan.gpu.engine_runs_it) {
    options.backend = plan.gpu.backend;
    options.gpu_index = plan.gpu.device.gpu.index;
    options.gpu_batch_tokens = plan.gpu.batch_tokens;
    options.vram_experts = planner::vram_expert_ids(plan.gpu.vram_experts, plan.n_experts, history);
  }
  return options;
}

Result<planner::ModelFootprint> footprint_of(const ModelShape& shape) {
  auto config = model::parse_model_config(shape.config_json, "the container's config");
  if (!config) return config.error();
  return planner::describe_footprint(*config, shape.expert_format, shape.dense_format);
}

Result<KnobsMemory> memory_for_options(const ModelShape& shape, const ModelOptions& options, int prompt_tokens,
                                       bool tokenizer) {
  auto described = footprint_of(shape);
  if (!described) return described.error();
  const planner::ModelFootprint& footprint = *described;
  planner::MemoryKnobs knobs;
  knobs.cap = std::clamp(options.cache_capacity, shape.top_k, shape.experts);
  for (const auto& layer_pins : options.pins) knobs.pins = std::max(knobs.pins, static_cast<int>(layer_pins.size()));
  knobs.ctx = options.max_context;
  knobs.kv_type = options.kv_type;
  knobs.prompt_tokens = std::max(1, prompt_tokens);
  knobs.round_tokens = options.prefill_round_tokens;
  knobs.threads = options.compute_pus.empty() ? options.threads : options.compute_pus.size();
  knobs.io_threads = options.io_threads;
  knobs.tokenizer = tokenizer;
  // "" runs what the CPU backend selects (COLI_CPU_KERNEL or the best supported).
  const auto selected = kernels::cpu::selected_variant();
  knobs.amx_tiles = options.cpu_kernel == "amx" ||
                    (options.cpu_kernel.empty() && selected && *selected == kernels::cpu::CpuKernelVariant::amx);
  const planner::MemoryPreview preview = planner::preview_memory(footprint, knobs);
  KnobsMemory memory;
  memory.planned_bytes = preview.total(planner::Tier::ram);
  memory.margin_bytes = planner::decide_safety_margin(memory.planned_bytes, knobs.threads, knobs.io_threads).bytes;
  memory.slot_bytes = footprint.moe_layer_count() * footprint.expert().record_stride;
  memory.cap = knobs.cap;
  memory.min_cap = shape.top_k;
  for (const planner::MemoryLine& line : preview.lines) {
    if (line.tier != planner::Tier::ram || line.bytes == 0) continue;
    memory.summary += (memory.summary.empty() ? "" : ", ") + line.component + " " + format_bytes(line.bytes);
  }
  return memory;
}

Status check_headroom(const KnobsMemory& need, std::uint64_t headroom_bytes, const std::string& headroom_source) {
  if (need.needed() <= headroom_bytes) return Ok{};
  const std::uint64_t short_by = need.needed() - headroom_bytes;
  const std::uint64_t fewer_slots = need.slot_bytes > 0 ? (short_by + need.slot_bytes - 1) / need.slot_bytes : 0;
  const bool cap_helps = need.slot_bytes > 0 && fewer_slots <= static_cast<std::uint64_t>(need.cap - need.min_cap);
  const std::string cap_advice =
      cap_helps ? "lower --cap to at most " + std::to_string(need.cap - static_cast<int>(fewer_slots)) + " (from " +
                      std::to_string(need.cap) + "; each expert slot per layer costs " + format_bytes(need.slot_bytes) +
                      ") or --ctx"
                : "even --cap " + std::to_string(need.min_cap) + " would not fit: lower --ctx, give the run more RAM";
  return make_error("these knobs need " + format_bytes(need.needed()) + " of RAM (" + need.summary + "; margin " +
                    format_bytes(need.margin_bytes) + "), but " + format_bytes(headroom_bytes) + " is available (" +
                    headroom_source + "): " + cap_advice +
                    ", or let the planner size the run (--profile FILE or --plan FILE); --no-memory-check runs anyway");
}

}  // namespace coli::runtime
