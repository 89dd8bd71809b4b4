// The timing half of the tuning phase: the engine's GEMV calls at OLMoE-class
// shapes on weights cycled through a pool larger than the last-level cache,
// so every call streams from RAM as decode does (see kernel_tuning.h).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <random>

#include "coli/base/clock.h"
#include "coli/base/pass_shape.h"
#include "coli/base/text.h"
#include "coli/experts/usage_history.h"
#include "coli/forward/attention.h"
#include "coli/forward/ops.h"
#include "cpu/gemv_cpu.h"
#include "cpu/parallel_for.h"
#include "cpu/thread_placement.h"
#include "measure/engine_expert_batch.h"
#include "measure/engine_projections.h"
#include "measure/kernel_tuning.h"
#include "measure/stats.h"
#include "measure/weight_pool.h"

namespace coli::probe {
namespace {

namespace cpu = kernels::cpu;
using Clock = std::chrono::steady_clock;

// OLMoE-1B-7B (engine_expert_batch.h): hidden 2048, 64 experts of width 1024, top-8, 16 heads of 128.
constexpr int kHidden = kOlmoeHidden, kWidth = kOlmoeWidth, kTopK = kOlmoeTopK, kExperts = kOlmoeExperts, kAttentionMatrices = 4;
constexpr double kFillShare = 0.35;      // of the budget, at most, for first-touching the pool
constexpr double kMinUnitSeconds = 0.03; // per round: a slice below this is mostly noise
// Prefill attention: a prompt of kAttentionTokens causal positions over an
// f16 KV cache (the CPU's default), OLMoE's 16 heads of 128, and the narrow
// point's 4 heads of 16, a small model's (the demo model's shape: on the
// H100 box its slices ran 1.33x the cost per pair of 16 such heads at 8
// threads, 16 (KV head, block) items a slice against 64).
constexpr int kAttentionTokens = 512, kHeads = 16, kHeadDim = 128, kNarrowHeads = 4, kNarrowHeadDim = 16;
// The narrow decode attention point's heads: a common narrower width (16
// would read half a cache line a K or V row of a head).
constexpr int kDecodeNarrowHeadDim = 64;

std::uint64_t matrix_bytes(WeightFormat format, int rows, int cols) {
  return traits(format).matrix_bytes(static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols));
}

template <class View>
View view_at(const std::byte* p, int rows, int cols);
template <>
cpu::Q4G64View view_at(const std::byte* p, int rows, int cols) {
  const auto scales = traits(WeightFormat::q4_g64).scales_offset(static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols));
  return {reinterpret_cast<const std::uint8_t*>(p), reinterpret_cast<const std::uint16_t*>(p + scales), rows, cols};
}
template <>
cpu::Q8RowView view_at(const std::byte* p, int rows, int cols) {
  const auto scales = traits(WeightFormat::q8_row).scales_offset(static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols));
  return {reinterpret_cast<const std::int8_t*>(p), reinterpret_cast<const float*>(p + scales), rows, cols};
}

struct KernelSpec {
  std::string name;
  WeightFormat format = WeightFormat::q4_g64;
  bool prefill = false, dense = false;
  double weight = 1;  // share of the budget relative to a decode kernel
  bool attention = false;  // the engine's causal attention over a prompt (no weights); with !prefill, one decoded token's
  // A decode attention point's query heads per KV head (its KV heads are
  // OLMoE's 16): the heads of a GQA group share each K and V row load.
  int attention_group = 1;
  // Tokens of one prefill call (0: the probe's prefill tokens). An expert
  // kernel given them routes every token to the same top_k experts (the
  // per-expert shape of a whole pass), else the probe's tokens over all 64.
  int call_tokens = 0;
  // A call_tokens point's experts (0: top_k, OLMoE's 8).
  int call_experts = 0;
  // A stream point's experts (0: none): each token routed to one of them
  // (token t to expert t mod stream_experts), so each carries call_tokens /
  // stream_experts rows of tokens of its own, as a prompt round's experts do.
  int stream_experts = 0;
  // Of those, the first `stream_kept` read the same records every call
  // (EngineExpertBatch::keep_first): the warm stream points.
  int stream_kept = 0;
  // A dense kernel's call: `dense_matrices` GEMVs of rows x cols (default:
  // q, k, v and o of OLMoE's attention).
  int dense_rows = kHidden, dense_cols = kHidden, dense_matrices = kAttentionMatrices;
  // A dense decode kernel's weights taken from the pool once and read by
  // every call, warm in the caches: a model whose weights fit the last-level
  // cache decodes from there (the tiny model's 6 MiB lm_head on the H100 box
  // ran 1.5x faster than the points streaming from RAM said).
  bool cache_resident = false;
  // With cache_resident: sized for each set, each thread's share of the
  // rows kCoreCacheSpill times the core's own cache (core_cache_bytes), so
  // they come from the last level (the fixed 4 MiB fit the 2-core VM's two
  // L2s, where the demo model's 6 MiB lm_head ran 10-14% slower than they
  // said).
  bool spills_core_cache = false;
  // A prompt attention point's heads (KV heads alike) and their width:
  // OLMoE's 16 of 128, or a small model's few narrow ones.
  int attention_heads = kHeads, head_dim = kHeadDim;
  // An expert kernel's experts: hidden x width (OLMoE's, or narrow ones: a
  // small model's cost per routed row beside its multiply-adds).
  int expert_hidden = kHidden, expert_width = kWidth;
  // Greedy sampling's scan of a vocabulary's logits (forward::greedy_token,
  // on the calling thread): what every decoded token costs after its pass.
  // Untimed before each scan the set's team writes the logits as the
  // lm_head's GEMV does, each member a contiguous share, so the scan reads
  // the other members' shares from their caches: timed on every set (the
  // 2-core VM's 2-thread tokens took 20 us more after the pass than one
  // thread's scan of its own logits).
  bool sampling = false;
  // A token's routing as MoeModel::route_tokens does it for a decode token
  // on the calling thread, per MoE layer: top-k of the router's logits
  // (forward::route) and the reuse-distance bookkeeping, over
  // `route_experts` experts, top `route_top_k` (a prompt's tokens share the
  // top-k over the team: the planner divides it there).
  bool routing = false;
  // The bookkeeping alone (route_records): the reuse distances and counts a
  // prompt's tokens record on the calling thread after the team's top-k, in
  // token order (the planner keeps this part off the team's share).
  bool route_records = false;
  int route_experts = kExperts, route_top_k = kTopK;
  // A token's element-wise work per layer as MoeModel's pass does it
  // (token_ops_prefill): the input and post-attention RMS norms, RoPE of q
  // and k, the KV store (f16) and the two residual adds, over `token_hidden`
  // and `token_heads` heads of `head_dim` (q and KV heads alike), token
  // after token at positions 0, 1, ... on the calling thread (a prompt
  // splits its tokens evenly over the team: the speed model divides).
  bool token_ops = false;
  int token_hidden = kHidden, token_heads = 16;
  // Milliseconds the team spins on registers before each timed call (an
  // idle copy, kIdleGapsMs): the caches age the call's buffers that long.
  int idle_ms = 0;
  // The calling thread's kernels alone.
  bool serial() const { return sampling || routing || token_ops; }
  // Those that do not depend on the team either: timed once, on the first set.
  bool team_independent() const { return routing || token_ops; }
  // Every other kernel that is neither dense nor attention runs the engine's expert batch.
  bool experts() const { return !dense && !attention && !serial(); }
  // A dense prefill kernel runs the engine's projections of a prompt slice (EngineProjections).
  bool projections() const { return dense && prefill; }
  // A decoded token's attention reads the shared pool of KV layers (decode_attention_pool).
  bool decode_attention() const { return attention && !prefill; }
};

