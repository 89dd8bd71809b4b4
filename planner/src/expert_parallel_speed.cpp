#include "coli/planner/expert_parallel_speed.h"

#include <algorithm>
#include <cmath>

#include "coli/base/text.h"
#include "coli/planner/deciders.h"  // format_bytes as the planner writes sizes
#include "measured_rates.h"

namespace coli::planner {
namespace {

using namespace measured;  // the profile's rates (measured_rates.h), as speed.cpp reads them

// The identity a GPU's measurements are keyed by (the self-test, uploads).
GpuTier cuda_probe_tier(const DeviceProfile& profile, int ordinal) {
  GpuTier tier;
  tier.backend = "cuda";
  tier.device.gpu = cuda_identity(profile.gpus, ordinal);
  return tier;
}

// What the prediction reads, per GPU and for the host tiers.
struct EpRates {
  std::vector<Bandwidth> vram;     // per GPU: the CUDA self-test's matvec on it
  double host_gbs = 0;             // rank 0's host link: it copies the host's experts up in prefill
  std::string host_text;
  std::optional<Bandwidth> ram;
  DecodeGemv expert_kernel;  // the host's experts computed on its CPU (expert_gemv)
  std::optional<DiskReads> disk;
  double gpu_share = 0, miss = 0;  // of a decode token's expert reads
};

// Each GPU's rates, or why the prediction is unavailable.
std::optional<std::string> gpu_rates(const DeviceProfile& profile, const ModelFootprint& fp, const ExpertParallelPlan& ep,
                                     EpRates& r) {
  const double staging = static_cast<double>(fp.expert().record_stride) * 8;
  for (const GpuShare& share : ep.gpus) {
    if (share.ordinal < 0 || static_cast<std::size_t>(share.ordinal) >= profile.gpus.cuda.size()) {
      return "the plan's GPU " + std::to_string(share.ordinal) + " is not among the profile's " +
             std::to_string(profile.gpus.cuda.size()) + " CUDA devices: plan again with this machine's profile";
    }
    const GpuTier tier = cuda_probe_tier(profile, share.ordinal);
    auto vram = vram_bandwidth(profile, fp, tier);
    if (!vram) {
      return "no measured GPU GEMV bandwidth for " + tier.device.gpu.describe() +
             " (cuda): run coli-probe --gpu-selftest on that machine (it times the CUDA decoder's matvec on every GPU)";
    }
    r.vram.push_back(std::move(*vram));
    if (&share != &ep.gpus.front()) continue;
    // Rank 0 computes the experts no GPU holds (the engine's hybrid path).
    const auto upload = upload_bandwidth(profile, tier, staging);
    const double spec = profile.gpus.cuda[static_cast<std::size_t>(share.ordinal)].host_link_gbs;
    r.host_gbs = upload ? upload->gb_per_s : spec;
    r.host_text = "rank 0 (GPU " + std::to_string(share.ordinal) + ") " +
                  (upload ? upload->text : format_fixed(spec, 1) + " GB/s (PCIe specification, no measured copy)");
  }
  return std::nullopt;
}

// Expected distinct experts of `on` a batch of `choices` routings touches, in bytes.
double touched_bytes(const std::vector<std::vector<double>>& heat, const ExpertParallelPlan& ep, int on, double choices,
                     double record) {
  double bytes = 0;
  for (std::size_t l = 0; l < ep.expert_gpu.size() && l < heat.size(); ++l) {
    for (std::size_t e = 0; e < ep.expert_gpu[l].size() && e < heat[l].size(); ++e) {
      if (ep.expert_gpu[l][e] == on) bytes += (1.0 - std::pow(1.0 - heat[l][e], choices)) * record;
    }
  }
  return bytes;
}

double slowest(const std::vector<Bandwidth>& rates) {
  double gbs = rates.front().gb_per_s;
  for (const Bandwidth& b : rates) gbs = std::min(gbs, b.gb_per_s);
  return gbs;
}

void predict_ep_decode(const ModelFootprint& fp, const Plan& plan, const std::vector<std::vector<double>>& heat,
                       const EpRates& r, int decode_depth, SpeedPrediction& s) {
  const ExpertParallelPlan& ep = plan.expert_parallel;
  const double layers = static_cast<double>(fp.moe_layer_count()), top_k = fp.top_k;
  const double record = static_cast<double>(fp.expert().record_bytes);
  const int depth = decode_depth >= 0 ? decode_depth : plan.ctx / 2;
  const u64 dense = dense_bytes_per_token(fp), kv = kv_cache_bytes(fp.config, depth, KvType::f32);
  const double copy_gbs = slowest(r.vram);  // every GPU reads its own copy; the slowest finishes last
  // Per MoE layer, the GPU with the most expected expert bytes for its rate.
  double experts_s = 0;
  for (std::size_t l = 0; l < ep.expert_gpu.size(); ++l) {
    double worst = 0;
    for (std::size_t g = 0; g < ep.gpus.size(); ++g) {
      double load = 0;
      for (std::size_t e = 0; e < ep.expert_gpu[l].size(); ++e) load += ep.expert_gpu[l][e] == ep.gpus[g].ordinal ? heat[l][e] : 0;
      worst = std::max(worst, top_k * load * record / (r.vram[g].gb_per_s * 1e9));
    }
    experts_s += worst;
  }
  const double ram_share = std::max(0.0, 1.0 - r.gpu_share - r.miss);
  // A host expert for one token: the CPU's GEMVs over it, never faster than RAM streams it.
  const double host_record_s =
      r.ram ? std::max(record / (r.ram->gb_per_s * 1e9),
                       r.expert_kernel.seconds(record, static_cast<double>(fp.expert_matrix_rows()), *r.ram))
            : 0.0;
  const double host_gbs = host_record_s > 0 ? record / host_record_s / 1e9 : 0.0;  // for the inputs
  const double ram_s = ram_share > 0 ? layers * top_k * ram_share * host_record_s : 0.0;
  const double disk_s = r.miss > 0 && r.disk ? layers * r.disk->seconds(top_k * r.miss) : 0.0;
  s.decode_terms = {{"dense weights (each GPU its copy)", static_cast<double>(dense) / (copy_gbs * 1e9)},
                    {"KV cache (each GPU its copy)", static_cast<double>(kv) / (copy_gbs * 1e9)},
                    {"experts on GPUs (slowest per layer)", experts_s},
                    {"exchange: all-reduce per MoE layer", ep.exchange.decode_seconds},
                    {"experts in RAM", ram_s},
                    {"experts from disk", disk_s}};
  double seconds = 0;
  for (const SpeedTerm& term : s.decode_terms) seconds += term.seconds;
  s.decode_tok_per_s = 1.0 / seconds;
  std::string rates;
  for (std::size_t g = 0; g < r.vram.size(); ++g) rates += "; GPU " + std::to_string(ep.gpus[g].ordinal) + " " + r.vram[g].text;
  s.decode_inputs = "dense " + format_bytes(dense) + " + KV at " + (decode_depth >= 0 ? "depth " + std::to_string(depth) : "ctx/2") +
                    " " + format_bytes(kv) + " (f32) on every GPU at the slowest's rate + per MoE layer the slowest GPU's " +
                    "top_k " + format_fixed(top_k, 0) + " x its routing share x " + format_bytes(static_cast<u64>(record)) +
                    " (GPUs serve " + format_fixed(r.gpu_share * 100, 1) + "% of expert reads) + the all-reduce (" +
                    ep.exchange.inputs + ")" +
                    (ram_s > 0 ? " + RAM share " + format_fixed(ram_share, 3) + " at " + format_fixed(host_gbs, 1) + " GB/s" : "") +
                    (disk_s > 0 ? " + miss rate " + format_fixed(r.miss, 3) + " from disk (" + r.disk->text + ")" : "") + rates;
}

// Prefill in batches of B tokens: every GPU reads its dense copy once and the
// distinct experts of its own the batch touches; the slowest GPU sets the
// pace; the host's experts are copied up to rank 0 over its host link (the
// engine's hybrid path), the missed ones read from disk first; one
// all-reduce per layer and batch.
// Weight reads only (the GPU's GEMM time is in no profile yet): an upper bound.
void predict_ep_prefill(const ModelFootprint& fp, const Plan& plan, const std::vector<std::vector<double>>& heat,
                        const EpRates& r, SpeedPrediction& s) {
  const ExpertParallelPlan& ep = plan.expert_parallel;
  const double batch = ep.exchange.batch_tokens, choices = batch * fp.top_k;
  const double record = static_cast<double>(fp.expert().record_bytes), dense = static_cast<double>(dense_bytes_per_token(fp));
  double vram_s = 0;
  for (std::size_t g = 0; g < ep.gpus.size(); ++g) {
    vram_s = std::max(vram_s, (dense + touched_bytes(heat, ep, ep.gpus[g].ordinal, choices, record)) / (r.vram[g].gb_per_s * 1e9));
  }
  const double host_bytes = touched_bytes(heat, ep, -1, choices, record);
  const double host_share = std::max(0.0, 1.0 - r.gpu_share);
  const double missed = host_share > 0 ? r.miss / host_share : 0.0;  // of the host's experts, those not in RAM
  const double host_s = host_bytes > 0 && r.host_gbs > 0 ? host_bytes / (r.host_gbs * 1e9) : 0.0;
  const double layers = static_cast<double>(fp.moe_layer_count());
  const double disk_s = missed > 0 && r.disk ? layers * r.disk->seconds(host_bytes / layers / record * missed) : 0.0;
  s.prefill_terms = {{"memory: weights from VRAM (slowest GPU)", vram_s / batch},
                     {"memory: host experts copied up to rank 0", host_s / batch},
                     {"memory: host experts from disk", disk_s / batch},
                     {"exchange: all-reduce per MoE layer and batch", ep.exchange.prefill_seconds}};
  double seconds = 0;
  for (const SpeedTerm& term : s.prefill_terms) seconds += term.seconds;
  s.prefill_tok_per_s = 1.0 / seconds;
  s.prefill_inputs = "an upper bound, weight reads only (the GPU's GEMM time is in no profile yet): batches of " +
                     format_fixed(batch, 0) + " tokens, each GPU reading dense " + format_bytes(static_cast<u64>(dense)) +
                     " and the distinct experts of its own the batch touches (by their routing shares), the slowest GPU "
                     "setting the pace" +
                     (host_bytes > 0 ? "; the host's " + format_bytes(static_cast<u64>(host_bytes)) + " per batch copied up at " +
                                           r.host_text
                                     : std::string("; no expert on the host")) +
                     "; + the all-reduce per layer and batch";
}

}  // namespace

SpeedPrediction predict_expert_parallel(const DeviceProfile& profile, const ModelFootprint& fp, const Plan& plan,
                                        const experts::UsageHistory* history, int decode_depth) {
  SpeedPrediction s;
  const ExpertParallelPlan& ep = plan.expert_parallel;
  if (!ep.active()) {
    s.unavailable = "not an expert-parallel plan";
    return s;
  }
  const int layers = std::max<int>(1, static_cast<int>(fp.moe_layer_count()));
  const int on_gpus = static_cast<int>(std::lround(static_cast<double>(plan.gpu.vram_slots()) / layers));
  const int slots = std::min(fp.n_experts, plan.cap + on_gpus);
  s.hit_rate = expected_hit_rate(fp, slots, history, s.hit_rate_inputs, true);
  std::string prompt_inputs;
  s.prefill_hit_rate = expected_hit_rate(fp, slots, history, prompt_inputs, false);
  EpRates r;
  if (auto why = gpu_rates(profile, fp, ep, r)) {
    s.unavailable = *why;
    return s;
  }
  r.gpu_share = std::min(1.0, ep.gpu_share);
  const bool host_experts = r.gpu_share < 1.0 - 1e-12;
  r.miss = plan.streaming() && host_experts ? std::clamp(1.0 - std::max(s.hit_rate, r.gpu_share), 0.0, 1.0 - r.gpu_share) : 0.0;
  if (host_experts) {
    r.ram = ram_bandwidth(profile, plan.threads);
    if (!r.ram) {
      s.unavailable = kNoMeasuredBandwidth;
      return s;
    }
    r.expert_kernel = expert_gemv(profile, fp.expert_format, Team{plan.threads, plan.compute_pus});
  }
  r.disk = disk_reads(profile, fp.expert().record_stride, plan.io_threads,
                      history && history->key().n_experts == fp.n_experts ? history->read_round_sets()
                                                                          : std::span<const experts::ReadRounds>(),
                      plan.threads, ReadPhase::both);  // one figure prices both phases' misses here
  if (r.miss > 0 && !r.disk) {
    s.unavailable = missing_disk_bandwidth(profile);
    return s;
  }
  const std::vector<std::vector<double>> heat = expert_heat(fp, history);
  predict_ep_decode(fp, plan, heat, r, decode_depth, s);
  predict_ep_prefill(fp, plan, heat, r, s);
  s.available = true;
  return s;
}

SpeedPrediction predict_plan_speed(const DeviceProfile& profile, const ModelFootprint& fp, const Plan& plan,
                                   const experts::UsageHistory* history, int decode_depth, int prompt_tokens,
                                   DecodeRun decode_run) {
  if (plan.expert_parallel.active()) return predict_expert_parallel(profile, fp, plan, history, decode_depth);
  return predict_speed(profile, fp, plan, history, decode_depth, prompt_tokens, decode_run);
}

}  // namespace coli::planner
