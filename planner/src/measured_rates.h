// The measured rates the speed model (speed.cpp) reads from a device
// profile: RAM, disk, VRAM and host-to-GPU bandwidth, OpenMP step costs and
// the tuning phase's kernel rates, each at the point nearest the plan's
// (team size, block size, shape) and with the text coli-plan prints for it.
// nullopt where the profile has no such measurement.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "coli/base/text.h"
#include "coli/experts/read_rounds.h"
#include "coli/planner/speed.h"
#include "cpu/amx_tiles.h"  // header only

namespace coli::planner::measured {

using u64 = std::uint64_t;


struct Bandwidth {
  double gb_per_s = 0;  // 1 GB = 1e9 B, as the probe measures
  std::string text;
};

struct ComputeRate {
  double macs_per_s = 0;  // multiply-adds per second
  std::string text;
  // Beside the multiply-adds, where measured: each routed (token, expert)
  // row of an expert batch, or each (token, output row) of a projection,
  // costs this much (gathering, quantising, SwiGLU, scattering, summing).
  double seconds_per_row = 0;
  // Where the dispatch cost is split off the row cost (expert_dispatch_cost):
  // each distinct expert of a batch costs this much beside its rows.
  double seconds_per_expert = 0;
  std::string dispatch_text;
  double seconds(double rows, double macs) const { return rows * seconds_per_row + macs / macs_per_s; }
};

// OpenMP regions and the barriers inside them: of one CPU decode token
// (speed.cpp's cpu_decode_parallel_steps: per layer q/k/v, attention and the
// o projection; per MoE layer the router, the experts (one team,
// CpuBackend::ffn_quantized: gate/up, SwiGLU, down and, without a shared
// expert, the weighted sums, meeting at two or three barriers) and a shared
// expert's two; per dense-MLP layer its gate/up and down; then the lm_head),
// or of a prompt's expert batches (prefill_expert_steps).
struct ParallelSteps {
  int regions = 0;
  int barriers = 0;
};
// One decode layer's expert batch without a shared expert, as the engine
// runs it and the tuning phase times it (expert_q4_decode): one team region,
// its steps meeting at three barriers (gate/up, SwiGLU, down, the weighted
// sums); a shared expert's layer sums after the batch, one barrier fewer.
inline constexpr ParallelSteps kDecodeExpertBatch{1, 3};

struct StepCost {
  double seconds = 0;  // one parallel step: a region plus its threads reading what the calling thread wrote
  double barrier_seconds = 0;  // one barrier inside a region
  std::string text;
};

// The threads a pass runs on: how many, and where (empty: unpinned).
struct Team {
  int threads = 1;
  CpuSet pus;
  // Threads the team runs: its PUs where pinned. One enters no OpenMP region.
  int size() const { return pus.empty() ? threads : pus.size(); }
};

// The point measured on the team's own PUs, else at the team size nearest
// its (the first of equally near ones), among those `usable` accepts; null
// when none is. Sets of one size differ on machines with several CPU kinds.
template <class Point, class Usable>
const Point* nearest_team(const std::vector<Point>& points, const Team& team, const Usable& usable) {
  const Point* best = nullptr;
  auto key = [&](const Point& p) {
    bool same_pus = false;
    if constexpr (requires { p.pus; }) same_pus = !team.pus.empty() && p.pus == team.pus;
    return std::pair{!same_pus, std::abs(p.threads - team.threads)};
  };
  for (const Point& p : points) {
    if (!usable(p)) continue;
    if (!best || key(p) < key(*best)) best = &p;
  }
  return best;
}

std::optional<Bandwidth> ram_bandwidth(const DeviceProfile& profile, int threads);
// Random reads of expert records: the rate with the I/O pool's reads in
// flight (small records by the disk's fitted latency), and one read alone
// (a layer that misses one expert waits that long, whatever the rate).
struct DiskReads {
  double gb_per_s = 0;
  double one_read_s = 0;
  u64 record_bytes = 0;
  std::string text;
  // One read alone on a reading thread, without the pool's hand-offs (the
  // bare one-deep figure): what an I/O thread's own pread takes.
  double bare_one_read_s = 0;
  // The engine's read path measured (the probe's engine_pool points at the
  // plan's I/O threads): seconds of a batch of `reads` records submitted
  // together and waited for, by batch size, smallest first (the first is 1).
  std::vector<std::pair<double, double>> batch_seconds;
  // The batches are the engine's own read rounds, timed while the plan's
  // team computed beside them (a usage history's): already as slow as the
  // team's compute leaves them, where the probe's ran beside nothing.
  bool beside_the_team = false;
  // Those rounds' mean wake-up: from the last read landing to the compute
  // thread running again, where it was still waiting (0 without them, or
  // fewer than 3 such rounds). A layer that waits for its reads pays it.
  double wake_s = 0;
  // A generated token's compute after a round it waited for, beyond a token
  // that never waited, per waited round (the engine's tokens in those
  // rounds' history, ReadRounds::add_token; 0 without enough of them, for a
  // prompt's reads, or where it came out below zero). A decode layer that
  // waits pays it: the 2-core VM's one-miss token ran its lm_head 10-25%
  // slower after the thread slept on the read.
  double resume_s = 0;
  // Expected seconds for `reads` records requested together and all waited
  // for (a layer's or a prefill round's misses): below one read, that share
  // of a lone read; else the measured batches interpolated (beyond the
  // largest, at its last step's time per read), or without them the longer
  // of a lone read and the stream.
  double seconds(double reads) const;
};
// Whose read rounds price a disk figure (disk_reads).
enum class ReadPhase { prompt, decode, both };
// `io_threads`: the plan's; the engine_pool points count only when the
// probe's pool had as many threads. `measured`: the engine's own read rounds
// on this model's file (a usage history's sets), which replace the probe's
// batch curve where they read records of this stride with as many I/O
// threads beside `compute_threads` compute threads (or a team not recorded):
// the disk as the engine meets it (the H200 machine's virtual disk read the
// model's records in 1.9-2.3 ms a round of one where the probe's test file
// took 2.75).
// `phase`: whose rounds price it, a prompt's or a generated token's
// (ReadRounds::phase), where the history has enough of them; else both
// phases' together, as `both` always does.
std::optional<DiskReads> disk_reads(const DeviceProfile& profile, u64 record_stride, int io_threads,
                                    std::span<const experts::ReadRounds> measured = {}, int compute_threads = 0,
                                    ReadPhase phase = ReadPhase::prompt);
std::string missing_disk_bandwidth(const DeviceProfile& profile);  // why there is none, and what to run
std::optional<Bandwidth> vram_bandwidth(const DeviceProfile& profile, const ModelFootprint& fp, const GpuTier& tier);
std::optional<Bandwidth> upload_bandwidth(const DeviceProfile& profile, const GpuTier& tier, double bytes);
// OpenMP's costs for `steps` whose threads each read the `hidden_floats` the
// calling thread wrote (a dense point's columns, a model's hidden size).
std::optional<StepCost> parallel_step_cost(const DeviceProfile& profile, const Team& team, ParallelSteps steps,
                                           double hidden_floats);
// How much longer the team's compute takes while an expert read is in
// flight, and how far the read gets meanwhile (the probe's
// read_interference point on the team's PUs, else at the nearest team
// size): a share of the overlapped time, 0 where the probe measured the
// kernel no slower, and the reads' rate beside it over their rate alone,
// at most 1 (past either bound is noise). nullopt without the measurement
// (profiles before schema 6 and quick ones).
struct ReadInterferenceCost {
  double slowdown = 0;
  double read_progress = 1;  // the reads' speed beside the team's compute / alone, at most 1
  std::string text;
};
std::optional<ReadInterferenceCost> read_interference_cost(const DeviceProfile& profile, const Team& team);
// The tuning phase's decode kernels for the experts and for the dense
// matrices, in preference order, and the rate of the first one measured,
// net of the fork/joins its timed call entered (the expert batch's region
// and three barriers, a dense point's region per matrix) where the profile
// measured them at the team: the decode model prices every region of a
// token as a parallel step, so a rate that also carried them counted each
// twice (the H200's dense q4 point at 16 threads: 4 regions of 8.5 us in a
// 122 us call of four 2048 x 2048 matrices).
std::vector<std::string> expert_decode_kernels(WeightFormat experts);
std::vector<std::string> dense_decode_kernels(const ModelFootprint& fp);
std::optional<Bandwidth> decode_kernel_rate(const DeviceProfile& profile, const std::vector<std::string>& kernels,
                                            const Team& team);
// The engine's float GEMV (bf16 dense) as a cost per row plus a rate per
// byte, fitted from the tuning phase's 2048-wide point (dense_bf16_decode)
// and its 64-wide one (dense_bf16_decode_narrow): narrow rows, such as a
// small model's lm_head, cost more than their bytes. nullopt without both
// points or when they do not fit (a negative cost or rate).
struct RowCost {
  double seconds_per_row = 0;
  double gb_per_s = 0;
  std::string text;
  double seconds_per_call = 0;  // beside rows and bytes (an expert's dispatch in its batch)
  double seconds_per_batch = 0;  // an expert batch call's own, beside its experts' (per MoE layer and call)
};
// `from` cache: the same fit through the points timed on weights warm in
// the caches (dense_bf16_decode_cached, _narrow_cached: 4 MiB, each
// thread's share within its core's own cache from 2 threads), for a model
// whose decode working set fits the last-level cache; last_level: through
// the points whose thread shares are 4x the core's own cache
// (dense_bf16_decode_llc, _narrow_llc), for one whose dense share per
// thread does not fit half that cache.
enum class WeightsFrom { ram, cache, last_level };
std::optional<RowCost> float_gemv_row_cost(const DeviceProfile& profile, const Team& team, WeightsFrom from);
// The engine's expert decode batch the same way: a cost per row (a row's
// reduction and store beside its bytes) plus a rate per byte, fitted from
// the OLMoE-shaped point (expert_q4_decode, experts 1024 wide) and a narrow
// one (expert_q4_decode_narrow, 256 wide), both of hidden 2048 (int8:
// expert_q8_decode and _narrow). On the 2-core VM, 6 ns a row at 2 threads:
// Qwen3's 768-wide experts ran 4-5% slower per byte than OLMoE's (8-13% at 1
// thread), 256-wide ones 22-25% (34-35%). With the single-token batch of
// 64-wide experts (expert_q4_prefill_single, the decode path) a cost per
// expert beside them, through all three: on the H100 box the demo model's
// two 64-wide experts a layer took 21 us a layer at 16 threads where rows
// and bytes gave 11 (int8 experts: the two points). With the same token on
// 2 of those experts (expert_q4_prefill_single_pair) the batch call's own
// cost comes apart from its experts' (seconds_per_batch), which a top-2
// model pays for 2 experts where the 8-expert points spread it over 8.
// nullopt without both decode points at one team (profiles before them) or
// when they do not fit.
std::optional<RowCost> expert_gemv_row_cost(const DeviceProfile& profile, WeightFormat experts, const Team& team);

// A decode GEMV as the tuning phase timed it at the team: a fitted cost per
// row plus bytes where it has a narrow point beside the wide one (narrow rows
// cost more than their bytes), else the kernel's streaming rate, else RAM's.
struct DecodeGemv {
  std::optional<Bandwidth> kernel;
  std::optional<RowCost> rows;
  double seconds(double bytes, double row_count, const Bandwidth& ram) const {
    if (rows) return rows->seconds_per_call + bytes / (rows->gb_per_s * 1e9) + row_count * rows->seconds_per_row;
    return bytes / ((kernel ? kernel->gb_per_s : ram.gb_per_s) * 1e9);
  }
  // A batch call's own cost beside its experts (0 where not measured).
  double batch_seconds() const { return rows ? rows->seconds_per_batch : 0.0; }
  // For a prediction's inputs: "; <by_rows> at <the fit>" ("experts 3584
  // rows each"), else "; <streaming> at <the rate>" ("experts stream"), else
  // "" (RAM's rate, in the inputs already).
  std::string inputs(const std::string& streaming, const std::string& by_rows) const {
    if (rows) return "; " + by_rows + " at " + rows->text;
    return kernel ? "; " + streaming + " at " + kernel->text : "";
  }
};
// The expert decode batch's, in the experts' format: what one token costs
// an expert record on the CPU, for every prediction that computes experts
// there.
DecodeGemv expert_gemv(const DeviceProfile& profile, WeightFormat experts, const Team& team);

// AMX multiplies an expert's rows in tiles of kAmxTileTokens tokens, a
// tile's unused rows computed all the same, so n rows cost ceil(n / 16)
// tiles; an expert of fewer than kAmxMinTokens rows runs avx512vnni's GEMM,
// unpadded (kernels/cpu/amx_tiles.h). The expected padded rows over the expected
// rows, for a batch of `tokens` tokens each routed to an expert with
// probability `share` (binomial rows per expert): 1.45 for the probe's
// expert_q4_prefill point (128 tokens, 16 rows an expert on average), 1.12
// for OLMoE's 512-token rounds (64). It prices the tiles' multiply-adds:
// at 2048-wide experts they are the batch's time (the H100 box's engine
// batch ran 16% slower per multiply-add than the probe's 64-row experts).
double amx_tile_padding(double tokens, double share);
// The profile's expert GEMM points ran the amx variant (their rows padded to tiles).
bool tuned_on_amx(const DeviceProfile& profile);

// The expert GEMM's rate at `tokens_per_expert`, and the cost of a routed
// row fitted from the OLMoE-wide and 64-wide expert points at 64 tokens per
// expert (expert_q4_prefill_wide, expert_q4_prefill_narrow) where both are
// timed; `row_cost` false leaves the row cost out (quantised dense
// projections, which run no expert batch).
std::optional<ComputeRate> prefill_compute_rate(const DeviceProfile& profile, WeightFormat experts, const Team& team,
                                                double tokens_per_expert, bool row_cost = true);
// What each distinct expert of an expert batch costs apart from its routed
// rows (its slot and tiles, its share of the batch's gather and scatter),
// from the narrow expert point and the single-token one (the same 8 64-wide
// experts, 64 tokens each and one): N = 8 E + 512 r, S = 8 E + 8 r. The
// narrow and wide points paid E once per `fitted_tokens` rows, which the
// routed row's fitted cost then leaves out. nullopt without both points.
struct ExpertDispatchCost {
  double seconds = 0;         // E, per distinct expert of a batch
  double fitted_tokens = 0;   // tokens per expert of the row-cost fit's points
  std::string text;
};
std::optional<ExpertDispatchCost> expert_dispatch_cost(const DeviceProfile& profile, const Team& team);
// How much dearer a pass's narrow expert batch runs than back to back, its
// buffers left idle `gap_s` since the last layer's batch: the call's time
// interpolated over the gap between expert_q4_prefill_narrow (a gap of
// none) and its idle copies (kIdleGapsMs), held at the longest beyond
// them, never below 1 (idling makes no call faster: a faster idle copy is
// noise). 1 and no text without the idle copies (profiles before them).
struct InPassFactor {
  double factor = 1;
  std::string text;
};
InPassFactor narrow_batch_in_pass(const DeviceProfile& profile, const Team& team, double gap_s);
// A prompt of `prompt` tokens' attention as the engine's pass runs it, in
// units of one (head, query, key) pair's wall time at the team: slice by
// slice of kPassSlice tokens, each a team region over (KV head x block of
// kAttentionRowsPerBlock query rows) items handed out largest first, taking
// the longer of its pairs shared evenly and its largest item, the last
// block, on one thread (the demo model's 4 heads give 16 items a slice:
// 16 threads wait on the last block, 1.2x the even share over 512 tokens).
double prompt_attention_units(double heads, double kv_heads, int prompt, int threads);
// A prompt's attention: wall seconds at the team per unit (above), a fixed
// cost plus 2 x head_dim multiply-adds.
struct AttentionCost {
  double seconds_per_unit = 0;
  double macs_per_s = 0;
  std::string text;
  double seconds(double units, double head_dim) const { return units * (seconds_per_unit + 2 * head_dim / macs_per_s); }
};
std::optional<AttentionCost> prefill_attention_cost(const DeviceProfile& profile, const Team& team);
// forward::attention's decode path hands (KV head x kAttentionTile-position
// tile) items to the team statically: a layer's units of work at `depth`,
// the longer of its (KV head, position) pairs shared evenly and its busiest
// thread's items, times the team (Qwen3's 4 KV heads make 36 items at depth
// 512, 5 of 64 positions on the busiest of 8 threads: 2560 units where
// 4 x 513 shared evenly would be 2052).
double decode_attention_units(double kv_heads, int depth, int threads);
// A decoded token's attention as the tuning phase timed it (attention_decode
// and _grouped: one token at depth kDecodeAttentionDepth over a layer's f16 K
// and V read from RAM, 1 and 8 query heads a KV head): wall seconds at the
// team per unit (above), a cost per (KV head, position) (its K and V rows'
// reads and widening) plus one per query head of the group (a dot, an exp,
// a weighted sum), fitted through both points.
struct DecodeAttentionCost {
  double per_kv_position = 0, per_query_head = 0;  // at the points' head_dim, f16
  int head_dim = 0;
  // attention_decode_grouped_narrow: its unit's cost over the grouped
  // point's, at narrow_head_dim (0: no such point).
  int narrow_head_dim = 0;
  double narrow_ratio = 0;
  std::string text;
  // A model's head_dim against the points': a line through (narrow_head_dim,
  // narrow_ratio) and (head_dim, 1), the fixed part of a unit that does not
  // shrink with its head (below the narrow point, at least its share per
  // element); without the narrow point, in proportion.
  double width_scale(double model_head_dim) const {
    if (narrow_head_dim <= 0 || narrow_head_dim >= head_dim || narrow_ratio <= 0) return model_head_dim / head_dim;
    const double line = 1 + (model_head_dim - head_dim) * (1 - narrow_ratio) / (head_dim - narrow_head_dim);
    return model_head_dim >= narrow_head_dim ? line : std::max(line, narrow_ratio * model_head_dim / narrow_head_dim);
  }
  // A unit's seconds for a model's group and head_dim and KV element bytes
  // (the reads scale with them).
  double unit_seconds(double group, double model_head_dim, double kv_element_bytes) const {
    return (per_kv_position * kv_element_bytes / 2 + per_query_head * group) * width_scale(model_head_dim);
  }
};
std::optional<DecodeAttentionCost> decode_attention_cost(const DeviceProfile& profile, const Team& team);
// Greedy sampling's scan of the logits after every decoded token, on the
// calling thread (greedy_sample: the tuning phase's scan of a vocabulary
// its team wrote as the lm_head does, at the team nearest the plan's).
struct SamplingCost {
  double seconds_per_entry = 0;  // per vocabulary entry
  std::string text;
};
std::optional<SamplingCost> sampling_cost(const DeviceProfile& profile, const Team& team);
// A token's routing at one MoE layer on the calling thread (route_tokens:
// top-k and the reuse bookkeeping over 64 experts top 8; _narrow: 8 top 2):
// a cost per call plus one per (expert x top_k), fitted through both, for
// the model's experts and top_k; with one point, its time.
struct RoutingCost {
  double seconds = 0;  // one token at one MoE layer
  std::string text;
};
// `kernel`: route_tokens (top-k and records, as a decode token's routing
// runs), or route_records (the records alone: a prompt's stay on the calling
// thread); each fitted through its point and its _narrow one.
std::optional<RoutingCost> routing_cost(const DeviceProfile& profile, const Team& team, int n_experts, int top_k,
                                        const std::string& kernel = "route_tokens");
// A prompt's small rounds (a token or a few per expert) stream each
// distinct expert's record through the batch's GEMM path, slower the more
// rows the expert has: the tuning phase's GB/s at one, two and four rows on
// each of 24 OLMoE-wide experts (expert_q4_prefill_stream1, _stream,
// _stream4; _q8_ the same), at the team nearest the plan's.
struct StreamCost {
  std::vector<std::pair<double, double>> points;  // (rows per expert, seconds per byte of a record), by rows
  // A record its layer read again within warm_distance_bytes of other
  // records (the warm stream points): (rows, its seconds per byte over the
  // fresh point's, at most 1), by rows; empty, and the distance 0, where
  // the profile has none.
  std::vector<std::pair<double, double>> warm_ratios;
  double warm_distance_bytes = 0;
  std::string text;
  // Rows from which the engine runs another kernel (amx: kAmxMinTokens; below
  // it avx512vnni's GEMM); 0: one kernel at every row count.
  int kernel_switch_rows = 0;
  // A record with `rows` rows: linear between the timed rows of its own
  // kernel; past its last point, in proportion to the rows below the switch
  // (a GEMM bound by its rows), held otherwise (an amx tile's 16 rows cost
  // alike; past four rows the GEMM term prices the rows). Never
  // interpolated across the switch: the amx profile's 4-row point pads its
  // rows to a tile of 16, which a 3-row expert's vnni GEMM does not.
  // `warm`: times the warm ratio at `rows`, interpolated as the points are
  // (its own kernel's; held past them).
  double seconds_per_byte(double rows, bool warm = false) const;
};
// nullopt where the profile has none of those points; a profile of one
// point (older probes timed two rows alone) prices every round by it.
std::optional<StreamCost> prefill_stream_cost(const DeviceProfile& profile, WeightFormat experts, const Team& team);
// A token's element-wise work at one layer (MoeModel's input and
// post-attention RMS norms, q/k norms, RoPE of q and k, the KV store and the
// two residual adds) on one thread (token_ops_prefill and _narrow): a cost
// per token and layer plus one per element, fitted through both points;
// with one point, per element alone.
struct TokenOpsCost {
  double fixed_seconds = 0, seconds_per_element = 0;
  std::string text;
  double seconds(double elements) const { return fixed_seconds + elements * seconds_per_element; }
};
// The elements a token's ops touch at one layer of `c`, as the probe counts them.
double token_ops_elements(const model::ModelConfig& c);
std::optional<TokenOpsCost> token_ops_cost(const DeviceProfile& profile, const Team& team);
// The float (bf16) dense projections of a prompt: multiply-adds per second
// and, fitted with the 64-wide point (dense_bf16_prefill_narrow), a cost
// per projected row.
std::optional<ComputeRate> dense_prefill_rate(const DeviceProfile& profile, const Team& team);
// Quantised dense projections of a prompt (int4 or int8 weights): the
// engine's projections of a prompt slice as the tuning phase timed them
// (dense_q4_prefill / dense_q8_prefill, kPassSlice rows through q, k, v and
// o); nullopt in a profile without that point.
std::optional<ComputeRate> quantized_dense_prefill_rate(const DeviceProfile& profile, WeightFormat format, const Team& team);

}  // namespace coli::planner::measured