// The engine's 512-token prefill pass over OLMoE's 64 experts gives each
// expert 64 tokens; the probe's own prefill call (128 tokens) gives each 16.
// A GEMM's rate grows with its tokens, so the speed model reads both and
// interpolates at a model's own tokens per expert. 64 tokens on 8 experts
// are the pass's per-expert shape at an eighth of its cost.
constexpr int kWideTokensPerExpert = 64;
// The stream points' experts per call, kStreamPointExperts (device_profile.h),
// are a streaming prompt round's dozen or two (OLMoE's cap-48 rounds lease
// 15-21 a layer). At 16 threads on the H200, 8 experts of two rows streamed
// 10-12% slower than 24 (the team's gate/up and down steps split over fewer
// jobs); at 8 threads and on the 2-core VM the two were equal.
constexpr int kWarmStreamWarmups = 5;  // untimed calls of a warm stream point before each slice (time_slice)
constexpr int kNarrowRows = 32768, kNarrowCols = 64;  // 4 MiB of bf16
constexpr int kCachedRows = 1024;  // of kHidden columns: 4 MiB of bf16, as the narrow matrix
constexpr int kNarrowExpert = 64;  // hidden and width of the narrow expert and dense prefill points
// The narrow expert decode point's width (hidden stays OLMoE's 2048):
// fine-grained experts (Qwen3's 768, 512 and below) walk more rows per byte.
constexpr int kNarrowDecodeWidth = 256;
constexpr int kSampledVocab = 131072;  // logits scanned per greedy pick (512 KiB: a cache-resident vocabulary row)

// Tokens per token_ops call: positions 0..kTokenOpsTokens-1, each a new RoPE angle.
constexpr int kTokenOpsTokens = 128;

// Decode attention: one token at position kDecodeAttentionDepth
// (device_profile.h) over OLMoE's 16 KV heads of 128 in f16 (the narrow
// point's of kDecodeNarrowHeadDim), each call a
// layer of its own from a pool of layers twice the last-level cache (at
// most half the test weights), so its K and V stream from RAM as a decoded
// token's do (the weights of a token's other layers pass between two reads
// of one layer's). The 2-core VM's OLMoE token took 3.6 ms more at depth
// 512 than at 0 at 2 threads and 6.8 ms at 1, where its KV bytes at the RAM
// rate said 1.9 and 3.9. Filling 1.2 GiB took 0.7 s there.
std::uint64_t decode_attention_pool_bytes(const CpuFacts& facts, const WeightPool& pool) {
  return std::min(pool.size() / 2, 2 * last_level_cache_bytes(facts.caches, facts.cores));
}
std::shared_ptr<forward::KvCache> decode_attention_pool(std::uint64_t bytes, int head_dim) {
  const std::uint64_t layer = kv_cache_bytes(1, kHeads, head_dim, kDecodeAttentionDepth + 1, KvType::f16);
  const int layers = static_cast<int>(std::clamp<std::uint64_t>(bytes / layer, 2, 4096));
  auto cache = std::make_shared<forward::KvCache>(layers, kHeads, head_dim, kDecodeAttentionDepth + 1, KvType::f16);
  // Values drawn once and stored at every (layer, position): the timing does not depend on them.
  std::mt19937 random(5);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> k(static_cast<std::size_t>(kHeads) * head_dim), v(k.size());
  for (float& x : k) x = uniform(random);
  for (float& x : v) x = uniform(random);
  for (int l = 0; l < layers; ++l)
    for (int position = 0; position <= kDecodeAttentionDepth; ++position) cache->store(l, position, k, v);
  return cache;
}

// Tokens routed top-8 over 64 experts (fixed seed: every run times the same
// work), as tasks in expert-major order like the expert store's round order.
std::vector<std::pair<int, int>> prefill_routing(int tokens, int n_experts) {
  std::mt19937 random(7);
  std::vector<std::vector<int>> chosen(static_cast<std::size_t>(tokens));
  std::vector<int> experts(static_cast<std::size_t>(n_experts));
  for (auto& token : chosen) {
    for (int e = 0; e < n_experts; ++e) experts[static_cast<std::size_t>(e)] = e;
    std::shuffle(experts.begin(), experts.end(), random);
    token.assign(experts.begin(), experts.begin() + std::min(kTopK, n_experts));  // a call of fewer experts: all of them
  }
  std::vector<std::pair<int, int>> tasks;  // (token, expert)
  for (int e = 0; e < n_experts; ++e)
    for (int t = 0; t < tokens; ++t)
      if (std::find(chosen[static_cast<std::size_t>(t)].begin(), chosen[static_cast<std::size_t>(t)].end(), e) != chosen[static_cast<std::size_t>(t)].end())
        tasks.emplace_back(t, e);
  return tasks;
}

SampleStats scaled(SampleStats stats, double factor) {
  stats.median *= factor, stats.best *= factor, stats.worst *= factor;
  return stats;
}

