// TOML text -> PlanFile, validating every field and the plan's invariants.
// The engine takes every knob from this file, so anything broken, truncated,
// from the future or unsafe (a cap that starves the round, a total past its
// headroom) is refused with file, line and field named, as profile_read.cpp
// does for device profiles.
#include <algorithm>
#include <cmath>
#include <limits>

#include <toml++/toml.h>

#include "coli/base/cpu_kernels.h"
#include "coli/base/files.h"
#include "coli/planner/plan_io.h"
#include "coli/base/checked_math.h"
#include "coli/probe/toml_fields.h"

namespace coli::planner {
namespace {

constexpr const char* kHint = "fix the field or run coli-plan again to write a fresh plan";

using Reader = TomlFields;

void read_knobs(const Reader& k, PlanFile& f) {
  Plan& p = f.plan;
  p.threads = static_cast<int>(k.integer("threads", 1, 1 << 16));
  p.n_experts = k.count("n_experts", 1);
  f.top_k = static_cast<int>(k.integer("top_k", 1, p.n_experts));
  p.cap = static_cast<int>(k.integer("cap", f.top_k, p.n_experts));  // fewer slots than top_k cannot route a token
  p.pins = static_cast<int>(k.integer("pins", 0, p.cap));
  p.prefill_round_tokens = k.count("prefill_round_tokens", 1);
  p.ctx = k.count("ctx", 1);
  if (k.has("kv_type")) {  // schema 5; older plans' engines kept f32
    const auto type = parse_kv_type(k.text("kv_type"), "kv_type");
    if (!type) k.fail("kv_type", "= \"" + k.text("kv_type") + "\" is not a KV type (" + kv_type_names_text() + ")");
    p.kv_type = *type;
  }
  p.io_threads = static_cast<int>(k.integer("io_threads", 0, 1024));
  p.direct_io = k.boolean("direct_io");
  if (k.has("cpu_kernel")) {  // schema 2
    p.cpu_kernel = k.text("cpu_kernel");
    const std::vector<std::string> kernels = cpu_kernel_names();
    if (!p.cpu_kernel.empty() && std::find(kernels.begin(), kernels.end(), p.cpu_kernel) == kernels.end()) {
      k.fail("cpu_kernel", "= \"" + p.cpu_kernel + "\" is not a CPU kernel variant (" + cpu_kernel_names_text() + ")");
    }
  }
  if (k.has("compute_pus")) {  // schema 2
    auto pus = CpuSet::parse(k.text("compute_pus"));
    if (!pus) k.fail("compute_pus", "is not a CPU list such as \"0-3,8\": " + pus.error().message);
    p.compute_pus = *pus;
    if (!p.compute_pus.empty() && p.compute_pus.size() != p.threads) {
      k.fail("compute_pus", "names " + std::to_string(p.compute_pus.size()) + " CPUs for " + std::to_string(p.threads) +
                                " threads: one CPU per thread, or \"\" for none");
    }
  }
  if (k.has("prefill_threads")) {  // a prefill thread set of its own
    p.prefill_threads = static_cast<int>(k.integer("prefill_threads", 1, 1 << 16));
    auto pus = CpuSet::parse(k.has("prefill_pus") ? k.text("prefill_pus") : "");
    if (!pus) k.fail("prefill_pus", "is not a CPU list such as \"0-3,8\": " + pus.error().message);
    p.prefill_pus = *pus;
    if (!p.prefill_pus.empty() && p.prefill_pus.size() != p.prefill_threads) {
      k.fail("prefill_pus", "names " + std::to_string(p.prefill_pus.size()) + " CPUs for " +
                                std::to_string(p.prefill_threads) + " prefill threads: one CPU per thread, or \"\" for none");
    }
  }
  // Field note 1: the evictable slots must hold every distinct expert a
  // round can touch, or the round evicts experts it still needs.
  const long long distinct = std::min<long long>(p.n_experts - p.pins, 1LL * f.top_k * p.prefill_round_tokens);
  if (p.cap - p.pins < distinct) {
    k.fail("prefill_round_tokens", "= " + std::to_string(p.prefill_round_tokens) + " can touch " +
                                       std::to_string(distinct) + " distinct experts but cap - pins is " +
                                       std::to_string(p.cap - p.pins) + " (field note 1: the round would starve)");
  }
}

void read_memory(const Reader& m, Plan& p) {
  p.headroom_bytes = m.bytes("headroom_bytes");
  p.headroom_source = m.text("headroom_source");
  p.margin.bytes = m.bytes("margin_bytes");
  p.margin.reason = m.text("margin_reason");
  // Every sum over the lines (planned RAM, the VRAM lines) stays below this
  // total, so none of them can wrap past 2^64 into a small, harmless number.
  std::uint64_t all_lines = 0;
  for (const Reader& l : m.tables("lines")) {
    MemoryLine line;
    line.component = l.text("component");
    const auto tier = parse_tier(l.text("tier"));
    if (!tier) l.fail("tier", "must be \"vram\", \"ram\" or \"disk\"");
    line.tier = *tier;
    line.bytes = l.bytes("bytes");
    const auto sum = checked_add(all_lines, line.bytes);
    if (!sum || *sum > static_cast<std::uint64_t>(kTomlMaxBytes)) {
      l.fail("bytes", "brings the memory lines past " + std::to_string(kTomlMaxBytes) + " bytes (4 PiB), which no plan needs");
    }
    all_lines = *sum;
    line.formula = l.text("formula");
    p.memory.lines.push_back(std::move(line));
  }
  if (m.bytes("planned_ram_bytes") != p.planned_ram_bytes()) {
    m.fail("planned_ram_bytes", "= " + std::to_string(m.bytes("planned_ram_bytes")) +
                                    " is not the sum of the RAM lines (" + std::to_string(p.planned_ram_bytes()) + ")");
  }
  // A plan past its headroom would be OOM-killed: never obey it.
  if (p.planned_ram_bytes() + p.margin.bytes > p.headroom_bytes) {
    m.fail("headroom_bytes", "= " + std::to_string(p.headroom_bytes) + " is less than the planned RAM plus margin (" +
                                 std::to_string(p.planned_ram_bytes() + p.margin.bytes) + ")");
  }
}

void read_speed(const Reader& s, SpeedPrediction& out) {
  out.available = s.boolean("available");
  out.unavailable = s.text("unavailable");
  out.hit_rate = s.real("hit_rate", 0, 1);
  // Since issue 15's phase-split history; before it, one rate served both.
  out.prefill_hit_rate = s.has("prefill_hit_rate") ? s.real("prefill_hit_rate", 0, 1) : out.hit_rate;
  out.hit_rate_inputs = s.text("hit_rate_inputs");
  out.decode_tok_per_s = s.real("decode_tok_per_s", 0, 1e9);
  out.decode_inputs = s.text("decode_inputs");
  out.prefill_tok_per_s = s.real("prefill_tok_per_s", 0, 1e12);
  out.prefill_inputs = s.text("prefill_inputs");
  // Since issue 15's read counts (absent before: 0, not predicted).
  if (s.has("decode_disk_reads")) out.decode_disk_reads = s.real("decode_disk_reads", 0, 1e12);
  if (s.has("prefill_disk_reads")) out.prefill_disk_reads = s.real("prefill_disk_reads", 0, 1e15);
  if (s.has("prefill_prompt_tokens")) out.prefill_prompt_tokens = static_cast<int>(s.integer("prefill_prompt_tokens", 0, 1 << 30));
  if (s.has("disk_read_seconds")) out.disk_read_seconds = s.real("disk_read_seconds", 0, 3600);
  // The probe's slowest and fastest rounds (speed_band.h; absent before session 40: 0, none made).
  auto rate = [&](const char* key, double limit) { return s.has(key) ? s.real(key, 0, limit) : 0.0; };
  out.band = {rate("decode_slowest_tok_per_s", 1e9), rate("decode_fastest_tok_per_s", 1e9),
              rate("prefill_slowest_tok_per_s", 1e12), rate("prefill_fastest_tok_per_s", 1e12)};
  // Each prediction's terms, seconds per token (absent in plans from before issue 15's).
  auto terms = [&](const char* key, std::vector<SpeedTerm>& into) {
    if (!s.has(key)) return;
    for (const Reader& t : s.tables(key)) into.push_back({t.text("name"), t.real("seconds", 0, 1e9)});
  };
  terms("decode_terms", out.decode_terms);
  terms("prefill_terms", out.prefill_terms);
  if (!out.available && out.unavailable.empty()) s.fail("unavailable", "must say why when available = false");
}

// The VRAM tier. Its lines are in [memory]; this is which device, which
// experts, and whether this build's engine can run it.
void read_gpu(const Reader& g, Plan& p) {
  GpuTier& t = p.gpu;
  t.device.gpu.name = g.text("device");
  if (g.has("device_index")) {  // schema 3: index + UUID
    t.device.gpu.index = static_cast<int>(g.integer("device_index", -1, 1024));
    t.device.gpu.uuid = g.text("device_uuid");
    if (t.device.gpu.chosen() == t.device.gpu.name.empty()) g.fail("device_index", "does not agree with device");
  } else if (!t.device.gpu.name.empty()) {
    g.fail("device_index", "is missing: this plan (schema 2) names its GPU \"" + t.device.gpu.name +
                               "\" only by name, which identical GPUs share; re-plan with coli-plan");
  }
  t.backend = g.text("backend");
  t.engine_runs_it = g.boolean("engine_runs_it");
  // Plans written before the GPU decoder have neither: expert-tier previews.
  t.whole_decoder = g.has("whole_decoder") && g.boolean("whole_decoder");
  if (g.has("device_type")) t.device_type = g.text("device_type");
  if (g.has("vendor_id")) t.vendor_id = static_cast<std::uint32_t>(g.integer("vendor_id", 0, 0xffffffffll));
  t.vram_headroom_bytes = g.bytes("vram_headroom_bytes");
  t.vram_headroom_source = g.text("vram_headroom_source");
  t.vram_reserve_bytes = g.bytes("vram_reserve_bytes");
  // Plans written before the load phase was priced apart had it as a line of its own.
  if (g.has("load_buffer_bytes")) t.load_buffer_bytes = g.bytes("load_buffer_bytes");
  t.vram_experts = g.ints("vram_experts", 0, p.n_experts);
  t.vram_share = g.real("vram_share", 0, 1);
  // Plans written before --gpu-batch: the engine's default then.
  if (g.has("batch_tokens")) t.batch_tokens = static_cast<int>(g.integer("batch_tokens", 1, kMaxGpuBatchTokens));
  t.share_inputs = g.text("share_inputs");
  t.reason = g.text("reason");
  t.device.reason = g.text("device_reason");
  for (const Reader& v : g.tables("variants")) {
    t.device.variants.push_back({v.text("shape"), v.text("variant"),
                                 static_cast<std::uint32_t>(v.integer("shared_memory_bytes", 0, 16 << 20)),
                                 v.text("reason")});
  }
  for (const MemoryLine& line : p.memory.lines) {
    if (line.tier == Tier::vram) t.lines.push_back(line);
    if (line.component.rfind("GPU ", 0) == 0 && line.tier == Tier::ram) t.lines.push_back(line);
  }
  if (!t.device.gpu.chosen() && t.vram_slots() > 0) g.fail("vram_experts", "places experts in VRAM without a device");
  std::uint64_t vram = 0;
  for (const MemoryLine& line : p.memory.lines) vram += line.tier == Tier::vram ? line.bytes : 0;
  if (vram > t.vram_headroom_bytes) {
    g.fail("vram_headroom_bytes", "= " + std::to_string(t.vram_headroom_bytes) + " is less than the VRAM lines (" +
                                      std::to_string(vram) + ")");
  }
}

// One GPU of [expert_parallel]: its fields and its "GPU <ordinal> " lines
// from [memory], whose VRAM must fit its own budget.
GpuShare read_gpu_share(const Reader& g, const Plan& p) {
  GpuShare s;
  s.ordinal = static_cast<int>(g.integer("ordinal", 0, 1023));
  s.uuid = g.text("uuid");
  s.name = g.text("name");
  s.budget_bytes = g.bytes("budget_bytes");
  s.budget_source = g.text("budget_source");
  s.load_buffer_bytes = g.bytes("load_buffer_bytes");
  s.experts = g.ints("experts", 0, p.n_experts);
  if (s.experts.size() != p.gpu.vram_experts.size()) {
    g.fail("experts", "has " + std::to_string(s.experts.size()) + " layers, gpu.vram_experts " +
                          std::to_string(p.gpu.vram_experts.size()));
  }
  s.load_share = g.real("load_share", 0, 1);
  s.peak_layer_share = g.real("peak_layer_share", 0, 1);
  s.numa_node = static_cast<int>(g.integer("numa_node", -1, 1 << 16));
  s.local_cpus = g.cpus("local_cpus");
  s.reason = g.text("reason");
  const std::string prefix = "GPU " + std::to_string(s.ordinal) + " ";
  for (const MemoryLine& line : p.memory.lines) {
    if (line.component.rfind(prefix, 0) == 0) s.lines.push_back(line);
  }
  if (s.vram_bytes() > s.budget_bytes) {
    g.fail("budget_bytes", "= " + std::to_string(s.budget_bytes) + " is less than GPU " + std::to_string(s.ordinal) +
                               "'s VRAM lines (" + std::to_string(s.vram_bytes()) + ")");
  }
  return s;
}

void read_exchange(const Reader& x, ExchangeTraffic& out) {
  out.gpus = static_cast<int>(x.integer("gpus", 2, 1024));
  out.layers = static_cast<int>(x.integer("layers", 0, 1 << 20));
  out.message_bytes = x.bytes("message_bytes");
  out.bytes_per_token = x.bytes("bytes_per_token");
  out.ring_gbs = x.real("ring_gbs", 1e-9, 1e9);
  out.slowest_link = x.text("slowest_link");
  out.latency_s = x.real("latency_s", 0, 1);
  out.latency_source = x.text("latency_source");
  out.decode_seconds = x.real("decode_seconds", 0, 1e9);
  out.batch_tokens = static_cast<int>(x.integer("batch_tokens", 1, kMaxGpuBatchTokens));
  out.prefill_seconds = x.real("prefill_seconds", 0, 1e9);
  out.inputs = x.text("inputs");
}

// [expert_parallel]: every expert of every layer on one listed GPU or the
// host (-1), each GPU's per-layer counts agreeing with the placement, and
// their sum with gpu.vram_experts.
void read_expert_parallel(const Reader& x, Plan& p) {
  ExpertParallelPlan& ep = p.expert_parallel;
  if (p.gpu.backend != "cuda") x.fail("gpus", "spreads experts over CUDA devices but gpu.backend is \"" + p.gpu.backend + "\"");
  for (const Reader& g : x.tables("gpus")) {
    ep.gpus.push_back(read_gpu_share(g, p));
    for (std::size_t i = 0; i + 1 < ep.gpus.size(); ++i) {
      if (ep.gpus[i].ordinal == ep.gpus.back().ordinal) g.fail("ordinal", "names GPU " + std::to_string(ep.gpus[i].ordinal) + " twice");
    }
  }
  if (ep.gpus.size() < 2) x.fail("gpus", "lists " + std::to_string(ep.gpus.size()) + " GPU(s): expert parallel needs 2 or more");
  ep.gpu_share = x.real("gpu_share", 0, 1);
  ep.share_inputs = x.text("share_inputs");
  ep.reason = x.text("reason");
  read_exchange(x.table("exchange"), ep.exchange);
  const std::vector<Reader> layers = x.tables("layers");
  if (layers.size() != p.gpu.vram_experts.size()) {
    x.fail("layers", "has " + std::to_string(layers.size()) + " MoE layers, gpu.vram_experts " +
                         std::to_string(p.gpu.vram_experts.size()));
  }
  for (std::size_t l = 0; l < layers.size(); ++l) {
    std::vector<int> row = layers[l].ints("expert_gpu", -1, 1023);
    if (row.size() != static_cast<std::size_t>(p.n_experts)) {
      layers[l].fail("expert_gpu", "places " + std::to_string(row.size()) + " experts of " + std::to_string(p.n_experts) +
                                       ": one entry per expert");
    }
    int on_gpus = 0;
    for (const GpuShare& g : ep.gpus) {
      const int count = static_cast<int>(std::count(row.begin(), row.end(), g.ordinal));
      if (count != g.experts[l]) {
        layers[l].fail("expert_gpu", "puts " + std::to_string(count) + " experts on GPU " + std::to_string(g.ordinal) +
                                         ", its experts[" + std::to_string(l) + "] says " + std::to_string(g.experts[l]));
      }
      on_gpus += count;
    }
    if (on_gpus + std::count(row.begin(), row.end(), -1) != static_cast<long>(row.size())) {
      layers[l].fail("expert_gpu", "names a GPU not in expert_parallel.gpus: use their ordinals, or -1 for the host");
    }
    if (on_gpus != p.gpu.vram_experts[l]) {
      layers[l].fail("expert_gpu", "puts " + std::to_string(on_gpus) + " experts on GPUs, gpu.vram_experts[" +
                                       std::to_string(l) + "] says " + std::to_string(p.gpu.vram_experts[l]));
    }
    ep.expert_gpu.push_back(std::move(row));
  }
}

PlanFile read_plan(const Reader& root) {
  PlanFile f;
  f.schema_version = static_cast<int>(root.integer("schema_version", 1, std::numeric_limits<int>::max()));
  if (f.schema_version > kPlanSchemaVersion) {
    root.fail("schema_version", "= " + std::to_string(f.schema_version) + " is newer than this build understands (" +
                                    std::to_string(kPlanSchemaVersion) + "): upgrade coli");
  }
  f.planning_ms = root.real("planning_ms", 0, 1e9);
  const Reader m = root.table("made_for");
  f.profile_fingerprint = m.text("profile_fingerprint");
  if (f.profile_fingerprint.empty()) m.fail("profile_fingerprint", "is empty");
  f.profile_path = m.text("profile_path");
  f.retimed = m.has("retimed") ? m.text("retimed") : "";
  f.model_name = m.text("model_name");
  f.model_identity = m.text("model_identity");
  if (f.model_identity.empty()) m.fail("model_identity", "is empty");
  const auto experts = parse_weight_format(m.text("expert_format"), "expert_format");
  if (!experts || !traits(*experts).expert_records) {
    m.fail("expert_format", "must be \"q4_g64\", \"q8_row\" or \"f32\"");
  }
  f.expert_format = *experts;
  const auto dense = parse_dense_format(m.text("dense_format"), "dense_format");
  if (!dense) m.fail("dense_format", "must be \"source\", \"q8_row\" or \"q4_g64\"");
  f.dense_format = *dense;
  read_knobs(root.table("knobs"), f);
  read_memory(root.table("memory"), f.plan);
  for (const Reader& d : root.tables("decisions")) {
    Decision decision{d.text("knob"), d.text("value"), d.text("reason")};
    if (d.has("number")) {  // schema 4
      decision.number = d.integer("number", 0, std::numeric_limits<std::int64_t>::max());
      decision.unit = d.text("unit");
    }
    f.plan.decisions.push_back(std::move(decision));
  }
  read_speed(root.table("speed"), f.speed);
  if (root.has("gpu")) read_gpu(root.table("gpu"), f.plan);  // schema 2
  if (root.has("expert_parallel")) {  // schema 7
    if (f.schema_version < 7 || !root.has("gpu")) {
      root.fail("expert_parallel", "needs schema_version 7 and a [gpu] table: run coli-plan again");
    }
    read_expert_parallel(root.table("expert_parallel"), f.plan);
  }
  return f;
}

}  // namespace

Result<PlanFile> parse_plan(std::string_view toml_text, const std::string& source_name) {
  return read_toml_document(toml_text, source_name, kHint, "coli-plan", [](const Reader& root) { return read_plan(root); });
}

Result<PlanFile> load_plan(const std::filesystem::path& path) {
  auto text = read_text_file(path);
  if (!text) return make_error(text.error().message + " (run coli-plan --out to write a plan)");
  return parse_plan(*text, path.string());
}

}  // namespace coli::planner
