// PlanFile -> toml::table -> TOML or JSON text. The table layout is the file
// format; plan_read.cpp is its mirror image and validates it.
#include <sstream>

#include <toml++/toml.h>

#include "coli/base/files.h"
#include "coli/experts/usage_history.h"
#include "coli/model/tensor_layout.h"
#include "coli/planner/plan_io.h"

namespace coli::planner {
namespace {

// Flat layout: no indentation of sub-tables, so `grep` and diffs stay simple.
constexpr auto kFlat = toml::toml_formatter::default_flags & ~toml::format_flags::indentation;

std::int64_t as_int(std::uint64_t bytes) { return static_cast<std::int64_t>(bytes); }

// A prediction's terms in their order: [{name, seconds}, ...].
toml::array terms_array(const std::vector<SpeedTerm>& terms) {
  toml::array out;
  for (const SpeedTerm& t : terms) out.push_back(toml::table{{"name", t.name}, {"seconds", t.seconds}});
  return out;
}

// Expert parallel (schema 7): each GPU's share, the placement per layer
// and the exchange. Each GPU's memory lines are in [memory], named "GPU <ordinal> ...".
toml::table expert_parallel_table(const ExpertParallelPlan& ep) {
  toml::array gpus, layers;
  for (const GpuShare& g : ep.gpus) {
    toml::array experts;
    for (int count : g.experts) experts.push_back(count);
    gpus.push_back(toml::table{{"ordinal", g.ordinal},
                               {"uuid", g.uuid},
                               {"name", g.name},
                               {"budget_bytes", as_int(g.budget_bytes)},
                               {"budget_source", g.budget_source},
                               {"load_buffer_bytes", as_int(g.load_buffer_bytes)},
                               {"experts", std::move(experts)},
                               {"load_share", g.load_share},
                               {"peak_layer_share", g.peak_layer_share},
                               {"numa_node", g.numa_node},
                               {"local_cpus", g.local_cpus.to_list()},
                               {"reason", g.reason}});
  }
  for (const std::vector<int>& layer : ep.expert_gpu) {
    toml::array row;
    for (int gpu : layer) row.push_back(gpu);
    layers.push_back(toml::table{{"expert_gpu", std::move(row)}});
  }
  const ExchangeTraffic& x = ep.exchange;
  return toml::table{{"gpu_share", ep.gpu_share},
                     {"share_inputs", ep.share_inputs},
                     {"reason", ep.reason},
                     {"gpus", std::move(gpus)},
                     {"exchange", toml::table{{"gpus", x.gpus},
                                              {"layers", x.layers},
                                              {"message_bytes", as_int(x.message_bytes)},
                                              {"bytes_per_token", as_int(x.bytes_per_token)},
                                              {"ring_gbs", x.ring_gbs},
                                              {"slowest_link", x.slowest_link},
                                              {"latency_s", x.latency_s},
                                              {"latency_source", x.latency_source},
                                              {"decode_seconds", x.decode_seconds},
                                              {"batch_tokens", x.batch_tokens},
                                              {"prefill_seconds", x.prefill_seconds},
                                              {"inputs", x.inputs}}},
                     {"layers", std::move(layers)}};
}

toml::table memory_table(const Plan& p) {
  toml::array lines;
  for (const MemoryLine& line : p.memory.lines) {
    lines.push_back(toml::table{{"component", line.component},
                                {"tier", tier_name(line.tier)},
                                {"bytes", as_int(line.bytes)},
                                {"formula", line.formula}});
  }
  // planned_ram_bytes is the sum of the RAM lines, written for people
  // reading the file; the reader checks it so a hand edit stays consistent.
  return toml::table{{"headroom_bytes", as_int(p.headroom_bytes)},
                     {"headroom_source", p.headroom_source},
                     {"planned_ram_bytes", as_int(p.planned_ram_bytes())},
                     {"margin_bytes", as_int(p.margin.bytes)},
                     {"margin_reason", p.margin.reason},
                     {"lines", std::move(lines)}};
}

toml::array decisions_array(const Plan& p) {
  toml::array decisions;
  for (const Decision& d : p.decisions) {
    toml::table decision{{"knob", d.knob}, {"value", d.value}, {"reason", d.reason}};
    if (d.number) decision.insert("number", *d.number), decision.insert("unit", d.unit);  // schema 4
    decisions.push_back(std::move(decision));
  }
  return decisions;
}

toml::table gpu_table(const GpuTier& g) {
  toml::array variants, vram_experts;
  for (const VariantChoice& v : g.device.variants) {
    variants.push_back(toml::table{{"shape", v.shape},
                                   {"variant", v.variant},
                                   {"shared_memory_bytes", static_cast<std::int64_t>(v.shared_memory_bytes)},
                                   {"reason", v.reason}});
  }
  for (int count : g.vram_experts) vram_experts.push_back(count);
  return toml::table{{"device", g.device.gpu.name},
                     {"device_index", g.device.gpu.index},
                     {"device_uuid", g.device.gpu.uuid},
                     {"backend", g.backend},
                     {"engine_runs_it", g.engine_runs_it},
                     {"whole_decoder", g.whole_decoder},
                     {"device_type", g.device_type},
                     {"vendor_id", static_cast<std::int64_t>(g.vendor_id)},
                     {"vram_headroom_bytes", as_int(g.vram_headroom_bytes)},
                     {"vram_headroom_source", g.vram_headroom_source},
                     {"vram_reserve_bytes", as_int(g.vram_reserve_bytes)},
                     {"load_buffer_bytes", as_int(g.load_buffer_bytes)},
                     {"vram_experts", std::move(vram_experts)},
                     {"vram_share", g.vram_share},
                     {"batch_tokens", g.batch_tokens},
                     {"share_inputs", g.share_inputs},
                     {"reason", g.reason},
                     {"device_reason", g.device.reason},
                     {"variants", std::move(variants)}};
}

toml::table speed_table(const SpeedPrediction& s) {
  return toml::table{{"available", s.available},
                     {"unavailable", s.unavailable},
                     {"hit_rate", s.hit_rate},
                     {"prefill_hit_rate", s.prefill_hit_rate},
                     {"hit_rate_inputs", s.hit_rate_inputs},
                     {"decode_tok_per_s", s.decode_tok_per_s},
                     {"decode_inputs", s.decode_inputs},
                     {"prefill_tok_per_s", s.prefill_tok_per_s},
                     {"prefill_inputs", s.prefill_inputs},
                     {"decode_disk_reads", s.decode_disk_reads},
                     {"prefill_disk_reads", s.prefill_disk_reads},
                     {"prefill_prompt_tokens", s.prefill_prompt_tokens},
                     {"disk_read_seconds", s.disk_read_seconds},
                     {"decode_slowest_tok_per_s", s.band.decode_slowest},
                     {"decode_fastest_tok_per_s", s.band.decode_fastest},
                     {"prefill_slowest_tok_per_s", s.band.prefill_slowest},
                     {"prefill_fastest_tok_per_s", s.band.prefill_fastest},
                     {"decode_terms", terms_array(s.decode_terms)},
                     {"prefill_terms", terms_array(s.prefill_terms)}};
}

toml::table knobs_table(const PlanFile& f) {
  const Plan& p = f.plan;
  toml::table knobs{{"threads", p.threads},
                    {"n_experts", p.n_experts},
                    {"top_k", f.top_k},
                    {"cap", p.cap},
                    {"pins", p.pins},
                    {"prefill_round_tokens", p.prefill_round_tokens},
                    {"ctx", p.ctx},
                    {"kv_type", kv_type_name(p.kv_type)},
                    {"io_threads", p.io_threads},
                    {"direct_io", p.direct_io},
                    {"compute_pus", p.compute_pus.to_list()},
                    {"cpu_kernel", p.cpu_kernel}};
  // Only when prefill has a set of its own, so plans without one read as before.
  if (p.prefill_threads > 0) {
    knobs.insert("prefill_threads", p.prefill_threads);
    knobs.insert("prefill_pus", p.prefill_pus.to_list());
  }
  return knobs;
}

toml::table plan_table(const PlanFile& f) {
  const Plan& p = f.plan;
  toml::table made_for{{"profile_fingerprint", f.profile_fingerprint},
                       {"profile_path", f.profile_path},
                       {"model_name", f.model_name},
                       {"model_identity", f.model_identity},
                       {"expert_format", name_of(f.expert_format)},
                       {"dense_format", dense_format_name(f.dense_format)}};
  // Only when coli-plan --retime timed the kernels again: its prediction is from those points.
  if (!f.retimed.empty()) made_for.insert("retimed", f.retimed);
  toml::table table{{"gpu", gpu_table(p.gpu)},
                    {"schema_version", f.schema_version},
                    {"planning_ms", f.planning_ms},
                    {"made_for", std::move(made_for)},
                    {"knobs", knobs_table(f)},
                    {"memory", memory_table(p)},
                    {"decisions", decisions_array(p)},
                    {"speed", speed_table(f.speed)}};
  if (p.expert_parallel.active()) table.insert("expert_parallel", expert_parallel_table(p.expert_parallel));
  return table;
}

}  // namespace

std::string model_identity(std::string_view config_text, const model::ModelConfig& config) {
  std::vector<std::string> names;
  for (const model::ExpectedTensor& t : model::expected_tensors(config)) names.push_back(t.name);
  return experts::usage_model_identity(model::canonical_config_json(config_text), names);
}

std::string plan_to_toml(const PlanFile& plan) {
  std::ostringstream out;
  out << "# coli plan, written by coli-plan. `coli run --plan` takes every knob from it.\n"
      << "# Edit with care: coli validates every field and the plan's invariants.\n\n"
      << toml::toml_formatter{plan_table(plan), kFlat} << "\n";
  return out.str();
}

std::string plan_to_json(const PlanFile& plan) {
  toml::table table = plan_table(plan);
  table.insert("fits", true);  // what a script checks first; refusal_to_json says false
  std::ostringstream out;
  out << toml::json_formatter{table} << "\n";
  return out.str();
}

std::string refusal_to_json(const Refusal& refusal) {
  toml::table tiers;
  for (const TierNeed& need : refusal.tiers) {
    tiers.insert(tier_name(need.tier), toml::table{{"needed_bytes", as_int(need.needed_bytes)},
                                                   {"available_bytes", as_int(need.available_bytes)}});
  }
  toml::array advice;
  for (const std::string& item : refusal.advice) advice.push_back(item);
  const toml::table table{{"fits", false},
                          {"does_not_fit", refusal.does_not_fit},
                          {"refused", refusal.message},
                          {"tiers", std::move(tiers)},
                          {"advice", std::move(advice)}};
  std::ostringstream out;
  out << toml::json_formatter{table} << "\n";
  return out.str();
}

Status save_plan(const std::filesystem::path& path, const PlanFile& plan) {
  return write_file_atomically(path, plan_to_toml(plan));
}

std::optional<Tier> parse_tier(std::string_view name) {
  for (Tier t : {Tier::vram, Tier::ram, Tier::disk}) {
    if (tier_name(t) == name) return t;
  }
  return std::nullopt;
}

}  // namespace coli::planner