// One kernel on one thread set, ready to be called again and again (the
// team must be pinned to the set before run()); GB/s of weights per call.
class KernelRunner {
 public:
  // `experts`: the engine's expert batch for an expert kernel, else empty;
  // `projections`: the engine's projections for a dense prefill kernel, else empty.
  // `kv_pool`: a decode attention kernel's layers (decode_attention_pool), else null.
  KernelRunner(const KernelSpec& spec, const ThreadCandidate& set, cpu::CpuKernelVariant variant, WeightPool& pool,
               int prefill_tokens, std::optional<EngineExpertBatch> experts, std::optional<EngineProjections> projections,
               std::shared_ptr<const forward::KvCache> kv_pool)
      : spec_(spec), variant_(variant), pool_(pool), threads_(set.pus.size()),
        xs_(static_cast<std::size_t>(std::max({prefill_tokens, spec.call_tokens, 1})) * kHidden),
        y_(static_cast<std::size_t>(std::max(kHidden, spec.dense_rows))),
        experts_(std::move(experts)), projections_(std::move(projections)), kv_pool_(std::move(kv_pool)),
        dense_bytes_(matrix_bytes(spec.dense ? spec.format : WeightFormat::q8_row, spec.dense_rows, spec.dense_cols)) {
    std::mt19937 random(3);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (float& v : xs_) v = uniform(random);
    const int tokens = spec.call_tokens > 0 ? spec.call_tokens : prefill_tokens;
    point_ = {spec.name, spec.dense ? spec.dense_rows : spec.expert_width, spec.dense ? spec.dense_cols : spec.expert_hidden,
              spec.prefill ? tokens : 1, 0,
              set.name, threads_, set.pus, set.smt, {}, {}};
    if (spec.routing) {
      // rows x cols: experts x top_k; batch: the tokens routed per call; bytes: their logits.
      point_.rows = spec.route_experts, point_.cols = spec.route_top_k, point_.batch = kAttentionTokens, point_.matrices = 0;
      logits_.resize(static_cast<std::size_t>(kAttentionTokens) * spec.route_experts);
      for (float& v : logits_) v = uniform(random);
      reuse_.emplace(1, spec.route_experts);
      if (spec.route_records) route_all();  // the routings it records, chosen once
      bytes_ = 4.0 * static_cast<double>(logits_.size());
    } else if (spec.token_ops) {
      init_token_ops(random);
    } else if (spec.sampling) {
      // rows: the vocabulary scanned; bytes: its logits.
      point_.rows = kSampledVocab, point_.cols = 1, point_.batch = 1, point_.matrices = 0;
      logits_.resize(kSampledVocab);
      for (float& v : logits_) v = uniform(random);
      bytes_ = 4.0 * kSampledVocab;
    } else if (spec.decode_attention()) {
      // rows x cols: query heads x head_dim; matrices: KV heads; bytes: the K and V one token reads.
      const int kv_heads = kv_pool_->kv_heads(), heads = kv_heads * spec.attention_group, positions = kDecodeAttentionDepth + 1;
      point_.rows = heads, point_.cols = kv_pool_->head_dim(), point_.batch = 1, point_.matrices = kv_heads;
      q_.resize(static_cast<std::size_t>(heads) * point_.cols);
      for (float& v : q_) v = uniform(random);
      attention_out_.resize(q_.size());
      bytes_ = 2.0 * positions * static_cast<double>(kv_heads * kv_pool_->row_bytes());
    } else if (spec.attention) {
      // rows x cols: heads x head_dim; batch: the prompt's tokens; bytes: the K and V it reads.
      const int heads = spec.attention_heads, head_dim = spec.head_dim;
      point_.rows = heads, point_.cols = head_dim, point_.batch = kAttentionTokens, point_.matrices = 0;
      cache_ = forward::KvCache(1, heads, head_dim, kAttentionTokens, KvType::f16);
      std::vector<float> row(static_cast<std::size_t>(heads) * head_dim);
      for (int position = 0; position < kAttentionTokens; ++position) {
        for (float& v : row) v = uniform(random);
        cache_.store(0, position, row, row);
      }
      q_.resize(static_cast<std::size_t>(kAttentionTokens) * heads * head_dim);
      for (float& v : q_) v = uniform(random);
      attention_out_.resize(q_.size());
      bytes_ = 2.0 * kAttentionTokens * heads * head_dim * 2;  // K and V in f16, each position once per block
    } else if (spec.dense) {
      point_.matrices = spec.dense_matrices;
      bytes_ = static_cast<double>(static_cast<std::uint64_t>(spec.dense_matrices) * dense_bytes_);
      if (spec.cache_resident)
        resident_ = pool.take(static_cast<std::uint64_t>(spec.dense_matrices) * WeightPool::taken_bytes(dense_bytes_));
    } else {
      // Decode: one token on top_k experts; prefill: the routed tokens, each
      // expert's record a distinct one while the pool holds them.
      const int routed = spec.stream_experts > 0   ? spec.stream_experts
                         : spec.call_tokens > 0    ? (spec.call_experts > 0 ? spec.call_experts : kTopK)
                                                   : kExperts;
      distinct_ = static_cast<int>(std::min<std::size_t>(spec.prefill ? routed : kTopK, experts_->slots()));
      if (spec.prefill && spec.stream_experts > 0) {
        // Each expert's rows kept where the pool holds fewer records than the point's experts.
        const int rows = spec.call_tokens / spec.stream_experts;
        // A warm point times its kept experts' call alone, after an untimed
        // call of the others (fresh records between two reads of a kept one).
        const int kept = std::min(spec.stream_kept, distinct_ - 1), timed = kept > 0 ? kept : distinct_;
        point_.batch = rows * timed;
        for (int e = 0; e < timed; ++e)
          for (int row = 0; row < rows; ++row) routing_.emplace_back(e + row * timed, e);
        if (kept > 0) {
          for (int e = kept; e < distinct_; ++e)
            for (int row = 0; row < rows; ++row) fresh_routing_.emplace_back(e - kept + row * (distinct_ - kept), e);
          experts_->keep_first(kept);
          fresh_experts_ = distinct_, fresh_tokens_ = rows * (distinct_ - kept);
          distinct_ = kept;
        }
      } else if (spec.prefill) {
        for (auto [token, expert] : prefill_routing(tokens, routed)) routing_.emplace_back(token, expert % distinct_);
      } else {
        for (int e = 0; e < kTopK; ++e) routing_.emplace_back(0, e % distinct_);
      }
      point_.matrices = 3 * static_cast<int>(routing_.size());
      bytes_ = static_cast<double>(distinct_) * static_cast<double>(experts_->record_bytes());
    }
  }

  double run() {
    if (fresh_experts_ > 0) experts_->run(fresh_routing_, fresh_experts_, xs_, fresh_tokens_);
    if (spec_.sampling) write_logits();
    if (spec_.idle_ms > 0) idle_team(spec_.idle_ms);
    const auto start = Clock::now();
    if (spec_.routing) {
      spec_.route_records ? record_all() : route_all();
    } else if (spec_.token_ops) {
      token_ops_all();
    } else if (spec_.sampling) {
      picked_ = forward::greedy_token(logits_);
    } else if (kv_pool_) {
      next_layer_ = (next_layer_ + 1) % kv_pool_->layers();
      forward::attention(*kv_pool_, next_layer_, q_, 1, kDecodeAttentionDepth, point_.rows, attention_out_, threads_);
    } else if (spec_.attention) {
      prompt_attention_in_slices();
    } else if (projections_) {
      std::array<const std::byte*, 4> weights{};
      for (const std::byte*& w : weights) w = pool_.take(dense_bytes_);
      projections_->run(weights, xs_, point_.batch);
    } else if (spec_.dense) {
      // Separate gemv calls, as Linear::apply makes them: the int8 kernel
      // for quantised matrices, the engine's float GEMV for the others.
      const int rows = spec_.dense_rows, cols = spec_.dense_cols;
      const std::span<const float> x = std::span<const float>(xs_).first(static_cast<std::size_t>(cols));
      const std::span<float> y = std::span<float>(y_).first(static_cast<std::size_t>(rows));
      for (int m = 0; m < spec_.dense_matrices; ++m) {
        const std::byte* weights =
            resident_ ? resident_ + static_cast<std::size_t>(m) * WeightPool::taken_bytes(dense_bytes_) : pool_.take(dense_bytes_);
        if (spec_.format == WeightFormat::q4_g64) {
          cpu::gemv(view_at<cpu::Q4G64View>(weights, rows, cols), x, y, {variant_, threads_});
        } else if (spec_.format == WeightFormat::q8_row) {
          cpu::gemv(view_at<cpu::Q8RowView>(weights, rows, cols), x, y, {variant_, threads_});
        } else {
          forward::gemv_dense({spec_.format, rows, cols, weights}, x, y, threads_);
        }
      }
    } else {
      experts_->run(routing_, distinct_, xs_, spec_.prefill ? point_.batch : 1);
    }
    return bytes_ / coli::seconds_since(start) / 1e9;
  }

