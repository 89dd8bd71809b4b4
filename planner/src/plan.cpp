#include "coli/planner/plan.h"

#include <algorithm>
#include <limits>

#include "coli/base/text.h"
#include "coli/planner/expert_parallel_speed.h"
#include "coli/planner/speed_band.h"
#include "coli/planner/thread_choice.h"

namespace coli::planner {
namespace {

Result<int> decide_ctx(const ModelFootprint& fp, std::optional<int> override_ctx, std::string& reason) {
  const auto trained = static_cast<int>(std::min<std::uint64_t>(fp.config.max_position_embeddings, 1u << 30));
  if (override_ctx) {
    const int ctx = *override_ctx;
    if (ctx < 1) return make_error("--ctx " + std::to_string(ctx) + " holds no token: use 1 or more");
    // Without rope scaling, positions past the trained range produce garbage.
    if (trained > 0 && ctx > trained) {
      return make_error("--ctx " + std::to_string(ctx) + " exceeds the model's max_position_embeddings " +
                        std::to_string(trained) + ": use --ctx " + std::to_string(trained) + " or less");
    }
    reason = "--ctx " + std::to_string(ctx);
    return ctx;
  }
  const int ctx = trained > 0 ? std::min(kDefaultContext, trained) : kDefaultContext;
  reason = "default context " + std::to_string(ctx) + " (the engine's default, at most max_position_embeddings)";
  return ctx;
}

Result<std::uint64_t> decide_headroom(const DeviceProfile& profile, std::optional<std::uint64_t> ram,
                                      std::string& source, bool& user_limited) {
  const std::uint64_t measured = profile.memory.headroom_bytes;
  source = profile.memory.headroom_source.empty() ? "profile headroom" : profile.memory.headroom_source;
  user_limited = false;
  if (!ram) {
    if (measured == 0) return make_error("the profile records no memory headroom: probe again or pass --ram");
    return measured;
  }
  // A limit above what the probe measured would plan memory that is not there.
  if (measured > 0 && *ram > measured) {
    return make_error("--ram " + format_bytes(*ram) + " exceeds the measured headroom " + format_bytes(measured) + " (" +
                      source + "): the plan would be OOM-killed; use --ram " + format_bytes(measured) + " or less");
  }
  source = "--ram " + format_bytes(*ram);
  user_limited = measured > 0 && *ram < measured;
  return *ram;
}

}  // namespace

const Decision* Plan::decision(const std::string& knob) const {
  for (const Decision& d : decisions) {
    if (d.knob == knob) return &d;
  }
  return nullptr;
}

namespace {

// TOML integers are signed 64-bit; no machine has 8 EiB.
std::int64_t bytes_number(std::uint64_t bytes) {
  return static_cast<std::int64_t>(std::min<std::uint64_t>(bytes, std::numeric_limits<std::int64_t>::max()));
}

// A cache refusal for lack of RAM (and the VRAM the tier takes beside it).
void explain_shortfall(const ModelFootprint& fp, const CacheRequest& cache, const GpuTier& tier, Refusal& refusal) {
  const auto shortfall = cache_shortfall(fp, cache);
  if (!shortfall) return;
  refusal.does_not_fit = true;
  refusal.tiers.push_back({Tier::ram, shortfall->needed_bytes, shortfall->headroom_bytes});
  std::uint64_t vram = 0;
  for (const MemoryLine& line : tier.lines) vram += line.tier == Tier::vram ? line.bytes : 0;
  if (vram > 0) refusal.tiers.push_back({Tier::vram, vram, tier.vram_headroom_bytes});
  refusal.advice = shortfall->advice;
}

// The VRAM tier: one GPU (decide_gpu_tier), or experts spread over the
// GPUs --gpus names (then `ep` holds each one's share).
Result<GpuTier> decide_tier(const DeviceProfile& profile, const ModelFootprint& fp, const PlanRequest& request,
                            GpuTierRequest& gpu_request, std::optional<ExpertParallelPlan>& ep) {
  std::string why;
  const bool engine_runs = gpu_request.backend.engine_runs_expert_parallel;
  const GpuListRequest list{request.gpus, request.gpu, gpu_request.backend.name, engine_runs};
  auto gpus = choose_expert_parallel_gpus(profile, fp, list, why);
  if (!gpus) return gpus.error();
  if (request.gpus == "auto" && gpus->size() >= 2) {  // auto: only the GPUs whose VRAM the plan can use
    std::string left_out;
    *gpus = gpus_that_hold_the_dense_copy(profile, fp, gpu_request, *gpus, left_out);
    if (!left_out.empty()) why += "; left out: " + left_out;
    if (gpus->size() < 2) gpus->clear();
  }
  if (gpus->size() < 2) {
    if (gpus->size() == 1) gpu_request.gpu = std::to_string(gpus->front());  // --gpus N: that one, as --gpu N
    auto tier = decide_gpu_tier(profile, fp, gpu_request);
    if (tier && !why.empty()) tier->reason += "; " + why;
    return tier;
  }
  auto decided = decide_expert_parallel(profile, fp, gpu_request, *gpus);
  if (!decided) return decided.error();
  decided->reason = why + ": " + decided->reason;
  ep = std::move(*decided);
  return expert_parallel_tier(profile, *ep, engine_runs && !fp.config.planning_only());
}

// The gpu decision and, expert parallel, the gpus one and each GPU's share.
void add_gpu_decisions(Plan& plan, std::optional<ExpertParallelPlan>& ep) {
  std::string ordinals;
  if (ep) {
    for (const GpuShare& g : ep->gpus) ordinals += (ordinals.empty() ? "" : ",") + std::to_string(g.ordinal);
  }
  plan.decisions.push_back({"gpu",
                            ep                            ? "GPUs " + ordinals
                            : plan.gpu.device.gpu.chosen() ? plan.gpu.device.gpu.describe()
                                                           : "none",
                            plan.gpu.reason});
  if (!ep) return;
  const ExchangeTraffic& x = ep->exchange;
  plan.decisions.push_back({"gpus", ordinals,
                            std::to_string(ep->gpus.size()) + " GPUs, NCCL ranks in this order; each MoE layer's "
                            "all-reduce sends " + format_bytes(x.bytes_per_token) + " per token per GPU over the "
                            "slowest link of the ring (" + x.slowest_link + ")",
                            static_cast<std::int64_t>(ep->gpus.size()), "gpus"});
  plan.expert_parallel = std::move(*ep);
}

// Input the planner cannot plan for at all.
Status check_request(const ModelFootprint& fp, const PlanRequest& request) {
  if (fp.n_experts < 1 || fp.top_k < 1 || fp.top_k > fp.n_experts) {
    return make_error("the model has " + std::to_string(fp.n_experts) + " experts and top_k " + std::to_string(fp.top_k) +
                      ": not an MoE model the engine can plan for");
  }
  if (request.pins && *request.pins < 0) return make_error("--pin " + std::to_string(*request.pins) + " is negative");
  if (request.io_threads < 0) return make_error("io_threads " + std::to_string(request.io_threads) + " is negative");
  return Ok{};
}

// Threads (on `set` where given), kernel, context and RAM headroom, each with its decision;
// `user_limited`: --ram below the measured headroom.
Status decide_host_knobs(const DeviceProfile& profile, const ModelFootprint& fp, const PlanRequest& request,
                         const MeasuredThreadSet* set, Plan& plan, bool& user_limited) {
  auto threads = set ? Result<ThreadChoice>(threads_on_set(*set)) : decide_threads(profile, request.threads);
  if (!threads) return threads.error();
  plan.threads = threads->threads;
  plan.compute_pus = threads->pus;
  plan.prefill_threads = threads->prefill_threads;
  plan.prefill_pus = threads->prefill_pus;
  auto kernel = decide_cpu_kernel(profile, request.cpu_kernel);
  if (!kernel) return kernel.error();
  plan.cpu_kernel = kernel->variant;
  plan.decisions.push_back({"kernel", plan.cpu_kernel, kernel->reason});
  plan.decisions.push_back({"threads", std::to_string(plan.threads), threads->reason, plan.threads, "threads"});

  std::string ctx_reason;
  auto ctx = decide_ctx(fp, request.ctx, ctx_reason);
  if (!ctx) return ctx.error();
  plan.ctx = *ctx;
  plan.decisions.push_back({"ctx", std::to_string(plan.ctx), ctx_reason, plan.ctx, "tokens"});

  auto headroom = decide_headroom(profile, request.ram, plan.headroom_source, user_limited);
  if (!headroom) return headroom.error();
  plan.headroom_bytes = *headroom;
  plan.decisions.push_back({"ram", format_bytes(plan.headroom_bytes), "headroom from " + plan.headroom_source,
                            bytes_number(plan.headroom_bytes), "bytes"});
  return Ok{};
}

// What decide_cache sizes the expert cache from: the plan's host knobs and the request's cache knobs.
CacheRequest cache_request(const Plan& plan, const PlanRequest& request, bool user_limited, const RoutingConcentration* routing) {
  CacheRequest cache;
  cache.headroom_bytes = plan.headroom_bytes;
  cache.headroom_source = plan.headroom_source;
  cache.ram_limited_by_user = user_limited;
  cache.cap = request.cap;
  cache.pins = request.pins.value_or(request.history_pins);
  cache.pins_forced = request.pins.has_value();
  cache.requested_round = request.prefill_round_tokens;
  cache.knobs.ctx = plan.ctx;
  cache.knobs.prompt_tokens = std::clamp(request.prompt_tokens.value_or(plan.ctx), 1, plan.ctx);
  cache.knobs.threads = plan.threads;
  cache.knobs.io_threads = plan.io_threads;
  cache.knobs.amx_tiles = plan.cpu_kernel == "amx";
  cache.knobs.tokenizer = request.tokenizer;
  cache.routing = routing;
  return cache;
}

GpuTierRequest gpu_tier_request(const PlanRequest& request, int ctx) {
  GpuTierRequest gpu_request;
  gpu_request.gpu = request.gpu;
  gpu_request.vram = request.vram;
  gpu_request.force_variant = request.gpu_variant;
  if (request.backend) gpu_request.backend = *request.backend;
  gpu_request.history = request.history;
  gpu_request.ctx = ctx;
  gpu_request.batch_tokens = request.gpu_batch_tokens;
  return gpu_request;
}

// The cache request beside a GPU tier: a whole-decoder backend leaves the host the embedding table,
// and an expert cache only for the experts outside VRAM, whose RAM slots serve those experts alone.
void use_tier(CacheRequest& cache, const ModelFootprint& fp, const GpuTier& t) {
  t.set_host_holders(cache.knobs, fp.n_experts);
  cache.extra_lines = t.lines;
  cache.load_phase_bytes = t.load_buffer_bytes;
  cache.useful_cap = t.vram_slots() == 0
                         ? 0
                         : std::max(fp.top_k, fp.n_experts - *std::min_element(t.vram_experts.begin(), t.vram_experts.end()));
}

// Field note 4: the backend's host copies per VRAM slot compete with the RAM cache. The largest VRAM
// tier whose copies still fit beside the cache, found by bisection, replaces `tier` (saying so); the
// cache decided beside it, or `refused` where none fits.
Result<CacheChoice> shrink_tier_to_fit(const ModelFootprint& fp, const GpuTierRequest& gpu_request, GpuTier& tier,
                                       CacheRequest& cache, Result<CacheChoice> refused) {
  const int wanted = tier.vram_slots();
  int low = 0, high = wanted - 1, best = -1;
  while (low <= high) {
    const int mid = low + (high - low) / 2;
    use_tier(cache, fp, shrink_gpu_tier(tier, fp, gpu_request, mid));
    if (decide_cache(fp, cache)) best = mid, low = mid + 1;
    else high = mid - 1;
  }
  if (best < 0) return refused;  // the cache request as the smallest trial left it (explain_shortfall reads it)
  std::uint64_t host_copies = 0;
  for (const MemoryLine& l : tier.lines) {
    if (l.component.rfind("GPU host copy", 0) == 0) host_copies += l.bytes;
  }
  const std::uint64_t per_slot = host_copies / static_cast<std::uint64_t>(wanted);
  tier = shrink_gpu_tier(tier, fp, gpu_request, best);
  tier.reason += "; shrunk from " + std::to_string(wanted) + " to " + std::to_string(best) +
                 " VRAM slots: the backend's host copies (" + format_bytes(per_slot) +
                 " of RAM per VRAM slot) did not fit the RAM headroom beside the expert cache";
  use_tier(cache, fp, tier);
  return decide_cache(fp, cache);
}

// The GPU batch, KV type and expert cache decisions (cap, pins, round, margin) into the plan.
void add_cache_decisions(Plan& plan, const PlanRequest& request, const KvTypeChoice& kv, CacheChoice& choice) {
  if (plan.gpu.whole_decoder && plan.gpu.device.gpu.chosen()) {
    const std::string source = request.gpu_batch_tokens ? "--gpu-batch" : "the " + plan.gpu.backend + " decoder's default";
    const bool staged = plan.gpu.backend == "cuda" && !plan.gpu.all_experts_in_vram(plan.n_experts);
    plan.decisions.push_back({"gpu_batch_tokens", std::to_string(plan.gpu.batch_tokens),
                              source + ": a prompt's tokens per GPU submission" +
                                  (staged ? " (for the experts outside VRAM a batch chose, coli run copies each up or "
                                            "computes it on the CPU, whichever it measures faster: --gpu-host-experts)"
                                          : ""),
                              plan.gpu.batch_tokens, "tokens"});
  }
  plan.decisions.push_back({"kv_type", std::string(kv_type_name(plan.kv_type)), kv.reason});
  plan.cap = choice.cap;
  plan.pins = choice.pins_round.pins;
  plan.prefill_round_tokens = choice.pins_round.round_tokens;
  plan.memory = std::move(choice.memory);
  plan.margin = choice.margin;
  plan.decisions.push_back({"cap", std::to_string(plan.cap), choice.reason, plan.cap, "slots"});
  plan.decisions.push_back({"pins", std::to_string(plan.pins), choice.pins_round.reason, plan.pins, "experts"});
  plan.decisions.push_back({"prefill_round_tokens", std::to_string(plan.prefill_round_tokens), choice.pins_round.reason,
                            plan.prefill_round_tokens, "tokens"});
  plan.decisions.push_back({"margin", format_bytes(plan.margin.bytes), plan.margin.reason, bytes_number(plan.margin.bytes), "bytes"});
}

// The plan with the request's knobs; `set`: decode and prefill on that
// measured thread set (a candidate of plan_by_prediction) instead of the
// profile's recommendation or --threads.
Result<Plan> plan_on_set(const DeviceProfile& profile, const ModelFootprint& fp, const PlanRequest& request,
                         const MeasuredThreadSet* set, Refusal& refusal) {
  if (Status s = check_request(fp, request); !s) return s.error();
  Plan plan;
  plan.n_experts = fp.n_experts;
  plan.io_threads = request.io_threads;
  plan.direct_io = request.direct_io;
  bool user_limited = false;
  if (Status s = decide_host_knobs(profile, fp, request, set, plan, user_limited); !s) return s.error();

  const auto routing = routing_concentration(fp, request.history);
  CacheRequest cache = cache_request(plan, request, user_limited, routing ? &*routing : nullptr);
  GpuTierRequest gpu_request = gpu_tier_request(request, plan.ctx);  // decide_tier fills in what it chose
  std::optional<ExpertParallelPlan> ep;
  auto tier = decide_tier(profile, fp, request, gpu_request, ep);
  if (!tier) return tier.error();
  use_tier(cache, fp, *tier);
  const KvTypeChoice kv = decide_kv_type(fp, request.kv_type, cache.knobs.gpu_decoder, plan.ctx);
  plan.kv_type = cache.knobs.kv_type = kv.type;
  auto choice = decide_cache(fp, cache);
  if (!choice && tier->vram_slots() > 0 && !ep) choice = shrink_tier_to_fit(fp, gpu_request, *tier, cache, std::move(choice));
  if (!choice) {
    explain_shortfall(fp, cache, *tier, refusal);
    return choice.error();
  }
  if (cache.knobs.gpu_decoder && !cache.knobs.host_experts) {
    const std::string where = ep ? std::to_string(ep->gpus.size()) + " GPUs (expert parallel)" : tier->device.gpu.describe();
    const std::string none = "no host expert cache: every expert is in VRAM on " + where;
    choice->reason = request.cap ? choice->reason + "; " + none : none;
  }
  plan.gpu = std::move(*tier);
  add_gpu_decisions(plan, ep);
  add_cache_decisions(plan, request, kv, *choice);
  return plan;
}

// A set whose decode kernels' timings did not settle: the worst of the
// largest spread (best - worst over the median) of its batch-1 weight
// kernels (the GEMVs the sets are ranked by; greedy sampling, on the calling
// thread, is timed once and ranks nothing), when it exceeds
// kUnsettledTimings, else nullopt. The H200 machine once timed
// its 16-core set at 109 tok/s with a spread of 2552% beside 710 on 4 cores
// (another tenant's load on its CPUs): predicted from that, decode went to 4
// threads and ran at half the speed 16 reached.
inline constexpr double kUnsettledTimings = 1.0;  // best and worst differ by more than the median
std::optional<std::pair<std::string, double>> unsettled_set(const DeviceProfile& profile,
                                                            const std::vector<MeasuredThreadSet>& sets) {
  std::optional<std::pair<std::string, double>> worst;
  for (const KernelThroughputPoint& p : profile.measurements.kernel_tuning->points) {
    const bool prefill = p.kernel.find("_prefill") != std::string::npos;  // a one-token prefill batch ranks no set
    if (p.batch != 1 || p.matrices <= 0 || prefill || p.gb_per_s.spread <= kUnsettledTimings) continue;
    const bool candidate = std::any_of(sets.begin(), sets.end(), [&](const MeasuredThreadSet& s) { return s.name == p.thread_set; });
    if (candidate && (!worst || p.gb_per_s.spread > worst->second)) worst = std::pair(p.thread_set, p.gb_per_s.spread);
  }
  return worst;
}

// Issue 15: every thread set the probe timed is planned and predicted;
// decode runs on the fastest for decode, prompts on the fastest for
// prefill. The profile's recommendation stands when --threads or
// --thread-choice profile asks, when fewer than two sets were timed, when
// a set's timings did not settle, or when a set's prediction is unavailable
// (the profile lacks a rate).
Result<Plan> plan_by_prediction(const DeviceProfile& profile, const ModelFootprint& fp, const PlanRequest& request,
                                Refusal& refusal) {
  auto base = plan_on_set(profile, fp, request, nullptr, refusal);
  if (!base || request.threads || request.thread_choice == ThreadRule::profile) return base;
  const std::vector<MeasuredThreadSet> sets = measured_thread_sets(profile, usable_thread_limit(profile));
  if (sets.size() < 2) return base;
  if (const auto unsettled = unsettled_set(profile, sets)) {
    for (Decision& d : base->decisions) {
      if (d.knob != "threads") continue;
      d.reason += "; not chosen by predicted speed: the tuning phase's timings on " + unsettled->first + " spread " +
                  format_fixed(unsettled->second * 100, 0) + "% (best to worst over the median), too unsettled to rank the " +
                  "sets (re-probe when the machine is quiet)";
    }
    return base;
  }
  std::vector<SetPrediction> predicted;
  std::vector<Plan> plans;
  for (const MeasuredThreadSet& set : sets) {
    Refusal ignored;
    auto plan = plan_on_set(profile, fp, request, &set, ignored);
    if (!plan) continue;  // its memory does not fit: not a candidate
    SpeedPrediction speed = predict_plan_speed_with_band(profile, fp, *plan, request.history);  // the band weighs a lead
    if (!speed.available) return base;
    predicted.push_back({set, std::move(speed)});
    plans.push_back(std::move(*plan));
  }
  const CpuSet& recommended_prefill =
      profile.threads.prefill_pus.empty() ? profile.threads.decode_pus : profile.threads.prefill_pus;
  const auto decode = pick_fastest_set(predicted, SpeedMetric::decode, profile.threads.decode_pus);
  const auto prefill = pick_fastest_set(predicted, SpeedMetric::prefill, recommended_prefill);
  if (!decode || !prefill) return base;
  Plan plan = std::move(plans[decode->chosen]);
  const MeasuredThreadSet& prefill_set = predicted[prefill->chosen].set;
  const bool apart = prefill_set.pus != plan.compute_pus || prefill_set.threads != plan.threads;
  plan.prefill_threads = apart ? prefill_set.threads : 0;
  plan.prefill_pus = apart ? prefill_set.pus : CpuSet{};
  for (Decision& d : plan.decisions) {
    if (d.knob != "threads") continue;
    d.reason += ", chosen by predicted speed: " + decode->reason + "; prefill on " +
                (apart ? std::to_string(prefill_set.threads) + " threads" +
                             (prefill_set.pus.empty() ? "" : " (PUs " + prefill_set.pus.to_list() + ")")
                       : std::string("the same set")) +
                ": " + prefill->reason + "; the probe's kernel timings alone recommend " +
                std::to_string(profile.threads.decode_threads) + " (--thread-choice profile: " + profile.threads.rule + ")";
  }
  return plan;
}

}  // namespace

Result<Plan> make_plan(const DeviceProfile& profile, const ModelFootprint& fp, const PlanRequest& request) {
  Refusal ignored;
  return plan_by_prediction(profile, fp, request, ignored);
}

std::variant<Plan, Refusal> plan_or_refusal(const DeviceProfile& profile, const ModelFootprint& fp,
                                            const PlanRequest& request) {
  Refusal refusal;
  auto plan = plan_by_prediction(profile, fp, request, refusal);
  if (plan) return std::move(*plan);
  refusal.message = plan.error().message;
  return refusal;
}

}  // namespace coli::planner
