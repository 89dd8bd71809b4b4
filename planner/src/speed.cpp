#include "coli/planner/speed.h"

#include "coli/planner/cache_replay.h"

#include "coli/base/pass_shape.h"  // kPassSlice, kParallelTokens
#include "coli/forward/attention.h"  // kAttentionRowsPerBlock
#include "cuda/cuda_layout.h"  // the hybrid batch's staging pass
#include "measured_rates.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

namespace coli::planner {
namespace {

using u64 = std::uint64_t;
using namespace measured;  // the profile's rates the model reads (measured_rates.h)

// Parallel steps of one CPU decode token, as the engine runs them (the
// struct's comment in measured_rates.h lists them).
ParallelSteps cpu_decode_parallel_steps(const ModelFootprint& fp) {
  const int layers = static_cast<int>(fp.config.num_hidden_layers), moe = static_cast<int>(fp.moe_layer_count());
  const bool shared = fp.config.has_shared_expert();
  const int per_moe = 1 + kDecodeExpertBatch.regions + (shared ? 2 : 0);
  return {layers * 3 + moe * per_moe + (layers - moe) * 2 + 1, moe * (kDecodeExpertBatch.barriers - (shared ? 1 : 0))};
}

// Multiply-adds of a causal prompt's attention: every layer, every query
// head, a dot with K and a weighted sum of V over the positions up to its own.
double prompt_attention_macs(const ModelFootprint& fp, double prompt) {
  const model::ModelConfig& c = fp.config;
  return static_cast<double>(c.num_hidden_layers) * static_cast<double>(c.num_attention_heads) *
         static_cast<double>(c.head_dim) * 2 * prompt * (prompt + 1) / 2;
}

// Multiply-adds one prefill token costs: every active weight but the lm_head
// (prefill projects only the last token to the vocabulary).
double prefill_macs_per_token(const ModelFootprint& fp) {
  const double lm_head = fp.config.tie_word_embeddings ? 0.0 : static_cast<double>(fp.config.vocab_size) * fp.config.hidden_size;
  return std::max(0.0, static_cast<double>(fp.active_parameters) - lm_head);
}

// Quantised dense from a bf16 checkpoint: the matrices coli convert keeps
// in the checkpoint's precision (the router: DenseComponent::float_matrix_*)
// run on the float kernels beside the quantised ones.
bool keeps_bf16_matrices(const ModelFootprint& fp) {
  return quantized_format(fp.dense_format).has_value() && fp.source_dtype.rfind("bfloat16", 0) == 0;
}

// What a prompt token's dense projections run (attention, router, shared
// expert, dense MLP: every dense matrix but the embedding table and the
// lm_head; prefill projects only the last token to the vocabulary): their
// rows, and of them the matrices kept in bf16 beside quantised ones
// (keeps_bf16_matrices), which the float GEMM multiplies: rows and
// multiply-adds. None of those with source dense (all of it is the float
// GEMM's already) or another source.
struct PromptProjections {
  double rows = 0, float_rows = 0, float_macs = 0;
};
PromptProjections prompt_projections(const ModelFootprint& fp) {
  PromptProjections out;
  const bool split = keeps_bf16_matrices(fp) && fp.source_dtype_bytes > 0;
  for (const DenseComponent& c : fp.dense) {
    if (c.role == "embedding" || c.role == "lm_head") continue;
    out.rows += static_cast<double>(c.matrix_rows);
    if (!split) continue;
    out.float_rows += static_cast<double>(c.float_matrix_rows);
    out.float_macs += static_cast<double>(c.float_matrix_bytes) / static_cast<double>(fp.source_dtype_bytes);
  }
  return out;
}

// The threads a prompt's per-token steps share (MoeModel::for_tokens: the
// team from kParallelTokens tokens, else the calling thread alone).
double prompt_token_sharing(double prompt, const Team& team) {
  return prompt >= static_cast<double>(kParallelTokens) ? std::max(1, team.size()) : 1;
}

// The matrix that projects to the vocabulary: the lm_head, or the embedding
// table it is tied to.
const DenseComponent* vocabulary_projection(const ModelFootprint& fp) {
  const std::string role = fp.config.tie_word_embeddings ? "embedding" : "lm_head";
  for (const DenseComponent& c : fp.dense) {
    if (c.role == role) return &c;
  }
  return nullptr;
}

// The decode GEMV (measured_rates.h) of the model's dense format, its
// weights `from` RAM or warm in the caches (the float GEMV's cached fit where
// the profile has it, float_gemv_fit; the other formats have no cached
// points: RAM's).
// From the last level, the cached points stand in where the profile has
// none of its own (profiles before them).
std::optional<RowCost> float_gemv_fit(const DeviceProfile& profile, const Team& team, WeightsFrom from) {
  if (from == WeightsFrom::last_level) {
    if (auto warm = float_gemv_row_cost(profile, team, from)) return warm;
  }
  if (from != WeightsFrom::ram) {
    if (auto warm = float_gemv_row_cost(profile, team, WeightsFrom::cache)) return warm;
  }
  return float_gemv_row_cost(profile, team, WeightsFrom::ram);
}
DecodeGemv dense_gemv(const DeviceProfile& profile, const ModelFootprint& fp, const Team& team, WeightsFrom from) {
  DecodeGemv gemv{decode_kernel_rate(profile, dense_decode_kernels(fp), team), std::nullopt};
  if (gemv.kernel && dense_decode_kernels(fp).front() == "dense_bf16_decode") gemv.rows = float_gemv_fit(profile, team, from);
  return gemv;
}

// What one token's dense GEMVs over `components` read: every dense tensor
// but the embedding table, of which a token reads one row (no GEMV) unless
// the lm_head is that table (tied embeddings); and of those the matrices the
// float GEMV multiplies. dense_bytes_per_token and dense_rows_per_token are
// its totals over the model.
struct DenseWork {
  u64 bytes = 0, rows = 0, float_bytes = 0, float_rows = 0;
};
DenseWork dense_work(const ModelFootprint& fp, std::span<const DenseComponent> components) {
  DenseWork work;
  for (const DenseComponent& c : components) {
    const bool lookup = c.role == "embedding" && !fp.config.tie_word_embeddings;
    work.bytes += lookup ? std::min<u64>(c.held_bytes, fp.config.hidden_size * fp.source_dtype_bytes) : c.held_bytes;
    if (lookup) continue;
    work.rows += c.matrix_rows;
    work.float_bytes += c.float_matrix_bytes, work.float_rows += c.float_matrix_rows;
  }
  return work;
}

// A token's dense GEMVs: with quantised dense, the matrices the engine keeps
// in the checkpoint's bf16 (the router) by the float GEMV's fit where the
// profile has it, the rest by the quantised kernel; with source dense, all
// by the float GEMV (dense_gemv). `text` says what went the float way.
struct DenseSeconds {
  double seconds = 0;
  std::string text;
};
DenseSeconds dense_gemv_seconds(const DeviceProfile& profile, const ModelFootprint& fp, const Team& team, WeightsFrom from,
                                const Bandwidth& ram, const DenseWork& work) {
  const auto bytes = static_cast<double>(work.bytes), rows = static_cast<double>(work.rows);
  const auto float_bytes = static_cast<double>(work.float_bytes), float_rows = static_cast<double>(work.float_rows);
  const DecodeGemv gemv = dense_gemv(profile, fp, team, from);
  const bool mixed = keeps_bf16_matrices(fp) && float_bytes > 0;
  const DecodeGemv floats{decode_kernel_rate(profile, {"dense_bf16_decode"}, team),
                          mixed ? float_gemv_fit(profile, team, from) : std::nullopt};
  if (!mixed || !floats.rows) return {gemv.seconds(bytes, rows, ram), ""};
  return {gemv.seconds(bytes - float_bytes, rows - float_rows, ram) + floats.seconds(float_bytes, float_rows, ram),
          "; of them " + format_bytes(work.float_bytes) + " in " + std::to_string(work.float_rows) +
              " rows kept in bf16 (not quantised: the router) at " + floats.rows->text};
}

// A prompt's last token projected to the vocabulary, as a decode token's
// lm_head (the whole matrix streamed once for one row of x), its weights
// from RAM whatever a decode token finds in the caches: a prompt's pass
// runs every layer between two lm_heads. The 2-core VM's demo-shaped
// models, vocabulary 50257 against 256: a 512-token prompt took 1.57 ms
// more at 1 thread and 0.83 at 2, where the RAM fit says 1.2 and 0.87 and
// the last-level one (decode's) 0.72 and 0.38 (docs/benchmarks.md, session 49).
double last_token_lm_head_seconds(const DeviceProfile& profile, const ModelFootprint& fp, const Team& team,
                                  const Bandwidth& ram) {
  const DenseComponent* projection = vocabulary_projection(fp);
  if (!projection) return 0.0;
  return dense_gemv_seconds(profile, fp, team, WeightsFrom::ram, ram, dense_work(fp, std::span(projection, 1))).seconds;
}

}  // namespace

u64 dense_bytes_per_token(const ModelFootprint& fp) { return dense_work(fp, fp.dense).bytes; }

std::uint64_t dense_rows_per_token(const ModelFootprint& fp) { return dense_work(fp, fp.dense).rows; }

double expert_batch_calls(double top_k, double resident, double miss) {
  return (1.0 - std::pow(1.0 - resident, top_k)) + (1.0 - std::pow(1.0 - miss, top_k));
}

// Whether the usage history speaks for this model: its expert count and
// some recorded tokens (the hit rate and the rounds' distinct experts read
// it only then, and say so).
namespace {
bool history_fits(const ModelFootprint& fp, const experts::UsageHistory* history) {
  return history && history->key().n_experts == fp.n_experts && history->total_tokens() > 0;
}
}  // namespace

// A layer's hit rate at `cap` slots from its recorded LRU stack distances
// (exact for an LRU cache of that many slots), or nullopt when none were
// recorded (a version 1 history, or a GPU run's layers). The last entry
// counts first uses, routings to an expert the recording had not seen yet.
// A prompt's come at the recording's cold start, which a warm cache does
// not repeat: the prompt rate is over the routings whose previous use the
// history saw (counted as misses, a 1056-token history of OLMoE, 0.8% of
// its routings first uses, priced a warm prompt's reads at 1127 where the
// engine read 661; without them 669). A decode token's first uses are
// experts its whole prompt left unused, beyond any cache that holds fewer
// than all: misses (without them 2.4 reads a token where the engine made 3.9).
std::optional<double> lru_hit_rate(std::span<const double> reuse, int cap, bool first_uses_miss) {
  if (reuse.empty()) return std::nullopt;
  const double seen = std::accumulate(reuse.begin(), reuse.end() - 1, 0.0);
  const double total = first_uses_miss ? seen + reuse.back() : seen;
  if (total <= 0) return std::nullopt;
  const auto within = std::min<std::ptrdiff_t>(cap, static_cast<std::ptrdiff_t>(reuse.size()) - 1);
  return std::accumulate(reuse.begin(), reuse.begin() + std::max<std::ptrdiff_t>(0, within), 0.0) / total;
}

double expected_hit_rate(const ModelFootprint& fp, int cap, const experts::UsageHistory* history, std::string& inputs,
                         bool decode_tokens) {
  const double uniform = std::clamp(static_cast<double>(cap) / fp.n_experts, 0.0, 1.0);
  if (!history_fits(fp, history)) {
    inputs = "uniform routing: cap " + std::to_string(cap) + " / " + std::to_string(fp.n_experts) + " experts";
    if (history) inputs += " (the usage history does not fit this model or is empty)";
    return uniform;
  }
  const int layers = history->key().n_layers;
  double sum = 0;
  int from_reuse = 0, from_decode = 0;
  for (int layer = 0; layer < layers; ++layer) {
    if (cap >= fp.n_experts) {
      sum += 1.0;  // every expert resident: nothing misses after the load
      continue;
    }
    const auto decoded = decode_tokens ? lru_hit_rate(history->layer_decode_reuse(layer), cap, true) : std::nullopt;
    if (const auto lru = decoded ? decoded : lru_hit_rate(history->layer_reuse(layer), cap, decode_tokens)) {
      sum += *lru;
      ++from_reuse;
      from_decode += decoded ? 1 : 0;
      continue;
    }
    std::vector<double> counts(history->layer_counts(layer).begin(), history->layer_counts(layer).end());
    const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
    if (total <= 0) {
      sum += uniform;  // a layer never routed in the history: nothing better known
      continue;
    }
    const auto top = counts.begin() + std::min<std::ptrdiff_t>(cap, static_cast<std::ptrdiff_t>(counts.size()));
    std::partial_sort(counts.begin(), top, counts.end(), std::greater<>());
    sum += std::accumulate(counts.begin(), top, 0.0) / total;
  }
  inputs = "usage history (" + format_fixed(history->total_tokens(), 0) + " tokens): " +
           (from_reuse == layers ? "LRU hits at cap " + std::to_string(cap) + " from the recorded reuse distances" +
                                       (from_decode == layers ? std::string(" of decode tokens") : std::string())
            : from_reuse > 0    ? "LRU hits from the recorded reuse distances in " + std::to_string(from_reuse) + " of " +
                                   std::to_string(layers) + " layers, elsewhere the routing mass of the " +
                                   std::to_string(cap) + " most used experts"
                                : "routing mass of the " + std::to_string(cap) + " most used experts") +
           ", mean over " + std::to_string(layers) + " layers";
  return layers > 0 ? sum / layers : uniform;
}

namespace {

// What both predictions read: the measured rates the plan needs and the
// expert cache's expected behaviour.
struct PlanRates {
  Bandwidth ram;
  // The disk as a prompt's rounds and a generated token's meet it (each
  // priced by the engine's rounds of that phase where a history has them).
  std::optional<DiskReads> disk, decode_disk;
  std::optional<Bandwidth> vram;
  std::optional<Bandwidth> upload;  // host to the plan's GPU (a CUDA hybrid batch copies the host's experts up)
  double miss = 0;        // share of a decode token's expert reads that go to disk
  double prefill_miss = 0;  // the same for a prompt's
  double vram_share = 0;  // share of expert reads served from VRAM
  std::optional<double> round_distinct;  // a prompt round's distinct experts a layer, from the cache replay
  std::vector<double> round_expert_rows;  // shares of a full round's distinct experts with r rows (index r), from the replay
  std::vector<std::vector<double>> round_expert_reuse;  // the same by rows and reuse distance (CacheReplay::prompt_expert_reuse)
  // Shares of layer-rounds that missed m experts together (index m), from
  // the cache replay: decode tokens' and full prompt rounds'; empty: the
  // binomial spread of the miss rate.
  std::vector<double> decode_batches, prompt_batches;
  // Where the dense weights come from token after token: RAM, or the caches
  // where the decode working set fits (decide_dense_from); the text says why.
  WeightsFrom dense_from = WeightsFrom::ram;
  std::string dense_from_text;
};

// One layer's (or prefill round's) expert reads, expected: the wait for
// what outlasts the compute beside them, and the compute they overlap.
struct ReadsBesideCompute {
  double wait = 0;        // seconds the layer waits for its reads
  double overlapped = 0;  // seconds of its compute with a read in flight
};

// Each of the `needed` experts misses with probability `miss`
// (binomially), the m misses are requested together, and the layer waits
// for what outlasts `overlap(m)`, the compute it does meanwhile, then for
// its wake-up after the last landing. Misses come whole: one miss costs a
// whole read however rare it is, which a mean (a fraction of a read against
// all of the compute) hides. A fractional `needed` (a prefill round's
// expected distinct experts) interpolates between its neighbours. The reads
// get `progress` of their own speed while the team computes (the probe's
// read_interference: 1 where a core is free for the I/O threads), so
// compute C hides progress x C of them (read_progress below).
ReadsBesideCompute expected_reads(const std::optional<DiskReads>& disk, double needed, double miss,
                                  const std::function<double(int)>& overlap, const std::vector<double>& batches = {},
                                  double progress = 1.0) {
  if (miss <= 0 || !disk || needed <= 0) return {};
  ReadsBesideCompute out;
  auto add = [&](double share, int misses) {
    const double read = disk->seconds(misses), compute = overlap(misses);
    const double outlasts = read - progress * compute;
    // A layer still waiting when its reads land runs again after a wake-up,
    // and its token computes slower after (the engine's rounds and tokens measured both).
    out.wait += share * (outlasts > 0 ? outlasts + disk->wake_s + disk->resume_s : 0.0);
    out.overlapped += share * (progress > 0 ? std::min(compute, read / progress) : compute);
  };
  if (!batches.empty()) {  // the replay's own rounds: how often m misses came together
    for (std::size_t m = 1; m < batches.size(); ++m) add(batches[m], static_cast<int>(m));
    return out;
  }
  auto spread = [&](int n, double weight) {
    double ways = 1;  // n choose m
    for (int m = 1; m <= n; ++m) {
      ways = ways * (n - m + 1) / m;
      add(weight * ways * std::pow(miss, m) * std::pow(1.0 - miss, n - m), m);
    }
  };
  const int below = static_cast<int>(std::floor(needed));
  const double above_share = needed - below;
  spread(below, 1.0 - above_share);
  if (above_share > 0) spread(below + 1, above_share);
  return out;
}

// How far reads get beside the team's compute: the probe's figure for reads
// it timed beside nothing (its engine_pool points), 1 for the engine's own
// rounds timed beside this team, which are as slow as the team left them.
double read_progress(const std::optional<DiskReads>& disk, const std::optional<ReadInterferenceCost>& interference) {
  return interference && disk && !disk->beside_the_team ? interference->read_progress : 1.0;
}

std::string rounds_note(const std::optional<DiskReads>& disk) {
  return disk && disk->beside_the_team ? " (the reads' own speed: the engine's rounds were timed beside this team)" : "";
}

// A decode layer's reads: its top_k routings, the resident ones (not in
// VRAM, not missed) computed on the CPU while the misses are read.
ReadsBesideCompute layer_disk_reads(const PlanRates& r, int top_k, double expert_compute_s, double progress) {
  return expected_reads(
      r.decode_disk, top_k, r.miss, [&](int m) { return std::max(0.0, top_k * (1.0 - r.vram_share) - m) * expert_compute_s; },
      r.decode_batches, progress);
}

// Decode: seconds per token as planner/README.md's formula says, and its inputs.
// A token's norms, RoPE, KV store and residual adds at every layer (dense-MLP
// layers too) on one thread, and the text coli-plan prints for them; nullopt
// where the profile did not time them.
struct TokenOpsTerm {
  double seconds = 0;
  std::string text;
};
std::optional<TokenOpsTerm> token_ops_per_token(const DeviceProfile& profile, const ModelFootprint& fp, const Team& team) {
  const auto cost = token_ops_cost(profile, team);
  if (!cost) return std::nullopt;
  const double layers = static_cast<double>(fp.config.num_hidden_layers), elements = token_ops_elements(fp.config);
  return TokenOpsTerm{layers * cost->seconds(elements), "norms, rope, KV store and residual adds " + format_fixed(layers, 0) +
                                                            " layers x " + format_fixed(elements, 0) + " elements at " + cost->text};
}

// The KV cache's term of a decoded token. Its attention runs as
// forward::attention's decode path shares it (decode_attention_units), each
// (KV head, tile) item on one thread for the KV head's group of query
// heads. With the decode attention points, at their measured cost, their K
// and V reads from RAM in it (the 2-core VM's OLMoE token took 3.6 ms more
// at depth 512 than at 0 at 2 threads, 6.8 at 1, where its KV bytes at the
// RAM rate said 1.9 and 3.9: the reads do not stream at the GEMV's rate).
// Without them, the longer of the KV bytes at the RAM rate and the items at
// the wall time of a (head, position) pair from the prompt's attention fit
// (Qwen3 at depth 512 on the H200's 16 threads: a token took 1.1 ms more
// than at depth 0, where its KV bytes at the RAM rate said 0.22 and these
// items say 1.24).
struct DecodeKvTerm {
  double seconds = 0;
  std::string text;  // what the attention adds to the inputs ("" where the reads stand)
};
DecodeKvTerm decode_kv_term(const DeviceProfile& profile, const ModelFootprint& fp, const Team& team, int depth, KvType kv_type,
                            u64 kv_bytes, const Bandwidth& ram) {
  const model::ModelConfig& c = fp.config;
  const double layers = static_cast<double>(c.num_hidden_layers);
  const double kv_heads = static_cast<double>(std::max<std::uint64_t>(1, c.num_key_value_heads));
  const double group = std::max(1.0, static_cast<double>(c.num_attention_heads) / kv_heads);
  const double units = decode_attention_units(kv_heads, depth, team.size());
  if (const auto measured = decode_attention_cost(profile, team)) {
    const double unit_s = measured->unit_seconds(group, static_cast<double>(c.head_dim), static_cast<double>(kv_element_bytes(kv_type)));
    const double seconds = layers * units * unit_s;
    return {seconds, " + the KV cache's attention " + format_fixed(seconds * 1e3, 3) + " ms/token with its reads (" +
                         std::to_string(c.num_hidden_layers) + " layers x " + format_fixed(units, 0) +
                         " (KV head, position) units at depth " + std::to_string(depth) + " x " + format_fixed(unit_s * 1e9, 2) +
                         " ns for groups of " + format_fixed(group, 0) + ", head_dim " + std::to_string(c.head_dim) + ", " +
                         std::string(kv_type_name(kv_type)) + ": " + measured->text + ")"};
  }
  const double reads_s = static_cast<double>(kv_bytes) / (ram.gb_per_s * 1e9);
  const auto fitted = prefill_attention_cost(profile, team);
  // A (head, position) pair's wall time at the team, times the group's heads of each unit.
  const double attention_s = fitted ? layers * fitted->seconds(units * group, static_cast<double>(c.head_dim)) : 0.0;
  if (attention_s <= reads_s) return {reads_s, ""};
  return {attention_s, " + the KV cache's attention " + format_fixed(attention_s * 1e3, 3) + " ms/token, longer than its reads' " +
                           format_fixed(reads_s * 1e3, 3) + " ms (KV head x " + std::to_string(forward::kAttentionTile) +
                           "-position items over the team, at " + fitted->text +
                           "; no decode attention points in this profile: re-probe)"};
}

// A profile whose kernels cycled fewer test weights than 16 last-level
// caches (probes before session 37 took twice the cache) may carry decode
// rates a cache helped: on the 2-core VM such probes predicted OLMoE's
// decode 16% fast where 1 GiB pools' predicted it within 0% (mean). The
// inputs say so; the rates stand as measured.
std::string small_tuning_pool_note(const DeviceProfile& profile) {
  const auto& tuning = profile.measurements.kernel_tuning;
  const u64 llc = last_level_cache_bytes(profile.cpu.caches, std::numeric_limits<int>::max());
  if (!tuning || tuning->pool_bytes == 0 || llc == 0 || tuning->pool_bytes >= streaming_buffer_bytes(profile.cpu.caches)) return "";
  return "; the profile's kernels cycled " + format_bytes(tuning->pool_bytes) + " of test weights, " +
         format_fixed(static_cast<double>(tuning->pool_bytes) / static_cast<double>(llc), 1) + "x the " + format_bytes(llc) +
         " last-level cache, which may keep part of them: its decode rates may run fast (re-probe: coli-probe now cycles " +
         std::to_string(kTuningPoolCaches) + "x)";
}

// A decode token's parts, priced (predict_decode), with what decode_inputs_text names.
struct DecodeParts {
  int depth = 0;               // KV positions attended
  double layers = 0, top_k = 0;
  u64 dense = 0, kv = 0, record = 0;
  double resident = 0, in_vram = 0, missed = 0;
  ParallelSteps steps;
  std::optional<StepCost> step;
  DecodeGemv expert_kernel, gemv;
  DenseSeconds dense_gemvs;
  std::optional<SamplingCost> sampling;
  std::optional<RoutingCost> routing;
  std::optional<TokenOpsTerm> token_ops;
  std::optional<ReadInterferenceCost> interference;
  ReadsBesideCompute layer_reads;
  double resident_compute_s = 0;
  double batch_calls = 0;  // expert batch calls a MoE layer makes on the CPU (expert_batch_calls)
  DecodeKvTerm kv_term;
};


// The decode prediction's inputs as coli-plan prints them: every term's figures and where they come from.
std::string decode_inputs_text(const DeviceProfile& profile, const ModelFootprint& fp, const PlanRates& r, int decode_depth,
                               const DecodeParts& d) {
  return "resident " + format_bytes(static_cast<u64>(d.resident)) + "/token (dense " + format_bytes(d.dense) +
         " + KV at " + (decode_depth >= 0 ? "depth " + std::to_string(d.depth) : "ctx/2") + " " + format_bytes(d.kv) +
         " + " + format_fixed(d.layers, 0) + " layers x top_k " + format_fixed(d.top_k, 0) + " x " + format_bytes(d.record) +
         (r.vram ? " x RAM share " + format_fixed(1.0 - r.vram_share, 3) : "") + ") / " + r.ram.text + " + missed " +
         format_bytes(static_cast<u64>(d.missed)) + "/token (miss rate " + format_fixed(r.miss, 3) + ")" +
         (r.decode_disk ? " / " + r.decode_disk->text : "") +
         (d.missed > 0 ? " less the resident experts' compute it overlaps, per layer for its own misses (" +
                             (r.decode_batches.empty() ? std::string("binomially")
                                                       : std::string("as many at once as the replay's tokens missed")) +
                             "; " + format_fixed(d.resident_compute_s * 1e3, 2) + " ms/token in all)" +
                             (d.interference ? " + " + format_fixed(d.layers * d.layer_reads.overlapped * 1e3, 3) +
                                                   " ms/token of that compute beside reads x " + d.interference->text +
                                                   rounds_note(r.decode_disk)
                                             : std::string(""))
                       : "") +
         (r.vram ? " + VRAM " + format_bytes(static_cast<u64>(d.in_vram)) + "/token (share " + format_fixed(r.vram_share, 3) +
                       ") / " + r.vram->text
                 : "") +
         d.expert_kernel.inputs("experts stream", "experts " + std::to_string(fp.expert_matrix_rows()) + " rows each") +
         (d.expert_kernel.batch_seconds() > 0 ? " (" + format_fixed(d.batch_calls, 2) + " batch calls a layer)" : "") +
         d.gemv.inputs("dense streams", "dense " + std::to_string(dense_rows_per_token(fp)) + " rows") + d.dense_gemvs.text +
         r.dense_from_text + (d.sampling ? " + vocabulary " + std::to_string(fp.config.vocab_size) + " x " + d.sampling->text : "") +
         (d.routing ? " + routing " + format_fixed(d.layers, 0) + " layers x " + d.routing->text : "") +
         (d.token_ops ? " + " + d.token_ops->text : "") +
         d.kv_term.text +
         (r.vram     ? ""
          : d.step ? " + " + d.step->text
                   : " (OpenMP step costs not in this profile: re-probe to price " + std::to_string(d.steps.regions) +
                         " parallel steps per token)") +
         (r.vram ? "" : small_tuning_pool_note(profile));
}

void predict_decode(const DeviceProfile& profile, const ModelFootprint& fp, const Plan& plan, const PlanRates& r,
                    int decode_depth, SpeedPrediction& s) {
  DecodeParts d;
  d.layers = static_cast<double>(fp.moe_layer_count()), d.top_k = fp.top_k;
  const double layers = d.layers, top_k = d.top_k;
  const u64 stride = fp.expert().record_stride;
  d.record = fp.expert().record_bytes;
  // The KV cache of `depth` positions (the mean of a full context, ctx / 2, unless asked).
  d.depth = decode_depth >= 0 ? decode_depth : plan.ctx / 2;
  d.dense = dense_bytes_per_token(fp), d.kv = kv_cache_bytes(fp.config, d.depth, plan.kv_type);
  const double experts = layers * top_k * (1.0 - r.vram_share) * static_cast<double>(d.record);
  d.in_vram = layers * top_k * r.vram_share * static_cast<double>(d.record);
  d.resident = static_cast<double>(d.dense + d.kv) + experts;
  d.missed = layers * top_k * r.miss * static_cast<double>(stride);
  // OpenMP's fixed costs, for a plan the CPU engine runs alone.
  d.steps = cpu_decode_parallel_steps(fp);
  const Team team{plan.threads, plan.compute_pus};
  d.step = r.vram ? std::nullopt : parallel_step_cost(profile, team, d.steps, static_cast<double>(fp.config.hidden_size));
  // Weights stream at the engine's kernel's own rate where the tuning phase
  // timed it (on weights from RAM: a pool of 16 last-level caches), else
  // at the RAM read bandwidth.
  d.expert_kernel = expert_gemv(profile, fp.expert_format, team);
  // One expert record's GEMVs for one token.
  const double expert_s =
      d.expert_kernel.seconds(static_cast<double>(d.record), static_cast<double>(fp.expert_matrix_rows()), r.ram);
  // The greedy pick after the pass scans every logit on one thread.
  d.sampling = sampling_cost(profile, team);
  const double sampling_s = d.sampling ? static_cast<double>(fp.config.vocab_size) * d.sampling->seconds_per_entry : 0.0;
  d.routing = routing_cost(profile, team, fp.n_experts, fp.top_k);
  const double routing_s = d.routing ? layers * d.routing->seconds : 0.0;
  // A single token's norms, RoPE, KV store and residual adds run on the calling thread at every layer.
  d.token_ops = r.vram ? std::nullopt : token_ops_per_token(profile, fp, team);
  d.gemv = dense_gemv(profile, fp, team, r.dense_from);
  d.dense_gemvs = dense_gemv_seconds(profile, fp, team, r.dense_from, r.ram, dense_work(fp, fp.dense));
  // A layer computes its resident experts while the I/O threads read its
  // misses (ExpertStore, MoeModel::moe_round), then the misses: the reads
  // (top_k x miss rate per layer, requested together) cost only what
  // outlasts the resident experts' compute.
  d.resident_compute_s = layers * top_k * std::max(0.0, 1.0 - r.vram_share - r.miss) * expert_s;
  d.batch_calls = expert_batch_calls(top_k, std::max(0.0, 1.0 - r.vram_share - r.miss), r.miss);
  // The compute a read overlaps runs slower, and hides less of the read, by what the probe measured beside reads.
  d.interference = r.vram ? std::nullopt : read_interference_cost(profile, team);
  d.layer_reads = layer_disk_reads(r, fp.top_k, expert_s, read_progress(r.decode_disk, d.interference));
  const double disk_wait_s = layers * d.layer_reads.wait;
  const double beside_reads_s = d.interference ? layers * d.layer_reads.overlapped * d.interference->slowdown : 0.0;
  s.decode_disk_reads = layers * top_k * r.miss;
  // The KV cache's attention with its reads; with a VRAM tier its bytes at the RAM rate, as before the decode points.
  d.kv_term = r.vram ? DecodeKvTerm{static_cast<double>(d.kv) / (r.ram.gb_per_s * 1e9), ""}
                     : decode_kv_term(profile, fp, team, d.depth, plan.kv_type, d.kv, r.ram);
  s.decode_terms = {
      {"dense weights", d.dense_gemvs.seconds},
      {"KV cache", d.kv_term.seconds},
      {"experts in RAM", layers * (top_k * (1.0 - r.vram_share) * expert_s + d.batch_calls * d.expert_kernel.batch_seconds())},
      {"experts from disk", disk_wait_s},
      {"compute beside reads", beside_reads_s},
      {"experts in VRAM", r.vram ? d.in_vram / (r.vram->gb_per_s * 1e9) : 0.0},
      {"parallel steps", d.step ? d.steps.regions * d.step->seconds + d.steps.barriers * d.step->barrier_seconds : 0.0},
      {"sampling", sampling_s},
      {"routing", routing_s},
      {"norms, rope, KV store", d.token_ops ? d.token_ops->seconds : 0.0}};
  double seconds = 0;
  for (const SpeedTerm& term : s.decode_terms) seconds += term.seconds;
  s.decode_tok_per_s = 1.0 / seconds;
  s.decode_inputs = decode_inputs_text(profile, fp, r, decode_depth, d);
}

// The distinct experts a batch of `tokens` tokens routes to in one MoE layer,
// the mean over layers: each token picks top_k different experts, expert e
// with probability top_k x its share of the layer's routings in the usage
// history (uniform, top_k / n, without one), so a batch touches
// sum over e of 1 - (1 - top_k p_e)^tokens. Concentrated routing touches
// fewer than uniform: OLMoE's rounds of 6 tokens 28 of 64, not 35.
double distinct_experts(const ModelFootprint& fp, double tokens, const experts::UsageHistory* history) {
  const double n = fp.n_experts, k = fp.top_k;
  const double uniform = n * (1.0 - std::pow(1.0 - std::min(1.0, k / n), tokens));
  if (!history_fits(fp, history)) return uniform;
  double sum = 0;
  for (int layer = 0; layer < history->key().n_layers; ++layer) {
    const std::span<const double> counts = history->layer_counts(layer);
    const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
    if (total <= 0) {
      sum += uniform;
      continue;
    }
    for (const double c : counts) sum += 1.0 - std::pow(1.0 - std::min(1.0, k * c / total), tokens);
  }
  return sum / history->key().n_layers;
}

// A whole-decoder GPU plan's prefill, as the decoder runs it: a batch of B
// tokens reads the dense weights and each distinct expert it touches once
// from VRAM; the experts outside VRAM are read by the host from RAM
// (Vulkan) or, in a CUDA hybrid batch, copied up at the probe's measured
// host-to-GPU bandwidth (the decoder computes an expert on the CPU instead
// only where that is faster, so this bounds it). The GPU's GEMM time is in
// no profile yet, so the figure is an upper bound and says so.
void predict_gpu_prefill(const ModelFootprint& fp, const Plan& plan, const PlanRates& r,
                         const experts::UsageHistory* history, int prompt_tokens, SpeedPrediction& s) {
  const double layers = static_cast<double>(fp.moe_layer_count());
  const double batch = prompt_tokens > 0 ? std::clamp(prompt_tokens, 1, std::max(1, plan.gpu.batch_tokens)) : plan.gpu.batch_tokens;
  const double distinct = distinct_experts(fp, batch, history);
  const u64 dense = dense_bytes_per_token(fp);
  const double experts = layers * distinct * static_cast<double>(fp.expert().record_bytes);
  const bool copied_up = plan.gpu.backend == "cuda" && r.vram_share < 1.0;
  if (copied_up && !r.upload) {
    s.prefill_tok_per_s = s.decode_tok_per_s;
    s.prefill_inputs = "the decode figure: no measured host-to-GPU bandwidth for " + plan.gpu.device.gpu.describe() +
                       " to price this hybrid plan's expert copies (coli-probe measures it)";
    return;
  }
  const Bandwidth& host = copied_up ? *r.upload : r.ram;
  const double vram_s = (static_cast<double>(dense) + experts * r.vram_share) / (r.vram->gb_per_s * 1e9);
  const double host_s = experts * (1.0 - r.vram_share) / (host.gb_per_s * 1e9);
  s.prefill_tok_per_s = batch / (vram_s + host_s);
  s.prefill_terms = {{"memory: weights from VRAM", vram_s / batch},
                     {copied_up ? "memory: experts copied up" : "memory: experts read by the host", host_s / batch}};
  s.prefill_inputs = "an upper bound, weight reads only (the GPU's GEMM time is in no profile yet): batches of " +
                     format_fixed(batch, 0) + " tokens, each reading dense " + format_bytes(dense) + " + " + format_fixed(distinct, 1) +
                     " distinct experts x " + format_fixed(layers, 0) + " layers, " + format_fixed(r.vram_share * 100, 1) +
                     "% of them from VRAM at " + r.vram->text +
                     (r.vram_share < 1.0 ? ", the rest " + std::string(copied_up ? "copied up at " : "read by the host at ") + host.text
                                         : std::string());
}

// Prefill of a 512-token prompt (llama-bench's pp512; at most the context) or of the run's own,
// as the engine runs it: each layer's dense projections and attention over
// the whole pass (the dense weights read once), the experts in rounds of R
// tokens, each reading the distinct experts it touches once (uniform
// routing: n(1 - (1-1/n)^(R k))), the missed ones from disk while the
// round's resident experts compute. Compute and RAM reads overlap (the
// longer counts); a round's disk reads add what outlasts its resident
// experts' compute, since the round waits for them.
constexpr int kPrefillPromptTokens = 512;

// The prompt a prefill figure is for: `prompt_tokens`, or kPlanPrompt's 512, at most the context.
int planned_prompt(const Plan& plan, int prompt_tokens) {
  return std::clamp(prompt_tokens > 0 ? prompt_tokens : kPrefillPromptTokens, 1, std::max(1, plan.ctx));
}

// The compute side of a prompt of `prompt` tokens in rounds of `round`, at
// the tuning phase's measured rates (planner/README.md has the formulas).
struct PromptCompute {
  bool timed = false;  // the profile timed the engine's expert GEMM
  double expert_s = 0, dispatch_s = 0, dense_s = 0, attention_s = 0, lm_head_s = 0, token_ops_s = 0;
  std::string text;
  // The expert batches' compute, and the rest of the pass's (predict_prefill's two phases).
  double expert_phase_s() const { return expert_s + dispatch_s; }
  double rest_s() const { return dense_s + attention_s + lm_head_s + token_ops_s; }
};
// A prompt's attention over every layer, in prompt_attention_units at the
// measured cost of one.
double prompt_attention_seconds(const AttentionCost& cost, const model::ModelConfig& c, int prompt, int threads) {
  const double units = prompt_attention_units(static_cast<double>(c.num_attention_heads),
                                              static_cast<double>(c.num_key_value_heads), prompt, threads);
  return static_cast<double>(c.num_hidden_layers) * cost.seconds(units, static_cast<double>(c.head_dim));
}

// The expert batches' cost in the pass beside back to back
// (narrow_batch_in_pass): a layer's first round finds its buffers idle since
// the last layer's batches, for the layer's other ops (its dense
// projections, attention and token ops, computed before this in `so_far`);
// the rounds after it, back to back, find them warm: the factor spread over
// the layer's rounds.
InPassFactor experts_in_pass(const DeviceProfile& profile, const Team& team, const PromptCompute& so_far, double layers,
                             double layer_rounds) {
  if (layers <= 0 || layer_rounds <= 0) return {};
  const double gap_s = (so_far.dense_s + so_far.attention_s + so_far.token_ops_s) / layers;
  InPassFactor first = narrow_batch_in_pass(profile, team, gap_s);
  const double spread = layers / std::max(layers, layer_rounds);
  return {1.0 + (first.factor - 1.0) * spread,
          first.text + (spread < 1 ? "; a layer's first of " + format_fixed(layer_rounds / layers, 1) + " rounds" : std::string())};
}

// `distinct`: the experts each round of a layer touches (each dispatched once, in one of its batches).
PromptCompute prompt_compute(const DeviceProfile& profile, const ModelFootprint& fp, const Team& team, double prompt,
                             double round, double distinct, const PlanRates& r) {
  const double layers = static_cast<double>(fp.moe_layer_count()), top_k = fp.top_k, n = fp.n_experts;
  auto compute = prefill_compute_rate(profile, fp.expert_format, team, round * top_k / n);
  PromptCompute out;
  if (!compute) return out;
  out.timed = true;
  // The dense projections run over the whole pass in slices: float ones at
  // the float GEMM's timed rate, quantised ones at the engine's projections
  // of a slice (else the experts' GEMM rate at a pass's tokens); without
  // those points, at the experts' GEMM rate.
  const double expert_macs = layers * top_k * static_cast<double>(fp.expert_parameters);
  const double dense_macs = std::max(0.0, prefill_macs_per_token(fp) - expert_macs);
  const auto quantized_dense = quantized_format(fp.dense_format);
  auto dense_rate = quantized_dense ? quantized_dense_prefill_rate(profile, *quantized_dense, team) : dense_prefill_rate(profile, team);
  if (quantized_dense && !dense_rate) dense_rate = prefill_compute_rate(profile, *quantized_dense, team, prompt, false);
  if (!dense_rate) dense_rate = prefill_compute_rate(profile, fp.expert_format, team, round * top_k / n, false);
  // The router stays in bf16 beside quantised projections: the float GEMM's rate.
  const PromptProjections projections = prompt_projections(fp);
  const auto float_rate = projections.float_macs > 0 ? dense_prefill_rate(profile, team) : std::nullopt;
  const double int_rows = projections.rows - projections.float_rows, int_macs = dense_macs - projections.float_macs;
  out.dense_s = prompt * (float_rate ? dense_rate->seconds(int_rows, int_macs) +
                                           float_rate->seconds(projections.float_rows, projections.float_macs)
                                     : dense_rate->seconds(projections.rows, dense_macs));
  const auto attention = prefill_attention_cost(profile, team);
  out.attention_s = attention ? prompt_attention_seconds(*attention, fp.config, static_cast<int>(prompt), team.size()) : 0.0;
  // Every token's norms, RoPE, KV store and residual adds at every layer,
  // the tokens shared over the team (MoeModel's for_tokens, from kParallelTokens).
  const auto token_ops = token_ops_per_token(profile, fp, team);
  const double sharing = prompt_token_sharing(prompt, team);
  out.token_ops_s = token_ops ? prompt * token_ops->seconds / sharing : 0.0;
  const double layer_rounds = std::ceil(prompt / round) * layers;
  // A pass's batches handle their rows and experts in buffers the caches
  // aged since the last layer's: those costs scaled, the multiply-adds not.
  const InPassFactor in_pass = experts_in_pass(profile, team, out, layers, layer_rounds);
  compute->seconds_per_row *= in_pass.factor;
  compute->seconds_per_expert *= in_pass.factor;
  // amx computes each expert's rows padded to whole tiles (rounds of `round` tokens, uniform routing).
  const double padding = tuned_on_amx(profile) ? amx_tile_padding(round, top_k / n) : 1.0;
  out.expert_s = prompt * compute->seconds(layers * top_k, expert_macs * padding);
  out.dispatch_s = layer_rounds * distinct * compute->seconds_per_expert;
  out.lm_head_s = last_token_lm_head_seconds(profile, fp, team, r.ram);
  out.text = "experts " + format_fixed(expert_macs / 1e9, 2) + " GMAC per token" +
             (padding > 1 ? " x " + format_fixed(padding, 3) + " (amx tiles of " + std::to_string(kernels::cpu::kAmxTileTokens) +
                                " rows: an expert's rows of a " + format_fixed(round, 0) + "-token round padded)"
                          : std::string()) +
             " / " + compute->text + " + dense " +
             format_fixed(dense_macs / 1e9, 3) + " GMAC per token / " + dense_rate->text +
             (float_rate ? " (of them " + format_fixed(projections.float_macs / 1e9, 3) + " GMAC kept in bf16, the router, / " +
                               float_rate->text + ")"
                         : std::string()) +
             (attention ? " + attention " + format_fixed(prompt_attention_macs(fp, prompt) / 1e9, 2) + " GMAC per prompt at " +
                              attention->text
                        : " (the prompt's attention not timed in this profile: re-probe to price it)") +
             " + the last token's lm_head " + format_fixed(out.lm_head_s * 1e3, 3) + " ms as one decode token's from RAM (the pass ran every layer since the last)" +
             (out.dispatch_s > 0 ? " + " + format_fixed(layer_rounds, 0) + " layer rounds x " +
                                       format_fixed(distinct, 1) + " distinct experts x " + compute->dispatch_text
                                 : std::string()) +
             (in_pass.factor > 1 ? "; the batches' row and dispatch costs " + in_pass.text : std::string()) +
             (token_ops ? " + " + token_ops->text +
                              (sharing > 1 ? ", the tokens over " + std::to_string(team.size()) + " threads" : std::string())
                        : std::string());
  return out;
}

// The fork/joins of a prompt's expert batches: each round of each MoE layer
// runs its resident experts as one team region (CpuBackend::ffn_quantized:
// per chunk of cpu_staged_chunk_rows rows gather, gate/up, SwiGLU, down,
// scatter, each step behind a barrier; a one-token round skips gather and
// scatter) and, when any of its D distinct experts missed, the missed ones
// as a second; a round with no miss and no shared expert adds its weighted
// sums as one more step. Rounds of a few
// tokens (a small cap) make hundreds of these per prompt: the demo model at
// cap 4 runs 512 at 16 threads, ~10 us each. One thread enters no region.
struct ExpertBatchSteps {
  double seconds = 0;
  std::string text;
};
ExpertBatchSteps prefill_expert_steps(const DeviceProfile& profile, const ModelFootprint& fp, const Team& team,
                                      double layer_rounds, double round, double distinct, double miss) {
  if (team.size() <= 1) return {};
  const double any_missed = 1.0 - std::pow(1.0 - miss, distinct), any_resident = 1.0 - std::pow(miss, distinct);
  const double rows = round * fp.top_k, chunk_rows = static_cast<double>(fp.cpu_staged_chunk_rows());
  auto barriers_per_batch = [&](double batch_rows) { return round > 1 ? 5 * std::max(1.0, std::ceil(batch_rows / chunk_rows)) - 1 : 2; };
  const double sums = fp.config.has_shared_expert() ? 0.0 : 1.0 - any_missed;
  const double regions = layer_rounds * (any_resident + any_missed);
  const double barriers = layer_rounds * (any_resident * barriers_per_batch(rows * (1 - miss)) +
                                          any_missed * barriers_per_batch(rows * miss) + sums);
  const auto step = parallel_step_cost(profile, team, {static_cast<int>(std::lround(regions)), static_cast<int>(std::lround(barriers))},
                                       static_cast<double>(fp.config.hidden_size));
  if (!step) return {};
  return {regions * step->seconds + barriers * step->barrier_seconds,
          "the expert batches' " + step->text + " (" + format_fixed(layer_rounds, 0) + " layer rounds, " +
              format_fixed(any_missed * 100, 0) + "% of them with a second batch for their misses)"};
}

// The fork/joins of a prompt's pass outside its expert batches, as
// MoeModel's forward_cpu runs them: per layer and slice of kPassSlice tokens
// the q/k/v projection, the attention and the o projection (three regions),
// and in a slice of kParallelTokens or more its norm, rope, KV store and
// residual add (four more); per MoE layer over the whole pass its
// post-attention norm (from kParallelTokens tokens) and router; per dense-MLP
// layer the same norm and, per slice, gate/up, down and (from
// kParallelTokens) the residual add. The demo model's 512-token prompt at 16
// threads enters 60 of these, 1 us a token beside its 9.
ParallelSteps cpu_prefill_parallel_steps(const ModelFootprint& fp, int prompt) {
  const int layers = static_cast<int>(fp.config.num_hidden_layers), moe = static_cast<int>(fp.moe_layer_count());
  int per_layer = 0, per_dense_mlp = 0;
  for (int first = 0; first < prompt; first += kPassSlice) {
    const bool across_team = static_cast<std::size_t>(std::min(kPassSlice, prompt - first)) >= kParallelTokens;
    per_layer += 3 + (across_team ? 4 : 0);
    per_dense_mlp += 2 + (across_team ? 1 : 0);
  }
  // Per pass: the post-attention norm of every layer and each MoE layer's
  // routing, across the team from kParallelTokens; the router's matmul.
  const int across_team = static_cast<std::size_t>(prompt) >= kParallelTokens ? 1 : 0;
  return {layers * (per_layer + across_team) + moe * (1 + across_team) + (layers - moe) * per_dense_mlp, 0};
}

// A prompt round's records streamed through the batch's GEMM path where
// the probe timed it with a few rows per expert (the 2-core VM's one
// thread: 22 / 13 / 8 GB/s at 1 / 2 / 4 rows where RAM reads 35): seconds
// per byte over the replay's rows per expert, else at the round's mean
// rows per distinct expert; at the RAM read rate without those points.
struct StreamedRecords {
  double seconds_per_byte = 0;
  std::string text;  // " streamed at ..." or empty
};
StreamedRecords streamed_records(const DeviceProfile& profile, const ModelFootprint& fp, const Team& team, const PlanRates& r,
                                 double mean_rows) {
  const auto stream = r.vram ? std::nullopt : prefill_stream_cost(profile, fp.expert_format, team);
  if (!stream) return {1.0 / (r.ram.gb_per_s * 1e9), ""};
  const std::vector<double>& shares = r.round_expert_rows;
  if (shares.empty()) {
    return {stream->seconds_per_byte(mean_rows),
            " streamed at " + stream->text + " (" + format_fixed(mean_rows, 1) + " rows per distinct expert on average)"};
  }
  // A record its layer read within the warm points' distance (in this model's records) at their rate.
  const bool warm = stream->warm_distance_bytes > 0 && !r.round_expert_reuse.empty() && fp.expert().record_bytes > 0;
  const double within = warm ? stream->warm_distance_bytes / static_cast<double>(fp.expert().record_bytes) : 0.0;
  double per_byte = 0, mean = 0, reused = 0;
  for (std::size_t rows = 1; rows < shares.size(); ++rows) {
    const double again = warm ? CacheReplay::reused_share(r.round_expert_reuse, static_cast<int>(rows), within) : 0.0;
    per_byte += shares[rows] * (again * stream->seconds_per_byte(static_cast<double>(rows), true) +
                                (1 - again) * stream->seconds_per_byte(static_cast<double>(rows)));
    mean += shares[rows] * static_cast<double>(rows);
    reused += shares[rows] * again;
  }
  const double one_row = shares.size() > 1 ? shares[1] : 0.0;
  const std::string reuse_text = warm ? ", " + format_fixed(reused * 100, 0) + "% read again within " + format_fixed(within, 1) +
                                            " of their layer's records" : "";
  return {per_byte, " streamed at " + stream->text + " (the replay's rows per expert: " + format_fixed(one_row * 100, 0) +
                        "% with one, " + format_fixed(mean, 1) + " on average" + reuse_text + "; " +
                        format_fixed(1e-9 / per_byte, 1) + " GB/s over them)"};
}

// A prompt's parts, priced (predict_prefill), with what prefill_inputs_text names.
struct PrefillParts {
  double layers = 0, prompt = 0, round = 0, rounds = 0, distinct = 0, reads_per_round = 0;
  u64 dense = 0;
  PromptCompute compute;
  StreamedRecords streamed;
  std::optional<ReadInterferenceCost> interference;
  ReadsBesideCompute round_reads;
  double disk_s = 0;
  ExpertBatchSteps steps;
  ParallelSteps pass_steps;
  std::optional<StepCost> pass_step;
  std::optional<RoutingCost> routing, routing_records;  // the records: on the calling thread
  double routing_sharing = 1;
};

// The prefill prediction's inputs as coli-plan prints them: the compute's figures, then the reads'.
std::string prefill_inputs_text(const ModelFootprint& fp, const PlanRates& r, const experts::UsageHistory* history,
                                const PrefillParts& p) {
  const std::string memory_text =
      "a " + format_fixed(p.prompt, 0) + "-token prompt reading dense " + format_bytes(p.dense) + " once and, in " +
      format_fixed(p.rounds, 0) + " rounds of " + format_fixed(p.round, 0) + " tokens, " + format_fixed(p.distinct, 1) +
      " distinct experts x " + format_fixed(p.layers, 0) + " layers each" + p.streamed.text +
      (r.round_distinct             ? " (the routing trace's rounds)"
       : history_fits(fp, history) ? " (the usage history's routing shares)"
                                   : " (uniform routing)") +
      ", " + format_fixed(p.reads_per_round, 2) + " of them from disk (" + format_fixed(r.prefill_miss * 100, 1) +
      "% of the routings miss)" +
      (p.disk_s > 0 ? " (" + r.disk->text + "; each round's misses, " +
                          (r.prompt_batches.empty() ? "binomially" : "as many at once as the replay's rounds missed") +
                          ", less its resident experts' time: their GEMMs or, longer, their streaming" +
                          (p.interference ? "; " + format_fixed(p.rounds * p.layers * p.round_reads.overlapped * 1e3, 2) +
                                                " ms of that time beside reads x " + p.interference->text + rounds_note(r.disk)
                                          : std::string()) +
                          ")"
                    : std::string());
  if (!p.compute.timed)
    return "rough, bandwidth only (no timed prefill kernel in this profile: real prefill is slower): " + memory_text;
  const std::string pass_text = p.pass_step ? " + the pass's " + std::to_string(p.pass_steps.regions) +
                                                  " other parallel steps (projections, attention, norms, rope, residual adds; " +
                                                  p.pass_step->text + ")"
                                            : std::string();
  return "per phase (the expert batches; the rest of the pass) the longer of its compute and its RAM reads, then the disk; "
         "compute: " +
         p.compute.text + (p.steps.text.empty() ? "" : " + " + p.steps.text) + pass_text +
         (p.routing ? " + routing each token at " + format_fixed(p.layers, 0) + " layers x " + p.routing->text +
                          (p.routing_sharing > 1 ? ", the tokens over " + format_fixed(p.routing_sharing, 0) + " threads" +
                                                       (p.routing_records ? " but their records, " + p.routing_records->text +
                                                                                ", on the calling thread"
                                                                          : std::string())
                                                 : "")
                    : "") +
         "; reads: " + memory_text;
}

void predict_prefill(const DeviceProfile& profile, const ModelFootprint& fp, const Plan& plan, const PlanRates& r,
                     const experts::UsageHistory* history, int prompt_tokens, SpeedPrediction& s) {
  PrefillParts p;
  p.layers = static_cast<double>(fp.moe_layer_count());
  const double layers = p.layers, top_k = fp.top_k;
  p.prompt = planned_prompt(plan, prompt_tokens);
  const double prompt = p.prompt;
  p.round = std::clamp(static_cast<double>(plan.prefill_round_tokens), 1.0, prompt);
  p.rounds = std::ceil(prompt / p.round);
  const double round = p.round, rounds = p.rounds;
  const Team team = plan.prefill_threads > 0 || !plan.prefill_pus.empty()
                        ? Team{plan.prefill_pus.empty() ? plan.prefill_threads : plan.prefill_pus.size(), plan.prefill_pus}
                        : Team{plan.threads, plan.compute_pus};
  p.distinct = r.round_distinct ? *r.round_distinct : distinct_experts(fp, round, history);
  const double distinct = p.distinct;
  p.compute = r.vram ? PromptCompute{} : prompt_compute(profile, fp, team, prompt, round, distinct, r);
  const PromptCompute& compute = p.compute;
  p.dense = dense_bytes_per_token(fp);
  // A round reads what its tokens' routings miss: a routing whose expert the
  // round already leased is no miss of its own, and the usage history's
  // reuse distances (token by token) count it a hit, so the prompt reads
  // prompt x top_k x the miss rate records per layer, at most each round's distinct experts.
  p.reads_per_round = std::min(distinct, prompt * top_k * r.prefill_miss / rounds);
  // Each round streams its distinct experts' records.
  p.streamed = streamed_records(profile, fp, team, r, round * top_k / std::max(1.0, distinct));
  const double expert_ram_s = rounds * layers * distinct * static_cast<double>(fp.expert().record_bytes) * p.streamed.seconds_per_byte;
  const double dense_ram_s = static_cast<double>(p.dense) / (r.ram.gb_per_s * 1e9);
  const double ram_s = expert_ram_s + dense_ram_s;
  // Each round's misses of a layer, requested together; the round's resident
  // experts run meanwhile, each a distinct expert's share of the expert
  // phase: its GEMMs, or streaming its record where that takes longer (rounds
  // of a few tokens per expert stream more than they compute).
  const double per_expert_s = std::max(compute.expert_phase_s(), expert_ram_s) / (rounds * layers * distinct);
  const double distinct_miss = distinct > 0 ? p.reads_per_round / distinct : 0.0;
  p.interference = r.vram ? std::nullopt : read_interference_cost(profile, team);
  p.round_reads = expected_reads(r.disk, distinct, distinct_miss, [&](int m) { return std::max(0.0, distinct - m) * per_expert_s; },
                                 r.prompt_batches, read_progress(r.disk, p.interference));
  p.disk_s = rounds * layers * p.round_reads.wait;
  const double beside_reads_s = p.interference ? rounds * layers * p.round_reads.overlapped * p.interference->slowdown : 0.0;
  p.steps = r.vram ? ExpertBatchSteps{} : prefill_expert_steps(profile, fp, team, rounds * layers, round, distinct, distinct_miss);
  p.pass_steps = cpu_prefill_parallel_steps(fp, static_cast<int>(prompt));
  p.pass_step = r.vram || team.size() <= 1
                    ? std::nullopt
                    : parallel_step_cost(profile, team, p.pass_steps, static_cast<double>(fp.config.hidden_size));
  const double pass_steps_s = p.pass_step ? p.pass_steps.regions * p.pass_step->seconds : 0.0;
  // Every prompt token is routed at every MoE layer, the tokens' top-k
  // shared over the team from kParallelTokens, their records after, in
  // token order, on the calling thread (MoeModel::route_tokens; the profile's
  // route_records, else shared too, as profiles before it priced them).
  p.routing = r.vram ? std::nullopt : routing_cost(profile, team, fp.n_experts, fp.top_k);
  p.routing_sharing = prompt_token_sharing(prompt, team);
  if (p.routing && p.routing_sharing > 1) p.routing_records = routing_cost(profile, team, fp.n_experts, fp.top_k, "route_records");
  const double records = p.routing_records ? std::clamp(p.routing_records->seconds, 0.0, p.routing->seconds) : 0.0;
  const double routing_s = p.routing ? prompt * layers * ((p.routing->seconds - records) / p.routing_sharing + records) : 0.0;
  s.prefill_disk_reads = rounds * layers * p.reads_per_round;
  s.prefill_prompt_tokens = static_cast<int>(prompt);
  s.prefill_terms = {{"compute: expert GEMMs", compute.expert_s / prompt},
                     {"compute: expert dispatch", compute.dispatch_s / prompt},
                     {"compute: dense projections", compute.dense_s / prompt},
                     {"compute: attention", compute.attention_s / prompt},
                     {"compute: lm_head of the last token", compute.lm_head_s / prompt},
                     {"compute: norms, rope, KV store", compute.token_ops_s / prompt},
                     {"compute: expert batches' parallel steps", p.steps.seconds / prompt},
                     {"compute: the pass's other parallel steps", pass_steps_s / prompt},
                     {"compute: routing", routing_s / prompt},
                     {"memory: weights from RAM", ram_s / prompt},
                     {"memory: experts from disk", p.disk_s / prompt},
                     {"compute beside reads", beside_reads_s / prompt}};
  // The expert batches stream their weights from RAM (each round its
  // distinct experts'; a few tokens each when rounds are small) while the
  // projections and attention compute on weights read once: each phase
  // takes the longer of its compute and its reads, one after the other.
  const double expert_phase_s = std::max(expert_ram_s, compute.expert_phase_s() + p.steps.seconds);
  const double other_phase_s = std::max(dense_ram_s, compute.rest_s() + pass_steps_s + routing_s);
  s.prefill_tok_per_s = prompt / (expert_phase_s + other_phase_s + p.disk_s + beside_reads_s);
  s.prefill_inputs = prefill_inputs_text(fp, r, history, p);
}

// The prompt's tokens and the decode run.
struct ReplayedRun {
  int prompt_tokens;
  DecodeRun decode;
};

// A CPU plan's hit rates and round sizes from the engine's cache replayed
// over the usage history's routing trace, where it has one (else the
// reuse distances or routing shares stand, as expected_hit_rate says).
void replay_cache(const ModelFootprint& fp, const Plan& plan, const experts::UsageHistory* history, ReplayedRun run,
                  SpeedPrediction& s, PlanRates& rates) {
  if (!history_fits(fp, history)) return;
  const int cap = std::min(plan.cap, fp.n_experts);
  const auto replay = replay_expert_cache(*history, cap, plan.pins, plan.prefill_round_tokens);
  if (!replay) return;
  rates.round_distinct = replay->distinct_per_round();
  rates.round_expert_rows = replay->expert_rows_shares();
  rates.round_expert_reuse = replay->prompt_expert_reuse;
  if (cap >= fp.n_experts) return;  // every expert resident: the hit rates are 1 already
  const int prompt = planned_prompt(plan, run.prompt_tokens);
  rates.decode_batches = replay->decode_batches(run.decode);
  rates.prompt_batches = replay->prompt_batches(prompt);
  if (const auto misses = replay->decode_misses_per_layer_token(run.decode)) {
    s.hit_rate = std::clamp(1.0 - *misses / fp.top_k, 0.0, 1.0);
    s.hit_rate_inputs = replay->describe(cap, plan.pins) + ": " + format_fixed(*misses, 3) + " reads a decode token and layer" +
                        replay->decode_runs_text(run.decode);
  }
  if (const auto misses = replay->prompt_misses_per_layer_token(prompt))
    s.prefill_hit_rate = std::clamp(1.0 - *misses / fp.top_k, 0.0, 1.0);
}

// Where a CPU plan's dense weights come from, token after token: the
// caches where what a decode token reads again the next (the dense weights,
// the experts the RAM cache holds, the KV cache at the depth) fits half the
// last-level cache the team reaches, the rest left to activations and the
// expert slots' churn; else RAM. From the caches: the cores' own where each
// thread's share of the dense weights fits half its core's cache, else the
// last level (the 2-core VM's 2 threads ran the demo model's 6 MiB lm_head,
// 3 MiB a thread against 2 MiB L2s, 10-14% slower than the 4 MiB cached
// points, whose 2 MiB shares the L2s held).
void decide_dense_from(const DeviceProfile& profile, const ModelFootprint& fp, const Plan& plan, int decode_depth,
                       PlanRates& r) {
  if (plan.gpu.vram_slots() > 0 || plan.gpu.whole_decoder) return;
  const int depth = decode_depth >= 0 ? decode_depth : plan.ctx / 2;
  const u64 experts = fp.moe_layer_count() * static_cast<u64>(std::min(plan.cap, fp.n_experts)) * fp.expert().record_bytes;
  const u64 working_set = dense_bytes_per_token(fp) + experts + kv_cache_bytes(fp.config, depth, plan.kv_type);
  const u64 llc = last_level_cache_bytes(profile.cpu.caches, plan.threads);
  if (llc == 0 || 2 * working_set > llc) return;
  const Team team{plan.threads, plan.compute_pus};
  const u64 share = dense_bytes_per_token(fp) / static_cast<u64>(std::max(1, plan.threads));
  const u64 core = core_cache_bytes(profile.cpu.caches);
  const bool spills = core > 0 && 2 * share > core;
  const bool measured = float_gemv_row_cost(profile, team, WeightsFrom::cache).has_value();
  const bool measured_spill = float_gemv_row_cost(profile, team, WeightsFrom::last_level).has_value();
  const bool float_dense = dense_decode_kernels(fp) == std::vector<std::string>{"dense_bf16_decode"};
  r.dense_from = spills ? WeightsFrom::last_level : WeightsFrom::cache;
  const std::string where =
      spills ? "each thread's " + format_bytes(share) + " of the dense weights is over half its core's own " + format_bytes(core) +
                   " cache: dense priced warm in the last-level cache" +
                   (measured_spill ? "" : " by the cached points (the profile has no last-level points: re-probe)")
             : "dense priced warm in the caches";
  r.dense_from_text = "; the working set " + format_bytes(working_set) + " (dense, the cached experts, KV) fits half the " +
                      format_bytes(llc) + " last-level cache a team of " + std::to_string(plan.threads) + " reaches: " +
                      (!float_dense ? "no cached points for this dense format, priced from RAM"
                       : measured || measured_spill ? where
                                                    : "the profile has no cached points (re-probe), dense priced from RAM");
}

}  // namespace

SpeedPrediction predict_speed(const DeviceProfile& profile, const ModelFootprint& fp, const Plan& plan,
                              const experts::UsageHistory* history, int decode_depth, int prompt_tokens,
                              DecodeRun decode_run) {
  SpeedPrediction s;
  // With a VRAM tier, RAM and VRAM together hold the cap + VRAM slots most
  // used experts of a layer (mean VRAM slots per layer).
  const int layers_n = std::max<int>(1, static_cast<int>(fp.moe_layer_count()));
  const int vram_per_layer = static_cast<int>(std::lround(static_cast<double>(plan.gpu.vram_slots()) / layers_n));
  const int slots = std::min(fp.n_experts, plan.cap + vram_per_layer);
  s.hit_rate = expected_hit_rate(fp, slots, history, s.hit_rate_inputs, true);
  std::string prompt_inputs;
  s.prefill_hit_rate = expected_hit_rate(fp, slots, history, prompt_inputs, false);
  PlanRates rates;
  if (plan.gpu.vram_slots() == 0) replay_cache(fp, plan, history, {prompt_tokens, decode_run}, s, rates);
  rates.vram_share = std::min(plan.gpu.vram_share, s.hit_rate);
  if (plan.gpu.vram_slots() > 0) {
    rates.vram = vram_bandwidth(profile, fp, plan.gpu);
    const auto most_host = static_cast<double>(
        cuda::staging_records(static_cast<std::uint64_t>(fp.n_experts), fp.expert().record_stride));
    rates.upload = upload_bandwidth(profile, plan.gpu, most_host * static_cast<double>(fp.expert().record_stride));
    if (!rates.vram) {
      s.unavailable = "no measured GPU GEMV bandwidth for " + plan.gpu.device.gpu.describe() + " (" + plan.gpu.backend +
                      "): run coli-probe --gpu-selftest on that machine (it times the " +
                      (plan.gpu.backend == "cuda" ? "CUDA decoder's matvec" : "Vulkan GEMV variants") + ")";
      return s;
    }
  }
  const auto ram = ram_bandwidth(profile, plan.threads);
  const auto measured_rounds =
      history_fits(fp, history) ? history->read_round_sets() : std::span<const experts::ReadRounds>();
  rates.disk = disk_reads(profile, fp.expert().record_stride, plan.io_threads, measured_rounds, plan.threads, ReadPhase::prompt);
  rates.decode_disk =
      disk_reads(profile, fp.expert().record_stride, plan.io_threads, measured_rounds, plan.threads, ReadPhase::decode);
  // A plan that streams needs the disk figure; one that holds every expert does not.
  if (!ram) {
    s.unavailable = kNoMeasuredBandwidth;
    return s;
  }
  if (plan.streaming() && std::min(s.hit_rate, s.prefill_hit_rate) < 1.0 && !rates.disk) {
    s.unavailable = missing_disk_bandwidth(profile);
    return s;
  }
  rates.ram = *ram;
  rates.miss = plan.streaming() && s.hit_rate < 1.0 ? 1.0 - s.hit_rate : 0.0;
  rates.prefill_miss = plan.streaming() && s.prefill_hit_rate < 1.0 ? 1.0 - s.prefill_hit_rate : 0.0;
  s.disk_read_seconds = plan.streaming() && rates.disk ? rates.disk->bare_one_read_s : 0.0;
  decide_dense_from(profile, fp, plan, decode_depth, rates);
  predict_decode(profile, fp, plan, rates, decode_depth, s);
  if (plan.gpu.whole_decoder && plan.gpu.device.gpu.chosen() && rates.vram) {
    predict_gpu_prefill(fp, plan, rates, history, prompt_tokens, s);
  } else {
    predict_prefill(profile, fp, plan, rates, history, prompt_tokens, s);
  }
  s.available = true;
  return s;
}

std::optional<WholeLayerSplit> whole_layer_split(const DeviceProfile& profile, const ModelFootprint& fp, const Plan& plan,
                                                 const experts::UsageHistory* history) {
  const int layers = static_cast<int>(fp.moe_layer_count()), n = fp.n_experts;
  if (layers < 1 || n < 1 || plan.gpu.vram_slots() == 0 || plan.gpu.all_experts_in_vram(n)) return std::nullopt;
  WholeLayerSplit split;
  split.gpu_layers = std::min(layers, plan.gpu.vram_slots() / n);
  split.cpu_layers = layers - split.gpu_layers;
  split.vram_share = static_cast<double>(split.gpu_layers) / layers;
  Plan whole = plan;
  whole.gpu.vram_experts.assign(static_cast<std::size_t>(layers), 0);
  for (int l = split.cpu_layers; l < layers; ++l) whole.gpu.vram_experts[static_cast<std::size_t>(l)] = n;
  whole.gpu.vram_share = split.vram_share;
  whole.gpu.reason = "whole layers, as llama.cpp's --n-cpu-moe " + std::to_string(split.cpu_layers) + ": the last " +
                     std::to_string(split.gpu_layers) + " MoE layers' experts in VRAM";
  split.speed = predict_speed(profile, fp, whole, history);
  split.tier = std::move(whole.gpu);
  return split;
}

}  // namespace coli::planner