  Result<KernelThroughputPoint> point(std::vector<double> samples) const {
    const auto all_finite = [](const std::vector<float>& v) { return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); }); };
    const bool finite = spec_.token_ops   ? all_finite(token_x_)
                        : spec_.serial()    ? picked_ >= 0
                        : spec_.attention ? all_finite(attention_out_)
                        : projections_    ? projections_->finite()
                        : spec_.dense   ? all_finite(y_)
                        : experts_->finite();
    if (!finite) return make_error("kernel tuning: " + spec_.name + " produced non-finite values; the kernel or memory misbehaved");
    KernelThroughputPoint out = point_;
    out.gb_per_s = summarize(std::move(samples));
    out.tokens_per_s = scaled(out.gb_per_s, 1e9 / bytes_ * out.batch);
    return out;
  }
  const KernelSpec& spec() const { return spec_; }

 private:
  // A prompt's attention as the engine's pass runs it (attention_pass):
  // slice by slice of kPassSlice tokens, each a call over the positions
  // before it and its own (on the H100 box the demo model's four slices
  // took 1.3x one 512-token call at 8 threads).
  void prompt_attention_in_slices() {
    const int heads = point_.rows;
    const std::size_t width = static_cast<std::size_t>(heads) * static_cast<std::size_t>(point_.cols);
    for (int first = 0; first < kAttentionTokens; first += kPassSlice) {
      const int count = std::min(kPassSlice, kAttentionTokens - first);
      const std::size_t at = static_cast<std::size_t>(first) * width, values = static_cast<std::size_t>(count) * width;
      forward::attention(cache_, 0, std::span<const float>(q_).subspan(at, values), count, first, heads,
                         std::span(attention_out_).subspan(at, values), threads_);
    }
  }

  // rows: hidden; cols: head_dim; matrices: heads; batch: tokens per call;
  // bytes: the floats the ops read and write.
  void init_token_ops(std::mt19937& random) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const int hidden = spec_.token_hidden, heads = spec_.token_heads, head_dim = spec_.head_dim;
    point_.rows = hidden, point_.cols = head_dim, point_.matrices = heads, point_.batch = kTokenOpsTokens;
    const auto tokens = static_cast<std::size_t>(kTokenOpsTokens), width = static_cast<std::size_t>(heads) * head_dim;
    for (auto* v : {&token_x_, &token_o_}) v->resize(tokens * static_cast<std::size_t>(hidden));
    for (auto* v : {&token_q_, &token_k_, &token_v_}) v->resize(tokens * width);
    for (auto* v : {&token_x_, &token_q_, &token_k_, &token_v_}) for (float& x : *v) x = uniform(random);
    for (float& x : token_o_) x = 1e-3f * uniform(random);  // small residual updates: x stays finite over every call
    norm_weight_.assign(static_cast<std::size_t>(hidden), 1.0f);
    normed_.resize(static_cast<std::size_t>(hidden));
    rope_.emplace(head_dim, 10000.0);
    cache_ = forward::KvCache(1, heads, head_dim, kTokenOpsTokens, KvType::f16);
    bytes_ = 4.0 * kTokenOpsTokens * (6.0 * hidden + 4.0 * static_cast<double>(width));
  }

  void token_ops_all() {
    const auto hidden = static_cast<std::size_t>(spec_.token_hidden);
    const auto width = static_cast<std::size_t>(spec_.token_heads) * static_cast<std::size_t>(spec_.head_dim);
    for (int t = 0; t < kTokenOpsTokens; ++t) {
      const auto at = static_cast<std::size_t>(t);
      const std::span<float> x = std::span(token_x_).subspan(at * hidden, hidden);
      const std::span<const float> o = std::span<const float>(token_o_).subspan(at * hidden, hidden);
      forward::rms_norm(x, norm_weight_, 1e-6f, normed_);
      const std::span<float> q = std::span(token_q_).subspan(at * width, width), k = std::span(token_k_).subspan(at * width, width);
      rope_->apply(q, spec_.token_heads, t);
      rope_->apply(k, spec_.token_heads, t);
      cache_.store(0, t, k, std::span<const float>(token_v_).subspan(at * width, width));
      for (std::size_t i = 0; i < hidden; ++i) x[i] += o[i];  // the attention output's residual add
      forward::rms_norm(x, norm_weight_, 1e-6f, normed_);    // the post-attention norm
      for (std::size_t i = 0; i < hidden; ++i) x[i] += o[i];  // the MoE output's
    }
  }

  // Every member of the team spins on registers for `ms`, touching no
  // memory; none sleeps (a pass's members are busy between two batches, and
  // waking a sleeping thread is not what the batch pays).
  void idle_team(int ms) const {
    const auto until = Clock::now() + std::chrono::milliseconds(ms);
    cpu::parallel_for(static_cast<std::size_t>(threads_), threads_, threads_ > 1, [&](std::size_t) {
      while (Clock::now() < until) {
      }
    });
  }

  // The team writes the logits (greedy_sample), as the lm_head's GEMV
  // splits its rows; the values move every call so no scan sees the last
  // one's.
  void write_logits() {
    ++writes_;
    cpu::parallel_for(logits_.size(), threads_, threads_ > 1, [&](std::size_t i) {
      logits_[i] = static_cast<float>((i * 2654435761u + writes_) % 1000003u) * 1e-6f;
    });
  }

  void route_all() {
    const auto n = static_cast<std::size_t>(spec_.route_experts);
    routings_.clear();
    for (std::size_t t = 0; t < static_cast<std::size_t>(point_.batch); ++t) {
      routings_.push_back(forward::route(std::span<const float>(logits_).subspan(t * n, n), spec_.route_top_k,
                                         forward::RouterNorm::softmax_topk));
      reuse_->record(0, routings_.back().experts);
    }
    picked_ = routings_.back().experts.front();
  }

  // route_all's bookkeeping alone, as MoeModel::route_tokens records a prompt's routings.
  void record_all() {
    routed_counts_.resize(static_cast<std::size_t>(spec_.route_experts));
    for (const forward::Routing& routing : routings_) {
      for (int expert : routing.experts) ++routed_counts_[static_cast<std::size_t>(expert)];
      reuse_->record(0, routing.experts, false);
    }
    picked_ = static_cast<int>(routed_counts_.front() % 7);
  }

  KernelSpec spec_;
  cpu::CpuKernelVariant variant_;
  WeightPool& pool_;
  int threads_;
  std::vector<float> xs_, y_;
  std::optional<EngineExpertBatch> experts_;
  std::optional<EngineProjections> projections_;
  std::vector<std::pair<int, int>> routing_;  // (token, expert) of one call
  // A warm stream point's untimed call before each timed one: the experts
  // after the kept ones (numbered up to fresh_experts_), fresh records.
  std::vector<std::pair<int, int>> fresh_routing_;
  int fresh_experts_ = 0, fresh_tokens_ = 0;
  forward::KvCache cache_;                 // attention_prefill, token_ops
  std::shared_ptr<const forward::KvCache> kv_pool_;  // attention_decode: a layer a call
  int next_layer_ = 0;
  std::optional<forward::Rope> rope_;      // token_ops
  std::vector<float> token_x_, token_q_, token_k_, token_v_, token_o_, norm_weight_, normed_;  // token_ops
  std::vector<float> q_, attention_out_;
  std::vector<float> logits_;              // greedy_sample, route_tokens
  std::optional<experts::ReuseDistances> reuse_;  // route_tokens
  std::vector<forward::Routing> routings_;
  std::vector<std::uint64_t> routed_counts_;  // route_records
  int picked_ = -1;
  std::uint64_t writes_ = 0;  // greedy_sample: the team's writes of the logits
  std::uint64_t dense_bytes_;
  const std::byte* resident_ = nullptr;  // a cache-resident dense kernel's weights
  int distinct_ = 0;
  double bytes_ = 0;
  KernelThroughputPoint point_;
};

// One kernel on one set; each round adds the median of its slice, so a
// point's figures (and spread) are over rounds: a round disturbed by other
// processes is one sample, not hundreds.
struct Work {
  std::size_t set;
  KernelRunner runner;
  std::vector<double> round_medians;
};

// Each point over its undisturbed rounds (undisturbed_rounds).
Result<std::vector<KernelThroughputPoint>> points_of(const std::vector<Work>& work) {
  std::vector<KernelThroughputPoint> points;
  for (const Work& w : work) {
    if (w.round_medians.empty()) continue;
    auto point = w.runner.point(undisturbed_rounds(w.round_medians));
    if (!point) return point.error();
    points.push_back(std::move(*point));
  }
  return points;
}

void add_note(KernelTuning& tuning, const std::string& note) {
  tuning.note += (tuning.note.empty() ? "" : "; ") + note;
}

// A stream point: `rows` rows on each of kStreamPointExperts experts in `format`
// (int4 or int8), named expert_q4_prefill_stream, _stream1, _stream4 (the
// speed model reads the rows from the name); two rows weigh as much as the
// others together. `warm`: _stream_warm, _stream_warm1, _stream_warm4, with
// kWarmStreamExperts of the experts read again every call and timed alone,
// at half the weight.
KernelSpec stream_spec(WeightFormat format, int rows, bool warm = false) {
  const std::string name = std::string("expert_") + (format == WeightFormat::q4_g64 ? "q4" : "q8") + "_prefill_stream" +
                           (warm ? "_warm" : "") + (rows == 2 ? "" : std::to_string(rows));
  return {.name = name, .format = format, .prefill = true, .weight = (rows == 2 ? 0.5 : 0.25) * (warm ? 0.5 : 1.0),
          .call_tokens = rows * kStreamPointExperts, .stream_experts = kStreamPointExperts, .stream_kept = warm ? kWarmStreamExperts : 0};
}

// expert_q4_prefill_narrow: the wide expert call's shape on 64-wide experts;
// with `idle_ms`, its idle copy (idle_point_name), the team spinning that
// long before each timed call.
KernelSpec narrow_expert_spec(int idle_ms) {
  const std::string name = "expert_q4_prefill_narrow";
  return {.name = idle_ms > 0 ? idle_point_name(name, idle_ms) : name, .format = WeightFormat::q4_g64, .prefill = true,
          .weight = 0.5, .call_tokens = kWideTokensPerExpert, .expert_hidden = kNarrowExpert, .expert_width = kNarrowExpert,
          .idle_ms = idle_ms};
}

// The kernels the tuning phase times, each with its share of a set's time.
std::vector<KernelSpec> tuning_specs() {
  using F = WeightFormat;
  // The q4 kernels and the dense one decide the thread sets; int8 only adds figures.
  return {
      {"expert_q4_decode", F::q4_g64, false, false, 1}, {"dense_q8_decode", F::q8_row, false, true, 1},
      {"expert_q4_prefill", F::q4_g64, true, false, 2}, {"expert_q8_decode", F::q8_row, false, false, 1},
      {"expert_q8_prefill", F::q8_row, true, false, 2},
      // For the speed model only, at half a decode kernel's share each (they
      // decide no thread set): dense matrices in the other formats the engine
      // holds them in, int4 (`--dense q4_g64`) and the checkpoint's bf16
      // (coli convert's default, whose lm_head is most of a small model's
      // decode), and a prompt's attention.
      {"dense_q4_decode", F::q4_g64, false, true, 0.5}, {"dense_bf16_decode", F::bf16, false, true, 0.5},
      {.name = "attention_prefill", .format = F::f32, .prefill = true, .attention = true},
      {.name = "expert_q4_prefill_wide", .format = F::q4_g64, .prefill = true, .call_tokens = kWideTokensPerExpert},
      {.name = "expert_q8_prefill_wide", .format = F::q8_row, .prefill = true, .call_tokens = kWideTokensPerExpert},
      // A streaming prompt's small rounds (a token or a few per expert)
      // stream each expert's record through the batch's GEMM path, slower the
      // more rows it carries: one, two and four rows on each of 24 OLMoE-wide
      // experts (a row a token of its own; one token on all of them would
      // take the decode path). The VM's one thread: 22 / 13 / 8 GB/s; the
      // speed model interpolates by the rows a round gives each expert.
      stream_spec(F::q4_g64, 1), stream_spec(F::q4_g64, 2), stream_spec(F::q4_g64, 4),
      stream_spec(F::q8_row, 1), stream_spec(F::q8_row, 2), stream_spec(F::q8_row, 4),
      // The same with half the experts re-read every call: a prompt's rounds
      // at one layer run back to back, and its popular experts' records are
      // read again a round later, partly from the cache (the 2-core VM's
      // OLMoE pass ran those at 1.4-1.6x the fresh rate, docs/benchmarks.md).
      stream_spec(F::q4_g64, 1, true), stream_spec(F::q4_g64, 2, true), stream_spec(F::q4_g64, 4, true),
      stream_spec(F::q8_row, 1, true), stream_spec(F::q8_row, 2, true), stream_spec(F::q8_row, 4, true),
      // The float GEMV over narrow rows (an lm_head of a 64-wide model): its
      // cost per row beside the 2048-wide point's per byte (speed model).
      {.name = "dense_bf16_decode_narrow", .format = F::bf16, .dense = true, .weight = 0.5, .dense_rows = kNarrowRows,
       .dense_cols = kNarrowCols, .dense_matrices = 1},
      // Both again on weights warm in the caches (4 MiB each: 1024 rows of
      // 2048, 32768 of 64): the speed model's rates for a model whose
      // decode working set fits the last-level cache.
      {.name = "dense_bf16_decode_cached", .format = F::bf16, .dense = true, .weight = 0.25, .dense_rows = kCachedRows,
       .dense_matrices = 1, .cache_resident = true},
      {.name = "dense_bf16_decode_narrow_cached", .format = F::bf16, .dense = true, .weight = 0.25, .dense_rows = kNarrowRows,
       .dense_cols = kNarrowCols, .dense_matrices = 1, .cache_resident = true},
      // Both again with each thread's share kCoreCacheSpill times its core's
      // own cache: a model whose dense weights fit the last level but not the cores'.
      {.name = "dense_bf16_decode_llc", .format = F::bf16, .dense = true, .weight = 0.25, .dense_rows = kCachedRows,
       .dense_matrices = 1, .cache_resident = true, .spills_core_cache = true},
      {.name = "dense_bf16_decode_narrow_llc", .format = F::bf16, .dense = true, .weight = 0.25, .dense_rows = kNarrowRows,
       .dense_cols = kNarrowCols, .dense_matrices = 1, .cache_resident = true, .spills_core_cache = true},
      // A prompt slice's bf16 projections as the attention pass runs them
      // (kPassSlice rows through q, k and v in one call, then o): the speed
      // model's prefill term (64 rows through all four in one call ran 13-15%
      // faster than the pass's at 8 and 16 threads on the H100 box, 1.5x
      // slower at 4).
      {.name = "dense_bf16_prefill", .format = F::bf16, .prefill = true, .dense = true, .call_tokens = kPassSlice},
      // A prompt slice's quantised projections (`--dense q4_g64` / q8_row):
      // q, k, v and o over kPassSlice rows as the attention pass runs them,
      // a GEMM shape of its own (the expert points' dozens of tokens ran
      // at half its rate on the H200's 16 cores).
      {.name = "dense_q4_prefill", .format = F::q4_g64, .prefill = true, .dense = true, .weight = 0.5, .call_tokens = kPassSlice},
      {.name = "dense_q8_prefill", .format = F::q8_row, .prefill = true, .dense = true, .weight = 0.5, .call_tokens = kPassSlice},
      // A decoded token's attention at depth kDecodeAttentionDepth, its K and
      // V from RAM: one query head per KV head, and a GQA group of 8 (Qwen3's
      // 32 over 4): the speed model fits a cost per (KV head, position) and
      // one per query head through both.
      {.name = "attention_decode", .format = F::f32, .weight = 0.25, .attention = true},
      {.name = "attention_decode_grouped", .format = F::f32, .weight = 0.25, .attention = true, .attention_group = 8},
      // The grouped one over narrower heads of 64: what a (KV head, position)
      // costs beside its head_dim (the H100 box's Qwen3 shape, 4 KV heads of
      // 64, added 1.4-1.7x what halving head_dim 128's cost said from depth
      // 0 to 512).
      {.name = "attention_decode_grouped_narrow", .format = F::f32, .weight = 0.25, .attention = true, .attention_group = 8,
       .head_dim = kDecodeNarrowHeadDim},
      // A prompt's attention over a small model's few narrow heads (its cost per position pair).
      {.name = "attention_prefill_narrow", .format = F::f32, .prefill = true, .weight = 0.5, .attention = true,
       .attention_heads = kNarrowHeads, .head_dim = kNarrowHeadDim},
      // The wide calls' shapes with 64-wide experts and matrices: what a
      // routed row and a projected row cost beside their multiply-adds
      // (gathering, quantising, SwiGLU, scattering, summing; a small
      // model's prefill is mostly that).
      narrow_expert_spec(0),
      // The same after each gap of kIdleGapsMs: what the batch costs a layer
      // after its last call, its buffers aged in the caches (the speed model
      // prices a pass's narrow batches at their gap between layers).
      narrow_expert_spec(kIdleGapsMs[0]),
      narrow_expert_spec(kIdleGapsMs[1]),
      {.name = "dense_bf16_prefill_narrow", .format = F::bf16, .prefill = true, .dense = true, .weight = 0.5,
       .call_tokens = kPassSlice, .dense_rows = kNarrowExpert, .dense_cols = kNarrowExpert},
      // The narrow experts with one token each: beside the narrow point's
      // 64 tokens on the same 8 experts, what a distinct expert costs in a
      // batch apart from its routed rows (a small cap's prefill rounds run
      // a few tokens on each of their experts, hundreds of rounds a prompt).
      {.name = "expert_q4_prefill_single", .format = F::q4_g64, .prefill = true, .weight = 0.25, .call_tokens = 1,
       .expert_hidden = kNarrowExpert, .expert_width = kNarrowExpert},
      // The same token on two of them: beside the eight, what the batch's
      // call costs apart from its experts (grouping, its steps' set-up, the
      // token's quantisation), which a top-2 model's decode pays per layer
      // for 2 experts where OLMoE's pays it for 8 (the 2-core VM's 64-wide
      // layers took 4 us a call beside 1.8 an expert at 2 threads).
      {.name = "expert_q4_prefill_single_pair", .format = F::q4_g64, .prefill = true, .weight = 0.25, .call_tokens = 1,
       .call_experts = 2, .expert_hidden = kNarrowExpert, .expert_width = kNarrowExpert},
      // The expert decode batch over narrow experts: beside the OLMoE-wide
      // point, what a row costs apart from its bytes (its reduction and
      // store; the speed model fits both from the two points).
      {.name = "expert_q4_decode_narrow", .format = F::q4_g64, .weight = 0.5, .expert_width = kNarrowDecodeWidth},
      {.name = "expert_q8_decode_narrow", .format = F::q8_row, .weight = 0.5, .expert_width = kNarrowDecodeWidth},
      {.name = "greedy_sample", .format = F::f32, .weight = 0.25, .sampling = true},
      // A token's routing per MoE layer, OLMoE's 64 experts top 8 and a
      // small model's 8 top 2: the speed model fits a cost per call plus
      // one per (expert x top_k).
      {.name = "route_tokens", .format = F::f32, .weight = 0.25, .routing = true},
      {.name = "route_tokens_narrow", .format = F::f32, .weight = 0.25, .routing = true, .route_experts = 8, .route_top_k = 2},
      // Their records alone: what stays on the calling thread of a prompt's routing.
      {.name = "route_records", .format = F::f32, .weight = 0.25, .routing = true, .route_records = true},
      {.name = "route_records_narrow", .format = F::f32, .weight = 0.25, .routing = true, .route_records = true,
       .route_experts = 8, .route_top_k = 2},
      // A token's norms, RoPE, KV store and residual adds per layer, OLMoE's
      // shape and a 64-wide one: the speed model fits a cost per token and
      // layer plus one per element through both.
      {.name = "token_ops_prefill", .format = F::f32, .weight = 0.25, .head_dim = kHeadDim, .token_ops = true},
      {.name = "token_ops_prefill_narrow", .format = F::f32, .weight = 0.25, .head_dim = kNarrowHeadDim, .token_ops = true,
       .token_hidden = kNarrowExpert, .token_heads = 4}};
}

// The kernels to time: the cache-resident points only where the
// last-level cache holds twice their weights (else they would time RAM, and
// no model that fits such a cache is priced by them), said in `note`.
std::vector<KernelSpec> affordable_specs(const CpuFacts& facts, std::string& note) {
  std::vector<KernelSpec> specs = tuning_specs();
  const std::uint64_t llc = last_level_cache_bytes(facts.caches, facts.cores);
  const auto too_large = [&](const KernelSpec& spec) {
    return spec.cache_resident && 2 * WeightPool::taken_bytes(matrix_bytes(spec.format, spec.dense_rows, spec.dense_cols)) *
                                          static_cast<std::uint64_t>(spec.dense_matrices) > llc;
  };
  if (std::any_of(specs.begin(), specs.end(), too_large)) {
    note = "cache-resident points not timed: the last-level cache (" + format_bytes(llc) +
           ") holds less than twice their weights";
    std::erase_if(specs, too_large);
  }
  return specs;
}

// One round's slice of one (set, kernel): calls until `unit` x its weight
// has passed (at most 400), their median added to the round medians.
void time_slice(Work& w, double unit) {
  const auto slice_end = Clock::now() + std::chrono::duration<double>(unit * w.runner.spec().weight);
  // Warm-up after switching kernels or sets. A warm stream point's reads
  // its kept records kWarmStreamWarmups times first: the last-level cache
  // keeps a re-read record only after a few re-reads (the 2-core VM's
  // one-row calls ran at 21, 28, 32, 34 and then 36 GB/s), as a prompt's
  // popular experts are re-read round after round.
  // A prefill point's calls are long, so it warms up only in its first
  // round: that call first-touches its buffers and its threads' scratch (the
  // 2-core VM's first rounds of the AMX prefill points ran below half their
  // best and were left out, which left two rounds one).
  const KernelSpec& spec = w.runner.spec();
  if (spec.stream_kept > 0) {
    for (int call = 0; call < kWarmStreamWarmups; ++call) w.runner.run();
  } else if (!spec.prefill || spec.attention || w.round_medians.empty()) {
    w.runner.run();
  }
  std::vector<double> samples;
  do samples.push_back(w.runner.run());
  while (Clock::now() < slice_end && samples.size() < 400);
  w.round_medians.push_back(summarize(std::move(samples)).median);
}

// A runner for every (set, kernel), the team-independent ones on the first set only; the
// decode attention kernels of a head_dim share one pool of `decode_kv_bytes` of layers; the
// points that spill the cores' caches sized for each set (left out where the
// last level cannot hold them).
// A spills_core_cache point's share per thread, in core caches. Twice left
// part of it in the core's cache: on the 2-core VM the narrow pair at one
// thread ran 9.3 GB/s at 4 MiB and 8.9 at 8 MiB, where the demo model's
// 6.1 MiB lm_head ran 8.5.
constexpr std::uint64_t kCoreCacheSpill = 4;

// A spills_core_cache spec for a team of `threads`: its rows grown until
// each thread's share is kCoreCacheSpill times the core's own cache;
// nullopt where the last level would not hold twice that (or the facts have
// no such caches).
std::optional<KernelSpec> sized_for_team(const KernelSpec& spec, int threads, const CpuFacts& facts) {
  if (!spec.spills_core_cache) return spec;
  const std::uint64_t core = core_cache_bytes(facts.caches), llc = last_level_cache_bytes(facts.caches, threads);
  const std::uint64_t row = matrix_bytes(spec.format, 1, spec.dense_cols);
  if (core == 0 || row == 0) return std::nullopt;
  KernelSpec sized = spec;
  sized.dense_rows = std::max<int>(spec.dense_rows, static_cast<int>(kCoreCacheSpill * core * static_cast<std::uint64_t>(threads) / row));
  if (2 * WeightPool::taken_bytes(matrix_bytes(sized.format, sized.dense_rows, sized.dense_cols)) > llc) return std::nullopt;
  return sized;
}

Result<std::vector<Work>> make_work(const std::vector<ThreadCandidate>& sets, const std::vector<KernelSpec>& specs,
                                    cpu::CpuKernelVariant variant, const std::string& cpu_kernel, WeightPool& pool, int prefill_tokens,
                                    std::uint64_t decode_kv_bytes, const CpuFacts& facts) {
  std::vector<Work> work;
  std::map<int, std::shared_ptr<const forward::KvCache>> decode_kv;  // a pool per head_dim for the decode attention runners
  for (std::size_t i = 0; i < sets.size(); ++i)
    for (const KernelSpec& team_spec : specs) {
      if (team_spec.team_independent() && i > 0) continue;
      const std::optional<KernelSpec> sized = sized_for_team(team_spec, sets[i].pus.size(), facts);
      if (!sized) continue;
      const KernelSpec& spec = *sized;
      std::optional<EngineExpertBatch> experts;
      if (spec.experts()) {
        auto batch = EngineExpertBatch::create(spec.format, spec.expert_hidden, spec.expert_width, cpu_kernel,
                                               sets[i].pus.size(), pool.filled());
        if (!batch) return batch.error();
        experts = std::move(*batch);
      }
      std::optional<EngineProjections> projections;
      if (spec.projections()) {
        auto engine = EngineProjections::create(spec.format, spec.dense_cols, cpu_kernel, sets[i].pus.size());
        if (!engine) return engine.error();
        projections = std::move(*engine);
      }
      std::shared_ptr<const forward::KvCache> kv_pool;
      if (spec.decode_attention()) {
        std::shared_ptr<const forward::KvCache>& shared = decode_kv[spec.head_dim];
        try {
          if (!shared) shared = decode_attention_pool(decode_kv_bytes, spec.head_dim);
        } catch (const std::bad_alloc&) {
          return make_error("kernel tuning: could not allocate " + format_bytes(decode_kv_bytes) +
                            " of KV cache for the decode attention points (free memory, or pass a smaller --tuning-pool)");
        }
        kv_pool = shared;
      }
      work.push_back({i, KernelRunner(spec, sets[i], variant, pool, prefill_tokens, std::move(experts), std::move(projections),
                                      std::move(kv_pool)),
                      {}});
    }
  return work;
}

// One round: each set pinned in turn (one that cannot be is skipped from then on, saying so) and
// a slice of each of its kernels.
void time_round(std::vector<Work>& work, const std::vector<ThreadCandidate>& sets, std::vector<bool>& pinnable,
                double unit, const ProgressFn& progress, KernelTuning& tuning) {
  for (std::size_t i = 0; i < sets.size(); ++i) {
    if (!pinnable[i]) continue;
    if (Status pinned = cpu::pin_openmp_team(sets[i].pus); !pinned) {
      add_note(tuning, sets[i].name + " skipped: " + pinned.error().message);
      pinnable[i] = false;
      continue;
    }
    if (progress) progress("kernel tuning: " + sets[i].name + " (PUs " + sets[i].pus.to_list() + ")");
    for (Work& w : work) {
      if (w.set == i) time_slice(w, unit);
    }
  }
}

// After `rounds` rounds: the note to stop with, once the fewest are done, every point's rounds agree
// within kUnsteadySpread and the decode sets separate (or cannot); nothing to time another round.
Result<std::optional<std::string>> stop_note(const std::vector<Work>& work, int rounds) {
  const std::optional<std::string> more;
  if (rounds < kMinTuningRounds) return more;
  // A point with fewer undisturbed rounds than that has no spread to judge by yet.
  const bool disturbed = std::any_of(work.begin(), work.end(), [](const Work& w) {
    return !w.round_medians.empty() && undisturbed_rounds(w.round_medians).size() < static_cast<std::size_t>(kMinTuningRounds);
  });
  if (disturbed && rounds < kMaxTuningRounds) return more;
  auto points = points_of(work);
  if (!points) return points.error();
  // Rounds that disagree by more than kUnsteadySpread: every round the
  // budget was sized for, so each point's median stands on more of them
  // (the H200's first three rounds spread 40-77% on the small sets).
  if (rounds < kMaxTuningRounds && !unsteady_points_note(*points).empty()) return more;
  const SeparationResult separation = separate_sets(decode_scores(*points), rounds, kMaxTuningRounds);
  if (separation.outcome == Separation::more_rounds) return more;
  return std::optional<std::string>(std::to_string(rounds) + " rounds: " +
                                    (separation.outcome == Separation::chosen
                                         ? "the decode thread sets separated"
                                         : "the decode thread sets did not separate (" + separation.reason + ")"));
}

// The points over each one's undisturbed rounds, and the notes on what was left out or unsteady.
Status finish_tuning(KernelTuning& tuning, const std::vector<Work>& work, const std::vector<ThreadCandidate>& sets,
                     int rounds, double overrun, const ProgressFn& progress) {
  if (overrun > 0) add_note(tuning, "the last round overran the budget by " + std::to_string(overrun) + " s");
  for (const Work& w : work) {
    const std::size_t dropped = w.round_medians.size() - undisturbed_rounds(w.round_medians).size();
    if (dropped > 0)
      add_note(tuning, w.runner.spec().name + " on " + sets[w.set].name + ": " + std::to_string(dropped) + " of " +
                           std::to_string(w.round_medians.size()) + " rounds below half its best, left out as disturbed");
  }
  auto points = points_of(work);
  if (!points) return points.error();
  tuning.points = std::move(*points);
  if (const std::string unsteady = unsteady_points_note(tuning.points); !unsteady.empty()) {
    add_note(tuning, unsteady);
    if (progress) progress("kernel tuning: " + unsteady);
  }
  if (rounds < kMaxTuningRounds && tuning.note.find(" rounds: ") == std::string::npos) {
    add_note(tuning, std::to_string(rounds) + " rounds before the budget ran out");
  }
  return Ok{};
}

// Moves the deadline so that kMinTuningRounds rounds fit, each as
// long as the last (a round the budget sized short still takes each point's
// warm-up and at least one call: the 2-core VM's 86 points took 2.7 s a
// round at the shortest slices, after the pool's fill and the runners' set-up
// had spent 4.6 of its 8.75 s, so one or two rounds fitted). Only where
// allowed: a --budget the user gave bounds everything.
void stretch_for_min_rounds(const KernelTuningOptions& options, int rounds, double round_s, Clock::time_point& deadline) {
  if (!options.stretch_for_min_rounds || rounds >= kMinTuningRounds) return;
  const double needed = 1.1 * round_s * (kMinTuningRounds - rounds);
  const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
  if (left < needed) deadline += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(needed - left));
}

}  // namespace

std::vector<std::string> tuned_kernel_names(const CpuFacts& cpu, std::string* note) {
  std::string left_out;
  std::vector<std::string> names;
  for (const KernelSpec& spec : affordable_specs(cpu, left_out)) names.push_back(spec.name);
  if (note) *note = left_out;
  return names;
}

Result<KernelTuning> measure_kernel_tuning(const CpuFacts& facts, const MemoryFacts& memory,
                                           const KernelTuningOptions& options, const ProgressFn& progress) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.budget_seconds));
  // Until kMinTuningRounds rounds are done the deadline may stretch
  // (stretch_for_min_rounds); later rounds keep to the budget's.
  auto stretched = deadline;
  int rounds = 0;
  const auto left = [&] { return std::chrono::duration<double>((rounds < kMinTuningRounds ? stretched : deadline) - Clock::now()).count(); };
  if (options.prefill_tokens < 1 || options.prefill_tokens > 512)
    return make_error("kernel tuning: prefill tokens must be within 1..512, not " + std::to_string(options.prefill_tokens));
  auto variant = cpu::selected_variant();
  if (!variant) return variant.error();
  std::vector<ThreadCandidate> sets = options.candidates.empty() ? tuning_candidates(facts) : options.candidates;
  if (sets.empty()) return make_error("kernel tuning: no usable CPU to run on (usable set is empty)");

  auto pool_bytes = tuning_pool_bytes(facts, memory, options.pool_bytes);
  if (!pool_bytes) return pool_bytes.error();
  WeightPool pool(*pool_bytes);
  if (!pool.mapped()) return make_error("kernel tuning: could not map " + format_bytes(*pool_bytes) + " of test weights");
  if (progress) progress("kernel tuning: filling " + format_bytes(*pool_bytes) + " of test weights");
  pool.fill(start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kFillShare * options.budget_seconds)));

  KernelTuning tuning;
  tuning.cpu_kernel = std::string(cpu::variant_name(*variant));
  tuning.pool_bytes = pool.size();
  std::string left_out;
  const std::vector<KernelSpec> specs = affordable_specs(facts, left_out);
  if (!left_out.empty()) add_note(tuning, left_out);
  // The calling thread's kernels that do not depend on the team (routing,
  // token ops): timed once, on the first set; the others on every set.
  double units_per_set = 0, serial_units = 0;
  for (const auto& spec : specs) (spec.team_independent() ? serial_units : units_per_set) += spec.weight;
  // Keep the sets the budget can time (priority order), at least one.
  const auto affordable = static_cast<std::size_t>(
      std::max(1.0, (left() / (kMinTuningRounds * kMinUnitSeconds) - serial_units) / units_per_set));
  if (sets.size() > affordable) {
    tuning.note = "timed the first " + std::to_string(affordable) + " of " + std::to_string(sets.size()) +
                  " candidate sets (budget)";
    sets.resize(affordable);
  }
  auto work = make_work(sets, specs, *variant, tuning.cpu_kernel, pool, options.prefill_tokens,
                        decode_attention_pool_bytes(facts, pool), facts);
  if (!work) return work.error();
  std::vector<bool> pinnable(sets.size(), true);
  cpu::TeamRelease release;
  // Rounds over every (set, kernel): load from other processes and frequency
  // drift then touch every set alike instead of whichever ran at a bad moment.
  // Sized so the most rounds fit the budget (a slice never below
  // kMinUnitSeconds); stop_note says when to stop, or the budget does.
  const auto more_time = [&] { return left() > 0 || (options.stretch_for_min_rounds && rounds < kMinTuningRounds); };
  for (int round = 0; round < kMaxTuningRounds && more_time(); ++round) {
    const double unit = std::max(kMinUnitSeconds, left() / ((kMaxTuningRounds - round) *
                                                              (units_per_set * static_cast<double>(sets.size()) + serial_units)));
    const auto round_start = Clock::now();
    time_round(*work, sets, pinnable, unit, round == 0 ? progress : ProgressFn(), tuning);
    rounds = round + 1;
    stretch_for_min_rounds(options, rounds, coli::seconds_since(round_start), stretched);
    auto stop = stop_note(*work, rounds);
    if (!stop) return stop.error();
    if (*stop) {
      add_note(tuning, **stop);
      break;
    }
  }
  if (const double past = std::chrono::duration<double>(Clock::now() - deadline).count(); stretched > deadline && past > 0)
    add_note(tuning, std::to_string(kMinTuningRounds) + " rounds ran " + format_fixed(past, 1) +
                         " s past the budget (the default budget may stretch for them; --budget bounds it)");
  const double overrun = std::chrono::duration<double>(Clock::now() - std::max(stretched, deadline)).count();
  if (Status s = finish_tuning(tuning, *work, sets, rounds, overrun, progress); !s) return s.error();
  tuning.seconds = coli::seconds_since(start);
  return tuning;
}

}  // namespace coli::probe
